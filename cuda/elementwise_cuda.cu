// Elementwise kernels of the CUDA ops table: the fused accumulate (r += g
// with the threshold count), scale, count_nonfinite, mean_std, abs_stats,
// and accumulate_stats (the add with both statistics in its one pass).
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

// mean_std in one pass of x (two passes cost 2.0 reads of x at 100M on an
// H200). A thread takes its values in chunks of the float4 loads it holds
// (16, or 4, or 1 at the ends), centres each chunk on the chunk's own mean
// in registers (the two-pass formula, exact as the host's, no E[x^2] -
// E[x]^2 cancellation), and merges chunks, threads and blocks with Chan et
// al.'s pairwise update. Fixed grid and block shape: deterministic.
struct Moments {
  double n, mean, m2;  // count, mean, centred sum of squares
};

struct MergeMoments {
  __device__ __forceinline__ Moments operator()(const Moments &a,
                                                const Moments &b) const {
    if (b.n == 0.0) return a;
    if (a.n == 0.0) return b;
    const double n = a.n + b.n, d = b.mean - a.mean;
    return {n, a.mean + d * (b.n / n), a.m2 + b.m2 + d * d * (a.n * b.n / n)};
  }
};

// The moments of @p k values held in registers.
template <int K>
__device__ __forceinline__ Moments chunk_moments(const float (&v)[K]) {
  double s = 0.0;
#pragma unroll
  for (int i = 0; i < K; ++i) s += static_cast<double>(v[i]);
  const double mean = s / K;
  double q = 0.0;
#pragma unroll
  for (int i = 0; i < K; ++i) {
    const double d = static_cast<double>(v[i]) - mean;
    q += d * d;
  }
  return {static_cast<double>(K), mean, q};
}

__device__ __forceinline__ Moments one_value(float v) {
  return {1.0, static_cast<double>(v), 0.0};
}

using BlockReduceMoments = cub::BlockReduce<Moments, kThreads>;

__global__ void __launch_bounds__(kThreads)
    moments_kernel(const float *__restrict__ x, size_t n, Moments *partials) {
  __shared__ typename BlockReduceMoments::TempStorage tmp;
  const MergeMoments merge;
  Moments acc{0.0, 0.0, 0.0};
  walk_floats<kUnroll>(
      x, n, [&](size_t, float f) { acc = merge(acc, one_value(f)); },
      [&](const auto &t, const auto &) {
        // The U float4s as one chunk of 4U values, centred in registers.
        constexpr int kU = sizeof(t) / sizeof(t[0]);
        float c[4 * kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          c[4 * u] = t[u].x;
          c[4 * u + 1] = t[u].y;
          c[4 * u + 2] = t[u].z;
          c[4 * u + 3] = t[u].w;
        }
        acc = merge(acc, chunk_moments(c));
      });
  const Moments total = BlockReduceMoments(tmp).Reduce(acc, merge);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// Merges the partials in a fixed order into *out.
__global__ void __launch_bounds__(kThreads)
    moments_final_kernel(const Moments *partials, unsigned count,
                         Moments *out) {
  __shared__ typename BlockReduceMoments::TempStorage tmp;
  const MergeMoments merge;
  Moments acc{0.0, 0.0, 0.0};
  for (unsigned i = threadIdx.x; i < count; i += blockDim.x)
    acc = merge(acc, partials[i]);
  const Moments total = BlockReduceMoments(tmp).Reduce(acc, merge);
  if (threadIdx.x == 0) *out = total;
}

struct MinF64 {
  __device__ double operator()(double a, double b) const { return fmin(a, b); }
};

// The sum of ln a over a thread's elements without a double log per
// element (the FP64 unit made that pass compute-bound: 4.3 reads of x at
// 100M on an H200): a = m 2^e exactly (frexpf), the mantissas m in
// [0.5, 1) multiply into a double renormalised at most every 16 factors
// (>= 2^-16, no underflow), the exponents add up as integers, and one log per
// thread gives ln(prod m) + (sum e) ln 2. Each product rounds by 2^-53
// relative, so a thread's sum is off by about (its count) x 1e-16 in absolute
// terms, far inside the 1e-9 the host comparison allows.
struct LogSum {
  double prod = 1.0;
  long long exps = 0;
  // One factor; the caller renormalises after at most 16 of them (once per
  // chunk of at most 16 values), without a count per value.
  __device__ __forceinline__ void add(float a) {
    int e = 0;
    prod *= static_cast<double>(frexpf(a, &e));
    exps += e;
  }
  __device__ __forceinline__ void renorm() {
    int pe = 0;
    prod = frexp(prod, &pe);
    exps += pe;
  }
  __device__ __forceinline__ double value() const {
    return log(prod) + static_cast<double>(exps) * 0.69314718055994530942;
  }
};

// One thread's abs_stats over a = |x| > thr: the count, sums of a, a^2 and
// (LogSum) ln a, the smallest a. The pass was issue-bound (Nsight Compute
// on an H200 at 100M: 73% issue slots busy, DRAM 34%, 2.1 reads of x), so
// the count is 32-bit (n / threads stays far below 2^32), the minimum is
// taken in float (exact: a is a float) and the log sum renormalises once
// per chunk of 16 values, not after a count per value.
struct AbsAcc {
  unsigned count = 0;
  double sum = 0.0, sum2 = 0.0;
  float lo = INFINITY;
  LogSum logs;
  __device__ __forceinline__ void take(float f, float thr) {
    const float af = fabsf(f);
    if (af > thr) {  // as (double)|f| > (double)thr: both exact in double
      const double a = af;
      ++count;
      sum += a;
      sum2 += a * a;
      logs.add(af);
      lo = fminf(lo, af);
    }
  }
};

// One pass of abs_stats: per block, over a = |x| > thr, the count, sum of a,
// of a^2, of ln a and the smallest a, into partials[5 * block + j]. A fixed
// grid and block shape, so the sums are deterministic.
__global__ void __launch_bounds__(kThreads)
    abs_stats_kernel(const float *__restrict__ x, size_t n, float thr,
                     double *partials) {
  __shared__ typename BlockReduceF64::TempStorage tmp;
  AbsAcc acc;
  walk_floats<kUnroll>(
      x, n,
      [&](size_t, float f) {
        acc.take(f, thr);
        acc.logs.renorm();
      },
      [&](const auto &t, const auto &) {
        constexpr int kU = sizeof(t) / sizeof(t[0]);  // at most 16 values
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          acc.take(t[u].x, thr);
          acc.take(t[u].y, thr);
          acc.take(t[u].z, thr);
          acc.take(t[u].w, thr);
        }
        acc.logs.renorm();
      });
  const double v[5] = {static_cast<double>(acc.count), acc.sum, acc.sum2,
                       acc.logs.value(), static_cast<double>(acc.lo)};
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

// ---- accumulate_stats: the add with a first guess's statistics --------

// What one thread, block or grid has of accumulate_stats: the moments of
// the sums (as mean_std), abs_stats at 0 over them (count, sums of a, a^2
// and ln a, smallest a) and the rejected sums.
struct AddStats {
  Moments m;
  double count, sum, sum2, slog, lo, bad;
};

struct MergeAddStats {
  __device__ __forceinline__ AddStats operator()(const AddStats &a,
                                                 const AddStats &b) const {
    return {MergeMoments{}(a.m, b.m),
            a.count + b.count,
            a.sum + b.sum,
            a.sum2 + b.sum2,
            a.slog + b.slog,
            fmin(a.lo, b.lo),
            a.bad + b.bad};
  }
};

using BlockReduceAddStats = cub::BlockReduce<AddStats, kThreads>;

// A thread's running statistics of the sums it wrote: their moments, and
// abs_stats at 0 of them (AbsAcc; the log sum renormalised after each
// chunk, at most 16 values).
struct AddAcc {
  Moments m{0.0, 0.0, 0.0};
  unsigned long long bad = 0;
  AbsAcc abs;
  // r[i] + g[i] (or r[i] where that is not finite), taken.
  __device__ __forceinline__ float add(float r, float g) {
    const float v = add_or_keep(r, g, bad);
    abs.take(v, 0.0f);  // abs_stats' a > thr at thr = 0
    return v;
  }
  // The U float4 sums of r[u] + g[u], their moments as one chunk of 4U
  // values centred in registers (one merge, as moments_kernel).
  template <int U>
  __device__ __forceinline__ void add4(const float4 (&r)[U],
                                       const float4 (&g)[U], float4 (&v)[U]) {
    float c[4 * U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      v[u] = make_float4(add(r[u].x, g[u].x), add(r[u].y, g[u].y),
                         add(r[u].z, g[u].z), add(r[u].w, g[u].w));
      c[4 * u] = v[u].x;
      c[4 * u + 1] = v[u].y;
      c[4 * u + 2] = v[u].z;
      c[4 * u + 3] = v[u].w;
    }
    m = MergeMoments{}(m, chunk_moments(c));
    abs.logs.renorm();
  }
  __device__ __forceinline__ float add1(float r, float g) {
    const float v = add(r, g);
    m = MergeMoments{}(m, one_value(v));
    abs.logs.renorm();
    return v;
  }
  __device__ __forceinline__ AddStats total() const {
    return {m,
            static_cast<double>(abs.count),
            abs.sum,
            abs.sum2,
            abs.logs.value(),
            static_cast<double>(abs.lo),
            static_cast<double>(bad)};
  }
};

// The largest |v| of the 32 sums a group of 8 lanes holds (a float4 each),
// stored by the group's first lane as gmax[group] (@p j its float4 index,
// a multiple of 8 there). Every lane of the warp takes part.
__device__ __forceinline__ void group_max(float4 v, size_t j, bool whole,
                                          float *__restrict__ gmax) {
  float m = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
  m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
  m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
  m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 4));
  if (whole && (threadIdx.x & 7) == 0) gmax[j / 8] = m;
}

// accumulate_stats' pass, each block's statistics into partials[block]:
// the add as accumulate_kernel walks it (float4 where r and g share their
// offset from a 16-byte boundary, kUnroll loads in flight, g streamed). A
// fixed grid and block shape, so the sums are deterministic. Where @p gmax
// is not null and r and g are 16-byte aligned, also each group of 32 sums'
// largest |v| (groups [0, n / 32); the tail's partial group is not
// written): a later compaction reads x only in groups that can hold a pick.
// The loops are warp-uniform (a warp's last lane decides), so every lane
// takes part in group_max's shuffles.
__global__ void __launch_bounds__(kThreads)
    add_stats_kernel(float *__restrict__ r, const float *__restrict__ g,
                     size_t n, AddStats *partials, float *__restrict__ gmax) {
  __shared__ typename BlockReduceAddStats::TempStorage tmp;
  AddAcc acc;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t last_lane = tid | 31;  // the warp's last lane's tid
  const bool vec =
      ((reinterpret_cast<uintptr_t>(r) ^ reinterpret_cast<uintptr_t>(g)) &
       15) == 0;
  size_t head = n, tail0 = n;  // the scalar ends (all of it without vec)
  if (vec) {
    head = head_to_align16(r, n);
    float *gm = head == 0 ? gmax : nullptr;
    float4 *rv = reinterpret_cast<float4 *>(r + head);
    const float4 *gv = reinterpret_cast<const float4 *>(g + head);
    const size_t nv = (n - head) / 4;
    size_t j = tid, jl = last_lane;
    for (; jl + (kUnroll - 1) * stride < nv;
         j += kUnroll * stride, jl += kUnroll * stride) {
      float4 a[kUnroll], b[kUnroll], v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        a[u] = rv[j + u * stride];
        b[u] = __ldcs(gv + j + u * stride);
      }
      acc.add4(a, b, v);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) rv[j + u * stride] = v[u];
      if (gm != nullptr) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          group_max(v[u], j + u * stride, true, gm);
      }
    }
    for (; jl - 31 < nv; j += stride, jl += stride) {
      float4 v[1] = {make_float4(0.0f, 0.0f, 0.0f, 0.0f)};
      if (j < nv) {
        const float4 a[1] = {rv[j]}, b[1] = {__ldcs(gv + j)};
        acc.add4(a, b, v);
        rv[j] = v[0];
      }
      if (gm != nullptr) group_max(v[0], j, j / 8 < nv / 8, gm);
    }
    tail0 = head + 4 * nv;
  }
  const size_t scalar_end = vec ? head : n;
  for (size_t i = tid; i < scalar_end; i += stride) r[i] = acc.add1(r[i], g[i]);
  for (size_t i = tail0 + tid; i < n; i += stride) r[i] = acc.add1(r[i], g[i]);
  const AddStats t =
      BlockReduceAddStats(tmp).Reduce(acc.total(), MergeAddStats{});
  if (threadIdx.x == 0) partials[blockIdx.x] = t;
}

// The statistics of @p t as accumulate_stats returns them (out[0..6]),
// the rejected sums in out[7]; on the host or the device, the same doubles.
__host__ __device__ void flat_stats(const AddStats &t, size_t n,
                                    double out[kFlatStats]) {
  out[0] = t.count;
  out[1] = t.sum;
  out[2] = t.sum2;
  out[3] = t.slog;
  out[4] = t.count > 0.0 ? t.lo : 0.0;
  out[5] = t.m.mean;
  out[6] = sqrt(t.m.m2 / static_cast<double>(n));  // as mean_std
  out[7] = t.bad;
}

// The partials merged in a fixed order into *out, and, where @p flat is
// not null, flat_stats of them there (for a kernel that follows).
__global__ void __launch_bounds__(kThreads)
    add_stats_final_kernel(const AddStats *partials, unsigned count,
                           AddStats *out, size_t n, double *flat) {
  __shared__ typename BlockReduceAddStats::TempStorage tmp;
  AddStats acc{{0.0, 0.0, 0.0}, 0.0, 0.0, 0.0, 0.0, INFINITY, 0.0};
  for (unsigned i = threadIdx.x; i < count; i += blockDim.x)
    acc = MergeAddStats{}(acc, partials[i]);
  const AddStats t = BlockReduceAddStats(tmp).Reduce(acc, MergeAddStats{});
  if (threadIdx.x != 0) return;
  *out = t;
  if (flat != nullptr) flat_stats(t, n, flat);
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
  const unsigned grid = grid_for(c, moments_kernel, n / 4 + 1, kUnroll);
  // small: the result, then the blocks' partials.
  PGS_RETURN_IF(ensure_device(&c->small, (1 + grid) * sizeof(Moments)));
  auto *out = static_cast<Moments *>(c->small.ptr);
  moments_kernel<<<grid, kThreads, 0, c->stream>>>(x, n, out + 1);
  PGS_LAUNCHED();
  moments_final_kernel<<<1, kThreads, 0, c->stream>>>(out + 1, grid, out);
  PGS_LAUNCHED();
  void *host = nullptr;
  PGS_RETURN_IF(read_back(c, out, sizeof(Moments), &host));
  const Moments h = *static_cast<const Moments *>(host);
  // The population standard deviation, as the host table gives it.
  *mean = h.mean;
  *std = sqrt(h.m2 / static_cast<double>(n));
  return PGS_OK;
}

size_t add_stats_scratch_bytes(Ctx *c, size_t n) {
  const unsigned grid = grid_for(c, add_stats_kernel, n / 4 + 1, kUnroll);
  return (1 + grid) * sizeof(AddStats);
}

int accumulate_stats_queue(Ctx *c, float *r, const float *g, size_t n,
                           void *scratch, double *flat, float *gmax) {
  const unsigned grid = grid_for(c, add_stats_kernel, n / 4 + 1, kUnroll);
  auto *dout = static_cast<AddStats *>(scratch);
  add_stats_kernel<<<grid, kThreads, 0, c->stream>>>(r, g, n, dout + 1, gmax);
  PGS_LAUNCHED();
  add_stats_final_kernel<<<1, kThreads, 0, c->stream>>>(dout + 1, grid, dout, n,
                                                        flat);
  PGS_LAUNCHED();
  return PGS_OK;
}

int accumulate_stats(const pgs_ops_t *ops, float *r, const float *g, size_t n,
                     int64_t *nonfinite_host, double out[7]) {
  if (out == nullptr || nonfinite_host == nullptr) return PGS_ERR_INVALID;
  if ((r == nullptr || g == nullptr) && n > 0) return PGS_ERR_INVALID;
  *nonfinite_host = 0;
  if (n == 0) {
    for (int j = 0; j < 7; ++j) out[j] = 0.0;
    return PGS_OK;
  }
  PGS_ENTER(ops, c);
  // small: the result, then the blocks' partials.
  PGS_RETURN_IF(ensure_device(&c->small, add_stats_scratch_bytes(c, n)));
  PGS_RETURN_IF(
      accumulate_stats_queue(c, r, g, n, c->small.ptr, nullptr, nullptr));
  void *host = nullptr;
  PGS_RETURN_IF(read_back(c, c->small.ptr, sizeof(AddStats), &host));
  double flat[kFlatStats];
  flat_stats(*static_cast<const AddStats *>(host), n, flat);
  *nonfinite_host = static_cast<int64_t>(flat[7]);
  for (int j = 0; j < 7; ++j) out[j] = flat[j];
  return PGS_OK;
}

}  // namespace pgs_cuda
