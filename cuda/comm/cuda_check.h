/* One way for the device transports to turn CUDA errors into status codes:
 * log the runtime's message, return PGS_ERR_DEVICE. */
#ifndef PGS_CUDA_COMM_CHECK_H
#define PGS_CUDA_COMM_CHECK_H

#include <cuda_runtime.h>
#include <pg_sparse/status.h>
#include <stdio.h>

#define CUDA_TRY(call)                                                       \
  do {                                                                       \
    cudaError_t e_ = (call);                                                 \
    if (e_ != cudaSuccess) {                                                 \
      fprintf(stderr, "pg_sparse: %s: %s\n", #call, cudaGetErrorString(e_)); \
      return PGS_ERR_DEVICE;                                                 \
    }                                                                        \
  } while (0)

#endif /* PGS_CUDA_COMM_CHECK_H */
