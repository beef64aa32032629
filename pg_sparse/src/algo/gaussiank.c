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

/* Room for 2k pairs: the selection's block and a guess's values. */
static int reserve_room(pgs_bucket_t *b) {
  const size_t room = (size_t)(2 * b->k);
  int st = pgs_buf_reserve(b->ops, &b->pairs, room * 8);
  if (st == PGS_OK) st = pgs_buf_reserve(b->ops, &b->guess_val, room * 4);
  return st;
}

/* This rank's picks as one block [idx | val] of *m pairs in b->pairs: a
 * threshold whose count of |acc| >= thr lies in [k/2, 2k] (the estimator's
 * guess, corrected, else exact). A first guess inside the band is selected
 * by the pass that counts it (@p first: the accumulate's own pass);
 * otherwise a planned compaction follows. */
static int gaussiank_select(pgs_bucket_t *b, const pgs_first_guess_t *first,
                            float *thr, int64_t *m) {
  const pgs_ops_t *ops = b->ops;
  int32_t *idx = pgs_block_idx(b->pairs.ptr);
  int64_t gt = 0, eq = 0;
  int st = pgs_banded_select(b, b->resid, idx, b->guess_val.ptr, first, thr,
                             &gt, &eq, m);
  if (st != PGS_OK) return st;
  if (*m >= 0 && first != NULL && first->packed) return PGS_OK;
  if (*m >= 0) /* the values go behind the *m indices */
    return ops->copy(ops, pgs_block_val(b->pairs.ptr, *m), b->guess_val.ptr,
                     (size_t)*m * 4, PGS_COPY_SAME);
  const int64_t quota = tie_quota(b, gt, eq);
  *m = gt + quota;
  /* Counted above: a planned selection (no count to read back). */
  return ops->compact(ops, b->resid, b->n, *thr, quota, 0, idx,
                      pgs_block_val(b->pairs.ptr, *m), (size_t)*m, NULL);
}

/* The accumulate, and where the first guess precedes it, the list of the
 * entries at the guess in the same pass (one pass over the bucket where
 * the guess lands: the add and the selection); where the guess comes from
 * the add's statistics, the add, the guess and its list in one table call
 * (on the device, one wait). */
static int accumulate_guess(pgs_bucket_t *b, const float *grad,
                            pgs_first_guess_t *first, int *have_first) {
  pgs_guess_rule_t rule = {PGS_GUESS_NORMAL, 0.0, 0.0};
  if (pgs_guess_in_add(b, &rule)) {
    *have_first = 1;
    first->packed = 1; /* listed as the selection's block: no copy after */
    return pgs_accumulate_guess_select(
        b, grad, &rule, pgs_block_idx(b->pairs.ptr), NULL, (size_t)(2 * b->k),
        &first->thr, &first->count);
  }
  *have_first = pgs_guess_precedes_add(b);
  if (!*have_first) return pgs_accumulate(b, grad);
  int st = pgs_guess_before_add(b, grad, &first->thr);
  if (st != PGS_OK) return st;
  return pgs_accumulate_select(b, grad, first->thr, pgs_block_idx(b->pairs.ptr),
                               b->guess_val.ptr, (size_t)(2 * b->k),
                               &first->count);
}

static int gaussiank_step(pgs_bucket_t *b, const float *grad, float *out) {
  pgs_first_guess_t first = {0.0f, 0, 0};
  int have_first = 0;
  int st = reserve_room(b);
  if (st == PGS_OK) st = accumulate_guess(b, grad, &first, &have_first);
  if (st != PGS_OK) return st;
  float thr = 0.0f;
  int64_t m = 0;
  st = gaussiank_select(b, have_first ? &first : NULL, &thr, &m);
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
