// Compaction kernels of the CUDA ops table: compact, select_pairs and
// merge_pairs, all built on the ordered selection of tile_select.cuh (the
// first two in one pass over their input, merge_pairs in three). Each
// call reads back one pair of totals, or, when the caller planned the
// count, checks it on the device without a wait.
#include "compact_mask_cuda.cuh"
#include "tile_select.cuh"

namespace pgs_cuda {

// Loads in batches of kScanBatch, so a thread's run (nspans / 512 counts)
// waits for memory once per batch, not once per count.
constexpr int kScanBatch = 8;

// counts[i + u] for u < kScanBatch, zero past hi.
__device__ __forceinline__ void load_counts(const uint2 *__restrict__ counts,
                                            unsigned long long i,
                                            unsigned long long hi,
                                            uint2 (&k)[kScanBatch]) {
#pragma unroll
  for (int u = 0; u < kScanBatch; ++u)
    k[u] = i + u < hi ? counts[i + u] : make_uint2(0, 0);
}

__global__ void __launch_bounds__(kScanThreads)
    span_scan_kernel(const uint2 *__restrict__ counts,
                     unsigned long long nspans, ulonglong2 *__restrict__ offs) {
  using Scan = cub::BlockScan<unsigned long long, kScanThreads>;
  __shared__ typename Scan::TempStorage tmp;
  const unsigned long long lo = nspans * threadIdx.x / kScanThreads;
  const unsigned long long hi = nspans * (threadIdx.x + 1) / kScanThreads;
  unsigned long long s1 = 0, s2 = 0;
  for (unsigned long long i = lo; i < hi; i += kScanBatch) {
    uint2 k[kScanBatch];
    load_counts(counts, i, hi, k);
#pragma unroll
    for (int u = 0; u < kScanBatch; ++u) {
      s1 += k[u].x;
      s2 += k[u].y;
    }
  }
  unsigned long long e1 = 0, e2 = 0;
  Scan(tmp).ExclusiveSum(s1, e1);
  __syncthreads();
  Scan(tmp).ExclusiveSum(s2, e2);
  for (unsigned long long i = lo; i < hi; i += kScanBatch) {
    uint2 k[kScanBatch];
    load_counts(counts, i, hi, k);
#pragma unroll
    for (int u = 0; u < kScanBatch; ++u) {
      if (i + u < hi) offs[i + u] = make_ulonglong2(e1, e2);
      e1 += k[u].x;
      e2 += k[u].y;
    }
  }
  if (threadIdx.x == kScanThreads - 1) offs[nspans] = make_ulonglong2(e1, e2);
}

__global__ void tile_state_init_kernel(TileState state, int ntiles,
                                       unsigned long long *zero,
                                       unsigned zero_words) {
  state.InitializeStatus(ntiles);
  const unsigned stride = gridDim.x * blockDim.x;
  for (unsigned w = blockIdx.x * blockDim.x + threadIdx.x; w < zero_words;
       w += stride)
    zero[w] = 0;
}

namespace {

// The selection rule shared by compact and select_pairs: class 1 is
// |v| > thr, class 2 is |v| == thr, zeros never; a tie is taken while fewer
// than quota ties precede it. Its output slot is the number of elements
// taken before it: before1 + min(before2, quota).
struct Selector {
  // The rule of compact_mask_cuda.cuh (mask_rule_at) and a tie quota.
  float gt, eq;
  unsigned long long quota;  // ~0 for "every tie"
  __device__ __forceinline__ void flags(float v, bool &f1, bool &f2) const {
    const float a = fabsf(v);
    f1 = a > gt;
    f2 = a == eq;
  }
  // Output slot, or ~0 when the element is not taken.
  __device__ __forceinline__ unsigned long long slot(
      bool f1, bool f2, unsigned long long b1, unsigned long long b2) const {
    if (!f1 && !(f2 && b2 < quota)) return ~0ull;
    return b1 + (b2 < quota ? b2 : quota);
  }
};

unsigned long long quota_of(int64_t eq_quota) {
  return eq_quota < 0 ? ~0ull : static_cast<unsigned long long>(eq_quota);
}

Selector make_selector(float thr, int64_t eq_quota) {
  const MaskRule r = mask_rule_at(thr);
  return Selector{r.gt, r.eq, quota_of(eq_quota)};
}

bool aligned16(const void *p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

// The 16-byte vector of four T.
template <class T>
struct Vec4;
template <>
struct Vec4<float> {
  using type = float4;
};
template <>
struct Vec4<int32_t> {
  using type = int4;
};

// Loads a run of kRun words of x (n of them) from v0: four 16-byte
// loads where the run is whole and x is aligned (v0 is a multiple of 16),
// else one at a time with zeros past the end (a zero is never flagged).
template <class T>
__device__ __forceinline__ void load_run4(const T *__restrict__ x,
                                          unsigned long long n, bool vec,
                                          unsigned long long v0,
                                          T (&it)[kRun]) {
  static_assert(kRun % 4 == 0, "runs of whole vectors");
  using V = typename Vec4<T>::type;
  if (vec && v0 + kRun <= n) {
    const V *p = reinterpret_cast<const V *>(x + v0);
#pragma unroll
    for (int q = 0; q < kRun / 4; ++q) {
      const V w = p[q];
      it[4 * q] = w.x;
      it[4 * q + 1] = w.y;
      it[4 * q + 2] = w.z;
      it[4 * q + 3] = w.w;
    }
    return;
  }
#pragma unroll
  for (int r = 0; r < kRun; ++r) it[r] = v0 + r < n ? x[v0 + r] : T{};
}

// Floats a run takes in the striped loads' staging buffer: padded by one
// 16-byte word, so the eight threads of a quarter-warp reading their runs'
// words hit eight different groups of banks.
constexpr int kStageRun = kRun + 4;
constexpr int kRunWords = kRun / 4;  // 16-byte words of a run

// A whole tile read in rows: word q * kThreads + t of the tile (a float4)
// goes to thread t in w[q], so each warp instruction moves one whole
// 512-byte row. Thread t's own run (the one pass's blocked arrangement)
// then comes through shared memory (runs_of_rows).
__device__ __forceinline__ void load_rows(const float *__restrict__ x,
                                          float4 (&w)[kRunWords]) {
  const auto *xr = reinterpret_cast<const float4 *>(x);
#pragma unroll
  for (int q = 0; q < kRunWords; ++q) w[q] = xr[q * kThreads + threadIdx.x];
}

// Hands the rows' words of a tile (load_rows) to their runs: thread t gets
// elements t * kRun .. in @p it. Called by every thread of the block.
__device__ __forceinline__ void runs_of_rows(const float4 (&w)[kRunWords],
                                             float (&it)[kRun]) {
  __shared__ float4 stage[kThreads * kStageRun / 4];
#pragma unroll
  for (int q = 0; q < kRunWords; ++q) {
    const int word = q * kThreads + static_cast<int>(threadIdx.x);
    stage[(word / kRunWords) * (kStageRun / 4) + word % kRunWords] = w[q];
  }
  __syncthreads();
#pragma unroll
  for (int q = 0; q < kRunWords; ++q) {
    const float4 v = stage[threadIdx.x * (kStageRun / 4) + q];
    it[4 * q] = v.x;
    it[4 * q + 1] = v.y;
    it[4 * q + 2] = v.z;
    it[4 * q + 3] = v.w;
  }
}

struct CompactOp {
  using Item = float;
  static constexpr bool kFlaggedOnly = true;
  const float *x;
  unsigned long long n;
  bool vec;  // x is 16-byte aligned
  Selector sel;
  uint32_t offset;
  int32_t *idx;
  float *val;
  unsigned long long cap;
  // Called by every thread of the block at once; the tile's base and so
  // the branch are block-uniform. A whole aligned tile is read in rows:
  // each thread's own four 16-byte words, 64 bytes apart per instruction,
  // left the pass at about 2.4 TB/s on an H200 (170 us for 100M floats).
  __device__ void load_run(unsigned long long v0, float (&it)[kRun]) const {
    const unsigned long long base = v0 - threadIdx.x * kRun;
    if (vec && base + kTile <= n) {
      float4 w[kRunWords];
      load_rows(x + base, w);
      runs_of_rows(w, it);
    } else {
      load_run4(x, n, vec, v0, it);
    }
  }
  __device__ float reload(unsigned long long v) const { return x[v]; }
  __device__ void flags(float it, bool &f1, bool &f2) const {
    sel.flags(it, f1, f2);
  }
  __device__ void emit(unsigned long long v, float it, bool f1, bool f2,
                       unsigned long long b1, unsigned long long b2) const {
    const unsigned long long pos = sel.slot(f1, f2, b1, b2);
    if (pos >= cap) return;  // not taken (~0) or past the capacity
    idx[pos] = static_cast<int32_t>(static_cast<uint32_t>(v) + offset);
    val[pos] = it;
  }
};

// Stores a run of kRun floats at x + v0 (n of them), as load_run4
// loaded it.
__device__ __forceinline__ void store_run4(float *__restrict__ x,
                                           unsigned long long n, bool vec,
                                           unsigned long long v0,
                                           const float (&it)[kRun]) {
  if (vec && v0 + kRun <= n) {
    float4 *p = reinterpret_cast<float4 *>(x + v0);
#pragma unroll
    for (int q = 0; q < kRun / 4; ++q)
      p[q] =
          make_float4(it[4 * q], it[4 * q + 1], it[4 * q + 2], it[4 * q + 3]);
    return;
  }
#pragma unroll
  for (int r = 0; r < kRun; ++r)
    if (v0 + r < n) x[v0 + r] = it[r];
}

// CompactOp over x += g: each run is added and stored back as it is loaded,
// so the accumulator is read once and written once for both.
struct AccumulateOp : CompactOp {
  float *xw;  // x, writable
  const float *g;
  unsigned long long *nonfinite;
  __device__ void load_run(unsigned long long v0, float (&it)[kRun]) const {
    unsigned bad = 0;
    // Called by every thread of the block at once; the tile's base and so
    // the branch are block-uniform.
    const unsigned long long base = v0 - threadIdx.x * kRun;
    if (vec && base + kTile <= n)
      add_striped(base, it, bad);
    else
      add_blocked(v0, it, bad);
    // One atomic per warp with a rejected sum.
    if (__any_sync(0xffffffffu, bad != 0)) {
      bad = __reduce_add_sync(0xffffffffu, bad);
      if ((threadIdx.x & 31) == 0) atomicAdd(nonfinite, bad);
    }
  }

  // A whole aligned tile: x and g read and x written in rows (load_rows),
  // then the sums handed to their runs (runs_of_rows). The blocked loads
  // (a thread's own 64 bytes, four words 64 bytes apart per instruction)
  // left the one pass at about 2.1 TB/s on an H200.
  __device__ void add_striped(unsigned long long base, float (&it)[kRun],
                              unsigned &bad) const {
    float4 a[kRunWords], b[kRunWords];
    load_rows(xw + base, a);
    load_rows(g + base, b);
    auto *xo = reinterpret_cast<float4 *>(xw + base);
#pragma unroll
    for (int q = 0; q < kRunWords; ++q) {
      a[q] = make_float4(
          add_or_keep(a[q].x, b[q].x, bad), add_or_keep(a[q].y, b[q].y, bad),
          add_or_keep(a[q].z, b[q].z, bad), add_or_keep(a[q].w, b[q].w, bad));
      xo[q * kThreads + threadIdx.x] = a[q];
    }
    runs_of_rows(a, it);
  }

  // The tile at the end of x, or x and g not both aligned: the thread's
  // own run.
  __device__ void add_blocked(unsigned long long v0, float (&it)[kRun],
                              unsigned &bad) const {
    float add[kRun];
    load_run4(static_cast<const float *>(xw), n, vec, v0, it);
    load_run4(g, n, vec, v0, add);
#pragma unroll
    for (int r = 0; r < kRun; ++r) it[r] = add_or_keep(it[r], add[r], bad);
    store_run4(xw, n, vec, v0, it);
  }
};

struct Pair {
  int32_t i;
  float v;
};

struct PairsOp {
  using Item = Pair;
  static constexpr bool kFlaggedOnly = true;
  const int32_t *idx;
  const float *val;
  unsigned long long m;
  bool vec;  // idx and val are 16-byte aligned
  Selector sel;
  int32_t *idx_out;
  float *val_out;
  unsigned long long cap;
  __device__ void load_run(unsigned long long v0, Pair (&it)[kRun]) const {
    int32_t i[kRun];
    float v[kRun];
    load_run4(idx, m, vec, v0, i);
    load_run4(val, m, vec, v0, v);
#pragma unroll
    for (int r = 0; r < kRun; ++r) it[r] = Pair{i[r], v[r]};
  }
  __device__ Pair reload(unsigned long long j) const {
    return Pair{idx[j], val[j]};
  }
  __device__ void flags(const Pair &it, bool &f1, bool &f2) const {
    sel.flags(it.v, f1, f2);
  }
  __device__ void emit(unsigned long long, const Pair &it, bool f1, bool f2,
                       unsigned long long b1, unsigned long long b2) const {
    const unsigned long long pos = sel.slot(f1, f2, b1, b2);
    if (pos >= cap) return;
    idx_out[pos] = it.i;
    val_out[pos] = it.v;
  }
};

// Copies the selected pairs from scratch to an output that aliases the
// input (the count is read on the device: no host round trip).
__global__ void copy_selected_kernel(const int32_t *__restrict__ si,
                                     const float *__restrict__ sv, int32_t *di,
                                     float *dv, const ulonglong2 *total,
                                     unsigned long long quota,
                                     unsigned long long cap) {
  const ulonglong2 t = *total;
  unsigned long long count = t.x + (t.y < quota ? t.y : quota);
  if (count > cap) count = cap;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       j < count; j += stride) {
    di[j] = si[j];
    dv[j] = sv[j];
  }
}

// merge_pairs. Elements [0, a_span) are list a (span-aligned), the rest list
// b. merge_bounds_kernel finds for every element the position of its index
// in the other list (lower bound, kept in lb); the tile passes flag class 2
// when the index occurs there. Then for strictly ascending lists
//   pos(a_i) = i + lb(a_i) - #matched a before i,
//   pos(b_j) = j + lb(b_j) - #matched b before j   (matched b_j are skipped:
//                                                   a_i carries va + vb).
struct MergeSide {
  const int32_t *key;
  const float *val;
  unsigned long long n;
};

struct MergeItem {
  int32_t key;
  uint32_t lb;  // lower bound of key in the other list
  bool matched;
};

// The count pass's op; the write pass's adds the output.
struct MergeBase {
  using Item = MergeItem;
  MergeSide a, b;
  unsigned long long a_span;
  uint32_t *lb;  // na + nb lower bounds
  // Which list v is in and where; field-wise selects, no pointer into the
  // kernel parameters (which would copy them to local memory).
  __device__ bool in_a(unsigned long long v) const { return v < a_span; }
  __device__ unsigned long long pos(unsigned long long v) const {
    return in_a(v) ? v : v - a_span;
  }
  __device__ unsigned long long lb_slot(unsigned long long v) const {
    return in_a(v) ? v : a.n + (v - a_span);
  }
  __device__ bool locate(unsigned long long v, MergeItem &it) const {
    const unsigned long long p = pos(v);
    if (p >= (in_a(v) ? a.n : b.n)) return false;
    it.key = (in_a(v) ? a.key : b.key)[p];
    return true;
  }
  __device__ bool match(unsigned long long v, const MergeItem &it) const {
    const unsigned long long on = in_a(v) ? b.n : a.n;
    return it.lb < on && (in_a(v) ? b.key : a.key)[it.lb] == it.key;
  }
  __device__ void flags(const MergeItem &it, bool &f1, bool &f2) const {
    f1 = false;
    f2 = it.matched;
  }
  __device__ bool load(unsigned long long v, MergeItem &it) const {
    if (!locate(v, it)) return false;
    it.lb = lb[lb_slot(v)];
    it.matched = match(v, it);
    return true;
  }
};

// The lower bounds, one thread per entry. A binary search is a chain of
// dependent loads, so the searches need all the threads the device holds:
// done inside the count pass when a warp walked a whole tile, each thread
// ran 128 of them back to back, and Ok-Topk at P = 4 (n = 27.5M, three
// merges a call) took 2.3 ms a call on 4 H200s against 1.6 before.
__global__ void __launch_bounds__(kThreads)
    merge_bounds_kernel(MergeSide a, MergeSide b, uint32_t *__restrict__ lb) {
  const unsigned long long total = a.n + b.n;
  const unsigned long long stride =
      static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (unsigned long long i =
           static_cast<unsigned long long>(blockIdx.x) * blockDim.x +
           threadIdx.x;
       i < total; i += stride) {
    const bool in_a = i < a.n;
    const int32_t key = in_a ? a.key[i] : b.key[i - a.n];
    lb[i] = static_cast<uint32_t>(in_a ? lower_bound_i32(b.key, b.n, key)
                                       : lower_bound_i32(a.key, a.n, key));
  }
}

struct MergeWriteOp : MergeBase {
  static constexpr bool kFlaggedOnly = false;  // every element is written
  const ulonglong2 *offs;  // offs[a_spans].y: matched entries of a
  unsigned long long a_spans;
  int32_t *io;
  float *vo;
  unsigned long long cap;
  __device__ void emit(unsigned long long v, const MergeItem &it, bool, bool,
                       unsigned long long, unsigned long long b2) const {
    const bool is_a = in_a(v);
    if (!is_a && it.matched) return;  // carried by its partner in a
    const unsigned long long before =
        is_a ? b2 : b2 - offs[a_spans].y;  // matched before, same list
    const unsigned long long p = pos(v);
    const unsigned long long at = p + it.lb - before;
    if (at >= cap) return;
    float val = (is_a ? a.val : b.val)[p];
    // va + vb (the add is commutative, so the order only documents intent).
    if (it.matched) val = __fadd_rn(val, b.val[it.lb]);
    io[at] = it.key;
    vo[at] = val;
  }
};

int64_t selected_count(ulonglong2 t, unsigned long long quota) {
  return static_cast<int64_t>(t.x + (t.y < quota ? t.y : quota));
}

// An empty input selects nothing: a planned count must be 0 (ops.h).
int none_selected(size_t cap, int64_t *count_host) {
  if (count_host == nullptr) return cap == 0 ? PGS_OK : PGS_ERR_INVALID;
  *count_host = 0;
  return PGS_OK;
}

// Where the caller planned the count (no count pointer), the pass itself
// checks it on the device (no host wait): exactly @p cap entries.
void plan_check(Ctx *c, OnceScratch *os, unsigned long long quota, size_t cap,
                const int64_t *count_host) {
  if (count_host != nullptr) return;
  os->check.err = static_cast<unsigned *>(c->err_dev.ptr);
  os->check.quota = quota;
  os->check.expect = cap;
}

// The count of a selection whose totals lie at @p total: read back, or,
// when the caller planned it (no count pointer), checked on the device.
int finish_selection(Ctx *c, const ulonglong2 *total, unsigned long long quota,
                     size_t cap, int64_t *count_host) {
  if (count_host == nullptr) {  // the pass checked it (plan_check)
    c->err_pending = true;
    return PGS_OK;
  }
  void *host = nullptr;
  PGS_RETURN_IF(read_back(c, total, sizeof(ulonglong2), &host));
  const int64_t count =
      selected_count(*static_cast<const ulonglong2 *>(host), quota);
  *count_host = count;
  return static_cast<uint64_t>(count) > cap ? PGS_ERR_OVERFLOW : PGS_OK;
}

}  // namespace

// ---- entry points ---------------------------------------------------------

size_t compact_scratch_bytes(size_t n) {
  Carve measure(nullptr);
  OnceScratch os;
  os.carve(measure, tiles_for(n));
  return measure.bytes();
}

int accumulate_compact_queue(Ctx *c, float *x, const float *g, size_t n,
                             float thr, int32_t *idx, float *val, size_t cap,
                             void *scratch, unsigned long long *nonfinite,
                             ulonglong2 *total_at, const ulonglong2 **total,
                             unsigned long long *zero, unsigned zero_words) {
  const unsigned long long ntiles = tiles_for(n);
  Carve cv(scratch);
  OnceScratch os;
  os.carve(cv, ntiles);
  if (total_at != nullptr) os.total = total_at;
  os.zero = zero;
  os.zero_words = zero_words;
  AccumulateOp op;
  static_cast<CompactOp &>(op) = CompactOp{
      x,   n,  aligned16(x) && aligned16(g), make_selector(thr, -1), 0u, idx,
      val, cap};
  op.xw = x;
  op.g = g;
  op.nonfinite = nonfinite;
  PGS_RETURN_IF(tile_select_once(c, ntiles, op, os));
  *total = os.total;
  return PGS_OK;
}

int compact(const pgs_ops_t *ops, const float *x, size_t n, float thr,
            int64_t eq_quota, int32_t idx_offset, int32_t *idx, float *val,
            size_t cap, int64_t *count_host) {
  if (x == nullptr && n > 0) return PGS_ERR_INVALID;
  if ((idx == nullptr || val == nullptr) && cap > 0) return PGS_ERR_INVALID;
  if (idx_offset < 0) return PGS_ERR_INVALID;
  if (n > 0 && static_cast<uint64_t>(idx_offset) + (n - 1) >
                   static_cast<uint64_t>(INT32_MAX))
    return PGS_ERR_UNSUPPORTED;
  if (n == 0) return none_selected(cap, count_host);
  PGS_ENTER(ops, c);
  const Selector sel = make_selector(thr, eq_quota);
  OnceScratch os;
  plan_check(c, &os, sel.quota, cap, count_host);
  const ulonglong2 *total = nullptr;
  if (sel.quota >= n) {  // every tie: no look-back needed (compact_mask_cuda)
    PGS_RETURN_IF(compact_by_mask(c, x, n, MaskRule{sel.gt, sel.eq}, nullptr,
                                  static_cast<uint32_t>(idx_offset), idx, val,
                                  cap, os.check, nullptr, &total));
    return finish_selection(c, total, sel.quota, cap, count_host);
  }
  const unsigned long long ntiles = tiles_for(n);
  Carve measure(nullptr);
  os.carve(measure, ntiles);
  PGS_RETURN_IF(ensure_device(&c->work, measure.bytes()));
  Carve cv(c->work.ptr);
  os.carve(cv, ntiles);
  const CompactOp op{
      x,   n,   aligned16(x), sel, static_cast<uint32_t>(idx_offset),
      idx, val, cap};
  PGS_RETURN_IF(tile_select_once(c, ntiles, op, os));
  return finish_selection(c, os.total, sel.quota, cap, count_host);
}

int select_pairs(const pgs_ops_t *ops, const int32_t *idx, const float *val,
                 size_t m, float thr, int64_t eq_quota, int32_t *idx_out,
                 float *val_out, size_t cap, int64_t *count_host) {
  if ((idx == nullptr || val == nullptr) && m > 0) return PGS_ERR_INVALID;
  if ((idx_out == nullptr || val_out == nullptr) && cap > 0)
    return PGS_ERR_INVALID;
  if (m == 0) return none_selected(cap, count_host);
  PGS_ENTER(ops, c);
  const unsigned long long ntiles = tiles_for(m);
  const size_t out_n = cap < m ? cap : m;  // never more than m are selected
  // An output overlapping the input goes through scratch: blocks of later
  // tiles would otherwise overwrite pairs earlier tiles have not read yet.
  const bool alias = overlaps(idx_out, out_n * 4, idx, m * 4) ||
                     overlaps(idx_out, out_n * 4, val, m * 4) ||
                     overlaps(val_out, out_n * 4, idx, m * 4) ||
                     overlaps(val_out, out_n * 4, val, m * 4);
  OnceScratch os;
  int32_t *si = nullptr;
  float *sv = nullptr;
  Carve measure(nullptr);
  os.carve(measure, ntiles);
  if (alias) {
    measure.take<int32_t>(out_n);
    measure.take<float>(out_n);
  }
  PGS_RETURN_IF(ensure_device(&c->work, measure.bytes()));
  Carve cv(c->work.ptr);
  os.carve(cv, ntiles);
  if (alias) {
    si = cv.take<int32_t>(out_n);
    sv = cv.take<float>(out_n);
  }
  const Selector sel = make_selector(thr, eq_quota);
  const PairsOp op{idx,
                   val,
                   m,
                   aligned16(idx) && aligned16(val),
                   sel,
                   alias ? si : idx_out,
                   alias ? sv : val_out,
                   cap};
  plan_check(c, &os, sel.quota, cap, count_host);
  PGS_RETURN_IF(tile_select_once(c, ntiles, op, os));
  if (alias && out_n > 0) {
    copy_selected_kernel<<<grid_for(c, copy_selected_kernel, out_n, 4),
                           kThreads, 0, c->stream>>>(si, sv, idx_out, val_out,
                                                     os.total, sel.quota, cap);
    PGS_LAUNCHED();
  }
  return finish_selection(c, os.total, sel.quota, cap, count_host);
}

int merge_pairs(const pgs_ops_t *ops, const int32_t *ia, const float *va,
                size_t na, const int32_t *ib, const float *vb, size_t nb,
                int32_t *io, float *vo, size_t cap, int64_t *count_host) {
  if (count_host == nullptr) return PGS_ERR_INVALID;
  if ((ia == nullptr || va == nullptr) && na > 0) return PGS_ERR_INVALID;
  if ((ib == nullptr || vb == nullptr) && nb > 0) return PGS_ERR_INVALID;
  if ((io == nullptr || vo == nullptr) && cap > 0) return PGS_ERR_INVALID;
  if (na + nb == 0) {
    *count_host = 0;
    return PGS_OK;
  }
  if (na > UINT32_MAX || nb > UINT32_MAX) return PGS_ERR_UNSUPPORTED;
  PGS_ENTER(ops, c);
  const unsigned long long a_spans = spans_for(na);
  const unsigned long long nspans = a_spans + spans_for(nb);
  SpanScratch ss;
  Carve measure(nullptr);
  ss.carve(measure, nspans);
  measure.take<uint32_t>(na + nb);
  PGS_RETURN_IF(ensure_device(&c->work, measure.bytes()));
  Carve cv(c->work.ptr);
  ss.carve(cv, nspans);
  uint32_t *lb = cv.take<uint32_t>(na + nb);
  MergeBase count_op;
  count_op.a = MergeSide{ia, va, na};
  count_op.b = MergeSide{ib, vb, nb};
  count_op.a_span = a_spans * kWarpSpan;
  count_op.lb = lb;
  MergeWriteOp write_op;
  static_cast<MergeBase &>(write_op) = count_op;
  write_op.offs = ss.offs;
  write_op.a_spans = a_spans;
  write_op.io = io;
  write_op.vo = vo;
  write_op.cap = cap;
  merge_bounds_kernel<<<grid_for(c, merge_bounds_kernel, na + nb, 1), kThreads,
                        0, c->stream>>>(count_op.a, count_op.b, lb);
  PGS_LAUNCHED();
  PGS_RETURN_IF(span_select(c, nspans, count_op, write_op, ss));
  void *host = nullptr;
  PGS_RETURN_IF(read_back(c, ss.offs + a_spans, sizeof(ulonglong2), &host));
  // Entries of a found in b: the union is na + nb minus those.
  const unsigned long long common = static_cast<const ulonglong2 *>(host)->y;
  const int64_t count = static_cast<int64_t>(na + nb - common);
  *count_host = count;
  return static_cast<uint64_t>(count) > cap ? PGS_ERR_OVERFLOW : PGS_OK;
}

}  // namespace pgs_cuda
