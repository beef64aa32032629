/* gaussiank: threshold mu + z * sigma of grad + residual, z the two-sided
 * normal quantile of the density, then corrected toward [k/2, 2k] picks.
 * Every rank's picks are allgathered (variable counts) and summed; the
 * residual is cleared where this rank sent. */
#include <math.h>

#include "algo/algo_internal.h"

/* Multiplicative corrections before giving up on the estimate. Gradients are
 * heavier-tailed than a Gaussian, so the estimate is usually off by a factor;
 * a few steps fix that, and the exact k-th value bounds the worst case. */
enum { GAUSSIANK_CORRECTIONS = 4 };

/* Entries of the accumulator above (*gt) and at (*eq) thr. */
static int count_at(pgs_bucket_t *b, float thr, int64_t *gt, int64_t *eq) {
  const int64_t bounds[2] = {0, (int64_t)b->n};
  return b->ops->count_regions(b->ops, b->resid, b->n, bounds, 1, thr, gt, eq);
}

/* Threshold whose count of |acc| >= thr lies in [k/2, 2k], with the counts
 * above and at it (so the step need not count again). */
static int gaussiank_threshold(pgs_bucket_t *b, float *thr_out, int64_t *gt,
                               int64_t *eq) {
  /* The first guess (Gaussian unless another estimator was chosen); with
   * the exact estimator, and at k = n (where the exact threshold keeps
   * every entry, as density 1 must), straight to the select below. */
  const int exact = b->cfg.estimator == PGS_EST_EXACT || b->k == (int64_t)b->n;
  float thr = 0.0f;
  int st = exact ? PGS_OK : pgs_estimate_threshold(b, b->resid, &thr);
  if (st != PGS_OK) return st;
  const int64_t lo = (b->k + 1) / 2, hi = 2 * b->k;
  const int tries = exact ? 0 : GAUSSIANK_CORRECTIONS;
  for (int i = 0; i < tries; ++i) {
    st = count_at(b, thr, gt, eq);
    if (st != PGS_OK) return st;
    const int64_t count = *gt + *eq;
    if (count >= lo && count <= hi && thr > 0.0f) {
      *thr_out = thr;
      b->stats.estimate_corrections = i;
      return PGS_OK;
    }
    /* The count falls as the threshold rises; step by the tail ratio. */
    thr *= count > hi ? 1.5f : (1.0f / 1.5f);
  }
  b->stats.estimate_corrections = tries;
  int64_t n_gt = 0;
  st = b->ops->kth_abs(b->ops, b->resid, b->n, (size_t)b->k, &thr, &n_gt);
  if (st != PGS_OK) return st;
  b->stats.local_recomputed = 1;
  *thr_out = thr;
  return count_at(b, thr, gt, eq);
}

static int gaussiank_step(pgs_bucket_t *b, const float *grad, float *out) {
  const pgs_ops_t *ops = b->ops;
  int st = pgs_accumulate(b, grad);
  if (st != PGS_OK) return st;
  float thr = 0.0f;
  int64_t gt = 0, eq = 0;
  st = gaussiank_threshold(b, &thr, &gt, &eq);
  if (st != PGS_OK) return st;
  /* Ties at an exact threshold may exceed 2k; keep the first 2k in index
   * order so the volume stays bounded. */
  int64_t quota = eq;
  if (gt + eq > 2 * b->k) {
    quota = gt < 2 * b->k ? 2 * b->k - gt : 0;
    b->stats.capped = gt + eq - (gt + quota);
  }
  const int64_t m = gt + quota;
  st = pgs_buf_reserve(ops, &b->pairs, (size_t)m * 8);
  if (st != PGS_OK) return st;
  /* Counted above: a planned selection (no count to read back). */
  st = ops->compact(ops, b->resid, b->n, thr, quota, 0,
                    pgs_block_idx(b->pairs.ptr), pgs_block_val(b->pairs.ptr, m),
                    (size_t)m, NULL);
  if (st != PGS_OK) return st;
  b->stats.local_selected = m;
  b->stats.local_threshold = thr;

  return pgs_gather_apply_clear(b, m, out);
}

const pgs_algo_vtable_t pgs_algo_gaussiank = {
    .init = NULL,
    .step = gaussiank_step,
    .fini = NULL,
};
