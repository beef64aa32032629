/* The log sink: one atomic pointer, so installing a sink needs no lock and a
 * message in flight on another thread sees either the old or the new one. */
#include <pg_sparse/log.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

static _Atomic(const pgs_log_sink_t *) pgs_log_sink_ = NULL;

void pgs_log_set_sink(const pgs_log_sink_t *sink) {
  atomic_store(&pgs_log_sink_, sink);
}

int pgs_log_enabled(pgs_log_level_t level) {
  const pgs_log_sink_t *s = atomic_load(&pgs_log_sink_);
  if (s == NULL) return level <= PGS_LOG_WARN;
  return s->fn != NULL && level <= s->max_level;
}

void pgs_log(pgs_log_level_t level, const char *subsystem, const char *fmt,
             ...) {
  const pgs_log_sink_t *s = atomic_load(&pgs_log_sink_);
  if (s == NULL ? level > PGS_LOG_WARN : s->fn == NULL || level > s->max_level)
    return;
  /* Long enough for any message of the core (an MPI error string is at most
   * MPI_MAX_ERROR_STRING = 256); longer ones are cut, never overrun. */
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (s == NULL)
    fprintf(stderr, "pg_sparse.%s %s: %s\n", subsystem,
            pgs_log_level_name(level), msg);
  else
    s->fn(s->ctx, level, subsystem, msg);
}

const char *pgs_log_level_name(pgs_log_level_t level) {
  switch (level) {
    case PGS_LOG_ERROR: return "error";
    case PGS_LOG_WARN: return "warn";
    case PGS_LOG_INFO: return "info";
    case PGS_LOG_DEBUG: return "debug";
  }
  return NULL;
}
