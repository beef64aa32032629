/* The Open MPI transport's point-to-point entries: each user message is one
 * MPI request with the user's tag, on the transport's duplicate. The torch
 * shim gives the user's messages a communicator of their own, so they never
 * meet the exchanges' tag. */
#include <sched.h>
#include <stdlib.h>

#include "comm/mpi_internal.h"

typedef struct pgs_mpi_req {
  MPI_Request req;
  int is_recv;
  int source; /* the sender, once a receive has finished */
} pgs_mpi_req_t;

/* Whether @p tag is one MPI accepts (the standard only promises 32767). */
static int pgs_mpi_tag_ok(MPI_Comm comm, int tag) {
  int *tag_ub = NULL, has_ub = 0;
  if (MPI_Comm_get_attr(comm, MPI_TAG_UB, &tag_ub, &has_ub) != MPI_SUCCESS)
    return 0;
  return !has_ub || tag <= *tag_ub;
}

static int pgs_mpi_p2p(pgs_mpi_t *m, void *buf, size_t bytes, int peer, int tag,
                       int is_recv, void **out) {
  if (!pgs_mpi_tag_ok(m->comm, tag)) return PGS_ERR_INVALID;
  int status = PGS_OK;
  pgs_mpi_req_t *r = malloc(sizeof(*r));
  if (r == NULL) return PGS_ERR_NO_MEMORY;
  r->req = MPI_REQUEST_NULL;
  r->is_recv = is_recv;
  r->source = peer;
  if (peer == PGS_ANY_SOURCE) peer = MPI_ANY_SOURCE;
  int count = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  status = pgs_mpi_bytes_type(bytes, &count, &type);
  if (status != PGS_OK) goto fail;
  if (is_recv)
    PGS_MPI_CHECK_GOTO(MPI_Irecv(buf, count, type, peer, tag, m->comm, &r->req),
                       status, fail_type);
  else
    PGS_MPI_CHECK_GOTO(MPI_Isend(buf, count, type, peer, tag, m->comm, &r->req),
                       status, fail_type);
  pgs_mpi_free_type(&type);
  *out = r;
  return PGS_OK;

fail_type:
  pgs_mpi_free_type(&type);
fail:
  free(r);
  return status;
}

int pgs_mpi_isend(void *impl, const void *buf, size_t bytes, int peer, int tag,
                  void *after, void **req) {
  (void)after; /* host memory: nothing to wait for */
  return pgs_mpi_p2p(impl, (void *)buf, bytes, peer, tag, 0, req);
}

int pgs_mpi_irecv(void *impl, void *buf, size_t bytes, int peer, int tag,
                  void *after, void **req) {
  (void)after;
  return pgs_mpi_p2p(impl, buf, bytes, peer, tag, 1, req);
}

int pgs_mpi_test(void *impl, void *req, int *done) {
  (void)impl;
  pgs_mpi_req_t *r = req;
  int status = PGS_OK;
  MPI_Status st;
  PGS_MPI_CHECK_GOTO(MPI_Test(&r->req, done, &st), status, out);
  if (*done && r->is_recv) r->source = st.MPI_SOURCE;
out:
  return status;
}

int pgs_mpi_source(void *impl, void *req) {
  (void)impl;
  return ((const pgs_mpi_req_t *)req)->source;
}

/* A finished request is MPI_REQUEST_NULL already. A pending receive is
 * cancelled so MPI stops writing into the caller's buffer; a pending send is
 * released to complete on its own (Open MPI cannot cancel sends). */
void pgs_mpi_cancel(void *impl, void *req) {
  const pgs_mpi_t *m = impl;
  pgs_mpi_req_t *r = req;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && r->req != MPI_REQUEST_NULL && r->is_recv) {
    (void)MPI_Cancel(&r->req);
    /* Polled a bounded number of times (PG_SPARSE_MPI_CANCEL_POLLS) before
     * letting go: a receive already matched to a message in flight cannot
     * be cancelled, and a dead sender would make MPI_Wait block for ever. */
    int done = 0;
    for (int i = 0; i < m->cancel_polls && !done; ++i) {
      if (MPI_Test(&r->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
      if (!done) sched_yield();
    }
  }
  if (!finalized && r->req != MPI_REQUEST_NULL) (void)MPI_Request_free(&r->req);
  free(r);
}
