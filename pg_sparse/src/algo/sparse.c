/* Building blocks shared by the sparse algorithms: exact top-k selection,
 * allgather of pair blocks and their application. */
#include <math.h>

#include "algo/algo_internal.h"

/* The counts, with every rank's input flag; sizes of each rank's block. */
static int share_counts(pgs_bucket_t *b, int64_t m, size_t pair_bytes,
                        size_t *all_bytes) {
  const int P = b->size;
  int64_t *counts = b->host_counts;
  const int64_t mine = pgs_flag_encode(b, m);
  int st = pgs_comm_allgather_host(b->comm, &mine, 1, counts);
  if (st == PGS_OK)
    st = pgs_flag_settle(b, pgs_any_negative(counts, (size_t)P));
  if (st != PGS_OK) return st;
  size_t *bytes = b->host_bytes, *displs = b->host_bytes + P;
  size_t off = 0;
  for (int r = 0; r < P; ++r) {
    /* A block holds distinct indices of [0, n): a count outside [0, n] is a
     * malformed message, refused before anything is sized by it. */
    if (counts[r] < 0 || counts[r] > (int64_t)b->n) return PGS_ERR_INDEX;
    bytes[r] = (size_t)counts[r] * pair_bytes;
    displs[r] = off;
    off += bytes[r];
  }
  *all_bytes = off;
  return PGS_OK;
}

/* Narrow wire: each received block [idx | 16-bit val] widened into b->recv
 * as [idx | fp32 val]. */
static int widen_blocks(pgs_bucket_t *b) {
  const size_t w = pgs_wire_bytes(b);
  const char *src = b->wire_recv.ptr;
  char *dst = b->recv.ptr;
  for (int r = 0; r < b->size; ++r) {
    const int64_t m = b->host_counts[r];
    int st = pgs_wire_decode_block(b, src, m, dst);
    if (st != PGS_OK) return st;
    src += (size_t)m * (4 + w);
    dst += (size_t)m * 8;
  }
  return PGS_OK;
}

int pgs_allgather_blocks(pgs_bucket_t *b, void *send, int64_t m, float *keep,
                         int64_t *total) {
  const pgs_ops_t *ops = b->ops;
  const int narrow = pgs_wire_narrow(b);
  const size_t pair = 4 + pgs_wire_bytes(b);
  size_t all = 0;
  int st = share_counts(b, m, pair, &all);
  if (st == PGS_OK) st = pgs_buf_reserve(ops, &b->recv, all / pair * 8);
  if (st != PGS_OK) return st;
  const void *out = send;
  void *in = b->recv.ptr;
  if (narrow) {
    /* [idx | 16-bit val]: the indices copied, the values encoded behind. */
    st = pgs_buf_reserve(ops, &b->wire_recv, all);
    if (st == PGS_OK)
      st = pgs_buf_reserve(ops, &b->wire_send, (size_t)m * pair);
    if (st == PGS_OK)
      st = pgs_wire_encode_block(b, send, m, b->wire_send.ptr, keep);
    if (st != PGS_OK) return st;
    out = b->wire_send.ptr;
    in = b->wire_recv.ptr;
  }
  st = pgs_comm_allgatherv(b->comm, out, (size_t)m * pair, in, b->host_bytes,
                           b->host_bytes + b->size);
  if (st == PGS_OK && narrow) st = widen_blocks(b);
  if (st != PGS_OK) return st;
  *total = (int64_t)(all / pair);
  return PGS_OK;
}

int pgs_apply_blocks(pgs_bucket_t *b, float *out) {
  const pgs_ops_t *ops = b->ops;
  /* Each block lands scaled to the average, so no pass over all n values
   * follows. A power-of-two P scales exactly: the same bits as scaling the
   * sum; another P may round the last bit differently. The first block
   * lands in the pass that clears out. */
  const float inv = 1.0f / (float)b->size;
  char *base = b->recv.ptr;
  int st = PGS_OK;
  for (int r = 0; r < b->size; ++r) {
    int64_t m = b->host_counts[r];
    /* Every peer's block is validated (in range, ascending) before it lands. */
    if (r == 0)
      st = pgs_set_sorted(ops, out, b->n, pgs_block_idx(base),
                          pgs_block_val(base, m), (size_t)m, inv);
    else
      st = ops->scatter_add_sorted(ops, out, b->n, pgs_block_idx(base),
                                   pgs_block_val(base, m), (size_t)m, inv);
    if (st != PGS_OK) return st;
    base += m * 8;
  }
  return PGS_OK;
}

int pgs_gather_apply_clear(pgs_bucket_t *b, int64_t m, float *out) {
  pgs_phase_enter(b, PGS_PHASE_GATHER);
  int64_t total = 0;
  int st = pgs_allgather_blocks(b, b->pairs.ptr, m, NULL, &total);
  if (st == PGS_OK) st = pgs_apply_blocks(b, out);
  if (st != PGS_OK) return st;
  b->stats.global_selected = total;
  return pgs_wire_clear_sent(b, b->resid, b->n, pgs_block_idx(b->pairs.ptr),
                             pgs_block_val(b->pairs.ptr, m), m);
}

double pgs_normal_two_sided_quantile(double p) {
  /* Solve erfc(z / sqrt 2) = p by bisection: monotone, 60 halvings reach
   * double precision, and it runs once per call on one scalar. */
  if (p >= 1.0) return 0.0;
  double lo = 0.0, hi = 40.0;
  for (int i = 0; i < 60; ++i) {
    double mid = 0.5 * (lo + hi);
    if (erfc(mid / sqrt(2.0)) > p)
      lo = mid;
    else
      hi = mid;
  }
  return 0.5 * (lo + hi);
}
