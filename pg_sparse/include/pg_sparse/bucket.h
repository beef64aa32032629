/* Sparse allreduce of one gradient bucket, with error feedback.
 *
 * A pgs_bucket holds everything that lives across calls for one DDP bucket:
 * the fp32 residual, the step counter, thresholds, region boundaries and the
 * scratch buffers, so the steady-state call allocates nothing.
 *
 * Every call returns the average over ranks (sum / P) as a dense buffer and
 * keeps the invariant, up to fp32 rounding:
 *
 *   sum_ranks(residual_after) + P * output == sum_ranks(grad + residual_before)
 *
 * On a narrow wire (wire_dtype fp16/bf16) each rank keeps what rounding its
 * values to the wire left out, so the invariant still holds to fp32
 * rounding, except where a sum is itself formed in the wire type (dense
 * warm-up calls and gTop-k's values at G, as a dense 16-bit allreduce). */
#ifndef PG_SPARSE_BUCKET_H
#define PG_SPARSE_BUCKET_H

#include <pg_sparse/comm.h>
#include <pg_sparse/ops.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The algorithms: X(id, name, vtable). This row is the only place besides
 * the algorithm's own file that a new algorithm touches: the enum, the
 * names, the core's dispatch table and the Python vocabulary
 * (pg_sparse.algorithms()) are generated from it. */
#define PGS_ALGO_MAP(X)                                  \
  X(PGS_ALGO_DENSE, "dense", pgs_algo_dense)             \
  X(PGS_ALGO_TOPKA, "topka", pgs_algo_topka)             \
  X(PGS_ALGO_TOPKDSA, "topkdsa", pgs_algo_topkdsa)       \
  X(PGS_ALGO_GTOPK, "gtopk", pgs_algo_gtopk)             \
  X(PGS_ALGO_GAUSSIANK, "gaussiank", pgs_algo_gaussiank) \
  X(PGS_ALGO_OKTOPK, "oktopk", pgs_algo_oktopk)

typedef enum pgs_algo_id {
#define PGS_ALGO_ENUM_(id, name, vtable) id,
  PGS_ALGO_MAP(PGS_ALGO_ENUM_)
#undef PGS_ALGO_ENUM_
      PGS_ALGO_COUNT
} pgs_algo_id_t;

/** @return the algorithm's name ("oktopk"), or NULL for an unknown id. */
const char *pgs_algo_name(pgs_algo_id_t algo);
/** Look an algorithm up by name. @return PGS_ERR_INVALID if unknown. */
int pgs_algo_from_name(const char *name, pgs_algo_id_t *out);

/** Threshold estimators of the threshold-based selections: the first guess
 *  of the k-th largest |x|, which the algorithm then corrects toward
 *  [k/2, 2k] picks. X(id, name, doc), defined once for the shim and Python.
 *  Used by gaussiank's and topkdsa's local selection (the others select
 *  exactly; topkdsa's default is exact). */
#define PGS_ESTIMATOR_MAP(X)                                                  \
  X(PGS_EST_DEFAULT, "default", "the algorithm's own (gaussiank: gaussian)")  \
  X(PGS_EST_EXACT, "exact", "exact k-th |x| (radix select), no guess")        \
  X(PGS_EST_GAUSSIAN, "gaussian",                                             \
    "mu + z sigma, z the two-sided normal quantile of the density")           \
  X(PGS_EST_SIDCO_EXP, "sidco_exp",                                           \
    "SIDCo's exponential fit of |x| (Laplace x, scale sigma / sqrt 2): "      \
    "scale * ln(1 / density)")                                                \
  X(PGS_EST_DGC_SAMPLE, "dgc_sample",                                         \
    "DGC: the exact k-th |x| of a fixed random sample (about 1000 entries "   \
    "above the threshold, 0.1% to 1% of the bucket, at least 1024), scaled "  \
    "to the bucket")                                                          \
  X(PGS_EST_SIDCO_GP, "sidco_gp",                                             \
    "SIDCo-P: generalized Pareto fit of |x| (method of moments), one stage")  \
  X(PGS_EST_SIDCO_GAMMA, "sidco_gamma",                                       \
    "SIDCo-GP's first stage: gamma fit of |x|, one stage")                    \
  X(PGS_EST_SIDCO_EXP_MS, "sidco_exp_ms",                                     \
    "SIDCo-E multi-stage: exponential fits of |x|, then of its exceedances "  \
    "over each stage's threshold; stage count adapted every 5 calls")         \
  X(PGS_EST_SIDCO_GP_MS, "sidco_gp_ms",                                       \
    "SIDCo-P multi-stage: generalized Pareto fits, stages adapted")           \
  X(PGS_EST_SIDCO_GAMMA_GP_MS, "sidco_gamma_gp_ms",                           \
    "SIDCo-GP multi-stage: a gamma fit, then generalized Pareto fits of the " \
    "exceedances, stages adapted")                                            \
  X(PGS_EST_REUSE, "reuse",                                                   \
    "Ok-Topk's reuse: the previous call's local threshold (exact on the "     \
    "first call)")

typedef enum pgs_estimator {
#define PGS_EST_ENUM_(id, name, doc) id,
  PGS_ESTIMATOR_MAP(PGS_EST_ENUM_)
#undef PGS_EST_ENUM_
      PGS_EST_COUNT
} pgs_estimator_t;

/** @return the estimator's name ("sidco_exp"), or NULL for an unknown id. */
const char *pgs_estimator_name(pgs_estimator_t est);
/** Look an estimator up by name. @return PGS_ERR_INVALID if unknown. */
int pgs_estimator_from_name(const char *name, pgs_estimator_t *out);

/** Configuration of a bucket. Start from PGS_CONFIG_INIT. */
typedef struct pgs_config {
  size_t struct_size;     /**< sizeof(pgs_config_t), for ABI growth */
  pgs_algo_id_t algo;     /**< which sparse allreduce */
  double density;         /**< k = max(1, round(density * n)); in (0, 1] */
  int64_t warmup_steps;   /**< calls run as dense allreduce first (>= 0) */
  int64_t tau;            /**< oktopk: repartition every tau sparse steps */
  int64_t tau_prime;      /**< exact thresholds every tau_prime sparse steps */
  int check_finite;       /**< 1: NaN/Inf anywhere fails the call on every
                               rank with PGS_ERR_NONFINITE, the residual
                               restored up to rounding; PGS_FINITE_EXACT:
                               the same, the residual restored bit for bit
                               (a snapshot per sparse call: one more pass
                               and n more floats); 0: unchecked */
  pgs_dtype_t wire_dtype; /**< type of the values on the wire: PGS_FLOAT32,
                               or PGS_FLOAT16 / PGS_BFLOAT16 (half the value
                               bytes; what rounding leaves out stays in the
                               residual). Indices are int32 either way. */
  pgs_estimator_t estimator; /**< first guess of threshold-based selections */
  double global_factor;      /**< oktopk: the global selection G targets
                                  global_factor * k entries of the reduced
                                  sum (>= 1; each rank still selects k;
                                  1: the paper's global top-k), so a step
                                  applies more of what TopkA's union would;
                                  the volume bound becomes 3 (k + kg)(P-1)/P
                                  words, kg the target */
} pgs_config_t;

/** check_finite value: fail on NaN/Inf and restore the residual exactly. */
#define PGS_FINITE_EXACT 2

#define PGS_CONFIG_INIT                                                     \
  {                                                                         \
    sizeof(pgs_config_t), PGS_ALGO_OKTOPK, 0.01, 1, 64, 32, 1, PGS_FLOAT32, \
        PGS_EST_DEFAULT, 1.0                                                \
  }

/** Phases of a call, for per-phase words and times. */
typedef enum pgs_phase {
  PGS_PHASE_SELECT = 0, /**< accumulate, local threshold, compaction */
  PGS_PHASE_REDUCE = 1, /**< repartition, split and reduce / tree / dense */
  PGS_PHASE_GATHER = 2, /**< global selection, balance, allgather(v) */
  PGS_PHASE_COUNT = 3,
} pgs_phase_t;

/** What the last call did: the scalar fields, X(type, name, doc), defined
 *  once so the shim and Python generate their typed views from this list.
 *  Words are 4-byte units of the data plane (an index or an fp32 value; a
 *  16-bit value is half a word); control traffic (counts, histograms) is in
 *  bytes. */
#define PGS_STATS_MAP(X)                                                    \
  X(int64_t, step, "0-based call counter of this bucket")                   \
  X(int, dense, "the call ran dense (warm-up or algo dense)")               \
  X(int64_t, n, "bucket size")                                              \
  X(int64_t, k, "target count of entries")                                  \
  X(int64_t, local_selected, "entries this rank contributed")               \
  X(int64_t, global_selected,                                               \
    "pairs applied to the output: |G| for oktopk and gtopk, the union for " \
    "topkdsa, the sum over ranks for topka and gaussiank")                  \
  X(int, local_recomputed, "exact local threshold this call")               \
  X(int, global_recomputed, "exact global threshold this call")             \
  X(int, repartitioned, "oktopk regions recomputed this call")              \
  X(int64_t, capped, "local picks held back by volume caps")                \
  X(int64_t, trimmed, "global picks held back by the volume cap")           \
  X(double, local_threshold, "the local threshold used")                    \
  X(double, global_threshold, "the global threshold used")                  \
  X(int64_t, ctrl_bytes_sent, "control bytes sent (counts, histograms)")    \
  X(int64_t, ctrl_bytes_recv, "control bytes received")                     \
  X(int64_t, transport_calls, "collectives and exchanges this call made")   \
  X(int64_t, host_syncs, "waits of the host for the device")                \
  X(int, estimate_corrections,                                              \
    "gaussiank, topkdsa: corrections of the estimator's guess this call "   \
    "(0: it gave [k/2, 2k] picks; 4 then exact: it missed)")                \
  X(int, estimate_stages,                                                   \
    "SIDCo multi-stage estimators: stages of this call's fit")              \
  X(int, candidates,                                                        \
    "oktopk: the local selection came from the fused pass's candidate "     \
    "list, no extra pass")                                                  \
  X(double, words_lower_bound, "2k(P-1)/P: Ok-Topk's lower bound")          \
  X(double, words_upper_bound,                                              \
    "6k(P-1)/P: Ok-Topk's cap, reported for every algorithm as a yardstick")

typedef struct pgs_stats {
#define PGS_STATS_FIELD_(type, name, doc) type name;
  PGS_STATS_MAP(PGS_STATS_FIELD_)
#undef PGS_STATS_FIELD_
  int64_t words_sent[PGS_PHASE_COUNT]; /**< data words sent, per phase */
  int64_t words_recv[PGS_PHASE_COUNT]; /**< data words received, per phase */
  double time_s[PGS_PHASE_COUNT];      /**< seconds, per phase */
} pgs_stats_t;

typedef struct pgs_bucket pgs_bucket_t;

/** Create the state for a bucket of @p n fp32 values. Not collective.
 *  @p comm and @p ops must share a memory space and outlive the bucket;
 *  @p ops must set every function (PGS_ERR_INVALID otherwise). */
int pgs_bucket_create(const pgs_config_t *config, pgs_comm_t *comm,
                      const pgs_ops_t *ops, size_t n, pgs_bucket_t **out);
void pgs_bucket_destroy(pgs_bucket_t *bucket);

/** Collective: sparse allreduce of @p grad (n fp32) into @p out (n fp32, the
 *  average over ranks). @p out may alias @p grad. Every rank calls with the
 *  same n and configuration; a disagreement returns PGS_ERR_MISMATCH on every
 *  rank (compared on the first call and after pgs_bucket_set_density, as DDP
 *  verifies shapes once). NaN/Inf on any rank returns PGS_ERR_NONFINITE on
 *  every rank (with check_finite): the flag travels in the first message the
 *  algorithm sends anyway, and the residual is restored to what it was, up
 *  to the rounding of r + g - g. Without check_finite, non-finite entries
 *  of grad are dropped (never added to the residual). After any other error
 *  (a transport failure) the residual is unspecified. */
int pgs_bucket_allreduce(pgs_bucket_t *bucket, const float *grad, float *out);

/** pgs_bucket_allreduce for a caller that only queues work after @p out on
 *  the device's stream (DDP's reducer): the checks the call leaves to the
 *  device (a planned count, the indices of received messages) are not
 *  waited for at its end, so it returns once its last kernels are queued.
 *  The next deferred call of any bucket on the same ops reads them before
 *  it starts and, if one failed, returns its error (PGS_ERR_INDEX: a
 *  malformed message; PGS_ERR_INVALID: a broken contract) untouched, its
 *  residual and step as they were; any other wait of the ops reads them as
 *  well. The host waits of a steady call stay the same in number: the
 *  wait moves from the end of one call to the start of the next, where the
 *  device is usually done. A check still unread when the program stops
 *  using the ops is never reported. Host buckets (whose checks are made at
 *  once) behave exactly as pgs_bucket_allreduce. */
int pgs_bucket_allreduce_deferred(pgs_bucket_t *bucket, const float *grad,
                                  float *out);

/** Change the density (k = max(1, round(density * n))) from the next call on,
 *  e.g. a density warm-up schedule. Every rank must set the same value before
 *  the same call: the next call compares k across ranks (PGS_ERR_MISMATCH).
 *  Residual, thresholds and regions are kept; a reused threshold that selects
 *  outside the new [k/2, 2k] band is recomputed. PGS_ERR_INVALID unless
 *  0 < density <= 1. */
int pgs_bucket_set_density(pgs_bucket_t *bucket, double density);

/** dense = 1: from the next call on, every call is the dense step (the
 *  residual is added to the gradient and sent with it, then cleared: nothing
 *  is lost); dense = 0: the algorithm again, its thresholds and regions kept.
 *  For a per-bucket dense/sparse choice. Every rank must make the same
 *  choice before the same call: the next call compares it across ranks
 *  (PGS_ERR_MISMATCH). PGS_ERR_INVALID unless dense is 0 or 1. */
int pgs_bucket_set_dense(pgs_bucket_t *bucket, int dense);

/** Statistics of the last call. */
void pgs_bucket_stats(const pgs_bucket_t *bucket, pgs_stats_t *out);
size_t pgs_bucket_size(const pgs_bucket_t *bucket);
/** What, with the residual, lets a bucket resume a run exactly. */
typedef struct pgs_bucket_state {
  int64_t step;            /**< calls completed */
  double local_threshold;  /**< oktopk reuse state; negative: none yet */
  double global_threshold; /**< likewise */
  int have_bounds;         /**< oktopk regions below are valid */
} pgs_bucket_state_t;

/** Read the resumable state; @p bounds_host (size + 1 int64, may be NULL)
 *  receives oktopk's region boundaries when have_bounds. */
int pgs_bucket_get_state(const pgs_bucket_t *bucket, pgs_bucket_state_t *out,
                         int64_t *bounds_host);
/** Restore what pgs_bucket_get_state() returned (bounds validated). */
int pgs_bucket_set_state(pgs_bucket_t *bucket, const pgs_bucket_state_t *in,
                         const int64_t *bounds_host);

/** Copy the residual (n fp32) to host memory / from host memory. */
int pgs_bucket_get_residual(const pgs_bucket_t *bucket, float *host_out);
int pgs_bucket_set_residual(pgs_bucket_t *bucket, const float *host_in);
/** Multiply the residual entry by entry by @p factor (n fp32 in the bucket's
 *  memory: device memory for a device bucket), in place: a hook that sends
 *  its gradient in changing per-entry units (Adam's normalized ranking)
 *  keeps the residual in the units of the next call without copying it out.
 *  A residual known to be zero is left alone. PGS_ERR_UNSUPPORTED when the
 *  ops table has no mul. */
int pgs_bucket_scale_residual(pgs_bucket_t *bucket, const float *factor);

#ifdef __cplusplus
}
#endif
#endif /* PG_SPARSE_BUCKET_H */
