/* Open MPI for programs that do not use MPI themselves: initialise it on
 * first use, build transports over the MPI processes of a torch group, and
 * finalise what we initialised.
 *
 * These live in libpgsparse_mpi, the one library that links Open MPI. Its
 * users load it on demand (dlopen) and look these names up, so a program
 * that never takes the MPI transport needs no libmpi at all; this header
 * therefore does not include <mpi.h>. */
#ifndef PG_SPARSE_MPI_WORLD_H
#define PG_SPARSE_MPI_WORLD_H

#include <pg_sparse/comm.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Create @p ncomms transports in memory space @p mem, each on its own
 *  duplicate of one MPI communicator over the world ranks @p ranks (@p n of
 *  them; NULL: ranks 0..n-1), this process being @p ranks[group_rank].
 *  Collective over those processes only (MPI_Comm_create_group).
 *  Initialises MPI (MPI_THREAD_MULTIPLE) unless the program already did.
 *  On error nothing is created and @p err (of @p errlen bytes) says why. */
int pgs_mpi_world_create(const int64_t *ranks, int n, int group_rank,
                         pgs_mem_t mem, int ncomms, pgs_comm_t **out, char *err,
                         size_t errlen);

/** MPI_Finalize, if pgs_mpi_world_create() initialised MPI and nobody has
 *  finalised it yet; otherwise nothing (the program owns its MPI). */
void pgs_mpi_world_finalize(void);

/** Signatures, for the users that look the functions up with dlsym(). */
typedef int (*pgs_mpi_world_create_fn)(const int64_t *, int, int, pgs_mem_t,
                                       int, pgs_comm_t **, char *, size_t);
typedef void (*pgs_mpi_world_finalize_fn)(void);
typedef int (*pgs_mpi_cuda_aware_fn)(void);

#ifdef __cplusplus
}
#endif
#endif /* PG_SPARSE_MPI_WORLD_H */
