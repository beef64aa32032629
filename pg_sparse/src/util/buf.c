#include "util/buf.h"

int pgs_buf_reserve(const pgs_ops_t *ops, pgs_buf_t *buf, size_t bytes) {
  if (bytes <= buf->cap && buf->ptr != NULL) return PGS_OK;
  size_t want = buf->cap + buf->cap / 2;
  if (want < bytes) want = bytes;
  if (want < 64) want = 64; /* never ask for 0 bytes */
  void *p = NULL;
  int st = ops->alloc(ops, &p, want);
  if (st != PGS_OK) return st;
  if (buf->ptr != NULL) ops->free(ops, buf->ptr);
  buf->ptr = p;
  buf->cap = want;
  return PGS_OK;
}

void pgs_buf_release(const pgs_ops_t *ops, pgs_buf_t *buf) {
  if (buf->ptr != NULL) ops->free(ops, buf->ptr);
  buf->ptr = NULL;
  buf->cap = 0;
}
