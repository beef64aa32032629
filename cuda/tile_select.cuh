// Ordered selection over tiles and spans: the engine of compact,
// select_pairs and merge_pairs.
//
// Elements carry up to two flags (class 1 and class 2, e.g. |x| > thr and
// |x| == thr). Every element is given the number of flagged elements of
// each class before it in index order, in one of two forms.
//
// One pass (tile_select_once; compact, select_pairs): one block per tile,
// each thread holding a run of consecutive elements in registers; the
// tile's "before" counts come from CUB's decoupled look-back over the tiles
// before it (cub::TilePrefixCallbackOp), so the input is read once, by one
// kernel after a small one that resets the tile states.
//
// Three passes over spans of 512 elements (span_select; merge_pairs, whose
// write pass needs a total that a single pass cannot give it):
//   1. span_count_kernel: per span, the two flag counts;
//   2. span_scan_kernel: one block scans the span counts (exclusive), and
//      offs[nspans] holds the totals;
//   3. span_write_kernel: each span recomputes its flags, ranks them with
//      warp ballots and hands each element its two "before" counts, from
//      which the op computes an output position (ties beyond a quota,
//      capacity, index order: all exact and deterministic).
//
// A tile is kTileWarps spans; span w of tile t holds elements
// t*4096 + w*512 + r*32 + lane for rows r < 16, every row one coalesced
// 128-byte load and one ballot per class. In the three passes one warp
// takes one span: merge_pairs' loads are dependent (an index, then the
// other list at its lower bound), so its lists of a few hundred thousand
// pairs need a warp per span to keep enough loads in flight (with a warp
// per whole tile, Ok-Topk's P = 4 call on 4 H200s took 1.81-1.83 ms, per
// span 1.43-1.48; n = 27.5M, density 0.01).
//
// An Op provides:
//   using Item = ...;
//   void flags(const Item &it, bool &f1, bool &f2) const;
//   void emit(unsigned long long v, const Item &it, bool f1, bool f2,
//             unsigned long long before1, unsigned long long before2) const;
//   static constexpr bool kFlaggedOnly;  // emit writes nothing unflagged
// (the write calls it for flagged elements only), where v is the element's
// position in [0, ntiles * kTile); and for its form
//   bool load(unsigned long long v, Item &it) const;  // spans; false: no v
//   void load_run(unsigned long long v0, Item (&it)[kRun]) const;
//   Item reload(unsigned long long v) const;
//     // one pass: elements v0.. (past the end an item that no flag takes),
//     // and a flagged element again for its emit
#ifndef PG_SPARSE_CUDA_TILE_SELECT_CUH
#define PG_SPARSE_CUDA_TILE_SELECT_CUH

#include <cub/agent/single_pass_scan_operators.cuh>
#include <cub/block/block_scan.cuh>
#include <cuda/std/functional>

#include "ops_cuda_internal.cuh"

namespace pgs_cuda {

constexpr int kTileRows = 16;
constexpr int kTileWarps = kThreads / 32;
constexpr int kWarpSpan = 32 * kTileRows;
constexpr int kScanThreads = 512;

// The one pass: a thread's run of consecutive elements (one bit each in a
// 32-bit mask), and a block's tile. Measured on an H200 (compaction of 100M
// floats at density 0.01): runs of 16 in blocks of 256 threads 187-191 us;
// runs of 32 in 512 threads 199, runs of 8 in 512 400, runs of 16 in 512
// or 1024 threads 228-251. With the loads in rows (stop 42): 256 threads
// 180-182 us, 128 threads 196-199.
constexpr int kRun = 16;
constexpr unsigned long long kTile =
    static_cast<unsigned long long>(kThreads) * kRun;

inline unsigned long long tiles_for(unsigned long long n) {
  return (n + kTile - 1) / kTile;
}

inline unsigned long long spans_for(unsigned long long n) {
  return (n + kWarpSpan - 1) / kWarpSpan;
}

// The first span of this warp, and the step to its next one: spans go to
// the grid's warps in turn.
__device__ __forceinline__ unsigned long long first_span() {
  return static_cast<unsigned long long>(blockIdx.x) * kTileWarps +
         (threadIdx.x >> 5);
}
__device__ __forceinline__ unsigned long long span_step() {
  return static_cast<unsigned long long>(gridDim.x) * kTileWarps;
}

// Loads this lane's kTileRows elements of span s (span w of tile t is
// s = t * kTileWarps + w; ok[r]: whether element r exists).
template <class Op>
__device__ __forceinline__ unsigned long long load_span(
    const Op &op, unsigned long long s, typename Op::Item (&it)[kTileRows],
    bool (&ok)[kTileRows]) {
  const unsigned long long base = s * kWarpSpan + (threadIdx.x & 31);
#pragma unroll
  for (int r = 0; r < kTileRows; ++r) ok[r] = op.load(base + r * 32, it[r]);
  return base;
}

// Adds this lane's flags of a loaded span to its counts c1, c2.
template <class Op>
__device__ __forceinline__ void count_span(
    const Op &op, const typename Op::Item (&it)[kTileRows],
    const bool (&ok)[kTileRows], unsigned &c1, unsigned &c2) {
#pragma unroll
  for (int r = 0; r < kTileRows; ++r) {
    bool f1 = false, f2 = false;
    if (ok[r]) op.flags(it[r], f1, f2);
    c1 += f1;
    c2 += f2;
  }
}

// Hands each flagged element of a warp's loaded span (from load_span) its
// output through op.emit: the "before" counts b1, b2 run on through the
// rows in index order, ranked inside each row by the warp's ballots. Where
// the op writes flagged elements only, the others skip it (a row without a
// flag: the whole warp).
template <class Op>
__device__ __forceinline__ void emit_rows(
    const Op &op, unsigned long long base,
    const typename Op::Item (&it)[kTileRows], const bool (&ok)[kTileRows],
    unsigned long long &b1, unsigned long long &b2) {
  const unsigned lt = lanemask_lt();
#pragma unroll
  for (int r = 0; r < kTileRows; ++r) {
    bool f1 = false, f2 = false;
    if (ok[r]) op.flags(it[r], f1, f2);
    const unsigned m1 = __ballot_sync(0xffffffffu, f1);
    const unsigned m2 = __ballot_sync(0xffffffffu, f2);
    if (ok[r] && (!Op::kFlaggedOnly || f1 || f2))
      op.emit(base + r * 32, it[r], f1, f2, b1 + __popc(m1 & lt),
              b2 + __popc(m2 & lt));
    b1 += __popc(m1);
    b2 += __popc(m2);
  }
}

// One warp per span: its two flag counts, per lane and then across the
// warp once.
template <class Op>
__global__ void __launch_bounds__(kThreads)
    span_count_kernel(Op op, unsigned long long nspans, uint2 *counts) {
  for (unsigned long long s = first_span(); s < nspans; s += span_step()) {
    typename Op::Item it[kTileRows];
    bool ok[kTileRows];
    unsigned c1 = 0, c2 = 0;
    load_span(op, s, it, ok);
    count_span(op, it, ok, c1, c2);
    c1 = __reduce_add_sync(0xffffffffu, c1);
    c2 = __reduce_add_sync(0xffffffffu, c2);
    if ((threadIdx.x & 31) == 0) counts[s] = make_uint2(c1, c2);
  }
}

// Exclusive scan of the span counts by one block; offs[nspans] = totals.
__global__ void __launch_bounds__(kScanThreads)
    span_scan_kernel(const uint2 *__restrict__ counts,
                     unsigned long long nspans, ulonglong2 *__restrict__ offs);

// One warp per span, as span_count_kernel: the "before" counts run on from
// the span's offsets through its rows in index order.
template <class Op>
__global__ void __launch_bounds__(kThreads)
    span_write_kernel(Op op, unsigned long long nspans,
                      const ulonglong2 *__restrict__ offs) {
  for (unsigned long long s = first_span(); s < nspans; s += span_step()) {
    typename Op::Item it[kTileRows];
    bool ok[kTileRows];
    const ulonglong2 o = offs[s];
    unsigned long long b1 = o.x, b2 = o.y;
    const unsigned long long base = load_span(op, s, it, ok);
    emit_rows(op, base, it, ok, b1, b2);
  }
}

// Scratch of one three-pass selection over nspans spans.
struct SpanScratch {
  uint2 *counts = nullptr;
  ulonglong2 *offs = nullptr;  // nspans + 1
  void carve(Carve &cv, unsigned long long nspans) {
    counts = cv.take<uint2>(nspans);
    offs = cv.take<ulonglong2>(nspans + 1);
  }
};

// Queues the three kernels. count_op and write_op see the same elements.
template <class CountOp, class WriteOp>
int span_select(Ctx *c, unsigned long long nspans, const CountOp &count_op,
                const WriteOp &write_op, const SpanScratch &ss) {
  span_count_kernel<CountOp>
      <<<grid_for(c, span_count_kernel<CountOp>, nspans * kWarpSpan, kTileRows),
         kThreads, 0, c->stream>>>(count_op, nspans, ss.counts);
  PGS_LAUNCHED();
  span_scan_kernel<<<1, kScanThreads, 0, c->stream>>>(ss.counts, nspans,
                                                      ss.offs);
  PGS_LAUNCHED();
  span_write_kernel<WriteOp>
      <<<grid_for(c, span_write_kernel<WriteOp>, nspans * kWarpSpan, kTileRows),
         kThreads, 0, c->stream>>>(write_op, nspans, ss.offs);
  PGS_LAUNCHED();
  return PGS_OK;
}

// ---- one pass ---------------------------------------------------------

// The two class counts travel as one word, class 1 high and class 2 low:
// every count is at most 2^31 (int32 indices), so the halves add without a
// carry between them and CUB's one-word tile status (16-byte descriptors,
// written and read whole) carries both.
using TileState = cub::ScanTileState<unsigned long long>;
// The look-back waits as CUB's own select does on sm_90 (its tuning for
// 4-byte items): about 1.15 us once for the tile's partial to reach L2,
// then 76 ns between polls. (CUB's default for one-word states, 450 ns then
// 350 ns, measured the same within noise on an H200.) Both can be set when
// the library is configured (-DPGS_TILE_POLL_NS=..., -DPGS_TILE_L2_NS=... in
// CMAKE_CUDA_FLAGS), to measure what the waits cost. Compaction of 100M
// floats on an H200: 179-182 us as set here, 181 us at 350/350, 198-202
// us with no first wait (polls at 0 or 76 ns): the warps of a block wait at
// its barrier while one warp looks back (59% of the stalls, Nsight
// Compute), but waiting less there costs more than it saves.
#ifndef PGS_TILE_POLL_NS
#define PGS_TILE_POLL_NS 76
#endif
#ifndef PGS_TILE_L2_NS
#define PGS_TILE_L2_NS 1150
#endif
using TileDelay =
    cub::detail::fixed_delay_constructor_t<PGS_TILE_POLL_NS, PGS_TILE_L2_NS>;
using TilePrefix =
    cub::TilePrefixCallbackOp<unsigned long long, ::cuda::std::plus<>,
                              TileState, TileDelay>;

__device__ __forceinline__ unsigned long long pack_counts(unsigned c1,
                                                          unsigned c2) {
  return (static_cast<unsigned long long>(c1) << 32) | c2;
}
__device__ __forceinline__ ulonglong2 unpack_counts(unsigned long long w) {
  return make_ulonglong2(w >> 32, w & 0xffffffffull);
}

// Resets the tile states, and clears zero[0..zero_words): the counters a
// caller's pass adds into, without a memset of their own.
__global__ void tile_state_init_kernel(TileState state, int ntiles,
                                       unsigned long long *zero,
                                       unsigned zero_words);

// One block per tile, thread t holding the run of kRun consecutive
// elements tile * kTile + t * kRun + r (the blocked arrangement, as
// CUB's own select): its flags are two bit masks, so the "before" counts of
// a flagged element are the thread's exclusive prefix (one block scan of
// packed counts, with the look-back as its prefix) plus a popcount of the
// mask below it. Each element costs a compare and a bit: the striped form
// (warp w holding span w, two ballots and popcounts per row in the count
// and again in the write) was compute-bound on an H200, 344 us for 100M
// floats (Nsight Compute: SM 80.8%, DRAM 22.2%).
// A planned selection's check, made where the totals are known: the
// totals must give exactly @p expect entries (ties up to @p quota), or the
// pass sets kErrContract in *err (null: no check).
struct CountCheck {
  unsigned *err = nullptr;
  unsigned long long quota = 0, expect = 0;
};

template <class Op>
__global__ void __launch_bounds__(kThreads)
    tile_once_kernel(Op op, TileState state, int ntiles, ulonglong2 *total,
                     CountCheck check) {
  static_assert(Op::kFlaggedOnly, "the one pass emits flagged elements only");
  using BlockScan = cub::BlockScan<unsigned long long, kThreads>;
  __shared__ struct {
    typename BlockScan::TempStorage scan;
    TilePrefix::TempStorage prefix;
  } tmp;
  const int tile = static_cast<int>(blockIdx.x);
  const unsigned long long v0 =
      static_cast<unsigned long long>(tile) * kTile + threadIdx.x * kRun;
  typename Op::Item it[kRun];
  op.load_run(v0, it);
  unsigned m1 = 0, m2 = 0;  // bit r: element v0 + r is flagged
#pragma unroll
  for (int r = 0; r < kRun; ++r) {
    bool f1 = false, f2 = false;
    op.flags(it[r], f1, f2);
    m1 |= static_cast<unsigned>(f1) << r;
    m2 |= static_cast<unsigned>(f2) << r;
  }
  const unsigned long long own = pack_counts(__popc(m1), __popc(m2));
  unsigned long long before = 0;
  if (tile == 0) {
    unsigned long long agg = 0;
    BlockScan(tmp.scan).ExclusiveSum(own, before, agg);
    if (threadIdx.x == 0) state.SetInclusive(0, agg);
  } else {
    TilePrefix prefix(state, tmp.prefix, ::cuda::std::plus<>{}, tile);
    BlockScan(tmp.scan).ExclusiveScan(own, before, ::cuda::std::plus<>{},
                                      prefix);
  }
  if (tile == ntiles - 1 && threadIdx.x == kThreads - 1) {
    const ulonglong2 t = unpack_counts(before + own);
    *total = t;
    if (check.err != nullptr &&
        t.x + (t.y < check.quota ? t.y : check.quota) != check.expect)
      atomicOr(check.err, kErrContract);
  }
  // The few flagged elements, one at a time, lowest first, each read again
  // (from cache): with the items held through the scan and the run unrolled
  // a thread took 64-80 registers, with this loop 40, so six tiles are in
  // flight per multiprocessor, not three or four (100M floats on an H200:
  // 187-191 us; unrolled, read again 258-262; unrolled, held 286).
  const unsigned any = m1 | m2;
  if (any == 0) return;
  const ulonglong2 b = unpack_counts(before);
  for (unsigned left = any; left != 0; left &= left - 1) {
    const int r = __ffs(static_cast<int>(left)) - 1;
    const unsigned below = (1u << r) - 1u;
    op.emit(v0 + r, op.reload(v0 + r), ((m1 >> r) & 1u) != 0,
            ((m2 >> r) & 1u) != 0, b.x + __popc(m1 & below),
            b.y + __popc(m2 & below));
  }
}

// Scratch of one single-pass selection: the tile states and the totals.
struct OnceScratch {
  void *states = nullptr;
  size_t state_bytes = 0;
  ulonglong2 *total = nullptr;
  // Cleared by the reset kernel before the pass (may be null).
  unsigned long long *zero = nullptr;
  unsigned zero_words = 0;
  CountCheck check;  // a planned selection's, made by the pass itself
  void carve(Carve &cv, unsigned long long ntiles) {
    (void)TileState::AllocationSize(static_cast<int>(ntiles), state_bytes);
    states = cv.take<char>(state_bytes);
    total = cv.take<ulonglong2>(1);
  }
};

// Queues the single pass (and the reset of its tile states); the totals
// land in s.total. At most 2^31 elements, so ntiles fits an int.
template <class Op>
int tile_select_once(Ctx *c, unsigned long long ntiles, const Op &op,
                     const OnceScratch &s) {
  if (ntiles == 0 || ntiles > (1ull << 31) / kTile) return PGS_ERR_UNSUPPORTED;
  const int nt = static_cast<int>(ntiles);
  TileState state;
  PGS_CU(state.Init(nt, s.states, s.state_bytes));
  tile_state_init_kernel<<<(nt + kThreads - 1) / kThreads, kThreads, 0,
                           c->stream>>>(state, nt, s.zero, s.zero_words);
  PGS_LAUNCHED();
  tile_once_kernel<Op>
      <<<nt, kThreads, 0, c->stream>>>(op, state, nt, s.total, s.check);
  PGS_LAUNCHED();
  return PGS_OK;
}

}  // namespace pgs_cuda

#endif  // PG_SPARSE_CUDA_TILE_SELECT_CUH
