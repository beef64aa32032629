/* Ok-Topk, global half: phase 2 and the finish.
 *
 * G is the set of reduced region entries with |v| >= the global threshold:
 * exact (the kg-th largest |v| over all regions, kg = global_factor * k, by
 * a distributed radix select over small histograms) on schedule or when the
 * reused threshold picks outside [kg/2, 2kg], decided on the allgathered counts
 * so every rank agrees. Each rank then holds its region's picks; they are
 * rebalanced so rank j holds floor(T/P) or ceil(T/P) of them in global order,
 * and allgathered (one exchange of indices and values). Output v/P at G;
 * residual cleared at L intersect G.
 *
 * Volume cap: every rank knows every rank's pick count and phase-1 volume,
 * so all compute the same largest per-region cap C that keeps each rank's
 * total below 3(k + kg)(P-1)/P words sent and received (6k(P-1)/P at
 * global_factor 1); regions over C keep their C largest, and the rest stays
 * in the residuals of the ranks that sent it. */
#include <string.h>

#include "algo/oktopk.h"

/* Float bits of a non-negative float, and back. */
static float float_of_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

/* Exact kg-th largest |v| over all ranks' regions (kg: the global target,
 * global_factor * k); 0 if at most kg are nonzero (then G takes every
 * nonzero). Four allreduces of 256 counts. */
static int global_kth(pgs_bucket_t *b, oktopk_state_t *s, float *thr) {
  const pgs_split_t *sp = &s->split;
  uint32_t prefix = 0;
  int64_t left = b->kg;
  for (int level = 0; level < PGS_HIST_LEVELS; ++level) {
    memset(s->hist, 0, PGS_HIST_BINS * sizeof(int64_t));
    int st = b->ops->hist_abs(b->ops, sp->lval, (size_t)sp->lm, level, prefix,
                              s->hist);
    if (st == PGS_OK)
      st = pgs_comm_allreduce_host(b->comm, s->hist, PGS_HIST_BINS, PGS_INT64,
                                   PGS_SUM);
    if (st != PGS_OK) return st;
    int64_t total = 0;
    for (int i = 0; i < PGS_HIST_BINS; ++i) total += s->hist[i];
    if (level == 0 && total <= left) {
      *thr = 0.0f;
      return PGS_OK;
    }
    int digit = PGS_HIST_BINS - 1;
    for (; digit > 0 && s->hist[digit] < left; --digit) left -= s->hist[digit];
    prefix |= (uint32_t)digit << (24 - 8 * level);
  }
  *thr = float_of_bits(prefix);
  return PGS_OK;
}

/* Picks of this region at thr, and everyone's (picks, sent, recv). */
static int count_and_share(pgs_bucket_t *b, oktopk_state_t *s, float thr,
                           int64_t *total) {
  const pgs_split_t *sp = &s->split;
  const int64_t bounds[2] = {0, sp->lm};
  int64_t gt = 0, eq = 0;
  int st = b->ops->count_regions(b->ops, sp->lval, (size_t)sp->lm, bounds, 1,
                                 thr, &gt, &eq);
  if (st != PGS_OK) return st;
  const int64_t mine[3] = {gt + eq, sp->sent_words, sp->recv_words};
  st = pgs_comm_allgather_host(b->comm, mine, 3, s->info);
  if (st != PGS_OK) return st;
  *total = 0;
  const int64_t words_max = 2 * (int64_t)b->n;
  for (int j = 0; j < b->size; ++j) {
    /* Picks lie in region j; phase-1 words are pairs of [0, n). Anything
     * else is a malformed message: refused before it sizes a buffer. */
    const int64_t *in = s->info + 3 * j;
    if (in[0] < 0 || in[0] > pgs_split_len(sp, j) || in[1] < 0 ||
        in[1] > words_max || in[2] < 0 || in[2] > words_max)
      return PGS_ERR_INDEX;
    *total += in[0];
  }
  return PGS_OK;
}

static int64_t min64(int64_t a, int64_t c) {
  return a < c ? a : c;
}
static int64_t max64(int64_t a, int64_t c) {
  return a > c ? a : c;
}

/* Balanced share of rank j out of T picks: the first T mod P take one more. */
static int64_t share(int64_t T, int P, int j) {
  return T / P + (j < T % P ? 1 : 0);
}
static int64_t share_start(int64_t T, int P, int j) {
  return T / P * j + min64(j, T % P);
}

static int64_t overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  return max64(0, min64(a1, b1) - max64(a0, b0));
}

/* Does capping every region at C picks keep every rank within the bound? */
static int fits(const pgs_bucket_t *b, const oktopk_state_t *s, int64_t C) {
  const int P = b->size;
  if (P == 1) return 1;
  int64_t T = 0;
  for (int j = 0; j < P; ++j) T += min64(s->info[3 * j], C);
  /* words * P must stay below: phase 1's 3k(P-1)/P and G's 3kg(P-1)/P */
  const int64_t limit = 3 * (b->k + b->kg) * (P - 1);
  int64_t held = 0;
  for (int j = 0; j < P; ++j) {
    int64_t c = min64(s->info[3 * j], C), t = share(T, P, j);
    int64_t t0 = share_start(T, P, j);
    int64_t keep = overlap(held, held + c, t0, t0 + t);
    int64_t sent = s->info[3 * j + 1] + 2 * (c - keep) + 2 * t * (P - 1);
    int64_t recv = s->info[3 * j + 2] + 2 * (t - keep) + 2 * (T - t);
    if (sent * P >= limit || recv * P >= limit) return 0;
    held += c;
  }
  return 1;
}

/* Largest per-region cap that fits. C = 0 always fits: phase 1 alone stays
 * below 3k(P-1)/P words (oktopk.c). */
static int64_t volume_cap(const pgs_bucket_t *b, const oktopk_state_t *s) {
  int64_t hi = 0;
  for (int j = 0; j < b->size; ++j) hi = max64(hi, s->info[3 * j]);
  if (fits(b, s, hi)) return hi;
  int64_t lo = 0; /* fits(lo) holds, fits(hi) does not */
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    if (fits(b, s, mid))
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

/* This region's picks, global indices, straight into their place in G:
 * G lists region 0's picks, then region 1's, ..., so this rank's start at
 * @p at (the picks held before it). Balance then leaves in place whatever
 * falls in this rank's share (at one rank, all of it). Capped at @p cap
 * in place (reserve_all leaves room for the uncapped count at @p at). */
static int region_picks(pgs_bucket_t *b, oktopk_state_t *s, float thr,
                        int64_t cap, int64_t at, int64_t *count) {
  const pgs_ops_t *ops = b->ops;
  const pgs_split_t *sp = &s->split;
  const int64_t c = s->info[3 * b->rank];
  *count = c <= cap ? c : cap;
  if (c == 0) return PGS_OK; /* G may be empty: no buffer to point into */
  int32_t *gi = (int32_t *)s->aidx.ptr + at;
  float *gv = (float *)s->aval.ptr + at;
  /* c was counted at thr: the selection is planned (no count pointer). */
  int st = ops->select_pairs(ops, sp->lidx, sp->lval, (size_t)sp->lm, thr, -1,
                             gi, gv, (size_t)c, NULL);
  /* Region-relative to global indices. */
  if (st == PGS_OK)
    st = ops->shift_idx(ops, gi, (size_t)c, -(int32_t)sp->bounds[b->rank]);
  if (st != PGS_OK || c <= cap || cap == 0) return st;
  /* Keep the cap largest |v|, ties in index order, in place: exactly cap. */
  float t = 0.0f;
  int64_t n_gt = 0;
  st = ops->kth_abs(ops, gv, (size_t)c, (size_t)cap, &t, &n_gt);
  if (st == PGS_OK)
    st = ops->select_pairs(ops, gi, gv, (size_t)c, t, cap - n_gt, gi, gv,
                           (size_t)cap, NULL);
  return st;
}

/* Room for all of G (indices in s->aidx, values in s->aval, and as they
 * travel in s->awire on a narrow wire), and for this rank's uncapped picks
 * from @p at. */
static int reserve_all(pgs_bucket_t *b, oktopk_state_t *s, int64_t T,
                       int64_t at) {
  const pgs_ops_t *ops = b->ops;
  const int64_t room = max64(T, at + s->info[3 * b->rank]);
  int st = pgs_buf_reserve(ops, &s->aidx, (size_t)room * 4);
  if (st == PGS_OK) st = pgs_buf_reserve(ops, &s->aval, (size_t)room * 4);
  if (st == PGS_OK && pgs_wire_narrow(b))
    st = pgs_buf_reserve(ops, &s->awire, (size_t)T * pgs_wire_bytes(b));
  return st;
}

/* The values of G as they travel: s->awire on a narrow wire, else s->aval. */
static char *all_values(const pgs_bucket_t *b, const oktopk_state_t *s) {
  return pgs_wire_narrow(b) ? s->awire.ptr : s->aval.ptr;
}

/* Move picks between ranks so rank j holds share(T, P, j) of them in global
 * order, in G itself: this rank's picks lie at @p me0 (region_picks), its
 * share starts at share_start, and what falls in both stays where it is;
 * the rest of the share arrives from the ranks whose picks cover it.
 * Messages carry indices and values separately so they land in place.
 * @p held[j] is rank j's pick count after the cap. */
static int balance(pgs_bucket_t *b, oktopk_state_t *s, const int64_t *held,
                   int64_t T, int64_t me0) {
  const int P = b->size, r = b->rank;
  const size_t w = pgs_wire_bytes(b);
  const int64_t my0 = share_start(T, P, r), my1 = my0 + share(T, P, r);
  int32_t *gi = s->aidx.ptr;
  char *gv = all_values(b, s);
  pgs_msg_t *sends = s->msgs, *recvs = s->msgs + 2 * P;
  int ns = 0, nr = 0;
  int64_t h0 = 0; /* global position of rank j's first pick */
  for (int j = 0; j < P; h0 += held[j], ++j) {
    if (j == r) continue;
    int64_t t0 = share_start(T, P, j), t1 = t0 + share(T, P, j);
    /* What of mine goes to j, and what of j's comes to me. */
    int64_t out0 = max64(me0, t0), out1 = min64(me0 + held[r], t1);
    int64_t in0 = max64(h0, my0), in1 = min64(h0 + held[j], my1);
    if (out1 > out0) {
      size_t c = (size_t)(out1 - out0);
      sends[ns++] = (pgs_msg_t){j, gi + out0, c * 4};
      sends[ns++] = (pgs_msg_t){j, gv + out0 * w, c * w};
    }
    if (in1 > in0) {
      size_t c = (size_t)(in1 - in0);
      recvs[nr++] = (pgs_msg_t){j, gi + in0, c * 4};
      recvs[nr++] = (pgs_msg_t){j, gv + in0 * w, c * w};
    }
  }
  return pgs_comm_exchange(b->comm, sends, ns, recvs, nr);
}

/* Allgather of the balanced shares, in place in G: every rank sends its
 * share's indices and values to every peer in one exchange (one round, where
 * two allgathervs made two), so G lies ascending in s->aidx and s->aval. */
static int gather_all(pgs_bucket_t *b, oktopk_state_t *s, int64_t T) {
  const int P = b->size, r = b->rank;
  const size_t w = pgs_wire_bytes(b);
  int32_t *ai = s->aidx.ptr;
  char *av = all_values(b, s);
  pgs_msg_t *sends = s->msgs, *recvs = s->msgs + 2 * P;
  int ns = 0, nr = 0;
  const int64_t mine = share(T, P, r), my0 = share_start(T, P, r);
  for (int j = 0; j < P; ++j) {
    const int64_t t = share(T, P, j), t0 = share_start(T, P, j);
    if (j == r) continue;
    if (mine > 0) {
      sends[ns++] = (pgs_msg_t){j, ai + my0, (size_t)mine * 4};
      sends[ns++] = (pgs_msg_t){j, av + my0 * w, (size_t)mine * w};
    }
    if (t > 0) {
      recvs[nr++] = (pgs_msg_t){j, ai + t0, (size_t)t * 4};
      recvs[nr++] = (pgs_msg_t){j, av + t0 * w, (size_t)t * w};
    }
  }
  int st = pgs_comm_exchange(b->comm, sends, ns, recvs, nr);
  if (st != PGS_OK || !pgs_wire_narrow(b)) return st;
  return b->ops->from_wire(b->ops, s->awire.ptr, (size_t)T, b->cfg.wire_dtype,
                           s->aval.ptr);
}

/* Narrow wire: this region's @p c picks (at @p at in G) rounded to the
 * wire, into their place in s->awire; they are sums over ranks, so their
 * owner keeps the rounding. */
static int round_picks(pgs_bucket_t *b, oktopk_state_t *s, int64_t at,
                       int64_t c) {
  if (!pgs_wire_narrow(b) || c == 0) return PGS_OK;
  char *wire = (char *)s->awire.ptr + (size_t)at * pgs_wire_bytes(b);
  return pgs_wire_round(b, (float *)s->aval.ptr + at, c, wire, b->resid,
                        (const int32_t *)s->aidx.ptr + at);
}

/* Global threshold and everyone's counts at it; *T is the total. */
static int global_threshold(pgs_bucket_t *b, oktopk_state_t *s,
                            int64_t sparse_step, float *thr, int64_t *T) {
  int exact = sparse_step % b->cfg.tau_prime == 0 || s->thr_global < 0.0f;
  int st = PGS_OK;
  if (!exact) {
    st = count_and_share(b, s, s->thr_global, T);
    /* Every rank sees the same T, so all take the same branch. */
    exact = st == PGS_OK && (*T < (b->kg + 1) / 2 || *T > 2 * b->kg);
  }
  if (st == PGS_OK && exact) {
    st = global_kth(b, s, &s->thr_global);
    if (st == PGS_OK) st = count_and_share(b, s, s->thr_global, T);
    b->stats.global_recomputed = 1;
  }
  *thr = s->thr_global;
  return st;
}

int pgs_oktopk_gather(pgs_bucket_t *b, oktopk_state_t *s, int64_t sparse_step,
                      float *out) {
  const pgs_ops_t *ops = b->ops;
  const int P = b->size;
  float thr = 0.0f;
  int64_t T = 0, c = 0;
  int st = global_threshold(b, s, sparse_step, &thr, &T);
  if (st != PGS_OK) return st;
  /* Every rank sees the same T, so the nudged threshold stays common. */
  s->thr_global = pgs_oktopk_nudge(thr, T, b->kg, s->nudge_down, s->nudge_up);
  const int64_t cap = volume_cap(b, s);
  int64_t at = 0; /* where this rank's picks start in G */
  T = 0;
  for (int j = 0; j < P; ++j) {
    s->held[j] = min64(s->info[3 * j], cap);
    b->stats.trimmed += s->info[3 * j] - s->held[j];
    if (j < b->rank) at += s->held[j];
    T += s->held[j];
  }
  st = reserve_all(b, s, T, at);
  if (st == PGS_OK) st = region_picks(b, s, thr, cap, at, &c);
  if (st != PGS_OK) return st;
  if (s->held[b->rank] != c) return PGS_ERR_INVALID; /* ops broke contract */
  st = round_picks(b, s, at, c);
  if (st == PGS_OK) st = balance(b, s, s->held, T, at);
  if (st == PGS_OK) st = gather_all(b, s, T);
  /* G is duplicate-free: one add per entry into zero gives v/P. */
  if (st == PGS_OK)
    st = pgs_set_sorted(ops, out, b->n, s->aidx.ptr, s->aval.ptr, (size_t)T,
                        1.0f / (float)P);
  if (st != PGS_OK) return st;
  b->stats.global_selected = T;
  b->stats.global_threshold = thr;
  return pgs_split_zero_common(b, &s->split, b->resid, s->aidx.ptr, s->held);
}
