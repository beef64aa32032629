/* The bucket driver: state, validation, warm-up, statistics.
 *
 * Algorithms see a bucket whose residual is ready and whose call has been
 * checked collectively; this file holds everything they have in common. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pg_sparse/log.h>

#include "algo/algo_internal.h"

static const pgs_algo_vtable_t *const algo_table[PGS_ALGO_COUNT] = {
#define PGS_ALGO_VTABLE_(id, name, vtable) [id] = &vtable,
    PGS_ALGO_MAP(PGS_ALGO_VTABLE_)
#undef PGS_ALGO_VTABLE_
};

static const char *const algo_names[PGS_ALGO_COUNT] = {
#define PGS_ALGO_NAME_(id, name, vtable) [id] = name,
    PGS_ALGO_MAP(PGS_ALGO_NAME_)
#undef PGS_ALGO_NAME_
};

const char *pgs_algo_name(pgs_algo_id_t algo) {
  if ((int)algo < 0 || algo >= PGS_ALGO_COUNT) return NULL;
  return algo_names[algo];
}

int pgs_algo_from_name(const char *name, pgs_algo_id_t *out) {
  if (name == NULL || out == NULL) return PGS_ERR_INVALID;
  for (int i = 0; i < PGS_ALGO_COUNT; ++i) {
    if (strcmp(name, algo_names[i]) == 0) {
      *out = (pgs_algo_id_t)i;
      return PGS_OK;
    }
  }
  return PGS_ERR_INVALID;
}

double pgs_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* --- creation ------------------------------------------------------------ */

static int check_config(const pgs_config_t *c, size_t n) {
  if (c->struct_size != sizeof(pgs_config_t)) return PGS_ERR_INVALID;
  if ((int)c->algo < 0 || c->algo >= PGS_ALGO_COUNT) return PGS_ERR_INVALID;
  /* !(x > 0) also rejects NaN. */
  if (!(c->density > 0.0) || c->density > 1.0) return PGS_ERR_INVALID;
  if (c->warmup_steps < 0 || c->tau < 1 || c->tau_prime < 1)
    return PGS_ERR_INVALID;
  /* !(x >= 1) also rejects NaN; the bound keeps k * factor finite. */
  if (!(c->global_factor >= 1.0) || c->global_factor > 1e6)
    return PGS_ERR_INVALID;
  if (c->check_finite < 0 || c->check_finite > PGS_FINITE_EXACT)
    return PGS_ERR_INVALID;
  if ((int)c->estimator < 0 || c->estimator >= PGS_EST_COUNT)
    return PGS_ERR_INVALID;
  if (c->wire_dtype != PGS_FLOAT32 && c->wire_dtype != PGS_FLOAT16 &&
      c->wire_dtype != PGS_BFLOAT16)
    return PGS_ERR_UNSUPPORTED;
  /* Indices travel as int32. */
  if (n == 0 || n > (size_t)INT32_MAX) return PGS_ERR_UNSUPPORTED;
  return PGS_OK;
}

/* Every function of the table (bucket.h asks for a complete one): an
 * embedder's table that lacks one is refused here rather than crashing in a
 * call. */
static int ops_complete(const pgs_ops_t *o) {
  return o->alloc && o->free && o->copy && o->fill_zero && o->sync &&
         o->accumulate && o->scale && o->count_nonfinite && o->mean_std &&
         o->count_regions && o->kth_abs && o->hist_abs && o->compact &&
         o->select_pairs && o->gather && o->zero_at && o->scatter_add &&
         o->scatter_add_sorted && o->accumulate_kth && o->zero_common &&
         o->merge_pairs && o->accumulate_select && o->unaccumulate &&
         o->shift_idx && o->locate && o->check && o->count_pair_regions &&
         o->host_syncs && o->to_wire && o->from_wire;
}

static int64_t target_k(double density, size_t n) {
  double k = floor(density * (double)n + 0.5);
  if (k < 1.0) k = 1.0;
  if (k > (double)n) k = (double)n;
  return (int64_t)k;
}

/* k and the global target kg = global_factor * k (at most n). */
static void set_k(pgs_bucket_t *b, double density) {
  b->k = target_k(density, b->n);
  double kg = floor(b->cfg.global_factor * (double)b->k + 0.5);
  b->kg = kg > (double)b->n ? (int64_t)b->n : (int64_t)kg;
}

int pgs_bucket_create(const pgs_config_t *config, pgs_comm_t *comm,
                      const pgs_ops_t *ops, size_t n, pgs_bucket_t **out) {
  if (config == NULL || comm == NULL || ops == NULL || out == NULL)
    return PGS_ERR_INVALID;
  *out = NULL;
  int st = check_config(config, n);
  if (st != PGS_OK) return st;
  if (pgs_comm_mem(comm) != ops->mem || !ops_complete(ops))
    return PGS_ERR_INVALID;

  pgs_bucket_t *b = calloc(1, sizeof(*b));
  if (b == NULL) return PGS_ERR_NO_MEMORY;
  b->cfg = *config;
  b->comm = comm;
  b->ops = ops;
  b->rank = pgs_comm_rank(comm);
  b->size = pgs_comm_size(comm);
  b->n = n;
  set_k(b, config->density);
  b->algo = algo_table[config->algo];
  b->phase = PGS_PHASE_COUNT;
  b->host_counts = calloc(4 * (size_t)b->size, sizeof(int64_t));
  b->host_bytes = calloc(2 * (size_t)b->size, sizeof(size_t));
  if (b->host_counts == NULL || b->host_bytes == NULL) {
    st = PGS_ERR_NO_MEMORY;
    goto fail;
  }
  st = ops->alloc(ops, (void **)&b->resid, n * sizeof(float));
  if (st != PGS_OK) goto fail;
  st = ops->fill_zero(ops, b->resid, n * sizeof(float));
  if (st != PGS_OK) goto fail;
  b->resid_zero = 1;
  st = pgs_cand_init(&b->cand);
  if (st != PGS_OK) goto fail;
  if (b->algo->init != NULL) {
    st = b->algo->init(b);
    if (st != PGS_OK) goto fail;
  }
  pgs_log(PGS_LOG_DEBUG, "bucket",
          "bucket of %zu values: %s, k = %lld, rank %d of %d", n,
          pgs_algo_name(config->algo), (long long)b->k, b->rank, b->size);
  *out = b;
  return PGS_OK;
fail:
  pgs_log(PGS_LOG_DEBUG, "bucket", "bucket of %zu values not created: %s", n,
          pgs_status_string(st));
  pgs_bucket_destroy(b);
  return st;
}

void pgs_bucket_destroy(pgs_bucket_t *b) {
  if (b == NULL) return;
  if (b->algo != NULL && b->algo->fini != NULL) b->algo->fini(b);
  if (b->resid != NULL) b->ops->free(b->ops, b->resid);
  pgs_buf_release(b->ops, &b->pairs);
  pgs_cand_fini(&b->cand, b->ops);
  pgs_buf_release(b->ops, &b->recv);
  pgs_buf_release(b->ops, &b->wire_send);
  pgs_buf_release(b->ops, &b->wire_recv);
  pgs_buf_release(b->ops, &b->wire_err);
  pgs_buf_release(b->ops, &b->snapshot);
  pgs_buf_release(b->ops, &b->est_idx);
  pgs_buf_release(b->ops, &b->est_val);
  pgs_buf_release(b->ops, &b->guess_val);
  free(b->host_counts);
  free(b->host_bytes);
  free(b);
}

int pgs_bucket_set_density(pgs_bucket_t *b, double density) {
  /* !(x > 0) also rejects NaN. */
  if (b == NULL || !(density > 0.0) || density > 1.0) return PGS_ERR_INVALID;
  b->cfg.density = density;
  set_k(b, density);
  b->checked = 0; /* the next call compares k across ranks again */
  return PGS_OK;
}

int pgs_bucket_set_dense(pgs_bucket_t *b, int dense) {
  if (b == NULL || (dense != 0 && dense != 1)) return PGS_ERR_INVALID;
  b->force_dense = dense;
  /* The next call compares the choice across ranks, also where it did not
   * change here: a rank that kept its choice must still catch one that
   * changed (both call this before the same call). */
  b->checked = 0;
  return PGS_OK;
}

size_t pgs_bucket_size(const pgs_bucket_t *b) {
  return b == NULL ? 0 : b->n;
}

void pgs_bucket_stats(const pgs_bucket_t *b, pgs_stats_t *out) {
  if (b != NULL && out != NULL) *out = b->stats;
}

int pgs_bucket_get_residual(const pgs_bucket_t *b, float *host_out) {
  if (b == NULL || host_out == NULL) return PGS_ERR_INVALID;
  return b->ops->copy(b->ops, host_out, b->resid, b->n * sizeof(float),
                      PGS_COPY_TO_HOST);
}

int pgs_bucket_scale_residual(pgs_bucket_t *b, const float *factor) {
  if (b == NULL || factor == NULL) return PGS_ERR_INVALID;
  if (b->ops->mul == NULL) return PGS_ERR_UNSUPPORTED;
  if (b->resid_zero) return PGS_OK;
  return b->ops->mul(b->ops, b->resid, factor, b->n);
}

int pgs_bucket_set_residual(pgs_bucket_t *b, const float *host_in) {
  if (b == NULL || host_in == NULL) return PGS_ERR_INVALID;
  b->resid_zero = 0;
  return b->ops->copy(b->ops, b->resid, host_in, b->n * sizeof(float),
                      PGS_COPY_FROM_HOST);
}

int pgs_bucket_get_state(const pgs_bucket_t *b, pgs_bucket_state_t *out,
                         int64_t *bounds_host) {
  if (b == NULL || out == NULL) return PGS_ERR_INVALID;
  out->step = b->step;
  out->local_threshold = -1.0;
  out->global_threshold = -1.0;
  out->have_bounds = 0;
  if (b->algo->save != NULL) b->algo->save(b, out, bounds_host);
  return PGS_OK;
}

int pgs_bucket_set_state(pgs_bucket_t *b, const pgs_bucket_state_t *in,
                         const int64_t *bounds_host) {
  if (b == NULL || in == NULL || in->step < 0) return PGS_ERR_INVALID;
  if (b->algo->load != NULL) {
    int st = b->algo->load(b, in, bounds_host);
    if (st != PGS_OK) return st;
  }
  b->step = in->step;
  return PGS_OK;
}

/* --- phases --------------------------------------------------------------- */

void pgs_phase_enter(pgs_bucket_t *b, int phase) {
  double now = pgs_now();
  pgs_comm_counters_t c;
  pgs_comm_get_counters(b->comm, &c);
  if (b->phase < PGS_PHASE_COUNT) {
    pgs_stats_t *s = &b->stats;
    /* Data words are bytes / 4: a 16-bit value counts half a word. */
    s->words_sent[b->phase] +=
        (int64_t)((c.data_sent - b->phase_c0.data_sent) / 4);
    s->words_recv[b->phase] +=
        (int64_t)((c.data_recv - b->phase_c0.data_recv) / 4);
    s->ctrl_bytes_sent += (int64_t)(c.ctrl_sent - b->phase_c0.ctrl_sent);
    s->ctrl_bytes_recv += (int64_t)(c.ctrl_recv - b->phase_c0.ctrl_recv);
    s->transport_calls += (int64_t)(c.calls - b->phase_c0.calls);
    s->time_s[b->phase] += now - b->phase_t0;
  }
  b->phase = phase;
  b->phase_t0 = now;
  b->phase_c0 = c;
}

/* --- the call ------------------------------------------------------------- */

/* A plain add (nothing listed) before a statistics estimator's first
 * guess: the table may take the guess's statistics in the add's pass. */
static int plain_add_with_stats(const pgs_bucket_t *b, float thr) {
  return !(thr < INFINITY) && b->ops->accumulate_stats != NULL &&
         pgs_guess_from_stats(b);
}

static int add_with_stats(pgs_bucket_t *b, const float *grad,
                          pgs_fused_t *res) {
  res->count = 0;
  const int st = b->ops->accumulate_stats(b->ops, b->resid, grad, b->n,
                                          &res->nonfinite, b->add_stats);
  b->add_stats_ok = st == PGS_OK;
  return st;
}

/* Before an add in place with check_finite exact: the residual's bits, so
 * a failed call puts them back. */
static int snapshot_before_add(pgs_bucket_t *b) {
  if (b->cfg.check_finite != PGS_FINITE_EXACT) return PGS_OK;
  const size_t bytes = b->n * sizeof(float);
  const int st = pgs_buf_reserve(b->ops, &b->snapshot, bytes);
  return st != PGS_OK ? st
                      : b->ops->copy(b->ops, b->snapshot.ptr, b->resid, bytes,
                                     PGS_COPY_SAME);
}

int pgs_accumulate_guess_select(pgs_bucket_t *b, const float *grad,
                                const pgs_guess_rule_t *rule, int32_t *idx,
                                float *val, size_t cap, float *thr,
                                int64_t *count) {
  int st = snapshot_before_add(b);
  if (st != PGS_OK) return st;
  int64_t nonfinite = 0;
  st = b->ops->accumulate_guess_select(b->ops, b->resid, grad, b->n, rule, idx,
                                       val, cap, &nonfinite, b->add_stats, thr,
                                       count);
  b->add_stats_ok = 0; /* the guess took them */
  b->call_grad = grad;
  b->call_bad = b->cfg.check_finite && nonfinite > 0;
  return st;
}

int pgs_accumulate_kth(pgs_bucket_t *b, const float *grad, float thr,
                       int32_t *idx, float *val, size_t cap, size_t k,
                       pgs_fused_t *res, pgs_regions_t *reg) {
  int st = snapshot_before_add(b);
  if (st != PGS_OK) return st;
  res->kth = -1.0f;
  res->n_gt = 0;
  if (reg != NULL) reg->counted = 0;
  if (k > 0 && reg != NULL && b->ops->accumulate_kth_regions != NULL)
    st = b->ops->accumulate_kth_regions(b->ops, b->resid, grad, b->n, thr, idx,
                                        val, cap, k, res, reg);
  else if (k > 0)
    st = b->ops->accumulate_kth(b->ops, b->resid, grad, b->n, thr, idx, val,
                                cap, k, res);
  else if (plain_add_with_stats(b, thr))
    st = add_with_stats(b, grad, res);
  else
    st = b->ops->accumulate_select(b->ops, b->resid, grad, b->n, thr, idx, val,
                                   cap, &res->count, &res->nonfinite);
  b->call_grad = grad;
  b->call_bad = b->cfg.check_finite && res->nonfinite > 0;
  return st;
}

int pgs_accumulate_select(pgs_bucket_t *b, const float *grad, float thr,
                          int32_t *idx, float *val, size_t cap,
                          int64_t *count) {
  pgs_fused_t res = {0, 0, -1.0f, 0};
  int st = pgs_accumulate_kth(b, grad, thr, idx, val, cap, 0, &res, NULL);
  *count = res.count;
  return st;
}

int pgs_accumulate(pgs_bucket_t *b, const float *grad) {
  int64_t none = 0;
  /* +Inf selects nothing: the pass only adds and checks. */
  return pgs_accumulate_select(b, grad, INFINITY, NULL, NULL, 0, &none);
}

int pgs_flag_settle(pgs_bucket_t *b, int any_negative) {
  if (!b->call_bad && !any_negative) return PGS_OK;
  if (b->cfg.check_finite == PGS_FINITE_EXACT) {
    int st = b->ops->copy(b->ops, b->resid, b->snapshot.ptr,
                          b->n * sizeof(float), PGS_COPY_SAME);
    return st != PGS_OK ? st : PGS_ERR_NONFINITE;
  }
  /* The add skipped every non-finite sum, so subtracting the finite part of
   * grad gives back the residual the call started from. */
  int st = b->ops->unaccumulate(b->ops, b->resid, b->call_grad, b->n);
  return st != PGS_OK ? st : PGS_ERR_NONFINITE;
}

/* Sizes and settings, compared across ranks once per layout (the first
 * call, and after a density change): MAX of (v, -v) gives max and -min, so
 * one small allreduce detects any disagreement. Per-call input problems
 * travel in the algorithms' own messages instead (pgs_flag_*). */
enum { CHECK_FIELDS = 10 };

static int check_settings(pgs_bucket_t *b) {
  const int64_t mine[CHECK_FIELDS] = {(int64_t)b->n,
                                      b->k,
                                      (int64_t)b->cfg.algo,
                                      b->cfg.warmup_steps,
                                      b->cfg.tau,
                                      b->cfg.tau_prime,
                                      (int64_t)b->cfg.wire_dtype,
                                      b->force_dense,
                                      (int64_t)b->cfg.estimator,
                                      b->kg};
  int64_t v[2 * CHECK_FIELDS];
  for (int i = 0; i < CHECK_FIELDS; ++i) {
    v[2 * i] = mine[i];
    v[2 * i + 1] = -mine[i];
  }
  int st =
      pgs_comm_allreduce_host(b->comm, v, 2 * CHECK_FIELDS, PGS_INT64, PGS_MAX);
  if (st != PGS_OK) return st;
  for (int i = 0; i < CHECK_FIELDS; ++i)
    if (v[2 * i] != -v[2 * i + 1]) return PGS_ERR_MISMATCH;
  return PGS_OK;
}

static void reset_stats(pgs_bucket_t *b) {
  pgs_stats_t *s = &b->stats;
  memset(s, 0, sizeof(*s));
  s->step = b->step;
  s->n = (int64_t)b->n;
  s->k = b->k;
  double pf = (double)(b->size - 1) / (double)b->size;
  s->words_lower_bound = 2.0 * (double)b->k * pf;
  s->words_upper_bound = 3.0 * (double)(b->k + b->kg) * pf;
  b->syncs0 = b->ops->host_syncs(b->ops);
}

/* Sum over ranks, fail on a non-finite result (any rank's NaN/Inf makes
 * the sum non-finite on every rank, so no control message is needed), then
 * scale to the average. */
static int reduce_checked(pgs_bucket_t *b, float *out) {
  const pgs_ops_t *ops = b->ops;
  int st = pgs_comm_allreduce(b->comm, out, b->n, PGS_FLOAT32, PGS_SUM);
  if (st != PGS_OK) return st;
  if (b->cfg.check_finite) {
    int64_t bad = 0;
    st = ops->count_nonfinite(ops, out, b->n, &bad);
    if (st != PGS_OK) return st;
    if (bad > 0) return PGS_ERR_NONFINITE;
  }
  return pgs_to_average(b, out, b->n);
}

/* Narrow wire: out (grad + residual) travels rounded to the wire type and
 * what rounding left out becomes the residual, once the sum is known to be
 * finite (a failed call leaves the residual as it was). */
static int reduce_narrow(pgs_bucket_t *b, float *out) {
  const pgs_ops_t *ops = b->ops;
  const pgs_dtype_t dt = b->cfg.wire_dtype;
  const size_t n = b->n;
  int st = pgs_buf_reserve(ops, &b->wire_send, n * pgs_wire_bytes(b));
  if (st == PGS_OK) st = pgs_buf_reserve(ops, &b->wire_err, n * sizeof(float));
  if (st != PGS_OK) return st;
  float *sum = b->wire_err.ptr;
  /* out becomes the rounding error; the sum is widened beside it. */
  st = ops->to_wire(ops, out, n, dt, b->wire_send.ptr, out);
  if (st == PGS_OK) st = pgs_wire_sum(b, b->wire_send.ptr, sum, n);
  if (st == PGS_OK && b->cfg.check_finite) {
    int64_t bad = 0;
    st = ops->count_nonfinite(ops, sum, n, &bad);
    if (st == PGS_OK && bad > 0) st = PGS_ERR_NONFINITE;
  }
  if (st == PGS_OK)
    st = ops->copy(ops, b->resid, out, n * sizeof(float), PGS_COPY_SAME);
  if (st == PGS_OK)
    st = ops->copy(ops, out, sum, n * sizeof(float), PGS_COPY_SAME);
  if (st != PGS_OK) return st;
  b->resid_zero = 0;
  return pgs_to_average(b, out, n);
}

/* The dense call on a zero residual: the average of grad alone, as DDP's own
 * allreduce computes it, with no pass over the residual. */
static int dense_fresh(pgs_bucket_t *b, const float *grad, float *out) {
  const pgs_ops_t *ops = b->ops;
  int st = PGS_OK;
  if ((const float *)out != grad)
    st = ops->copy(ops, out, grad, b->n * sizeof(float), PGS_COPY_SAME);
  if (st != PGS_OK) return st;
  pgs_phase_enter(b, PGS_PHASE_REDUCE);
  if (pgs_wire_narrow(b)) return reduce_narrow(b, out);
  return reduce_checked(b, out);
}

/* A non-finite sum on one rank must fail the call on all: a NaN written
 * into the data makes the reduced result non-finite everywhere. */
static int poison(pgs_bucket_t *b, float *out) {
  const float nan = NAN;
  return b->ops->copy(b->ops, out, &nan, sizeof(nan), PGS_COPY_FROM_HOST);
}

int pgs_dense_step(pgs_bucket_t *b, const float *grad, float *out) {
  const pgs_ops_t *ops = b->ops;
  b->stats.dense = 1;
  b->stats.local_selected = (int64_t)b->n;
  b->stats.global_selected = (int64_t)b->n;
  if (b->resid_zero) return dense_fresh(b, grad, out);
  /* out = grad + residual; the residual itself stays as it is until the
   * call has succeeded, so a failed call leaves it exactly untouched. */
  int st = PGS_OK;
  if ((const float *)out != grad)
    st = ops->copy(ops, out, grad, b->n * sizeof(float), PGS_COPY_SAME);
  int64_t none = 0, bad = 0;
  if (st == PGS_OK)
    st = ops->accumulate_select(ops, out, b->resid, b->n, INFINITY, NULL, NULL,
                                0, &none, &bad);
  if (st == PGS_OK && bad > 0 && b->cfg.check_finite) st = poison(b, out);
  if (st != PGS_OK) return st;
  pgs_phase_enter(b, PGS_PHASE_REDUCE);
  if (pgs_wire_narrow(b)) return reduce_narrow(b, out);
  st = reduce_checked(b, out);
  if (st != PGS_OK) return st;
  st = ops->fill_zero(ops, b->resid, b->n * sizeof(float));
  if (st == PGS_OK) b->resid_zero = 1;
  return st;
}

/* One call; with @p defer, the checks it leaves to the device are not
 * waited for at its end (see pgs_bucket_allreduce_deferred). */
static int bucket_call(pgs_bucket_t *b, const float *grad, float *out,
                       int defer) {
  if (b == NULL || grad == NULL || out == NULL) return PGS_ERR_INVALID;
  reset_stats(b);
  pgs_phase_enter(b, PGS_PHASE_SELECT);
  /* An earlier deferred call's checks first: a failure stops this call
   * before it touches anything (a wait only while they are unread). */
  int st = defer ? b->ops->check(b->ops) : PGS_OK;
  const int dense = b->step < b->cfg.warmup_steps || b->force_dense ||
                    b->algo == &pgs_algo_dense;
  b->call_bad = 0;
  b->call_grad = grad;
  b->add_stats_ok = 0;
  if (st == PGS_OK) st = b->checked ? PGS_OK : check_settings(b);
  if (st == PGS_OK) {
    b->checked = 1;
    if (dense) {
      st = pgs_dense_step(b, grad, out);
    } else {
      b->resid_zero = 0;
      st = b->algo->step(b, grad, out);
    }
  }
  /* Checks the call left to the device (planned counts, indices): a wait
   * only when no read-back of the call came after the last of them. Read
   * after a failure too, so none is left to fail the next call. */
  if (!defer || st != PGS_OK) {
    const int checked = b->ops->check(b->ops);
    if (st == PGS_OK) st = checked;
  }
  pgs_phase_enter(b, PGS_PHASE_COUNT);
  b->stats.host_syncs = (int64_t)(b->ops->host_syncs(b->ops) - b->syncs0);
  if (st == PGS_OK) b->step++;
  return st;
}

int pgs_bucket_allreduce(pgs_bucket_t *b, const float *grad, float *out) {
  return bucket_call(b, grad, out, 0);
}

int pgs_bucket_allreduce_deferred(pgs_bucket_t *b, const float *grad,
                                  float *out) {
  return bucket_call(b, grad, out, 1);
}
