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

/** The same over buffers in @p mem. PGS_MEM_DEVICE hands device pointers to
 *  MPI as they are: only for a CUDA-aware Open MPI (pgs_mpi_cuda_aware()),
 *  and only with the producing stream synchronised before each call (the
 *  CUDA build's pgs_comm_synced_create() does that). */
int pgs_comm_mpi_create_mem(MPI_Comm mpi_comm, pgs_mem_t mem, pgs_comm_t **out);

/** Non-zero when Open MPI says it accepts CUDA device buffers
 *  (MPIX_Query_cuda_support); 0 elsewhere. */
int pgs_mpi_cuda_aware(void);

#ifdef __cplusplus
}
#endif
#endif /* PG_SPARSE_COMM_MPI_H */
