/* A one-direction NCCL pair for the user's point-to-point messages (see
 * nccl_pair.h for why it is non-blocking and one-way). */
#include "nccl_pair.h"

#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "nccl_check.h"

struct pgs_nccl_pair {
  ncclComm_t comm;
  cudaStream_t stream;
  int sender; /* 1: rank 0 of the pair, sends; 0: rank 1, receives */
};

int pgs_nccl_pair_create(const void *id, int sender, pgs_nccl_pair_t **out) {
  if (id == NULL || out == NULL) return PGS_ERR_INVALID;
  *out = NULL;
  pgs_nccl_pair_t *p = calloc(1, sizeof(*p));
  if (p == NULL) return PGS_ERR_NO_MEMORY;
  p->sender = sender != 0;
  if (cudaStreamCreateWithFlags(&p->stream, cudaStreamNonBlocking) !=
      cudaSuccess) {
    free(p);
    return PGS_ERR_DEVICE;
  }
  ncclUniqueId uid;
  memcpy(&uid, id, sizeof(uid));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r =
      ncclCommInitRankConfig(&p->comm, 2, uid, p->sender ? 0 : 1, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    pgs_log(PGS_LOG_ERROR, "nccl", "ncclCommInitRankConfig: %s",
            ncclGetErrorString(r));
    if (p->comm != NULL) ncclCommAbort(p->comm);
    cudaStreamDestroy(p->stream);
    free(p);
    return PGS_ERR_COMM;
  }
  *out = p;
  return PGS_OK;
}

int pgs_nccl_pair_test(pgs_nccl_pair_t *p, int *busy) {
  if (p == NULL || busy == NULL) return PGS_ERR_INVALID;
  ncclResult_t state = ncclSuccess;
  NCCL_TRY(ncclCommGetAsyncError(p->comm, &state));
  *busy = state == ncclInProgress;
  if (state != ncclSuccess && state != ncclInProgress) {
    pgs_log(PGS_LOG_ERROR, "nccl", "point-to-point NCCL communicator: %s",
            ncclGetErrorString(state));
    return PGS_ERR_COMM;
  }
  return PGS_OK;
}

int pgs_nccl_pair_post(pgs_nccl_pair_t *p, void *buf, size_t bytes,
                       cudaEvent_t ready) {
  if (p == NULL || (buf == NULL && bytes > 0)) return PGS_ERR_INVALID;
  CUDA_TRY(cudaStreamWaitEvent(p->stream, ready, 0));
  if (p->sender)
    NCCL_TRY(ncclSend(buf, bytes, ncclUint8, 1, p->comm, p->stream));
  else
    NCCL_TRY(ncclRecv(buf, bytes, ncclUint8, 0, p->comm, p->stream));
  return PGS_OK;
}

cudaStream_t pgs_nccl_pair_stream(const pgs_nccl_pair_t *p) {
  return p != NULL ? p->stream : NULL;
}

void pgs_nccl_pair_destroy(pgs_nccl_pair_t *p) {
  if (p == NULL) return;
  if (p->comm != NULL) ncclCommAbort(p->comm);
  if (p->stream != NULL) cudaStreamDestroy(p->stream);
  free(p);
}
