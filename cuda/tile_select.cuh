// Ordered selection over tiles: the engine of compact, select_pairs and
// merge_pairs.
//
// Elements carry up to two flags (class 1 and class 2, e.g. |x| > thr and
// |x| == thr). Three kernels give every element the number of flagged
// elements of each class before it in index order:
//   1. tile_count_kernel: per tile of 4096 elements, the two flag counts;
//   2. tile_scan_kernel: one block scans the tile counts (exclusive), and
//      offs[ntiles] holds the totals;
//   3. tile_write_kernel: each tile recomputes its flags, ranks them inside
//      the tile with warp ballots and hands each element its two "before"
//      counts, from which the op computes an output position (ties beyond a
//      quota, capacity, index order: all exact and deterministic).
//
// One warp takes a whole tile: span w < 8 of it holds elements
// w*512 + r*32 + lane for rows r < 16, every row one coalesced 128-byte
// load and one ballot per class, and the warp walks the spans in order.
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

#include <cub/block/block_scan.cuh>

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

// The first tile of this warp, and the step to its next one: tiles go to
// the grid's warps in turn.
__device__ __forceinline__ unsigned long long first_tile() {
  return static_cast<unsigned long long>(blockIdx.x) * kTileWarps +
         (threadIdx.x >> 5);
}
__device__ __forceinline__ unsigned long long tile_step() {
  return static_cast<unsigned long long>(gridDim.x) * kTileWarps;
}

// Loads this lane's kTileRows elements of span w of tile t (ok[r]: whether
// element r exists).
template <class Op>
__device__ __forceinline__ unsigned long long load_span(
    const Op &op, unsigned long long t, int w,
    typename Op::Item (&it)[kTileRows], bool (&ok)[kTileRows]) {
  const unsigned long long base =
      t * kTile + w * kWarpSpan + (threadIdx.x & 31);
#pragma unroll
  for (int r = 0; r < kTileRows; ++r) ok[r] = op.load(base + r * 32, it[r]);
  return base;
}

// One warp per tile: the warp walks the tile's kTileWarps spans of
// kTileRows rows in index order, so no block barrier couples the warps of a
// block (the block-per-tile form, two barriers and a serial sum per tile,
// reached 31% of the memory bandwidth on an H200; ncu, n = 100M).
template <class Op>
__global__ void __launch_bounds__(kThreads)
    tile_count_kernel(Op op, unsigned long long ntiles, uint2 *counts) {
  const int lane = threadIdx.x & 31;
  for (unsigned long long t = first_tile(); t < ntiles; t += tile_step()) {
    unsigned c1 = 0, c2 = 0;
    for (int w = 0; w < kTileWarps; ++w) {
      typename Op::Item it[kTileRows];
      bool ok[kTileRows];
      load_span(op, t, w, it, ok);
#pragma unroll
      for (int r = 0; r < kTileRows; ++r) {
        bool f1 = false, f2 = false;
        if (ok[r]) op.flags(it[r], f1, f2);
        c1 += f1;
        c2 += f2;
      }
    }
    // Per lane, then across the warp once per tile.
    c1 = __reduce_add_sync(0xffffffffu, c1);
    c2 = __reduce_add_sync(0xffffffffu, c2);
    if (lane == 0) counts[t] = make_uint2(c1, c2);
  }
}

// Exclusive scan of the tile counts by one block; offs[ntiles] = totals.
__global__ void __launch_bounds__(kScanThreads)
    tile_scan_kernel(const uint2 *__restrict__ counts,
                     unsigned long long ntiles, ulonglong2 *__restrict__ offs);

// One warp per tile, as tile_count_kernel: the "before" counts run on
// from the tile's offsets through its spans and rows in index order.
template <class Op>
__global__ void __launch_bounds__(kThreads)
    tile_write_kernel(Op op, unsigned long long ntiles,
                      const ulonglong2 *__restrict__ offs) {
  const unsigned lt = lanemask_lt();
  for (unsigned long long t = first_tile(); t < ntiles; t += tile_step()) {
    const ulonglong2 o = offs[t];
    unsigned long long b1 = o.x, b2 = o.y;
    for (int w = 0; w < kTileWarps; ++w) {
      typename Op::Item it[kTileRows];
      bool ok[kTileRows];
      const unsigned long long base = load_span(op, t, w, it, ok);
#pragma unroll
      for (int r = 0; r < kTileRows; ++r) {
        bool f1 = false, f2 = false;
        if (ok[r]) op.flags(it[r], f1, f2);
        const unsigned m1 = __ballot_sync(0xffffffffu, f1);
        const unsigned m2 = __ballot_sync(0xffffffffu, f2);
        // Where the op writes flagged elements only, the others skip it
        // (a row without a flag: the whole warp).
        if (ok[r] && (!Op::kFlaggedOnly || f1 || f2))
          op.emit(base + r * 32, it[r], f1, f2, b1 + __popc(m1 & lt),
                  b2 + __popc(m2 & lt));
        b1 += __popc(m1);
        b2 += __popc(m2);
      }
    }
  }
}

// Scratch of one tile selection over ntiles tiles.
struct TileScratch {
  uint2 *counts = nullptr;
  ulonglong2 *offs = nullptr;  // ntiles + 1
  void carve(Carve &cv, unsigned long long ntiles) {
    counts = cv.take<uint2>(ntiles);
    offs = cv.take<ulonglong2>(ntiles + 1);
  }
};

// Queues the three kernels. count_op and write_op see the same elements.
template <class CountOp, class WriteOp>
int tile_select(Ctx *c, unsigned long long ntiles, const CountOp &count_op,
                const WriteOp &write_op, const TileScratch &ts) {
  // One tile per warp and step: a whole tile's rows per thread.
  constexpr size_t per_thread = static_cast<size_t>(kTileRows) * kTileWarps;
  tile_count_kernel<CountOp>
      <<<grid_for(c, tile_count_kernel<CountOp>, ntiles * kTile, per_thread),
         kThreads, 0, c->stream>>>(count_op, ntiles, ts.counts);
  PGS_LAUNCHED();
  tile_scan_kernel<<<1, kScanThreads, 0, c->stream>>>(ts.counts, ntiles,
                                                      ts.offs);
  PGS_LAUNCHED();
  tile_write_kernel<WriteOp>
      <<<grid_for(c, tile_write_kernel<WriteOp>, ntiles * kTile, per_thread),
         kThreads, 0, c->stream>>>(write_op, ntiles, ts.offs);
  PGS_LAUNCHED();
  return PGS_OK;
}

}  // namespace pgs_cuda

#endif  // PG_SPARSE_CUDA_TILE_SELECT_CUH
