/* One way for the device transports to turn CUDA errors into status codes:
 * log the runtime's message, return PGS_ERR_DEVICE. */
#ifndef PGS_CUDA_COMM_CHECK_H
#define PGS_CUDA_COMM_CHECK_H

#include <cuda_runtime.h>
#include <pg_sparse/status.h>
#include <pg_sparse/log.h>

#define CUDA_TRY(call)                                                         \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess) {                                                   \
      pgs_log(PGS_LOG_ERROR, "cuda", "%s: %s", #call, cudaGetErrorString(e_)); \
      return PGS_ERR_DEVICE;                                                   \
    }                                                                          \
  } while (0)

/* Makes @p device current for a call that may come from any thread (the
 * shim's progress thread, or a caller on another device) and puts the
 * caller's back afterwards. */
typedef struct pgs_dev_scope {
  int saved;
  int device;
} pgs_dev_scope_t;

static inline int pgs_dev_enter(int device, pgs_dev_scope_t *s) {
  s->device = device;
  CUDA_TRY(cudaGetDevice(&s->saved));
  if (s->saved != device) CUDA_TRY(cudaSetDevice(device));
  return PGS_OK;
}

static inline void pgs_dev_leave(const pgs_dev_scope_t *s) {
  if (s->saved != s->device) (void)cudaSetDevice(s->saved);
}

#endif /* PGS_CUDA_COMM_CHECK_H */
