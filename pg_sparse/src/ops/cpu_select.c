/* Host selection kernels: threshold counts, radix histograms, exact k-th
 * largest |x| by radix select, and index-order compaction.
 *
 * Everything here orders |x| by the bits of the float with the sign cleared
 * (pgs_cpu_abs_bits), so the radix select, the histograms and the float
 * comparisons of compact agree exactly, denormals included. */
#include "cpu_ops_internal.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#ifdef PGS_CPU_AVX2
#include <immintrin.h>
#endif

/* ---- radix histograms ---------------------------------------------------- */

/* Which entries one radix level looks at and where it bins them. */
typedef struct radix_level {
  uint32_t mask;  /* top 8*level bits (0 at level 0: every entry matches) */
  uint32_t want;  /* prefix & mask */
  unsigned shift; /* the level's byte is (bits >> shift) & 0xff */
} radix_level_t;

static radix_level_t radix_level_make(int level, uint32_t prefix) {
  radix_level_t r;
  /* Built without a shift by 32, which C leaves undefined. */
  r.mask = level == 0 ? 0u : ~0u << (32 - 8 * level);
  r.want = prefix & r.mask;
  r.shift = (unsigned)(24 - 8 * level);
  return r;
}

/* Interleaved sub-histograms: |x| of real data shares a few exponents, so a
 * single histogram would serialise on increments of the same bin. */
#define SUBHIST 4
typedef int64_t subhist_t[SUBHIST][PGS_HIST_BINS];

/* Whether entry bits b belong to the level: nonzero (zeros are skipped, they
 * carry nothing; kth_abs accounts for them separately) and on the prefix. */
static inline bool level_match(radix_level_t lv, uint32_t b) {
  return b != 0 && (b & lv.mask) == lv.want;
}

/* Counting with a branch: fastest when the match test is predictable
 * (level 0, where almost everything matches, or a rare prefix). */
static void hist_branchy(const float *x, size_t n, radix_level_t lv,
                         subhist_t h) {
  size_t i = 0;
  for (; i + SUBHIST <= n; i += SUBHIST) {
    for (int u = 0; u < SUBHIST; ++u) {
      uint32_t b = pgs_cpu_abs_bits(x[i + (size_t)u]);
      if (level_match(lv, b)) ++h[u][(b >> lv.shift) & 0xffu];
    }
  }
  for (; i < n; ++i) {
    uint32_t b = pgs_cpu_abs_bits(x[i]);
    if (level_match(lv, b)) ++h[0][(b >> lv.shift) & 0xffu];
  }
}

/* Counting without a branch (adds 0 or 1): a mixed prefix, where about half
 * the entries match, would mispredict the branch every other entry and run
 * several times slower. */
static void hist_branchless(const float *x, size_t n, radix_level_t lv,
                            subhist_t h) {
  size_t i = 0;
  for (; i + SUBHIST <= n; i += SUBHIST) {
    for (int u = 0; u < SUBHIST; ++u) {
      uint32_t b = pgs_cpu_abs_bits(x[i + (size_t)u]);
      h[u][(b >> lv.shift) & 0xffu] += level_match(lv, b);
    }
  }
  for (; i < n; ++i) {
    uint32_t b = pgs_cpu_abs_bits(x[i]);
    h[0][(b >> lv.shift) & 0xffu] += level_match(lv, b);
  }
}

/* One level's histogram of x into out (overwritten); returns its total.
 * @p mixed picks the branch-free loop for prefixes that many entries share. */
static int64_t hist_level_sum(const float *x, size_t n, radix_level_t lv,
                              bool mixed, int64_t out[PGS_HIST_BINS]) {
  subhist_t h;
  memset(h, 0, sizeof h);
  if (mixed)
    hist_branchless(x, n, lv, h);
  else
    hist_branchy(x, n, lv, h);
  int64_t total = 0;
  for (int b = 0; b < PGS_HIST_BINS; ++b) {
    out[b] = h[0][b] + h[1][b] + h[2][b] + h[3][b];
    total += out[b];
  }
  return total;
}

int pgs_cpu_hist_abs(const pgs_ops_t *ops, const float *x, size_t n, int level,
                     uint32_t prefix, int64_t *hist_host) {
  (void)ops;
  if (hist_host == NULL || (x == NULL && n > 0)) return PGS_ERR_INVALID;
  if (level < 0 || level >= PGS_HIST_LEVELS) return PGS_ERR_INVALID;
  int64_t h[PGS_HIST_BINS];
  /* How many entries share the prefix is unknown here, so levels past 0
   * take the loop without a worst case. */
  hist_level_sum(x, n, radix_level_make(level, prefix), level > 0, h);
  /* Added to, not overwritten: callers sum partial histograms. */
  for (int b = 0; b < PGS_HIST_BINS; ++b) hist_host[b] += h[b];
  return PGS_OK;
}

/* ---- exact k-th largest |x| -------------------------------------------- */

/* Finds the bin, scanning from the top, that holds the *k-th largest entry;
 * on return *k is the rank inside that bin and *above has grown by the
 * number of entries in higher bins. Requires 1 <= *k <= sum of h. */
static int pick_bin(const int64_t h[PGS_HIST_BINS], int64_t *k,
                    int64_t *above) {
  int b = PGS_HIST_BINS - 1;
  for (; b > 0 && h[b] < *k; --b) {
    *k -= h[b];
    *above += h[b];
  }
  return b;
}

/* The 4-level radix select over all of x (1 <= k <= n). */
static void kth_abs_radix(const float *x, size_t n, size_t k, float *thr,
                          int64_t *n_gt) {
  int64_t h[PGS_HIST_BINS];
  uint32_t prefix = 0;
  int64_t rank = (int64_t)k, above = 0;
  int64_t nnz = hist_level_sum(x, n, radix_level_make(0, 0), false, h);
  if (rank > nnz) {
    /* The k-th largest is one of the zeros; every nonzero lies above it. */
    *thr = 0.0f;
    *n_gt = nnz;
    return;
  }
  /* Each level fixes one more byte of the answer's bits; entries in higher
   * bins are strictly larger, which accumulates n_gt on the way. */
  for (int level = 0; level < PGS_HIST_LEVELS; ++level) {
    /* The chosen bin's count is how many entries the next level matches:
     * a predictable branch below 1/8 of n, the branch-free loop above. */
    uint32_t bin = (uint32_t)pick_bin(h, &rank, &above);
    prefix |= bin << (24 - 8 * level);
    if (level + 1 < PGS_HIST_LEVELS) {
      bool mixed = (uint64_t)h[bin] > n / 8;
      hist_level_sum(x, n, radix_level_make(level + 1, prefix), mixed, h);
    }
  }
  memcpy(thr, &prefix, sizeof *thr);
  *n_gt = above;
}

/* The fast path: one pass bins |x| by its top 12 bits (exponent and 4
 * mantissa bits: 1/16 of an octave, so the bin holding the k-th value holds
 * a small share of real data), a second pass copies that bin out, and the
 * radix select finishes on the copy. Two passes over x instead of four. */
enum { COARSE_SHIFT = 19, COARSE_BINS = 1 << (31 - COARSE_SHIFT) };

/* Nonzero count of x; h[b] = entries whose |x| bits >> COARSE_SHIFT == b. */
static int64_t coarse_hist(const float *x, size_t n, uint32_t *h) {
  /* Two interleaved sub-histograms against runs of one bin. */
  static const size_t SUB = 2;
  uint32_t sub[2][COARSE_BINS];
  memset(sub, 0, sizeof sub);
  size_t i = 0;
  for (; i + SUB <= n; i += SUB) {
    uint32_t b0 = pgs_cpu_abs_bits(x[i]), b1 = pgs_cpu_abs_bits(x[i + 1]);
    sub[0][b0 >> COARSE_SHIFT] += b0 != 0;
    sub[1][b1 >> COARSE_SHIFT] += b1 != 0;
  }
  for (; i < n; ++i) {
    uint32_t b = pgs_cpu_abs_bits(x[i]);
    sub[0][b >> COARSE_SHIFT] += b != 0;
  }
  int64_t nnz = 0;
  for (int b = 0; b < COARSE_BINS; ++b) {
    h[b] = sub[0][b] + sub[1][b];
    nnz += h[b];
  }
  return nnz;
}

/* Copies the nonzero entries of coarse bin @p bin into out (room for their
 * count plus one: the branch-free append stores before it counts). */
static size_t coarse_take(const float *x, size_t n, uint32_t bin, float *out) {
  size_t c = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t b = pgs_cpu_abs_bits(x[i]);
    out[c] = x[i];
    c += (b >> COARSE_SHIFT == bin) & (b != 0);
  }
  return c;
}

/* 1 when the fast path answered, 0 when the caller should use the radix
 * select over all of x (bin too crowded, or no memory for the copy). */
static int kth_abs_coarse(const float *x, size_t n, size_t k, float *thr,
                          int64_t *n_gt) {
  uint32_t h[COARSE_BINS];
  int64_t nnz = coarse_hist(x, n, h);
  if ((int64_t)k > nnz) {
    *thr = 0.0f;
    *n_gt = nnz;
    return 1;
  }
  int64_t rank = (int64_t)k, above = 0;
  int bin = COARSE_BINS - 1;
  for (; bin > 0 && (int64_t)h[bin] < rank; --bin) {
    rank -= h[bin];
    above += h[bin];
  }
  /* A bin holding more than 1/8 of x saves little over the full select. */
  if ((size_t)h[bin] > n / 8) return 0;
  float *cand = malloc(((size_t)h[bin] + 1) * sizeof(float));
  if (cand == NULL) return 0;
  size_t m = coarse_take(x, n, (uint32_t)bin, cand);
  int64_t in_bin_gt = 0;
  kth_abs_radix(cand, m, (size_t)rank, thr, &in_bin_gt);
  free(cand);
  *n_gt = above + in_bin_gt;
  return 1;
}

int pgs_cpu_kth_abs(const pgs_ops_t *ops, const float *x, size_t n, size_t k,
                    float *thr, int64_t *n_gt) {
  (void)ops;
  if (thr == NULL || n_gt == NULL || x == NULL) return PGS_ERR_INVALID;
  if (k < 1 || k > n) return PGS_ERR_INVALID;
  if (n > (size_t)INT64_MAX) return PGS_ERR_UNSUPPORTED;
  /* The coarse bins count in 32 bits. */
  if (n <= UINT32_MAX && kth_abs_coarse(x, n, k, thr, n_gt)) return PGS_OK;
  kth_abs_radix(x, n, k, thr, n_gt);
  return PGS_OK;
}

/* ---- threshold counts per region ------------------------------------- */

static bool bounds_valid(const int64_t *bounds, int nreg, size_t n) {
  if (bounds[0] < 0 || (uint64_t)bounds[nreg] > (uint64_t)n) return false;
  for (int j = 0; j < nreg; ++j)
    if (bounds[j + 1] < bounds[j]) return false;
  return true;
}

PGS_CPU_CLONES
int pgs_cpu_count_regions(const pgs_ops_t *ops, const float *x, size_t n,
                          const int64_t *bounds_host, int nreg, float thr,
                          int64_t *n_gt_host, int64_t *n_eq_host) {
  (void)ops;
  if (nreg < 0 || bounds_host == NULL) return PGS_ERR_INVALID;
  if (nreg > 0 && (n_gt_host == NULL || n_eq_host == NULL))
    return PGS_ERR_INVALID;
  if (!bounds_valid(bounds_host, nreg, n)) return PGS_ERR_INVALID;
  if (x == NULL && bounds_host[nreg] > bounds_host[0]) return PGS_ERR_INVALID;
  for (int j = 0; j < nreg; ++j) {
    int64_t gt = 0, eq = 0;
    /* Branch-free counts so the loop vectorises; zeros never count. */
    for (int64_t i = bounds_host[j]; i < bounds_host[j + 1]; ++i) {
      float a = fabsf(x[i]);
      gt += (a > thr) & (x[i] != 0.0f);
      eq += (a == thr) & (x[i] != 0.0f);
    }
    n_gt_host[j] = gt;
    n_eq_host[j] = eq;
  }
  return PGS_OK;
}

/* ---- compaction -------------------------------------------------------- */

/* Selection state of one compaction: the threshold and the ties still
 * allowed through (INT64_MAX stands for "every tie"). */
typedef struct selector {
  float thr;
  int64_t eq_left;
} selector_t;

static selector_t selector_make(float thr, int64_t eq_quota) {
  selector_t s = {thr, eq_quota < 0 ? INT64_MAX : eq_quota};
  return s;
}

/* Whether v is selected; consumes one tie of the quota when it is a tie. */
static inline bool selector_take(selector_t *s, float v) {
  float a = fabsf(v);
  if (v == 0.0f) return false;
  if (a > s->thr) return true;
  if (a != s->thr || s->eq_left == 0) return false;
  --s->eq_left;
  return true;
}

/* Entries a compaction block screens at once: the screen is branch-free
 * and vectorises; at a density of 1% about one block in seven holds a hit
 * and takes the exact (branchy) walk, instead of every entry. */
enum { COMPACT_BLOCK = 16 };

/* Whether any entry of x[0..len) may be selected at thr: |x| >= thr, x != 0. */
static inline bool block_has_candidate(const float *x, size_t len, float thr) {
  int any = 0;
  for (size_t i = 0; i < len; ++i) any |= (fabsf(x[i]) >= thr) & (x[i] != 0.0f);
  return any != 0;
}

/* The exact walk over x[lo..hi): appends selected (index, value) pairs. */
static void compact_walk(const float *x, size_t lo, size_t hi, selector_t *sel,
                         int32_t idx_offset, int32_t *idx, float *val,
                         size_t cap, size_t *cnt) {
  for (size_t i = lo; i < hi; ++i) {
    if (!selector_take(sel, x[i])) continue;
    if (*cnt < cap) {
      idx[*cnt] = (int32_t)i + idx_offset;
      val[*cnt] = x[i];
    }
    ++*cnt;
  }
}

/* A selection's result: its count, or without a count pointer, whether
 * exactly @p cap were selected as the caller planned (ops.h). */
static int selected(size_t cnt, size_t cap, int64_t *count_host) {
  if (count_host == NULL) return cnt == cap ? PGS_OK : PGS_ERR_INVALID;
  *count_host = (int64_t)cnt;
  return cnt > cap ? PGS_ERR_OVERFLOW : PGS_OK;
}

PGS_CPU_CLONES
int pgs_cpu_compact(const pgs_ops_t *ops, const float *x, size_t n, float thr,
                    int64_t eq_quota, int32_t idx_offset, int32_t *idx,
                    float *val, size_t cap, int64_t *count_host) {
  (void)ops;
  if (x == NULL && n > 0) return PGS_ERR_INVALID;
  if ((idx == NULL || val == NULL) && cap > 0) return PGS_ERR_INVALID;
  /* Written indices are int32 positions plus a non-negative offset. */
  if (idx_offset < 0) return PGS_ERR_INVALID;
  if (n > 0 && (uint64_t)idx_offset + (n - 1) > (uint64_t)INT32_MAX)
    return PGS_ERR_UNSUPPORTED;
  selector_t sel = selector_make(thr, eq_quota);
  size_t cnt = 0;
  for (size_t lo = 0; lo < n; lo += COMPACT_BLOCK) {
    size_t hi = n - lo < COMPACT_BLOCK ? n : lo + COMPACT_BLOCK;
    if (block_has_candidate(x + lo, hi - lo, thr))
      compact_walk(x, lo, hi, &sel, idx_offset, idx, val, cap, &cnt);
  }
  return selected(cnt, cap, count_host);
}

/* Pairs [j, m) through the selector, one at a time, appended at *cnt. */
static void select_pairs_from(const int32_t *idx, const float *val, size_t j,
                              size_t m, selector_t *sel, int32_t *idx_out,
                              float *val_out, size_t cap, size_t *cnt) {
  /* In-place safe: the pair is read before the write, and *cnt <= j. */
  for (; j < m; ++j) {
    int32_t i = idx[j];
    float v = val[j];
    if (!selector_take(sel, v)) continue;
    if (*cnt < cap) {
      idx_out[*cnt] = i;
      val_out[*cnt] = v;
    }
    ++*cnt;
  }
}

#ifdef PGS_CPU_AVX2
/* Eight pairs at a time while a whole vector fits below the capacity: the
 * picks' mask packs both halves with one permutation, and a masked store
 * writes only the picks (slots past the count stay as they were, as the
 * device table leaves them). A vector holding a tie (|v| == thr) goes
 * through the selector, which keeps the tie quota in index order. Float
 * compares, as the selector's (NaN never picked). In-place safe: the slots
 * written start at *cnt <= j and end before the pairs not yet read. */
__attribute__((target("avx2"))) static size_t select_pairs_avx2(
    const int32_t *idx, const float *val, size_t m, selector_t *sel,
    int32_t *idx_out, float *val_out, size_t cap, size_t *cnt) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 thr = _mm256_set1_ps(sel->thr);
  const __m256 zero = _mm256_setzero_ps();
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  size_t j = 0;
  for (; j + 8 <= m && *cnt + 8 <= cap; j += 8) {
    const __m256 v = _mm256_loadu_ps(val + j);
    const __m256 a = _mm256_andnot_ps(sign, v);
    const __m256 nz = _mm256_cmp_ps(v, zero, _CMP_NEQ_OQ);
    const int tie = _mm256_movemask_ps(
        _mm256_and_ps(nz, _mm256_cmp_ps(a, thr, _CMP_EQ_OQ)));
    if (tie != 0) {
      select_pairs_from(idx, val, j, j + 8, sel, idx_out, val_out, cap, cnt);
      continue;
    }
    const unsigned pick = (unsigned)_mm256_movemask_ps(
        _mm256_and_ps(nz, _mm256_cmp_ps(a, thr, _CMP_GT_OQ)));
    const __m256i perm = _mm256_cvtepu8_epi32(
        _mm_cvtsi64_si128((long long)pgs_cpu_pack_lanes[pick]));
    const int picks = __builtin_popcount(pick);
    const __m256i first = _mm256_cmpgt_epi32(_mm256_set1_epi32(picks), lanes);
    const __m256i iv = _mm256_loadu_si256((const __m256i *)(idx + j));
    _mm256_maskstore_epi32((int *)(idx_out + *cnt), first,
                           _mm256_permutevar8x32_epi32(iv, perm));
    _mm256_maskstore_ps(val_out + *cnt, first,
                        _mm256_permutevar8x32_ps(v, perm));
    *cnt += (size_t)picks;
  }
  return j;
}
#endif

int pgs_cpu_select_pairs(const pgs_ops_t *ops, const int32_t *idx,
                         const float *val, size_t m, float thr,
                         int64_t eq_quota, int32_t *idx_out, float *val_out,
                         size_t cap, int64_t *count_host) {
  (void)ops;
  if ((idx == NULL || val == NULL) && m > 0) return PGS_ERR_INVALID;
  if ((idx_out == NULL || val_out == NULL) && cap > 0) return PGS_ERR_INVALID;
  selector_t sel = selector_make(thr, eq_quota);
  size_t cnt = 0, j = 0;
#ifdef PGS_CPU_AVX2
  if (__builtin_cpu_supports("avx2"))
    j = select_pairs_avx2(idx, val, m, &sel, idx_out, val_out, cap, &cnt);
#endif
  select_pairs_from(idx, val, j, m, &sel, idx_out, val_out, cap, &cnt);
  return selected(cnt, cap, count_host);
}
