// Index-driven kernels of the CUDA ops table: gather, zero_at, scatter_add,
// set_sorted and zero_common.
//
// Indices may come from peers, so each call first runs a validation kernel
// over all of them. gather, zero_at, scatter_add_sorted and zero_common
// leave its verdict on the device: the validation sets kErrIndex in the
// table's check word and the write kernel, queued behind it, reads that word
// and writes nothing when it is set; the next host wait of the call reports
// the error (sync_stream). A bad message therefore leaves memory exactly as
// it was without a wait of its own. set_sorted, which overwrites all of x
// anyway, checks in its own kernel: a bad list fails the call the same way
// but may leave x partly cleared and written (never outside it). scatter_add of
// any order reads its flags back, as it must choose between the direct and
// the sorted add.
#include <cub/device/device_radix_sort.cuh>

#include "ops_cuda_internal.cuh"

namespace pgs_cuda {
namespace {

// Flag bits of scatter_add's own read-back.
constexpr unsigned kBadIndex = 1u;
constexpr unsigned kNotAscending = 2u;

// What validate_kernel looks for and which bit each finding sets (0: not
// checked, for the order).
struct Verdict {
  unsigned bad;        // some idx[j] + offset outside [0, n)
  unsigned unordered;  // not strictly ascending
};

// One index list to validate: idx[0..m) + offset.
struct IndexList {
  const int32_t *idx = nullptr;
  size_t m = 0;
  long long offset = 0;
};

// Entry j of list l: whether idx[j] + offset lies outside [0, n), and
// whether it breaks a strict ascent (not below the next entry).
__device__ __forceinline__ int out_of_range(const IndexList &l, size_t j,
                                            size_t n) {
  const long long i = static_cast<long long>(l.idx[j]) + l.offset;
  return (i < 0) | (static_cast<unsigned long long>(i) >= n);
}
__device__ __forceinline__ int out_of_order(const IndexList &l, size_t j) {
  return j + 1 < l.m && l.idx[j] >= l.idx[j + 1];
}

// Validates lists a and b (b may be empty) in one launch: zero_common
// checks both of its lists, and a launch each cost a few microseconds of
// a kernel that reads little.
__global__ void __launch_bounds__(kThreads)
    validate_kernel(IndexList a, IndexList b, size_t n, Verdict v,
                    unsigned *flags) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  int bad = 0, unordered = 0;
  for (size_t t = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       t < a.m + b.m; t += stride) {
    const IndexList &l = t < a.m ? a : b;
    const size_t j = t < a.m ? t : t - a.m;
    bad |= out_of_range(l, j, n);
    if (v.unordered != 0) unordered |= out_of_order(l, j);
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicOr(flags, v.bad);
  if (v.unordered != 0 && __syncthreads_or(unordered) && threadIdx.x == 0)
    atomicOr(flags, v.unordered);
}

// Whether a write kernel must stand down: a check queued before it (in
// stream order, so finished) found a bad index or a broken contract.
__device__ __forceinline__ bool gated(const unsigned *gate) {
  return gate != nullptr && *gate != 0;
}

__global__ void __launch_bounds__(kThreads)
    gather_kernel(const float *__restrict__ x, const int32_t *__restrict__ idx,
                  size_t m, float *__restrict__ val, const unsigned *gate) {
  if (gated(gate)) return;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       j < m; j += stride)
    val[j] = x[idx[j]];
}

__global__ void __launch_bounds__(kThreads)
    zero_at_kernel(float *x, const int32_t *__restrict__ idx, size_t m,
                   const unsigned *gate) {
  if (gated(gate)) return;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       j < m; j += stride)
    x[idx[j]] = 0.0f;
}

// The host's product: rounded to float before the add, and skipped at
// scale 1 so the sum is exactly x + val. The _rn intrinsics keep nvcc from
// contracting the two into a fused multiply-add.
__device__ __forceinline__ float scaled(float v, float scale) {
  return scale == 1.0f ? v : __fmul_rn(scale, v);
}

// Strictly ascending indices: every target is written by one thread.
__global__ void __launch_bounds__(kThreads)
    scatter_add_unique_kernel(float *x, const int32_t *__restrict__ idx,
                              const float *__restrict__ val, size_t m,
                              float scale, const unsigned *gate) {
  if (gated(gate)) return;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       j < m; j += stride) {
    const int32_t i = idx[j];
    x[i] = __fadd_rn(x[i], scaled(val[j], scale));
  }
}

// set_sorted: each block clears kSetTile consecutive entries of x, then
// writes the list's entries that fall among them (found by two warps'
// searches, made while the block's stores drain). The block wrote its own
// zeros, so its barrier orders them before the values. The grid also checks
// the list (range and order) into the check word; a bad list cannot write
// outside x, because every write is bounded by its block's tile.
constexpr unsigned kSetTile = 8192;

// lower_bound_i32 by a whole warp: each step its lanes probe 32 evenly
// spaced positions inside the range, which shrinks about 33-fold, so a list
// of 84K entries costs 4 dependent loads instead of 17 (with one thread's
// search, set_sorted took 13-15 us at 4.2M on an H200, the memset alone
// 8.4). On a list that is not ascending it still ends, within [0, m]. All
// lanes return the same position.
__device__ unsigned long long warp_lower_bound_i32(
    const int32_t *__restrict__ a, unsigned long long m, long long key) {
  constexpr unsigned kAll = 0xffffffffu;
  const unsigned lane = threadIdx.x & 31u;
  unsigned long long lo = 0, hi = m;  // the answer lies in [lo, hi]
  while (hi - lo > 32) {
    // Strictly increasing in the lane, within [lo + 1, hi - 1].
    const unsigned long long p = lo + (hi - lo) * (lane + 1) / 33;
    const bool below = static_cast<long long>(a[p]) < key;
    const int c = __popc(__ballot_sync(kAll, below));  // lanes below
    const unsigned long long p_lo = __shfl_sync(kAll, p, c > 0 ? c - 1 : 0);
    const unsigned long long p_hi = __shfl_sync(kAll, p, c < 32 ? c : 31);
    if (c > 0) lo = p_lo + 1;
    if (c < 32) hi = p_hi;
  }
  const bool below =
      lo + lane < hi && static_cast<long long>(a[lo + lane]) < key;
  return lo + __popc(__ballot_sync(kAll, below));
}

__global__ void __launch_bounds__(kThreads)
    set_sorted_kernel(float *x, size_t n, const int32_t *__restrict__ idx,
                      const float *__restrict__ val, size_t m, float scale,
                      unsigned *word) {
  // An earlier check of the call failed: nothing written. One read for the
  // block, as its other blocks may set the word meanwhile and the barriers
  // below need every thread.
  if (__syncthreads_or(threadIdx.x == 0 && gated(word))) return;
  const size_t t0 = static_cast<size_t>(blockIdx.x) * kSetTile;
  const size_t t1 = t0 + kSetTile < n ? t0 + kSetTile : n;
  for (size_t i = t0 + threadIdx.x; i < t1; i += kThreads) x[i] = 0.0f;
  __shared__ unsigned long long range[2];
  const unsigned warp = threadIdx.x / 32;
  if (warp < 2) {
    const unsigned long long p = warp_lower_bound_i32(
        idx, m, static_cast<long long>(warp == 0 ? t0 : t1));
    if ((threadIdx.x & 31u) == 0) range[warp] = p;
  }
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads;
  const IndexList list{idx, m, 0};
  int bad = 0;
  for (size_t j = static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x;
       j < m; j += stride)
    bad |= out_of_range(list, j, n) | out_of_order(list, j);
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicOr(word, kErrIndex);
  for (unsigned long long j = range[0] + threadIdx.x; j < range[1];
       j += kThreads) {
    const long long i = idx[j];
    if (i >= static_cast<long long>(t0) && i < static_cast<long long>(t1))
      x[i] = __fadd_rn(0.0f, scaled(val[j], scale));
  }
}

__global__ void iota_kernel(uint32_t *out, size_t m) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       j < m; j += stride)
    out[j] = static_cast<uint32_t>(j);
}

// Repeated indices: pairs stably sorted by index, so each run of one index
// lists its j in increasing order; the run's first thread adds them in that
// order, exactly as the host's serial loop does.
__global__ void __launch_bounds__(kThreads)
    scatter_add_runs_kernel(float *x, const uint32_t *__restrict__ keys,
                            const uint32_t *__restrict__ order,
                            const float *__restrict__ val, size_t m,
                            float scale) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t s = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       s < m; s += stride) {
    const uint32_t i = keys[s];
    if (s > 0 && keys[s - 1] == i) continue;
    float acc = x[i];
    for (size_t t = s; t < m && keys[t] == i; ++t)
      acc = __fadd_rn(acc, scaled(val[order[t]], scale));
    x[i] = acc;
  }
}

__global__ void __launch_bounds__(kThreads)
    zero_common_kernel(float *x, const int32_t *__restrict__ a,
                       const float *__restrict__ a_val, size_t na,
                       long long a_offset, const int32_t *__restrict__ b,
                       size_t nb, const unsigned *gate) {
  if (gated(gate)) return;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       j < na; j += stride) {
    const long long ai = static_cast<long long>(a[j]) + a_offset;
    const unsigned long long p = lower_bound_i32(b, nb, ai);
    if (p < nb && b[p] == ai)
      x[ai] = a_val == nullptr ? 0.0f : x[ai] - a_val[j];
  }
}

// Queues validation of idx (+ offset) against n into the flag word.
int validate_launch(Ctx *c, const IndexList &a, const IndexList &b, size_t n,
                    Verdict v, unsigned *flags) {
  if (a.m + b.m == 0) return PGS_OK;
  validate_kernel<<<grid_for(c, validate_kernel, a.m + b.m, 8), kThreads, 0,
                    c->stream>>>(a, b, n, v, flags);
  PGS_LAUNCHED();
  return PGS_OK;
}

// Validates one index list against n and reads the flags back (scatter_add).
int validate(Ctx *c, const int32_t *idx, size_t m, size_t n,
             unsigned *flags_out) {
  auto *flags = static_cast<unsigned *>(c->small.ptr);
  PGS_CU(cudaMemsetAsync(flags, 0, sizeof(unsigned), c->stream));
  PGS_RETURN_IF(validate_launch(c, IndexList{idx, m, 0}, IndexList{}, n,
                                Verdict{kBadIndex, kNotAscending}, flags));
  void *host = nullptr;
  PGS_RETURN_IF(read_back(c, flags, sizeof(unsigned), &host));
  *flags_out = *static_cast<const unsigned *>(host);
  return PGS_OK;
}

// Queues validation of lists a and b (b may be empty) against n, and with
// @p ascending of their order, into the check word, which the write kernels
// after it read as their *gate; the next host wait reports a failure.
int defer_validate(Ctx *c, const IndexList &a, const IndexList &b, size_t n,
                   bool ascending, const unsigned **gate) {
  auto *word = static_cast<unsigned *>(c->err_dev.ptr);
  *gate = word;
  const Verdict v{kErrIndex, ascending ? kErrIndex : 0u};
  PGS_RETURN_IF(validate_launch(c, a, b, n, v, word));
  c->err_pending = true;
  return PGS_OK;
}

// scatter_add with repeated indices: stable radix sort of (index, j).
int scatter_add_by_sort(Ctx *c, float *x, size_t n, const int32_t *idx,
                        const float *val, size_t m, float scale) {
  int end_bit = 1;
  while (end_bit < 32 && (static_cast<uint64_t>(n - 1) >> end_bit) != 0)
    ++end_bit;
  const auto *keys_in = reinterpret_cast<const uint32_t *>(idx);  // all >= 0
  const int items = static_cast<int>(m);
  size_t temp_bytes = 0;
  PGS_CU(cub::DeviceRadixSort::SortPairs(
      nullptr, temp_bytes, keys_in, static_cast<uint32_t *>(nullptr),
      static_cast<const uint32_t *>(nullptr), static_cast<uint32_t *>(nullptr),
      items, 0, end_bit, c->stream));
  Carve measure(nullptr);
  measure.take<uint32_t>(m);
  measure.take<uint32_t>(m);
  measure.take<uint32_t>(m);
  measure.take<char>(temp_bytes);
  PGS_RETURN_IF(ensure_device(&c->work, measure.bytes()));
  Carve cv(c->work.ptr);
  uint32_t *order_in = cv.take<uint32_t>(m);
  uint32_t *keys_out = cv.take<uint32_t>(m);
  uint32_t *order_out = cv.take<uint32_t>(m);
  void *temp = cv.take<char>(temp_bytes);
  iota_kernel<<<grid_for(c, iota_kernel, m, 4), kThreads, 0, c->stream>>>(
      order_in, m);
  PGS_LAUNCHED();
  PGS_CU(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out,
                                         order_in, order_out, items, 0, end_bit,
                                         c->stream));
  scatter_add_runs_kernel<<<grid_for(c, scatter_add_runs_kernel, m, 4),
                            kThreads, 0, c->stream>>>(x, keys_out, order_out,
                                                      val, m, scale);
  PGS_LAUNCHED();
  return PGS_OK;
}

}  // namespace

// ---- entry points ---------------------------------------------------------

int gather(const pgs_ops_t *ops, const float *x, size_t n, const int32_t *idx,
           size_t m, float *val) {
  if (m == 0) return PGS_OK;
  if (idx == nullptr || val == nullptr || (x == nullptr && n > 0))
    return PGS_ERR_INVALID;
  PGS_ENTER(ops, c);
  const unsigned *gate = nullptr;
  PGS_RETURN_IF(
      defer_validate(c, IndexList{idx, m, 0}, IndexList{}, n, false, &gate));
  gather_kernel<<<grid_for(c, gather_kernel, m, 4), kThreads, 0, c->stream>>>(
      x, idx, m, val, gate);
  PGS_LAUNCHED();
  return PGS_OK;
}

int zero_at(const pgs_ops_t *ops, float *x, size_t n, const int32_t *idx,
            size_t m) {
  if (m == 0) return PGS_OK;
  if (idx == nullptr || (x == nullptr && n > 0)) return PGS_ERR_INVALID;
  PGS_ENTER(ops, c);
  const unsigned *gate = nullptr;
  PGS_RETURN_IF(
      defer_validate(c, IndexList{idx, m, 0}, IndexList{}, n, false, &gate));
  // Repeated indices all write 0: no ordering needed.
  zero_at_kernel<<<grid_for(c, zero_at_kernel, m, 4), kThreads, 0, c->stream>>>(
      x, idx, m, gate);
  PGS_LAUNCHED();
  return PGS_OK;
}

int scatter_add(const pgs_ops_t *ops, float *x, size_t n, const int32_t *idx,
                const float *val, size_t m, float scale) {
  if (m == 0) return PGS_OK;
  if (idx == nullptr || val == nullptr || (x == nullptr && n > 0))
    return PGS_ERR_INVALID;
  PGS_ENTER(ops, c);
  unsigned flags = 0;
  PGS_RETURN_IF(validate(c, idx, m, n, &flags));
  if (flags & kBadIndex) return PGS_ERR_INDEX;
  if ((flags & kNotAscending) == 0) {
    scatter_add_unique_kernel<<<grid_for(c, scatter_add_unique_kernel, m, 4),
                                kThreads, 0, c->stream>>>(x, idx, val, m, scale,
                                                          nullptr);
    PGS_LAUNCHED();
    return PGS_OK;
  }
  if (m > static_cast<size_t>(INT32_MAX)) return PGS_ERR_UNSUPPORTED;
  return scatter_add_by_sort(c, x, n, idx, val, m, scale);
}

int scatter_add_sorted(const pgs_ops_t *ops, float *x, size_t n,
                       const int32_t *idx, const float *val, size_t m,
                       float scale) {
  if (m == 0) return PGS_OK;
  if (idx == nullptr || val == nullptr || (x == nullptr && n > 0))
    return PGS_ERR_INVALID;
  PGS_ENTER(ops, c);
  // Strictly ascending, so every target is written by one thread.
  const unsigned *gate = nullptr;
  PGS_RETURN_IF(
      defer_validate(c, IndexList{idx, m, 0}, IndexList{}, n, true, &gate));
  scatter_add_unique_kernel<<<grid_for(c, scatter_add_unique_kernel, m, 4),
                              kThreads, 0, c->stream>>>(x, idx, val, m, scale,
                                                        gate);
  PGS_LAUNCHED();
  return PGS_OK;
}

int set_sorted(const pgs_ops_t *ops, float *x, size_t n, const int32_t *idx,
               const float *val, size_t m, float scale) {
  if ((idx == nullptr || val == nullptr) && m > 0) return PGS_ERR_INVALID;
  if (x == nullptr && n > 0) return PGS_ERR_INVALID;
  if (n == 0) return m == 0 ? PGS_OK : PGS_ERR_INDEX;
  PGS_ENTER(ops, c);
  auto *word = static_cast<unsigned *>(c->err_dev.ptr);
  const size_t blocks = (n + kSetTile - 1) / kSetTile;  // n < 2^31
  set_sorted_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, c->stream>>>(
      x, n, idx, val, m, scale, word);
  PGS_LAUNCHED();
  if (m > 0) c->err_pending = true;
  return PGS_OK;
}

int zero_common(const pgs_ops_t *ops, float *x, size_t n, const int32_t *a,
                const float *a_val, size_t na, int32_t a_offset,
                const int32_t *b, size_t nb) {
  if ((a == nullptr && na > 0) || (b == nullptr && nb > 0))
    return PGS_ERR_INVALID;
  if (na == 0 || nb == 0) return PGS_OK;
  if (x == nullptr && n > 0) return PGS_ERR_INVALID;
  PGS_ENTER(ops, c);
  const unsigned *gate = nullptr;
  PGS_RETURN_IF(defer_validate(c, IndexList{a, na, a_offset},
                               IndexList{b, nb, 0}, n, false, &gate));
  // Each entry of a looks itself up in b: repeated entries in either list
  // are handled, as by the host's merge walk (with a_val, a's entries are
  // distinct: they are one sender's block).
  // One entry a thread: each is a chain of ~log2(nb) dependent loads, and
  // four a thread ran four chains in a row (16 us a call on Ok-Topk's lists
  // of ~84K entries in an H200 hook profile).
  zero_common_kernel<<<grid_for(c, zero_common_kernel, na, 1), kThreads, 0,
                       c->stream>>>(x, a, a_val, na, a_offset, b, nb, gate);
  PGS_LAUNCHED();
  return PGS_OK;
}

}  // namespace pgs_cuda
