/* topka: each rank's exact local top-k of |grad + residual| is allgathered
 * and summed everywhere; the residual is cleared where this rank sent.
 * Volume 2k(P-1) words per rank. */
#include "algo/algo_internal.h"

static int topka_step(pgs_bucket_t *b, const float *grad, float *out) {
  /* Reserved before the add: a failure then leaves the residual alone. */
  int st = pgs_buf_reserve(b->ops, &b->pairs, (size_t)b->k * 8);
  int64_t m = 0;
  if (st == PGS_OK) st = pgs_cand_topk(b, &b->cand, grad, b->pairs.ptr, &m);
  if (st != PGS_OK) return st;
  return pgs_gather_apply_clear(b, m, out);
}

const pgs_algo_vtable_t pgs_algo_topka = {
    .init = NULL,
    .step = topka_step,
    .fini = NULL,
};
