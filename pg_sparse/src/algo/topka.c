/* topka: each rank's exact local top-k of |grad + residual| is allgathered
 * and summed everywhere; the residual is cleared where this rank sent.
 * Volume 2k(P-1) words per rank. */
#include "algo/algo_internal.h"

static int topka_step(pgs_bucket_t *b, const float *grad, float *out) {
  const pgs_ops_t *ops = b->ops;
  int st = pgs_accumulate(b, grad);
  if (st != PGS_OK) return st;
  st = pgs_buf_reserve(ops, &b->pairs, (size_t)b->k * 8);
  if (st != PGS_OK) return st;
  int64_t m = 0;
  float thr = 0.0f;
  st = pgs_select_topk(b, b->resid, b->n, b->k, 0, b->pairs.ptr, (size_t)b->k,
                       &m, &thr);
  if (st != PGS_OK) return st;
  b->stats.local_selected = m;
  b->stats.local_recomputed = 1;
  b->stats.local_threshold = thr;

  return pgs_gather_apply_clear(b, m, out);
}

const pgs_algo_vtable_t pgs_algo_topka = {
    .init = NULL,
    .step = topka_step,
    .fini = NULL,
};
