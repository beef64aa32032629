/* Ok-Topk (Li & Hoefler, PPoPP'22): shared state of its two files.
 * oktopk.c: local selection, repartition, phase 1 (split and reduce);
 * oktopk_gather.c: phase 2 (global selection, volume cap, balance,
 * allgather), output and residual. */
#ifndef PGS_ALGO_OKTOPK_H
#define PGS_ALGO_OKTOPK_H

#include "algo/split.h"

typedef struct oktopk_state {
  pgs_split_t split;
  float thr_global; /* reused between exact steps; < 0 before the first */
  int have_bounds;
  float nudge_down; /* PG_SPARSE_OKTOPK_NUDGE_DOWN */
  float nudge_up;   /* PG_SPARSE_OKTOPK_NUDGE_UP */
  pgs_buf_t tmp;    /* full local selection at repartition */
  /* All of G, ascending: each rank's picks land at their place, balance
   * moves shares between ranks, the allgather fills the rest. */
  pgs_buf_t aidx, aval;
  pgs_buf_t awire; /* on a narrow wire: aval as it travels */
  int64_t *info;   /* 3P host: per rank (picks, phase-1 sent, recv) */
  int64_t *held;   /* P host: picks per region after the cap */
  int64_t *cuts;   /* P host */
  int64_t *hist;   /* PGS_HIST_BINS host */
  pgs_msg_t *msgs; /* 4P host: balance and gather messages */
} oktopk_state_t;

/** A reused threshold drifts with the gradients; as in the reference code,
 *  nudge it after each step by a factor when @p picked strays from k, so
 *  fewer steps fall out of [k/2, 2k] and pay for an exact recompute. */
static inline float pgs_oktopk_nudge(float thr, int64_t picked, int64_t k,
                                     float down, float up) {
  if (4 * picked < 3 * k) return thr / down;
  if (4 * picked > 5 * k) return thr * up;
  return thr;
}

/** Phase 2 and the finish: G from the reduced region, output, residual.
 *  @p sparse_step is the index of this call among sparse calls. */
int pgs_oktopk_gather(pgs_bucket_t *b, oktopk_state_t *s, int64_t sparse_step,
                      float *out);

#endif /* PGS_ALGO_OKTOPK_H */
