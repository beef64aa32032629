/* The NCCL transport: device buffers, stream-ordered. */
#ifndef PG_SPARSE_COMM_NCCL_H
#define PG_SPARSE_COMM_NCCL_H

#include <cuda_runtime.h>
#include <nccl.h>
#include <pg_sparse/comm.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Size of the id every rank must share before pgs_comm_nccl_create(). */
#define PGS_NCCL_ID_BYTES NCCL_UNIQUE_ID_BYTES

/** Rank 0 makes the id and hands it to every rank out of band (the torch
 *  shim uses the c10d store). */
int pgs_nccl_make_id(void *id_out /* PGS_NCCL_ID_BYTES */);

/** Collective over @p size ranks: join the NCCL communicator named by @p id
 *  on the current CUDA device. Data-plane calls are ordered on @p stream
 *  (the stream the ops table uses too); exchange batches run on two side
 *  streams so a batch in flight overlaps kernels on @p stream. Control-plane
 *  calls synchronise @p stream (their results are host values). */
int pgs_comm_nccl_create(const void *id, int rank, int size,
                         cudaStream_t stream, pgs_comm_t **out);

#ifdef __cplusplus
}
#endif
#endif /* PG_SPARSE_COMM_NCCL_H */
