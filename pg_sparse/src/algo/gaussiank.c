/* gaussiank: threshold mu + z * sigma of grad + residual, z the two-sided
 * normal quantile of the density, then corrected toward [k/2, 2k] picks.
 * Every rank's picks are allgathered (variable counts) and summed; the
 * residual is cleared where this rank sent. */
#include <math.h>

#include "algo/algo_internal.h"

/* Ties at an exact threshold may exceed 2k; keep the first 2k in index
 * order so the volume stays bounded: the quota of ties at thr to take. */
static int64_t tie_quota(pgs_bucket_t *b, int64_t gt, int64_t eq) {
  if (gt + eq <= 2 * b->k) return eq;
  const int64_t quota = gt < 2 * b->k ? 2 * b->k - gt : 0;
  b->stats.capped = gt + eq - (gt + quota);
  return quota;
}

/* This rank's picks as one block [idx | val] of *m pairs in b->pairs: a
 * threshold whose count of |acc| >= thr lies in [k/2, 2k] (the estimator's
 * guess, corrected, else exact). A first guess inside the band is selected
 * by the pass that counts it; otherwise a planned compaction follows. */
static int gaussiank_select(pgs_bucket_t *b, float *thr, int64_t *m) {
  const pgs_ops_t *ops = b->ops;
  const size_t room = (size_t)(2 * b->k);
  int st = pgs_buf_reserve(ops, &b->pairs, room * 8);
  if (st == PGS_OK) st = pgs_buf_reserve(ops, &b->guess_val, room * 4);
  if (st != PGS_OK) return st;
  int32_t *idx = pgs_block_idx(b->pairs.ptr);
  int64_t gt = 0, eq = 0;
  st = pgs_banded_select(b, b->resid, idx, b->guess_val.ptr, thr, &gt, &eq, m);
  if (st != PGS_OK) return st;
  if (*m >= 0) /* the values go behind the *m indices */
    return ops->copy(ops, pgs_block_val(b->pairs.ptr, *m), b->guess_val.ptr,
                     (size_t)*m * 4, PGS_COPY_SAME);
  const int64_t quota = tie_quota(b, gt, eq);
  *m = gt + quota;
  /* Counted above: a planned selection (no count to read back). */
  return ops->compact(ops, b->resid, b->n, *thr, quota, 0, idx,
                      pgs_block_val(b->pairs.ptr, *m), (size_t)*m, NULL);
}

static int gaussiank_step(pgs_bucket_t *b, const float *grad, float *out) {
  int st = pgs_accumulate(b, grad);
  if (st != PGS_OK) return st;
  float thr = 0.0f;
  int64_t m = 0;
  st = gaussiank_select(b, &thr, &m);
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
