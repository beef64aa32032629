/* Small shared types of libpgsparse. */
#ifndef PG_SPARSE_TYPES_H
#define PG_SPARSE_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Where a buffer lives. A transport and an ops table each serve one space. */
typedef enum pgs_mem {
  PGS_MEM_HOST = 0,
  PGS_MEM_DEVICE = 1,
} pgs_mem_t;

/** Element types the transports reduce. */
typedef enum pgs_dtype {
  PGS_INT64 = 0,
  PGS_FLOAT32 = 1,
  PGS_FLOAT64 = 2,
  PGS_FLOAT16 = 3,  /**< IEEE binary16; reduced in fp32, rounded to nearest */
  PGS_BFLOAT16 = 4, /**< bfloat16; likewise */
} pgs_dtype_t;

/** Reductions the transports support. */
typedef enum pgs_redop {
  PGS_SUM = 0,
  PGS_MAX = 1,
  PGS_MIN = 2,
} pgs_redop_t;

/** @return size in bytes of one element of @p dtype, 0 if unknown. */
size_t pgs_dtype_size(pgs_dtype_t dtype);

#ifdef __cplusplus
}
#endif
#endif /* PG_SPARSE_TYPES_H */
