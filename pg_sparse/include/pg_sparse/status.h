/* Status codes of libpgsparse.
 *
 * Every public function returns pgs_status_t: 0 is success, negative values
 * are errors. Names come from one X-macro so the enum and pgs_status_string()
 * cannot drift apart. */
#ifndef PG_SPARSE_STATUS_H
#define PG_SPARSE_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

#define PGS_STATUS_MAP(X)                                                  \
  X(PGS_OK, 0, "success")                                                  \
  X(PGS_ERR_INVALID, -1, "invalid argument")                               \
  X(PGS_ERR_NO_MEMORY, -2, "out of memory")                                \
  X(PGS_ERR_UNSUPPORTED, -3, "unsupported configuration")                  \
  X(PGS_ERR_COMM, -4, "transport error")                                   \
  X(PGS_ERR_MISMATCH, -5, "ranks disagree (bucket size or configuration)") \
  X(PGS_ERR_NONFINITE, -6, "NaN or Inf in the bucket")                     \
  X(PGS_ERR_INDEX, -7, "index out of range in a received message")         \
  X(PGS_ERR_OVERFLOW, -8, "output buffer too small")                       \
  X(PGS_ERR_DEVICE, -9, "device (CUDA) error")                             \
  X(PGS_ERR_TIMEOUT, -10, "operation timed out")                           \
  X(PGS_ERR_BUSY, -11, "object still in use")                              \
  X(PGS_ERR_ABORTED, -12, "communicator aborted")

typedef enum pgs_status {
#define PGS_STATUS_ENUM_(name, value, text) name = value,
  PGS_STATUS_MAP(PGS_STATUS_ENUM_)
#undef PGS_STATUS_ENUM_
} pgs_status_t;

/** @return a static, human-readable description of @p status. */
const char *pgs_status_string(int status);

/** @return the enumerator name of @p status ("PGS_ERR_INVALID"). */
const char *pgs_status_name(int status);

#ifdef __cplusplus
}
#endif
#endif /* PG_SPARSE_STATUS_H */
