// The two-pass compaction of compact_mask_cuda.cu, for compact where every
// tie is taken.
#ifndef PG_SPARSE_CUDA_COMPACT_MASK_CUDA_CUH
#define PG_SPARSE_CUDA_COMPACT_MASK_CUDA_CUH

#include "tile_select.cuh"

namespace pgs_cuda {

// Which elements are taken: |v| > gt or |v| == eq (compact's Selector
// without a tie quota; gt >= 0, eq NaN where thr <= 0, so zeros and NaNs
// never are).
struct MaskRule {
  float gt, eq;
  __device__ __forceinline__ bool taken(float v) const {
    const float a = fabsf(v);
    return a > gt || a == eq;
  }
};

// compact's rule at threshold thr: gt = max(thr, 0) (|v| > gt excludes
// zeros; a NaN thr stays NaN and takes nothing), eq = thr where thr > 0,
// else NaN (equal to nothing, so neither zeros nor a negative thr make
// ties).
__host__ __device__ __forceinline__ MaskRule mask_rule_at(float thr) {
  return MaskRule{thr < 0.0f ? 0.0f : thr, thr > 0.0f ? thr : nanf("")};
}

// Queues the compaction of x[0..n) by @p rule (or, where @p thr_dev is not
// null, by mask_rule_at(*thr_dev), a threshold an earlier kernel wrote)
// into (idx, val), in index order, the first @p cap taken (indices +
// @p offset; with @p val null, packed: the values at idx + the count, one
// block [idx | val] with room for 2 cap entries, written only where the
// count fits cap); the totals (count, 0) land at *total (at @p total_at where
// that is not null), and a planned selection's @p check is made on the
// device. Scratch from c->work. At most 2^31 elements.
//
// With @p gm, largest[q] is the largest |x| of x[32q .. 32q + 32) for
// q < gm.groups, as accumulate_stats_queue writes them (groups 0 where
// largest is null): the first pass then reads x only in groups that can
// hold a pick.
struct GroupMax {
  const float *largest = nullptr;
  unsigned long long groups = 0;
};
int compact_by_mask(Ctx *c, const float *x, size_t n, MaskRule rule,
                    const float *thr_dev, uint32_t offset, int32_t *idx,
                    float *val, size_t cap, CountCheck check,
                    ulonglong2 *total_at, const ulonglong2 **total,
                    GroupMax gm = {});

}  // namespace pgs_cuda

#endif  // PG_SPARSE_CUDA_COMPACT_MASK_CUDA_CUH
