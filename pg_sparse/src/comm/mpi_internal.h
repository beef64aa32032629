/* What the Open MPI transport's files share: its state, the one place
 * where MPI error codes become status codes, and how a byte count becomes
 * an MPI (count, type). mpi.c has the collectives and creation, mpi_p2p.c
 * the user's messages. */
#ifndef PG_SPARSE_COMM_MPI_INTERNAL_H
#define PG_SPARSE_COMM_MPI_INTERNAL_H

#include <pg_sparse/comm_mpi.h>

#include <stdatomic.h>

#include "comm/mpi_half.h"

/* Logs the MPI error text and maps it to PGS_ERR_COMM. */
int pgs_mpi_error(int rc, const char *call, const char *file, int line);

#define PGS_MPI_CHECK_GOTO(call, status, label)                         \
  do {                                                                  \
    int pgs_mpi_rc_ = (call);                                           \
    if (pgs_mpi_rc_ != MPI_SUCCESS) {                                   \
      (status) = pgs_mpi_error(pgs_mpi_rc_, #call, __FILE__, __LINE__); \
      goto label;                                                       \
    }                                                                   \
  } while (0)

/* Requests of one exchange slot. The receives are posted first, so the
 * first nrecvs requests are receives (the only ones that may be cancelled
 * when a batch is abandoned). */
typedef struct pgs_mpi_slot {
  MPI_Request *reqs;
  int cap;
  int nreqs;
  int nrecvs;
} pgs_mpi_slot_t;

typedef struct pgs_mpi {
  MPI_Comm comm; /* our duplicate; MPI_COMM_NULL until creation completes */
  int rank;
  int size;
  int *counts; /* allgatherv counts and displacements as MPI ints */
  int *displs;
  pgs_mpi_slot_t slots[PGS_COMM_SLOTS];
  pgs_mpi_half_ops_t half; /* fp16/bf16 reductions of this communicator */
  size_t bcast_chunk;      /* PG_SPARSE_MPI_BCAST_CHUNK */
  int cancel_polls;        /* PG_SPARSE_MPI_CANCEL_POLLS */
  /* Set by the abort entry from any thread; the wait loop reads it. */
  atomic_int aborted;
} pgs_mpi_t;

/* Describes @p bytes contiguous bytes as (count, type); a derived type
 * above INT_MAX bytes, which the caller frees with pgs_mpi_free_type() once
 * the operation is posted. */
int pgs_mpi_bytes_type(size_t bytes, int *count, MPI_Datatype *type);
void pgs_mpi_free_type(MPI_Datatype *type);

/* The user's messages (mpi_p2p.c): the vtable's point-to-point entries. */
int pgs_mpi_isend(void *impl, const void *buf, size_t bytes, int peer, int tag,
                  void *after, void **req);
int pgs_mpi_irecv(void *impl, void *buf, size_t bytes, int peer, int tag,
                  void *after, void **req);
int pgs_mpi_test(void *impl, void *req, int *done);
int pgs_mpi_source(void *impl, void *req);
void pgs_mpi_cancel(void *impl, void *req);

#endif /* PG_SPARSE_COMM_MPI_INTERNAL_H */
