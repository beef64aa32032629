/* Ranks as threads: an ext transport (pgs_comm_create) whose P ranks are
 * threads of one process, meeting at a barrier for every collective and
 * exchange wait, as gloo's and UCC's tests run many ranks in milliseconds.
 * Used under ThreadSanitizer (tests/sanitizers/run.sh tsan). */
#ifndef PGS_TESTS_THREAD_TRANSPORT_H
#define PGS_TESTS_THREAD_TRANSPORT_H

#include <pg_sparse/comm.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pgs_thread_world pgs_thread_world_t;

/** Shared state of @p ranks threads (ranks <= 64). */
int pgs_thread_world_create(int ranks, pgs_thread_world_t **out);
/** After every communicator of the world is destroyed. */
void pgs_thread_world_destroy(pgs_thread_world_t *w);
/** Rank @p rank's communicator (host memory); call from that rank's thread. */
int pgs_thread_comm_create(pgs_thread_world_t *w, int rank, pgs_comm_t **out);

#ifdef __cplusplus
}
#endif
#endif /* PGS_TESTS_THREAD_TRANSPORT_H */
