/* The NCCL transport.
 *
 * Everything is ordered on one CUDA stream shared with the ops table, so an
 * algorithm's kernels and messages interleave correctly without host
 * synchronisation. Exchange batches go on side streams (one per slot) that
 * wait for the main stream at start; exchange_wait makes the main stream wait
 * for the slot, so reducing one batch overlaps receiving the next. Only the
 * control plane (small host arrays) synchronises with the host. */
#include "pg_sparse/comm_nccl.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>

#include "cuda_check.h"
#include "nccl_check.h"
#include <stdlib.h>
#include <string.h>

typedef struct nccl_comm {
  ncclComm_t comm;
  int rank, size;
  cudaStream_t main;
  cudaStream_t side[PGS_COMM_SLOTS];
  cudaEvent_t ready, done[PGS_COMM_SLOTS];
  int idle[PGS_COMM_SLOTS]; /* the slot's last batch had no messages */
  void *dev_scratch;        /* control-plane staging on the device */
  void *host_scratch;       /* pinned, same size */
  size_t scratch_bytes;
  /* Set by the abort entry (another thread); the comm is then freed. */
  atomic_int aborted;
} nccl_comm_t;

static ncclDataType_t nccl_type(pgs_dtype_t t) {
  switch (t) {
    case PGS_INT64: return ncclInt64;
    case PGS_FLOAT64: return ncclFloat64;
    case PGS_FLOAT16: return ncclFloat16;
    case PGS_BFLOAT16: return ncclBfloat16;
    default: return ncclFloat32;
  }
}

static ncclRedOp_t nccl_op(pgs_redop_t op) {
  switch (op) {
    case PGS_MAX: return ncclMax;
    case PGS_MIN: return ncclMin;
    default: return ncclSum;
  }
}

static int exchange_start(void *impl, const pgs_msg_t *sends, int ns,
                          const pgs_msg_t *recvs, int nr, int slot) {
  nccl_comm_t *c = impl;
  /* No messages (one rank, or no picks for any peer): nothing to order, so
   * no events either; they cost host time on the step's path. */
  c->idle[slot] = ns == 0 && nr == 0;
  if (c->idle[slot]) return PGS_OK;
  /* The side stream must see everything queued so far (packed blocks). */
  CUDA_TRY(cudaEventRecord(c->ready, c->main));
  CUDA_TRY(cudaStreamWaitEvent(c->side[slot], c->ready, 0));
  NCCL_TRY(ncclGroupStart());
  for (int i = 0; i < nr; ++i)
    NCCL_TRY(ncclRecv(recvs[i].buf, recvs[i].bytes, ncclUint8, recvs[i].peer,
                      c->comm, c->side[slot]));
  for (int i = 0; i < ns; ++i)
    NCCL_TRY(ncclSend(sends[i].buf, sends[i].bytes, ncclUint8, sends[i].peer,
                      c->comm, c->side[slot]));
  NCCL_TRY(ncclGroupEnd());
  CUDA_TRY(cudaEventRecord(c->done[slot], c->side[slot]));
  return PGS_OK;
}

static int exchange_wait(void *impl, int slot) {
  nccl_comm_t *c = impl;
  if (c->idle[slot]) return PGS_OK;
  CUDA_TRY(cudaStreamWaitEvent(c->main, c->done[slot], 0));
  return PGS_OK;
}

/* NCCL has no allgatherv: one broadcast per root, grouped. */
static int allgatherv(void *impl, const void *send, size_t send_bytes,
                      void *recv, const size_t *recv_bytes,
                      const size_t *displs) {
  nccl_comm_t *c = impl;
  char *dst = recv;
  NCCL_TRY(ncclGroupStart());
  for (int r = 0; r < c->size; ++r) {
    if (recv_bytes[r] == 0) continue;
    const void *src = r == c->rank ? send : dst + displs[r];
    NCCL_TRY(ncclBroadcast(src, dst + displs[r],
                           r == c->rank ? send_bytes : recv_bytes[r], ncclUint8,
                           r, c->comm, c->main));
  }
  NCCL_TRY(ncclGroupEnd());
  return PGS_OK;
}

static int allreduce(void *impl, void *buf, size_t count, pgs_dtype_t dtype,
                     pgs_redop_t op) {
  nccl_comm_t *c = impl;
  if (count == 0) return PGS_OK;
  NCCL_TRY(ncclAllReduce(buf, buf, count, nccl_type(dtype), nccl_op(op),
                         c->comm, c->main));
  return PGS_OK;
}

static int bcast(void *impl, void *buf, size_t bytes, int root) {
  nccl_comm_t *c = impl;
  if (bytes == 0) return PGS_OK;
  NCCL_TRY(ncclBroadcast(buf, buf, bytes, ncclUint8, root, c->comm, c->main));
  return PGS_OK;
}

/* Control plane: stage host arrays through the scratch buffers. */
static int stage_in(nccl_comm_t *c, const void *host, size_t bytes) {
  if (bytes > c->scratch_bytes) return PGS_ERR_UNSUPPORTED;
  memcpy(c->host_scratch, host, bytes);
  CUDA_TRY(cudaMemcpyAsync(c->dev_scratch, c->host_scratch, bytes,
                           cudaMemcpyHostToDevice, c->main));
  return PGS_OK;
}

static int stage_out(nccl_comm_t *c, void *host, const void *dev,
                     size_t bytes) {
  CUDA_TRY(cudaMemcpyAsync(c->host_scratch, dev, bytes, cudaMemcpyDeviceToHost,
                           c->main));
  /* The host waits polling, so an abort from another thread ends a wait
   * for peers that never come (ncclCommAbort also stops the kernels). */
  cudaError_t e;
  while ((e = cudaStreamQuery(c->main)) == cudaErrorNotReady) {
    if (atomic_load(&c->aborted)) return PGS_ERR_ABORTED;
    sched_yield();
  }
  if (atomic_load(&c->aborted)) return PGS_ERR_ABORTED;
  CUDA_TRY(e);
  memcpy(host, c->host_scratch, bytes);
  return PGS_OK;
}

static int staged_allreduce(nccl_comm_t *c, void *buf, size_t count,
                            pgs_dtype_t dtype, pgs_redop_t op) {
  size_t bytes = count * pgs_dtype_size(dtype);
  if (count == 0) return PGS_OK;
  int st = stage_in(c, buf, bytes);
  if (st != PGS_OK) return st;
  NCCL_TRY(ncclAllReduce(c->dev_scratch, c->dev_scratch, count,
                         nccl_type(dtype), nccl_op(op), c->comm, c->main));
  return stage_out(c, buf, c->dev_scratch, bytes);
}

/* A world of one: the control plane's answers are the rank's own arrays,
 * given on the host without staging them through the device and waiting
 * for the stream (about ten runtime calls and a wait per collective, two or
 * more collectives a sparse call). The barrier still waits for the stream,
 * as NCCL's does. */
static int allreduce_host(void *impl, void *buf, size_t count,
                          pgs_dtype_t dtype, pgs_redop_t op) {
  nccl_comm_t *c = impl;
  if (c->size == 1) return PGS_OK; /* the sum, max or min of one */
  return staged_allreduce(c, buf, count, dtype, op);
}

static int alltoall_host(void *impl, const int64_t *send, int64_t *recv) {
  nccl_comm_t *c = impl;
  if (c->size == 1) {
    recv[0] = send[0];
    return PGS_OK;
  }
  size_t half = (size_t)c->size * sizeof(int64_t);
  int st = stage_in(c, send, half);
  if (st != PGS_OK) return st;
  char *in = c->dev_scratch, *out = in + half;
  NCCL_TRY(ncclGroupStart());
  for (int r = 0; r < c->size; ++r) {
    NCCL_TRY(ncclSend(in + r * 8, 8, ncclUint8, r, c->comm, c->main));
    NCCL_TRY(ncclRecv(out + r * 8, 8, ncclUint8, r, c->comm, c->main));
  }
  NCCL_TRY(ncclGroupEnd());
  return stage_out(c, recv, out, half);
}

static int allgather_host(void *impl, const int64_t *send, size_t count,
                          int64_t *recv) {
  nccl_comm_t *c = impl;
  size_t mine = count * sizeof(int64_t), all = mine * (size_t)c->size;
  if (count == 0) return PGS_OK;
  if (c->size == 1) {
    memmove(recv, send, mine);
    return PGS_OK;
  }
  if (mine + all > c->scratch_bytes) return PGS_ERR_UNSUPPORTED;
  int st = stage_in(c, send, mine);
  if (st != PGS_OK) return st;
  char *out = (char *)c->dev_scratch + mine;
  NCCL_TRY(
      ncclAllGather(c->dev_scratch, out, mine, ncclUint8, c->comm, c->main));
  return stage_out(c, recv, out, all);
}

static int barrier(void *impl) {
  int64_t one = 1;
  return staged_allreduce(impl, &one, 1, PGS_INT64, PGS_SUM);
}

static int abort_comm(void *impl) {
  nccl_comm_t *c = impl;
  if (atomic_exchange(&c->aborted, 1)) return PGS_OK;
  /* Safe from another thread while a call waits (torch's NCCL watchdog
   * does the same); the comm's resources are gone afterwards. */
  NCCL_TRY(ncclCommAbort(c->comm));
  return PGS_OK;
}

static void destroy(void *impl) {
  nccl_comm_t *c = impl;
  if (c == NULL) return;
  if (c->comm != NULL && !atomic_load(&c->aborted)) ncclCommDestroy(c->comm);
  for (int s = 0; s < PGS_COMM_SLOTS; ++s) {
    if (c->side[s] != NULL) cudaStreamDestroy(c->side[s]);
    if (c->done[s] != NULL) cudaEventDestroy(c->done[s]);
  }
  if (c->ready != NULL) cudaEventDestroy(c->ready);
  if (c->dev_scratch != NULL) cudaFree(c->dev_scratch);
  if (c->host_scratch != NULL) cudaFreeHost(c->host_scratch);
  free(c);
}

static const pgs_comm_vtable_t nccl_vtable = {
    .exchange_start = exchange_start,
    .exchange_wait = exchange_wait,
    .allgatherv = allgatherv,
    .allreduce = allreduce,
    .bcast = bcast,
    .allreduce_host = allreduce_host,
    .alltoall_host = alltoall_host,
    .allgather_host = allgather_host,
    .barrier = barrier,
    .destroy = destroy,
    .abort = abort_comm,
};

int pgs_nccl_make_id(void *id_out) {
  if (id_out == NULL) return PGS_ERR_INVALID;
  ncclUniqueId id;
  NCCL_TRY(ncclGetUniqueId(&id));
  memcpy(id_out, &id, sizeof(id));
  return PGS_OK;
}

/* Streams, events and scratch: everything but the communicator. */
static int init_resources(nccl_comm_t *c) {
  for (int s = 0; s < PGS_COMM_SLOTS; ++s) {
    CUDA_TRY(cudaStreamCreateWithFlags(&c->side[s], cudaStreamNonBlocking));
    CUDA_TRY(cudaEventCreateWithFlags(&c->done[s], cudaEventDisableTiming));
  }
  CUDA_TRY(cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming));
  /* Room for the largest control call: a histogram (256 int64), or the
   * alltoall / allgather of a few int64 per rank, in and out. */
  c->scratch_bytes = 64 * 1024 + 64 * (size_t)c->size * sizeof(int64_t);
  CUDA_TRY(cudaMalloc(&c->dev_scratch, c->scratch_bytes));
  CUDA_TRY(cudaMallocHost(&c->host_scratch, c->scratch_bytes));
  return PGS_OK;
}

int pgs_comm_nccl_create(const void *id, int rank, int size,
                         cudaStream_t stream, pgs_comm_t **out) {
  if (id == NULL || out == NULL || size < 1 || rank < 0 || rank >= size)
    return PGS_ERR_INVALID;
  *out = NULL;
  nccl_comm_t *c = calloc(1, sizeof(*c));
  if (c == NULL) return PGS_ERR_NO_MEMORY;
  c->rank = rank;
  c->size = size;
  c->main = stream;
  int st = init_resources(c);
  if (st == PGS_OK) {
    ncclUniqueId uid;
    memcpy(&uid, id, sizeof(uid));
    ncclResult_t r = ncclCommInitRank(&c->comm, size, uid, rank);
    if (r != ncclSuccess) {
      pgs_log(PGS_LOG_ERROR, "nccl", "ncclCommInitRank: %s",
              ncclGetErrorString(r));
      c->comm = NULL;
      st = PGS_ERR_COMM;
    }
  }
  if (st != PGS_OK) {
    destroy(c);
    return st;
  }
  /* pgs_comm_create owns c from here, also on failure. */
  return pgs_comm_create(&nccl_vtable, c, rank, size, PGS_MEM_DEVICE, out);
}
