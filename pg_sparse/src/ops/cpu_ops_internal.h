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

/* Whether x is finite: an exponent of all ones is Inf or NaN. A bit test
 * stays right under -ffinite-math-only and vectorises. */
static inline int pgs_cpu_finite(float x) {
  return pgs_cpu_abs_bits(x) < 0x7f800000u;
}

/* The kernels that stream over a whole bucket are built twice on x86-64,
 * for AVX2 and for the baseline, and the loader picks one (ifunc), so the
 * library runs on any x86-64 and at full width where it can. GCC only:
 * clang 14 emits no symbol for a cloned function called from another file
 * (the fuzz build uses clang and the baseline). Not under ThreadSanitizer,
 * whose instrumented resolver would run before the sanitizer is set up. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    defined(__linux__) && !defined(__SANITIZE_THREAD__)
#define PGS_CPU_CLONES __attribute__((target_clones("avx2", "default")))
/* Kernels whose AVX2 form needs intrinsics (a pick mask packed by a
 * permutation) are written twice and chosen at run time, under the same
 * condition; elsewhere the portable form runs alone. */
#define PGS_CPU_AVX2 1
#else
#define PGS_CPU_CLONES
#endif

#ifdef PGS_CPU_AVX2
/* Lane numbers of the set bits of an 8-bit mask, packed low to high, one
 * byte each: the permutation that moves a vector's picks to its front. */
extern const uint64_t pgs_cpu_pack_lanes[256];
#endif

/* cpu_stats.c: ops->mean_std and ops->abs_stats. */
int pgs_cpu_mean_std(const pgs_ops_t *ops, const float *x, size_t n,
                     double *mean, double *std);
int pgs_cpu_abs_stats(const pgs_ops_t *ops, const float *x, size_t n, float thr,
                      double out[5]);
int pgs_cpu_accumulate_stats(const pgs_ops_t *ops, float *r, const float *g,
                             size_t n, int64_t *nonfinite_host, double out[7]);
int pgs_cpu_accumulate_guess_select(const pgs_ops_t *ops, float *r,
                                    const float *g, size_t n,
                                    const pgs_guess_rule_t *rule, int32_t *idx,
                                    float *val, size_t cap,
                                    int64_t *nonfinite_host, double out[7],
                                    float *thr_host, int64_t *count_host);

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

/* Fused pass and pair-list helpers of cpu_fused.c. */
int pgs_cpu_accumulate_kth_regions(const pgs_ops_t *ops, float *r,
                                   const float *g, size_t n, float thr,
                                   int32_t *idx, float *val, size_t cap,
                                   size_t k, pgs_fused_t *out,
                                   pgs_regions_t *reg);
int pgs_cpu_accumulate_kth(const pgs_ops_t *ops, float *r, const float *g,
                           size_t n, float thr, int32_t *idx, float *val,
                           size_t cap, size_t k, pgs_fused_t *out);
int pgs_cpu_accumulate_select(const pgs_ops_t *ops, float *r, const float *g,
                              size_t n, float thr, int32_t *idx, float *val,
                              size_t cap, int64_t *count_host,
                              int64_t *nonfinite_host);
int pgs_cpu_unaccumulate(const pgs_ops_t *ops, float *r, const float *g,
                         size_t n);
int pgs_cpu_shift_idx(const pgs_ops_t *ops, int32_t *idx, size_t m,
                      int32_t delta);
int pgs_cpu_count_pair_regions(const pgs_ops_t *ops, const int32_t *idx,
                               const float *val, size_t m,
                               const int64_t *keys_host, int nreg, float thr,
                               int64_t *pos_host, int64_t *n_gt_host,
                               int64_t *n_eq_host);
int pgs_cpu_locate(const pgs_ops_t *ops, const int32_t *idx, size_t m,
                   const int64_t *keys_host, int nkeys, int64_t *pos_host);
uint64_t pgs_cpu_host_syncs(const pgs_ops_t *ops);

/* The wire codec of cpu_wire.c. */
int pgs_cpu_to_wire(const pgs_ops_t *ops, const float *x, size_t m,
                    pgs_dtype_t dtype, void *wire, float *err);
int pgs_cpu_from_wire(const pgs_ops_t *ops, const void *wire, size_t m,
                      pgs_dtype_t dtype, float *x);

#endif /* PG_SPARSE_SRC_OPS_CPU_OPS_INTERNAL_H */
