/* A transport whose peers are a byte script: one rank of a world of @p ranks
 * where every byte another rank would send comes, in call order, from
 * @p data (zeros once it runs out); reductions behave as if every rank held
 * the same values. For malformed-message tests and the fuzz target. */
#ifndef PGS_TESTS_SCRIPTED_PEERS_H
#define PGS_TESTS_SCRIPTED_PEERS_H

#include <pg_sparse/comm.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pgs_scripted_peers {
  const uint8_t *data;
  size_t size, pos;
  int rank, ranks;
} pgs_scripted_peers_t;

/** A communicator (host memory) over @p p, which must outlive it. */
int pgs_scripted_peers_comm(pgs_scripted_peers_t *p, pgs_comm_t **out);

#ifdef __cplusplus
}
#endif
#endif /* PGS_TESTS_SCRIPTED_PEERS_H */
