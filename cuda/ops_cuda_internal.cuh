// Internal declarations of the CUDA ops table: the table state, scratch
// management, error handling and device helpers shared by the .cu files.
// Not part of the public API.
#ifndef PG_SPARSE_CUDA_OPS_CUDA_INTERNAL_CUH
#define PG_SPARSE_CUDA_OPS_CUDA_INTERNAL_CUH

#include <cuda_runtime.h>
#include <pg_sparse/ops.h>
#include <pg_sparse/ops_cuda.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace pgs_cuda {

// ---- table state -----------------------------------------------------------

// One growable buffer (device or pinned host). Grows, never shrinks, until
// the table is destroyed: steady-state calls allocate nothing.
struct Scratch {
  void *ptr = nullptr;
  size_t bytes = 0;
};

// Resident blocks per multiprocessor of one kernel (occupancy), cached.
struct Occupancy {
  const void *fn;
  int blocks;
};

struct Ctx {
  pgs_ops_t table;  // what pgs_ops_cuda_create hands out; table.ctx == this
  cudaStream_t stream = nullptr;
  int device = 0;
  int sms = 1;  // multiprocessors, for grid sizing
  Occupancy occ[64] = {};
  int n_occ = 0;
  Scratch small;       // device: counters, histograms, flags, radix state
  Scratch pinned;      // pinned host: counts read back, bounds sent
  Scratch work;        // device: tile counts, candidates, CUB temp storage
  Scratch group_max;   // device: the add's largest |r| per group of 32
  uint64_t syncs = 0;  // host waits for the stream (sync_stream), for stats
  // Checks left to the device (a planned selection's count, indices):
  // kernels set bits of *err_dev (kErrContract, kErrIndex); the next host
  // wait reads it (see sync_stream).
  Scratch err_dev;     // device: one word of check bits
  Scratch err_pinned;  // pinned host: where that word is read back
  bool err_pending = false;
};

// Bits of the check word: a table function broke its contract (a planned
// count was not met), or an index of a deferred index check was bad.
constexpr unsigned kErrContract = 1u;
constexpr unsigned kErrIndex = 2u;

inline Ctx *ctx_of(const pgs_ops_t *ops) {
  return static_cast<Ctx *>(ops->ctx);
}

// Grows a scratch buffer to at least @p bytes (device or pinned host).
int ensure_device(Scratch *s, size_t bytes);
int ensure_pinned(Scratch *s, size_t bytes);

// Copies @p bytes of device memory into the pinned scratch (offset 0) and
// waits for the stream: the one host round trip of a call. Returns the
// pinned pointer through @p host.
int read_back(Ctx *c, const void *dev, size_t bytes, void **host);

// The host waits for the stream; every such wait is counted (stats). A wait
// that follows a check left to the device reads the check's word in the same
// wait and returns PGS_ERR_INDEX or PGS_ERR_INVALID if a check failed.
int sync_stream(Ctx *c);

// Where accumulate_kth's device results lie in the small buffer (past the
// radix state at its start), read back in one copy.
constexpr size_t kFusedOutOffset = 32 * 1024;
struct FusedOut {
  unsigned long long nonfinite;  // rejected sums (the fused add's count)
  unsigned long long count;      // the list's entries (its threshold count)
  float kth;                     // the list's k-th largest |val|, or -1
  int unused;
  long long n_gt;  // the list's entries above kth
};

// The compaction of compact (every tie, no offset) of x += g, queued
// without its count, in one pass: the add as the fused pass's (a sum that
// is not finite is rejected, x keeps its old value, and it is counted into
// *nonfinite), then the selection of the sums. The totals stay on the
// device at *total: @p total_at, or in the scratch where it is null.
// @p scratch holds compact_scratch_bytes(n). The pass's reset kernel
// first clears zero[0..zero_words) (the caller's counters, *nonfinite
// among them), so no memset precedes the pass.
size_t compact_scratch_bytes(size_t n);
int accumulate_compact_queue(Ctx *c, float *x, const float *g, size_t n,
                             float thr, int32_t *idx, float *val, size_t cap,
                             void *scratch, unsigned long long *nonfinite,
                             ulonglong2 *total_at, const ulonglong2 **total,
                             unsigned long long *zero, unsigned zero_words);

// Makes ctx->device current for the scope and restores the caller's device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess) {
      (void)cudaGetLastError();
      ok_ = cudaSetDevice(device) == cudaSuccess;
      return;
    }
    if (cur != device) {
      ok_ = cudaSetDevice(device) == cudaSuccess;
      if (ok_) prev_ = cur;
    }
  }
  ~DeviceGuard() {
    if (prev_ >= 0) (void)cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard &) = delete;
  DeviceGuard &operator=(const DeviceGuard &) = delete;
  bool ok() const { return ok_; }

 private:
  int prev_ = -1;
  bool ok_ = true;
};

// Returns PGS_ERR_DEVICE from the calling function on a CUDA error (after
// clearing it, so one failure does not poison later calls where CUDA allows).
#define PGS_CU(expr)             \
  do {                           \
    cudaError_t pgs_e_ = (expr); \
    if (pgs_e_ != cudaSuccess) { \
      (void)cudaGetLastError();  \
      return PGS_ERR_DEVICE;     \
    }                            \
  } while (0)

// After a kernel launch: launch-configuration errors and earlier faults.
#define PGS_LAUNCHED() PGS_CU(cudaGetLastError())

// Every entry point starts with this: the table's device current.
#define PGS_ENTER(ops, c)            \
  Ctx *c = ctx_of(ops);              \
  DeviceGuard pgs_guard_(c->device); \
  if (!pgs_guard_.ok()) {            \
    (void)cudaGetLastError();        \
    return PGS_ERR_DEVICE;           \
  }

#define PGS_RETURN_IF(st)                  \
  do {                                     \
    int pgs_st_ = (st);                    \
    if (pgs_st_ != PGS_OK) return pgs_st_; \
  } while (0)

// ---- launch geometry ------------------------------------------------------

constexpr int kThreads = 256;

// How many blocks of @p threads of kernel @p fn fit on one multiprocessor
// at once (cached per kernel; 1 if CUDA cannot say).
int resident_blocks(Ctx *c, const void *fn, int threads);

// Blocks for a grid-stride kernel over @p items, each thread taking about
// @p per_thread of them per step: at most what the device holds resident at
// once. A larger grid would run in a second, partial wave: every block has
// the same share, so the last blocks would start late and finish alone.
template <class Kernel>
unsigned grid_for(Ctx *c, Kernel kernel, size_t items, size_t per_thread,
                  int threads = kThreads) {
  const size_t per_block = static_cast<size_t>(threads) * per_thread;
  size_t want = (items + per_block - 1) / per_block;
  const size_t cap =
      static_cast<size_t>(c->sms) *
      resident_blocks(c, reinterpret_cast<const void *>(kernel), threads);
  if (want > cap) want = cap;
  if (want < 1) want = 1;
  return static_cast<unsigned>(want);
}

// Carves aligned sub-buffers out of one scratch allocation. Run once with a
// null base to measure, then with the real base.
class Carve {
 public:
  explicit Carve(void *base) : base_(static_cast<char *>(base)) {}
  template <class T>
  T *take(size_t count) {
    off_ = (off_ + 255) & ~static_cast<size_t>(255);
    T *p = base_ ? reinterpret_cast<T *>(base_ + off_) : nullptr;
    off_ += count * sizeof(T);
    return p;
  }
  size_t bytes() const { return off_ + 256; }

 private:
  char *base_;
  size_t off_ = 0;
};

// Whether the byte ranges [a, a + na) and [b, b + nb) overlap.
inline bool overlaps(const void *a, size_t na, const void *b, size_t nb) {
  if (na == 0 || nb == 0 || a == nullptr || b == nullptr) return false;
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + nb && pb < pa + na;
}

// ---- device helpers ---------------------------------------------------------

// Bits of |x|: for non-negative floats (NaN above +Inf) their unsigned order
// is the numeric order, which makes the radix select exact.
__device__ __forceinline__ uint32_t abs_bits(float x) {
  return __float_as_uint(x) & 0x7fffffffu;
}

// Whether v is finite (neither Inf nor NaN), from its exponent bits.
__device__ __forceinline__ bool finite_bits(float v) {
  return (__float_as_uint(v) & 0x7f800000u) != 0x7f800000u;
}

// One sum of the accumulate r += g: x + g, or x where the sum is not finite
// (rejected, and counted into @p bad).
template <class Count>
__device__ __forceinline__ float add_or_keep(float x, float g, Count &bad) {
  const float v = x + g;
  const bool ok = finite_bits(v);
  bad += !ok;
  return ok ? v : x;
}

__device__ __forceinline__ unsigned lanemask_lt() {
  unsigned m;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
  return m;
}

// Number of leading elements of x before a 16-byte boundary (at most n).
__device__ __forceinline__ size_t head_to_align16(const void *x, size_t n) {
  size_t h = ((16 - (reinterpret_cast<uintptr_t>(x) & 15)) & 15) / 4;
  return h < n ? h : n;
}

// Walks x[0..n) over the whole grid, each element once: a scalar head up to
// 16-byte alignment and a scalar tail through one(i, x[i]), the body as
// float4 loads through vec(t, i): t an array of U float4s loaded together
// (UNROLL of them in flight per thread, then one at a time), i[u] the index
// of t[u].x.
template <int UNROLL, class One, class Vec>
__device__ __forceinline__ void walk_floats(const float *__restrict__ x,
                                            size_t n, One &&one, Vec &&vec) {
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t head = head_to_align16(x, n);
  if (tid < head) one(tid, x[tid]);
  const float4 *v = reinterpret_cast<const float4 *>(x + head);
  const size_t nv = (n - head) / 4;
  size_t j = tid;
  for (; j + (UNROLL - 1) * stride < nv; j += UNROLL * stride) {
    float4 t[UNROLL];
    size_t at[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      t[u] = v[j + u * stride];
      at[u] = head + 4 * (j + u * stride);
    }
    vec(t, at);
  }
  for (; j < nv; j += stride) {
    const float4 t[1] = {v[j]};
    const size_t at[1] = {head + 4 * j};
    vec(t, at);
  }
  const size_t tail0 = head + 4 * nv;
  if (tid < n - tail0) one(tail0 + tid, x[tail0 + tid]);
}

// Calls f(i, x[i]) for every i < n, once each, over the whole grid (see
// walk_floats).
template <int UNROLL, class F>
__device__ __forceinline__ void for_each_float(const float *__restrict__ x,
                                               size_t n, F &&f) {
  walk_floats<UNROLL>(x, n, f, [&](const auto &t, const auto &at) {
    constexpr int kU = sizeof(t) / sizeof(t[0]);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      f(at[u], t[u].x);
      f(at[u] + 1, t[u].y);
      f(at[u] + 2, t[u].z);
      f(at[u] + 3, t[u].w);
    }
  });
}

// First position p in the ascending list a[0..n) with a[p] >= key.
__device__ __forceinline__ unsigned long long lower_bound_i32(
    const int32_t *__restrict__ a, unsigned long long n, long long key) {
  unsigned long long lo = 0, hi = n;
  while (lo < hi) {
    const unsigned long long mid = lo + (hi - lo) / 2;
    if (static_cast<long long>(a[mid]) < key)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

// ---- entry points (signatures of pgs_ops_t) ---------------------------------

// elementwise_cuda.cu
int accumulate(const pgs_ops_t *ops, float *r, const float *g, size_t n,
               float thr, int64_t *n_ge);
int scale(const pgs_ops_t *ops, float *x, size_t n, float s);
int count_nonfinite(const pgs_ops_t *ops, const float *x, size_t n,
                    int64_t *count);
int abs_stats(const pgs_ops_t *ops, const float *x, size_t n, float thr,
              double out[5]);
int mean_std(const pgs_ops_t *ops, const float *x, size_t n, double *mean,
             double *std);
int accumulate_stats(const pgs_ops_t *ops, float *r, const float *g, size_t n,
                     int64_t *nonfinite_host, double out[7]);
// accumulate_stats queued, no wait: its statistics as doubles at @p flat
// (device; out[0..6] as accumulate_stats returns them, [7] the rejected
// sums; may be null), the blocks' partials in @p scratch
// (add_stats_scratch_bytes). Where @p gmax is not null (n / 32 floats) and
// r and g are 16-byte aligned (add_group_max_ok), gmax[q] is the largest
// |r| of r[32q .. 32q + 32) after the add.
constexpr int kFlatStats = 8;
size_t add_stats_scratch_bytes(Ctx *c, size_t n);
int accumulate_stats_queue(Ctx *c, float *r, const float *g, size_t n,
                           void *scratch, double *flat, float *gmax);
inline bool add_group_max_ok(const float *r, const float *g) {
  return ((reinterpret_cast<uintptr_t>(r) | reinterpret_cast<uintptr_t>(g)) &
          15) == 0;
}

// guess_cuda.cu
int accumulate_guess_select(const pgs_ops_t *ops, float *r, const float *g,
                            size_t n, const pgs_guess_rule_t *rule,
                            int32_t *idx, float *val, size_t cap,
                            int64_t *nonfinite_host, double out[7],
                            float *thr_host, int64_t *count_host);

// select_cuda.cu
// Region bounds passed by value as a kernel parameter (P < kParamBounds
// regions): no copy to the device before the kernel.
constexpr int kParamBounds = 33;
struct ParamBounds {
  long long b[kParamBounds];
  __device__ __forceinline__ long long operator[](int j) const { return b[j]; }
};

// Region j of element i: the last j < nreg with bounds[j] <= i (bounds
// ascend, so that region is not empty and holds i). Bounds: a device
// pointer, or ParamBounds (the kernel's own parameter).
template <class Bounds>
__device__ __forceinline__ int region_of(const Bounds &bounds, int lo, int hi,
                                         long long i) {
  // Invariant: bounds[lo] <= i, answer in [lo, hi].
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (bounds[mid] <= i)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// Regions [keys[j], keys[j+1]) of a list (ascending indices idx) to count
// at its k-th: nreg 0 counts nothing. counts[2 * nreg] must be zeroed
// before; pos[0..nreg] receives where each region's run begins.
struct ListRegions {
  const int32_t *idx = nullptr;
  ParamBounds keys{};
  int nreg = 0;
  unsigned long long *counts = nullptr;
  long long *pos = nullptr;
};

// The exact k-th largest |val| of the list accumulate_compact_queue wrote
// (its length read from *total on the device, at most @p cap), and the
// list's counts per region at it, in one cooperative kernel queued without
// a wait. *out gets the list's length, and its k-th and the entries above
// it where the list holds it whole (k <= length <= cap; otherwise kth -1).
// The radix state at the start of c->small must be zeroed before.
int kth_list_queue(Ctx *c, const float *val, size_t cap, size_t k,
                   const ulonglong2 *total, const ListRegions &reg,
                   FusedOut *out);

// Queues the per-region counts of x at thr over the device bounds
// dbounds[0..nreg] into counts[2 * nreg] (zeroed first unless @p zeroed: an
// earlier kernel on the stream cleared them); @p span bounds
// dbounds[nreg] - dbounds[0] from above (it sizes the grid).
int count_regions_launch(Ctx *c, const float *x, const long long *dbounds,
                         int nreg, float thr, size_t span,
                         unsigned long long *counts, bool zeroed);
int count_regions(const pgs_ops_t *ops, const float *x, size_t n,
                  const int64_t *bounds_host, int nreg, float thr,
                  int64_t *n_gt_host, int64_t *n_eq_host);
int kth_abs(const pgs_ops_t *ops, const float *x, size_t n, size_t k,
            float *thr, int64_t *n_gt);
int hist_abs(const pgs_ops_t *ops, const float *x, size_t n, int level,
             uint32_t prefix, int64_t *hist_host);

// compact_cuda.cu
int compact(const pgs_ops_t *ops, const float *x, size_t n, float thr,
            int64_t eq_quota, int32_t idx_offset, int32_t *idx, float *val,
            size_t cap, int64_t *count_host);
int select_pairs(const pgs_ops_t *ops, const int32_t *idx, const float *val,
                 size_t m, float thr, int64_t eq_quota, int32_t *idx_out,
                 float *val_out, size_t cap, int64_t *count_host);
int merge_pairs(const pgs_ops_t *ops, const int32_t *ia, const float *va,
                size_t na, const int32_t *ib, const float *vb, size_t nb,
                int32_t *io, float *vo, size_t cap, int64_t *count_host);

// index_cuda.cu
int gather(const pgs_ops_t *ops, const float *x, size_t n, const int32_t *idx,
           size_t m, float *val);
int zero_at(const pgs_ops_t *ops, float *x, size_t n, const int32_t *idx,
            size_t m);
int scatter_add(const pgs_ops_t *ops, float *x, size_t n, const int32_t *idx,
                const float *val, size_t m, float scale);
int scatter_add_sorted(const pgs_ops_t *ops, float *x, size_t n,
                       const int32_t *idx, const float *val, size_t m,
                       float scale);
int zero_common(const pgs_ops_t *ops, float *x, size_t n, const int32_t *a,
                const float *a_val, size_t na, int32_t a_offset,
                const int32_t *b, size_t nb);
int set_sorted(const pgs_ops_t *ops, float *x, size_t n, const int32_t *idx,
               const float *val, size_t m, float scale);

int accumulate_select(const pgs_ops_t *ops, float *r, const float *g, size_t n,
                      float thr, int32_t *idx, float *val, size_t cap,
                      int64_t *count_host, int64_t *nonfinite_host);
int accumulate_kth(const pgs_ops_t *ops, float *r, const float *g, size_t n,
                   float thr, int32_t *idx, float *val, size_t cap, size_t k,
                   pgs_fused_t *out);
int accumulate_kth_regions(const pgs_ops_t *ops, float *r, const float *g,
                           size_t n, float thr, int32_t *idx, float *val,
                           size_t cap, size_t k, pgs_fused_t *out,
                           pgs_regions_t *reg);
int unaccumulate(const pgs_ops_t *ops, float *r, const float *g, size_t n);
int shift_idx(const pgs_ops_t *ops, int32_t *idx, size_t m, int32_t delta);
int locate(const pgs_ops_t *ops, const int32_t *idx, size_t m,
           const int64_t *keys_host, int nkeys, int64_t *pos_host);
int count_pair_regions(const pgs_ops_t *ops, const int32_t *idx,
                       const float *val, size_t m, const int64_t *keys_host,
                       int nreg, float thr, int64_t *pos_host,
                       int64_t *n_gt_host, int64_t *n_eq_host);
uint64_t host_syncs(const pgs_ops_t *ops);

// wire_cuda.cu
int to_wire(const pgs_ops_t *ops, const float *x, size_t m, pgs_dtype_t dtype,
            void *wire, float *err);
int from_wire(const pgs_ops_t *ops, const void *wire, size_t m,
              pgs_dtype_t dtype, float *x);
}  // namespace pgs_cuda

#endif  // PG_SPARSE_CUDA_OPS_CUDA_INTERNAL_CUH
