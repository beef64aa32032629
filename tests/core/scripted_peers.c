/* The scripted-peers transport (see scripted_peers.h). */
#include "scripted_peers.h"

#include <string.h>

/* Fill @p dst from the input; zeros once it runs out. */
static void take(pgs_scripted_peers_t *p, void *dst, size_t bytes) {
  size_t left = p->size - p->pos, n = bytes < left ? bytes : left;
  if (n > 0) memcpy(dst, p->data + p->pos, n);
  if (bytes > n) memset((char *)dst + n, 0, bytes - n);
  p->pos += n;
}

static int sp_exchange_start(void *impl, const pgs_msg_t *sends, int nsends,
                             const pgs_msg_t *recvs, int nrecvs, int slot) {
  (void)sends, (void)nsends, (void)slot;
  for (int i = 0; i < nrecvs; ++i) take(impl, recvs[i].buf, recvs[i].bytes);
  return PGS_OK;
}

static int sp_exchange_wait(void *impl, int slot) {
  (void)impl, (void)slot;
  return PGS_OK;
}

static int sp_allgatherv(void *impl, const void *send, size_t send_bytes,
                         void *recv, const size_t *recv_bytes,
                         const size_t *displs) {
  pgs_scripted_peers_t *p = impl;
  for (int r = 0; r < p->ranks; ++r) {
    char *at = (char *)recv + displs[r];
    if (r == p->rank)
      memmove(at, send, send_bytes);
    else
      take(p, at, recv_bytes[r]);
  }
  return PGS_OK;
}

/* Reductions: every peer agrees (the sum of one), so the settings check
 * passes and the data path is what gets fuzzed. */
static int sp_allreduce(void *impl, void *buf, size_t count, pgs_dtype_t dt,
                        pgs_redop_t op) {
  (void)impl, (void)buf, (void)count, (void)dt, (void)op;
  return PGS_OK;
}

static int sp_bcast(void *impl, void *buf, size_t bytes, int root) {
  pgs_scripted_peers_t *p = impl;
  if (root != p->rank) take(p, buf, bytes);
  return PGS_OK;
}

static int sp_alltoall_host(void *impl, const int64_t *send, int64_t *recv) {
  pgs_scripted_peers_t *p = impl;
  for (int r = 0; r < p->ranks; ++r)
    if (r == p->rank)
      recv[r] = send[r];
    else
      take(p, &recv[r], sizeof recv[r]);
  return PGS_OK;
}

static int sp_allgather_host(void *impl, const int64_t *send, size_t count,
                             int64_t *recv) {
  pgs_scripted_peers_t *p = impl;
  for (int r = 0; r < p->ranks; ++r)
    if (r == p->rank)
      memcpy(recv + (size_t)r * count, send, count * sizeof *send);
    else
      take(p, recv + (size_t)r * count, count * sizeof *send);
  return PGS_OK;
}

static int sp_barrier(void *impl) {
  (void)impl;
  return PGS_OK;
}

static const pgs_comm_vtable_t sp_vtable = {
    .exchange_start = sp_exchange_start,
    .exchange_wait = sp_exchange_wait,
    .allgatherv = sp_allgatherv,
    .allreduce = sp_allreduce,
    .bcast = sp_bcast,
    .allreduce_host = sp_allreduce,
    .alltoall_host = sp_alltoall_host,
    .allgather_host = sp_allgather_host,
    .barrier = sp_barrier,
    .destroy = NULL,
};

int pgs_scripted_peers_comm(pgs_scripted_peers_t *p, pgs_comm_t **out) {
  return pgs_comm_create(&sp_vtable, p, p->rank, p->ranks, PGS_MEM_HOST, out);
}
