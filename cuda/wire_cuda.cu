// The CUDA wire codec: fp32 values to and from the 16-bit type they travel
// in (round to nearest even, saturating at the largest finite value), with
// the rounding error handed back so the caller can keep it. Matches the
// host codec (pg_sparse/src/ops/cpu_wire.c) bit for bit.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ops_cuda_internal.cuh"

namespace pgs_cuda {
namespace {

constexpr float kF16Max = 65504.0f;
constexpr float kBf16Max = 3.38953139e38f;

__device__ __forceinline__ float saturate(float x, float max) {
  return x > max ? max : (x < -max ? -max : x);  // NaN passes through
}

template <bool BF16>
__global__ void __launch_bounds__(kThreads)
    to_wire_kernel(const float *x, size_t m, unsigned short *wire, float *err) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       j < m; j += stride) {
    const float v = x[j];
    float back;
    if (BF16) {
      const __nv_bfloat16 h = __float2bfloat16_rn(saturate(v, kBf16Max));
      wire[j] = __bfloat16_as_ushort(h);
      back = __bfloat162float(h);
    } else {
      const __half h = __float2half_rn(saturate(v, kF16Max));
      wire[j] = __half_as_ushort(h);
      back = __half2float(h);
    }
    if (err != nullptr) err[j] = v - back;
  }
}

template <bool BF16>
__global__ void __launch_bounds__(kThreads)
    from_wire_kernel(const unsigned short *wire, size_t m, float *x) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       j < m; j += stride) {
    x[j] = BF16 ? __bfloat162float(__ushort_as_bfloat16(wire[j]))
                : __half2float(__ushort_as_half(wire[j]));
  }
}

int check_args(const void *x, size_t m, pgs_dtype_t dtype, const void *wire) {
  if (m > 0 && (x == nullptr || wire == nullptr)) return PGS_ERR_INVALID;
  if (dtype != PGS_FLOAT32 && dtype != PGS_FLOAT16 && dtype != PGS_BFLOAT16)
    return PGS_ERR_UNSUPPORTED;
  return PGS_OK;
}

}  // namespace

int to_wire(const pgs_ops_t *ops, const float *x, size_t m, pgs_dtype_t dtype,
            void *wire, float *err) {
  PGS_RETURN_IF(check_args(x, m, dtype, wire));
  if (m == 0) return PGS_OK;
  PGS_ENTER(ops, c);
  if (dtype == PGS_FLOAT32) {
    if (wire != x)
      PGS_CU(cudaMemcpyAsync(wire, x, m * sizeof(float),
                             cudaMemcpyDeviceToDevice, c->stream));
    if (err != nullptr)
      PGS_CU(cudaMemsetAsync(err, 0, m * sizeof(float), c->stream));
    return PGS_OK;
  }
  auto *w = static_cast<unsigned short *>(wire);
  if (dtype == PGS_BFLOAT16)
    to_wire_kernel<true>
        <<<grid_for(c, to_wire_kernel<true>, m, 4), kThreads, 0, c->stream>>>(
            x, m, w, err);
  else
    to_wire_kernel<false>
        <<<grid_for(c, to_wire_kernel<false>, m, 4), kThreads, 0, c->stream>>>(
            x, m, w, err);
  PGS_LAUNCHED();
  return PGS_OK;
}

int from_wire(const pgs_ops_t *ops, const void *wire, size_t m,
              pgs_dtype_t dtype, float *x) {
  PGS_RETURN_IF(check_args(x, m, dtype, wire));
  if (m == 0) return PGS_OK;
  PGS_ENTER(ops, c);
  if (dtype == PGS_FLOAT32) {
    if (wire != x)
      PGS_CU(cudaMemcpyAsync(x, wire, m * sizeof(float),
                             cudaMemcpyDeviceToDevice, c->stream));
    return PGS_OK;
  }
  const auto *w = static_cast<const unsigned short *>(wire);
  if (dtype == PGS_BFLOAT16)
    from_wire_kernel<true>
        <<<grid_for(c, from_wire_kernel<true>, m, 4), kThreads, 0, c->stream>>>(
            w, m, x);
  else
    from_wire_kernel<false><<<grid_for(c, from_wire_kernel<false>, m, 4),
                              kThreads, 0, c->stream>>>(w, m, x);
  PGS_LAUNCHED();
  return PGS_OK;
}

}  // namespace pgs_cuda
