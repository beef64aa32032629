/* gtopk: the global top-k set G by recursive doubling, re-selecting k after
 * every merge (Shi et al., gTop-k S-SGD), for any P: ranks above the largest
 * power of two fold into partners first and receive G back at the end.
 *
 * Exactness fix over the reference: a merge that drops an entry would lose
 * that contribution, so G only chooses the coordinates. Once G is known,
 * every rank allreduces its accumulator at G (k words) and clears its
 * residual at G, so the output is the exact average at G and nothing that
 * was not applied leaves the residual. */
#include <stdlib.h>

#include "algo/algo_internal.h"

typedef struct gtopk_state {
  pgs_buf_t cur;  /* current candidate block [idx | val] */
  pgs_buf_t peer; /* partner's block */
  pgs_buf_t merged;
  pgs_buf_t vals; /* accumulator at G, allreduced */
  /* Narrow wire: blocks [idx | 16-bit val] out and in, values at G. */
  pgs_buf_t wout, win, wvals;
  int64_t *counts; /* P, host: alltoall of block sizes */
  int64_t *peer_counts;
} gtopk_state_t;

static int gtopk_init(pgs_bucket_t *b) {
  gtopk_state_t *s = calloc(1, sizeof(*s));
  if (s == NULL) return PGS_ERR_NO_MEMORY;
  b->algo_state = s;
  s->counts = calloc((size_t)b->size, sizeof(int64_t));
  s->peer_counts = calloc((size_t)b->size, sizeof(int64_t));
  return s->counts && s->peer_counts ? PGS_OK : PGS_ERR_NO_MEMORY;
}

static void gtopk_fini(pgs_bucket_t *b) {
  gtopk_state_t *s = b->algo_state;
  if (s == NULL) return;
  pgs_buf_release(b->ops, &s->cur);
  pgs_buf_release(b->ops, &s->peer);
  pgs_buf_release(b->ops, &s->merged);
  pgs_buf_release(b->ops, &s->vals);
  pgs_buf_release(b->ops, &s->wout);
  pgs_buf_release(b->ops, &s->win);
  pgs_buf_release(b->ops, &s->wvals);
  free(s->counts);
  free(s->peer_counts);
  free(s);
  b->algo_state = NULL;
}

/* Narrow wire: the m pairs of s->cur as they travel, in s->wout. The tree
 * only chooses coordinates, so rounding its values loses no mass. */
static int encode_cur(pgs_bucket_t *b, gtopk_state_t *s, int64_t m) {
  int st =
      pgs_buf_reserve(b->ops, &s->wout, (size_t)m * (4 + pgs_wire_bytes(b)));
  if (st != PGS_OK) return st;
  return pgs_wire_encode_block(b, s->cur.ptr, m, s->wout.ptr, NULL);
}

/* Send @p m pairs of s->cur to @p to (if >= 0) and receive the block of
 * @p from (if >= 0) into s->peer; *got receives its size. Sizes travel first
 * on the control plane so receives are posted with the exact length. */
static int swap_blocks(pgs_bucket_t *b, gtopk_state_t *s, int64_t m, int to,
                       int from, int64_t *got) {
  for (int r = 0; r < b->size; ++r) s->counts[r] = pgs_flag_encode(b, 0);
  if (to >= 0) s->counts[to] = pgs_flag_encode(b, m);
  int st = pgs_comm_alltoall_host(b->comm, s->counts, s->peer_counts);
  /* The first swap carries every rank's input flag to every rank. */
  if (st == PGS_OK)
    st = pgs_flag_settle(b, pgs_any_negative(s->peer_counts, (size_t)b->size));
  if (st != PGS_OK) return st;
  *got = from >= 0 ? s->peer_counts[from] : 0;
  if (*got < 0 || *got > b->k) return PGS_ERR_INDEX;
  st = pgs_buf_reserve(b->ops, &s->peer, (size_t)*got * 8);
  const int narrow = pgs_wire_narrow(b), sends = to >= 0 && m > 0;
  const size_t pair = 4 + pgs_wire_bytes(b);
  if (st == PGS_OK && narrow)
    st = pgs_buf_reserve(b->ops, &s->win, (size_t)*got * pair);
  if (st == PGS_OK && narrow && sends) st = encode_cur(b, s, m);
  if (st != PGS_OK) return st;
  pgs_msg_t snd = {to, narrow ? s->wout.ptr : s->cur.ptr, (size_t)m * pair};
  pgs_msg_t rcv = {from, narrow ? s->win.ptr : s->peer.ptr,
                   (size_t)*got * pair};
  st = pgs_comm_exchange(b->comm, &snd, sends, &rcv,
                         from >= 0 && *got > 0 ? 1 : 0);
  if (st == PGS_OK && narrow && from >= 0 && *got > 0)
    st = pgs_wire_decode_block(b, s->win.ptr, *got, s->peer.ptr);
  return st;
}

/* cur = top-k of (cur merged with peer), kept as an ascending block. */
static int merge_select(pgs_bucket_t *b, gtopk_state_t *s, int64_t *m,
                        int64_t got) {
  const pgs_ops_t *ops = b->ops;
  if (got == 0) return PGS_OK;
  int64_t u = 0, cap = *m + got;
  int st = pgs_buf_reserve(ops, &s->merged, (size_t)cap * 8);
  if (st != PGS_OK) return st;
  /* Separate idx/val halves of capacity cap; repacked into cur below. */
  int32_t *mi = s->merged.ptr;
  float *mv = (float *)(mi + cap);
  st = ops->merge_pairs(
      ops, pgs_block_idx(s->cur.ptr), pgs_block_val(s->cur.ptr, *m), (size_t)*m,
      pgs_block_idx(s->peer.ptr), pgs_block_val(s->peer.ptr, got), (size_t)got,
      mi, mv, (size_t)cap, &u);
  if (st != PGS_OK) return st;
  int64_t keep = u < b->k ? u : b->k;
  float thr = 0.0f;
  int64_t n_gt = 0;
  st = ops->kth_abs(ops, mv, (size_t)u, (size_t)keep, &thr, &n_gt);
  if (st != PGS_OK) return st;
  /* Merged sums can cancel to zero; those entries are dropped here. */
  int64_t quota = thr > 0.0f ? keep - n_gt : 0;
  st = pgs_buf_reserve(ops, &s->cur, (size_t)keep * 8);
  if (st != PGS_OK) return st;
  /* The count is known before selecting (all above thr, plus the quota of
   * ties), so the block's values can start right after its indices. */
  const int64_t want = thr > 0.0f ? keep : n_gt;
  st = ops->select_pairs(ops, mi, mv, (size_t)u, thr, quota,
                         pgs_block_idx(s->cur.ptr),
                         pgs_block_val(s->cur.ptr, want), (size_t)want, NULL);
  if (st != PGS_OK) return st;
  *m = want;
  return PGS_OK;
}

/* Recursive doubling over the largest power of two P2 <= P; rank r >= P2
 * folds into r - P2 before and gets the result back after. */
static int find_global_set(pgs_bucket_t *b, gtopk_state_t *s, int64_t *m) {
  const int P = b->size, r = b->rank;
  int p2 = 1;
  while (p2 * 2 <= P) p2 *= 2;
  int64_t got = 0;
  int extra = r >= p2, host = r < P - p2; /* host: receives a folded rank */
  int st = swap_blocks(b, s, *m, extra ? r - p2 : -1, host ? r + p2 : -1, &got);
  if (st == PGS_OK && host) st = merge_select(b, s, m, got);
  for (int d = 1; d < p2 && st == PGS_OK; d *= 2) {
    int partner = extra ? -1 : r ^ d;
    st = swap_blocks(b, s, *m, partner, partner, &got);
    if (st == PGS_OK && !extra) st = merge_select(b, s, m, got);
  }
  if (st != PGS_OK) return st;
  /* Hand G back to the folded ranks. */
  st = swap_blocks(b, s, *m, host ? r + p2 : -1, extra ? r - p2 : -1, &got);
  if (st != PGS_OK || !extra) return st;
  st = pgs_buf_reserve(b->ops, &s->cur, (size_t)got * 8);
  if (st == PGS_OK)
    st = b->ops->copy(b->ops, s->cur.ptr, s->peer.ptr, (size_t)got * 8,
                      PGS_COPY_SAME);
  *m = got;
  return st;
}

/* Narrow wire: the values at G rounded and taken from the residual (which
 * keeps the rounding), summed (pgs_wire_sum) into s->vals. */
static int reduce_narrow(pgs_bucket_t *b, gtopk_state_t *s, const int32_t *g,
                         int64_t m) {
  const pgs_ops_t *ops = b->ops;
  int st = pgs_buf_reserve(ops, &s->wvals, (size_t)m * pgs_wire_bytes(b));
  if (st == PGS_OK)
    st = pgs_wire_round(b, s->vals.ptr, m, s->wvals.ptr, NULL, NULL);
  if (st == PGS_OK)
    st = pgs_wire_clear_sent(b, b->resid, b->n, g, s->vals.ptr, m);
  if (st != PGS_OK) return st;
  return pgs_wire_sum(b, s->wvals.ptr, s->vals.ptr, (size_t)m);
}

static int gtopk_step(pgs_bucket_t *b, const float *grad, float *out) {
  gtopk_state_t *s = b->algo_state;
  const pgs_ops_t *ops = b->ops;
  int st = pgs_buf_reserve(ops, &s->cur, (size_t)b->k * 8);
  int64_t m = 0;
  if (st == PGS_OK) st = pgs_cand_topk(b, &b->cand, grad, s->cur.ptr, &m);
  if (st != PGS_OK) return st;

  pgs_phase_enter(b, PGS_PHASE_REDUCE);
  st = find_global_set(b, s, &m);
  if (st != PGS_OK) return st;

  pgs_phase_enter(b, PGS_PHASE_GATHER);
  st = pgs_buf_reserve(ops, &s->vals, (size_t)m * 4);
  if (st != PGS_OK) return st;
  const int32_t *g = pgs_block_idx(s->cur.ptr);
  st = ops->gather(ops, b->resid, b->n, g, (size_t)m, s->vals.ptr);
  if (st == PGS_OK && pgs_wire_narrow(b))
    st = reduce_narrow(b, s, g, m);
  else if (st == PGS_OK)
    st = pgs_comm_allreduce(b->comm, s->vals.ptr, (size_t)m, PGS_FLOAT32,
                            PGS_SUM);
  if (st == PGS_OK)
    st = pgs_set_sorted(ops, out, b->n, g, s->vals.ptr, (size_t)m,
                        1.0f / (float)b->size);
  if (st != PGS_OK) return st;
  b->stats.global_selected = m;
  /* A narrow wire took what it sent from the residual already. */
  if (pgs_wire_narrow(b)) return PGS_OK;
  return ops->zero_at(ops, b->resid, b->n, g, (size_t)m);
}

const pgs_algo_vtable_t pgs_algo_gtopk = {
    .init = gtopk_init,
    .step = gtopk_step,
    .fini = gtopk_fini,
};
