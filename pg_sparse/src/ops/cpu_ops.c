/* The host-memory pgs_ops table: memory management, elementwise kernels and
 * the index-driven kernels (gather, zero_at, scatter_add, zero_common,
 * merge_pairs). The selection kernels live in cpu_select.c.
 *
 * Indices reaching the index-driven kernels may come from peers, so each is
 * validated in a separate pass before anything is written: a bad message
 * leaves memory exactly as it was. */
#include "cpu_ops_internal.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* ---- memory ------------------------------------------------------------- */

static int cpu_alloc(const pgs_ops_t *ops, void **ptr, size_t bytes) {
  (void)ops;
  if (ptr == NULL) return PGS_ERR_INVALID;
  /* malloc(0) may return either NULL or a pointer; make it one answer. */
  if (bytes == 0) {
    *ptr = NULL;
    return PGS_OK;
  }
  *ptr = malloc(bytes);
  return *ptr == NULL ? PGS_ERR_NO_MEMORY : PGS_OK;
}

static void cpu_free(const pgs_ops_t *ops, void *ptr) {
  (void)ops;
  free(ptr);
}

static int cpu_copy(const pgs_ops_t *ops, void *dst, const void *src,
                    size_t bytes, pgs_copy_kind_t kind) {
  (void)ops;
  if (kind != PGS_COPY_TO_HOST && kind != PGS_COPY_FROM_HOST &&
      kind != PGS_COPY_SAME)
    return PGS_ERR_INVALID;
  if (bytes == 0) return PGS_OK;
  if (dst == NULL || src == NULL) return PGS_ERR_INVALID;
  /* All three kinds are host to host here. memmove, not memcpy: an
   * overlapping copy then stays defined at no measurable cost. */
  memmove(dst, src, bytes);
  return PGS_OK;
}

static int cpu_fill_zero(const pgs_ops_t *ops, void *ptr, size_t bytes) {
  (void)ops;
  if (bytes == 0) return PGS_OK;
  if (ptr == NULL) return PGS_ERR_INVALID;
  memset(ptr, 0, bytes);
  return PGS_OK;
}

static int cpu_sync(const pgs_ops_t *ops) {
  (void)ops; /* host kernels finish before they return */
  return PGS_OK;
}

/* ---- elementwise -------------------------------------------------------- */

static int cpu_accumulate(const pgs_ops_t *ops, float *r, const float *g,
                          size_t n, float thr, int64_t *n_ge) {
  (void)ops;
  if ((r == NULL || g == NULL) && n > 0) return PGS_ERR_INVALID;
  if (n_ge == NULL) {
    for (size_t i = 0; i < n; ++i) r[i] += g[i];
    return PGS_OK;
  }
  /* The count rides along the add so the residual is read once. */
  int64_t c = 0;
  for (size_t i = 0; i < n; ++i) {
    float v = r[i] + g[i];
    r[i] = v;
    c += (fabsf(v) >= thr) & (v != 0.0f);
  }
  *n_ge = c;
  return PGS_OK;
}

static int cpu_scale(const pgs_ops_t *ops, float *x, size_t n, float s) {
  (void)ops;
  if (x == NULL && n > 0) return PGS_ERR_INVALID;
  for (size_t i = 0; i < n; ++i) x[i] *= s;
  return PGS_OK;
}

static int cpu_mul(const pgs_ops_t *ops, float *x, const float *f, size_t n) {
  (void)ops;
  if ((x == NULL || f == NULL) && n > 0) return PGS_ERR_INVALID;
  for (size_t i = 0; i < n; ++i) x[i] *= f[i];
  return PGS_OK;
}

/* Entries whose exponent bits are all ones (Inf, NaN), in 32-bit lanes
 * summed per block, which the compiler vectorises (the same test one entry
 * at a time into one int64 took 17.6 ms at 26.2M on the 2-core VM, this
 * 4.3). */
enum { NF_LANES = 16, NF_BLOCK = 1 << 20 };

PGS_CPU_CLONES
static int64_t nonfinite_block(const float *x, size_t n) {
  uint32_t lane[NF_LANES] = {0};
  size_t i = 0;
  for (; i + NF_LANES <= n; i += NF_LANES)
    for (int j = 0; j < NF_LANES; ++j)
      lane[j] += (pgs_cpu_abs_bits(x[i + j]) >= 0x7f800000u);
  int64_t c = 0;
  for (int j = 0; j < NF_LANES; ++j) c += lane[j];
  for (; i < n; ++i) c += !pgs_cpu_finite(x[i]);
  return c;
}

static int cpu_count_nonfinite(const pgs_ops_t *ops, const float *x, size_t n,
                               int64_t *count) {
  (void)ops;
  if (count == NULL || (x == NULL && n > 0)) return PGS_ERR_INVALID;
  int64_t c = 0;
  /* Blocks of 2^20 keep every 32-bit lane below 2^16. */
  for (size_t i = 0; i < n; i += NF_BLOCK)
    c += nonfinite_block(x + i, n - i < NF_BLOCK ? n - i : NF_BLOCK);
  *count = c;
  return PGS_OK;
}

/* ---- index-driven ------------------------------------------------------- */

/* Whether every idx[j] + offset lies in [0, n). Branch-free, so the check
 * pass costs about as much as reading the indices. */
static bool indices_valid(const int32_t *idx, size_t m, int64_t offset,
                          size_t n) {
  bool ok = true;
  for (size_t j = 0; j < m; ++j) {
    int64_t i = (int64_t)idx[j] + offset;
    ok &= (i >= 0) & ((uint64_t)i < (uint64_t)n);
  }
  return ok;
}

static int cpu_gather(const pgs_ops_t *ops, const float *x, size_t n,
                      const int32_t *idx, size_t m, float *val) {
  (void)ops;
  if (m == 0) return PGS_OK;
  if (idx == NULL || val == NULL || (x == NULL && n > 0))
    return PGS_ERR_INVALID;
  if (!indices_valid(idx, m, 0, n)) return PGS_ERR_INDEX;
  for (size_t j = 0; j < m; ++j) val[j] = x[idx[j]];
  return PGS_OK;
}

static int cpu_zero_at(const pgs_ops_t *ops, float *x, size_t n,
                       const int32_t *idx, size_t m) {
  (void)ops;
  if (m == 0) return PGS_OK;
  if (idx == NULL || (x == NULL && n > 0)) return PGS_ERR_INVALID;
  if (!indices_valid(idx, m, 0, n)) return PGS_ERR_INDEX;
  for (size_t j = 0; j < m; ++j) x[idx[j]] = 0.0f;
  return PGS_OK;
}

/* x[idx[j]] += scale * val[j] for validated indices. Serial in j order:
 * repeated indices add up deterministically. The product is rounded to
 * float before the add (no fused multiply-add), and scale 1 skips the
 * multiply so the sum is exactly x + val. */
static void scatter_values(float *x, const int32_t *idx, const float *val,
                           size_t m, float scale) {
  if (scale == 1.0f) {
    for (size_t j = 0; j < m; ++j) x[idx[j]] += val[j];
    return;
  }
  for (size_t j = 0; j < m; ++j) {
    float p = scale * val[j];
    x[idx[j]] += p;
  }
}

static int cpu_scatter_add(const pgs_ops_t *ops, float *x, size_t n,
                           const int32_t *idx, const float *val, size_t m,
                           float scale) {
  (void)ops;
  if (m == 0) return PGS_OK;
  if (idx == NULL || val == NULL || (x == NULL && n > 0))
    return PGS_ERR_INVALID;
  if (!indices_valid(idx, m, 0, n)) return PGS_ERR_INDEX;
  scatter_values(x, idx, val, m, scale);
  return PGS_OK;
}

/* Whether idx is strictly ascending; branch-free like indices_valid. */
static bool strictly_ascending(const int32_t *idx, size_t m) {
  bool ok = true;
  for (size_t j = 1; j < m; ++j) ok &= idx[j - 1] < idx[j];
  return ok;
}

static int cpu_scatter_add_sorted(const pgs_ops_t *ops, float *x, size_t n,
                                  const int32_t *idx, const float *val,
                                  size_t m, float scale) {
  if (m > 0 && idx != NULL && !strictly_ascending(idx, m)) return PGS_ERR_INDEX;
  return cpu_scatter_add(ops, x, n, idx, val, m, scale);
}

/* The host makes its checks first, so a refused list writes nothing; then
 * scatter_add's own add into the cleared x (its rounding, 0 + p), without
 * checking the list a second time. */
static int cpu_set_sorted(const pgs_ops_t *ops, float *x, size_t n,
                          const int32_t *idx, const float *val, size_t m,
                          float scale) {
  (void)ops;
  if ((idx == NULL || val == NULL) && m > 0) return PGS_ERR_INVALID;
  if (x == NULL && n > 0) return PGS_ERR_INVALID;
  if (m > 0 && (!indices_valid(idx, m, 0, n) || !strictly_ascending(idx, m)))
    return PGS_ERR_INDEX;
  if (n > 0) memset(x, 0, n * sizeof(float));
  scatter_values(x, idx, val, m, scale);
  return PGS_OK;
}

static int cpu_zero_common(const pgs_ops_t *ops, float *x, size_t n,
                           const int32_t *a, const float *a_val, size_t na,
                           int32_t a_offset, const int32_t *b, size_t nb) {
  (void)ops;
  if ((a == NULL && na > 0) || (b == NULL && nb > 0)) return PGS_ERR_INVALID;
  if (na == 0 || nb == 0) return PGS_OK;
  if (x == NULL && n > 0) return PGS_ERR_INVALID;
  if (!indices_valid(a, na, a_offset, n) || !indices_valid(b, nb, 0, n))
    return PGS_ERR_INDEX;
  /* Merge walk over the two ascending lists, O(na + nb). On a match only a
   * advances, so repeated entries in either list are still handled. */
  size_t i = 0, j = 0;
  while (i < na && j < nb) {
    int64_t ai = (int64_t)a[i] + a_offset;
    if (ai < b[j]) {
      ++i;
    } else if (ai > b[j]) {
      ++j;
    } else {
      x[ai] = a_val == NULL ? 0.0f : x[ai] - a_val[i];
      ++i;
    }
  }
  return PGS_OK;
}

/* One output pair of merge_pairs; written only below the capacity. */
static void put_pair(int32_t *io, float *vo, size_t cap, size_t *c, int32_t i,
                     float v) {
  if (*c < cap) {
    io[*c] = i;
    vo[*c] = v;
  }
  ++*c;
}

static int cpu_merge_pairs(const pgs_ops_t *ops, const int32_t *ia,
                           const float *va, size_t na, const int32_t *ib,
                           const float *vb, size_t nb, int32_t *io, float *vo,
                           size_t cap, int64_t *count_host) {
  (void)ops;
  if (count_host == NULL) return PGS_ERR_INVALID;
  if ((ia == NULL || va == NULL) && na > 0) return PGS_ERR_INVALID;
  if ((ib == NULL || vb == NULL) && nb > 0) return PGS_ERR_INVALID;
  if ((io == NULL || vo == NULL) && cap > 0) return PGS_ERR_INVALID;
  size_t i = 0, j = 0, c = 0;
  while (i < na && j < nb) {
    if (ia[i] < ib[j]) {
      put_pair(io, vo, cap, &c, ia[i], va[i]);
      ++i;
    } else if (ib[j] < ia[i]) {
      put_pair(io, vo, cap, &c, ib[j], vb[j]);
      ++j;
    } else {
      put_pair(io, vo, cap, &c, ia[i], va[i] + vb[j]);
      ++i;
      ++j;
    }
  }
  for (; i < na; ++i) put_pair(io, vo, cap, &c, ia[i], va[i]);
  for (; j < nb; ++j) put_pair(io, vo, cap, &c, ib[j], vb[j]);
  *count_host = (int64_t)c;
  return c > cap ? PGS_ERR_OVERFLOW : PGS_OK;
}

/* ---- the table ---------------------------------------------------------- */

static const pgs_ops_t cpu_ops = {
    .mem = PGS_MEM_HOST,
    .ctx = NULL,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .fill_zero = cpu_fill_zero,
    .sync = cpu_sync,
    .accumulate = cpu_accumulate,
    .scale = cpu_scale,
    .mul = cpu_mul,
    .abs_stats = pgs_cpu_abs_stats,
    .count_nonfinite = cpu_count_nonfinite,
    .mean_std = pgs_cpu_mean_std,
    .count_regions = pgs_cpu_count_regions,
    .kth_abs = pgs_cpu_kth_abs,
    .hist_abs = pgs_cpu_hist_abs,
    .compact = pgs_cpu_compact,
    .select_pairs = pgs_cpu_select_pairs,
    .gather = cpu_gather,
    .zero_at = cpu_zero_at,
    .scatter_add = cpu_scatter_add,
    .scatter_add_sorted = cpu_scatter_add_sorted,
    .zero_common = cpu_zero_common,
    .accumulate_select = pgs_cpu_accumulate_select,
    .accumulate_kth = pgs_cpu_accumulate_kth,
    .accumulate_kth_regions = pgs_cpu_accumulate_kth_regions,
    .accumulate_stats = pgs_cpu_accumulate_stats,
    .accumulate_guess_select = pgs_cpu_accumulate_guess_select,
    .set_sorted = cpu_set_sorted,
    .unaccumulate = pgs_cpu_unaccumulate,
    .shift_idx = pgs_cpu_shift_idx,
    .locate = pgs_cpu_locate,
    .count_pair_regions = pgs_cpu_count_pair_regions,
    .check = cpu_sync, /* every check was made in the call itself */
    .host_syncs = pgs_cpu_host_syncs,
    .merge_pairs = cpu_merge_pairs,
    .to_wire = pgs_cpu_to_wire,
    .from_wire = pgs_cpu_from_wire,
};

const pgs_ops_t *pgs_ops_cpu(void) {
  return &cpu_ops;
}
