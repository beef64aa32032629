/* Device buffers over a host-memory transport, staged through pinned host
 * memory: how Open MPI (or the gloo-backed ext transport) carries CUDA
 * tensors when it is not CUDA-aware. */
#ifndef PG_SPARSE_COMM_STAGED_H
#define PG_SPARSE_COMM_STAGED_H

#include <cuda_runtime.h>
#include <pg_sparse/comm.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Wrap @p host_comm (PGS_MEM_HOST; owned by the new communicator from here,
 *  also on failure) into a PGS_MEM_DEVICE transport. Device data is produced
 *  and consumed on @p stream: each data-plane call synchronises it, copies
 *  through pinned buffers, and queues the copies back on it. */
int pgs_comm_staged_create(pgs_comm_t *host_comm, cudaStream_t stream,
                           pgs_comm_t **out);

/** Direct mode, for a CUDA-aware inner transport that takes device buffers
 *  (@p device_comm is PGS_MEM_DEVICE, owned from here): no copies, but
 *  @p stream is synchronised before each data-plane call, since MPI reads
 *  device memory the moment it is called. */
int pgs_comm_synced_create(pgs_comm_t *device_comm, cudaStream_t stream,
                           pgs_comm_t **out);

/** The user's point-to-point messages of CUDA tensors over @p host_p2p's
 *  isend/irecv (borrowed: the caller destroys it after this one), staged
 *  through pinned memory on @p stream of the current device, or handed over
 *  as device pointers when @p direct (a CUDA-aware Open MPI). A transport
 *  without collectives. */
int pgs_comm_staged_p2p_create(pgs_comm_t *host_p2p, cudaStream_t stream,
                               int direct, pgs_comm_t **out);

#ifdef __cplusplus
}
#endif
#endif /* PG_SPARSE_COMM_STAGED_H */
