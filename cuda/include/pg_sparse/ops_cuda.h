/* The device-memory pgs_ops table (CUDA).
 *
 * Same contract as pgs_ops_cpu() (see ops.h), on buffers in the memory of one
 * CUDA device. Every kernel is queued on the stream given at creation; a
 * function that returns a count to the host (a pointer argument in host
 * memory) waits for its own work, the others return once their work is
 * queued. copy() in either direction that touches host memory waits too, so
 * the host buffer may be reused as soon as it returns.
 *
 * Differences from the host table, all inside the contract:
 *  - scatter_add with an index repeated within one call adds the repeats in j
 *    order as the host does, through a stable sort (slower path); strictly
 *    ascending indices take a direct path;
 *  - arithmetic on NaN yields the device's canonical NaN, so NaN payloads of
 *    accumulate/scale/scatter_add/merge_pairs results may differ in bits from
 *    the host's (NaN stays NaN);
 *  - mean_std sums in a different (fixed) order: equal to the host's up to
 *    double rounding, not bit for bit.
 *
 * A table is not thread-safe: one thread at a time, like a communicator. It
 * owns reusable scratch (device, pinned host) that grows to the largest call
 * and is never freed before pgs_ops_cuda_destroy(), so steady-state calls
 * allocate nothing. */
#ifndef PG_SPARSE_OPS_CUDA_H
#define PG_SPARSE_OPS_CUDA_H

#include <pg_sparse/ops.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Create a device-memory ops table for CUDA device @p device, queueing its
 *  work on @p cuda_stream (a cudaStream_t created on that device; NULL is the
 *  legacy default stream). The caller keeps the stream alive until
 *  pgs_ops_cuda_destroy(). Returns PGS_ERR_INVALID for a bad device or NULL
 *  @p out, PGS_ERR_DEVICE if CUDA fails. */
int pgs_ops_cuda_create(void *cuda_stream, int device, pgs_ops_t **out);

/** Release a table made by pgs_ops_cuda_create() (waits for its stream's
 *  work). NULL is a no-op. Buffers allocated through the table stay valid
 *  (they are plain cudaMalloc memory; free them before, with ops->free). */
void pgs_ops_cuda_destroy(pgs_ops_t *ops);

/** Nonzero when the CUDA runtime works and at least one device exists. */
int pgs_cuda_available(void);

#ifdef __cplusplus
}
#endif
#endif /* PG_SPARSE_OPS_CUDA_H */
