/* Internal declarations shared by the host ops table (cpu_ops.c) and the
 * host selection kernels (cpu_select.c). Not part of the public API. */
#ifndef PG_SPARSE_SRC_OPS_CPU_OPS_INTERNAL_H
#define PG_SPARSE_SRC_OPS_CPU_OPS_INTERNAL_H

#include <pg_sparse/ops.h>

#include <stdint.h>
#include <string.h>

/* Bit pattern of |x|: for non-negative floats (and NaN above +Inf) the
 * unsigned order of the bits equals the numeric order, which is what makes
 * a radix select over floats exact. memcpy is the portable type pun; it
 * compiles to a register move. */
static inline uint32_t pgs_cpu_abs_bits(float x) {
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  return b & 0x7fffffffu;
}

/* Selection kernels of cpu_select.c; signatures are those of pgs_ops_t. */
int pgs_cpu_count_regions(const pgs_ops_t *ops, const float *x, size_t n,
                          const int64_t *bounds_host, int nreg, float thr,
                          int64_t *n_gt_host, int64_t *n_eq_host);
int pgs_cpu_kth_abs(const pgs_ops_t *ops, const float *x, size_t n, size_t k,
                    float *thr, int64_t *n_gt);
int pgs_cpu_hist_abs(const pgs_ops_t *ops, const float *x, size_t n, int level,
                     uint32_t prefix, int64_t *hist_host);
int pgs_cpu_compact(const pgs_ops_t *ops, const float *x, size_t n, float thr,
                    int64_t eq_quota, int32_t idx_offset, int32_t *idx,
                    float *val, size_t cap, int64_t *count_host);
int pgs_cpu_select_pairs(const pgs_ops_t *ops, const int32_t *idx,
                         const float *val, size_t m, float thr,
                         int64_t eq_quota, int32_t *idx_out, float *val_out,
                         size_t cap, int64_t *count_host);

#endif /* PG_SPARSE_SRC_OPS_CPU_OPS_INTERNAL_H */
