/* gaussiank: threshold mu + z * sigma of grad + residual, z the two-sided
 * normal quantile of the density, then corrected toward [k/2, 2k] picks.
 * Every rank's picks are allgathered (variable counts) and summed; the
 * residual is cleared where this rank sent. */
#include <math.h>

#include "algo/algo_internal.h"

/* Threshold whose count of |acc| >= thr lies in [k/2, 2k] (the
 * estimator's guess, corrected, else exact), with the counts above and at
 * it (so the step need not count again). */
static int gaussiank_threshold(pgs_bucket_t *b, float *thr_out, int64_t *gt,
                               int64_t *eq) {
  return pgs_banded_threshold(b, b->resid, thr_out, gt, eq);
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
