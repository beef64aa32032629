// Ordered selection over tiles and spans: the engine of compact,
// select_pairs and merge_pairs.
//
// Elements carry up to two flags (class 1 and class 2, e.g. |x| > thr and
// |x| == thr). Every element is given the number of flagged elements of
// each class before it in index order, in one of two forms.
//
// One pass (tile_select_once; compact, select_pairs): one block per tile,
// each warp holding one span of the tile in registers; the tile's "before"
// counts come from CUB's decoupled look-back over the tiles before it
// (cub::TilePrefixCallbackOp), so the input is read once, by one kernel
// after a small one that resets the tile states.
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
//   bool load(unsigned long long v, Item &it) const;  // false: no element v
//   void flags(const Item &it, bool &f1, bool &f2) const;
//   void emit(unsigned long long v, const Item &it, bool f1, bool f2,
//             unsigned long long before1, unsigned long long before2) const;
//   static constexpr bool kFlaggedOnly;  // emit writes nothing unflagged
// (the write kernel then calls it for flagged elements only)
// where v is the element's position in [0, ntiles * kTile).
#ifndef PG_SPARSE_CUDA_TILE_SELECT_CUH
#define PG_SPARSE_CUDA_TILE_SELECT_CUH

#include <cub/agent/single_pass_scan_operators.cuh>
#include <cub/block/block_scan.cuh>
#include <cuda/std/functional>

#include "ops_cuda_internal.cuh"

namespace pgs_cuda {

constexpr int kTileRows = 16;
constexpr int kTileWarps = kThreads / 32;
constexpr unsigned long long kTile =
    static_cast<unsigned long long>(kThreads) * kTileRows;
constexpr int kWarpSpan = 32 * kTileRows;
constexpr int kScanThreads = 512;

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
// 350 ns, measured the same within noise on an H200.)
using TileDelay = cub::detail::fixed_delay_constructor_t<76, 1150>;
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

__global__ void tile_state_init_kernel(TileState state, int ntiles);

// Warp 0 of a tile's block: turns the warps' packed counts into exclusive
// prefixes within the tile (in place), takes the tile's prefix from the
// tiles before it (look-back; the first tile has none) and leaves it in
// *tile_before; the last tile also writes the totals.
__device__ __forceinline__ void tile_prefix(
    TileState &state, TilePrefix::TempStorage &tmp, int tile, bool last,
    unsigned long long (&warp_counts)[kTileWarps],
    unsigned long long *tile_before, ulonglong2 *total) {
  const int lane = threadIdx.x;
  const unsigned long long own = lane < kTileWarps ? warp_counts[lane] : 0ull;
  unsigned long long incl = own;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const unsigned long long t = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += t;
  }
  const unsigned long long agg = __shfl_sync(0xffffffffu, incl, 31);
  if (lane < kTileWarps) warp_counts[lane] = incl - own;
  unsigned long long before = 0;
  if (tile == 0) {
    if (lane == 0) state.SetInclusive(0, agg);
  } else {
    TilePrefix prefix(state, tmp, ::cuda::std::plus<>{}, tile);
    before = prefix(agg);  // valid in lane 0
  }
  if (lane == 0) {
    *tile_before = before;
    if (last) *total = unpack_counts(before + agg);
  }
}

// One block per tile, warp w holding span w: count, look back, emit. The
// tile is the three-pass form's (kTileWarps spans; larger ones measured
// slower on an H200, compaction of 100M floats: 8 warps 384 us, 16 warps
// 425 us, 32 warps 530 us; the three passes took 428 us).
template <class Op>
__global__ void __launch_bounds__(kThreads)
    tile_once_kernel(Op op, TileState state, int ntiles, ulonglong2 *total) {
  __shared__ TilePrefix::TempStorage prefix_tmp;
  __shared__ unsigned long long warp_counts[kTileWarps];
  __shared__ unsigned long long tile_before;
  const int tile = static_cast<int>(blockIdx.x);
  const int warp = static_cast<int>(threadIdx.x >> 5);
  typename Op::Item it[kTileRows];
  bool ok[kTileRows];
  const unsigned long long base = load_span(
      op, static_cast<unsigned long long>(tile) * kTileWarps + warp, it, ok);
  unsigned c1 = 0, c2 = 0;
  count_span(op, it, ok, c1, c2);
  c1 = __reduce_add_sync(0xffffffffu, c1);
  c2 = __reduce_add_sync(0xffffffffu, c2);
  if ((threadIdx.x & 31) == 0) warp_counts[warp] = pack_counts(c1, c2);
  __syncthreads();
  if (warp == 0)
    tile_prefix(state, prefix_tmp, tile, tile == ntiles - 1, warp_counts,
                &tile_before, total);
  __syncthreads();
  const ulonglong2 b = unpack_counts(tile_before + warp_counts[warp]);
  unsigned long long b1 = b.x, b2 = b.y;
  emit_rows(op, base, it, ok, b1, b2);
}

// Scratch of one single-pass selection: the tile states and the totals.
struct OnceScratch {
  void *states = nullptr;
  size_t state_bytes = 0;
  ulonglong2 *total = nullptr;
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
                           c->stream>>>(state, nt);
  PGS_LAUNCHED();
  tile_once_kernel<Op><<<nt, kThreads, 0, c->stream>>>(op, state, nt, s.total);
  PGS_LAUNCHED();
  return PGS_OK;
}

}  // namespace pgs_cuda

#endif  // PG_SPARSE_CUDA_TILE_SELECT_CUH
