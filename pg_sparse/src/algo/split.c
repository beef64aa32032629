#include "algo/split.h"

#include <stdlib.h>

/* Steps of the rotated exchange posted together: enough to keep several
 * messages in flight, few enough that reducing one batch overlaps the next
 * (the reference uses the same batch of four). */
enum { SPLIT_BATCH = 4 };

int pgs_split_init(pgs_split_t *s, int rank, int size) {
  s->rank = rank;
  s->size = size;
  const size_t P = (size_t)size;
  s->bounds = calloc(P + 1, sizeof(int64_t));
  s->gt = calloc(P, sizeof(int64_t));
  s->eq = calloc(P, sizeof(int64_t));
  s->m = calloc(P, sizeof(int64_t));
  s->mflag = calloc(P, sizeof(int64_t));
  s->pos = calloc(P + 1, sizeof(int64_t));
  s->rthr = calloc(P, sizeof(float));
  s->rquota = calloc(P, sizeof(int64_t));
  s->off = calloc(P + 1, sizeof(int64_t));
  s->rcnt = calloc(P, sizeof(int64_t));
  s->roff = calloc(P + 1, sizeof(int64_t));
  /* Two slots in flight, each with up to SPLIT_BATCH sends and receives of
   * two messages (indices, values). */
  s->msgs = calloc(8 * (size_t)SPLIT_BATCH, sizeof(pgs_msg_t));
  if (!s->bounds || !s->gt || !s->eq || !s->m || !s->mflag || !s->pos ||
      !s->rthr || !s->rquota || !s->off || !s->rcnt || !s->roff || !s->msgs)
    return PGS_ERR_NO_MEMORY;
  return PGS_OK;
}

void pgs_split_fini(pgs_split_t *s, const pgs_ops_t *ops) {
  free(s->bounds);
  free(s->gt);
  free(s->eq);
  free(s->m);
  free(s->mflag);
  free(s->pos);
  free(s->rthr);
  free(s->rquota);
  free(s->off);
  free(s->rcnt);
  free(s->roff);
  free(s->msgs);
  pgs_buf_release(ops, &s->send);
  pgs_buf_release(ops, &s->recv);
  pgs_buf_release(ops, &s->swire);
  pgs_buf_release(ops, &s->rwire);
  pgs_buf_release(ops, &s->red);
  pgs_buf_release(ops, &s->la);
  pgs_buf_release(ops, &s->lb);
}

void pgs_split_equal_bounds(pgs_split_t *s, int64_t n) {
  for (int j = 0; j <= s->size; ++j) s->bounds[j] = n * j / s->size;
}

/* Where a selection reads: the dense accumulator cut at the region bounds,
 * or a candidate list (ascending global indices) cut where each region's
 * run begins. Planning is the same for both; only the packing differs. */
typedef struct split_src {
  const float *val;   /* x, or the candidates' values */
  const int32_t *idx; /* NULL for x; the candidates' global indices */
  const int64_t *cut; /* P + 1 offsets into val: region j's run */
  size_t len;         /* entries of val */
} split_src_t;

static size_t run_len(const split_src_t *src, int j) {
  return (size_t)(src->cut[j + 1] - src->cut[j]);
}

/* Hold region j to its @p cap largest |x| (ties in index order). */
static int cap_region(pgs_bucket_t *b, pgs_split_t *s, const split_src_t *src,
                      int j, int64_t cap, int64_t *capped) {
  *capped += s->m[j] - cap;
  s->m[j] = cap;
  if (cap == 0) return PGS_OK;
  int64_t n_gt = 0;
  int st = b->ops->kth_abs(b->ops, src->val + src->cut[j], run_len(src, j),
                           (size_t)cap, &s->rthr[j], &n_gt);
  s->rquota[j] = cap - n_gt;
  return st;
}

/* Per-region counts, tie quotas (in global index order) and caps. */
static int plan_regions(pgs_bucket_t *b, pgs_split_t *s, const split_src_t *src,
                        float thr, int64_t eq_quota, int64_t cap,
                        int64_t *capped) {
  const int P = s->size;
  /* A candidate list is cut where each region's run begins (into s->pos)
   * in the same read as the counts, or the fused pass has done both. */
  int st = PGS_OK;
  if (src->idx == NULL)
    st = b->ops->count_regions(b->ops, src->val, src->len, src->cut, P, thr,
                               s->gt, s->eq);
  else if (!s->counted)
    st = b->ops->count_pair_regions(b->ops, src->idx, src->val, src->len,
                                    s->bounds, P, thr, s->pos, s->gt, s->eq);
  s->counted = 0;
  if (st != PGS_OK) return st;
  int64_t left = eq_quota;
  for (int j = 0; j < P; ++j) {
    int64_t q = s->eq[j];
    if (left >= 0) {
      q = q < left ? q : left;
      left -= q;
    }
    s->rthr[j] = thr;
    s->rquota[j] = q;
    s->m[j] = s->gt[j] + q;
  }
  for (int j = 0; j < P; ++j) {
    /* Our own region never travels, so it is never capped. */
    if (j == s->rank || cap < 0 || s->m[j] <= cap) continue;
    st = cap_region(b, s, src, j, cap, capped);
    if (st != PGS_OK) return st;
  }
  return PGS_OK;
}

/* Region j's block of s->send: region-relative (index, value) pairs. */
static int pack_region(pgs_bucket_t *b, pgs_split_t *s, const split_src_t *src,
                       int j) {
  const pgs_ops_t *ops = b->ops;
  int32_t *blk = s->sidx + s->off[j];
  float *val = s->sval + s->off[j];
  /* The plan fixed the block's size: selections without a count pointer,
   * checked by the table without a wait for the device (ops.h). */
  if (src->idx == NULL)
    return ops->compact(ops, src->val + src->cut[j], run_len(src, j),
                        s->rthr[j], s->rquota[j], 0, blk, val, (size_t)s->m[j],
                        NULL);
  int st = ops->select_pairs(
      ops, src->idx + src->cut[j], src->val + src->cut[j], run_len(src, j),
      s->rthr[j], s->rquota[j], blk, val, (size_t)s->m[j], NULL);
  if (st != PGS_OK) return st;
  return ops->shift_idx(ops, blk, (size_t)s->m[j], (int32_t)s->bounds[j]);
}

static int select_from(pgs_bucket_t *b, pgs_split_t *s, const split_src_t *src,
                       float thr, int64_t eq_quota, int64_t cap,
                       int64_t *m_total, int64_t *capped) {
  const int P = s->size;
  int st = plan_regions(b, s, src, thr, eq_quota, cap, capped);
  if (st != PGS_OK) return st;
  s->off[0] = 0;
  for (int j = 0; j < P; ++j) s->off[j + 1] = s->off[j] + s->m[j];
  st = pgs_buf_reserve(b->ops, &s->send, (size_t)s->off[P] * 8);
  s->sidx = s->send.ptr;
  s->sval = (float *)(s->sidx + s->off[P]);
  for (int j = 0; j < P && st == PGS_OK; ++j)
    if (s->m[j] > 0) st = pack_region(b, s, src, j);
  /* What travels is rounded to the wire type here, our own region too, so
   * every later use (the reduction, the residual update) sees the same
   * values as the receivers. */
  if (st == PGS_OK && pgs_wire_narrow(b))
    st = pgs_buf_reserve(b->ops, &s->swire,
                         (size_t)s->off[P] * pgs_wire_bytes(b));
  if (st == PGS_OK && pgs_wire_narrow(b))
    st = pgs_wire_round(b, s->sval, s->off[P], s->swire.ptr, NULL, NULL);
  if (st != PGS_OK) return st;
  *m_total = s->off[P];
  return PGS_OK;
}

int pgs_split_select(pgs_bucket_t *b, pgs_split_t *s, const float *x, float thr,
                     int64_t eq_quota, int64_t cap, int64_t *m_total,
                     int64_t *capped) {
  const split_src_t src = {x, NULL, s->bounds, b->n};
  return select_from(b, s, &src, thr, eq_quota, cap, m_total, capped);
}

int pgs_split_select_pairs(pgs_bucket_t *b, pgs_split_t *s, const int32_t *cidx,
                           const float *cval, int64_t mc, float thr,
                           int64_t eq_quota, int64_t cap, int64_t *m_total,
                           int64_t *capped) {
  /* s->pos is filled by the plan (count_pair_regions). */
  const split_src_t src = {cval, cidx, s->pos, (size_t)mc};
  return select_from(b, s, &src, thr, eq_quota, cap, m_total, capped);
}

void pgs_split_plan_in_pass(pgs_split_t *s, pgs_cand_t *c) {
  s->req = (pgs_regions_t){s->bounds, s->size, s->pos, s->gt, s->eq, 0};
  s->counted = 0;
  c->regions = &s->req;
}

void pgs_split_take_plan(pgs_split_t *s, pgs_cand_t *c, float thr) {
  /* Counted over the list's c->m entries at c->kth: the plan of a
   * selection from that list at that threshold. */
  s->counted = c->regions == &s->req && s->req.counted && c->ok &&
               c->kth >= 0.0f && thr == c->kth;
  c->regions = NULL;
}

/* List mode: room for every pair this rank reduces, twice. */
static int plan_list(pgs_bucket_t *b, pgs_split_t *s) {
  s->lcap = s->m[s->rank] + s->roff[s->size - 1];
  int st = pgs_buf_reserve(b->ops, &s->la, (size_t)s->lcap * 8);
  if (st == PGS_OK) st = pgs_buf_reserve(b->ops, &s->lb, (size_t)s->lcap * 8);
  s->lidx = s->la.ptr;
  s->lval = (float *)(s->lidx + s->lcap);
  s->lm = 0;
  return st;
}

/* Merges one block into the list (into the other buffer, then swaps): the
 * sum at an index is the earlier blocks' sum plus this one, the order the
 * dense scatter-add uses. */
static int merge_block(pgs_bucket_t *b, pgs_split_t *s, const int32_t *blk,
                       const float *val, int64_t c) {
  if (s->lm == 0) {
    /* Merging into nothing gives the block itself, whose count is known
     * here: the list points at it (the send or receive buffer, which
     * nothing writes until the next call) and no copy or read is made. */
    s->lidx = blk;
    s->lval = val;
    s->lm = c;
    return PGS_OK;
  }
  pgs_buf_t *other = s->lidx == (int32_t *)s->la.ptr ? &s->lb : &s->la;
  int32_t *oidx = other->ptr;
  float *oval = (float *)(oidx + s->lcap);
  int64_t u = 0;
  int st = b->ops->merge_pairs(b->ops, s->lidx, s->lval, (size_t)s->lm, blk,
                               val, (size_t)c, oidx, oval, (size_t)s->lcap, &u);
  if (st != PGS_OK) return st;
  s->lidx = oidx;
  s->lval = oval;
  s->lm = u;
  return PGS_OK;
}

/* The merged list must lie in the region (indices come from peers): the
 * ends of an ascending list show it in one search. */
static int check_list(pgs_bucket_t *b, pgs_split_t *s) {
  const int64_t keys[2] = {0, pgs_split_len(s, s->rank)};
  int64_t pos[2] = {0, 0};
  int st;
  if (s->count_nonzero) {
    /* The nonzero count (|v| > 0) in the same read as the check. */
    int64_t eq = 0;
    st = b->ops->count_pair_regions(b->ops, s->lidx, s->lval, (size_t)s->lm,
                                    keys, 1, 0.0f, pos, &s->lnz, &eq);
  } else {
    st = b->ops->locate(b->ops, s->lidx, (size_t)s->lm, keys, 2, pos);
  }
  if (st != PGS_OK) return st;
  return pos[0] == 0 && pos[1] == s->lm ? PGS_OK : PGS_ERR_INDEX;
}

/* Receive layout: one block per step t = 1..P-1 (source r - t) at pair
 * offset roff[t-1], in step order, which is also the order of reduction. */
static int plan_receive(pgs_bucket_t *b, pgs_split_t *s) {
  const int P = s->size, r = s->rank;
  for (int j = 0; j < P; ++j) s->mflag[j] = pgs_flag_encode(b, s->m[j]);
  int st = pgs_comm_alltoall_host(b->comm, s->mflag, s->rcnt);
  /* The counts carry every rank's input flag: no message of its own. */
  if (st == PGS_OK)
    st = pgs_flag_settle(b, pgs_any_negative(s->rcnt, (size_t)P));
  if (st != PGS_OK) return st;
  const int64_t own = pgs_split_len(s, r);
  s->roff[0] = 0;
  s->sent_words = 0;
  for (int t = 1; t < P; ++t) {
    int64_t c = s->rcnt[(r - t + P) % P];
    /* A peer sends each index of our region at most once. */
    if (c < 0 || c > own) return PGS_ERR_INDEX;
    s->roff[t] = s->roff[t - 1] + c;
    s->sent_words += 2 * s->m[(r + t) % P];
  }
  s->recv_words = 2 * s->roff[P - 1];
  st = pgs_buf_reserve(b->ops, &s->recv, (size_t)s->roff[P - 1] * 8);
  if (st == PGS_OK && pgs_wire_narrow(b))
    st = pgs_buf_reserve(b->ops, &s->rwire,
                         (size_t)s->roff[P - 1] * pgs_wire_bytes(b));
  if (st != PGS_OK) return st;
  s->ridx = s->recv.ptr;
  s->rval = (float *)(s->ridx + s->roff[P - 1]);
  if (s->as_list) return plan_list(b, s);
  st = pgs_buf_reserve(b->ops, &s->red, (size_t)own * 4);
  if (st != PGS_OK) return st;
  return b->ops->fill_zero(b->ops, s->red.ptr, (size_t)own * 4);
}

/* Where the values of block j (sent) or step t (received) travel: the fp32
 * arrays themselves, or their 16-bit copies. */
static void *send_vals(const pgs_bucket_t *b, const pgs_split_t *s, int j) {
  if (!pgs_wire_narrow(b)) return s->sval + s->off[j];
  return (char *)s->swire.ptr + (size_t)s->off[j] * pgs_wire_bytes(b);
}
static void *recv_vals(const pgs_bucket_t *b, const pgs_split_t *s, int t) {
  if (!pgs_wire_narrow(b)) return s->rval + s->roff[t - 1];
  return (char *)s->rwire.ptr + (size_t)s->roff[t - 1] * pgs_wire_bytes(b);
}

/* Steps [first, batch_end(first)) form one batch. */
static int batch_end(const pgs_split_t *s, int first) {
  return first + SPLIT_BATCH < s->size ? first + SPLIT_BATCH : s->size;
}

static int post_batch(pgs_bucket_t *b, pgs_split_t *s, int first, int slot) {
  const int P = s->size, r = s->rank;
  const size_t w = pgs_wire_bytes(b);
  pgs_msg_t *sends = s->msgs + slot * 4 * SPLIT_BATCH;
  pgs_msg_t *recvs = sends + 2 * SPLIT_BATCH;
  int ns = 0, nr = 0;
  for (int t = first; t < batch_end(s, first); ++t) {
    int dst = (r + t) % P, src = (r - t + P) % P;
    size_t ms = (size_t)s->m[dst], mr = (size_t)s->rcnt[src];
    if (ms > 0) {
      sends[ns++] = (pgs_msg_t){dst, s->sidx + s->off[dst], ms * 4};
      sends[ns++] = (pgs_msg_t){dst, send_vals(b, s, dst), ms * w};
    }
    if (mr > 0) {
      recvs[nr++] = (pgs_msg_t){src, s->ridx + s->roff[t - 1], mr * 4};
      recvs[nr++] = (pgs_msg_t){src, recv_vals(b, s, t), mr * w};
    }
  }
  return pgs_comm_exchange_start(b->comm, sends, ns, recvs, nr, slot);
}

static int reduce_block(pgs_bucket_t *b, pgs_split_t *s, const int32_t *blk,
                        const float *val, int64_t c) {
  if (c == 0) return PGS_OK;
  if (s->as_list) return merge_block(b, s, blk, val, c);
  /* Every index is validated against the region (and the block's order)
   * before anything is added. */
  return b->ops->scatter_add_sorted(b->ops, s->red.ptr,
                                    (size_t)pgs_split_len(s, s->rank), blk, val,
                                    (size_t)c, 1.0f);
}

static int reduce_batch(pgs_bucket_t *b, pgs_split_t *s, int first) {
  const int P = s->size, r = s->rank, end = batch_end(s, first);
  if (pgs_wire_narrow(b)) {
    /* The batch's values lie back to back: widen them in one go. */
    int64_t o = s->roff[first - 1], m = s->roff[end - 1] - o;
    int st = b->ops->from_wire(b->ops, recv_vals(b, s, first), (size_t)m,
                               b->cfg.wire_dtype, s->rval + o);
    if (st != PGS_OK) return st;
  }
  for (int t = first; t < end; ++t) {
    int64_t o = s->roff[t - 1];
    int st =
        reduce_block(b, s, s->ridx + o, s->rval + o, s->rcnt[(r - t + P) % P]);
    if (st != PGS_OK) return st;
  }
  return PGS_OK;
}

int pgs_split_reduce(pgs_bucket_t *b, pgs_split_t *s) {
  const int P = s->size, r = s->rank;
  int st = plan_receive(b, s);
  if (st != PGS_OK) return st;
  /* Our own contribution first, then sources r-1, r-2, ...: a fixed order. */
  st = reduce_block(b, s, s->sidx + s->off[r], s->sval + s->off[r], s->m[r]);
  if (st != PGS_OK) return st;
  /* Alone, the list is our own selection: nothing came from a peer (its
   * nonzeros are still counted: a narrow wire may round a value to 0). */
  if (P == 1) return s->as_list && s->count_nonzero ? check_list(b, s) : PGS_OK;
  st = post_batch(b, s, 1, 0);
  for (int first = 1, i = 0; first < P && st == PGS_OK; ++i) {
    int next = batch_end(s, first);
    /* Post the next batch before reducing this one, so they overlap. */
    if (next < P) st = post_batch(b, s, next, (i + 1) % 2);
    if (st == PGS_OK) st = pgs_comm_exchange_wait(b->comm, i % 2);
    if (st == PGS_OK) st = reduce_batch(b, s, first);
    first = next;
  }
  if (st == PGS_OK && s->as_list) st = check_list(b, s);
  return st;
}

int pgs_split_zero_selected(pgs_bucket_t *b, pgs_split_t *s, float *x) {
  for (int j = 0; j < s->size; ++j) {
    if (s->m[j] == 0) continue;
    float *xj = x + s->bounds[j];
    size_t len = (size_t)pgs_split_len(s, j), m = (size_t)s->m[j];
    const int32_t *idx = s->sidx + s->off[j];
    int st =
        pgs_wire_clear_sent(b, xj, len, idx, s->sval + s->off[j], (int64_t)m);
    if (st != PGS_OK) return st;
  }
  return PGS_OK;
}

int pgs_split_zero_common(pgs_bucket_t *b, pgs_split_t *s, float *x,
                          const int32_t *g, const int64_t *held) {
  /* What went to region j can only meet region j's run of G. */
  for (int64_t j = 0, g0 = 0; j < s->size; g0 += held[j], ++j) {
    if (s->m[j] == 0 || held[j] == 0) continue;
    const float *sent = pgs_wire_narrow(b) ? s->sval + s->off[j] : NULL;
    int st = b->ops->zero_common(b->ops, x, b->n, s->sidx + s->off[j], sent,
                                 (size_t)s->m[j], (int32_t)s->bounds[j], g + g0,
                                 (size_t)held[j]);
    if (st != PGS_OK) return st;
  }
  return PGS_OK;
}
