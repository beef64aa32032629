/* The fused host pass of a call (accumulate, non-finite count, threshold
 * count and compaction in one read of g and r), its undo, and the small
 * helpers that let an algorithm work on the compacted list instead of the
 * whole bucket: index shifting, region location, the sync counter. */
#include "cpu_ops_internal.h"

#include <stdbool.h>

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

PGS_CPU_CLONES
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
  size_t cnt = 0;
  int64_t bad = 0;
  for (size_t lo = 0; lo < n; lo += FUSED_BLOCK) {
    size_t hi = n - lo < FUSED_BLOCK ? n : lo + FUSED_BLOCK;
    if (add_block(r + lo, g + lo, hi - lo, tb, &bad))
      walk_block(r, lo, hi, tb, idx, val, cap, &cnt);
  }
  *count_host = (int64_t)cnt;
  *nonfinite_host = bad;
  return PGS_OK;
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
