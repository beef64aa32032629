/* SIDCo's threshold estimators (Abdelmoniem et al., MLSys'21): fit a
 * distribution to a = |x| and read the threshold the density asks for off
 * its tail, in one statistics pass per stage (ops->abs_stats; no copy of
 * the exceedances; the first stage's where the table can in the
 * accumulate's own pass, pgs_first_abs_stats). Multi-stage fits first aim at
 * the top quarter, then fit the exceedances over each stage's threshold again:
 * gradient tails are heavier than one fit of the bulk predicts. The stage count
 * adapts to the picks the guess gave, every 5 calls, as SIDCo's adaptive mode
 * does. */
#include <math.h>

#include "algo/algo_internal.h"

/* SIDCo's first-stage target (delta_1) and adaptation window and band. */
#define SIDCO_FIRST 0.25
enum { SIDCO_WINDOW = 5, SIDCO_START_STAGES = 2 };
#define SIDCO_BAND_LO 0.8
#define SIDCO_BAND_HI 1.2

static int family(pgs_estimator_t e) { /* 0 exp, 1 gp, 2 gamma then gp */
  switch (e) {
    case PGS_EST_SIDCO_GP:
    case PGS_EST_SIDCO_GP_MS: return 1;
    case PGS_EST_SIDCO_GAMMA:
    case PGS_EST_SIDCO_GAMMA_GP_MS: return 2;
    default: return 0;
  }
}

int pgs_sidco_multistage(pgs_estimator_t e) {
  return e == PGS_EST_SIDCO_EXP_MS || e == PGS_EST_SIDCO_GP_MS ||
         e == PGS_EST_SIDCO_GAMMA_GP_MS;
}

static double fit(int fam, const pgs_tail_t *t, double p, int first) {
  if (fam == 2 && first) return pgs_fit_gamma(t, p);
  return fam == 0 ? pgs_fit_exp(t, p, first) : pgs_fit_gp(t, p);
}

int pgs_sidco_threshold(pgs_bucket_t *b, const float *x, float *thr) {
  const pgs_estimator_t e = b->cfg.estimator;
  const int fam = family(e);
  double o[5];
  int st = pgs_first_abs_stats(b, x, o);
  if (st != PGS_OK) return st;
  pgs_tail_t t = pgs_tail_of(o);
  *thr = 0.0f;
  if (t.count < 2.0) return PGS_OK; /* (almost) nothing to pick from */
  /* The density among the nonzero entries: zeros are never picked. */
  const double d = pgs_clamp01((double)b->k / t.count);
  if (pgs_sidco_multistage(e) && b->est_stages == 0)
    b->est_stages = SIDCO_START_STAGES;
  const int M = pgs_sidco_multistage(e) && d < SIDCO_FIRST ? b->est_stages : 1;
  const double rho = M > 1 ? pow(d / SIDCO_FIRST, 1.0 / (M - 1)) : d;
  double eta = fit(fam, &t, M > 1 ? SIDCO_FIRST : d, 1);
  int stages = 1;
  for (int j = 2; j <= M; ++j, ++stages) {
    st = b->ops->abs_stats(b->ops, x, b->n, (float)eta, o);
    if (st != PGS_OK) return st;
    t = pgs_tail_of(o);
    if (t.count < 2.0) break;
    /* The last stage aims at the k entries themselves. */
    const double p = j == M ? pgs_clamp01((double)b->k / t.count) : rho;
    eta = fit(fam, &t, p, 0);
  }
  b->stats.estimate_stages = stages;
  *thr = isfinite(eta) && eta > 0.0 ? (float)eta : 0.0f;
  return PGS_OK;
}

/* SIDCo's adaptation (its modes -2/-3): every 5 calls, when the first
 * guesses' picks / k average outside [0.8, 1.2], move the stage count one
 * step, within [1, ceil(log2(1 / density))]; the first move adds a stage on
 * over-selection and removes one on under-selection, and a move that made
 * the error (|ln average|) larger reverses the direction. Which way helps
 * depends on the tail: on Student-t data one exponential fit of the bulk
 * under-selects and more stages pick more; the reference's data moved the
 * other way. */
void pgs_sidco_adapt(pgs_bucket_t *b, int64_t picks) {
  if (!pgs_sidco_multistage(b->cfg.estimator) || b->k <= 0) return;
  b->est_ratio_sum += (double)picks / (double)b->k;
  if (++b->est_calls < SIDCO_WINDOW) return;
  const double avg = b->est_ratio_sum / b->est_calls;
  b->est_calls = 0;
  b->est_ratio_sum = 0.0;
  if (avg >= SIDCO_BAND_LO && avg <= SIDCO_BAND_HI) return;
  const double err = fabs(log(avg > 0.0 ? avg : 1e-9));
  if (b->est_dir == 0)
    b->est_dir = avg > SIDCO_BAND_HI ? 1 : -1;
  else if (err > b->est_last_err)
    b->est_dir = -b->est_dir;
  b->est_last_err = err;
  const int most = (int)ceil(log2((double)b->n / (double)b->k));
  const int next = b->est_stages + b->est_dir;
  if (next >= 1 && next <= (most > 1 ? most : 1)) b->est_stages = next;
}
