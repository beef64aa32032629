// compact where every tie is taken, in two passes over x and a small scan
// between them (the form compact takes when no tie quota limits it):
//   1. mask_count_kernel reads x once and writes one bit per element (|x| >
//      thr, or == thr) and a count per chunk of kChunk elements;
//   2. CUB's DeviceScan turns the chunk counts into output offsets;
//   3. mask_write_kernel reads the bits (1/32 of x) and, for each set bit,
//      x again at that index (at density 0.01 about 8% of x's 32-byte
//      sectors), and writes the pair at its offset.
// Why not the one pass of tile_select.cuh: its decoupled look-back holds the
// warps of each block at a barrier while one warp waits for the tiles
// before it. Compacting 104.9M floats at density 0.01 on an H200 took
// 176-179 us there (1.69 reads of x), of which about 33 us were the
// look-back and the block scans (stop 47, docs/bench/estimators-cuda/).
// Here no block waits for another; pass 1 is a plain streaming read.
#include <cub/device/device_scan.cuh>

#include "compact_mask_cuda.cuh"

namespace pgs_cuda {

namespace {

// A warp's chunk: kMaskRows rows of 32 float4 loads (512 bytes each, one
// coalesced instruction), so a lane has kMaskRows 16-byte loads in flight.
constexpr int kMaskRows = 8;
constexpr unsigned long long kChunk = 128ull * kMaskRows;   // elements
constexpr int kChunkWords = static_cast<int>(kChunk / 32);  // mask words
static_assert(kChunkWords == 32, "one mask word per lane");

unsigned long long chunks_for(unsigned long long n) {
  return (n + kChunk - 1) / kChunk;
}

__device__ __forceinline__ unsigned long long warp_id() {
  return (static_cast<unsigned long long>(blockIdx.x) * blockDim.x +
          threadIdx.x) >>
         5;
}
__device__ __forceinline__ unsigned long long warp_count() {
  return (static_cast<unsigned long long>(gridDim.x) * blockDim.x) >> 5;
}

// The 4 flags of one float4 as bits 0..3.
__device__ __forceinline__ unsigned nibble(const MaskRule &rule, float4 v) {
  return static_cast<unsigned>(rule.taken(v.x)) |
         static_cast<unsigned>(rule.taken(v.y)) << 1 |
         static_cast<unsigned>(rule.taken(v.z)) << 2 |
         static_cast<unsigned>(rule.taken(v.w)) << 3;
}

// Row q of a chunk: lane l's float4 holds elements q * 128 + 4l .. 4l + 3.
// Zeros past n (a zero is never taken).
__device__ __forceinline__ float4 load_row(const float *__restrict__ x,
                                           unsigned long long n, bool whole,
                                           unsigned long long at) {
  if (whole) return *reinterpret_cast<const float4 *>(x + at);
  float4 v;
  v.x = at < n ? x[at] : 0.0f;
  v.y = at + 1 < n ? x[at + 1] : 0.0f;
  v.z = at + 2 < n ? x[at + 2] : 0.0f;
  v.w = at + 3 < n ? x[at + 3] : 0.0f;
  return v;
}

// A chunk whose groups' largest |x| are known (gmax, one float per lane's
// 32 elements): lane l reads its 32 elements only where that largest can
// be taken (the rule is monotone in |x|, so a group whose largest is not
// taken holds nothing taken), and returns their bits.
__device__ __forceinline__ uint32_t group_word(const float *__restrict__ x,
                                               const MaskRule &rule,
                                               float largest) {
  if (!rule.taken(largest)) return 0;
  const float4 *xv = reinterpret_cast<const float4 *>(x);
  float4 w[kMaskRows];
#pragma unroll
  for (int q = 0; q < kMaskRows; ++q) w[q] = xv[q];
  uint32_t word = 0;
#pragma unroll
  for (int q = 0; q < kMaskRows; ++q) word |= nibble(rule, w[q]) << (4 * q);
  return word;
}

// Pass 1: one warp per chunk (grid-stride). Mask word w of chunk c covers
// elements c * kChunk + 32 w .. + 31, bit b element 32 w + b; row q yields
// words 4q .. 4q + 3, each from the nibbles of 8 lanes (OR over
// shuffles), and lane 4q + j keeps word j of row q, so the chunk's 32 words
// are stored by one coalesced instruction. counts[nchunks] is set to 0:
// the exclusive scan over nchunks + 1 counts then ends in the total.
// Chunks inside the first @p groups groups of 32 elements whose largest |x|
// is known (@p gmax) read only the groups that can hold a pick
// (group_word: lane w reads word w's 32 elements itself).
__global__ void __launch_bounds__(kThreads)
    mask_count_kernel(const float *__restrict__ x, unsigned long long n,
                      bool vec, MaskRule given, const float *thr_dev,
                      unsigned long long nchunks, uint32_t *__restrict__ mask,
                      uint32_t *__restrict__ counts,
                      const float *__restrict__ gmax,
                      unsigned long long groups) {
  const MaskRule rule = thr_dev != nullptr ? mask_rule_at(*thr_dev) : given;
  const unsigned lane = threadIdx.x & 31;
  if (blockIdx.x == 0 && threadIdx.x == 0) counts[nchunks] = 0;
  for (unsigned long long ch = warp_id(); ch < nchunks; ch += warp_count()) {
    const unsigned long long base = ch * kChunk;
    uint32_t mine = 0;
    if (vec && (ch + 1) * kChunkWords <= groups) {  // warp-uniform
      mine = group_word(x + base + 32ull * lane, rule,
                        gmax[ch * kChunkWords + lane]);
    } else {
      const bool whole = vec && base + kChunk <= n;
      float4 w[kMaskRows];
#pragma unroll
      for (int q = 0; q < kMaskRows; ++q)
        w[q] = load_row(x, n, whole, base + q * 128ull + 4ull * lane);
#pragma unroll
      for (int q = 0; q < kMaskRows; ++q) {
        uint32_t word = nibble(rule, w[q]) << (4 * (lane & 7));
        word |= __shfl_xor_sync(0xffffffffu, word, 1);
        word |= __shfl_xor_sync(0xffffffffu, word, 2);
        word |= __shfl_xor_sync(0xffffffffu, word, 4);
        const uint32_t got = __shfl_sync(0xffffffffu, word, 8 * (lane & 3));
        if ((lane >> 2) == static_cast<unsigned>(q)) mine = got;
      }
    }
    mask[ch * kChunkWords + lane] = mine;
    const unsigned count = __reduce_add_sync(0xffffffffu, __popc(mine));
    if (lane == 0) counts[ch] = count;
  }
}

// What pass 3 needs of a chunk: its mask word (lane l: word l) and its
// offsets; loaded a chunk ahead, so their latency overlaps the current
// chunk's reads of x.
struct ChunkHead {
  uint32_t word = 0, o0 = 0, o1 = 0;
};
__device__ __forceinline__ ChunkHead
chunk_head(const uint32_t *__restrict__ mask, const uint32_t *__restrict__ offs,
           unsigned long long ch, unsigned long long nchunks, unsigned lane) {
  ChunkHead h;
  if (ch < nchunks) {
    h.word = mask[ch * kChunkWords + lane];
    h.o0 = offs[ch];
    h.o1 = offs[ch + 1];
  }
  return h;
}

// Writes lane's taken elements of chunk ch from slot pos on (below cap).
// The first kAhead values are loaded before any is stored, so their
// reads of x are in flight together (most words hold 0 to 2 set bits).
constexpr int kAhead = 4;
__device__ __forceinline__ void write_word(
    const float *__restrict__ x, unsigned long long e0, uint32_t left,
    unsigned long long pos, uint32_t offset, int32_t *__restrict__ idx,
    float *__restrict__ val, unsigned long long cap) {
  unsigned long long e[kAhead];
  float v[kAhead];
  int got = 0;
#pragma unroll
  for (int j = 0; j < kAhead; ++j) {
    if (left == 0) break;
    e[j] = e0 + (__ffs(static_cast<int>(left)) - 1);
    v[j] = x[e[j]];
    left &= left - 1;
    got = j + 1;
  }
#pragma unroll
  for (int j = 0; j < kAhead; ++j) {
    if (j >= got || pos >= cap) return;
    idx[pos] = static_cast<int32_t>(static_cast<uint32_t>(e[j]) + offset);
    val[pos] = v[j];
    ++pos;
  }
  for (; left != 0 && pos < cap; left &= left - 1, ++pos) {
    const unsigned long long at = e0 + (__ffs(static_cast<int>(left)) - 1);
    idx[pos] = static_cast<int32_t>(static_cast<uint32_t>(at) + offset);
    val[pos] = x[at];
  }
}

// Pass 3: one warp per chunk (grid-stride); lane l takes mask word l, its
// first output slot the chunk's offset plus the set bits of the words
// before it (a warp scan). Chunks with nothing taken, or whose first slot
// is past the capacity, are skipped whole. Thread 0 of the grid also
// publishes the totals and makes a planned selection's check.
__global__ void __launch_bounds__(kThreads)
    mask_write_kernel(const float *__restrict__ x, unsigned long long nchunks,
                      const uint32_t *__restrict__ mask,
                      const uint32_t *__restrict__ offs, uint32_t offset,
                      int32_t *__restrict__ idx, float *__restrict__ val,
                      unsigned long long cap, ulonglong2 *total,
                      CountCheck check) {
  const unsigned lane = threadIdx.x & 31;
  const unsigned long long taken = offs[nchunks];
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *total = make_ulonglong2(taken, 0);
    if (check.err != nullptr && taken != check.expect)
      atomicOr(check.err, kErrContract);
  }
  if (val == nullptr) {  // packed: the values behind the entries, if they fit
    if (taken > cap) return;
    val = reinterpret_cast<float *>(idx + taken);
  }
  const unsigned long long step = warp_count();
  ChunkHead h = chunk_head(mask, offs, warp_id(), nchunks, lane);
  for (unsigned long long ch = warp_id(); ch < nchunks; ch += step) {
    const ChunkHead cur = h;
    h = chunk_head(mask, offs, ch + step, nchunks, lane);
    if (cur.o0 == cur.o1 || cur.o0 >= cap) continue;  // warp-uniform
    const unsigned own = __popc(cur.word);
    unsigned incl = own;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const unsigned t = __shfl_up_sync(0xffffffffu, incl, d);
      if (lane >= static_cast<unsigned>(d)) incl += t;
    }
    write_word(x, ch * kChunk + 32ull * lane, cur.word,
               static_cast<unsigned long long>(cur.o0) + (incl - own), offset,
               idx, val, cap);
  }
}

struct MaskScratch {
  uint32_t *mask = nullptr, *counts = nullptr, *offs = nullptr;
  ulonglong2 *total = nullptr;
  void *temp = nullptr;
  size_t temp_bytes = 0;
  int carve(Carve &cv, unsigned long long nchunks) {
    mask = cv.take<uint32_t>(nchunks * kChunkWords);
    counts = cv.take<uint32_t>(nchunks + 1);
    offs = cv.take<uint32_t>(nchunks + 1);
    total = cv.take<ulonglong2>(1);
    PGS_CU(cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, counts, offs,
                                         static_cast<int>(nchunks + 1)));
    temp = cv.take<char>(temp_bytes);
    return PGS_OK;
  }
};

}  // namespace

int compact_by_mask(Ctx *c, const float *x, size_t n, MaskRule rule,
                    const float *thr_dev, uint32_t offset, int32_t *idx,
                    float *val, size_t cap, CountCheck check,
                    ulonglong2 *total_at, const ulonglong2 **total,
                    GroupMax gm) {
  // Counts and offsets are 32-bit: at most 2^31 elements (int32 indices).
  if (n == 0 || n > (1ull << 31)) return PGS_ERR_UNSUPPORTED;
  const unsigned long long nchunks = chunks_for(n);
  Carve measure(nullptr);
  MaskScratch ms;
  PGS_RETURN_IF(ms.carve(measure, nchunks));
  PGS_RETURN_IF(ensure_device(&c->work, measure.bytes()));
  Carve cv(c->work.ptr);
  PGS_RETURN_IF(ms.carve(cv, nchunks));
  const bool vec = (reinterpret_cast<uintptr_t>(x) & 15) == 0;
  ulonglong2 *at = total_at != nullptr ? total_at : ms.total;
  // One warp per chunk at a time, 8 per block.
  const unsigned blocks_1 =
      grid_for(c, mask_count_kernel, nchunks * 32, 1, kThreads);
  mask_count_kernel<<<blocks_1, kThreads, 0, c->stream>>>(
      x, n, vec, rule, thr_dev, nchunks, ms.mask, ms.counts, gm.largest,
      gm.groups);
  PGS_LAUNCHED();
  PGS_CU(cub::DeviceScan::ExclusiveSum(ms.temp, ms.temp_bytes, ms.counts,
                                       ms.offs, static_cast<int>(nchunks + 1),
                                       c->stream));
  const unsigned blocks_3 =
      grid_for(c, mask_write_kernel, nchunks * 32, 1, kThreads);
  mask_write_kernel<<<blocks_3, kThreads, 0, c->stream>>>(
      x, nchunks, ms.mask, ms.offs, offset, idx, val, cap, at, check);
  PGS_LAUNCHED();
  *total = at;
  return PGS_OK;
}

}  // namespace pgs_cuda
