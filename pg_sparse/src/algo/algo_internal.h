/* Internal interface between the bucket driver and the algorithms.
 *
 * The driver (bucket.c) owns the residual, the step counter, validation and
 * statistics; an algorithm implements one step over the comm and ops tables
 * and never learns which transport or memory it runs on. */
#ifndef PGS_ALGO_INTERNAL_H
#define PGS_ALGO_INTERNAL_H

#include <pg_sparse/bucket.h>

#include "util/buf.h"

/** The per-algorithm hooks. init/fini may be NULL. */
typedef struct pgs_algo_vtable {
  /** Allocate per-bucket state into b->algo_state. */
  int (*init)(pgs_bucket_t *b);
  /** One sparse step. Must first add grad into b->resid (pgs_accumulate),
   *  since @p out may alias @p grad; then write the average into @p out and
   *  leave in b->resid whatever was not applied. */
  int (*step)(pgs_bucket_t *b, const float *grad, float *out);
  void (*fini)(pgs_bucket_t *b);
  /** Algorithm part of pgs_bucket_get_state / set_state (may be NULL). */
  void (*save)(const pgs_bucket_t *b, pgs_bucket_state_t *st, int64_t *bounds);
  int (*load)(pgs_bucket_t *b, const pgs_bucket_state_t *st,
              const int64_t *bounds);
} pgs_algo_vtable_t;

/** The candidate list of an exact local top-k (cand.c): the fused pass
 *  lists every entry with |x| >= slack * thr, and the exact k-th comes from
 *  the list when it holds at least k entries. */
typedef struct pgs_cand {
  float thr;   /* last exact local threshold (the anchor); < 0: none yet */
  float slack; /* the list's threshold over thr, adapted per call */
  /* The call before: its slack and its count at slack * thr (m0 < 0: no
   * call yet), for the slack's next step (cand.c). */
  float slack0;
  int64_t m0;
  pgs_buf_t buf; /* [idx cap | val cap] */
  /* This call's list: */
  int32_t *idx;
  float *val;
  int64_t m;    /* entries listed (valid only when ok) */
  int ok;       /* the list holds every entry >= its threshold */
  float kth;    /* the list's k-th largest |val| (found with the list), */
  int64_t n_gt; /* and its entries above it; kth < 0: not found */
  /* Set by an algorithm before pgs_cand_accumulate: region counts to make
   * at the list's k-th in the pass's wait (NULL: none). */
  pgs_regions_t *regions;
} pgs_cand_t;

struct pgs_bucket {
  pgs_config_t cfg;
  pgs_comm_t *comm;
  const pgs_ops_t *ops;
  int rank, size;
  size_t n;
  int64_t k;
  int64_t kg;   /* oktopk's global target: global_factor * k, at most n */
  float *resid; /* n fp32 in ops memory: the error-feedback residual */
  int64_t step; /* calls completed, warm-up included */
  /* The residual is known to be all zero (fresh, or cleared by a dense
   * step): a dense call then needs neither the accumulate nor the clear. */
  int resid_zero;
  /* Every call runs the dense step (residual flushed into it) until cleared:
   * an automatic dense/sparse choice (pgs_bucket_set_dense). */
  int force_dense;
  /* Sizes and settings were compared across ranks (on the first call):
   * they cannot change for the bucket's life, so later dense calls skip the
   * control allreduce, as DDP verifies parameter shapes once. */
  int checked;
  /* This call's input and whether it held NaN/Inf here (with check_finite):
   * the flag rides in the algorithm's first message (pgs_flag_*). */
  const float *call_grad;
  int call_bad;
  uint64_t syncs0; /* ops->host_syncs() when the call began */
  const pgs_algo_vtable_t *algo;
  void *algo_state;
  pgs_stats_t stats;
  /* phase accounting */
  int phase;
  double phase_t0;
  pgs_comm_counters_t phase_c0;
  /* scratch shared by the helpers in sparse.c, reused across calls */
  pgs_buf_t pairs; /* this rank's selection, [idx | val] blocks */
  pgs_cand_t cand; /* the exact local top-k's candidate list */
  pgs_buf_t recv;  /* received pairs */
  /* On a narrow wire (16-bit values): the encoded blocks sent and
   * received, and the rounding errors of the values being encoded. */
  pgs_buf_t wire_send, wire_recv, wire_err;
  /* check_finite == PGS_FINITE_EXACT: the residual as the call found it. */
  pgs_buf_t snapshot;
  /* dgc_sample estimator: the fixed sample's indices (est_m of them, in
   * ops memory, made on first use) and its values. */
  pgs_buf_t est_idx, est_val;
  size_t est_m;
  /* gaussiank: the values of a guess selected in the pass that counted it
   * (pgs_banded_select), before they move behind the indices; and whether
   * the last call's first guess landed in [k/2, 2k], so this call's is
   * counted by selecting it (a speed hint only: both ways select the same
   * entries). */
  pgs_buf_t guess_val;
  int est_landed;
  /* The statistics of this call's sum taken by the accumulate's own pass
   * (ops->accumulate_stats: abs_stats at 0, then mean and std), for the
   * first guess of a statistics estimator; add_stats_ok while they
   * describe the residual as it is. */
  double add_stats[7];
  int add_stats_ok;
  /* SIDCo multi-stage: the current stage count (0: not chosen yet) and the
   * first guesses' picks / k summed over the calls since the last change. */
  int est_stages;
  int est_calls;
  double est_ratio_sum;
  float est_last_thr;   /* reuse estimator: the last call's local threshold */
  int est_dir;          /* the last move of the stage count: +1, -1, 0 none */
  double est_last_err;  /* |ln(picks / k)| of the window before that move */
  int64_t *host_counts; /* 4 * size int64 */
  size_t *host_bytes;   /* 2 * size size_t: allgatherv sizes and displs */
};

#define PGS_ALGO_EXTERN_(id, name, vtable) \
  extern const pgs_algo_vtable_t vtable;
PGS_ALGO_MAP(PGS_ALGO_EXTERN_)
#undef PGS_ALGO_EXTERN_

/* --- phases and stats (bucket.c) ---------------------------------------- */

/** Close the current phase (adding its words, bytes and time to the stats)
 *  and open @p phase; PGS_PHASE_COUNT just closes. */
void pgs_phase_enter(pgs_bucket_t *b, int phase);

/** r += grad (non-finite sums skipped and flagged for the call, see
 *  pgs_flag_settle): the fused pass with nothing to list. */
int pgs_accumulate(pgs_bucket_t *b, const float *grad);

/** r += grad in the fused pass that also counts non-finite sums (for the
 *  per-call flag) and writes the first @p cap entries with |r| >= thr into
 *  (idx, val); *count is how many there are (more than cap: did not fit). */
int pgs_accumulate_select(pgs_bucket_t *b, const float *grad, float thr,
                          int32_t *idx, float *val, size_t cap, int64_t *count);

/** pgs_accumulate_select that also finds the k-th largest |val| of the list
 *  (k > 0; see pgs_fused_t), in the same wait for the device, and with
 *  @p reg (may be NULL) the list's region counts at it where the ops table
 *  fuses them (reg->counted says whether it did). */
int pgs_accumulate_kth(pgs_bucket_t *b, const float *grad, float thr,
                       int32_t *idx, float *val, size_t cap, size_t k,
                       pgs_fused_t *res, pgs_regions_t *reg);

/** x = 0 with the ascending list (idx, val) added at @p scale: the table's
 *  one pass where it has one (ops->set_sorted), else fill_zero and
 *  scatter_add_sorted. */
static inline int pgs_set_sorted(const pgs_ops_t *ops, float *x, size_t n,
                                 const int32_t *idx, const float *val, size_t m,
                                 float scale) {
  if (ops->set_sorted != NULL)
    return ops->set_sorted(ops, x, n, idx, val, m, scale);
  int st = ops->fill_zero(ops, x, n * sizeof(float));
  if (st != PGS_OK) return st;
  return ops->scatter_add_sorted(ops, x, n, idx, val, m, scale);
}

/** A count as sent in the algorithm's first message: negative when this
 *  rank's input was bad, so every receiver learns it without a message of
 *  its own. */
static inline int64_t pgs_flag_encode(const pgs_bucket_t *b, int64_t count) {
  return b->call_bad ? -1 : count;
}

/** After the first message: @p any_negative says a peer flagged its input.
 *  On a flag (ours or a peer's) the residual is restored and the call fails
 *  with PGS_ERR_NONFINITE, on every rank alike. */
int pgs_flag_settle(pgs_bucket_t *b, int any_negative);

/** Whether any of counts[0..m) is negative (a flagged count). */
static inline int pgs_any_negative(const int64_t *counts, size_t m) {
  int neg = 0;
  for (size_t i = 0; i < m; ++i) neg |= counts[i] < 0;
  return neg;
}

/** The dense step: average of (grad + resid), residual cleared. Every
 *  algorithm's warm-up. */
int pgs_dense_step(pgs_bucket_t *b, const float *grad, float *out);

/* --- values on the wire (wire.c) --------------------------------------- */

/** Whether values travel narrower than fp32 (config wire_dtype). Indices are
 *  int32 and the residual fp32 either way. */
static inline int pgs_wire_narrow(const pgs_bucket_t *b) {
  return b->cfg.wire_dtype != PGS_FLOAT32;
}
/** Bytes of one value on the wire. */
static inline size_t pgs_wire_bytes(const pgs_bucket_t *b) {
  return pgs_dtype_size(b->cfg.wire_dtype);
}

/** Encode val[0..m) in the wire type into @p wire (m values) and round
 *  val in place to exactly what the wire carries, so the sender's later
 *  residual update (subtracting what it sent) keeps the rounding error.
 *  With @p keep the error is added there instead: keep[idx[j]] (idx
 *  validated against b->n) or keep[j] when idx is NULL. A rank that forwards
 *  sums it did not take from its own residual keeps their rounding so. */
int pgs_wire_round(pgs_bucket_t *b, float *val, int64_t m, void *wire,
                   float *keep, const int32_t *idx);

/** Sum over ranks of the m values encoded in @p wire, widened into @p sum.
 *  The sum rounds in the wire type, as a dense 16-bit allreduce does; on a
 *  transport without 16-bit sums the values travel as fp32 instead. */
int pgs_wire_sum(pgs_bucket_t *b, void *wire, float *sum, size_t m);

/** Narrow wire: a pairs block [idx | fp32 val] of @p m entries as it
 *  travels, [idx | wire val] into @p dst; the block's values are rounded in
 *  place (pgs_wire_round, @p keep as there, indexed by the block's idx). */
int pgs_wire_encode_block(pgs_bucket_t *b, void *block, int64_t m, void *dst,
                          float *keep);
/** Narrow wire: the received [idx | wire val] block @p src of @p m entries
 *  widened into @p block as [idx | fp32 val]. */
int pgs_wire_decode_block(pgs_bucket_t *b, const void *src, int64_t m,
                          void *block);

/** Residual update after sending the @p m pairs (idx, val) taken from this
 *  rank's residual @p x (n entries, the bucket's or a region of it): zero
 *  there, or on a narrow wire subtract the rounded values sent, so the
 *  rounding error stays. */
int pgs_wire_clear_sent(pgs_bucket_t *b, float *x, size_t n, const int32_t *idx,
                        const float *val, int64_t m);

/* --- shared sparse building blocks (sparse.c) --------------------------- */

/** Offsets of the two halves of a pairs block of @p m entries at @p base:
 *  int32 indices first, fp32 values after them, one contiguous buffer so a
 *  block travels as one message. */
static inline int32_t *pgs_block_idx(void *base) {
  return (int32_t *)base;
}
static inline float *pgs_block_val(void *base, int64_t m) {
  return (float *)((int32_t *)base + m);
}

/* --- the candidate list (cand.c) ---------------------------------------- */

/** Whether SparseState(estimator=...) guesses the local threshold of an
 *  algorithm whose own selection is exact (Ok-Topk, TopkDSA): not for the
 *  default or exact, which take the exact top-k (from the list). */
static inline int pgs_est_guesses(const pgs_bucket_t *b) {
  return b->cfg.estimator != PGS_EST_DEFAULT &&
         b->cfg.estimator != PGS_EST_EXACT;
}

/** Threshold unknown, slack from PG_SPARSE_OKTOPK_CAND_SLACK. */
int pgs_cand_init(pgs_cand_t *c);
void pgs_cand_fini(pgs_cand_t *c, const pgs_ops_t *ops);

/** The fused pass (pgs_accumulate_kth): grad added into the residual and,
 *  with @p list and a last threshold, the candidates listed in @p c. */
int pgs_cand_accumulate(pgs_bucket_t *b, pgs_cand_t *c, const float *grad,
                        int list);

/** After pgs_cand_accumulate: the exact k-th largest |resid| (from the list
 *  when it holds k entries, else by a radix select over n, which marks the
 *  list unusable), the ties to take in index order (*quota) and the entries
 *  selected so (*count: k, or the nonzeros when fewer). */
int pgs_cand_threshold(pgs_bucket_t *b, pgs_cand_t *c, float *thr,
                       int64_t *quota, int64_t *count);

/** The exact top-k of |resid + grad| (ties by lowest index) after adding
 *  @p grad, in one pass over n where the list holds it: one block
 *  [idx | val] into @p dst (room for k pairs), *m the count (k, or the
 *  nonzeros when fewer). */
int pgs_cand_topk(pgs_bucket_t *b, pgs_cand_t *c, const float *grad, void *dst,
                  int64_t *m);

/** Allgather of every rank's block of @p m pairs (at @p send) into b->recv.
 *  On return b->host_counts[0..P) holds each rank's count and *total the sum;
 *  blocks lie back to back in rank order, fp32. On a narrow wire the values
 *  of @p send are rounded in place first (pgs_wire_round, with @p keep as
 *  there: NULL for values from this rank's residual, b->resid for sums it
 *  forwards). */
int pgs_allgather_blocks(pgs_bucket_t *b, void *send, int64_t m, float *keep,
                         int64_t *total);

/** out = 0, then add every block of b->recv (counts in b->host_counts),
 *  each value times 1/P, in rank order. */
int pgs_apply_blocks(pgs_bucket_t *b, float *out);

/** The allgather algorithms' finish (topka, gaussiank): allgather the m
 *  pairs of b->pairs, write the average into out, clear the residual where
 *  this rank sent (all of it was applied). */
int pgs_gather_apply_clear(pgs_bucket_t *b, int64_t m, float *out);

/** Inverse of the standard normal tail: z with P(|Z| > z) = p, 0 < p <= 1. */
double pgs_normal_two_sided_quantile(double p);

/** First guess of the k-th largest |x| over x[0, b->n) by b->cfg.estimator
 *  (PGS_EST_DEFAULT and PGS_EST_GAUSSIAN: mu + z sigma); never for
 *  PGS_EST_EXACT (PGS_ERR_INVALID): the caller selects exactly (estimate.c). */
int pgs_estimate_threshold(pgs_bucket_t *b, const float *x, float *thr);
/* SIDCo's multi-stage fits (sidco.c): the threshold guess of the
 * multi-stage estimators (the one-stage fits are pgs_guess_eval's, through
 * pgs_estimate_threshold), and the stage count's adaptation to the picks a
 * guess gave. */
int pgs_sidco_threshold(pgs_bucket_t *b, const float *x, float *thr);
int pgs_sidco_multistage(pgs_estimator_t e);
void pgs_sidco_adapt(pgs_bucket_t *b, int64_t picks);

/** A threshold of x whose count of |x| >= thr (x != 0) lies in [k/2, 2k]:
 *  the estimator's guess, corrected up to four times (a secant in
 *  log-log space through the misses, estimate.c), else
 *  the exact k-th |x| (directly for PGS_EST_EXACT and k = n). Also the
 *  counts above (*gt) and at (*eq) it; estimate_corrections and
 *  local_recomputed go to the stats (estimate.c). */
int pgs_banded_threshold(pgs_bucket_t *b, const float *x, float *thr,
                         int64_t *gt, int64_t *eq);

/** A first guess made before the call's accumulate, whose own pass listed
 *  the entries at it (room for 2k) and counted them. */
typedef struct pgs_first_guess {
  float thr;     /* the guess */
  int64_t count; /* entries of x at or above it, the first 2k listed */
  int packed;    /* the list's values already behind its count's entries */
} pgs_first_guess_t;

/** pgs_banded_threshold whose first count, where the last call's first
 *  guess landed in [k/2, 2k], is a compaction into @p idx and @p val (room
 *  for 2k pairs each): when this guess lands too, those pairs are its
 *  selection (every entry at or above the threshold, in index order) and *m
 *  their count, so counting and selecting take one pass over x; *gt then
 *  holds the count and *eq 0. Otherwise *m is -1, idx and val hold nothing,
 *  and the rest is as pgs_banded_threshold. (Only after a landed guess: a
 *  missed one compacts up to 2k pairs of a count far from k, which costs
 *  more than the count alone.) With @p first not NULL, that first guess and
 *  its list come from the caller's accumulate, and the corrections go on
 *  from there. */
int pgs_banded_select(pgs_bucket_t *b, const float *x, int32_t *idx, float *val,
                      const pgs_first_guess_t *first, float *thr, int64_t *gt,
                      int64_t *eq, int64_t *m);

/** Whether this call's first guess is taken where the add's statistics
 *  lie (ops->accumulate_guess_select, for a guess of one statistics pass):
 *  1 and its *rule, else 0. */
int pgs_guess_in_add(pgs_bucket_t *b, pgs_guess_rule_t *rule);

/** The add with the first guess of @p rule and the entries at it, in one
 *  table call (see pgs_guess_in_add): *thr the guess, *count the full
 *  count of entries at it (the first @p cap written to idx, val). */
int pgs_accumulate_guess_select(pgs_bucket_t *b, const float *grad,
                                const pgs_guess_rule_t *rule, int32_t *idx,
                                float *val, size_t cap, float *thr,
                                int64_t *count);

/** Whether this call's first guess can be made before its accumulate (after
 *  a guess that landed, as pgs_banded_select selects at it): reuse's is the
 *  last threshold, DGC's sample takes r + g at its indices. Then the
 *  accumulate lists the entries at the guess in its own pass, and the
 *  selection reads no more of the bucket where the guess lands again. */
int pgs_guess_precedes_add(const pgs_bucket_t *b);
/** That guess, for the gradient @p grad not yet added to the residual. */
int pgs_guess_before_add(pgs_bucket_t *b, const float *grad, float *thr);
/** Whether this call's first guess is a statistic of the sum (Gaussian,
 *  SIDCo), which the accumulate then takes in its own pass where the table
 *  can (b->add_stats). */
int pgs_guess_from_stats(const pgs_bucket_t *b);
/** abs_stats(x, n, 0) and mean_std(x, n) for an estimator's first guess:
 *  the accumulate's own where it took them for this residual (once). */
int pgs_first_abs_stats(pgs_bucket_t *b, const float *x, double out[5]);
int pgs_first_mean_std(pgs_bucket_t *b, const float *x, double *mean,
                       double *sd);

/** Monotonic clock in seconds. */
double pgs_now(void);

/** The sum over ranks @p x[0..n) scaled to the average. One rank's sum is
 *  its average already (x * 1.0f == x for every float), so no pass over the
 *  bucket is made there. */
static inline int pgs_to_average(pgs_bucket_t *b, float *x, size_t n) {
  if (b->size == 1) return PGS_OK;
  return b->ops->scale(b->ops, x, n, 1.0f / (float)b->size);
}

#endif /* PGS_ALGO_INTERNAL_H */
