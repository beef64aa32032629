/* Compute kernels: the pgs_ops vtable.
 *
 * An algorithm touches bucket memory only through these functions, so the same
 * algorithm runs on host memory (pgs_ops_cpu) and on device memory (the CUDA
 * table in cuda/). Both implementations keep this contract exactly and are
 * tested against each other.
 *
 * Conventions shared by every function:
 *  - buffers x, idx, val live in the table's memory space; arguments named
 *    *_host and every int64_t* count output live in host memory;
 *  - "|x|" is the absolute value; zeros are never selected or counted by the
 *    threshold functions (a zero carries nothing worth sending);
 *  - index arrays are int32 and relative to the buffer they index; functions
 *    that write through received indices validate every index first and
 *    return PGS_ERR_INDEX without touching memory if one is out of range;
 *  - a function never writes more than the capacity it is given and returns
 *    PGS_ERR_OVERFLOW instead;
 *  - NaN is not ordered: callers check finiteness before selecting. */
#ifndef PG_SPARSE_OPS_H
#define PG_SPARSE_OPS_H

#include <pg_sparse/guess.h>
#include <pg_sparse/status.h>
#include <pg_sparse/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Direction of pgs_ops.copy. */
typedef enum pgs_copy_kind {
  PGS_COPY_TO_HOST = 0,   /**< dst host, src in the table's space */
  PGS_COPY_FROM_HOST = 1, /**< dst in the table's space, src host */
  PGS_COPY_SAME = 2,      /**< both in the table's space */
} pgs_copy_kind_t;

/** Number of bins of one radix level of pgs_ops.hist_abs. */
#define PGS_HIST_BINS 256
/** Number of radix levels that resolve a float32 |x| exactly. */
#define PGS_HIST_LEVELS 4

typedef struct pgs_ops pgs_ops_t;

/** Region counts asked of accumulate_kth_regions: the list's entries in
 *  each region [keys[j], keys[j+1]) of global indices, at its k-th. */
typedef struct pgs_regions {
  const int64_t *keys; /**< nreg + 1 ascending bounds, host */
  int nreg;
  int64_t *pos;  /**< nreg + 1, host: where each region's run begins */
  int64_t *n_gt; /**< nreg, host: entries above the k-th */
  int64_t *n_eq; /**< nreg, host: entries at it */
  int counted;   /**< out: 1 when the counts were made, else 0 */
} pgs_regions_t;

/** What accumulate_kth found: accumulate_select's two counts and, when the
 *  list holds the k-th largest entry, that entry's |value|. */
typedef struct pgs_fused {
  int64_t count;     /**< entries with r != 0 and |r| >= thr */
  int64_t nonfinite; /**< sums rejected as non-finite */
  /** With 1 <= k <= count <= cap: the k-th largest |val| of the list and the
   *  list's entries above it, as kth_abs(val, count, k) gives them; else
   *  kth = -1 and n_gt = 0. */
  float kth;
  int64_t n_gt;
} pgs_fused_t;

struct pgs_ops {
  pgs_mem_t mem; /**< memory space of every non-host buffer */
  void *ctx;     /**< implementation state (a CUDA stream, ...) */

  int (*alloc)(const pgs_ops_t *ops, void **ptr, size_t bytes);
  void (*free)(const pgs_ops_t *ops, void *ptr);
  int (*copy)(const pgs_ops_t *ops, void *dst, const void *src, size_t bytes,
              pgs_copy_kind_t kind);
  int (*fill_zero)(const pgs_ops_t *ops, void *ptr, size_t bytes);
  /** Wait until every queued kernel is done (no-op on the host). */
  int (*sync)(const pgs_ops_t *ops);

  /** r[i] += g[i]; if @p n_ge is not NULL, also count |r[i]| >= thr, r != 0
   *  (the reused-threshold check, fused into the same pass). */
  int (*accumulate)(const pgs_ops_t *ops, float *r, const float *g, size_t n,
                    float thr, int64_t *n_ge);
  /** x[i] *= s. */
  int (*scale)(const pgs_ops_t *ops, float *x, size_t n, float s);
  /** Number of NaN or Inf entries of x. */
  int (*count_nonfinite)(const pgs_ops_t *ops, const float *x, size_t n,
                         int64_t *count);
  /** Mean and population standard deviation of x (0, 0 when n == 0). */
  int (*mean_std)(const pgs_ops_t *ops, const float *x, size_t n, double *mean,
                  double *std);

  /** For each region j < nreg, [bounds_host[j], bounds_host[j+1]) of x:
   *  n_gt_host[j] = #{|x| > thr, x != 0}, n_eq_host[j] = #{|x| == thr, x != 0}.
   *  Bounds must ascend within [0, n]. */
  int (*count_regions)(const pgs_ops_t *ops, const float *x, size_t n,
                       const int64_t *bounds_host, int nreg, float thr,
                       int64_t *n_gt_host, int64_t *n_eq_host);
  /** Exact k-th largest |x| (1 <= k <= n; zeros take part) into *thr, and the
   *  number of entries with |x| > *thr into *n_gt. O(n), radix select. */
  int (*kth_abs)(const pgs_ops_t *ops, const float *x, size_t n, size_t k,
                 float *thr, int64_t *n_gt);
  /** One level of a radix histogram of the float bits of |x|. Level l
   *  (0..3) counts the entries whose top 8*l bits equal those of @p prefix,
   *  binned by the next 8 bits, into hist_host[PGS_HIST_BINS] (added to, not
   *  overwritten, so callers can sum several arrays). Zeros are skipped. */
  int (*hist_abs)(const pgs_ops_t *ops, const float *x, size_t n, int level,
                  uint32_t prefix, int64_t *hist_host);
  /** Compaction in index order: select x[i] != 0 with |x[i]| > thr, plus the
   *  first @p eq_quota entries with |x[i]| == thr (all of them if negative).
   *  Writes idx[j] = i + idx_offset and val[j] = x[i], j < cap; *count_host
   *  receives the number selected, also when more than cap were
   *  (PGS_ERR_OVERFLOW, the first cap written), so one pass both selects
   *  and counts a guess.
   *  @p count_host may be NULL when the caller knows the count (it planned
   *  the selection): then exactly @p cap entries must be selected, and a
   *  table that queues work (CUDA) checks that on the device instead of
   *  waiting for it; a mismatch (the table broke its contract) is returned
   *  as PGS_ERR_INVALID by the next function of the table that waits for
   *  the device, at the latest by check. */
  int (*compact)(const pgs_ops_t *ops, const float *x, size_t n, float thr,
                 int64_t eq_quota, int32_t idx_offset, int32_t *idx, float *val,
                 size_t cap, int64_t *count_host);
  /** The same selection applied to a list of pairs (order kept). Output may
   *  alias input; @p count_host may be NULL as for compact. */
  int (*select_pairs)(const pgs_ops_t *ops, const int32_t *idx,
                      const float *val, size_t m, float thr, int64_t eq_quota,
                      int32_t *idx_out, float *val_out, size_t cap,
                      int64_t *count_host);
  /* Index-driven functions validate every index (they may come from a
   * peer) and write nothing when one is bad. The host table returns
   * PGS_ERR_INDEX at once; the CUDA table, for gather, zero_at,
   * scatter_add_sorted and zero_common, leaves the check to the device (the
   * writes are skipped there) and the next function that waits for the
   * device returns it, at the latest check. */
  /** val[j] = x[idx[j]] for j < m (idx validated against n). */
  int (*gather)(const pgs_ops_t *ops, const float *x, size_t n,
                const int32_t *idx, size_t m, float *val);
  /** x[idx[j]] = 0 for j < m (idx validated against n). */
  int (*zero_at)(const pgs_ops_t *ops, float *x, size_t n, const int32_t *idx,
                 size_t m);
  /** x[idx[j]] += scale * val[j], in j order (idx validated against n). */
  int (*scatter_add)(const pgs_ops_t *ops, float *x, size_t n,
                     const int32_t *idx, const float *val, size_t m,
                     float scale);
  /** scatter_add for a strictly ascending idx (a sorted pair list, one
   *  sender's block): the same sums; a list that is not strictly ascending
   *  is refused like an index out of range (PGS_ERR_INDEX, nothing written),
   *  so a table can add without ordering repeated indices. */
  int (*scatter_add_sorted)(const pgs_ops_t *ops, float *x, size_t n,
                            const int32_t *idx, const float *val, size_t m,
                            float scale);
  /** Clear x at the indices in both sorted lists: where a[i] + a_offset
   *  occurs in b, x[a[i] + a_offset] = 0, or -= a_val[i] when @p a_val is
   *  not NULL (the sender keeps what rounding to the wire left out). a and b
   *  ascending; results validated against n. */
  int (*zero_common)(const pgs_ops_t *ops, float *x, size_t n, const int32_t *a,
                     const float *a_val, size_t na, int32_t a_offset,
                     const int32_t *b, size_t nb);
  /** The fused pass of a call: for every i whose sum r[i] + g[i] is finite,
   *  r[i] = r[i] + g[i]; the others keep r[i] and are counted in
   *  *nonfinite_host (NaN or Inf in g, or an overflowing sum). In the same
   *  pass, the entries with r[i] != 0 and |r[i]| >= thr are counted in
   *  *count_host and the first @p cap of them written as (idx[j] = i,
   *  val[j] = r[i]) in index order (slots from the count up to @p cap may be
   *  used as scratch). A count above @p cap is not an error: the caller sees
   *  the list did not fit. thr = +Inf selects nothing. @p r and @p g must
   *  not overlap. */
  int (*accumulate_select)(const pgs_ops_t *ops, float *r, const float *g,
                           size_t n, float thr, int32_t *idx, float *val,
                           size_t cap, int64_t *count_host,
                           int64_t *nonfinite_host);
  /** accumulate_select, then the k-th largest |val| of the list it wrote
   *  (see pgs_fused_t), in one wait for the device where the two functions
   *  make two: a call's whole local selection for one read-back. */
  int (*accumulate_kth)(const pgs_ops_t *ops, float *r, const float *g,
                        size_t n, float thr, int32_t *idx, float *val,
                        size_t cap, size_t k, pgs_fused_t *out);
  /** Undo of accumulate_select after a failed call: r[i] -= g[i] for every
   *  finite g[i] (exact up to the rounding of the add). */
  int (*unaccumulate)(const pgs_ops_t *ops, float *r, const float *g, size_t n);
  /** idx[j] -= delta for j < m (region-relative indices from global ones).
   *  Writes only idx[0..m); the results are validated by whatever writes
   *  through them (scatter_add, zero_at), like any received index. */
  int (*shift_idx)(const pgs_ops_t *ops, int32_t *idx, size_t m, int32_t delta);
  /** For an ascending idx[0..m): pos_host[j] = #{idx < keys_host[j]} for
   *  j < nkeys (where each region of a sorted pair list begins). */
  int (*locate)(const pgs_ops_t *ops, const int32_t *idx, size_t m,
                const int64_t *keys_host, int nkeys, int64_t *pos_host);
  /** Errors of the checks earlier functions left to the device (a planned
   *  count, see compact; indices, see gather): PGS_ERR_INDEX or
   *  PGS_ERR_INVALID, reported once. Waits for the device only while such
   *  a check is unread, so a call that ends with a read-back pays nothing;
   *  always PGS_OK on the host, where every check is made at once. */
  int (*check)(const pgs_ops_t *ops);
  /** locate and count_regions in one: for an ascending idx[0..m) with
   *  values val, pos_host[j] = #{idx < keys_host[j]} for j <= nreg, and for
   *  each region j < nreg, the pairs [pos_host[j], pos_host[j+1]), counted
   *  at thr into n_gt_host[j] and n_eq_host[j] as count_regions does. Keys
   *  ascend. One wait for the device where the two functions make two. */
  int (*count_pair_regions)(const pgs_ops_t *ops, const int32_t *idx,
                            const float *val, size_t m,
                            const int64_t *keys_host, int nreg, float thr,
                            int64_t *pos_host, int64_t *n_gt_host,
                            int64_t *n_eq_host);
  /** Host synchronisations (waits for the device) this table has made
   *  since it was created; 0 on the host, where kernels run inline. */
  uint64_t (*host_syncs)(const pgs_ops_t *ops);
  /** Sorted union of two ascending pair lists, values added where an index
   *  occurs in both. Writes at most @p cap pairs; *count_host = union size. */
  int (*merge_pairs)(const pgs_ops_t *ops, const int32_t *ia, const float *va,
                     size_t na, const int32_t *ib, const float *vb, size_t nb,
                     int32_t *io, float *vo, size_t cap, int64_t *count_host);
  /** Values onto the wire: wire[j] = x[j] rounded to nearest even in
   *  @p dtype (PGS_FLOAT16 or PGS_BFLOAT16; PGS_FLOAT32 copies). Finite
   *  values beyond the type's range saturate to its largest finite value
   *  rather than Inf. When @p err is not NULL, err[j] = x[j] - wire[j], exact
   *  in fp32, so the caller can keep what the wire left out; err may alias
   *  x. */
  int (*to_wire)(const pgs_ops_t *ops, const float *x, size_t m,
                 pgs_dtype_t dtype, void *wire, float *err);
  /** x[j] = wire[j] widened to fp32 (exact); x may not overlap wire. */
  int (*from_wire)(const pgs_ops_t *ops, const void *wire, size_t m,
                   pgs_dtype_t dtype, float *x);
  /** x[i] *= f[i] (a per-entry change of the residual's units). */
  int (*mul)(const pgs_ops_t *ops, float *x, const float *f, size_t n);
  /** Statistics of a = |x[i]| over the entries with a > thr (SIDCo's fits
   *  of a tail): out[0] their count, out[1] the sum of a, out[2] the sum of
   *  a^2, out[3] the sum of ln a, out[4] the smallest a (0 when none). */
  int (*abs_stats)(const pgs_ops_t *ops, const float *x, size_t n, float thr,
                   double out[5]);
  /** accumulate_kth, then, where it found the k-th (out->kth >= 0), the
   *  list's regions at it as count_pair_regions(idx, val, out->count,
   *  reg->keys, reg->nreg, out->kth, ...) gives them: Ok-Topk's region plan
   *  in the selection's one wait for the device. reg->counted tells whether
   *  the counts were made (a table may decline, say for many regions).
   *  Optional (NULL: the caller makes the two calls). */
  int (*accumulate_kth_regions)(const pgs_ops_t *ops, float *r, const float *g,
                                size_t n, float thr, int32_t *idx, float *val,
                                size_t cap, size_t k, pgs_fused_t *out,
                                pgs_regions_t *reg);
  /** accumulate_select's plain add (thr = +Inf, nothing listed), and the
   *  statistics a threshold estimator starts from, of r after the add:
   *  out[0..4] as abs_stats(r, n, 0) gives them, out[5] and out[6] the mean
   *  and standard deviation as mean_std(r, n) gives them. A table may take
   *  them in the add's own pass (the device: no read of r for the first
   *  guess). Optional (NULL: the caller makes the three calls). */
  int (*accumulate_stats)(const pgs_ops_t *ops, float *r, const float *g,
                          size_t n, int64_t *nonfinite_host, double out[7]);
  /** accumulate_stats, then a first guess from those statistics and the
   *  entries at it, with one wait at the end: *thr_host =
   *  pgs_guess_eval(rule, out), evaluated where the statistics lie (the
   *  device: no host round trip between the add and the selection), and
   *  compact(r, n, *thr_host, every tie, offset 0, idx, val, cap). Unlike
   *  compact, a count past @p cap is no error: the first cap entries are
   *  written and *count_host is the full count. With @p val NULL the list
   *  is packed as one block [idx | val]: the values follow the entries, at
   *  (float *)(idx + *count_host), idx has room for 2 cap entries, and a
   *  count past cap leaves the block unspecified (so no copy of the values
   *  follows a guess that landed). Optional (NULL: the caller makes the
   *  calls). */
  int (*accumulate_guess_select)(const pgs_ops_t *ops, float *r, const float *g,
                                 size_t n, const pgs_guess_rule_t *rule,
                                 int32_t *idx, float *val, size_t cap,
                                 int64_t *nonfinite_host, double out[7],
                                 float *thr_host, int64_t *count_host);
  /** fill_zero(x, n floats), then scatter_add_sorted(x, n, idx, val, m,
   *  scale), in one pass: x[i] = 0 except x[idx[j]] = 0 + scale * val[j]
   *  (so -0 lands as +0, bit for bit the two calls' result). idx is
   *  validated as scatter_add_sorted's (in [0, n), strictly ascending), and
   *  refused the same way; on a refused list the call fails and x[0..n) is
   *  unspecified (the host writes nothing; a device may have cleared part of
   *  it and written some values), never a byte outside it. m may be 0 (x
   *  cleared). Optional (NULL: the caller makes the two calls). */
  int (*set_sorted)(const pgs_ops_t *ops, float *x, size_t n,
                    const int32_t *idx, const float *val, size_t m,
                    float scale);
};

/** The host-memory implementation (no state; safe to share). */
const pgs_ops_t *pgs_ops_cpu(void);

#ifdef __cplusplus
}
#endif
#endif /* PG_SPARSE_OPS_H */
