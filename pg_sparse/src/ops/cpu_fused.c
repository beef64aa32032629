/* The fused host pass of a call (accumulate, non-finite count, threshold
 * count and compaction in one read of g and r), its undo, and the small
 * helpers that let an algorithm work on the compacted list instead of the
 * whole bucket: index shifting, region location, the sync counter. */
#include "cpu_ops_internal.h"

#include <stdbool.h>

#ifdef PGS_CPU_AVX2
#include <immintrin.h>
#endif

/* Entries screened at once: the screen is branch-free and vectorises; only
 * a block holding a pick takes the walk (with Ok-Topk's list of 1.3k-2.5k
 * entries at density 0.01, about a quarter to a third of the blocks). */
enum { FUSED_BLOCK = 16 };

static inline bool picked(float v, uint32_t tb) {
  uint32_t ab = pgs_cpu_abs_bits(v);
  return ab != 0u && ab >= tb;
}

/* The bits of a threshold as compared against |x| bits: for non-negative
 * floats the unsigned order of the bits is the numeric order. thr <= 0 picks
 * every nonzero, NaN picks nothing. */
static uint32_t thr_bits_of(float thr) {
  if (thr != thr) return UINT32_MAX;
  if (thr <= 0.0f) return 1u;
  return pgs_cpu_abs_bits(thr);
}

/* Adds one block, counting the sums it rejects into *bad; returns whether
 * the block holds a pick (judged on r after the add, as the walk does).
 * Integer tests on the bits, and r and g never aliasing (the residual and a
 * gradient), let the loop vectorise. */
static inline bool add_block(float *restrict r, const float *restrict g,
                             size_t len, uint32_t tb, int64_t *bad) {
  uint32_t any = 0, nb = 0;
  for (size_t i = 0; i < len; ++i) {
    float v = r[i] + g[i];
    uint32_t ok = (uint32_t)pgs_cpu_finite(v);
    float nr = ok ? v : r[i];
    r[i] = nr;
    nb += 1u - ok;
    any |= picked(nr, tb);
  }
  *bad += nb;
  return any != 0;
}

/* Appends the picks of r[lo..hi) at *cnt. With room for a whole block the
 * append is branch-free (store, then advance by 0 or 1); near the capacity
 * it checks each store, and past it only counts. */
static void walk_block(const float *r, size_t lo, size_t hi, uint32_t tb,
                       int32_t *idx, float *val, size_t cap, size_t *cnt) {
  size_t c = *cnt;
  if (c + (hi - lo) <= cap) {
    for (size_t i = lo; i < hi; ++i) {
      idx[c] = (int32_t)i;
      val[c] = r[i];
      c += picked(r[i], tb);
    }
  } else {
    for (size_t i = lo; i < hi; ++i) {
      if (!picked(r[i], tb)) continue;
      if (c < cap) {
        idx[c] = (int32_t)i;
        val[c] = r[i];
      }
      ++c;
    }
  }
  *cnt = c;
}

/* The portable pass: blocks screened branch-free, walked where they hold a
 * pick. */
PGS_CPU_CLONES
static size_t fused_blocks(float *r, const float *g, size_t n, uint32_t tb,
                           int32_t *idx, float *val, size_t cap, int64_t *bad) {
  size_t cnt = 0;
  for (size_t lo = 0; lo < n; lo += FUSED_BLOCK) {
    size_t hi = n - lo < FUSED_BLOCK ? n : lo + FUSED_BLOCK;
    if (add_block(r + lo, g + lo, hi - lo, tb, bad))
      walk_block(r, lo, hi, tb, idx, val, cap, &cnt);
  }
  return cnt;
}

#ifdef PGS_CPU_AVX2
const uint64_t pgs_cpu_pack_lanes[256] = {
    0x0000000000000000ull, 0x0000000000000000ull, 0x0000000000000001ull,
    0x0000000000000100ull, 0x0000000000000002ull, 0x0000000000000200ull,
    0x0000000000000201ull, 0x0000000000020100ull, 0x0000000000000003ull,
    0x0000000000000300ull, 0x0000000000000301ull, 0x0000000000030100ull,
    0x0000000000000302ull, 0x0000000000030200ull, 0x0000000000030201ull,
    0x0000000003020100ull, 0x0000000000000004ull, 0x0000000000000400ull,
    0x0000000000000401ull, 0x0000000000040100ull, 0x0000000000000402ull,
    0x0000000000040200ull, 0x0000000000040201ull, 0x0000000004020100ull,
    0x0000000000000403ull, 0x0000000000040300ull, 0x0000000000040301ull,
    0x0000000004030100ull, 0x0000000000040302ull, 0x0000000004030200ull,
    0x0000000004030201ull, 0x0000000403020100ull, 0x0000000000000005ull,
    0x0000000000000500ull, 0x0000000000000501ull, 0x0000000000050100ull,
    0x0000000000000502ull, 0x0000000000050200ull, 0x0000000000050201ull,
    0x0000000005020100ull, 0x0000000000000503ull, 0x0000000000050300ull,
    0x0000000000050301ull, 0x0000000005030100ull, 0x0000000000050302ull,
    0x0000000005030200ull, 0x0000000005030201ull, 0x0000000503020100ull,
    0x0000000000000504ull, 0x0000000000050400ull, 0x0000000000050401ull,
    0x0000000005040100ull, 0x0000000000050402ull, 0x0000000005040200ull,
    0x0000000005040201ull, 0x0000000504020100ull, 0x0000000000050403ull,
    0x0000000005040300ull, 0x0000000005040301ull, 0x0000000504030100ull,
    0x0000000005040302ull, 0x0000000504030200ull, 0x0000000504030201ull,
    0x0000050403020100ull, 0x0000000000000006ull, 0x0000000000000600ull,
    0x0000000000000601ull, 0x0000000000060100ull, 0x0000000000000602ull,
    0x0000000000060200ull, 0x0000000000060201ull, 0x0000000006020100ull,
    0x0000000000000603ull, 0x0000000000060300ull, 0x0000000000060301ull,
    0x0000000006030100ull, 0x0000000000060302ull, 0x0000000006030200ull,
    0x0000000006030201ull, 0x0000000603020100ull, 0x0000000000000604ull,
    0x0000000000060400ull, 0x0000000000060401ull, 0x0000000006040100ull,
    0x0000000000060402ull, 0x0000000006040200ull, 0x0000000006040201ull,
    0x0000000604020100ull, 0x0000000000060403ull, 0x0000000006040300ull,
    0x0000000006040301ull, 0x0000000604030100ull, 0x0000000006040302ull,
    0x0000000604030200ull, 0x0000000604030201ull, 0x0000060403020100ull,
    0x0000000000000605ull, 0x0000000000060500ull, 0x0000000000060501ull,
    0x0000000006050100ull, 0x0000000000060502ull, 0x0000000006050200ull,
    0x0000000006050201ull, 0x0000000605020100ull, 0x0000000000060503ull,
    0x0000000006050300ull, 0x0000000006050301ull, 0x0000000605030100ull,
    0x0000000006050302ull, 0x0000000605030200ull, 0x0000000605030201ull,
    0x0000060503020100ull, 0x0000000000060504ull, 0x0000000006050400ull,
    0x0000000006050401ull, 0x0000000605040100ull, 0x0000000006050402ull,
    0x0000000605040200ull, 0x0000000605040201ull, 0x0000060504020100ull,
    0x0000000006050403ull, 0x0000000605040300ull, 0x0000000605040301ull,
    0x0000060504030100ull, 0x0000000605040302ull, 0x0000060504030200ull,
    0x0000060504030201ull, 0x0006050403020100ull, 0x0000000000000007ull,
    0x0000000000000700ull, 0x0000000000000701ull, 0x0000000000070100ull,
    0x0000000000000702ull, 0x0000000000070200ull, 0x0000000000070201ull,
    0x0000000007020100ull, 0x0000000000000703ull, 0x0000000000070300ull,
    0x0000000000070301ull, 0x0000000007030100ull, 0x0000000000070302ull,
    0x0000000007030200ull, 0x0000000007030201ull, 0x0000000703020100ull,
    0x0000000000000704ull, 0x0000000000070400ull, 0x0000000000070401ull,
    0x0000000007040100ull, 0x0000000000070402ull, 0x0000000007040200ull,
    0x0000000007040201ull, 0x0000000704020100ull, 0x0000000000070403ull,
    0x0000000007040300ull, 0x0000000007040301ull, 0x0000000704030100ull,
    0x0000000007040302ull, 0x0000000704030200ull, 0x0000000704030201ull,
    0x0000070403020100ull, 0x0000000000000705ull, 0x0000000000070500ull,
    0x0000000000070501ull, 0x0000000007050100ull, 0x0000000000070502ull,
    0x0000000007050200ull, 0x0000000007050201ull, 0x0000000705020100ull,
    0x0000000000070503ull, 0x0000000007050300ull, 0x0000000007050301ull,
    0x0000000705030100ull, 0x0000000007050302ull, 0x0000000705030200ull,
    0x0000000705030201ull, 0x0000070503020100ull, 0x0000000000070504ull,
    0x0000000007050400ull, 0x0000000007050401ull, 0x0000000705040100ull,
    0x0000000007050402ull, 0x0000000705040200ull, 0x0000000705040201ull,
    0x0000070504020100ull, 0x0000000007050403ull, 0x0000000705040300ull,
    0x0000000705040301ull, 0x0000070504030100ull, 0x0000000705040302ull,
    0x0000070504030200ull, 0x0000070504030201ull, 0x0007050403020100ull,
    0x0000000000000706ull, 0x0000000000070600ull, 0x0000000000070601ull,
    0x0000000007060100ull, 0x0000000000070602ull, 0x0000000007060200ull,
    0x0000000007060201ull, 0x0000000706020100ull, 0x0000000000070603ull,
    0x0000000007060300ull, 0x0000000007060301ull, 0x0000000706030100ull,
    0x0000000007060302ull, 0x0000000706030200ull, 0x0000000706030201ull,
    0x0000070603020100ull, 0x0000000000070604ull, 0x0000000007060400ull,
    0x0000000007060401ull, 0x0000000706040100ull, 0x0000000007060402ull,
    0x0000000706040200ull, 0x0000000706040201ull, 0x0000070604020100ull,
    0x0000000007060403ull, 0x0000000706040300ull, 0x0000000706040301ull,
    0x0000070604030100ull, 0x0000000706040302ull, 0x0000070604030200ull,
    0x0000070604030201ull, 0x0007060403020100ull, 0x0000000000070605ull,
    0x0000000007060500ull, 0x0000000007060501ull, 0x0000000706050100ull,
    0x0000000007060502ull, 0x0000000706050200ull, 0x0000000706050201ull,
    0x0000070605020100ull, 0x0000000007060503ull, 0x0000000706050300ull,
    0x0000000706050301ull, 0x0000070605030100ull, 0x0000000706050302ull,
    0x0000070605030200ull, 0x0000070605030201ull, 0x0007060503020100ull,
    0x0000000007060504ull, 0x0000000706050400ull, 0x0000000706050401ull,
    0x0000070605040100ull, 0x0000000706050402ull, 0x0000070605040200ull,
    0x0000070605040201ull, 0x0007060504020100ull, 0x0000000706050403ull,
    0x0000070605040300ull, 0x0000070605040301ull, 0x0007060504030100ull,
    0x0000070605040302ull, 0x0007060504030200ull, 0x0007060504030201ull,
    0x0706050403020100ull,
};

/* Appends the picks (mask m) of the 8 lanes at i, branch-free: all 8 slots
 * are written (the ones past the picks are scratch, which ops.h allows up
 * to the capacity), and the count advances by the picks. */
__attribute__((target("avx2"))) static inline size_t append_lanes(
    __m256 nr, unsigned m, size_t i, int32_t *idx, float *val, size_t cnt) {
  const __m256i perm =
      _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)pgs_cpu_pack_lanes[m]));
  _mm256_storeu_si256((__m256i *)(idx + cnt),
                      _mm256_add_epi32(perm, _mm256_set1_epi32((int32_t)i)));
  _mm256_storeu_ps(val + cnt, _mm256_permutevar8x32_ps(nr, perm));
  return cnt + (size_t)__builtin_popcount(m);
}

/* The same pass eight lanes at a time: the picks of a vector come out as a
 * bit mask and are packed to the list's end by one permutation. With
 * Ok-Topk's list (2-3% of the entries) a third of the 16-entry blocks above
 * hold a pick and are walked in full; here nothing branches on the data,
 * and the pass runs at about the cost of r += g (it was six times that).
 * Bits compare as signed integers: every |x| pattern and tb - 1 lie in
 * [0, 2^31). */
__attribute__((target("avx2"))) static size_t fused_avx2(
    float *r, const float *g, size_t n, uint32_t tb, int32_t *idx, float *val,
    size_t cap, int64_t *bad) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf_bits = _mm256_set1_epi32(0x7f800000);
  /* |x| >= tb with tb >= 1 is |x| > tb - 1 (and excludes zeros); a NaN
   * threshold (tb beyond every |x|) picks nothing. */
  const __m256i below =
      _mm256_set1_epi32(tb > 0x7fffffffu ? INT32_MAX : (int32_t)(tb - 1u));
  size_t cnt = 0, i = 0;
  int64_t nb = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 rv = _mm256_loadu_ps(r + i);
    const __m256 sum = _mm256_add_ps(rv, _mm256_loadu_ps(g + i));
    const __m256i sum_abs =
        _mm256_and_si256(_mm256_castps_si256(sum), abs_mask);
    const __m256 ok =
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(inf_bits, sum_abs));
    const __m256 nr = _mm256_blendv_ps(rv, sum, ok);
    _mm256_storeu_ps(r + i, nr);
    nb += 8 - __builtin_popcount((unsigned)_mm256_movemask_ps(ok));
    const __m256i nr_abs = _mm256_and_si256(_mm256_castps_si256(nr), abs_mask);
    unsigned m = (unsigned)_mm256_movemask_ps(
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(nr_abs, below)));
    if (cnt + 8 <= cap) {
      cnt = append_lanes(nr, m, i, idx, val, cnt);
      continue;
    }
    /* Near or past the capacity: store what fits, count the rest. */
    for (; m != 0; m &= m - 1, ++cnt) {
      const size_t at = i + (size_t)__builtin_ctz(m);
      if (cnt < cap) {
        idx[cnt] = (int32_t)at;
        val[cnt] = r[at];
      }
    }
  }
  *bad += nb;
  /* The tail (fewer than 8) in the portable walk. */
  if (i < n && add_block(r + i, g + i, n - i, tb, bad))
    walk_block(r, i, n, tb, idx, val, cap, &cnt);
  return cnt;
}
#endif

int pgs_cpu_accumulate_select(const pgs_ops_t *ops, float *r, const float *g,
                              size_t n, float thr, int32_t *idx, float *val,
                              size_t cap, int64_t *count_host,
                              int64_t *nonfinite_host) {
  (void)ops;
  if (count_host == NULL || nonfinite_host == NULL) return PGS_ERR_INVALID;
  if ((r == NULL || g == NULL) && n > 0) return PGS_ERR_INVALID;
  if ((idx == NULL || val == NULL) && cap > 0) return PGS_ERR_INVALID;
  if (n > (size_t)INT32_MAX + 1u) return PGS_ERR_UNSUPPORTED;
  const uint32_t tb = thr_bits_of(thr);
  int64_t bad = 0;
  size_t cnt;
#ifdef PGS_CPU_AVX2
  if (__builtin_cpu_supports("avx2"))
    cnt = fused_avx2(r, g, n, tb, idx, val, cap, &bad);
  else
#endif
    cnt = fused_blocks(r, g, n, tb, idx, val, cap, &bad);
  *count_host = (int64_t)cnt;
  *nonfinite_host = bad;
  return PGS_OK;
}

int pgs_cpu_accumulate_kth(const pgs_ops_t *ops, float *r, const float *g,
                           size_t n, float thr, int32_t *idx, float *val,
                           size_t cap, size_t k, pgs_fused_t *out) {
  if (out == NULL) return PGS_ERR_INVALID;
  out->kth = -1.0f;
  out->n_gt = 0;
  int st = pgs_cpu_accumulate_select(ops, r, g, n, thr, idx, val, cap,
                                     &out->count, &out->nonfinite);
  const size_t m = (size_t)out->count;
  if (st != PGS_OK || k < 1 || m < k || m > cap) return st;
  return pgs_cpu_kth_abs(ops, val, m, k, &out->kth, &out->n_gt);
}

int pgs_cpu_accumulate_kth_regions(const pgs_ops_t *ops, float *r,
                                   const float *g, size_t n, float thr,
                                   int32_t *idx, float *val, size_t cap,
                                   size_t k, pgs_fused_t *out,
                                   pgs_regions_t *reg) {
  if (reg == NULL) return PGS_ERR_INVALID;
  reg->counted = 0;
  int st = pgs_cpu_accumulate_kth(ops, r, g, n, thr, idx, val, cap, k, out);
  if (st != PGS_OK || out->kth < 0.0f) return st;
  st = pgs_cpu_count_pair_regions(ops, idx, val, (size_t)out->count, reg->keys,
                                  reg->nreg, out->kth, reg->pos, reg->n_gt,
                                  reg->n_eq);
  reg->counted = st == PGS_OK;
  return st;
}

int pgs_cpu_unaccumulate(const pgs_ops_t *ops, float *r, const float *g,
                         size_t n) {
  (void)ops;
  if ((r == NULL || g == NULL) && n > 0) return PGS_ERR_INVALID;
  for (size_t i = 0; i < n; ++i)
    r[i] = pgs_cpu_finite(g[i]) ? r[i] - g[i] : r[i];
  return PGS_OK;
}

int pgs_cpu_shift_idx(const pgs_ops_t *ops, int32_t *idx, size_t m,
                      int32_t delta) {
  (void)ops;
  if (m == 0) return PGS_OK;
  if (idx == NULL) return PGS_ERR_INVALID;
  if (delta == 0) return PGS_OK;
  /* Wrapping arithmetic in unsigned: a bad result is caught where it is
   * used, never undefined here. */
  for (size_t j = 0; j < m; ++j)
    idx[j] = (int32_t)((uint32_t)idx[j] - (uint32_t)delta);
  return PGS_OK;
}

/* First position in idx[lo..hi) whose value is >= key. */
static size_t lower_bound(const int32_t *idx, size_t lo, size_t hi,
                          int64_t key) {
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if ((int64_t)idx[mid] < key)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

int pgs_cpu_locate(const pgs_ops_t *ops, const int32_t *idx, size_t m,
                   const int64_t *keys_host, int nkeys, int64_t *pos_host) {
  (void)ops;
  if (nkeys < 0 || (nkeys > 0 && (keys_host == NULL || pos_host == NULL)))
    return PGS_ERR_INVALID;
  if (idx == NULL && m > 0) return PGS_ERR_INVALID;
  for (int j = 0; j < nkeys; ++j)
    pos_host[j] = (int64_t)lower_bound(idx, 0, m, keys_host[j]);
  return PGS_OK;
}

int pgs_cpu_count_pair_regions(const pgs_ops_t *ops, const int32_t *idx,
                               const float *val, size_t m,
                               const int64_t *keys_host, int nreg, float thr,
                               int64_t *pos_host, int64_t *n_gt_host,
                               int64_t *n_eq_host) {
  if (nreg < 0 || keys_host == NULL || pos_host == NULL) return PGS_ERR_INVALID;
  for (int j = 0; j < nreg; ++j)
    if (keys_host[j + 1] < keys_host[j]) return PGS_ERR_INVALID;
  int st = pgs_cpu_locate(ops, idx, m, keys_host, nreg + 1, pos_host);
  if (st != PGS_OK) return st;
  return pgs_cpu_count_regions(ops, val, m, pos_host, nreg, thr, n_gt_host,
                               n_eq_host);
}

uint64_t pgs_cpu_host_syncs(const pgs_ops_t *ops) {
  (void)ops; /* host kernels finish before they return: nothing to wait for */
  return 0;
}
