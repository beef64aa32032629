/* Ok-Topk, local half: threshold reuse, repartition, split and reduce.
 *
 * Volume: a rank's selection crosses to other regions' owners in phase 1.
 * Regions follow the quantiles of the selections, so each peer normally gets
 * about m/P pairs; a block for another rank is capped at 1.5k/P pairs (the
 * largest are kept, the rest stay in the residual), which bounds phase 1 at
 * 3k(P-1)/P words each way whatever the data. Phase 2 fits its volume into
 * what remains of 6k(P-1)/P (oktopk_gather.c). */
#include <stdlib.h>
#include <string.h>

#include "algo/oktopk.h"

static void oktopk_fini(pgs_bucket_t *b) {
  oktopk_state_t *s = b->algo_state;
  if (s == NULL) return;
  pgs_split_fini(&s->split, b->ops);
  pgs_buf_t *bufs[] = {&s->tmp,  &s->gidx, &s->gval, &s->bidx,
                       &s->bval, &s->aidx, &s->aval};
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

static int oktopk_init(pgs_bucket_t *b) {
  oktopk_state_t *s = calloc(1, sizeof(*s));
  if (s == NULL) return PGS_ERR_NO_MEMORY;
  b->algo_state = s;
  s->thr_local = -1.0f;
  s->thr_global = -1.0f;
  const size_t P = (size_t)b->size;
  s->info = calloc(3 * P, sizeof(int64_t));
  s->held = calloc(P, sizeof(int64_t));
  s->cuts = calloc(P, sizeof(int64_t));
  s->hist = calloc(PGS_HIST_BINS, sizeof(int64_t));
  s->msgs = calloc(4 * P, sizeof(pgs_msg_t));
  if (!s->info || !s->held || !s->cuts || !s->hist || !s->msgs)
    return PGS_ERR_NO_MEMORY;
  return pgs_split_init(&s->split, b->rank, b->size);
}

/* Regions at the averaged quantiles of the ranks' selected indices, so each
 * region draws about the same share of picks. Any P and n, empty regions
 * allowed; sums in int64 so P * n cannot overflow. */
static int repartition(pgs_bucket_t *b, oktopk_state_t *s, float thr,
                       int64_t quota) {
  const pgs_ops_t *ops = b->ops;
  const int P = b->size;
  const int64_t n = (int64_t)b->n, whole[2] = {0, n};
  int64_t gt = 0, eq = 0, m = 0;
  int st = ops->count_regions(ops, b->resid, b->n, whole, 1, thr, &gt, &eq);
  if (st != PGS_OK) return st;
  m = gt + (quota < 0 || quota > eq ? eq : quota);
  st = pgs_buf_reserve(ops, &s->tmp, (size_t)m * 8);
  if (st != PGS_OK) return st;
  int32_t *idx = s->tmp.ptr;
  int64_t got = 0;
  st = ops->compact(ops, b->resid, b->n, thr, quota, 0, idx, (float *)(idx + m),
                    (size_t)m, &got);
  if (st != PGS_OK) return st;
  for (int j = 1; j < P; ++j) {
    int32_t cut = (int32_t)(n * j / P); /* no picks: equal regions */
    if (m > 0) {
      st = ops->copy(ops, &cut, idx + m * j / P, sizeof(cut), PGS_COPY_TO_HOST);
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

/* Local threshold: exact k-th |acc| on schedule or when the reused one picks
 * outside [k/2, 2k]; *quota is the number of ties to take (-1: all). */
static int local_threshold(pgs_bucket_t *b, oktopk_state_t *s, int exact,
                           int64_t n_ge, float *thr, int64_t *quota) {
  if (!exact && n_ge >= (b->k + 1) / 2 && n_ge <= 2 * b->k) {
    *thr = s->thr_local;
    *quota = -1;
    return PGS_OK;
  }
  int64_t n_gt = 0;
  int st = b->ops->kth_abs(b->ops, b->resid, b->n, (size_t)b->k, thr, &n_gt);
  *quota = *thr > 0.0f ? b->k - n_gt : 0;
  b->stats.local_recomputed = 1;
  return st;
}

static int oktopk_step(pgs_bucket_t *b, const float *grad, float *out) {
  oktopk_state_t *s = b->algo_state;
  const int64_t sparse_step = b->step - b->cfg.warmup_steps;
  /* At k = n a reused threshold would drop entries that density 1 keeps. */
  const int exact = sparse_step % b->cfg.tau_prime == 0 ||
                    s->thr_local < 0.0f || b->k == (int64_t)b->n;
  int64_t n_ge = 0;
  int st = pgs_accumulate(b, grad, exact ? -1.0f : s->thr_local,
                          exact ? NULL : &n_ge);
  float thr = 0.0f;
  int64_t quota = 0;
  if (st == PGS_OK) st = local_threshold(b, s, exact, n_ge, &thr, &quota);
  if (st != PGS_OK) return st;
  s->thr_local = thr;
  b->stats.local_threshold = thr;

  pgs_phase_enter(b, PGS_PHASE_REDUCE);
  if (sparse_step % b->cfg.tau == 0 || !s->have_bounds) {
    st = repartition(b, s, thr, quota);
    if (st != PGS_OK) return st;
  }
  const int64_t cap = b->size > 1 ? 3 * b->k / (2 * b->size) : -1;
  int64_t m = 0;
  st = pgs_split_select(b, &s->split, b->resid, thr, quota, cap, &m,
                        &b->stats.capped);
  if (st != PGS_OK) return st;
  b->stats.local_selected = m;
  s->thr_local =
      pgs_oktopk_nudge(thr, m + b->stats.capped, b->k, 1.012f, 1.012f);
  st = pgs_split_reduce(b, &s->split);
  if (st != PGS_OK) return st;

  pgs_phase_enter(b, PGS_PHASE_GATHER);
  return pgs_oktopk_gather(b, s, sparse_step, out);
}

static void oktopk_save(const pgs_bucket_t *b, pgs_bucket_state_t *st,
                        int64_t *bounds) {
  const oktopk_state_t *s = b->algo_state;
  st->local_threshold = s->thr_local;
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
  s->thr_local = (float)st->local_threshold;
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
