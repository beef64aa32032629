/* topkdsa (SparCML-style): the local top-k (exact, or from an estimated
 * threshold when the bucket's estimator says so), Ok-Topk's split and
 * reduce on static equal regions, then an allgather of every reduced nonzero,
 * or of the dense regions when the union of picks exceeds n/3 (then dense is
 * cheaper). The residual is cleared at the local top-k: all of it reaches the
 * output. The own region is reduced as a sorted pair list (the split's list
 * mode), so nothing but the dense gather reads all of it. */
#include <stdlib.h>

#include "algo/split.h"

typedef struct topkdsa_state {
  pgs_split_t split;
} topkdsa_state_t;

static int topkdsa_init(pgs_bucket_t *b) {
  topkdsa_state_t *s = calloc(1, sizeof(*s));
  if (s == NULL) return PGS_ERR_NO_MEMORY;
  b->algo_state = s;
  int st = pgs_split_init(&s->split, b->rank, b->size);
  if (st == PGS_OK) pgs_split_equal_bounds(&s->split, (int64_t)b->n);
  s->split.as_list = 1;
  s->split.count_nonzero = 1;
  return st;
}

static void topkdsa_fini(pgs_bucket_t *b) {
  topkdsa_state_t *s = b->algo_state;
  if (s == NULL) return;
  pgs_split_fini(&s->split, b->ops);
  free(s);
  b->algo_state = NULL;
}

/* Every rank's reduced region, in place in out: regions are contiguous. On
 * a narrow wire the regions travel rounded, each owner keeping its
 * rounding error in its residual. The own region is made dense from the
 * reduced list first. */
static int gather_dense(pgs_bucket_t *b, pgs_split_t *sp, float *out) {
  const pgs_ops_t *ops = b->ops;
  const size_t w = pgs_wire_bytes(b);
  const int64_t mine = pgs_split_len(sp, b->rank);
  int st = pgs_buf_reserve(ops, &sp->red, (size_t)mine * 4);
  if (st == PGS_OK)
    st = pgs_set_sorted(ops, sp->red.ptr, (size_t)mine, sp->lidx, sp->lval,
                        (size_t)sp->lm, 1.0f);
  if (st != PGS_OK) return st;
  size_t *bytes = b->host_bytes, *displs = b->host_bytes + b->size;
  for (int j = 0; j < b->size; ++j) {
    bytes[j] = (size_t)pgs_split_len(sp, j) * w;
    displs[j] = (size_t)sp->bounds[j] * w;
  }
  const void *send = sp->red.ptr;
  void *recv = out;
  if (pgs_wire_narrow(b)) {
    st = pgs_buf_reserve(ops, &b->wire_send, (size_t)mine * w);
    if (st == PGS_OK) st = pgs_buf_reserve(ops, &b->wire_recv, b->n * w);
    if (st == PGS_OK)
      st = pgs_wire_round(b, sp->red.ptr, mine, b->wire_send.ptr,
                          b->resid + sp->bounds[b->rank], NULL);
    send = b->wire_send.ptr;
    recv = b->wire_recv.ptr;
  }
  if (st == PGS_OK)
    st =
        pgs_comm_allgatherv(b->comm, send, bytes[b->rank], recv, bytes, displs);
  if (st == PGS_OK && pgs_wire_narrow(b))
    st = ops->from_wire(ops, recv, b->n, b->cfg.wire_dtype, out);
  if (st != PGS_OK) return st;
  return pgs_to_average(b, out, b->n);
}

/* The reduced nonzeros of every region as global pairs. */
static int gather_sparse(pgs_bucket_t *b, pgs_split_t *sp, int64_t mine,
                         float *out) {
  const pgs_ops_t *ops = b->ops;
  int st = pgs_buf_reserve(ops, &b->pairs, (size_t)mine * 8);
  if (st != PGS_OK) return st;
  int32_t *idx = pgs_block_idx(b->pairs.ptr);
  /* mine nonzeros were counted: a planned selection (ops.h); threshold 0
   * takes every nonzero and no zero. */
  st = ops->select_pairs(ops, sp->lidx, sp->lval, (size_t)sp->lm, 0.0f, 0, idx,
                         pgs_block_val(b->pairs.ptr, mine), (size_t)mine, NULL);
  if (st == PGS_OK && mine > 0)
    st = ops->shift_idx(ops, idx, (size_t)mine, -(int32_t)sp->bounds[b->rank]);
  if (st != PGS_OK) return st;
  int64_t total = 0;
  /* These are sums over ranks: their owner keeps the rounding. */
  st = pgs_allgather_blocks(b, b->pairs.ptr, mine, b->resid, &total);
  if (st != PGS_OK) return st;
  return pgs_apply_blocks(b, out);
}

static int topkdsa_step(pgs_bucket_t *b, const float *grad, float *out) {
  topkdsa_state_t *s = b->algo_state;
  pgs_split_t *sp = &s->split;
  pgs_cand_t *c = &b->cand;
  const int exact = !pgs_est_guesses(b);
  /* Without a list (an estimator's guess) c->ok stays 0. The regions are
   * fixed: the pass plans the split in its wait too. */
  if (exact) pgs_split_plan_in_pass(sp, c);
  int st = pgs_cand_accumulate(b, c, grad, exact);
  float thr = 0.0f;
  int64_t n_gt = 0, n_eq = 0, m = 0, capped = 0, quota = 0;
  if (exact) {
    /* Exactly k (or every nonzero when fewer): the k-th |x| and a quota of
     * its ties. */
    int64_t picks = 0;
    if (st == PGS_OK) st = pgs_cand_threshold(b, c, &thr, &quota, &picks);
    pgs_split_take_plan(sp, c, thr);
  } else if (st == PGS_OK) {
    /* An estimated threshold: every entry at or above it, [k/2, 2k]. */
    st = pgs_banded_threshold(b, b->resid, &thr, &n_gt, &n_eq);
    quota = -1;
  }
  if (st != PGS_OK) return st;
  if (c->ok)
    st = pgs_split_select_pairs(b, sp, c->idx, c->val, c->m, thr, quota, -1, &m,
                                &capped);
  else
    st = pgs_split_select(b, sp, b->resid, thr, quota, -1, &m, &capped);
  if (st != PGS_OK) return st;
  b->stats.local_selected = m;
  b->stats.local_threshold = thr;

  pgs_phase_enter(b, PGS_PHASE_REDUCE);
  st = pgs_split_reduce(b, sp);
  if (st != PGS_OK) return st;

  pgs_phase_enter(b, PGS_PHASE_GATHER);
  /* The reduced list's nonzeros, counted with the reduce's check. */
  const int64_t mine = sp->lnz;
  int64_t uni = mine;
  st = pgs_comm_allreduce_host(b->comm, &uni, 1, PGS_INT64, PGS_SUM);
  if (st != PGS_OK) return st;
  b->stats.global_selected = uni;
  st = 3 * uni > (int64_t)b->n ? gather_dense(b, sp, out)
                               : gather_sparse(b, sp, mine, out);
  if (st != PGS_OK) return st;
  return pgs_split_zero_selected(b, sp, b->resid);
}

const pgs_algo_vtable_t pgs_algo_topkdsa = {
    .init = topkdsa_init,
    .step = topkdsa_step,
    .fini = topkdsa_fini,
};
