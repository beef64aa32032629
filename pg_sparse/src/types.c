/* Sizes of the shared element types. */
#include <pg_sparse/types.h>

size_t pgs_dtype_size(pgs_dtype_t dtype) {
  /* A switch rather than a table: an out-of-range value (from a cast int)
   * must give 0, never read past an array. */
  switch (dtype) {
    case PGS_INT64: return sizeof(int64_t);
    case PGS_FLOAT32: return sizeof(float);
    case PGS_FLOAT64: return sizeof(double);
    case PGS_FLOAT16:
    case PGS_BFLOAT16: return sizeof(uint16_t);
  }
  return 0;
}
