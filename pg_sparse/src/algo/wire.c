/* Values on the wire: what travels is rounded to the bucket's wire type
 * (fp16 or bf16 halve the value bytes) and whatever rounding leaves out stays
 * in a residual, so the conservation invariant holds exactly as on an fp32
 * wire. The algorithms compute in fp32 throughout; only messages narrow. */
#include <math.h>

#include "algo/algo_internal.h"

int pgs_wire_round(pgs_bucket_t *b, float *val, int64_t m, void *wire,
                   float *keep, const int32_t *idx) {
  const pgs_ops_t *ops = b->ops;
  const pgs_dtype_t dt = b->cfg.wire_dtype;
  if (m <= 0) return PGS_OK;
  int st = PGS_OK;
  if (keep != NULL)
    st = pgs_buf_reserve(ops, &b->wire_err, (size_t)m * sizeof(float));
  if (st != PGS_OK) return st;
  float *err = keep != NULL ? b->wire_err.ptr : NULL;
  st = ops->to_wire(ops, val, (size_t)m, dt, wire, err);
  if (st == PGS_OK) st = ops->from_wire(ops, wire, (size_t)m, dt, val);
  if (st != PGS_OK || keep == NULL) return st;
  if (idx != NULL)
    return ops->scatter_add_sorted(ops, keep, b->n, idx, err, (size_t)m, 1.0f);
  /* +Inf: the add alone, nothing counted. */
  return ops->accumulate(ops, keep, err, (size_t)m, INFINITY, NULL);
}

int pgs_wire_encode_block(pgs_bucket_t *b, void *block, int64_t m, void *dst,
                          float *keep) {
  int st = b->ops->copy(b->ops, dst, block, (size_t)m * 4, PGS_COPY_SAME);
  if (st != PGS_OK) return st;
  return pgs_wire_round(b, pgs_block_val(block, m), m,
                        (char *)dst + (size_t)m * 4, keep,
                        pgs_block_idx(block));
}

int pgs_wire_decode_block(pgs_bucket_t *b, const void *src, int64_t m,
                          void *block) {
  const pgs_ops_t *ops = b->ops;
  int st = ops->copy(ops, block, src, (size_t)m * 4, PGS_COPY_SAME);
  if (st != PGS_OK) return st;
  return ops->from_wire(ops, (const char *)src + (size_t)m * 4, (size_t)m,
                        b->cfg.wire_dtype, pgs_block_val(block, m));
}

int pgs_wire_clear_sent(pgs_bucket_t *b, float *x, size_t n, const int32_t *idx,
                        const float *val, int64_t m) {
  const pgs_ops_t *ops = b->ops;
  if (!pgs_wire_narrow(b)) return ops->zero_at(ops, x, n, idx, (size_t)m);
  return ops->scatter_add_sorted(ops, x, n, idx, val, (size_t)m, -1.0f);
}

int pgs_wire_sum(pgs_bucket_t *b, void *wire, float *sum, size_t m) {
  const pgs_ops_t *ops = b->ops;
  const pgs_dtype_t dt = b->cfg.wire_dtype;
  int st = pgs_comm_allreduce(b->comm, wire, m, dt, PGS_SUM);
  if (st == PGS_OK) return ops->from_wire(ops, wire, m, dt, sum);
  if (st != PGS_ERR_UNSUPPORTED) return st;
  /* The transport has no 16-bit sum (refused on every rank alike, before
   * any message): the rounded values travel as fp32 and sum exactly. */
  st = ops->from_wire(ops, wire, m, dt, sum);
  if (st != PGS_OK) return st;
  return pgs_comm_allreduce(b->comm, sum, m, PGS_FLOAT32, PGS_SUM);
}
