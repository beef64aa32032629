// Selection kernels of the CUDA ops table: threshold counts per region, the
// radix histograms of |x| and the exact k-th largest |x| by radix select.
//
// Everything orders |x| by the bits of the float with the sign cleared, as
// the host table does, so NaN sorts above Inf and denormals below every
// normal number, and both tables agree bit for bit.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cooperative_groups.h>

#include "ops_cuda_internal.cuh"

namespace pgs_cuda {
namespace {

// ---- count_regions --------------------------------------------------------

constexpr int kRegionItems = 16;
constexpr long long kRegionTile =
    static_cast<long long>(kThreads) * kRegionItems;

// Counts |x| > thr and |x| == thr (x != 0) per region into out[2j], out[2j+1].
// Each block takes a contiguous run of tiles. A tile inside one region adds
// into per-thread counters that are flushed (one block reduction, two
// atomics) only when the region changes; a tile across a boundary counts
// element by element with atomics (at most nreg - 1 such tiles).
template <class Bounds>
__global__ void __launch_bounds__(kThreads)
    count_regions_kernel(const float *__restrict__ x, Bounds bounds, int nreg,
                         float thr, unsigned long long *out) {
  using Reduce = cub::BlockReduce<unsigned long long, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const long long b0 = bounds[0], bn = bounds[nreg];
  const long long ntiles = (bn - b0 + kRegionTile - 1) / kRegionTile;
  const long long t0 = ntiles * blockIdx.x / gridDim.x;
  const long long t1 = ntiles * (blockIdx.x + 1) / gridDim.x;
  int cur = -1;
  unsigned long long gt = 0, eq = 0;
  auto flush = [&]() {
    const unsigned long long g = Reduce(tmp).Sum(gt);
    __syncthreads();
    const unsigned long long e = Reduce(tmp).Sum(eq);
    __syncthreads();
    if (threadIdx.x == 0) {
      if (g != 0) atomicAdd(out + 2 * cur, g);
      if (e != 0) atomicAdd(out + 2 * cur + 1, e);
    }
    gt = 0;
    eq = 0;
  };
  for (long long t = t0; t < t1; ++t) {
    const long long s = b0 + t * kRegionTile;
    const long long e = s + kRegionTile < bn ? s + kRegionTile : bn;
    const int rlo = region_of(bounds, 0, nreg - 1, s);
    const int rhi = region_of(bounds, rlo, nreg - 1, e - 1);
    float v[kRegionItems];
#pragma unroll
    for (int r = 0; r < kRegionItems; ++r) {
      const long long i = s + r * kThreads + threadIdx.x;
      v[r] = i < e ? x[i] : 0.0f;
    }
    if (rlo == rhi) {  // block-uniform
      if (rlo != cur) {
        if (cur >= 0) flush();
        cur = rlo;
      }
#pragma unroll
      for (int r = 0; r < kRegionItems; ++r) {
        const float a = fabsf(v[r]);
        gt += (a > thr) & (v[r] != 0.0f);
        eq += (a == thr) & (v[r] != 0.0f);
      }
    } else {
#pragma unroll
      for (int r = 0; r < kRegionItems; ++r) {
        const float a = fabsf(v[r]);
        const bool g = (a > thr) & (v[r] != 0.0f);
        const bool q = (a == thr) & (v[r] != 0.0f);
        if (g || q) {
          const long long i = s + r * kThreads + threadIdx.x;
          const int j = region_of(bounds, rlo, rhi, i);
          atomicAdd(out + 2 * j + (g ? 0 : 1), 1ull);
        }
      }
    }
  }
  if (cur >= 0) flush();
}

// ---- radix histograms -----------------------------------------------------

// Device state of one radix select (kth_abs); the last block of each
// histogram pass picks that level's bin into it, so the passes follow one
// another on the device and the host waits only once, for the answer.
struct RadixState {
  unsigned long long hist[PGS_HIST_LEVELS][PGS_HIST_BINS];
  unsigned long long rank;         // rank of the answer inside the prefix
  unsigned long long above;        // entries above the prefix so far
  unsigned long long cand_n;       // candidates in the buffer (mode 1)
  unsigned long long cand_cursor;  // append position while compacting
  unsigned prefix;                 // bits of the answer fixed so far
  int mode;                        // 0: passes read x; 1: the candidates
  int compact_next;                // the next pass also writes candidates
  int done;                        // answer known (thr, n_gt set)
  float thr;
  long long n_gt;
  unsigned finished[PGS_HIST_LEVELS];  // blocks done with each level's pass
};

// Shared sub-histograms: lanes use copy (lane & 7), rows padded to 257 so
// the copies of one bin sit in different banks. Real |x| clusters in a few
// exponent bins; the copies keep same-address atomics within a warp to four.
constexpr int kHistCopies = 8;
constexpr int kHistStride = PGS_HIST_BINS + 1;

// Elements per thread and chunk of the histogram passes, and the block's
// candidate staging buffer (room for two chunks: flushed when more than one
// chunk's worth is held).
constexpr int kHistItems = 16;
constexpr unsigned kHistChunk = kThreads * kHistItems;
constexpr unsigned kCandBuf = 2 * kHistChunk;

// Applies the pick of level @p level: bin @p b holds the k-th largest entry,
// @p above_b entries lie in the bins above it, @p nnz in all of them. As the
// host's pick_bin does, it then prepares the next pass: switch to the
// candidate list once one was written, and compact during the next pass
// when the chosen bin (@p hb entries) is small enough for the candidate
// buffer. Run by one thread of the last block of the level's pass (see
// radix_pick), with the candidate cursor that block staged from L2.
__device__ void radix_pick_apply(RadixState *st, int level,
                                 unsigned long long k,
                                 unsigned long long cand_cap, int b,
                                 unsigned long long above_b,
                                 unsigned long long nnz, unsigned long long hb,
                                 unsigned long long cursor) {
  unsigned long long rank = st->rank, above = st->above;
  if (level == 0) {
    if (k > nnz) {
      // The k-th largest is a zero; every nonzero lies above it.
      st->thr = 0.0f;
      st->n_gt = static_cast<long long>(nnz);
      st->done = 1;
      return;
    }
    rank = k;
    above = 0;
  }
  rank -= above_b;
  above += above_b;
  const unsigned prefix =
      st->prefix | (static_cast<unsigned>(b) << (24 - 8 * level));
  st->prefix = prefix;
  st->rank = rank;
  st->above = above;
  if (level == PGS_HIST_LEVELS - 1) {
    st->thr = __uint_as_float(prefix);
    st->n_gt = static_cast<long long>(above);
    st->done = 1;
    return;
  }
  if (st->compact_next) {  // the pass just done wrote the candidates
    st->mode = 1;
    // Never more than were written (the pass skips appends past the cap).
    st->cand_n = cursor < cand_cap ? cursor : cand_cap;
    st->compact_next = 0;
  } else if (st->mode == 0 && hb <= cand_cap) {
    st->compact_next = 1;
  }
}

// The level's bin (radix_pick, and every block of list_kth_kernel), found
// by the whole block at once where one thread walking 256 bins (twice at
// level 0) took microseconds a level: thread t holds bin 255 - t, an
// inclusive scan from the top gives each bin the count at and above it, and
// the bin is the highest whose count reaches the rank sought (bin 0 if none
// does, as the walk ends there).
static_assert(kThreads == PGS_HIST_BINS, "one thread per bin in the pick");
using PickScan = cub::BlockScan<unsigned long long, kThreads>;
struct PickTemp {
  typename PickScan::TempStorage scan;
  int bin;
  unsigned long long above, nnz;
};

__device__ void pick_scan(unsigned long long v, unsigned long long rank,
                          PickTemp &tmp) {
  const int b = PGS_HIST_BINS - 1 - static_cast<int>(threadIdx.x);
  unsigned long long incl = 0;
  PickScan(tmp.scan).InclusiveSum(v, incl);
  if (b == 0) {  // every bin counted: the total, and the walk's end
    tmp.nnz = incl;
    tmp.bin = 0;
    tmp.above = incl - v;
  }
  __syncthreads();
  if (b > 0 && incl - v < rank && incl >= rank) {  // at most one thread
    tmp.bin = b;
    tmp.above = incl - v;
  }
  __syncthreads();
}

__device__ void radix_pick(RadixState *st, int level, unsigned long long k,
                           unsigned long long cand_cap,
                           const unsigned long long *h,
                           unsigned long long cursor, PickTemp &tmp) {
  pick_scan(h[PGS_HIST_BINS - 1 - threadIdx.x], level == 0 ? k : st->rank, tmp);
  if (threadIdx.x == 0)
    radix_pick_apply(st, level, k, cand_cap, tmp.bin, tmp.above, tmp.nnz,
                     h[tmp.bin], cursor);
}

// Adds a block's shared sub-histograms (kHistCopies rows) into @p hist.
__device__ void add_sub_hists(const unsigned *sh, unsigned long long *hist) {
  for (int bin = threadIdx.x; bin < PGS_HIST_BINS; bin += blockDim.x) {
    unsigned sum = 0;
#pragma unroll
    for (int k = 0; k < kHistCopies; ++k) sum += sh[k * kHistStride + bin];
    if (sum != 0) atomicAdd(hist + bin, static_cast<unsigned long long>(sum));
  }
}

// One level's histogram of the bits of |x| over nonzero entries whose top
// 8*level bits equal the prefix, added into @p hist.
//
// With @p st (kth_abs) the prefix, the input and whether to compact come
// from the state: in mode 0 the pass reads x, in mode 1 the candidate list
// (bits of |x| that matched an earlier prefix). With COMPACT and the state's
// compact_next, the matching entries of x are also appended to @p cand_out,
// so the remaining levels read a short list instead of all of x. Appends are
// staged in shared memory (one shared atomic per warp and row) and flushed
// with one global atomic per 4096+ candidates: a global atomic per warp on
// one counter would serialise the whole pass.
//
// Each block takes chunks of kHistChunk consecutive entries (coalesced
// 4-byte loads, kHistItems in flight per thread), so every barrier is
// reached by the whole block.
template <bool COMPACT>
__global__ void __launch_bounds__(kThreads)
    radix_hist_kernel(const float *__restrict__ x, size_t n,
                      const uint32_t *cand, int level, uint32_t prefix,
                      unsigned long long *hist, RadixState *st,
                      uint32_t *cand_out, unsigned long long cand_cap,
                      unsigned long long k) {
  __shared__ unsigned sh[kHistCopies * kHistStride];
  __shared__ uint32_t buf[COMPACT ? kCandBuf : 1];
  __shared__ unsigned buf_n;
  __shared__ unsigned long long buf_base;
  __shared__ bool last;
  __shared__ unsigned long long level_hist[PGS_HIST_BINS];
  __shared__ unsigned long long cursor;
  __shared__ PickTemp pick;
  bool use_cand = false, compact = false;
  size_t m = n;
  if (st != nullptr) {
    if (st->done) return;  // block-uniform, before any barrier
    prefix = st->prefix;
    use_cand = st->mode != 0;
    compact = COMPACT && !use_cand && st->compact_next;
    if (use_cand) m = st->cand_n;
    hist = st->hist[level];
  }
  for (int i = threadIdx.x; i < kHistCopies * kHistStride; i += blockDim.x)
    sh[i] = 0;
  if (threadIdx.x == 0) buf_n = 0;
  __syncthreads();
  const uint32_t mask = level == 0 ? 0u : ~0u << (32 - 8 * level);
  const uint32_t want = prefix & mask;
  const unsigned shift = 24 - 8 * level;
  const unsigned lane = threadIdx.x & 31, lt = lanemask_lt();
  unsigned *mine = sh + (threadIdx.x & (kHistCopies - 1)) * kHistStride;

  // Writes the staged candidates out; called by the whole block.
  auto flush = [&]() {
    __syncthreads();
    if (threadIdx.x == 0)
      buf_base = buf_n != 0 ? atomicAdd(&st->cand_cursor,
                                        static_cast<unsigned long long>(buf_n))
                            : 0;
    __syncthreads();
    const unsigned cnt = buf_n;
    const unsigned long long base = buf_base;
    for (unsigned j = threadIdx.x; j < cnt; j += blockDim.x)
      if (base + j < cand_cap) cand_out[base + j] = buf[j];
    __syncthreads();
    if (threadIdx.x == 0) buf_n = 0;
    __syncthreads();
  };

  const size_t nchunks = (m + kHistChunk - 1) / kHistChunk;
  for (size_t ch = blockIdx.x; ch < nchunks; ch += gridDim.x) {
    const size_t s0 = ch * kHistChunk + threadIdx.x;
    uint32_t b[kHistItems];
#pragma unroll
    for (int r = 0; r < kHistItems; ++r) {
      const size_t i = s0 + static_cast<size_t>(r) * kThreads;
      b[r] = i >= m ? 0u : use_cand ? cand[i] : abs_bits(x[i]);
    }
#pragma unroll
    for (int r = 0; r < kHistItems; ++r) {
      const bool hit = b[r] != 0 && (b[r] & mask) == want;
      if (hit) atomicAdd(mine + ((b[r] >> shift) & 0xffu), 1u);
      if (COMPACT && compact) {
        const unsigned bal = __ballot_sync(0xffffffffu, hit);
        if (bal != 0) {  // warp-uniform
          const int leader = __ffs(bal) - 1;
          unsigned at = 0;
          if (lane == static_cast<unsigned>(leader))
            at = atomicAdd(&buf_n, static_cast<unsigned>(__popc(bal)));
          at = __shfl_sync(0xffffffffu, at, leader);
          if (hit) buf[at + __popc(bal & lt)] = b[r];
        }
      }
    }
    if (COMPACT && compact) {
      __syncthreads();
      if (buf_n > kCandBuf - kHistChunk) flush();  // block-uniform
    }
  }
  if (COMPACT && compact) flush();
  __syncthreads();
  add_sub_hists(sh, hist);
  if (st == nullptr) return;
  // The last block to finish picks the level's bin (no pick kernel): every
  // block's atomics are ordered before its ticket by the fence. It stages
  // the histogram in shared memory with parallel L2 loads, so the pick's
  // serial walk over the bins reads no global memory.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0)
    last = atomicAdd(&st->finished[level], 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;  // block-uniform
  __threadfence();
  for (int bin = threadIdx.x; bin < PGS_HIST_BINS; bin += blockDim.x)
    level_hist[bin] = __ldcg(hist + bin);
  if (threadIdx.x == 0) cursor = __ldcg(&st->cand_cursor);
  __syncthreads();
  radix_pick(st, level, k, cand_cap, level_hist, cursor, pick);
}

// ---- the candidate list's k-th: one cooperative kernel --------------------

// Entries per thread and pass that size the list kernel's grid (the list's
// length is known on the device only, so the grid is sized for its cap).
constexpr int kListItems = 16;

// One level's histogram of the list's bits under @p prefix (the top
// 8 * level bits fixed), this block's slice val[b0, b1) added into @p hist.
__device__ void list_level_hist(const float *val, unsigned long long b0,
                                unsigned long long b1, int level,
                                uint32_t prefix, unsigned *sh,
                                unsigned long long *hist) {
  for (int i = threadIdx.x; i < kHistCopies * kHistStride; i += blockDim.x)
    sh[i] = 0;
  __syncthreads();
  const uint32_t mask = level == 0 ? 0u : ~0u << (32 - 8 * level);
  const uint32_t want = prefix & mask;
  const unsigned shift = 24 - 8 * level;
  unsigned *mine = sh + (threadIdx.x & (kHistCopies - 1)) * kHistStride;
  for (unsigned long long i = b0 + threadIdx.x; i < b1; i += blockDim.x) {
    const uint32_t b = abs_bits(val[i]);
    if (b != 0 && (b & mask) == want)
      atomicAdd(mine + ((b >> shift) & 0xffu), 1u);
  }
  __syncthreads();
  add_sub_hists(sh, hist);
}

// This block's slice of the list counted per region above and at thr
// (nonzero values, as count_regions counts them). A thread's entries
// ascend, so its region changes at most nreg times: it counts in registers
// and adds to the block's counters at a change; a warp whose lanes all end
// in one region adds its last counts once.
__device__ void list_regions(const float *__restrict__ val,
                             unsigned long long b0, unsigned long long b1,
                             float thr, const ListRegions &reg,
                             unsigned long long *sh) {
  for (int j = threadIdx.x; j < 2 * reg.nreg; j += blockDim.x) sh[j] = 0;
  __syncthreads();
  int cur = -1;
  unsigned long long gt = 0, eq = 0;
  for (unsigned long long i = b0 + threadIdx.x; i < b1; i += blockDim.x) {
    const long long gi = reg.idx[i];
    if (gi < reg.keys[0] || gi >= reg.keys[reg.nreg]) continue;
    const int lo = region_of(reg.keys, 0, reg.nreg - 1, gi);
    if (lo != cur) {
      if (cur >= 0) {
        atomicAdd(&sh[2 * cur], gt);
        atomicAdd(&sh[2 * cur + 1], eq);
      }
      cur = lo;
      gt = eq = 0;
    }
    const float v = val[i], a = fabsf(v);
    gt += (a > thr) & (v != 0.0f);
    eq += (a == thr) & (v != 0.0f);
  }
  const int cur0 = __shfl_sync(0xffffffffu, cur, 0);
  if (__all_sync(0xffffffffu, cur == cur0)) {
    const unsigned g =
        __reduce_add_sync(0xffffffffu, static_cast<unsigned>(gt));
    const unsigned e =
        __reduce_add_sync(0xffffffffu, static_cast<unsigned>(eq));
    if ((threadIdx.x & 31) == 0 && cur >= 0) {
      atomicAdd(&sh[2 * cur], static_cast<unsigned long long>(g));
      atomicAdd(&sh[2 * cur + 1], static_cast<unsigned long long>(e));
    }
  } else if (cur >= 0) {
    atomicAdd(&sh[2 * cur], gt);
    atomicAdd(&sh[2 * cur + 1], eq);
  }
  __syncthreads();
  for (int j = threadIdx.x; j < 2 * reg.nreg; j += blockDim.x)
    if (sh[j] != 0) atomicAdd(&reg.counts[j], sh[j]);
}

// kth_list_queue's kernel, launched cooperatively: the four radix levels
// of the list's k-th with a grid barrier after each level's histogram (one
// launch, where a launch per level and two one-thread kernels cost about
// 47 us a call on an H200, each level waiting for its launch), then the
// regions' counts at the k-th. Each block takes one contiguous slice of
// the list for every pass.
__global__ void __launch_bounds__(kThreads)
    list_kth_kernel(const float *__restrict__ val, unsigned long long cap,
                    unsigned long long k, const ulonglong2 *total,
                    RadixState *st, ListRegions reg, FusedOut *out) {
  __shared__ unsigned sh[kHistCopies * kHistStride];
  __shared__ unsigned long long rsh[2 * (kParamBounds - 1)];
  __shared__ PickTemp pick;
  const unsigned long long mt = total->x + total->y;
  const bool whole = k >= 1 && mt >= k && mt <= cap;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    out->count = mt;
    if (!whole) {
      out->kth = -1.0f;
      out->n_gt = 0;
    }
  }
  if (!whole) return;  // grid-uniform, before any barrier
  if (blockIdx.x == 0 && threadIdx.x <= static_cast<unsigned>(reg.nreg) &&
      reg.nreg > 0)
    reg.pos[threadIdx.x] = static_cast<long long>(
        lower_bound_i32(reg.idx, mt, reg.keys[threadIdx.x]));
  const unsigned long long per = (mt + gridDim.x - 1) / gridDim.x;
  const unsigned long long b0 = per * blockIdx.x < mt ? per * blockIdx.x : mt;
  const unsigned long long b1 = b0 + per < mt ? b0 + per : mt;
  // The slice in shared memory for the four levels, where it fits (the
  // grid sized for the cap, not capped by the blocks resident): each level
  // reading it from L2 waited for every load in turn, about 5 us a level
  // (Nsight Compute at 4.2M: 21.5 us, 41 blocks, DRAM 0.35%).
  __shared__ float cache[kThreads * kListItems];
  const bool cached = b1 - b0 <= static_cast<unsigned long long>(kThreads) *
                                     kListItems;  // block-uniform
  const float *slice = val;
  unsigned long long s0 = b0, s1 = b1;
  if (cached) {
#pragma unroll
    for (int j = 0; j < kListItems; ++j) {
      const unsigned long long i = b0 + threadIdx.x + j * kThreads;
      if (i < b1) cache[threadIdx.x + j * kThreads] = val[i];
    }
    __syncthreads();
    slice = cache;
    s0 = 0;
    s1 = b1 - b0;
  }
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  uint32_t prefix = 0;
  unsigned long long rank = k, above = 0;
  float thr = 0.0f;
  bool done = false;
  for (int level = 0; level < PGS_HIST_LEVELS && !done; ++level) {
    list_level_hist(slice, s0, s1, level, prefix, sh, st->hist[level]);
    grid.sync();
    // Every block picks the level's bin from the grid's histogram itself,
    // so no block waits for another to publish it.
    pick_scan(__ldcg(st->hist[level] + PGS_HIST_BINS - 1 - threadIdx.x), rank,
              pick);
    if (level == 0 && k > pick.nnz) {
      // The k-th largest is a zero; every nonzero lies above it.
      above = pick.nnz;
      done = true;
    } else {
      rank -= pick.above;
      above += pick.above;
      prefix |= static_cast<uint32_t>(pick.bin) << (24 - 8 * level);
      thr = __uint_as_float(prefix);
    }
    __syncthreads();  // pick is rewritten by the next level
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    out->kth = thr;
    out->n_gt = static_cast<long long>(above);
  }
  if (reg.nreg > 0) list_regions(val, b0, b1, thr, reg, rsh);
}

// Candidate buffer of a radix select over n entries: up to n / 16 of the
// chosen bin's bits (at least 64K, at most n). Data whose bins are all
// larger falls back to full passes over x, as the host does.
size_t cand_cap_for(size_t n) {
  size_t cand_cap = n / 16;
  if (cand_cap < (size_t{1} << 16))
    cand_cap = n < (size_t{1} << 16) ? n : size_t{1} << 16;
  return cand_cap;
}

// The radix select's passes over x[0..n) (kth_abs),
// the answer left in *st.
int queue_radix(Ctx *c, const float *x, size_t n, size_t k, RadixState *st,
                uint32_t *cand, size_t cand_cap) {
  // Level 0 never compacts (the candidates are what it selects); the later
  // passes may, as each level's pick decides on the device.
  const unsigned grid0 = grid_for(c, radix_hist_kernel<false>, n, kHistItems);
  const unsigned grid1 = grid_for(c, radix_hist_kernel<true>, n, kHistItems);
  for (int level = 0; level < PGS_HIST_LEVELS; ++level) {
    if (level == 0)
      radix_hist_kernel<false><<<grid0, kThreads, 0, c->stream>>>(
          x, n, cand, level, 0u, nullptr, st, cand, cand_cap, k);
    else
      radix_hist_kernel<true><<<grid1, kThreads, 0, c->stream>>>(
          x, n, cand, level, 0u, nullptr, st, cand, cand_cap, k);
    PGS_LAUNCHED();
  }
  return PGS_OK;
}

// The per-region counts' kernel over bounds of either kind.
template <class Bounds>
int queue_count_regions(Ctx *c, const float *x, const Bounds &bounds, int nreg,
                        float thr, size_t span, unsigned long long *counts,
                        bool zeroed) {
  if (!zeroed)
    PGS_CU(cudaMemsetAsync(counts, 0, 2 * static_cast<size_t>(nreg) * 8,
                           c->stream));
  if (span == 0) return PGS_OK;
  const unsigned grid =
      grid_for(c, count_regions_kernel<Bounds>, span, kRegionItems);
  count_regions_kernel<Bounds>
      <<<grid, kThreads, 0, c->stream>>>(x, bounds, nreg, thr, counts);
  PGS_LAUNCHED();
  return PGS_OK;
}

}  // namespace

// ---- entry points ---------------------------------------------------------

static_assert(sizeof(RadixState) <= kFusedOutOffset,
              "the radix state ends before accumulate_kth's results");

int kth_list_queue(Ctx *c, const float *val, size_t cap, size_t k,
                   const ulonglong2 *total, const ListRegions &reg,
                   FusedOut *out) {
  auto *st = static_cast<RadixState *>(c->small.ptr);  // zeroed by the caller
  // At most the blocks resident at once (grid_for): a cooperative launch
  // needs every block on the device together, for the grid barriers.
  unsigned grid = grid_for(c, list_kth_kernel, cap, kListItems);
  unsigned long long cap_arg = cap, k_arg = k;
  ListRegions reg_arg = reg;
  void *args[] = {const_cast<float **>(&val),
                  &cap_arg,
                  &k_arg,
                  const_cast<ulonglong2 **>(&total),
                  &st,
                  &reg_arg,
                  &out};
  const auto *fn = reinterpret_cast<const void *>(list_kth_kernel);
  cudaError_t e =
      cudaLaunchCooperativeKernel(fn, grid, kThreads, args, 0, c->stream);
  // Where fewer blocks fit than the occupancy says (an MPS client limited
  // to part of the device), halve the grid: the kernel is exact with any.
  while (e == cudaErrorCooperativeLaunchTooLarge && grid > 1) {
    (void)cudaGetLastError();
    grid /= 2;
    e = cudaLaunchCooperativeKernel(fn, grid, kThreads, args, 0, c->stream);
  }
  PGS_CU(e);
  return PGS_OK;
}

int count_regions_launch(Ctx *c, const float *x, const long long *dbounds,
                         int nreg, float thr, size_t span,
                         unsigned long long *counts, bool zeroed) {
  return queue_count_regions(c, x, dbounds, nreg, thr, span, counts, zeroed);
}

int count_regions(const pgs_ops_t *ops, const float *x, size_t n,
                  const int64_t *bounds_host, int nreg, float thr,
                  int64_t *n_gt_host, int64_t *n_eq_host) {
  if (nreg < 0 || bounds_host == nullptr) return PGS_ERR_INVALID;
  if (nreg > 0 && (n_gt_host == nullptr || n_eq_host == nullptr))
    return PGS_ERR_INVALID;
  if (bounds_host[0] < 0 ||
      static_cast<uint64_t>(bounds_host[nreg]) > static_cast<uint64_t>(n))
    return PGS_ERR_INVALID;
  for (int j = 0; j < nreg; ++j)
    if (bounds_host[j + 1] < bounds_host[j]) return PGS_ERR_INVALID;
  if (x == nullptr && bounds_host[nreg] > bounds_host[0])
    return PGS_ERR_INVALID;
  if (nreg == 0) return PGS_OK;
  if (bounds_host[nreg] == bounds_host[0]) {
    for (int j = 0; j < nreg; ++j) n_gt_host[j] = n_eq_host[j] = 0;
    return PGS_OK;
  }
  PGS_ENTER(ops, c);
  // small: the 2 * nreg counters, then the nreg + 1 bounds.
  const size_t cnt_bytes = 2 * static_cast<size_t>(nreg) * 8;
  const size_t bnd_off = (cnt_bytes + 255) & ~static_cast<size_t>(255);
  const size_t bnd_bytes = (static_cast<size_t>(nreg) + 1) * 8;
  PGS_RETURN_IF(ensure_device(&c->small, bnd_off + bnd_bytes));
  PGS_RETURN_IF(ensure_pinned(&c->pinned, bnd_off + bnd_bytes));
  char *dsmall = static_cast<char *>(c->small.ptr);
  auto *counts = reinterpret_cast<unsigned long long *>(dsmall);
  const size_t total = static_cast<size_t>(bounds_host[nreg] - bounds_host[0]);
  if (nreg < kParamBounds) {
    // Few regions (a rank's P): the bounds ride in the kernel's parameters,
    // no copy to the device first.
    ParamBounds pb{};
    for (int j = 0; j <= nreg; ++j) pb.b[j] = bounds_host[j];
    PGS_RETURN_IF(
        queue_count_regions(c, x, pb, nreg, thr, total, counts, false));
  } else {
    // Bounds travel through the pinned buffer (past the region read back).
    auto *dbounds = reinterpret_cast<long long *>(dsmall + bnd_off);
    char *pin = static_cast<char *>(c->pinned.ptr);
    memcpy(pin + bnd_off, bounds_host, bnd_bytes);
    PGS_CU(cudaMemcpyAsync(dbounds, pin + bnd_off, bnd_bytes,
                           cudaMemcpyHostToDevice, c->stream));
    PGS_RETURN_IF(queue_count_regions(c, x,
                                      static_cast<const long long *>(dbounds),
                                      nreg, thr, total, counts, false));
  }
  void *host = nullptr;
  PGS_RETURN_IF(read_back(c, counts, cnt_bytes, &host));
  const auto *h = static_cast<const unsigned long long *>(host);
  for (int j = 0; j < nreg; ++j) {
    n_gt_host[j] = static_cast<int64_t>(h[2 * j]);
    n_eq_host[j] = static_cast<int64_t>(h[2 * j + 1]);
  }
  return PGS_OK;
}

int kth_abs(const pgs_ops_t *ops, const float *x, size_t n, size_t k,
            float *thr, int64_t *n_gt) {
  if (thr == nullptr || n_gt == nullptr || x == nullptr) return PGS_ERR_INVALID;
  if (k < 1 || k > n) return PGS_ERR_INVALID;
  if (n > static_cast<size_t>(INT64_MAX)) return PGS_ERR_UNSUPPORTED;
  PGS_ENTER(ops, c);
  static_assert(sizeof(RadixState) <= 64 * 1024, "radix state fits small");
  auto *st = static_cast<RadixState *>(c->small.ptr);
  const size_t cand_cap = cand_cap_for(n);
  PGS_RETURN_IF(ensure_device(&c->work, cand_cap * sizeof(uint32_t)));
  auto *cand = static_cast<uint32_t *>(c->work.ptr);
  PGS_CU(cudaMemsetAsync(st, 0, sizeof(RadixState), c->stream));
  PGS_RETURN_IF(queue_radix(c, x, n, k, st, cand, cand_cap));
  void *host = nullptr;
  PGS_RETURN_IF(
      read_back(c, &st->thr, sizeof(float) + 4 + sizeof(long long), &host));
  // thr at offset 0, n_gt at offset 8 (RadixState layout).
  const char *h = static_cast<const char *>(host);
  static_assert(offsetof(RadixState, n_gt) - offsetof(RadixState, thr) == 8,
                "thr and n_gt are read back together");
  memcpy(thr, h, sizeof(float));
  long long g = 0;
  memcpy(&g, h + 8, sizeof g);
  *n_gt = static_cast<int64_t>(g);
  return PGS_OK;
}

int hist_abs(const pgs_ops_t *ops, const float *x, size_t n, int level,
             uint32_t prefix, int64_t *hist_host) {
  if (hist_host == nullptr || (x == nullptr && n > 0)) return PGS_ERR_INVALID;
  if (level < 0 || level >= PGS_HIST_LEVELS) return PGS_ERR_INVALID;
  if (n == 0) return PGS_OK;
  PGS_ENTER(ops, c);
  auto *dh = static_cast<unsigned long long *>(c->small.ptr);
  PGS_CU(cudaMemsetAsync(dh, 0, PGS_HIST_BINS * 8, c->stream));
  radix_hist_kernel<false>
      <<<grid_for(c, radix_hist_kernel<false>, n, kHistItems), kThreads, 0,
         c->stream>>>(x, n, nullptr, level, prefix, dh, nullptr, nullptr, 0, 0);
  PGS_LAUNCHED();
  void *host = nullptr;
  PGS_RETURN_IF(read_back(c, dh, PGS_HIST_BINS * 8, &host));
  const auto *h = static_cast<const unsigned long long *>(host);
  // Added to, not overwritten: callers sum partial histograms.
  for (int b = 0; b < PGS_HIST_BINS; ++b)
    hist_host[b] += static_cast<int64_t>(h[b]);
  return PGS_OK;
}

}  // namespace pgs_cuda
