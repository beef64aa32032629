/* One direction of the user's point-to-point messages between two ranks: a
 * two-rank NCCL communicator of its own, with its own stream.
 *
 * The communicator is non-blocking: creating it and posting a message return
 * at once and pgs_nccl_pair_test() says when NCCL is done with the host side.
 * A rank can so wait on several peers at the same time; with blocking
 * creation, a ring of isend/irecv deadlocks on first use (every rank waits in
 * its first pair while that pair's peer waits in another). One direction per
 * communicator lets a send to a peer and a receive from it run at once. */
#ifndef PG_SPARSE_NCCL_PAIR_H
#define PG_SPARSE_NCCL_PAIR_H

#include <cuda_runtime.h>
#include <stddef.h>

#include <pg_sparse/comm_nccl.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pgs_nccl_pair pgs_nccl_pair_t;

/** Start joining the pair named by @p id (made by pgs_nccl_make_id on the
 *  sending rank) on the current CUDA device, as the sender (@p sender = 1)
 *  or the receiver. Returns before the peer has joined. */
int pgs_nccl_pair_create(const void *id, int sender, pgs_nccl_pair_t **out);

/** *busy = 1 while NCCL still works on the last call (creation or a post),
 *  else 0. PGS_ERR_COMM once the communicator has failed. */
int pgs_nccl_pair_test(pgs_nccl_pair_t *p, int *busy);

/** When not busy: queue one message of @p bytes on the pair's stream, after
 *  @p ready (an event on the caller's stream). The sender sends, the
 *  receiver receives; the message is on the stream once test says not busy. */
int pgs_nccl_pair_post(pgs_nccl_pair_t *p, void *buf, size_t bytes,
                       cudaEvent_t ready);

/** The stream the pair's messages run on (owned by the pair). */
cudaStream_t pgs_nccl_pair_stream(const pgs_nccl_pair_t *p);

/** Aborts the communicator (a message may still wait for a peer that is
 *  gone; destroying would wait for it) and frees everything. NULL is fine. */
void pgs_nccl_pair_destroy(pgs_nccl_pair_t *p);

#ifdef __cplusplus
}
#endif
#endif /* PG_SPARSE_NCCL_PAIR_H */
