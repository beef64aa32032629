/* Split and reduce (Ok-Topk phase 1, shared with TopkDSA).
 *
 * [0, n) is cut into P regions; rank j owns [bounds[j], bounds[j+1]).
 * Each rank selects entries of its accumulator, packs them per region as
 * region-relative pairs, sends every block to the region's owner in rotated
 * order (send to r+s, receive from r-s), and scatter-adds what it receives
 * into a dense copy of its own region, in a fixed source order so the sums
 * are the same on every run. */
#ifndef PGS_ALGO_SPLIT_H
#define PGS_ALGO_SPLIT_H

#include "algo/algo_internal.h"

typedef struct pgs_split {
  int size, rank;
  int64_t *bounds;  /* P + 1, host */
  int64_t *gt, *eq; /* P, host: counts of the selection per region */
  int64_t *m;       /* P, host: pairs selected per region */
  int64_t *mflag;   /* P, host: m as sent (flagged, pgs_flag_encode) */
  int64_t *pos;     /* P + 1, host: region starts in a candidate list */
  float *rthr;      /* P, host: threshold used in each region */
  int64_t *rquota;  /* P, host: ties taken in each region */
  int64_t *off;     /* P + 1, host: pair offset of each region's block */
  int64_t *rcnt;    /* P, host: pairs received from each rank */
  int64_t *roff;    /* P + 1, host: pair offset of each source's block */
  pgs_msg_t *msgs;  /* 8 * SPLIT_BATCH, host */
  /* The selection, all indices then all values, region j's at off[j]
   * (sidx, sval point into send), and what was received, source by source
   * at roff (ridx, rval into recv). Indices and values travel as separate
   * messages, the values as 16-bit copies (swire, rwire) on a narrow wire. */
  pgs_buf_t send, recv, swire, rwire;
  int32_t *sidx, *ridx;
  float *sval, *rval;
  pgs_buf_t red; /* dense reduced own region (TopkDSA) */
  /* List mode (Ok-Topk): the own region reduced as a sorted pair list
   * instead, merged block by block in the same order: O(pairs), not a pass
   * over the region. Two buffers [idx cap | val cap], merged back and forth;
   * lidx/lval/lm are the result (region-relative indices ascending). */
  int as_list;
  pgs_buf_t la, lb;
  const int32_t *lidx; /* may point into send or recv (merge_block) */
  const float *lval;
  int64_t lm, lcap;
  /* List mode with count_nonzero (TopkDSA): the list's nonzero sums, in
   * lnz, counted in the read that checks the list's indices. */
  int count_nonzero;
  int64_t lnz;
  /* Data of the last reduce, at two words per pair: on a narrow wire the
   * real volume is 3/4 of it, so caps computed from it stay conservative. */
  int64_t sent_words, recv_words;
  /* The candidate list's region counts, made by the fused pass (see
   * pgs_split_plan_in_pass): req asks for them into pos, gt and eq;
   * counted says they hold at the next select_pairs' threshold. */
  pgs_regions_t req;
  int counted;
} pgs_split_t;

int pgs_split_init(pgs_split_t *s, int rank, int size);
void pgs_split_fini(pgs_split_t *s, const pgs_ops_t *ops);

/** Equal static regions (TopkDSA). */
void pgs_split_equal_bounds(pgs_split_t *s, int64_t n);

/** Length of region @p j. */
static inline int64_t pgs_split_len(const pgs_split_t *s, int j) {
  return s->bounds[j + 1] - s->bounds[j];
}

/** Select the entries of x with |x| > thr plus the first @p eq_quota ties in
 *  global index order (all ties if negative), pack them per region. Blocks
 *  for other ranks hold at most @p cap pairs (negative: no cap): the largest
 *  by |x| are kept and the rest count in *capped (they stay in the residual).
 *  *m_total receives the pairs selected. */
int pgs_split_select(pgs_bucket_t *b, pgs_split_t *s, const float *x, float thr,
                     int64_t eq_quota, int64_t cap, int64_t *m_total,
                     int64_t *capped);

/** The same selection from a candidate list instead of the whole
 *  accumulator: @p mc pairs (global indices ascending, values) holding every
 *  entry of x that could be selected (all |x| >= thr). Reads O(mc), not n. */
int pgs_split_select_pairs(pgs_bucket_t *b, pgs_split_t *s, const int32_t *cidx,
                           const float *cval, int64_t mc, float thr,
                           int64_t eq_quota, int64_t cap, int64_t *m_total,
                           int64_t *capped);

/** Ask the call's fused pass (pgs_cand_accumulate on @p c) to count the
 *  candidate list per region at its k-th: the plan of the next
 *  pgs_split_select_pairs in the selection's wait for the device, instead
 *  of a wait of its own. Call with the bounds the selection will use. */
void pgs_split_plan_in_pass(pgs_split_t *s, pgs_cand_t *c);

/** After the pass and the threshold @p thr: whether the counts it made
 *  apply (the list holds the top k and thr is its k-th); the next
 *  select_pairs plans without counting again if so. */
void pgs_split_take_plan(pgs_split_t *s, pgs_cand_t *c, float thr);

/** Exchange the blocks and reduce this rank's region into s->red, or in
 *  list mode into (lidx, lval, lm); zero sums stay in the list (every reader
 *  skips zeros, as it does in s->red). */
int pgs_split_reduce(pgs_bucket_t *b, pgs_split_t *s);

/** x[i] = 0 at every selected entry (on a narrow wire, x[i] -= the value
 *  sent, leaving the rounding in x). */
int pgs_split_zero_selected(pgs_bucket_t *b, pgs_split_t *s, float *x);

/** pgs_split_zero_selected at every selected entry that also occurs in the
 *  ascending global index list g (L intersect G). g holds region j's entries
 *  together, after those of the regions before it: @p held[j] of them. */
int pgs_split_zero_common(pgs_bucket_t *b, pgs_split_t *s, float *x,
                          const int32_t *g, const int64_t *held);

#endif /* PGS_ALGO_SPLIT_H */
