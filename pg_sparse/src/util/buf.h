/* Grow-only scratch buffers in an ops memory space.
 *
 * Algorithms reserve what a call needs; capacity only grows (by half again
 * at least), so once sizes settle the steady-state call allocates nothing. */
#ifndef PGS_UTIL_BUF_H
#define PGS_UTIL_BUF_H

#include <pg_sparse/ops.h>

typedef struct pgs_buf {
  void *ptr;
  size_t cap; /* bytes */
} pgs_buf_t;

/** Make @p buf hold at least @p bytes (contents are not preserved). */
int pgs_buf_reserve(const pgs_ops_t *ops, pgs_buf_t *buf, size_t bytes);

/** Free @p buf and reset it to empty. */
void pgs_buf_release(const pgs_ops_t *ops, pgs_buf_t *buf);

#endif /* PGS_UTIL_BUF_H */
