/* A threshold estimator's first guess from the statistics of one pass
 * (pgs_ops.accumulate_stats' out[0..6]), as one function both tables
 * evaluate: the host in C, the device in the kernel that follows the add
 * (pgs_ops.accumulate_guess_select), so a first guess needs no host round
 * trip between the add and its selection and both give the same float.
 * SIDCo's fits (Abdelmoniem et al., MLSys'21) live here; the C core's
 * algo/sidco.c takes its multi-stage fits' stages from them too. */
#ifndef PG_SPARSE_GUESS_H
#define PG_SPARSE_GUESS_H

#include <math.h>

#ifdef __CUDACC__
#define PGS_GUESS_FN __host__ __device__ static inline
#else
#define PGS_GUESS_FN static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** Which distribution a guess reads its threshold off. */
typedef enum pgs_guess_kind {
  PGS_GUESS_NORMAL = 0,  /**< |mean| + a * sd (a: two-sided quantile) */
  PGS_GUESS_LAPLACE = 1, /**< sd / sqrt(2) * a (a: ln(1 / density)) */
  PGS_GUESS_GP = 2,      /**< SIDCo's generalized Pareto fit of |x| */
  PGS_GUESS_GAMMA = 3,   /**< SIDCo's gamma fit of |x| */
} pgs_guess_kind_t;

/** A first guess: its kind, a (see the kinds) and k, the picks wanted (the
 *  fits aim at k of the nonzero entries). */
typedef struct pgs_guess_rule {
  int kind;
  double a;
  double k;
} pgs_guess_rule_t;

/** Moments of a = |x| over the nonzero entries (out[0..4] of abs_stats:
 *  count, sum, sum of squares, sum of logs, minimum). */
typedef struct pgs_tail {
  double count, mean, var, mean_log, min;
} pgs_tail_t;

PGS_GUESS_FN pgs_tail_t pgs_tail_of(const double o[5]) {
  pgs_tail_t t = {o[0], 0.0, 0.0, 0.0, o[4]};
  if (o[0] > 0.0) {
    t.mean = o[1] / o[0];
    t.var = fmax(o[2] / o[0] - t.mean * t.mean, 0.0);
    t.mean_log = o[3] / o[0];
  }
  return t;
}

/** Exponential tail: the first stage fits a (Laplace x), later ones the
 *  excess over the stage's start (the exponential has no memory). */
PGS_GUESS_FN double pgs_fit_exp(const pgs_tail_t *t, double p, int first) {
  return first ? t->mean * log(1.0 / p)
               : t->min + (t->mean - t->min) * log(1.0 / p);
}

/** Generalized Pareto on y = a - min(a), by the method of moments:
 *  xi = (1 - m^2/v) / 2, sigma = m (m^2/v + 1) / 2. */
PGS_GUESS_FN double pgs_fit_gp(const pgs_tail_t *t, double p) {
  const double m = t->mean - t->min, v = t->var;
  if (!(m > 0.0) || !(v > 0.0)) return t->min;
  const double r = m * m / v, xi = 0.5 * (1.0 - r), sigma = 0.5 * m * (r + 1.0);
  if (fabs(xi) < 1e-6) return t->min + sigma * log(1.0 / p);
  return t->min + sigma / xi * (pow(p, -xi) - 1.0);
}

/** Gamma by Minka's approximation of the shape; SIDCo's plain threshold
 *  -beta (ln p + ln Gamma(alpha)); an exponential where that breaks down. */
PGS_GUESS_FN double pgs_fit_gamma(const pgs_tail_t *t, double p) {
  const double s = log(t->mean) - t->mean_log;
  if (!(s > 0.0)) return pgs_fit_exp(t, p, 1);
  const double alpha =
      (3.0 - s + sqrt((s - 3.0) * (s - 3.0) + 24.0 * s)) / (12.0 * s);
  const double eta = -(t->mean / alpha) * (log(p) + lgamma(alpha));
  return eta > 0.0 && isfinite(eta) ? eta : pgs_fit_exp(t, p, 1);
}

PGS_GUESS_FN double pgs_clamp01(double p) {
  return p < 1e-12 ? 1e-12 : (p > 1.0 ? 1.0 : p);
}

/** The guess of @p rule from the statistics @p o (accumulate_stats'
 *  out[0..6]); 0 where a fit has (almost) nothing to pick from or breaks
 *  down. */
PGS_GUESS_FN float pgs_guess_eval(const pgs_guess_rule_t *rule,
                                  const double o[7]) {
  if (rule->kind == PGS_GUESS_NORMAL)
    return (float)(fabs(o[5]) + rule->a * o[6]);
  if (rule->kind == PGS_GUESS_LAPLACE)
    return (float)(o[6] / sqrt(2.0) * rule->a);
  const pgs_tail_t t = pgs_tail_of(o);
  if (t.count < 2.0) return 0.0f;
  /* The density among the nonzero entries: zeros are never picked. */
  const double d = pgs_clamp01(rule->k / t.count);
  const double eta =
      rule->kind == PGS_GUESS_GP ? pgs_fit_gp(&t, d) : pgs_fit_gamma(&t, d);
  return isfinite(eta) && eta > 0.0 ? (float)eta : 0.0f;
}

#ifdef __cplusplus
}
#endif

#endif /* PG_SPARSE_GUESS_H */
