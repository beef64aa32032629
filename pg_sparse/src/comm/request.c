/* Point-to-point requests: validation, byte counting and abort around a
 * transport's isend/irecv/test/cancel.
 *
 * A request remembers its outcome, so a caller can test it again after it
 * finished or failed and get the same answer, and the transport's own
 * request is released exactly once: by the test that finishes it, by an
 * abort, or by pgs_request_free(). */
#include <stdlib.h>

#include "comm/comm_internal.h"

struct pgs_request {
  pgs_comm_t *comm;
  void *impl;     /* the transport's request; NULL once released */
  uint64_t bytes; /* counted when the message completes */
  int is_send;
  int peer; /* PGS_ANY_SOURCE until a finished receive knows its sender */
  int finished;
  int status; /* outcome once finished */
};

static int post(pgs_comm_t *comm, void *buf, size_t bytes, int peer, int tag,
                void *after, int is_send, pgs_request_t **out) {
  if (out == NULL) return PGS_ERR_INVALID;
  *out = NULL;
  if (comm == NULL || tag < 0) return PGS_ERR_INVALID;
  /* A message to self would need a loop-back no transport promises. */
  const int any = !is_send && peer == PGS_ANY_SOURCE;
  if (!any && (peer < 0 || peer >= comm->size || peer == comm->rank))
    return PGS_ERR_INVALID;
  if (bytes > 0 && buf == NULL) return PGS_ERR_INVALID;
  if (atomic_load(&comm->aborted)) return PGS_ERR_ABORTED;
  if (comm->vt.isend == NULL) return PGS_ERR_UNSUPPORTED;
  if (any && comm->vt.source == NULL) return PGS_ERR_UNSUPPORTED;

  pgs_request_t *req = calloc(1, sizeof(*req));
  if (req == NULL) return PGS_ERR_NO_MEMORY;
  req->comm = comm;
  req->bytes = (uint64_t)bytes;
  req->is_send = is_send;
  req->peer = peer;
  int st = is_send ? comm->vt.isend(comm->impl, buf, bytes, peer, tag, after,
                                    &req->impl)
                   : comm->vt.irecv(comm->impl, buf, bytes, peer, tag, after,
                                    &req->impl);
  if (st != PGS_OK) {
    free(req);
    return atomic_load(&comm->aborted) ? PGS_ERR_ABORTED : st;
  }
  comm->counters.calls++;
  *out = req;
  return PGS_OK;
}

int pgs_comm_isend(pgs_comm_t *comm, const void *buf, size_t bytes, int peer,
                   int tag, void *after, pgs_request_t **out) {
  /* The transport never writes a send buffer; the cast only shares post(). */
  return post(comm, (void *)buf, bytes, peer, tag, after, 1, out);
}

int pgs_comm_irecv(pgs_comm_t *comm, void *buf, size_t bytes, int peer, int tag,
                   void *after, pgs_request_t **out) {
  return post(comm, buf, bytes, peer, tag, after, 0, out);
}

/* Ends @p req with @p status, releasing the transport's request. */
static int finish(pgs_request_t *req, int status) {
  if (status == PGS_OK && req->peer == PGS_ANY_SOURCE)
    req->peer = req->comm->vt.source(req->comm->impl, req->impl);
  if (req->impl != NULL) req->comm->vt.cancel(req->comm->impl, req->impl);
  req->impl = NULL;
  req->finished = 1;
  req->status = status;
  if (status == PGS_OK) {
    pgs_comm_counters_t *c = &req->comm->counters;
    if (req->is_send)
      c->data_sent += req->bytes;
    else
      c->data_recv += req->bytes;
  }
  return status;
}

int pgs_request_test(pgs_request_t *req, int *done) {
  if (req == NULL || done == NULL) return PGS_ERR_INVALID;
  *done = req->finished;
  if (req->finished) return req->status;
  /* An abort withdraws what is still pending: the caller's buffer may go. */
  if (atomic_load(&req->comm->aborted)) {
    *done = 1;
    return finish(req, PGS_ERR_ABORTED);
  }
  int flag = 0;
  int st = req->comm->vt.test(req->comm->impl, req->impl, &flag);
  if (st != PGS_OK) {
    *done = 1;
    return finish(req, atomic_load(&req->comm->aborted) ? PGS_ERR_ABORTED : st);
  }
  if (!flag) return PGS_OK;
  *done = 1;
  return finish(req, PGS_OK);
}

void pgs_request_free(pgs_request_t *req) {
  if (req == NULL) return;
  if (req->impl != NULL) req->comm->vt.cancel(req->comm->impl, req->impl);
  free(req);
}

int pgs_request_source(const pgs_request_t *req) {
  if (req == NULL || !req->finished || req->status != PGS_OK) return -1;
  return req->peer;
}
