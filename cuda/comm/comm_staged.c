/* Staging transport: device buffers over a host transport.
 *
 * Every data-plane call is bracketed by copies through pinned host buffers:
 * device -> host after synchronising the stream (MPI reads host memory the
 * moment it is called), the host call, then host -> device queued on the
 * stream. Exchange batches stage per slot, so two may be in flight. The
 * control plane is host memory already and passes straight through. */
#include "pg_sparse/comm_staged.h"

#include <stdio.h>

#include "cuda_check.h"
#include <stdlib.h>
#include <string.h>

typedef struct pinned {
  char *ptr;
  size_t cap;
} pinned_t;

typedef struct staged_slot {
  pinned_t buf;
  pgs_msg_t *msgs; /* host copies of the batch, staging pointers */
  int nmsgs_cap;
  const pgs_msg_t *recvs; /* caller's receive list, for the copy back */
  int nrecvs;
  size_t recv_off; /* where the receives start in buf */
} staged_slot_t;

typedef struct staged_comm {
  pgs_comm_t *host; /* the inner transport (device memory when direct) */
  cudaStream_t stream;
  int direct;   /* CUDA-aware inner transport: synchronise, no copies */
  int device;   /* point-to-point: the stream's device */
  pinned_t buf; /* collectives */
  staged_slot_t slot[PGS_COMM_SLOTS];
} staged_comm_t;

static int reserve(pinned_t *p, size_t bytes) {
  if (bytes <= p->cap && p->ptr != NULL) return PGS_OK;
  size_t want = bytes > 2 * p->cap ? bytes : 2 * p->cap;
  if (want < 4096) want = 4096;
  if (p->ptr != NULL) cudaFreeHost(p->ptr);
  p->ptr = NULL;
  p->cap = 0;
  CUDA_TRY(cudaMallocHost((void **)&p->ptr, want));
  p->cap = want;
  return PGS_OK;
}

static int to_host(staged_comm_t *c, void *dst, const void *src, size_t n) {
  if (n == 0) return PGS_OK;
  CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c->stream));
  return PGS_OK;
}

static int to_device(staged_comm_t *c, void *dst, const void *src, size_t n) {
  if (n == 0) return PGS_OK;
  CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, c->stream));
  return PGS_OK;
}

static int sync(staged_comm_t *c) {
  CUDA_TRY(cudaStreamSynchronize(c->stream));
  return PGS_OK;
}

static int grow_msgs(staged_slot_t *s, int n) {
  if (n <= s->nmsgs_cap) return PGS_OK;
  pgs_msg_t *m = realloc(s->msgs, (size_t)n * sizeof(*m));
  if (m == NULL) return PGS_ERR_NO_MEMORY;
  s->msgs = m;
  s->nmsgs_cap = n;
  return PGS_OK;
}

static int exchange_start(void *impl, const pgs_msg_t *sends, int ns,
                          const pgs_msg_t *recvs, int nr, int slot) {
  staged_comm_t *c = impl;
  if (c->direct) {
    int st = sync(c);
    return st ? st
              : pgs_comm_exchange_start(c->host, sends, ns, recvs, nr, slot);
  }
  staged_slot_t *s = &c->slot[slot];
  size_t total = 0;
  for (int i = 0; i < ns; ++i) total += sends[i].bytes;
  s->recv_off = total;
  for (int i = 0; i < nr; ++i) total += recvs[i].bytes;
  int st = reserve(&s->buf, total);
  if (st == PGS_OK) st = grow_msgs(s, ns + nr);
  if (st != PGS_OK) return st;
  size_t at = 0;
  for (int i = 0; i < ns; ++i, at += sends[i - 1].bytes) {
    s->msgs[i] = (pgs_msg_t){sends[i].peer, s->buf.ptr + at, sends[i].bytes};
    st = to_host(c, s->buf.ptr + at, sends[i].buf, sends[i].bytes);
    if (st != PGS_OK) return st;
  }
  for (int i = 0; i < nr; ++i, at += recvs[i - 1].bytes)
    s->msgs[ns + i] =
        (pgs_msg_t){recvs[i].peer, s->buf.ptr + at, recvs[i].bytes};
  s->recvs = recvs;
  s->nrecvs = nr;
  st = sync(c);
  if (st != PGS_OK) return st;
  return pgs_comm_exchange_start(c->host, s->msgs, ns, s->msgs + ns, nr, slot);
}

static int exchange_wait(void *impl, int slot) {
  staged_comm_t *c = impl;
  if (c->direct) return pgs_comm_exchange_wait(c->host, slot);
  staged_slot_t *s = &c->slot[slot];
  int st = pgs_comm_exchange_wait(c->host, slot);
  size_t at = s->recv_off;
  for (int i = 0; i < s->nrecvs && st == PGS_OK; ++i) {
    st = to_device(c, s->recvs[i].buf, s->buf.ptr + at, s->recvs[i].bytes);
    at += s->recvs[i].bytes;
  }
  /* The pinned buffer is reused by the next batch in this slot. */
  return st == PGS_OK ? sync(c) : st;
}

static int allgatherv(void *impl, const void *send, size_t send_bytes,
                      void *recv, const size_t *recv_bytes,
                      const size_t *displs) {
  staged_comm_t *c = impl;
  if (c->direct) {
    int st = sync(c);
    return st ? st
              : pgs_comm_allgatherv(c->host, send, send_bytes, recv, recv_bytes,
                                    displs);
  }
  const int P = pgs_comm_size(c->host);
  size_t end = 0;
  for (int r = 0; r < P; ++r)
    if (displs[r] + recv_bytes[r] > end) end = displs[r] + recv_bytes[r];
  int st = reserve(&c->buf, end + send_bytes);
  char *h = c->buf.ptr;
  if (st == PGS_OK) st = to_host(c, h + end, send, send_bytes);
  if (st == PGS_OK) st = sync(c);
  if (st == PGS_OK)
    st = pgs_comm_allgatherv(c->host, h + end, send_bytes, h, recv_bytes,
                             displs);
  for (int r = 0; r < P && st == PGS_OK; ++r)
    st = to_device(c, (char *)recv + displs[r], h + displs[r], recv_bytes[r]);
  return st == PGS_OK ? sync(c) : st;
}

/* Copy in, run @p fn on the host copy, copy back. */
static int round_trip(staged_comm_t *c, void *buf, size_t bytes,
                      int (*fn)(staged_comm_t *, void *, size_t, const void *),
                      const void *arg) {
  if (c->direct) {
    int st = sync(c);
    return st ? st : fn(c, buf, bytes, arg);
  }
  int st = reserve(&c->buf, bytes);
  if (st == PGS_OK) st = to_host(c, c->buf.ptr, buf, bytes);
  if (st == PGS_OK) st = sync(c);
  if (st == PGS_OK) st = fn(c, c->buf.ptr, bytes, arg);
  if (st == PGS_OK) st = to_device(c, buf, c->buf.ptr, bytes);
  return st == PGS_OK ? sync(c) : st;
}

typedef struct reduce_args {
  size_t count;
  pgs_dtype_t dtype;
  pgs_redop_t op;
} reduce_args_t;

static int host_allreduce(staged_comm_t *c, void *h, size_t bytes,
                          const void *arg) {
  const reduce_args_t *a = arg;
  (void)bytes;
  return pgs_comm_allreduce(c->host, h, a->count, a->dtype, a->op);
}

static int host_bcast(staged_comm_t *c, void *h, size_t bytes,
                      const void *arg) {
  return pgs_comm_bcast(c->host, h, bytes, *(const int *)arg);
}

static int allreduce(void *impl, void *buf, size_t count, pgs_dtype_t dtype,
                     pgs_redop_t op) {
  reduce_args_t a = {count, dtype, op};
  return round_trip(impl, buf, count * pgs_dtype_size(dtype), host_allreduce,
                    &a);
}

static int bcast(void *impl, void *buf, size_t bytes, int root) {
  return round_trip(impl, buf, bytes, host_bcast, &root);
}

static int allreduce_host(void *impl, void *buf, size_t count,
                          pgs_dtype_t dtype, pgs_redop_t op) {
  return pgs_comm_allreduce_host(((staged_comm_t *)impl)->host, buf, count,
                                 dtype, op);
}

static int alltoall_host(void *impl, const int64_t *send, int64_t *recv) {
  return pgs_comm_alltoall_host(((staged_comm_t *)impl)->host, send, recv);
}

static int allgather_host(void *impl, const int64_t *send, size_t count,
                          int64_t *recv) {
  return pgs_comm_allgather_host(((staged_comm_t *)impl)->host, send, count,
                                 recv);
}

static int barrier(void *impl) {
  return pgs_comm_barrier(((staged_comm_t *)impl)->host);
}

/* The inner transport does the waiting for peers: aborting it ends the
 * call in progress (the staging copies themselves never wait for a peer). */
static int abort_inner(void *impl) {
  staged_comm_t *c = impl;
  return pgs_comm_abort(c->host);
}

static void destroy(void *impl) {
  staged_comm_t *c = impl;
  if (c == NULL) return;
  pgs_comm_destroy(c->host);
  if (c->buf.ptr != NULL) cudaFreeHost(c->buf.ptr);
  for (int s = 0; s < PGS_COMM_SLOTS; ++s) {
    if (c->slot[s].buf.ptr != NULL) cudaFreeHost(c->slot[s].buf.ptr);
    free(c->slot[s].msgs);
  }
  free(c);
}

static const pgs_comm_vtable_t staged_vtable = {
    .exchange_start = exchange_start,
    .exchange_wait = exchange_wait,
    .allgatherv = allgatherv,
    .allreduce = allreduce,
    .bcast = bcast,
    .allreduce_host = allreduce_host,
    .alltoall_host = alltoall_host,
    .allgather_host = allgather_host,
    .barrier = barrier,
    .destroy = destroy,
    .abort = abort_inner,
};

/* --- point-to-point: the user's messages of CUDA tensors over the host
 * transport's, one pinned buffer per message (they are few and large) --- */

typedef struct staged_req {
  pgs_request_t *inner;
  char *pinned; /* NULL in direct mode */
  void *dst;    /* a receive's device buffer */
  size_t bytes;
  int is_send;
  cudaEvent_t moved; /* a staged receive's copy back, once queued */
} staged_req_t;

static void req_free(staged_req_t *r) {
  pgs_request_free(r->inner);
  if (r->moved != NULL) {
    /* The copy back reads the pinned buffer: it must be over first (a
     * local wait on a copy, never on a peer). */
    (void)cudaEventSynchronize(r->moved);
    (void)cudaEventDestroy(r->moved);
  }
  if (r->pinned != NULL) (void)cudaFreeHost(r->pinned);
  free(r);
}

/* Staged, a send copies its data out once @p after has fired; direct, MPI
 * reads device memory the moment it is called, so the stream is drained. A
 * receive's stream waits for @p after before its copy back is queued. */
static int p2p_post_on(staged_comm_t *c, staged_req_t *r, int peer, int tag,
                       cudaEvent_t after) {
  if (after != NULL) CUDA_TRY(cudaStreamWaitEvent(c->stream, after, 0));
  if (!c->direct && r->bytes > 0)
    CUDA_TRY(cudaMallocHost((void **)&r->pinned, r->bytes));
  void *wire = c->direct ? r->dst : r->pinned;
  int st = PGS_OK;
  if (r->is_send && !c->direct) st = to_host(c, wire, r->dst, r->bytes);
  if (st == PGS_OK && (r->is_send || c->direct)) st = sync(c);
  if (st != PGS_OK) return st;
  return r->is_send ? pgs_comm_isend(c->host, wire, r->bytes, peer, tag, NULL,
                                     &r->inner)
                    : pgs_comm_irecv(c->host, wire, r->bytes, peer, tag, NULL,
                                     &r->inner);
}

static int p2p_post(staged_comm_t *c, void *buf, size_t bytes, int peer,
                    int tag, cudaEvent_t after, int is_send, void **out) {
  staged_req_t *r = calloc(1, sizeof(*r));
  if (r == NULL) return PGS_ERR_NO_MEMORY;
  r->dst = buf;
  r->bytes = bytes;
  r->is_send = is_send;
  pgs_dev_scope_t scope;
  int st = pgs_dev_enter(c->device, &scope);
  if (st == PGS_OK) {
    st = p2p_post_on(c, r, peer, tag, after);
    if (st != PGS_OK) req_free(r);
    pgs_dev_leave(&scope);
  } else {
    free(r);
  }
  if (st == PGS_OK) *out = r;
  return st;
}

static int p2p_isend(void *impl, const void *buf, size_t bytes, int peer,
                     int tag, void *after, void **req) {
  return p2p_post(impl, (void *)buf, bytes, peer, tag, after, 1, req);
}

static int p2p_irecv(void *impl, void *buf, size_t bytes, int peer, int tag,
                     void *after, void **req) {
  return p2p_post(impl, buf, bytes, peer, tag, after, 0, req);
}

/* A staged receive is done once its copy back has run on the stream. */
static int p2p_progress(staged_comm_t *c, staged_req_t *r, int *done) {
  if (r->moved == NULL) {
    int host_done = 0;
    int st = pgs_request_test(r->inner, &host_done);
    if (st != PGS_OK || !host_done) return st;
    if (r->is_send || r->pinned == NULL) {
      *done = 1;
      return PGS_OK;
    }
    CUDA_TRY(cudaEventCreateWithFlags(&r->moved, cudaEventDisableTiming));
    st = to_device(c, r->dst, r->pinned, r->bytes);
    if (st != PGS_OK) return st;
    CUDA_TRY(cudaEventRecord(r->moved, c->stream));
  }
  cudaError_t e = cudaEventQuery(r->moved);
  if (e == cudaSuccess) *done = 1;
  return e == cudaSuccess || e == cudaErrorNotReady ? PGS_OK : PGS_ERR_DEVICE;
}

static int p2p_test(void *impl, void *req, int *done) {
  staged_comm_t *c = impl;
  *done = 0;
  pgs_dev_scope_t scope;
  int st = pgs_dev_enter(c->device, &scope);
  if (st != PGS_OK) return st;
  st = p2p_progress(c, req, done);
  pgs_dev_leave(&scope);
  return st;
}

static int p2p_source(void *impl, void *req) {
  (void)impl;
  return pgs_request_source(((staged_req_t *)req)->inner);
}

static void p2p_cancel(void *impl, void *req) {
  staged_comm_t *c = impl;
  pgs_dev_scope_t scope;
  const int entered = pgs_dev_enter(c->device, &scope) == PGS_OK;
  req_free(req);
  if (entered) pgs_dev_leave(&scope);
}

/* Borrowed inner transport (the point-to-point one is shared with host
 * tensors): only the staging state is ours. */
static void p2p_destroy(void *impl) {
  staged_comm_t *c = impl;
  free(c);
}

static const pgs_comm_vtable_t staged_p2p_vtable = {
    .destroy = p2p_destroy,
    .isend = p2p_isend,
    .irecv = p2p_irecv,
    .test = p2p_test,
    .cancel = p2p_cancel,
    .source = p2p_source,
};

int pgs_comm_staged_p2p_create(pgs_comm_t *host_p2p, cudaStream_t stream,
                               int direct, pgs_comm_t **out) {
  if (out == NULL) return PGS_ERR_INVALID;
  *out = NULL;
  if (host_p2p == NULL) return PGS_ERR_INVALID;
  staged_comm_t *c = calloc(1, sizeof(*c));
  if (c == NULL) return PGS_ERR_NO_MEMORY;
  if (cudaGetDevice(&c->device) != cudaSuccess) {
    free(c);
    return PGS_ERR_DEVICE;
  }
  c->host = host_p2p;
  c->stream = stream;
  c->direct = direct != 0;
  return pgs_comm_create(&staged_p2p_vtable, c, pgs_comm_rank(host_p2p),
                         pgs_comm_size(host_p2p), PGS_MEM_DEVICE, out);
}

static int wrap(pgs_comm_t *inner, pgs_mem_t inner_mem, cudaStream_t stream,
                int direct, pgs_comm_t **out) {
  if (out == NULL) {
    pgs_comm_destroy(inner);
    return PGS_ERR_INVALID;
  }
  *out = NULL;
  if (inner == NULL || pgs_comm_mem(inner) != inner_mem) {
    pgs_comm_destroy(inner);
    return PGS_ERR_INVALID;
  }
  staged_comm_t *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    pgs_comm_destroy(inner);
    return PGS_ERR_NO_MEMORY;
  }
  c->host = inner;
  c->stream = stream;
  c->direct = direct;
  return pgs_comm_create(&staged_vtable, c, pgs_comm_rank(inner),
                         pgs_comm_size(inner), PGS_MEM_DEVICE, out);
}

int pgs_comm_staged_create(pgs_comm_t *host_comm, cudaStream_t stream,
                           pgs_comm_t **out) {
  return wrap(host_comm, PGS_MEM_HOST, stream, 0, out);
}

int pgs_comm_synced_create(pgs_comm_t *device_comm, cudaStream_t stream,
                           pgs_comm_t **out) {
  return wrap(device_comm, PGS_MEM_DEVICE, stream, 1, out);
}
