/* Communicators: validation and byte counting around a transport vtable.
 *
 * Every algorithm calls the pgs_comm_* wrappers below, never a vtable entry,
 * so arguments are checked once (before any transport sees them) and the
 * volume an algorithm caused is counted with one model per call, whatever
 * the transport does underneath (a ring, a tree, a staged copy). The models
 * are the ones documented in comm.h; counters only grow when the transport
 * call succeeded. */
#include <stdlib.h>

#include "comm/comm_internal.h"

/* Bytes one rank sends (and receives) in a ring allreduce of @p bytes over
 * @p size ranks: 2 * bytes * (size - 1) / size, rounded down. Computed from
 * bytes = q * size + r so that no intermediate product can overflow:
 * 2 * bytes * (size - 1) / size = 2q(size - 1) + 2r(size - 1) / size, and
 * the second term is below 2 * size. */
static uint64_t pgs_comm_ring_bytes(size_t bytes, int size) {
  const uint64_t p = (uint64_t)size;
  const uint64_t q = (uint64_t)bytes / p;
  const uint64_t r = (uint64_t)bytes % p;
  return 2 * q * (p - 1) + (2 * r * (p - 1)) / p;
}

/* Checks the (count, dtype, op) triple of an allreduce and returns the
 * buffer size in bytes through @p bytes. */
static int pgs_comm_check_reduce(const void *buf, size_t count,
                                 pgs_dtype_t dtype, pgs_redop_t op,
                                 size_t *bytes) {
  const size_t esize = pgs_dtype_size(dtype);
  if (esize == 0) return PGS_ERR_INVALID;
  if (op != PGS_SUM && op != PGS_MAX && op != PGS_MIN) return PGS_ERR_INVALID;
  if (count > SIZE_MAX / esize) return PGS_ERR_INVALID;
  if (count > 0 && buf == NULL) return PGS_ERR_INVALID;
  *bytes = count * esize;
  return PGS_OK;
}

/* Checks one side of an exchange batch and adds its bytes to @p total. */
static int pgs_comm_check_msgs(const pgs_comm_t *comm, const pgs_msg_t *msgs,
                               int n, uint64_t *total) {
  if (n < 0 || (n > 0 && msgs == NULL)) return PGS_ERR_INVALID;
  uint64_t sum = 0;
  for (int i = 0; i < n; ++i) {
    const pgs_msg_t *m = &msgs[i];
    /* A message to self is a local copy the algorithm must do itself: no
     * transport is required to loop back, and counting it would be wrong. */
    if (m->peer < 0 || m->peer >= comm->size || m->peer == comm->rank)
      return PGS_ERR_INVALID;
    if (m->bytes > 0 && m->buf == NULL) return PGS_ERR_INVALID;
    sum += (uint64_t)m->bytes;
  }
  *total = sum;
  return PGS_OK;
}

/* A vtable has every collective or none (a point-to-point transport), and
 * all four point-to-point functions or none; it offers at least one plane. */
static int pgs_comm_vtable_complete(const pgs_comm_vtable_t *v) {
  const int coll = (v->exchange_start != NULL) + (v->exchange_wait != NULL) +
                   (v->allgatherv != NULL) + (v->allreduce != NULL) +
                   (v->bcast != NULL) + (v->allreduce_host != NULL) +
                   (v->alltoall_host != NULL) + (v->allgather_host != NULL) +
                   (v->barrier != NULL);
  const int p2p = (v->isend != NULL) + (v->irecv != NULL) + (v->test != NULL) +
                  (v->cancel != NULL);
  if (coll != 0 && coll != 9) return 0;
  if (p2p != 0 && p2p != 4) return 0;
  return coll + p2p > 0;
}

int pgs_comm_create(const pgs_comm_vtable_t *vtable, void *impl, int rank,
                    int size, pgs_mem_t mem, pgs_comm_t **out) {
  int status = PGS_ERR_INVALID;
  pgs_comm_t *comm = NULL;

  /* Without a vtable there is no destroy to hand impl back to; the caller
   * keeps it. */
  if (vtable == NULL) return PGS_ERR_INVALID;
  if (out == NULL) goto fail_args;
  *out = NULL;
  if (!pgs_comm_vtable_complete(vtable)) goto fail_args;
  if (size < 1 || rank < 0 || rank >= size) goto fail_args;
  if (mem != PGS_MEM_HOST && mem != PGS_MEM_DEVICE) goto fail_args;

  comm = calloc(1, sizeof(*comm));
  if (comm == NULL) {
    status = PGS_ERR_NO_MEMORY;
    goto fail_alloc;
  }
  comm->vt = *vtable;
  comm->impl = impl;
  comm->rank = rank;
  comm->size = size;
  comm->mem = mem;
  *out = comm;
  return PGS_OK;

fail_alloc:
fail_args:
  /* The header promises ownership of impl from the call on, failure
   * included, so a caller never has to guess whether to free it. */
  if (vtable->destroy != NULL) vtable->destroy(impl);
  return status;
}

void pgs_comm_destroy(pgs_comm_t *comm) {
  if (comm == NULL) return;
  if (comm->vt.destroy != NULL) comm->vt.destroy(comm->impl);
  free(comm);
}

int pgs_comm_abort(pgs_comm_t *comm) {
  if (comm == NULL) return PGS_ERR_INVALID;
  atomic_store(&comm->aborted, 1);
  /* A point-to-point transport never waits inside a call (test() polls),
   * so the flag alone ends everything: the next test withdraws each
   * request. */
  if (comm->vt.abort == NULL)
    return comm->vt.barrier == NULL ? PGS_OK : PGS_ERR_UNSUPPORTED;
  return comm->vt.abort(comm->impl);
}

int pgs_comm_aborted(const pgs_comm_t *comm) {
  return comm != NULL && atomic_load(&((pgs_comm_t *)comm)->aborted);
}

/* A call that failed while an abort came in reports the abort: the
 * transport's own error (NCCL's "internal error" after ncclCommAbort, say)
 * is its consequence, not the cause. */
static int settle(const pgs_comm_t *comm, int status) {
  return status != PGS_OK && pgs_comm_aborted(comm) ? PGS_ERR_ABORTED : status;
}

/* After an abort no call reaches the transport again, and a
 * point-to-point transport has no collectives (the vtable is all or none,
 * so one entry tells). */
#define PGS_COMM_LIVE(comm)                                  \
  if (atomic_load(&(comm)->aborted)) return PGS_ERR_ABORTED; \
  if ((comm)->vt.barrier == NULL) return PGS_ERR_UNSUPPORTED

/* The accessors tolerate NULL (rank -1, size 0, host, zero counters) so a
 * caller's error path never dereferences a communicator that failed to
 * build. */
int pgs_comm_rank(const pgs_comm_t *comm) {
  return comm != NULL ? comm->rank : -1;
}

int pgs_comm_size(const pgs_comm_t *comm) {
  return comm != NULL ? comm->size : 0;
}

pgs_mem_t pgs_comm_mem(const pgs_comm_t *comm) {
  return comm != NULL ? comm->mem : PGS_MEM_HOST;
}

void pgs_comm_get_counters(const pgs_comm_t *comm, pgs_comm_counters_t *out) {
  if (out == NULL) return;
  if (comm == NULL) {
    const pgs_comm_counters_t zero = {0, 0, 0, 0, 0};
    *out = zero;
    return;
  }
  *out = comm->counters;
}

int pgs_comm_exchange_start(pgs_comm_t *comm, const pgs_msg_t *sends,
                            int nsends, const pgs_msg_t *recvs, int nrecvs,
                            int slot) {
  if (comm == NULL || slot < 0 || slot >= PGS_COMM_SLOTS)
    return PGS_ERR_INVALID;
  PGS_COMM_LIVE(comm);
  uint64_t sent = 0, recvd = 0;
  int status = pgs_comm_check_msgs(comm, sends, nsends, &sent);
  if (status != PGS_OK) return status;
  status = pgs_comm_check_msgs(comm, recvs, nrecvs, &recvd);
  if (status != PGS_OK) return status;
  if (comm->slot_busy[slot]) return PGS_ERR_BUSY;

  status = settle(comm, comm->vt.exchange_start(comm->impl, sends, nsends,
                                                recvs, nrecvs, slot));
  if (status != PGS_OK) return status;
  /* Counted at start: exchange_wait() does not see the messages again. */
  comm->slot_busy[slot] = 1;
  comm->counters.calls++;
  comm->counters.data_sent += sent;
  comm->counters.data_recv += recvd;
  return PGS_OK;
}

int pgs_comm_exchange_wait(pgs_comm_t *comm, int slot) {
  if (comm == NULL || slot < 0 || slot >= PGS_COMM_SLOTS)
    return PGS_ERR_INVALID;
  if (!comm->slot_busy[slot]) return PGS_ERR_INVALID;
  /* The slot is free again even if the wait failed: the transport has
   * released (or abandoned) the batch, and a caller that recovers must be
   * able to post again. */
  comm->slot_busy[slot] = 0;
  return settle(comm, comm->vt.exchange_wait(comm->impl, slot));
}

int pgs_comm_exchange(pgs_comm_t *comm, const pgs_msg_t *sends, int nsends,
                      const pgs_msg_t *recvs, int nrecvs) {
  int status = pgs_comm_exchange_start(comm, sends, nsends, recvs, nrecvs, 0);
  if (status != PGS_OK) return status;
  return pgs_comm_exchange_wait(comm, 0);
}

int pgs_comm_allgatherv(pgs_comm_t *comm, const void *send, size_t send_bytes,
                        void *recv, const size_t *recv_bytes,
                        const size_t *displs) {
  if (comm == NULL || recv_bytes == NULL || displs == NULL)
    return PGS_ERR_INVALID;
  PGS_COMM_LIVE(comm);
  if (send_bytes > 0 && send == NULL) return PGS_ERR_INVALID;
  /* Every rank describes the same layout, so our own entry must match what
   * we send; a mismatch would truncate on some peer. */
  if (recv_bytes[comm->rank] != send_bytes) return PGS_ERR_INVALID;
  uint64_t total = 0;
  for (int i = 0; i < comm->size; ++i) total += (uint64_t)recv_bytes[i];
  if (total > 0 && recv == NULL) return PGS_ERR_INVALID;

  int status = settle(comm, comm->vt.allgatherv(comm->impl, send, send_bytes,
                                                recv, recv_bytes, displs));
  if (status != PGS_OK) return status;
  comm->counters.calls++;
  comm->counters.data_recv += total - (uint64_t)recv_bytes[comm->rank];
  comm->counters.data_sent += (uint64_t)send_bytes * (uint64_t)(comm->size - 1);
  return PGS_OK;
}

typedef int (*reduce_fn)(void *impl, void *buf, size_t count, pgs_dtype_t dtype,
                         pgs_redop_t op);

/* An allreduce through @p fn (data or control plane), counted under the
 * ring model into *sent and *recv. */
static int counted_allreduce(pgs_comm_t *comm, reduce_fn fn, void *buf,
                             size_t count, pgs_dtype_t dtype, pgs_redop_t op,
                             uint64_t *sent, uint64_t *recv) {
  PGS_COMM_LIVE(comm);
  size_t bytes = 0;
  int status = pgs_comm_check_reduce(buf, count, dtype, op, &bytes);
  if (status != PGS_OK) return status;
  status = settle(comm, fn(comm->impl, buf, count, dtype, op));
  if (status != PGS_OK) return status;
  comm->counters.calls++;
  const uint64_t ring = pgs_comm_ring_bytes(bytes, comm->size);
  *sent += ring;
  *recv += ring;
  return PGS_OK;
}

int pgs_comm_allreduce(pgs_comm_t *comm, void *buf, size_t count,
                       pgs_dtype_t dtype, pgs_redop_t op) {
  if (comm == NULL) return PGS_ERR_INVALID;
  return counted_allreduce(comm, comm->vt.allreduce, buf, count, dtype, op,
                           &comm->counters.data_sent,
                           &comm->counters.data_recv);
}

int pgs_comm_bcast(pgs_comm_t *comm, void *buf, size_t bytes, int root) {
  if (comm == NULL || root < 0 || root >= comm->size) return PGS_ERR_INVALID;
  PGS_COMM_LIVE(comm);
  if (bytes > 0 && buf == NULL) return PGS_ERR_INVALID;
  int status = settle(comm, comm->vt.bcast(comm->impl, buf, bytes, root));
  if (status != PGS_OK) return status;
  comm->counters.calls++;
  /* With one rank nothing leaves the process. */
  if (comm->size > 1) {
    if (comm->rank == root)
      comm->counters.data_sent += (uint64_t)bytes;
    else
      comm->counters.data_recv += (uint64_t)bytes;
  }
  return PGS_OK;
}

int pgs_comm_allreduce_host(pgs_comm_t *comm, void *buf, size_t count,
                            pgs_dtype_t dtype, pgs_redop_t op) {
  if (comm == NULL) return PGS_ERR_INVALID;
  return counted_allreduce(comm, comm->vt.allreduce_host, buf, count, dtype, op,
                           &comm->counters.ctrl_sent,
                           &comm->counters.ctrl_recv);
}

int pgs_comm_alltoall_host(pgs_comm_t *comm, const int64_t *send,
                           int64_t *recv) {
  if (comm == NULL || send == NULL || recv == NULL) return PGS_ERR_INVALID;
  PGS_COMM_LIVE(comm);
  int status = settle(comm, comm->vt.alltoall_host(comm->impl, send, recv));
  if (status != PGS_OK) return status;
  comm->counters.calls++;
  const uint64_t bytes = sizeof(int64_t) * (uint64_t)(comm->size - 1);
  comm->counters.ctrl_sent += bytes;
  comm->counters.ctrl_recv += bytes;
  return PGS_OK;
}

int pgs_comm_allgather_host(pgs_comm_t *comm, const int64_t *send, size_t count,
                            int64_t *recv) {
  if (comm == NULL) return PGS_ERR_INVALID;
  PGS_COMM_LIVE(comm);
  if (count > 0 && (send == NULL || recv == NULL)) return PGS_ERR_INVALID;
  /* recv holds count * size int64 values; that size must be addressable. */
  if (count > SIZE_MAX / sizeof(int64_t) / (size_t)comm->size)
    return PGS_ERR_INVALID;
  int status =
      settle(comm, comm->vt.allgather_host(comm->impl, send, count, recv));
  if (status != PGS_OK) return status;
  comm->counters.calls++;
  const uint64_t bytes =
      (uint64_t)count * sizeof(int64_t) * (uint64_t)(comm->size - 1);
  comm->counters.ctrl_sent += bytes;
  comm->counters.ctrl_recv += bytes;
  return PGS_OK;
}

int pgs_comm_barrier(pgs_comm_t *comm) {
  if (comm == NULL) return PGS_ERR_INVALID;
  PGS_COMM_LIVE(comm);
  int status = settle(comm, comm->vt.barrier(comm->impl));
  if (status == PGS_OK) comm->counters.calls++;
  return status;
}
