/* The Open MPI transport. Only embedders that link MPI include this. */
#ifndef PG_SPARSE_COMM_MPI_H
#define PG_SPARSE_COMM_MPI_H

#include <mpi.h>
#include <pg_sparse/comm.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Create a transport over a duplicate of @p mpi_comm (collective over it),
 *  so our traffic never matches the caller's messages. MPI must already be
 *  initialised by the caller; host buffers only (PGS_MEM_HOST). */
int pgs_comm_mpi_create(MPI_Comm mpi_comm, pgs_comm_t **out);

#ifdef __cplusplus
}
#endif
#endif /* PG_SPARSE_COMM_MPI_H */
