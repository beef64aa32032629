/* 16-bit floating-point reductions for the MPI transport.
 *
 * MPI has no fp16 or bf16 types: the buffers travel as MPI_UINT16_T and
 * these user-defined operations reduce them, each pair of elements widened
 * to fp32, combined and rounded back to nearest even, which is what NCCL and
 * gloo do for these types. The operations belong to one communicator (no
 * global state): created with it, freed with it. */
#ifndef PGS_COMM_MPI_HALF_H
#define PGS_COMM_MPI_HALF_H

#include <mpi.h>
#include <pg_sparse/types.h>

typedef struct pgs_mpi_half_ops {
  int made;         /* ops created so far, in [type][op] order (6: all) */
  MPI_Op ops[2][3]; /* [fp16, bf16][sum, max, min] */
} pgs_mpi_half_ops_t;

/** Create the six operations (local, not collective). */
int pgs_mpi_half_ops_create(pgs_mpi_half_ops_t *h);
/** Free them (before MPI_Finalize). Safe on a zeroed (calloc) or partly
 *  made set: only the first `made` exist. */
void pgs_mpi_half_ops_free(pgs_mpi_half_ops_t *h);
/** The operation for a 16-bit @p dtype and @p op; PGS_ERR_UNSUPPORTED for
 *  any other dtype. */
int pgs_mpi_half_lookup(const pgs_mpi_half_ops_t *h, pgs_dtype_t dtype,
                        pgs_redop_t op, MPI_Op *out);

#endif /* PGS_COMM_MPI_HALF_H */
