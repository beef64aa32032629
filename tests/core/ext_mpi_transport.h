/* A second transport for the tests, built through pgs_comm_create() (the
 * `ext` callback path an embedder uses), over MPI but with other mechanisms
 * than pg_sparse/src/comm/mpi.c: exchanges are recorded at start and run at
 * wait, collectives are hand-written rings, trees and recursive doubling
 * over point-to-point calls. Every algorithm test runs over both, so a
 * result cannot depend on one transport's quirks. */
#ifndef PGS_TESTS_EXT_MPI_TRANSPORT_H
#define PGS_TESTS_EXT_MPI_TRANSPORT_H

#include <mpi.h>
#include <pg_sparse/comm.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Create the test transport over a duplicate of @p comm (collective).
 *  Host memory only. Returns PGS_OK, PGS_ERR_INVALID (NULL @p out),
 *  PGS_ERR_NO_MEMORY or PGS_ERR_COMM. */
int pgs_test_ext_mpi_create(MPI_Comm comm, pgs_comm_t **out);

#ifdef __cplusplus
}
#endif
#endif /* PGS_TESTS_EXT_MPI_TRANSPORT_H */
