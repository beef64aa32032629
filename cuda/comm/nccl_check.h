/* One way for the NCCL transports to turn NCCL errors into status codes: log
 * NCCL's message, return PGS_ERR_COMM. ncclInProgress is not an error: only
 * non-blocking communicators return it, and their callers poll. */
#ifndef PGS_CUDA_COMM_NCCL_CHECK_H
#define PGS_CUDA_COMM_NCCL_CHECK_H

#include <nccl.h>
#include <pg_sparse/status.h>
#include <pg_sparse/log.h>

#define NCCL_TRY(call)                                                         \
  do {                                                                         \
    ncclResult_t r_ = (call);                                                  \
    if (r_ != ncclSuccess && r_ != ncclInProgress) {                           \
      pgs_log(PGS_LOG_ERROR, "nccl", "%s: %s", #call, ncclGetErrorString(r_)); \
      return PGS_ERR_COMM;                                                     \
    }                                                                          \
  } while (0)

#endif /* PGS_CUDA_COMM_NCCL_CHECK_H */
