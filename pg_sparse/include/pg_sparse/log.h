/* Levelled logging of libpgsparse, with one sink.
 *
 * The core never prints by itself once a sink is installed: every message
 * goes to the sink's callback (the torch shim routes it to Python's
 * logging.getLogger("pg_sparse")). Without a sink, errors and warnings go to
 * stderr so that plain C users (and the core's tests) still see them.
 *
 * The sink is the only process-wide state of the core, as a program has one
 * log: pgs_log_set_sink() publishes it atomically, and the caller keeps the
 * pgs_log_sink_t alive until it installs another one (or NULL). */
#ifndef PG_SPARSE_LOG_H
#define PG_SPARSE_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pgs_log_level {
  PGS_LOG_ERROR = 0, /**< a call failed; its status code says what */
  PGS_LOG_WARN = 1,  /**< something the user should act on */
  PGS_LOG_INFO = 2,  /**< once per object: transports, buckets, settings */
  PGS_LOG_DEBUG = 3, /**< per call: thresholds, repartitions */
} pgs_log_level_t;

/** Receives each message (no trailing newline), from any thread, with the
 *  subsystem that sent it ("bucket", "mpi", "nccl", "cuda", "param"). */
typedef void (*pgs_log_fn)(void *ctx, pgs_log_level_t level,
                           const char *subsystem, const char *msg);

typedef struct pgs_log_sink {
  pgs_log_fn fn;             /**< called for messages at or below max_level */
  void *ctx;                 /**< passed to fn */
  pgs_log_level_t max_level; /**< the most verbose level delivered */
} pgs_log_sink_t;

/** Install @p sink (NULL: back to stderr for errors and warnings). */
void pgs_log_set_sink(const pgs_log_sink_t *sink);

/** @return 1 if a message at @p level would be delivered. */
int pgs_log_enabled(pgs_log_level_t level);

/** Format and deliver a message of @p subsystem (a short static name). */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
void pgs_log(pgs_log_level_t level, const char *subsystem, const char *fmt,
             ...);

/** @return "error", "warn", "info" or "debug"; NULL for other values. */
const char *pgs_log_level_name(pgs_log_level_t level);

#ifdef __cplusplus
}
#endif
#endif /* PG_SPARSE_LOG_H */
