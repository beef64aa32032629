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

/** A key-value store the point-to-point transport bootstraps through (the
 *  torch shim's c10d store). Both calls return a pgs_status_t. */
typedef struct pgs_kv {
  void *ctx;
  int (*put)(void *ctx, const char *key, const void *val, size_t bytes);
  /** Never waits: *found = 0 while @p key is not there yet. */
  int (*get)(void *ctx, const char *key, void *val, size_t bytes, int *found);
} pgs_kv_t;

/** The user's point-to-point messages of CUDA tensors on @p device: a
 *  transport with isend/irecv/test/cancel and no collectives, whose NCCL
 *  communicators (one per peer and direction) are created on first use
 *  through @p kv (copied; ctx must outlive the communicator). isend/irecv
 *  need an `after` event. Not collective: creating it talks to no one.
 *  Free every request before destroying it. */
int pgs_comm_nccl_p2p_create(const pgs_kv_t *kv, int rank, int size, int device,
                             pgs_comm_t **out);

#ifdef __cplusplus
}
#endif
#endif /* PG_SPARSE_COMM_NCCL_H */
