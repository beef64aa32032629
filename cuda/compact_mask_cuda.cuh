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

// Queues the compaction of x[0..n) by @p rule into (idx, val), in index
// order, the first @p cap taken (indices + @p offset); the totals (count,
// 0) land at *total, and a planned selection's @p check is made on the
// device. Scratch from c->work. At most 2^31 elements.
int compact_by_mask(Ctx *c, const float *x, size_t n, MaskRule rule,
                    uint32_t offset, int32_t *idx, float *val, size_t cap,
                    CountCheck check, const ulonglong2 **total);

}  // namespace pgs_cuda

#endif  // PG_SPARSE_CUDA_COMPACT_MASK_CUDA_CUH
