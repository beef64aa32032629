/* Statistics of a bucket on the host table: mean_std (the Gaussian and
 * SIDCo exponential guesses) and abs_stats (a SIDCo stage's tail fit), each
 * one pass in independent lanes that the compiler vectorises. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu_ops_internal.h"

/* mean_std in one pass: chunks of MS_CHUNK values, each centred on its own
 * mean (the two-pass formula inside the chunk, so no E[x^2] - E[x]^2
 * cancellation for data with a large mean), merged with Chan et al.'s
 * pairwise update, as the CUDA table does. Sums run in MS_LANES
 * independent lanes, which the compiler vectorises without reordering any
 * one sum (at 26.2M on the 2-core VM: 9.3 ms; two scalar passes 43). */
enum { MS_CHUNK = 64, MS_LANES = 8 };

typedef struct moments {
  double n, mean, m2; /* count, mean, centred sum of squares */
} moments_t;

static moments_t merge_moments(moments_t a, moments_t b) {
  if (b.n == 0.0) return a;
  if (a.n == 0.0) return b;
  const double n = a.n + b.n, d = b.mean - a.mean;
  const moments_t out = {n, a.mean + d * (b.n / n),
                         a.m2 + b.m2 + d * d * (a.n * b.n / n)};
  return out;
}

static double lane_total(const double *lane) {
  double t = 0.0;
  for (int j = 0; j < MS_LANES; ++j) t += lane[j];
  return t;
}

/* The moments of one whole chunk. */
PGS_CPU_CLONES
static moments_t chunk_moments(const float *x) {
  double s[MS_LANES] = {0}, q[MS_LANES] = {0};
  for (int i = 0; i < MS_CHUNK; i += MS_LANES)
    for (int j = 0; j < MS_LANES; ++j) s[j] += (double)x[i + j];
  const double mean = lane_total(s) / MS_CHUNK;
  for (int i = 0; i < MS_CHUNK; i += MS_LANES)
    for (int j = 0; j < MS_LANES; ++j) {
      const double d = (double)x[i + j] - mean;
      q[j] += d * d;
    }
  const moments_t out = {MS_CHUNK, mean, lane_total(q)};
  return out;
}

int pgs_cpu_mean_std(const pgs_ops_t *ops, const float *x, size_t n,
                     double *mean, double *std) {
  (void)ops;
  if (mean == NULL || std == NULL || (x == NULL && n > 0))
    return PGS_ERR_INVALID;
  moments_t acc = {0.0, 0.0, 0.0};
  size_t i = 0;
  for (; i + MS_CHUNK <= n; i += MS_CHUNK)
    acc = merge_moments(acc, chunk_moments(x + i));
  for (; i < n; ++i) {
    const moments_t one = {1.0, (double)x[i], 0.0};
    acc = merge_moments(acc, one);
  }
  /* The population standard deviation; 0 and 0 for no values. */
  *mean = acc.mean;
  *std = n > 0 ? sqrt(acc.m2 / (double)n) : 0.0;
  return PGS_OK;
}

/* abs_stats. The sum of ln a takes no log per entry (one log per entry
 * took 140 ms at 26.2M on the 2-core VM, this 25): a = m 2^e exactly, the
 * mantissas m in [0.5, 1) multiply into a double per lane, renormalised
 * every AS_RENORM factors (so >= 2^-16, no underflow), the exponents add
 * up as integers, and one log per lane at the end gives ln(prod m) +
 * (sum e) ln 2, as the CUDA table does. Each product rounds by 2^-53
 * relative, so a lane's sum is off by about its count x 1e-16 in absolute
 * terms. */
enum { AS_LANES = 8, AS_RENORM = 16 };

typedef struct tail_lanes {
  double c[AS_LANES], s[AS_LANES], s2[AS_LANES], prod[AS_LANES], lo[AS_LANES];
  int64_t e[AS_LANES];
} tail_lanes_t;

/* Double bits, and back. */
static inline uint64_t bits_of(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}
static inline double of_bits(uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

/* For a = |x| as a double (exact, a float denormal is a normal double):
 * a = m 2^e with m in [0.5, 1) where a > 0 is finite; a = 0 gives m = 0
 * and Inf gives m = Inf, so the log is -Inf or Inf as ln a would be. An
 * entry not taken gives m = 1, e = 0. Bit selects, no branches, so the
 * lanes vectorise. */
static inline void split_abs(double a, int take, double *m, int64_t *e) {
  const uint64_t u = bits_of(a), ex = u >> 52; /* a >= 0: no sign bit */
  const uint64_t plain = (u & 0x000fffffffffffffull) | 0x3fe0000000000000ull;
  const uint64_t special = -(uint64_t)(ex == 0 || ex == 0x7ff);
  const uint64_t keep = -(uint64_t)(take != 0);
  const uint64_t mb = (special & u) | (~special & plain);
  *m = of_bits((keep & mb) | (~keep & 0x3ff0000000000000ull));
  *e = (int64_t)((ex - 1022) & keep & ~special);
}

/* Brings lane j's product back into [0.5, 1) (a 0 or Inf stays). */
static inline void renorm(tail_lanes_t *t, int j) {
  int pe = 0;
  t->prod[j] = frexp(t->prod[j], &pe);
  t->e[j] += pe;
}

/* Entry |x| = a into lane j where a > thr, branch-free (so the lanes of
 * tail_block vectorise): an entry not taken adds 0 to the sums and
 * multiplies the product by 1. */
static inline void tail_add(tail_lanes_t *t, int j, float x, float thr) {
  const double a = fabs((double)x);
  const int take = a > (double)thr;
  const double at = of_bits(bits_of(a) & -(uint64_t)take);
  double m;
  int64_t e;
  split_abs(a, take, &m, &e);
  t->c[j] += (double)take;
  t->s[j] += at;
  t->s2[j] += at * at;
  t->prod[j] *= m;
  t->e[j] += e;
  const double lo = take ? a : INFINITY;
  t->lo[j] = lo < t->lo[j] ? lo : t->lo[j];
}

/* AS_RENORM rows of AS_LANES entries from x into the lanes. */
PGS_CPU_CLONES
static void tail_block(const float *x, float thr, tail_lanes_t *t) {
  for (int r = 0; r < AS_RENORM; ++r)
    for (int j = 0; j < AS_LANES; ++j) tail_add(t, j, x[r * AS_LANES + j], thr);
}

int pgs_cpu_abs_stats(const pgs_ops_t *ops, const float *x, size_t n, float thr,
                      double out[5]) {
  (void)ops;
  if (out == NULL || (x == NULL && n > 0)) return PGS_ERR_INVALID;
  tail_lanes_t t;
  for (int j = 0; j < AS_LANES; ++j) {
    t.c[j] = t.s[j] = t.s2[j] = 0.0;
    t.prod[j] = 1.0;
    t.lo[j] = INFINITY;
    t.e[j] = 0;
  }
  const size_t block = (size_t)AS_LANES * AS_RENORM;
  size_t i = 0;
  for (; i + block <= n; i += block) {
    tail_block(x + i, thr, &t);
    for (int j = 0; j < AS_LANES; ++j) renorm(&t, j);
  }
  /* The tail, fewer than a block: at most AS_RENORM entries a lane. */
  for (int j = 0; i < n; ++i, j = (j + 1) % AS_LANES)
    tail_add(&t, j, x[i], thr);
  double c = 0.0, s = 0.0, s2 = 0.0, sl = 0.0, lo = INFINITY;
  for (int j = 0; j < AS_LANES; ++j) {
    c += t.c[j];
    s += t.s[j];
    s2 += t.s2[j];
    if (t.c[j] > 0.0)
      sl += log(t.prod[j]) + (double)t.e[j] * 0.69314718055994530942;
    if (t.lo[j] < lo) lo = t.lo[j];
  }
  out[0] = c;
  out[1] = s;
  out[2] = s2;
  out[3] = sl;
  out[4] = c > 0.0 ? lo : 0.0;
  return PGS_OK;
}

/* accumulate_stats on the host: the add, then the two statistics passes,
 * each as vectorised as it is alone (not fused here, so the host table
 * stays the plain reference the CUDA table's one pass is tested against). */
int pgs_cpu_accumulate_stats(const pgs_ops_t *ops, float *r, const float *g,
                             size_t n, int64_t *nonfinite_host, double out[7]) {
  if (out == NULL || nonfinite_host == NULL) return PGS_ERR_INVALID;
  int64_t none = 0;
  int st = pgs_cpu_accumulate_select(ops, r, g, n, INFINITY, NULL, NULL, 0,
                                     &none, nonfinite_host);
  if (st == PGS_OK) st = pgs_cpu_abs_stats(ops, r, n, 0.0f, out);
  if (st == PGS_OK) st = pgs_cpu_mean_std(ops, r, n, &out[5], &out[6]);
  return st;
}

/* accumulate_guess_select on the host: the calls it stands for, in order
 * (the reference the device's one wait is tested against). */
int pgs_cpu_accumulate_guess_select(const pgs_ops_t *ops, float *r,
                                    const float *g, size_t n,
                                    const pgs_guess_rule_t *rule, int32_t *idx,
                                    float *val, size_t cap,
                                    int64_t *nonfinite_host, double out[7],
                                    float *thr_host, int64_t *count_host) {
  if (rule == NULL || thr_host == NULL || count_host == NULL ||
      (idx == NULL && cap > 0))
    return PGS_ERR_INVALID;
  int st = pgs_cpu_accumulate_stats(ops, r, g, n, nonfinite_host, out);
  if (st != PGS_OK) return st;
  *thr_host = pgs_guess_eval(rule, out);
  /* Packed (val NULL): the values listed into the block's second half,
   * then moved behind the count's entries. */
  float *at = val != NULL || idx == NULL ? val : (float *)(idx + cap);
  st = pgs_cpu_compact(ops, r, n, *thr_host, -1, 0, idx, at, cap, count_host);
  if (st == PGS_ERR_OVERFLOW) return PGS_OK; /* the full count, cap written */
  if (st == PGS_OK && val == NULL && *count_host > 0)
    memmove(idx + *count_host, at, (size_t)*count_host * sizeof(float));
  return st;
}
