/* The test `ext` transport: see ext_mpi_transport.h.
 *
 * Deliberately different from mpi.c at every entry:
 *  - exchange_start only records the batch; exchange_wait posts all its
 *    receives, then all its sends, then waits (deadlock-free for any
 *    pattern, since nothing blocks before everything is posted). Messages
 *    above EXT_PIECE bytes travel as several plain MPI_BYTE messages
 *    instead of one derived datatype;
 *  - allgatherv and allgather_host: a ring of P - 1 MPI_Sendrecv steps;
 *  - allreduce (both planes): recursive doubling by hand, with the ranks
 *    above the largest power of two folded into partners first; every rank
 *    combines (lower rank's data, higher rank's data) in that order, so all
 *    ranks end with bit-identical results;
 *  - alltoall_host: a loop of MPI_Sendrecv in rotated order;
 *  - bcast: a binomial tree of blocking MPI_Send / MPI_Recv;
 *  - barrier: an allreduce of one int64.
 * Each collective has its own tag; all of them complete inside the call, so
 * no two of them are ever in flight together. */
#include "ext_mpi_transport.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tags distinct from mpi.c's (0x5047), though the communicators differ
 * anyway. */
enum {
  EXT_TAG_EXCHANGE = 0x7e01,
  EXT_TAG_RING = 0x7e02,
  EXT_TAG_REDUCE = 0x7e03,
  EXT_TAG_ALLTOALL = 0x7e04,
  EXT_TAG_BCAST = 0x7e05,
};

/* Largest piece one MPI call moves: below INT_MAX, so counts fit an int. */
#define EXT_PIECE ((size_t)1 << 30)

/* Elements of a reduction handled per round, bounding the scratch buffer to
 * 8 MiB whatever the count. */
#define EXT_REDUCE_ELEMS ((size_t)1 << 20)

static int ext_mpi_error(int rc, const char *call, int line) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
    snprintf(text, sizeof(text), "MPI error code %d", rc);
  fprintf(stderr, "ext_mpi_transport: %s failed at line %d: %s\n", call, line,
          text);
  return PGS_ERR_COMM;
}

#define EXT_CHECK(call)                               \
  do {                                                \
    int ext_rc_ = (call);                             \
    if (ext_rc_ != MPI_SUCCESS)                       \
      return ext_mpi_error(ext_rc_, #call, __LINE__); \
  } while (0)

typedef struct ext_batch {
  pgs_msg_t *msgs; /* receives first, then sends */
  size_t cap;
  int nrecvs;
  int nsends;
} ext_batch_t;

typedef struct ext_mpi {
  MPI_Comm comm;
  int rank;
  int size;
  ext_batch_t batches[PGS_COMM_SLOTS];
  MPI_Request *reqs;
  size_t req_cap;
  char *scratch;
  size_t scratch_cap;
} ext_mpi_t;

static size_t ext_min(size_t a, size_t b) {
  return a < b ? a : b;
}

static size_t ext_pieces(size_t bytes) {
  return (bytes + EXT_PIECE - 1) / EXT_PIECE;
}

/* Grows @p buf to at least @p need elements of @p esize bytes. Returns the
 * (possibly moved) buffer, or NULL with @p buf untouched if out of memory;
 * taking and returning void * (rather than writing through a void **) keeps
 * the typed pointers of the callers free of aliasing tricks. */
static void *ext_grow(void *buf, size_t *cap, size_t need, size_t esize) {
  if (need <= *cap) return buf;
  void *p = realloc(buf, need * esize);
  if (p != NULL) *cap = need;
  return p;
}

/* ---- point-to-point helpers of any size -------------------------------- */

static int ext_send(ext_mpi_t *x, const void *buf, size_t bytes, int dst,
                    int tag) {
  const char *p = buf;
  for (size_t off = 0; off < bytes; off += EXT_PIECE)
    EXT_CHECK(MPI_Send(p + off, (int)ext_min(bytes - off, EXT_PIECE), MPI_BYTE,
                       dst, tag, x->comm));
  return PGS_OK;
}

static int ext_recv(ext_mpi_t *x, void *buf, size_t bytes, int src, int tag) {
  char *p = buf;
  for (size_t off = 0; off < bytes; off += EXT_PIECE)
    EXT_CHECK(MPI_Recv(p + off, (int)ext_min(bytes - off, EXT_PIECE), MPI_BYTE,
                       src, tag, x->comm, MPI_STATUS_IGNORE));
  return PGS_OK;
}

/* Sends @p sbytes to @p dst while receiving @p rbytes from @p src, in
 * pieces. Once one side has no piece left it talks to MPI_PROC_NULL, so a
 * rank makes exactly as many real sends to a peer as that peer makes real
 * receives from it, even when the two directions differ in size. */
static int ext_sendrecv(ext_mpi_t *x, const void *sbuf, size_t sbytes, int dst,
                        void *rbuf, size_t rbytes, int src, int tag) {
  const char *s = sbuf;
  char *r = rbuf;
  size_t soff = 0, roff = 0;
  while (soff < sbytes || roff < rbytes) {
    const size_t sn = ext_min(sbytes - soff, EXT_PIECE);
    const size_t rn = ext_min(rbytes - roff, EXT_PIECE);
    EXT_CHECK(MPI_Sendrecv(
        sn > 0 ? s + soff : s, (int)sn, MPI_BYTE, sn > 0 ? dst : MPI_PROC_NULL,
        tag, rn > 0 ? r + roff : r, (int)rn, MPI_BYTE,
        rn > 0 ? src : MPI_PROC_NULL, tag, x->comm, MPI_STATUS_IGNORE));
    soff += sn;
    roff += rn;
  }
  return PGS_OK;
}

/* ---- exchange ---------------------------------------------------------- */

static int ext_exchange_start(void *impl, const pgs_msg_t *sends, int nsends,
                              const pgs_msg_t *recvs, int nrecvs, int slot) {
  ext_mpi_t *x = impl;
  ext_batch_t *b = &x->batches[slot];
  const size_t n = (size_t)nsends + (size_t)nrecvs;
  pgs_msg_t *msgs = ext_grow(b->msgs, &b->cap, n, sizeof(pgs_msg_t));
  if (msgs == NULL && n > 0) return PGS_ERR_NO_MEMORY;
  b->msgs = msgs;
  if (nrecvs > 0) memcpy(b->msgs, recvs, (size_t)nrecvs * sizeof(pgs_msg_t));
  if (nsends > 0)
    memcpy(b->msgs + nrecvs, sends, (size_t)nsends * sizeof(pgs_msg_t));
  b->nrecvs = nrecvs;
  b->nsends = nsends;
  return PGS_OK;
}

static int ext_exchange_wait(void *impl, int slot) {
  ext_mpi_t *x = impl;
  ext_batch_t *b = &x->batches[slot];
  const int nrecvs = b->nrecvs, nmsgs = b->nrecvs + b->nsends;
  b->nrecvs = b->nsends = 0; /* the batch is consumed, whatever happens */

  size_t npieces = 0;
  for (int i = 0; i < nmsgs; ++i) npieces += ext_pieces(b->msgs[i].bytes);
  if (npieces > (size_t)INT_MAX) return PGS_ERR_UNSUPPORTED;
  MPI_Request *reqs =
      ext_grow(x->reqs, &x->req_cap, npieces, sizeof(MPI_Request));
  if (reqs == NULL && npieces > 0) return PGS_ERR_NO_MEMORY;
  x->reqs = reqs;
  int status = PGS_OK;

  /* b->msgs holds the receives first, so every receive is posted before any
   * send; pieces of one message follow each other, and MPI's
   * non-overtaking rule matches them in order. */
  int nreq = 0;
  for (int i = 0; i < nmsgs; ++i) {
    const pgs_msg_t *m = &b->msgs[i];
    char *p = m->buf;
    for (size_t off = 0; off < m->bytes; off += EXT_PIECE) {
      const int n = (int)ext_min(m->bytes - off, EXT_PIECE);
      int rc = i < nrecvs
                   ? MPI_Irecv(p + off, n, MPI_BYTE, m->peer, EXT_TAG_EXCHANGE,
                               x->comm, &x->reqs[nreq])
                   : MPI_Isend(p + off, n, MPI_BYTE, m->peer, EXT_TAG_EXCHANGE,
                               x->comm, &x->reqs[nreq]);
      if (rc != MPI_SUCCESS) {
        status = ext_mpi_error(rc, "MPI_Irecv/MPI_Isend", __LINE__);
        goto fail_post;
      }
      ++nreq;
    }
  }
  EXT_CHECK(MPI_Waitall(nreq, x->reqs, MPI_STATUSES_IGNORE));
  return PGS_OK;

fail_post:
  /* Finish what was posted, so no request outlives this call; the error
   * already decided the result. */
  (void)MPI_Waitall(nreq, x->reqs, MPI_STATUSES_IGNORE);
  return status;
}

/* ---- allgather rings --------------------------------------------------- */

/* Ring allgather over blocks of recv: block i (bytes[i] bytes at
 * recv + displs[i]) starts at rank i. At step s every rank forwards to its
 * right neighbour the block it received at step s - 1 (its own at s = 0)
 * and receives the next one from its left neighbour. */
static int ext_ring(ext_mpi_t *x, char *recv, const size_t *bytes,
                    const size_t *displs) {
  const int p = x->size, r = x->rank;
  const int right = (r + 1) % p, left = (r - 1 + p) % p;
  for (int s = 0; s < p - 1; ++s) {
    const int si = (r - s + p) % p, ri = (r - s - 1 + p) % p;
    char *sb = bytes[si] > 0 ? recv + displs[si] : NULL;
    char *rb = bytes[ri] > 0 ? recv + displs[ri] : NULL;
    int status = ext_sendrecv(x, sb, bytes[si], right, rb, bytes[ri], left,
                              EXT_TAG_RING);
    if (status != PGS_OK) return status;
  }
  return PGS_OK;
}

static int ext_allgatherv(void *impl, const void *send, size_t send_bytes,
                          void *recv, const size_t *recv_bytes,
                          const size_t *displs) {
  ext_mpi_t *x = impl;
  char *own = send_bytes > 0 ? (char *)recv + displs[x->rank] : NULL;
  if (send_bytes > 0 && own != send) memcpy(own, send, send_bytes);
  return ext_ring(x, recv, recv_bytes, displs);
}

static int ext_allgather_host(void *impl, const int64_t *send, size_t count,
                              int64_t *recv) {
  ext_mpi_t *x = impl;
  if (count == 0) return PGS_OK;
  /* Uniform blocks: build the layout the ring wants (two small arrays,
   * this transport only serves tests). */
  size_t *bytes = malloc(2 * (size_t)x->size * sizeof(size_t));
  if (bytes == NULL) return PGS_ERR_NO_MEMORY;
  size_t *displs = bytes + x->size;
  for (int i = 0; i < x->size; ++i) {
    bytes[i] = count * sizeof(int64_t);
    displs[i] = (size_t)i * count * sizeof(int64_t);
  }
  memcpy(recv + (size_t)x->rank * count, send, count * sizeof(int64_t));
  int status = ext_ring(x, (char *)recv, bytes, displs);
  free(bytes);
  return status;
}

/* ---- allreduce by recursive doubling ----------------------------------- */

#define EXT_COMBINE(T, lo, hi, out, n, op)              \
  do {                                                  \
    const T *l_ = (const T *)(lo);                      \
    const T *h_ = (const T *)(hi);                      \
    T *o_ = (T *)(out);                                 \
    for (size_t i_ = 0; i_ < (n); ++i_) {               \
      const T a_ = l_[i_], b_ = h_[i_];                 \
      o_[i_] = (op) == PGS_SUM   ? a_ + b_              \
               : (op) == PGS_MAX ? (a_ < b_ ? b_ : a_)  \
                                 : (b_ < a_ ? b_ : a_); \
    }                                                   \
  } while (0)

/* out = lo (op) hi, elementwise; lo always holds the lower ranks' data. */
static int ext_combine(const void *lo, const void *hi, void *out, size_t n,
                       pgs_dtype_t dtype, pgs_redop_t op) {
  if (op != PGS_SUM && op != PGS_MAX && op != PGS_MIN)
    return PGS_ERR_UNSUPPORTED;
  switch (dtype) {
    case PGS_INT64: EXT_COMBINE(int64_t, lo, hi, out, n, op); return PGS_OK;
    case PGS_FLOAT32: EXT_COMBINE(float, lo, hi, out, n, op); return PGS_OK;
    case PGS_FLOAT64: EXT_COMBINE(double, lo, hi, out, n, op); return PGS_OK;
    /* Left out on purpose: an embedder's transport may lack 16-bit types. */
    case PGS_FLOAT16:
    case PGS_BFLOAT16: return PGS_ERR_UNSUPPORTED;
  }
  return PGS_ERR_UNSUPPORTED;
}

/* Allreduce of n elements in buf (n <= EXT_REDUCE_ELEMS). With p2 the
 * largest power of two <= P and rem = P - p2, ranks below 2 * rem pair up:
 * each even one hands its data to the odd one above and waits; the p2
 * remaining ranks run log2(p2) exchange-and-combine rounds; the odd ranks
 * then hand the result back down. */
static int ext_allreduce_piece(ext_mpi_t *x, char *buf, size_t n,
                               pgs_dtype_t dtype, pgs_redop_t op) {
  const size_t bytes = n * pgs_dtype_size(dtype);
  const int p = x->size, r = x->rank;
  int p2 = 1;
  while (p2 * 2 <= p) p2 *= 2;
  const int rem = p - p2;
  int status = PGS_OK;

  int vr; /* rank among the p2 that run the doubling, -1 if folded away */
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      status = ext_send(x, buf, bytes, r + 1, EXT_TAG_REDUCE);
      vr = -1;
    } else {
      status = ext_recv(x, x->scratch, bytes, r - 1, EXT_TAG_REDUCE);
      if (status == PGS_OK)
        status = ext_combine(x->scratch, buf, buf, n, dtype, op);
      vr = r / 2;
    }
  } else {
    vr = r - rem;
  }
  if (status != PGS_OK) return status;

  if (vr >= 0) {
    for (int mask = 1; mask < p2; mask <<= 1) {
      const int pv = vr ^ mask;
      const int peer = pv < rem ? 2 * pv + 1 : pv + rem;
      status = ext_sendrecv(x, buf, bytes, peer, x->scratch, bytes, peer,
                            EXT_TAG_REDUCE);
      if (status != PGS_OK) return status;
      status = peer < r ? ext_combine(x->scratch, buf, buf, n, dtype, op)
                        : ext_combine(buf, x->scratch, buf, n, dtype, op);
      if (status != PGS_OK) return status;
    }
  }

  if (r < 2 * rem)
    status = r % 2 == 1 ? ext_send(x, buf, bytes, r - 1, EXT_TAG_REDUCE)
                        : ext_recv(x, buf, bytes, r + 1, EXT_TAG_REDUCE);
  return status;
}

static int ext_allreduce(void *impl, void *buf, size_t count, pgs_dtype_t dtype,
                         pgs_redop_t op) {
  ext_mpi_t *x = impl;
  const size_t esize = pgs_dtype_size(dtype);
  /* Refused before any message, on every rank alike: a rank that found out
   * mid-exchange would leave its partner waiting. */
  if (esize == 0 || dtype == PGS_FLOAT16 || dtype == PGS_BFLOAT16 ||
      (op != PGS_SUM && op != PGS_MAX && op != PGS_MIN))
    return PGS_ERR_UNSUPPORTED;
  if (count == 0) return PGS_OK;
  const size_t piece = ext_min(count, EXT_REDUCE_ELEMS);
  char *scratch =
      ext_grow(x->scratch, &x->scratch_cap, piece * esize, sizeof(char));
  if (scratch == NULL) return PGS_ERR_NO_MEMORY;
  x->scratch = scratch;
  int status = PGS_OK;
  char *p = buf;
  for (size_t off = 0; off < count; off += EXT_REDUCE_ELEMS) {
    status = ext_allreduce_piece(
        x, p + off * esize, ext_min(count - off, EXT_REDUCE_ELEMS), dtype, op);
    if (status != PGS_OK) return status;
  }
  return PGS_OK;
}

/* ---- the rest ---------------------------------------------------------- */

static int ext_alltoall_host(void *impl, const int64_t *send, int64_t *recv) {
  ext_mpi_t *x = impl;
  const int p = x->size, r = x->rank;
  recv[r] = send[r];
  for (int s = 1; s < p; ++s) {
    const int dst = (r + s) % p, src = (r - s + p) % p;
    EXT_CHECK(MPI_Sendrecv(&send[dst], 1, MPI_INT64_T, dst, EXT_TAG_ALLTOALL,
                           &recv[src], 1, MPI_INT64_T, src, EXT_TAG_ALLTOALL,
                           x->comm, MPI_STATUS_IGNORE));
  }
  return PGS_OK;
}

/* Binomial tree rooted at @p root, over ranks renumbered so the root is 0:
 * a rank receives once from the rank that differs in its lowest set bit,
 * then sends to the ranks below that bit. */
static int ext_bcast(void *impl, void *buf, size_t bytes, int root) {
  ext_mpi_t *x = impl;
  const int p = x->size;
  if (bytes == 0 || p == 1) return PGS_OK;
  const int vr = (x->rank - root + p) % p;
  int mask = 1;
  while (mask < p) {
    if (vr & mask) {
      int status =
          ext_recv(x, buf, bytes, (vr - mask + root) % p, EXT_TAG_BCAST);
      if (status != PGS_OK) return status;
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (vr + mask < p) {
      int status =
          ext_send(x, buf, bytes, (vr + mask + root) % p, EXT_TAG_BCAST);
      if (status != PGS_OK) return status;
    }
  }
  return PGS_OK;
}

static int ext_barrier(void *impl) {
  int64_t one = 1;
  return ext_allreduce(impl, &one, 1, PGS_INT64, PGS_SUM);
}

static void ext_destroy(void *impl) {
  ext_mpi_t *x = impl;
  if (x == NULL) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && x->comm != MPI_COMM_NULL) (void)MPI_Comm_free(&x->comm);
  for (int i = 0; i < PGS_COMM_SLOTS; ++i) free(x->batches[i].msgs);
  free(x->reqs);
  free(x->scratch);
  free(x);
}

static const pgs_comm_vtable_t ext_vtable = {
    .exchange_start = ext_exchange_start,
    .exchange_wait = ext_exchange_wait,
    .allgatherv = ext_allgatherv,
    .allreduce = ext_allreduce,
    .bcast = ext_bcast,
    .allreduce_host = ext_allreduce,
    .alltoall_host = ext_alltoall_host,
    .allgather_host = ext_allgather_host,
    .barrier = ext_barrier,
    .destroy = ext_destroy,
};

int pgs_test_ext_mpi_create(MPI_Comm comm, pgs_comm_t **out) {
  if (out == NULL) return PGS_ERR_INVALID;
  *out = NULL;
  ext_mpi_t *x = calloc(1, sizeof(*x));
  MPI_Comm dup = MPI_COMM_NULL;
  /* Collective: every rank dups even if its calloc failed, so no peer is
   * left waiting inside MPI_Comm_dup. */
  int rc = MPI_Comm_dup(comm, &dup);
  if (rc != MPI_SUCCESS) {
    free(x);
    return ext_mpi_error(rc, "MPI_Comm_dup", __LINE__);
  }
  if (x == NULL) {
    (void)MPI_Comm_free(&dup);
    return PGS_ERR_NO_MEMORY;
  }
  x->comm = dup;
  (void)MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  MPI_Comm_rank(dup, &x->rank);
  MPI_Comm_size(dup, &x->size);
  /* pgs_comm_create owns x from here, and destroys it if it fails. */
  return pgs_comm_create(&ext_vtable, x, x->rank, x->size, PGS_MEM_HOST, out);
}
