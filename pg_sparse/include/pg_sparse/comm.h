/* Transports: the pgs_comm vtable.
 *
 * An algorithm talks to its peers only through the functions below, so the
 * same algorithm runs over Open MPI, NCCL or callbacks supplied by an embedder
 * (the torch shim runs it over gloo). Two planes:
 *
 *  - data plane (exchange, allgatherv, allreduce, bcast): buffers live in the
 *    memory space the transport was created for (pgs_comm_mem());
 *  - control plane (*_host): small int64/f64 arrays in host memory, such as
 *    counts, cut points and histograms.
 *
 * Every call returns a pgs_status_t. The wrappers count bytes per plane with
 * the model documented at each function, so algorithms report the volume they
 * caused whatever the transport does underneath. Counters grow only when the
 * transport call succeeds (an exchange counts at start).
 *
 * Rules every transport and caller keep:
 *  - every call is collective in the sense that all ranks make the same
 *    sequence of calls (exchange batches included) in the same order;
 *  - messages between the same pair of ranks match in posting order, within
 *    a batch and across the two slots; a transport may post at start or
 *    delay the work until wait;
 *  - starting a busy slot returns PGS_ERR_BUSY, waiting an idle one
 *    PGS_ERR_INVALID;
 *  - allgatherv: recv_bytes and displs are equal on every rank,
 *    recv_bytes[rank] == send_bytes, blocks do not overlap, and send may be
 *    the caller's own block of recv;
 *  - a communicator has no lock: one thread at a time (the torch shim's
 *    worker thread); MPI needs at least MPI_THREAD_SERIALIZED then. */
#ifndef PG_SPARSE_COMM_H
#define PG_SPARSE_COMM_H

#include <pg_sparse/status.h>
#include <pg_sparse/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Number of exchange batches that may be in flight at once. */
#define PGS_COMM_SLOTS 2

/** One point-to-point message of an exchange batch. */
typedef struct pgs_msg {
  int peer;     /**< rank of the peer in this communicator, never self */
  void *buf;    /**< data in the transport's memory space */
  size_t bytes; /**< message size; 0-byte messages may be omitted */
} pgs_msg_t;

/** Functions a transport implements. @p impl is the transport's own state.
 *  Receive sizes are always known in advance (counts are exchanged first). */
typedef struct pgs_comm_vtable {
  /** Post a batch of sends and receives into @p slot (< PGS_COMM_SLOTS).
   *  Buffers must stay valid until exchange_wait() on the same slot. */
  int (*exchange_start)(void *impl, const pgs_msg_t *sends, int nsends,
                        const pgs_msg_t *recvs, int nrecvs, int slot);
  /** Complete the batch posted into @p slot. */
  int (*exchange_wait)(void *impl, int slot);
  /** Gather variable-size byte blocks from every rank, in rank order.
   *  @p recv_bytes and @p displs are host arrays of size ranks. */
  int (*allgatherv)(void *impl, const void *send, size_t send_bytes, void *recv,
                    const size_t *recv_bytes, const size_t *displs);
  /** In-place allreduce of a data buffer. */
  int (*allreduce)(void *impl, void *buf, size_t count, pgs_dtype_t dtype,
                   pgs_redop_t op);
  /** Broadcast a data buffer from @p root. */
  int (*bcast)(void *impl, void *buf, size_t bytes, int root);
  /** In-place allreduce of a small host array. */
  int (*allreduce_host)(void *impl, void *buf, size_t count, pgs_dtype_t dtype,
                        pgs_redop_t op);
  /** Alltoall of one int64 per rank, host arrays of size ranks. */
  int (*alltoall_host)(void *impl, const int64_t *send, int64_t *recv);
  /** Allgather of @p count int64 per rank into @p recv (count * ranks). */
  int (*allgather_host)(void *impl, const int64_t *send, size_t count,
                        int64_t *recv);
  /** Block until every rank has entered. */
  int (*barrier)(void *impl);
  /** Release @p impl. Called once by pgs_comm_destroy(). */
  void (*destroy)(void *impl);
  /** Optional (may be NULL). Called from any thread, also while another
   *  thread is inside a call of this transport: that call must return
   *  PGS_ERR_ABORTED promptly instead of waiting for peers. Must not block
   *  and must be safe to call more than once. */
  int (*abort)(void *impl);

  /* Point-to-point: the user's dist.send/recv. Optional: all four set, or
   * none (PGS_ERR_UNSUPPORTED). A transport may also leave every collective
   * above NULL and offer only these (NCCL's per-pair channels). */

  /** Post one message of @p bytes to (isend) or from (irecv) @p peer with
   *  @p tag (>= 0; messages of one pair and tag match in posting order) and
   *  return at once with the transport's request in *req. The buffer stays
   *  in use until test() reports the request finished or cancel() returns.
   *  @p after: a device transport starts the message after this cudaEvent_t
   *  (recorded on the stream that produced or last used the buffer); NULL
   *  for none. Host transports ignore it. */
  int (*isend)(void *impl, const void *buf, size_t bytes, int peer, int tag,
               void *after, void **req);
  int (*irecv)(void *impl, void *buf, size_t bytes, int peer, int tag,
               void *after, void **req);
  /** Never blocks. *done = 1 once the message has completed (device
   *  transports: on the device too, so the buffer may be read or reused
   *  from any stream). A failure returns its status and also finishes the
   *  request. A finished request is released with cancel(). */
  int (*test)(void *impl, void *req, int *done);
  /** Release @p req. One not finished is withdrawn first: a receive writes
   *  its buffer no more once this returns; a send may still be delivered
   *  from a transport's copy, or dropped. Never blocks on a peer. */
  void (*cancel)(void *impl, void *req);
  /** Optional: the rank a finished receive came from. Needed for receives
   *  from PGS_ANY_SOURCE, which irecv then accepts as @p peer. */
  int (*source)(void *impl, void *req);
} pgs_comm_vtable_t;

/** Bytes moved through one communicator since its creation, and the number
 *  of transport calls made (every collective, exchange start and barrier
 *  that reached the transport; an exchange's wait is part of its call). */
typedef struct pgs_comm_counters {
  uint64_t data_sent;
  uint64_t data_recv;
  uint64_t ctrl_sent;
  uint64_t ctrl_recv;
  uint64_t calls;
} pgs_comm_counters_t;

typedef struct pgs_comm pgs_comm_t;

/** Wrap a vtable into a communicator. The vtable is copied; @p impl is owned
 *  by the communicator from here on (its destroy runs on pgs_comm_destroy,
 *  also when this call fails; with a NULL @p vtable the caller keeps it).
 *  Every function pointer but destroy must be set.
 *  This is the `ext` transport: an embedder supplies its own callbacks. */
int pgs_comm_create(const pgs_comm_vtable_t *vtable, void *impl, int rank,
                    int size, pgs_mem_t mem, pgs_comm_t **out);

/** Destroy a communicator and its transport state. NULL is a no-op. Call it
 *  on every rank together with no batch in flight: the MPI transport frees a
 *  duplicated communicator, which MPI defines as collective. */
void pgs_comm_destroy(pgs_comm_t *comm);

/** Abort the communicator from any thread (a watchdog's, while the owning
 *  thread is stuck in a call): the call in progress returns PGS_ERR_ABORTED
 *  where the transport can interrupt it, and every later call returns it at
 *  once. The communicator can only be destroyed afterwards. @return PGS_OK,
 *  or PGS_ERR_UNSUPPORTED when the transport cannot interrupt a call in
 *  progress (later calls still fail at once). A point-to-point transport
 *  needs no abort entry: its calls never wait. */
int pgs_comm_abort(pgs_comm_t *comm);
/** Whether pgs_comm_abort() was called. */
int pgs_comm_aborted(const pgs_comm_t *comm);

int pgs_comm_rank(const pgs_comm_t *comm);
int pgs_comm_size(const pgs_comm_t *comm);
pgs_mem_t pgs_comm_mem(const pgs_comm_t *comm);
void pgs_comm_get_counters(const pgs_comm_t *comm, pgs_comm_counters_t *out);

/* Counting wrappers: what algorithms call. */

/** Counts the exact bytes of every message to or from another rank. */
int pgs_comm_exchange_start(pgs_comm_t *comm, const pgs_msg_t *sends,
                            int nsends, const pgs_msg_t *recvs, int nrecvs,
                            int slot);
int pgs_comm_exchange_wait(pgs_comm_t *comm, int slot);
/** Blocking exchange_start + exchange_wait on slot 0. */
int pgs_comm_exchange(pgs_comm_t *comm, const pgs_msg_t *sends, int nsends,
                      const pgs_msg_t *recvs, int nrecvs);
/** Counts recv = every other rank's block (exact) and sent = own block times
 *  (ranks - 1): each block has to reach every peer. */
int pgs_comm_allgatherv(pgs_comm_t *comm, const void *send, size_t send_bytes,
                        void *recv, const size_t *recv_bytes,
                        const size_t *displs);
/** Counts 2 * bytes * (ranks - 1) / ranks each way (ring allreduce). */
int pgs_comm_allreduce(pgs_comm_t *comm, void *buf, size_t count,
                       pgs_dtype_t dtype, pgs_redop_t op);
/** Counts bytes once at the root (sent) and at every other rank (received):
 *  the payload, not what a tree forwards. */
int pgs_comm_bcast(pgs_comm_t *comm, void *buf, size_t bytes, int root);
int pgs_comm_allreduce_host(pgs_comm_t *comm, void *buf, size_t count,
                            pgs_dtype_t dtype, pgs_redop_t op);
int pgs_comm_alltoall_host(pgs_comm_t *comm, const int64_t *send,
                           int64_t *recv);
int pgs_comm_allgather_host(pgs_comm_t *comm, const int64_t *send, size_t count,
                            int64_t *recv);
int pgs_comm_barrier(pgs_comm_t *comm);

/* Point-to-point requests (the user's messages). The calls of one
 * communicator come from one thread at a time, as for collectives; the torch
 * shim gives the user's messages a communicator of their own, so they never
 * match an algorithm's and a progress thread can test them while the worker
 * runs collectives. */

typedef struct pgs_request pgs_request_t;

/** pgs_comm_irecv's @p peer for a message from any rank (transports with a
 *  `source` entry: Open MPI, gloo). */
#define PGS_ANY_SOURCE (-1)

/** Post a send of @p bytes to @p peer (not self) with @p tag >= 0; see the
 *  vtable's isend for @p after. The exact bytes are counted once the request
 *  completes. PGS_ERR_UNSUPPORTED when the transport has no point-to-point,
 *  PGS_ERR_ABORTED after pgs_comm_abort(). */
int pgs_comm_isend(pgs_comm_t *comm, const void *buf, size_t bytes, int peer,
                   int tag, void *after, pgs_request_t **out);
int pgs_comm_irecv(pgs_comm_t *comm, void *buf, size_t bytes, int peer, int tag,
                   void *after, pgs_request_t **out);
/** Progress @p req without blocking: *done = 1 once it has finished. Returns
 *  the failure of a failed request (every later test returns it again);
 *  after pgs_comm_abort() an unfinished request is withdrawn and fails with
 *  PGS_ERR_ABORTED, so its buffer may go. */
int pgs_request_test(pgs_request_t *req, int *done);
/** The rank a successfully finished receive came from (its peer, or the
 *  sender of a PGS_ANY_SOURCE receive); -1 before that. */
int pgs_request_source(const pgs_request_t *req);
/** Free @p req; one not finished is withdrawn first (see the vtable's
 *  cancel): the caller may free a receive buffer once this returns. NULL is
 *  a no-op. The communicator must still exist. */
void pgs_request_free(pgs_request_t *req);

#ifdef __cplusplus
}
#endif
#endif /* PG_SPARSE_COMM_H */
