/* Threshold estimators: a first guess of the k-th largest |x|, cheaper than
 * the exact radix select (one statistics pass, or a select on a sample).
 * The algorithm corrects the guess toward [k/2, 2k] picks and falls back to
 * the exact select, so a poor guess costs time, never volume. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algo_internal.h"

static const char *const est_names[PGS_EST_COUNT] = {
#define PGS_EST_NAME_(id, name, doc) [id] = name,
    PGS_ESTIMATOR_MAP(PGS_EST_NAME_)
#undef PGS_EST_NAME_
};

const char *pgs_estimator_name(pgs_estimator_t est) {
  if ((int)est < 0 || est >= PGS_EST_COUNT) return NULL;
  return est_names[est];
}

int pgs_estimator_from_name(const char *name, pgs_estimator_t *out) {
  if (name == NULL || out == NULL) return PGS_ERR_INVALID;
  for (int i = 0; i < PGS_EST_COUNT; ++i) {
    if (strcmp(name, est_names[i]) == 0) {
      *out = (pgs_estimator_t)i;
      return PGS_OK;
    }
  }
  return PGS_ERR_INVALID;
}

/* The sample (DGC samples 0.1% to 1%): large enough that about
 * EST_SAMPLE_HITS of its entries lie above the threshold, so the quantile's
 * relative error stays near 1/sqrt(hits), 3%, at any size; at most 1% of
 * the entries, at least 1024 (all of a small bucket). At density 0.01 and
 * 100M entries that is 0.1%, which gathers and selects in a few
 * microseconds where 1% cost a tenth of a read of the bucket. */
enum { EST_SAMPLE_MIN = 1024, EST_SAMPLE_DIV = 100, EST_SAMPLE_HITS = 1000 };

static size_t sample_size(size_t n, int64_t k) {
  size_t m = n / EST_SAMPLE_DIV;
  /* hits / density entries, rounded up */
  const double want = ceil((double)EST_SAMPLE_HITS * (double)n / (double)k);
  if (k > 0 && want < (double)m) m = (size_t)want;
  if (m < EST_SAMPLE_MIN) m = EST_SAMPLE_MIN;
  return m < n ? m : n;
}

static int cmp_i32(const void *a, const void *c) {
  const int32_t x = *(const int32_t *)a, y = *(const int32_t *)c;
  return (x > y) - (x < y);
}

/* Fixed random indices (xorshift64*, seeded by n: the same sample on every
 * call, so the guess moves with the data, not with the draw), copied once
 * into the table's memory. */
static int make_sample(pgs_bucket_t *b) {
  const size_t m = sample_size(b->n, b->k);
  int st = pgs_buf_reserve(b->ops, &b->est_idx, m * sizeof(int32_t));
  /* Room for the sample of x and, for a sample of a sum, of the addend. */
  if (st == PGS_OK)
    st = pgs_buf_reserve(b->ops, &b->est_val, 2 * m * sizeof(float));
  if (st != PGS_OK) return st;
  int32_t *host = malloc(m * sizeof(int32_t));
  if (host == NULL) return PGS_ERR_NO_MEMORY;
  uint64_t s = 0x9E3779B97F4A7C15ull ^ (uint64_t)b->n;
  for (size_t j = 0; j < m; ++j) {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    host[j] = (int32_t)((s * 0x2545F4914F6CDD1Dull >> 11) % b->n);
  }
  /* Ascending, the gathers walk memory in one direction (the quantile does
   * not depend on the order). */
  qsort(host, m, sizeof(int32_t), cmp_i32);
  st = b->ops->copy(b->ops, b->est_idx.ptr, host, m * sizeof(int32_t),
                    PGS_COPY_FROM_HOST);
  free(host);
  if (st == PGS_OK) b->est_m = m;
  return st;
}

/* The same quantile of |x| (of |x + add| where @p add is not NULL: the
 * sum taken at the sample's indices only) on the sample: its
 * ceil(density * m)-th value. */
static int sample_threshold(pgs_bucket_t *b, const float *x, const float *add,
                            float *thr) {
  int st = b->est_m ? PGS_OK : make_sample(b);
  if (st != PGS_OK) return st;
  const size_t m = b->est_m;
  float *val = b->est_val.ptr;
  const int32_t *at = b->est_idx.ptr;
  st = b->ops->gather(b->ops, x, b->n, at, m, val);
  if (st == PGS_OK && add != NULL)
    st = b->ops->gather(b->ops, add, b->n, at, m, val + m);
  if (st == PGS_OK && add != NULL)
    st = b->ops->accumulate(b->ops, val, val + m, m, INFINITY, NULL);
  if (st != PGS_OK) return st;
  size_t ks = (size_t)ceil((double)b->k / (double)b->n * (double)m);
  if (ks < 1) ks = 1;
  if (ks > m) ks = m;
  int64_t n_gt = 0;
  return b->ops->kth_abs(b->ops, (const float *)b->est_val.ptr, m, ks, thr,
                         &n_gt);
}

/* The rule of a first guess taken from one statistics pass, where the
 * estimator has one (not the multi-stage fits, nor a sample or the last
 * threshold): 1 and *rule, else 0. @p d is the density k / n. */
static int guess_rule(const pgs_bucket_t *b, double d, pgs_guess_rule_t *rule) {
  rule->a = 0.0;
  rule->k = (double)b->k;
  switch (b->cfg.estimator) {
    case PGS_EST_DEFAULT:
    case PGS_EST_GAUSSIAN:
      rule->kind = PGS_GUESS_NORMAL;
      rule->a = pgs_normal_two_sided_quantile(d);
      return 1;
    /* Laplace x with scale s has sd = s sqrt 2 and P(|x| > t) = e^(-t/s). */
    case PGS_EST_SIDCO_EXP:
      rule->kind = PGS_GUESS_LAPLACE;
      rule->a = log(1.0 / d);
      return 1;
    case PGS_EST_SIDCO_GP: rule->kind = PGS_GUESS_GP; return 1;
    case PGS_EST_SIDCO_GAMMA: rule->kind = PGS_GUESS_GAMMA; return 1;
    default: return 0;
  }
}

/* How many fits a one-pass guess makes (stats): one, or none for the
 * Gaussian's quantile. */
static void count_stages(pgs_bucket_t *b, const pgs_guess_rule_t *rule) {
  b->stats.estimate_stages = rule->kind != PGS_GUESS_NORMAL;
}

/* A one-pass guess on the host: the statistics its rule reads (the add's
 * where it took them), then pgs_guess_eval, as the device evaluates it. */
static int one_pass_guess(pgs_bucket_t *b, const float *x,
                          const pgs_guess_rule_t *rule, float *thr) {
  double o[7] = {0};
  const int moments =
      rule->kind == PGS_GUESS_NORMAL || rule->kind == PGS_GUESS_LAPLACE;
  const int st = moments ? pgs_first_mean_std(b, x, &o[5], &o[6])
                         : pgs_first_abs_stats(b, x, o);
  if (st != PGS_OK) return st;
  count_stages(b, rule);
  *thr = pgs_guess_eval(rule, o);
  return PGS_OK;
}

int pgs_estimate_threshold(pgs_bucket_t *b, const float *x, float *thr) {
  pgs_guess_rule_t rule = {PGS_GUESS_NORMAL, 0.0, 0.0};
  if (guess_rule(b, (double)b->k / (double)b->n, &rule))
    return one_pass_guess(b, x, &rule, thr);
  switch (b->cfg.estimator) {
    case PGS_EST_DGC_SAMPLE: return sample_threshold(b, x, NULL, thr);
    case PGS_EST_REUSE: *thr = b->est_last_thr; return PGS_OK;
    case PGS_EST_SIDCO_EXP_MS:
    case PGS_EST_SIDCO_GP_MS:
    case PGS_EST_SIDCO_GAMMA_GP_MS: return pgs_sidco_threshold(b, x, thr);
    default: return PGS_ERR_INVALID;
  }
}

int pgs_guess_in_add(pgs_bucket_t *b, pgs_guess_rule_t *rule) {
  if (b->ops->accumulate_guess_select == NULL || !pgs_guess_from_stats(b))
    return 0;
  /* On the device also before a guess has landed: a miss costs the list's
   * writes (at most 2k entries) where a count would write none, and the
   * call saves a host round trip either way. On the host there is no round
   * trip to save, and listing missed guesses cost GaussianK's Gaussian
   * guess 124 -> 153 ms at 26.2M (stop 33, docs/bench/estimators-cpu/). */
  if (!b->est_landed && b->ops->mem != PGS_MEM_DEVICE) return 0;
  const int ok = guess_rule(b, (double)b->k / (double)b->n, rule);
  if (ok) count_stages(b, rule);
  return ok;
}

/* Corrections before giving up on the estimate. Gradients are
 * heavier-tailed than most models assume, so a guess is often off by a
 * factor; a few steps fix that (next_guess), and the exact k-th value
 * bounds the worst case. */
enum { EST_CORRECTIONS = 4 };

/* The next guess after one that missed [k/2, 2k] with @p count picks.
 * The count falls as the threshold rises, about as a power of it in a
 * tail: with two misses behind, the line through both in log-log space is
 * solved for k picks (the secant); with one, a step by the square root of
 * the miss's ratio of picks to k (as if the count fell as the threshold's
 * square). Steps are held to [1/8, 8]x, and a flat or rising secant falls
 * back to the plain step. (A fixed step of 1.5x needed all four
 * corrections and then the exact select on most calls of a residual with
 * error feedback, whose tail moves between calls.) */
static float next_guess(int64_t k, float thr, int64_t count, float prev_thr,
                        int64_t prev_count) {
  const double ratio = count > 0 ? (double)count / (double)k : 1.0 / 64.0;
  double step = sqrt(ratio); /* > 1 when there were too many picks */
  if (prev_count > 0 && count > 0 && prev_count != count && prev_thr > 0.0f &&
      prev_thr != thr) {
    const double slope = (log((double)count) - log((double)prev_count)) /
                         (log((double)thr) - log((double)prev_thr));
    if (slope < 0.0) step = exp(log(1.0 / ratio) / slope);
  }
  if (step > 8.0) step = 8.0;
  if (step < 0.125) step = 0.125;
  return (float)((double)thr * step);
}

/* Entries of x above (*gt) and at (*eq) thr. */
static int count_at(pgs_bucket_t *b, const float *x, float thr, int64_t *gt,
                    int64_t *eq) {
  const int64_t bounds[2] = {0, (int64_t)b->n};
  return b->ops->count_regions(b->ops, x, b->n, bounds, 1, thr, gt, eq);
}

/* The first guess counted by selecting it: compacted into (idx, val) with
 * room for 2k, the full count returned even where it did not fit. */
static int select_at(pgs_bucket_t *b, const float *x, float thr, int32_t *idx,
                     float *val, int64_t *count) {
  const int st = b->ops->compact(b->ops, x, b->n, thr, -1, 0, idx, val,
                                 (size_t)(2 * b->k), count);
  return st == PGS_ERR_OVERFLOW ? PGS_OK : st; /* more than 2k: a miss */
}

/* With the exact estimator, at k = n (where the exact threshold keeps
 * every entry, as density 1 must), and for reuse before any threshold,
 * straight to the exact select. */
static int goes_exact(const pgs_bucket_t *b) {
  return b->cfg.estimator == PGS_EST_EXACT || b->k == (int64_t)b->n ||
         (b->cfg.estimator == PGS_EST_REUSE && !(b->est_last_thr > 0.0f));
}

int pgs_guess_from_stats(const pgs_bucket_t *b) {
  if (goes_exact(b)) return 0;
  switch (b->cfg.estimator) {
    /* The default guesses only in GaussianK (elsewhere it is exact). */
    case PGS_EST_DEFAULT: return b->algo == &pgs_algo_gaussiank;
    case PGS_EST_GAUSSIAN:
    case PGS_EST_SIDCO_EXP:
    case PGS_EST_SIDCO_GP:
    case PGS_EST_SIDCO_GAMMA:
    case PGS_EST_SIDCO_EXP_MS:
    case PGS_EST_SIDCO_GP_MS:
    case PGS_EST_SIDCO_GAMMA_GP_MS: return 1;
    default: return 0;
  }
}

/* The accumulate's statistics serve one first guess of the residual they
 * were taken of; any other x, or a second use, takes its own pass. */
static int take_add_stats(pgs_bucket_t *b, const float *x) {
  const int ok = b->add_stats_ok && x == b->resid;
  b->add_stats_ok = 0;
  return ok;
}

int pgs_first_abs_stats(pgs_bucket_t *b, const float *x, double out[5]) {
  if (!take_add_stats(b, x))
    return b->ops->abs_stats(b->ops, x, b->n, 0.0f, out);
  memcpy(out, b->add_stats, 5 * sizeof(double));
  return PGS_OK;
}

int pgs_first_mean_std(pgs_bucket_t *b, const float *x, double *mean,
                       double *sd) {
  if (!take_add_stats(b, x)) return b->ops->mean_std(b->ops, x, b->n, mean, sd);
  *mean = b->add_stats[5];
  *sd = b->add_stats[6];
  return PGS_OK;
}

int pgs_guess_precedes_add(const pgs_bucket_t *b) {
  if (!b->est_landed || goes_exact(b)) return 0;
  return b->cfg.estimator == PGS_EST_REUSE ||
         b->cfg.estimator == PGS_EST_DGC_SAMPLE;
}

int pgs_guess_before_add(pgs_bucket_t *b, const float *grad, float *thr) {
  if (b->cfg.estimator == PGS_EST_REUSE) {
    *thr = b->est_last_thr;
    return PGS_OK;
  }
  return sample_threshold(b, b->resid, grad, thr);
}

int pgs_banded_select(pgs_bucket_t *b, const float *x, int32_t *idx, float *val,
                      const pgs_first_guess_t *first, float *thr_out,
                      int64_t *gt, int64_t *eq, int64_t *m) {
  const int exact = goes_exact(b);
  float thr = 0.0f;
  *m = -1;
  int st = PGS_OK;
  if (first != NULL)
    thr = first->thr;
  else if (!exact)
    st = pgs_estimate_threshold(b, x, &thr);
  if (st != PGS_OK) return st;
  const int64_t lo = (b->k + 1) / 2, hi = 2 * b->k;
  const int tries = exact && first == NULL ? 0 : EST_CORRECTIONS;
  float prev_thr = 0.0f;
  int64_t prev_count = -1;
  for (int i = 0; i < tries; ++i) {
    const int selecting =
        i == 0 && idx != NULL && (b->est_landed || first != NULL);
    if (i == 0 && first != NULL) {
      *eq = 0; /* selected by the caller's pass, ties with the rest */
      *gt = first->count;
    } else if (selecting) {
      *eq = 0;
      st = select_at(b, x, thr, idx, val, gt);
    } else {
      st = count_at(b, x, thr, gt, eq);
    }
    if (st != PGS_OK) return st;
    const int64_t count = *gt + *eq;
    const int landed = count >= lo && count <= hi && thr > 0.0f;
    if (i == 0) {
      pgs_sidco_adapt(b, count);
      b->est_landed = landed;
    }
    if (landed) {
      *thr_out = b->est_last_thr = thr;
      b->stats.estimate_corrections = i;
      if (selecting) *m = count;
      return PGS_OK;
    }
    const float next = next_guess(b->k, thr, count, prev_thr, prev_count);
    prev_thr = thr;
    prev_count = count;
    thr = next;
  }
  b->stats.estimate_corrections = tries;
  int64_t n_gt = 0;
  st = b->ops->kth_abs(b->ops, x, b->n, (size_t)b->k, &thr, &n_gt);
  if (st != PGS_OK) return st;
  b->stats.local_recomputed = 1;
  *thr_out = b->est_last_thr = thr;
  return count_at(b, x, thr, gt, eq);
}

int pgs_banded_threshold(pgs_bucket_t *b, const float *x, float *thr_out,
                         int64_t *gt, int64_t *eq) {
  int64_t m = -1;
  return pgs_banded_select(b, x, NULL, NULL, NULL, thr_out, gt, eq, &m);
}
