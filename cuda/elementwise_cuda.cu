// Elementwise kernels of the CUDA ops table: the fused accumulate (r += g
// with the threshold count), scale, count_nonfinite and mean_std.
//
// All are memory bound: 16-byte loads where the pointers allow, several in
// flight per thread, a grid sized to the device and strided over the data,
// and at most one atomic per block for a count.
#include <cub/block/block_reduce.cuh>

#include "ops_cuda_internal.cuh"

namespace pgs_cuda {
namespace {

using BlockReduceU64 = cub::BlockReduce<unsigned long long, kThreads>;
using BlockReduceF64 = cub::BlockReduce<double, kThreads>;

constexpr int kUnroll = 4;

// Adds a per-thread count into *out: one block reduction, one atomic.
__device__ __forceinline__ void block_count_add(unsigned long long mine,
                                                unsigned long long *out) {
  __shared__ typename BlockReduceU64::TempStorage tmp;
  unsigned long long total = BlockReduceU64(tmp).Sum(mine);
  if (threadIdx.x == 0 && total != 0) atomicAdd(out, total);
}

// ---- accumulate ----------------------------------------------------------

// r[i] += g[i]; with COUNT also counts |r[i]| >= thr for r[i] != 0. When r
// and g share their offset from a 16-byte boundary the body runs on float4.
template <bool COUNT>
__global__ void __launch_bounds__(kThreads)
    accumulate_kernel(float *__restrict__ r, const float *__restrict__ g,
                      size_t n, float thr, unsigned long long *count) {
  unsigned c = 0;  // per thread: n / threads stays far below 2^32
  auto one = [&](size_t i) {
    const float v = r[i] + g[i];
    r[i] = v;
    if (COUNT) c += (fabsf(v) >= thr) & (v != 0.0f);
  };
  auto four = [&](float4 a, float4 b) {
    float4 v;
    v.x = a.x + b.x;
    v.y = a.y + b.y;
    v.z = a.z + b.z;
    v.w = a.w + b.w;
    if (COUNT) {
      c += (fabsf(v.x) >= thr) & (v.x != 0.0f);
      c += (fabsf(v.y) >= thr) & (v.y != 0.0f);
      c += (fabsf(v.z) >= thr) & (v.z != 0.0f);
      c += (fabsf(v.w) >= thr) & (v.w != 0.0f);
    }
    return v;
  };
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const bool vec =
      ((reinterpret_cast<uintptr_t>(r) ^ reinterpret_cast<uintptr_t>(g)) &
       15) == 0;
  if (vec) {
    const size_t head = head_to_align16(r, n);
    if (tid < head) one(tid);
    float4 *rv = reinterpret_cast<float4 *>(r + head);
    const float4 *gv = reinterpret_cast<const float4 *>(g + head);
    const size_t nv = (n - head) / 4;
    size_t j = tid;
    for (; j + (kUnroll - 1) * stride < nv; j += kUnroll * stride) {
      float4 a[kUnroll], b[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        a[u] = rv[j + u * stride];
        b[u] = __ldcs(gv + j + u * stride);  // g is read once: stream it
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) rv[j + u * stride] = four(a[u], b[u]);
    }
    for (; j < nv; j += stride) rv[j] = four(rv[j], __ldcs(gv + j));
    const size_t tail0 = head + 4 * nv;
    if (tid < n - tail0) one(tail0 + tid);
  } else {
    size_t i = tid;
    for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
      float a[kUnroll], b[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        a[u] = r[i + u * stride];
        b[u] = g[i + u * stride];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const float v = a[u] + b[u];
        r[i + u * stride] = v;
        if (COUNT) c += (fabsf(v) >= thr) & (v != 0.0f);
      }
    }
    for (; i < n; i += stride) one(i);
  }
  if (COUNT) block_count_add(c, count);
}

// ---- scale, count_nonfinite -------------------------------------------------

__global__ void __launch_bounds__(kThreads)
    scale_kernel(float *__restrict__ x, size_t n, float s) {
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t head = head_to_align16(x, n);
  if (tid < head) x[tid] *= s;
  float4 *v = reinterpret_cast<float4 *>(x + head);
  const size_t nv = (n - head) / 4;
  for (size_t j = tid; j < nv; j += stride) {
    float4 t = v[j];
    t.x *= s;
    t.y *= s;
    t.z *= s;
    t.w *= s;
    v[j] = t;
  }
  const size_t tail0 = head + 4 * nv;
  if (tid < n - tail0) x[tail0 + tid] *= s;
}

__global__ void __launch_bounds__(kThreads)
    nonfinite_kernel(const float *__restrict__ x, size_t n,
                     unsigned long long *count) {
  unsigned c = 0;
  for_each_float<kUnroll>(x, n, [&](size_t, float v) {
    c += (__float_as_uint(v) & 0x7f800000u) == 0x7f800000u;
  });
  block_count_add(c, count);
}

// ---- mean_std ---------------------------------------------------------------

// One pass of mean_std: per-block partial sums of x (mean == nullptr) or of
// (x - mean)^2, in double. The grid depends only on n and the device, and
// the block reduction has a fixed shape, so the result is deterministic.
__global__ void __launch_bounds__(kThreads)
    moment_kernel(const float *__restrict__ x, size_t n,
                  const double *__restrict__ mean, double *partials) {
  __shared__ typename BlockReduceF64::TempStorage tmp;
  double s = 0.0;
  if (mean == nullptr) {
    for_each_float<kUnroll>(x, n, [&](size_t, float v) { s += v; });
  } else {
    const double mu = *mean;
    for_each_float<kUnroll>(x, n, [&](size_t, float v) {
      const double d = static_cast<double>(v) - mu;
      s += d * d;
    });
  }
  const double total = BlockReduceF64(tmp).Sum(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// Sums the partials in a fixed order into out[0]; with set_mean also writes
// out[1] = out[0] / n, the mean the second pass centres on.
__global__ void __launch_bounds__(kThreads)
    moment_final_kernel(const double *partials, unsigned count, size_t n,
                        bool set_mean, double *out) {
  __shared__ typename BlockReduceF64::TempStorage tmp;
  double s = 0.0;
  for (unsigned i = threadIdx.x; i < count; i += blockDim.x) s += partials[i];
  const double total = BlockReduceF64(tmp).Sum(s);
  if (threadIdx.x == 0) {
    out[0] = total;
    if (set_mean) out[1] = total / static_cast<double>(n);
  }
}

struct MinF64 {
  __device__ double operator()(double a, double b) const { return fmin(a, b); }
};

// One pass of abs_stats: per block, over a = |x| > thr, the count, sum of a,
// of a^2, of ln a and the smallest a, into partials[5 * block + j]. A fixed
// grid and block shape, so the sums are deterministic.
__global__ void __launch_bounds__(kThreads)
    abs_stats_kernel(const float *__restrict__ x, size_t n, float thr,
                     double *partials) {
  __shared__ typename BlockReduceF64::TempStorage tmp;
  double v[5] = {0.0, 0.0, 0.0, 0.0, INFINITY};
  for_each_float<kUnroll>(x, n, [&](size_t, float f) {
    const double a = fabs(static_cast<double>(f));
    if (a > static_cast<double>(thr)) {
      v[0] += 1.0;
      v[1] += a;
      v[2] += a * a;
      v[3] += log(a);
      v[4] = fmin(v[4], a);
    }
  });
  for (int j = 0; j < 4; ++j) {
    const double t = BlockReduceF64(tmp).Sum(v[j]);
    if (threadIdx.x == 0) partials[5 * blockIdx.x + j] = t;
    __syncthreads();
  }
  const double lo = BlockReduceF64(tmp).Reduce(v[4], MinF64{});
  if (threadIdx.x == 0) partials[5 * blockIdx.x + 4] = lo;
}

// The partials summed in a fixed order (and the minimum) into out[0..4].
__global__ void __launch_bounds__(kThreads)
    abs_stats_final_kernel(const double *partials, unsigned count,
                           double *out) {
  __shared__ typename BlockReduceF64::TempStorage tmp;
  for (int j = 0; j < 5; ++j) {
    double s = j == 4 ? INFINITY : 0.0;
    for (unsigned i = threadIdx.x; i < count; i += blockDim.x)
      s = j == 4 ? fmin(s, partials[5 * i + j]) : s + partials[5 * i + j];
    const double t = j == 4 ? BlockReduceF64(tmp).Reduce(s, MinF64{})
                            : BlockReduceF64(tmp).Sum(s);
    if (threadIdx.x == 0) out[j] = t;
    __syncthreads();
  }
  if (threadIdx.x == 0 && out[0] == 0.0) out[4] = 0.0;
}

}  // namespace

// ---- entry points ---------------------------------------------------------

int accumulate(const pgs_ops_t *ops, float *r, const float *g, size_t n,
               float thr, int64_t *n_ge) {
  if ((r == nullptr || g == nullptr) && n > 0) return PGS_ERR_INVALID;
  if (n == 0) {
    if (n_ge != nullptr) *n_ge = 0;
    return PGS_OK;
  }
  PGS_ENTER(ops, c);
  if (n_ge == nullptr) {
    const unsigned grid =
        grid_for(c, accumulate_kernel<false>, n / 4 + 1, kUnroll);
    accumulate_kernel<false>
        <<<grid, kThreads, 0, c->stream>>>(r, g, n, thr, nullptr);
    PGS_LAUNCHED();
    return PGS_OK;
  }
  auto *count = static_cast<unsigned long long *>(c->small.ptr);
  PGS_CU(cudaMemsetAsync(count, 0, sizeof *count, c->stream));
  const unsigned grid =
      grid_for(c, accumulate_kernel<true>, n / 4 + 1, kUnroll);
  accumulate_kernel<true>
      <<<grid, kThreads, 0, c->stream>>>(r, g, n, thr, count);
  PGS_LAUNCHED();
  void *host = nullptr;
  PGS_RETURN_IF(read_back(c, count, sizeof *count, &host));
  *n_ge = static_cast<int64_t>(*static_cast<unsigned long long *>(host));
  return PGS_OK;
}

int scale(const pgs_ops_t *ops, float *x, size_t n, float s) {
  if (x == nullptr && n > 0) return PGS_ERR_INVALID;
  if (n == 0) return PGS_OK;
  PGS_ENTER(ops, c);
  scale_kernel<<<grid_for(c, scale_kernel, n / 4 + 1, 2), kThreads, 0,
                 c->stream>>>(x, n, s);
  PGS_LAUNCHED();
  return PGS_OK;
}

int count_nonfinite(const pgs_ops_t *ops, const float *x, size_t n,
                    int64_t *count) {
  if (count == nullptr || (x == nullptr && n > 0)) return PGS_ERR_INVALID;
  if (n == 0) {
    *count = 0;
    return PGS_OK;
  }
  PGS_ENTER(ops, c);
  auto *dcount = static_cast<unsigned long long *>(c->small.ptr);
  PGS_CU(cudaMemsetAsync(dcount, 0, sizeof *dcount, c->stream));
  nonfinite_kernel<<<grid_for(c, nonfinite_kernel, n / 4 + 1, kUnroll),
                     kThreads, 0, c->stream>>>(x, n, dcount);
  PGS_LAUNCHED();
  void *host = nullptr;
  PGS_RETURN_IF(read_back(c, dcount, sizeof *dcount, &host));
  *count = static_cast<int64_t>(*static_cast<unsigned long long *>(host));
  return PGS_OK;
}

int abs_stats(const pgs_ops_t *ops, const float *x, size_t n, float thr,
              double out[5]) {
  if (out == nullptr || (x == nullptr && n > 0)) return PGS_ERR_INVALID;
  if (n == 0) {
    for (int j = 0; j < 5; ++j) out[j] = 0.0;
    return PGS_OK;
  }
  PGS_ENTER(ops, c);
  const unsigned grid = grid_for(c, abs_stats_kernel, n / 4 + 1, kUnroll);
  // small: [0..4] the result, then 5 partials per block.
  PGS_RETURN_IF(ensure_device(&c->small, (8 + 5 * grid) * sizeof(double)));
  auto *dout = static_cast<double *>(c->small.ptr);
  abs_stats_kernel<<<grid, kThreads, 0, c->stream>>>(x, n, thr, dout + 8);
  PGS_LAUNCHED();
  abs_stats_final_kernel<<<1, kThreads, 0, c->stream>>>(dout + 8, grid, dout);
  PGS_LAUNCHED();
  void *host = nullptr;
  PGS_RETURN_IF(read_back(c, dout, 5 * sizeof(double), &host));
  for (int j = 0; j < 5; ++j) out[j] = static_cast<const double *>(host)[j];
  return PGS_OK;
}

int mean_std(const pgs_ops_t *ops, const float *x, size_t n, double *mean,
             double *std) {
  if (mean == nullptr || std == nullptr || (x == nullptr && n > 0))
    return PGS_ERR_INVALID;
  if (n == 0) {
    *mean = 0.0;
    *std = 0.0;
    return PGS_OK;
  }
  PGS_ENTER(ops, c);
  const unsigned grid = grid_for(c, moment_kernel, n / 4 + 1, kUnroll);
  // small: [0] sum, [1] mean, [2] centred sum of squares, then partials.
  PGS_RETURN_IF(ensure_device(&c->small, (8 + grid) * sizeof(double)));
  auto *out = static_cast<double *>(c->small.ptr);
  double *partials = out + 8;
  moment_kernel<<<grid, kThreads, 0, c->stream>>>(x, n, nullptr, partials);
  PGS_LAUNCHED();
  moment_final_kernel<<<1, kThreads, 0, c->stream>>>(partials, grid, n, true,
                                                     out);
  PGS_LAUNCHED();
  moment_kernel<<<grid, kThreads, 0, c->stream>>>(x, n, out + 1, partials);
  PGS_LAUNCHED();
  moment_final_kernel<<<1, kThreads, 0, c->stream>>>(partials, grid, n, false,
                                                     out + 2);
  PGS_LAUNCHED();
  void *host = nullptr;
  PGS_RETURN_IF(read_back(c, out, 3 * sizeof(double), &host));
  const double *h = static_cast<const double *>(host);
  // The same expressions as the host table: mean = sum / n, and the
  // population standard deviation of the centred sum of squares.
  *mean = h[1];
  *std = sqrt(h[2] / static_cast<double>(n));
  return PGS_OK;
}

}  // namespace pgs_cuda
