/* Ok-Topk, local half: threshold reuse, repartition, split and reduce.
 *
 * Volume: a rank's selection crosses to other regions' owners in phase 1.
 * Regions follow the quantiles of the selections, so each peer normally gets
 * about m/P pairs; a block for another rank is capped at 1.5k/P pairs (the
 * largest are kept, the rest stay in the residual), which bounds phase 1 at
 * 3k(P-1)/P words each way whatever the data. Phase 2 fits its volume into
 * what remains of 6k(P-1)/P (oktopk_gather.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <pg_sparse/param.h>

#include "algo/oktopk.h"

/* The local selection is exact on every call, from the candidate list of
 * the fused pass where it holds the top k (cand.c); repartition and the split
 * read the list too. */

static void oktopk_fini(pgs_bucket_t *b) {
  oktopk_state_t *s = b->algo_state;
  if (s == NULL) return;
  pgs_split_fini(&s->split, b->ops);
  pgs_buf_t *bufs[] = {&s->tmp, &s->aidx, &s->aval, &s->awire};
  for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); ++i)
    pgs_buf_release(b->ops, bufs[i]);
  free(s->info);
  free(s->held);
  free(s->cuts);
  free(s->hist);
  free(s->msgs);
  free(s);
  b->algo_state = NULL;
}

/* The tunables of the parameter table, read once per bucket. */
static int read_params(oktopk_state_t *s) {
  double down = 0, up = 0;
  int st = pgs_param_float(PGS_PARAM_OKTOPK_NUDGE_DOWN, &down);
  if (st == PGS_OK) st = pgs_param_float(PGS_PARAM_OKTOPK_NUDGE_UP, &up);
  s->nudge_down = (float)down;
  s->nudge_up = (float)up;
  return st;
}

static int oktopk_init(pgs_bucket_t *b) {
  oktopk_state_t *s = calloc(1, sizeof(*s));
  if (s == NULL) return PGS_ERR_NO_MEMORY;
  b->algo_state = s;
  s->thr_global = -1.0f;
  int st = read_params(s);
  if (st != PGS_OK) return st;
  const size_t P = (size_t)b->size;
  s->info = calloc(3 * P, sizeof(int64_t));
  s->held = calloc(P, sizeof(int64_t));
  s->cuts = calloc(P, sizeof(int64_t));
  s->hist = calloc(PGS_HIST_BINS, sizeof(int64_t));
  s->msgs = calloc(4 * P, sizeof(pgs_msg_t));
  if (!s->info || !s->held || !s->cuts || !s->hist || !s->msgs)
    return PGS_ERR_NO_MEMORY;
  st = pgs_split_init(&s->split, b->rank, b->size);
  s->split.as_list = 1; /* phase 2 reads only the reduced pairs */
  return st;
}

/* The selection (thr, quota) as one ascending list [idx m | val m] in
 * s->tmp: from the candidates when there are, else by passes over x. */
static int selection_list(pgs_bucket_t *b, oktopk_state_t *s,
                          const pgs_cand_t *c, float thr, int64_t quota,
                          int64_t *m) {
  const pgs_ops_t *ops = b->ops;
  int64_t gt = 0, eq = 0;
  const int64_t whole[2] = {0, c->ok ? c->m : (int64_t)b->n};
  const float *x = c->ok ? c->val : b->resid;
  int st =
      ops->count_regions(ops, x, (size_t)whole[1], whole, 1, thr, &gt, &eq);
  if (st != PGS_OK) return st;
  *m = gt + (quota < 0 || quota > eq ? eq : quota);
  st = pgs_buf_reserve(ops, &s->tmp, (size_t)*m * 8);
  if (st != PGS_OK) return st;
  int32_t *idx = s->tmp.ptr;
  float *val = (float *)(idx + *m);
  /* The count is planned: no count pointer, nothing to wait for. */
  if (c->ok)
    return ops->select_pairs(ops, c->idx, c->val, (size_t)c->m, thr, quota, idx,
                             val, (size_t)*m, NULL);
  return ops->compact(ops, b->resid, b->n, thr, quota, 0, idx, val, (size_t)*m,
                      NULL);
}

/* Regions at the averaged quantiles of the ranks' selected indices, so each
 * region draws about the same share of picks. Any P and n, empty regions
 * allowed; sums in int64 so P * n cannot overflow. */
static int repartition(pgs_bucket_t *b, oktopk_state_t *s, const pgs_cand_t *c,
                       float thr, int64_t quota) {
  const int P = b->size;
  const int64_t n = (int64_t)b->n;
  int64_t m = 0;
  int st = selection_list(b, s, c, thr, quota, &m);
  if (st != PGS_OK) return st;
  const int32_t *idx = s->tmp.ptr;
  for (int j = 1; j < P; ++j) {
    int32_t cut = (int32_t)(n * j / P); /* no picks: equal regions */
    if (m > 0) {
      st = b->ops->copy(b->ops, &cut, idx + m * j / P, sizeof(cut),
                        PGS_COPY_TO_HOST);
      if (st != PGS_OK) return st;
    }
    s->cuts[j - 1] = cut;
  }
  st = pgs_comm_allreduce_host(
      b->comm, s->cuts, (size_t)(P - 1 > 0 ? P - 1 : 0), PGS_INT64, PGS_SUM);
  if (st != PGS_OK) return st;
  int64_t *bounds = s->split.bounds;
  bounds[0] = 0;
  bounds[P] = n;
  /* Floors of averages of ascending sequences: ascending, within [0, n]. */
  for (int j = 1; j < P; ++j) bounds[j] = s->cuts[j - 1] / P;
  s->have_bounds = 1;
  b->stats.repartitioned = 1;
  return PGS_OK;
}

/* The local threshold, exact on every call: the k-th largest |acc| and the
 * ties to take in index order (*quota), from the candidate list or a radix
 * select over n, which give the same answer. (The reference reuses the local
 * threshold between exact steps only because a selection over n was
 * expensive; a reused one let up to 2k entries through.) With an estimator,
 * its guess corrected toward [k/2, 2k] picks (then exact), and every entry
 * at the threshold is taken. */
static int local_threshold(pgs_bucket_t *b, float *thr, int64_t *quota) {
  if (!pgs_est_guesses(b)) {
    int64_t count = 0;
    return pgs_cand_threshold(b, &b->cand, thr, quota, &count);
  }
  int64_t n_gt = 0, n_eq = 0;
  *quota = -1;
  int st = pgs_banded_threshold(b, b->resid, thr, &n_gt, &n_eq);
  if (st != PGS_OK) return st;
  b->cand.thr = *thr; /* saved with the state, as an exact one is */
  b->stats.local_threshold = *thr;
  return PGS_OK;
}

static int oktopk_step(pgs_bucket_t *b, const float *grad, float *out) {
  oktopk_state_t *s = b->algo_state;
  const int64_t sparse_step = b->step - b->cfg.warmup_steps;
  pgs_cand_t *c = &b->cand;
  const int regroup = sparse_step % b->cfg.tau == 0 || !s->have_bounds;
  /* With the regions known, the pass plans the split in its wait too. */
  if (!regroup) pgs_split_plan_in_pass(&s->split, c);
  int st = pgs_cand_accumulate(b, c, grad, !pgs_est_guesses(b));
  float thr = 0.0f;
  int64_t quota = 0;
  if (st == PGS_OK) st = local_threshold(b, &thr, &quota);
  pgs_split_take_plan(&s->split, c, thr);
  if (st != PGS_OK) return st;

  pgs_phase_enter(b, PGS_PHASE_REDUCE);
  if (regroup) {
    st = repartition(b, s, c, thr, quota);
    if (st != PGS_OK) return st;
  }
  const int64_t cap = b->size > 1 ? 3 * b->k / (2 * b->size) : -1;
  int64_t m = 0;
  if (c->ok)
    st = pgs_split_select_pairs(b, &s->split, c->idx, c->val, c->m, thr, quota,
                                cap, &m, &b->stats.capped);
  else
    st = pgs_split_select(b, &s->split, b->resid, thr, quota, cap, &m,
                          &b->stats.capped);
  if (st != PGS_OK) return st;
  b->stats.local_selected = m;
  st = pgs_split_reduce(b, &s->split);
  if (st != PGS_OK) return st;

  pgs_phase_enter(b, PGS_PHASE_GATHER);
  return pgs_oktopk_gather(b, s, sparse_step, out);
}

static void oktopk_save(const pgs_bucket_t *b, pgs_bucket_state_t *st,
                        int64_t *bounds) {
  const oktopk_state_t *s = b->algo_state;
  st->local_threshold = b->cand.thr;
  st->global_threshold = s->thr_global;
  st->have_bounds = s->have_bounds;
  if (bounds != NULL && s->have_bounds)
    memcpy(bounds, s->split.bounds, ((size_t)b->size + 1) * sizeof(int64_t));
}

static int oktopk_load(pgs_bucket_t *b, const pgs_bucket_state_t *st,
                       const int64_t *bounds) {
  oktopk_state_t *s = b->algo_state;
  const int P = b->size;
  if (st->have_bounds) {
    if (bounds == NULL || bounds[0] != 0 || bounds[P] != (int64_t)b->n)
      return PGS_ERR_INVALID;
    for (int j = 0; j < P; ++j)
      if (bounds[j + 1] < bounds[j]) return PGS_ERR_INVALID;
    memcpy(s->split.bounds, bounds, ((size_t)P + 1) * sizeof(int64_t));
  }
  s->have_bounds = st->have_bounds != 0;
  b->cand.thr = (float)st->local_threshold;
  s->thr_global = (float)st->global_threshold;
  return PGS_OK;
}

const pgs_algo_vtable_t pgs_algo_oktopk = {
    .init = oktopk_init,
    .step = oktopk_step,
    .fini = oktopk_fini,
    .save = oktopk_save,
    .load = oktopk_load,
};
