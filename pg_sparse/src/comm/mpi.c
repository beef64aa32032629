/* The Open MPI transport: every vtable entry maps to one non-blocking MPI
 * call (or a short loop of them for sizes that do not fit MPI's int counts)
 * and one wait, which polls so that pgs_comm_abort() from another thread
 * (the backend's watchdog) ends a call whose peers never come.
 *
 * It runs over its own duplicate of the caller's communicator, so neither
 * its messages nor its error handler can interfere with the caller's. Errors
 * are returned, never fatal: the duplicate uses MPI_ERRORS_RETURN and every
 * MPI call goes through PGS_MPI_CHECK_GOTO, the one place where an MPI error
 * code becomes PGS_ERR_COMM (after its text goes to the log sink, log.h).
 *
 * The user's messages (isend/irecv) are in mpi_p2p.c.
 *
 * Host memory only (PGS_MEM_HOST). Steady-state calls do not allocate: the
 * request arrays of the exchange slots and the int count arrays of
 * allgatherv are sized at creation and only grow when a larger batch than
 * ever before is posted. The one exception is a single message above
 * INT_MAX bytes, which needs a derived datatype (created and freed per
 * message by MPI itself). */
#include <limits.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pg_sparse/comm_mpi.h>
#include <pg_sparse/log.h>
#include <pg_sparse/param.h>

#include "comm/mpi_internal.h"

/* Open MPI's extensions declare MPIX_Query_cuda_support where built in. */
#if defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif

/* One fixed tag is enough: the duplicated communicator carries only our
 * exchanges (collectives never match point-to-point messages), and MPI's
 * non-overtaking rule matches the messages of successive batches in order,
 * since every rank posts its batches in the same order. */
#define PGS_MPI_TAG_EXCHANGE 0x5047

/* Element of the derived datatype for messages above INT_MAX bytes: 1 MiB
 * blocks keep the block count in int range up to 2^51 bytes. */
#define PGS_MPI_LARGE_BLOCK ((size_t)1 << 20)

/* Logs the MPI error text and maps it: the single translation point. */
int pgs_mpi_error(int rc, const char *call, const char *file, int line) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
    snprintf(text, sizeof(text), "MPI error code %d", rc);
  pgs_log(PGS_LOG_ERROR, "mpi", "%s failed at %s:%d: %s", call, file, line,
          text);
  return PGS_ERR_COMM;
}

/* dtype and op tables: designated by our enum values, so their order cannot
 * drift from types.h; an entry left out reads as { .ok = 0 }, the
 * "unsupported" sentinel. */
typedef struct pgs_mpi_dtype_entry {
  int ok;
  MPI_Datatype type;
} pgs_mpi_dtype_entry_t;

typedef struct pgs_mpi_op_entry {
  int ok;
  MPI_Op op;
} pgs_mpi_op_entry_t;

static const pgs_mpi_dtype_entry_t pgs_mpi_dtypes[] = {
    [PGS_INT64] = {1, MPI_INT64_T},
    [PGS_FLOAT32] = {1, MPI_FLOAT},
    [PGS_FLOAT64] = {1, MPI_DOUBLE},
};

static const pgs_mpi_op_entry_t pgs_mpi_ops[] = {
    [PGS_SUM] = {1, MPI_SUM},
    [PGS_MAX] = {1, MPI_MAX},
    [PGS_MIN] = {1, MPI_MIN},
};

static int pgs_mpi_lookup(const pgs_mpi_t *m, pgs_dtype_t dtype, pgs_redop_t op,
                          MPI_Datatype *type, MPI_Op *mop) {
  if (dtype == PGS_FLOAT16 || dtype == PGS_BFLOAT16) {
    *type = MPI_UINT16_T; /* the bits; the user operation knows the type */
    return pgs_mpi_half_lookup(&m->half, dtype, op, mop);
  }
  const size_t d = (size_t)dtype, o = (size_t)op;
  if (d >= sizeof(pgs_mpi_dtypes) / sizeof(pgs_mpi_dtypes[0]) ||
      !pgs_mpi_dtypes[d].ok)
    return PGS_ERR_UNSUPPORTED;
  if (o >= sizeof(pgs_mpi_ops) / sizeof(pgs_mpi_ops[0]) || !pgs_mpi_ops[o].ok)
    return PGS_ERR_UNSUPPORTED;
  *type = pgs_mpi_dtypes[d].type;
  *mop = pgs_mpi_ops[o].op;
  return PGS_OK;
}

/* Describes @p bytes contiguous bytes as (count, type). Up to INT_MAX bytes
 * that is (bytes, MPI_BYTE); above, it is one element of a committed derived
 * type of 1 MiB blocks plus the remainder, which the caller frees once the
 * operation is posted (MPI keeps it alive until pending operations end). */
int pgs_mpi_bytes_type(size_t bytes, int *count, MPI_Datatype *type) {
  if (bytes <= (size_t)INT_MAX) {
    *count = (int)bytes;
    *type = MPI_BYTE;
    return PGS_OK;
  }
  const size_t nblocks = bytes / PGS_MPI_LARGE_BLOCK;
  const size_t rem = bytes % PGS_MPI_LARGE_BLOCK;
  if (nblocks > (size_t)INT_MAX)
    return PGS_ERR_UNSUPPORTED; /* 2^51 bytes: not a real message */

  int status = PGS_OK;
  MPI_Datatype block = MPI_DATATYPE_NULL, large = MPI_DATATYPE_NULL;
  PGS_MPI_CHECK_GOTO(
      MPI_Type_contiguous((int)PGS_MPI_LARGE_BLOCK, MPI_BYTE, &block), status,
      out);
  if (rem == 0) {
    PGS_MPI_CHECK_GOTO(MPI_Type_contiguous((int)nblocks, block, &large), status,
                       out);
  } else {
    int lens[2] = {(int)nblocks, (int)rem};
    MPI_Aint disps[2] = {0, (MPI_Aint)(nblocks * PGS_MPI_LARGE_BLOCK)};
    MPI_Datatype types[2] = {block, MPI_BYTE};
    PGS_MPI_CHECK_GOTO(MPI_Type_create_struct(2, lens, disps, types, &large),
                       status, out);
  }
  PGS_MPI_CHECK_GOTO(MPI_Type_commit(&large), status, out);
  *count = 1;
  *type = large;
  large = MPI_DATATYPE_NULL;

out:
  if (large != MPI_DATATYPE_NULL) MPI_Type_free(&large);
  if (block != MPI_DATATYPE_NULL) MPI_Type_free(&block);
  return status;
}

void pgs_mpi_free_type(MPI_Datatype *type) {
  if (*type != MPI_BYTE && *type != MPI_DATATYPE_NULL) MPI_Type_free(type);
}

/* Completes @p n requests, polling, and gives up with PGS_ERR_ABORTED once
 * the communicator is aborted. Abandoned collective requests are left to MPI
 * (freeing or cancelling an active one is erroneous); the communicator is
 * dead then and destroy leaves it alone. Yields between polls: ranks may
 * share cores. */
static int pgs_mpi_wait(pgs_mpi_t *m, int n, MPI_Request *reqs) {
  int status = PGS_OK;
  for (;;) {
    int done = 0;
    PGS_MPI_CHECK_GOTO(MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE), status,
                       out);
    if (done) break;
    if (atomic_load(&m->aborted)) return PGS_ERR_ABORTED;
    sched_yield();
  }
out:
  return status;
}

/* One non-blocking call and its wait: @p call posts into req. */
#define PGS_MPI_RUN(m, call, status, label)  \
  do {                                       \
    MPI_Request req = MPI_REQUEST_NULL;      \
    PGS_MPI_CHECK_GOTO(call, status, label); \
    (status) = pgs_mpi_wait((m), 1, &req);   \
    if ((status) != PGS_OK) goto label;      \
  } while (0)

/* Gives up the requests of a batch that will not be waited for (a failed
 * start or wait, or destroy with a batch in flight): receives are cancelled
 * so MPI stops writing into buffers the caller may free; sends are released
 * to complete on their own. Errors are ignored: this only runs on paths
 * that already report one, or at teardown. */
static void pgs_mpi_slot_abandon(pgs_mpi_slot_t *slot) {
  for (int i = 0; i < slot->nreqs; ++i) {
    if (slot->reqs[i] == MPI_REQUEST_NULL) continue;
    if (i < slot->nrecvs) (void)MPI_Cancel(&slot->reqs[i]);
    (void)MPI_Request_free(&slot->reqs[i]);
  }
  slot->nreqs = 0;
  slot->nrecvs = 0;
}

/* Makes room for @p n requests. Only grows, so a batch no larger than any
 * before it allocates nothing. */
static int pgs_mpi_slot_reserve(pgs_mpi_slot_t *slot, size_t n) {
  if (n <= (size_t)slot->cap) return PGS_OK;
  if (n > (size_t)INT_MAX)
    return PGS_ERR_UNSUPPORTED; /* MPI_Waitall takes an int count */
  MPI_Request *reqs = realloc(slot->reqs, n * sizeof(*reqs));
  if (reqs == NULL) return PGS_ERR_NO_MEMORY;
  slot->reqs = reqs;
  slot->cap = (int)n;
  return PGS_OK;
}

/* Posts one message of a batch into the next request of @p slot. */
static int pgs_mpi_post(pgs_mpi_t *m, pgs_mpi_slot_t *slot,
                        const pgs_msg_t *msg, int is_recv) {
  int count = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  int status = pgs_mpi_bytes_type(msg->bytes, &count, &type);
  if (status != PGS_OK) return status;
  MPI_Request *req = &slot->reqs[slot->nreqs];
  if (is_recv) {
    PGS_MPI_CHECK_GOTO(MPI_Irecv(msg->buf, count, type, msg->peer,
                                 PGS_MPI_TAG_EXCHANGE, m->comm, req),
                       status, out);
  } else {
    PGS_MPI_CHECK_GOTO(MPI_Isend(msg->buf, count, type, msg->peer,
                                 PGS_MPI_TAG_EXCHANGE, m->comm, req),
                       status, out);
  }
  ++slot->nreqs;

out:
  pgs_mpi_free_type(&type);
  return status;
}

static int pgs_mpi_exchange_start(void *impl, const pgs_msg_t *sends,
                                  int nsends, const pgs_msg_t *recvs,
                                  int nrecvs, int slot_id) {
  pgs_mpi_t *m = impl;
  if (slot_id < 0 || slot_id >= PGS_COMM_SLOTS || nsends < 0 || nrecvs < 0)
    return PGS_ERR_INVALID;
  pgs_mpi_slot_t *slot = &m->slots[slot_id];
  /* A slot still holding requests was never waited for; posting over it
   * would leak them. The wrapper rejects this before we get here. */
  if (slot->nreqs != 0) return PGS_ERR_BUSY;
  int status = pgs_mpi_slot_reserve(slot, (size_t)nsends + (size_t)nrecvs);
  if (status != PGS_OK) return status;

  /* Receives first, so that a peer's send finds its receive posted and
   * large messages need no unexpected-message buffering. */
  for (int i = 0; i < nrecvs; ++i) {
    if (recvs[i].bytes == 0) continue;
    status = pgs_mpi_post(m, slot, &recvs[i], 1);
    if (status != PGS_OK) goto fail_post;
    slot->nrecvs = slot->nreqs;
  }
  for (int i = 0; i < nsends; ++i) {
    if (sends[i].bytes == 0) continue;
    status = pgs_mpi_post(m, slot, &sends[i], 0);
    if (status != PGS_OK) goto fail_post;
  }
  return PGS_OK;

fail_post:
  pgs_mpi_slot_abandon(slot);
  return status;
}

static int pgs_mpi_exchange_wait(void *impl, int slot_id) {
  pgs_mpi_t *m = impl;
  if (slot_id < 0 || slot_id >= PGS_COMM_SLOTS) return PGS_ERR_INVALID;
  pgs_mpi_slot_t *slot = &m->slots[slot_id];
  int status = PGS_OK;
  if (slot->nreqs > 0) status = pgs_mpi_wait(m, slot->nreqs, slot->reqs);
  if (status != PGS_OK) goto fail_wait;
  slot->nreqs = 0;
  slot->nrecvs = 0;
  return PGS_OK;

fail_wait:
  pgs_mpi_slot_abandon(slot);
  return status;
}

/* Broadcast of any size, in pieces that fit MPI's int count. Every rank
 * knows @p bytes, so all of them make the same number of calls. */
static int pgs_mpi_bcast_bytes(pgs_mpi_t *m, void *buf, size_t bytes,
                               int root) {
  int status = PGS_OK;
  char *p = buf;
  const size_t chunk = m->bcast_chunk;
  for (size_t off = 0; off < bytes; off += chunk) {
    const size_t n = bytes - off < chunk ? bytes - off : chunk;
    PGS_MPI_RUN(m, MPI_Ibcast(p + off, (int)n, MPI_BYTE, root, m->comm, &req),
                status, out);
  }
out:
  return status;
}

static int pgs_mpi_allgatherv(void *impl, const void *send, size_t send_bytes,
                              void *recv, const size_t *recv_bytes,
                              const size_t *displs) {
  pgs_mpi_t *m = impl;
  char *rbuf = recv;
  int status = PGS_OK;

  /* The caller may hand us its own block of recv as the send buffer; MPI
   * forbids aliased buffers but has MPI_IN_PLACE for exactly that case. */
  const int in_place = send != NULL && rbuf != NULL && send_bytes > 0 &&
                       (const char *)send == rbuf + displs[m->rank];

  /* Every rank holds the same recv_bytes and displs, so every rank takes the
   * same branch below. */
  int fits = 1;
  for (int i = 0; i < m->size; ++i)
    if (recv_bytes[i] > (size_t)INT_MAX || displs[i] > (size_t)INT_MAX)
      fits = 0;

  if (fits) {
    for (int i = 0; i < m->size; ++i) {
      m->counts[i] = (int)recv_bytes[i];
      m->displs[i] = (int)displs[i];
    }
    PGS_MPI_RUN(m,
                MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send, (int)send_bytes,
                                MPI_BYTE, recv, m->counts, m->displs, MPI_BYTE,
                                m->comm, &req),
                status, out);
    return PGS_OK;
  }

  /* Some block or offset is beyond int: one (chunked) broadcast per rank,
   * each root sending its block from its place in recv. Slower than a
   * native allgatherv, but such sizes are bandwidth-bound anyway. */
  if (!in_place && send_bytes > 0)
    memcpy(rbuf + displs[m->rank], send, send_bytes);
  for (int i = 0; i < m->size; ++i) {
    if (recv_bytes[i] == 0) continue;
    status = pgs_mpi_bcast_bytes(m, rbuf + displs[i], recv_bytes[i], i);
    if (status != PGS_OK) goto out;
  }

out:
  return status;
}

/* In-place allreduce shared by the data and control planes (both are host
 * memory here), in pieces of at most INT_MAX elements. */
static int pgs_mpi_allreduce(void *impl, void *buf, size_t count,
                             pgs_dtype_t dtype, pgs_redop_t op) {
  pgs_mpi_t *m = impl;
  MPI_Datatype type;
  MPI_Op mop;
  int status = pgs_mpi_lookup(m, dtype, op, &type, &mop);
  if (status != PGS_OK) return status;
  const size_t esize = pgs_dtype_size(dtype);
  char *p = buf;
  for (size_t off = 0; off < count; off += (size_t)INT_MAX) {
    const size_t n =
        count - off < (size_t)INT_MAX ? count - off : (size_t)INT_MAX;
    PGS_MPI_RUN(m,
                MPI_Iallreduce(MPI_IN_PLACE, p + off * esize, (int)n, type, mop,
                               m->comm, &req),
                status, out);
  }
out:
  return status;
}

static int pgs_mpi_bcast(void *impl, void *buf, size_t bytes, int root) {
  pgs_mpi_t *m = impl;
  if (root < 0 || root >= m->size) return PGS_ERR_INVALID;
  return pgs_mpi_bcast_bytes(m, buf, bytes, root);
}

static int pgs_mpi_alltoall_host(void *impl, const int64_t *send,
                                 int64_t *recv) {
  pgs_mpi_t *m = impl;
  int status = PGS_OK;
  PGS_MPI_RUN(
      m,
      MPI_Ialltoall(send, 1, MPI_INT64_T, recv, 1, MPI_INT64_T, m->comm, &req),
      status, out);
out:
  return status;
}

static int pgs_mpi_allgather_host(void *impl, const int64_t *send, size_t count,
                                  int64_t *recv) {
  pgs_mpi_t *m = impl;
  /* The control plane carries counts and cut points, a few values per rank;
   * more than INT_MAX of them is a caller bug, not a size to support. */
  if (count > (size_t)INT_MAX) return PGS_ERR_UNSUPPORTED;
  int status = PGS_OK;
  PGS_MPI_RUN(m,
              MPI_Iallgather(send, (int)count, MPI_INT64_T, recv, (int)count,
                             MPI_INT64_T, m->comm, &req),
              status, out);
out:
  return status;
}

static int pgs_mpi_barrier(void *impl) {
  pgs_mpi_t *m = impl;
  int status = PGS_OK;
  PGS_MPI_RUN(m, MPI_Ibarrier(m->comm, &req), status, out);
out:
  return status;
}

static void pgs_mpi_destroy(void *impl) {
  pgs_mpi_t *m = impl;
  if (m == NULL) return;
  /* After MPI_Finalize no MPI call is allowed, and the library already
   * released the communicator and its requests. */
  int finalized = 0;
  MPI_Finalized(&finalized);
  /* An aborted communicator may still have collectives in flight that no
   * peer will complete: it is left to MPI_Finalize, never freed here. */
  if (!finalized && !atomic_load(&m->aborted)) {
    for (int i = 0; i < PGS_COMM_SLOTS; ++i) pgs_mpi_slot_abandon(&m->slots[i]);
    if (m->comm != MPI_COMM_NULL) (void)MPI_Comm_free(&m->comm);
    pgs_mpi_half_ops_free(&m->half);
  }
  for (int i = 0; i < PGS_COMM_SLOTS; ++i) free(m->slots[i].reqs);
  free(m->counts);
  free(m->displs);
  free(m);
}

static int pgs_mpi_abort(void *impl) {
  pgs_mpi_t *m = impl;
  atomic_store(&m->aborted, 1);
  return PGS_OK;
}

static const pgs_comm_vtable_t pgs_mpi_vtable = {
    .exchange_start = pgs_mpi_exchange_start,
    .exchange_wait = pgs_mpi_exchange_wait,
    .allgatherv = pgs_mpi_allgatherv,
    .allreduce = pgs_mpi_allreduce,
    .bcast = pgs_mpi_bcast,
    .allreduce_host = pgs_mpi_allreduce,
    .alltoall_host = pgs_mpi_alltoall_host,
    .allgather_host = pgs_mpi_allgather_host,
    .barrier = pgs_mpi_barrier,
    .destroy = pgs_mpi_destroy,
    .abort = pgs_mpi_abort,
    .isend = pgs_mpi_isend,
    .irecv = pgs_mpi_irecv,
    .test = pgs_mpi_test,
    .cancel = pgs_mpi_cancel,
    .source = pgs_mpi_source,
};

/* Allocates the per-rank arrays and the request arrays of every slot, sized
 * for the common batch (one message to and one from every peer). */
static int pgs_mpi_alloc_arrays(pgs_mpi_t *m) {
  m->counts = malloc((size_t)m->size * sizeof(*m->counts));
  m->displs = malloc((size_t)m->size * sizeof(*m->displs));
  if (m->counts == NULL || m->displs == NULL) return PGS_ERR_NO_MEMORY;
  for (int i = 0; i < PGS_COMM_SLOTS; ++i) {
    int status = pgs_mpi_slot_reserve(&m->slots[i], 2 * (size_t)m->size);
    if (status != PGS_OK) return status;
  }
  return PGS_OK;
}

/* The transport's tunables of the parameter table, read once. */
static int pgs_mpi_read_params(pgs_mpi_t *m) {
  int64_t chunk = 0, polls = 0;
  int status = pgs_param_int(PGS_PARAM_MPI_BCAST_CHUNK, &chunk);
  if (status == PGS_OK)
    status = pgs_param_int(PGS_PARAM_MPI_CANCEL_POLLS, &polls);
  m->bcast_chunk = (size_t)chunk;
  m->cancel_polls = (int)polls;
  return status;
}

/* MPI_Comm_dup with MPI_ERRORS_RETURN in force on @p parent for the
 * duration of the call only: a failing dup returns instead of aborting the
 * job through the caller's (by default fatal) handler. The caller's handler
 * is put back whatever happens. */
static int pgs_mpi_dup(MPI_Comm parent, MPI_Comm *dup) {
  int status = PGS_OK;
  MPI_Errhandler saved = MPI_ERRHANDLER_NULL;
  PGS_MPI_CHECK_GOTO(MPI_Comm_get_errhandler(parent, &saved), status, fail_get);
  PGS_MPI_CHECK_GOTO(MPI_Comm_set_errhandler(parent, MPI_ERRORS_RETURN), status,
                     fail_set);
  PGS_MPI_CHECK_GOTO(MPI_Comm_dup(parent, dup), status, fail_dup);
  /* The duplicate inherited ERRORS_RETURN; set it anyway, since that is what
   * every later call relies on. */
  PGS_MPI_CHECK_GOTO(MPI_Comm_set_errhandler(*dup, MPI_ERRORS_RETURN), status,
                     fail_dup_handler);
  (void)MPI_Comm_set_errhandler(parent, saved);
  (void)MPI_Errhandler_free(&saved);
  return PGS_OK;

fail_dup_handler:
  (void)MPI_Comm_free(dup);
fail_dup:
  (void)MPI_Comm_set_errhandler(parent, saved);
fail_set:
  (void)MPI_Errhandler_free(&saved);
fail_get:
  *dup = MPI_COMM_NULL;
  return status;
}

int pgs_comm_mpi_create(MPI_Comm mpi_comm, pgs_comm_t **out) {
  return pgs_comm_mpi_create_mem(mpi_comm, PGS_MEM_HOST, out);
}

int pgs_mpi_cuda_aware(void) {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support();
#else
  return 0;
#endif
}

int pgs_comm_mpi_create_mem(MPI_Comm mpi_comm, pgs_mem_t mem,
                            pgs_comm_t **out) {
  if (out == NULL) return PGS_ERR_INVALID;
  if (mem != PGS_MEM_HOST && mem != PGS_MEM_DEVICE) return PGS_ERR_INVALID;
  *out = NULL;
  if (mpi_comm == MPI_COMM_NULL) return PGS_ERR_INVALID;
  int flag = 0;
  MPI_Initialized(&flag);
  if (!flag) return PGS_ERR_INVALID;
  MPI_Finalized(&flag);
  if (flag) return PGS_ERR_INVALID;

  MPI_Comm dup = MPI_COMM_NULL;
  pgs_comm_t *comm = NULL;
  int handed_over = 0; /* m belongs to comm (or was destroyed by create) */
  int local = PGS_OK, agreed = PGS_OK;

  /* A local failure (allocation) must not leave the other ranks inside a
   * collective this rank skipped: everything local is recorded in `local`,
   * every rank still reaches the dup and the agreement below, and then all
   * of them succeed or fail together. */
  pgs_mpi_t *m = calloc(1, sizeof(*m));
  if (m == NULL)
    local = PGS_ERR_NO_MEMORY;
  else
    m->comm = MPI_COMM_NULL;

  int status = pgs_mpi_dup(mpi_comm, &dup);
  if (status != PGS_OK)
    goto fail_dup; /* the communicator is unusable; nothing to agree on */

  if (local == PGS_OK) {
    PGS_MPI_CHECK_GOTO(MPI_Comm_rank(dup, &m->rank), local, fail_local);
    PGS_MPI_CHECK_GOTO(MPI_Comm_size(dup, &m->size), local, fail_local);
    local = pgs_mpi_alloc_arrays(m);
    if (local != PGS_OK) goto fail_local;
    local = pgs_mpi_read_params(m);
    if (local != PGS_OK) goto fail_local;
    local = pgs_mpi_half_ops_create(&m->half);
    if (local != PGS_OK) goto fail_local;
    /* m->comm stays MPI_COMM_NULL for now, so that if this fails and
     * destroys m, dup survives for the agreement. */
    local = pgs_comm_create(&pgs_mpi_vtable, m, m->rank, m->size, mem, &comm);
    handed_over = 1;
  }
fail_local:
  PGS_MPI_CHECK_GOTO(MPI_Allreduce(&local, &agreed, 1, MPI_INT, MPI_MIN, dup),
                     status, fail_agree);
  if (agreed != PGS_OK) {
    /* Report our own error if we had one, else the one a peer had. */
    status = local != PGS_OK ? local : agreed;
    goto fail_agree;
  }
  m->comm = dup;
  *out = comm;
  return PGS_OK;

fail_agree:
  if (handed_over)
    pgs_comm_destroy(comm); /* NULL if pgs_comm_create already freed m */
  else
    pgs_mpi_destroy(m);
  m = NULL;
  (void)MPI_Comm_free(&dup);
fail_dup:
  pgs_mpi_destroy(m);
  return status;
}
