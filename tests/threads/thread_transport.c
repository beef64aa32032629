/* The ranks-as-threads transport (see thread_transport.h).
 *
 * Every collective: each rank publishes a pointer to its data, all meet at a
 * barrier, each reads what it needs from the others, and all meet again
 * before anyone returns (so no buffer is reused while a peer reads it). An
 * exchange batch publishes its sends at start; the wait is that same
 * two-barrier meeting, each receive matched with the sender's messages to it
 * in posting order. Reductions combine in rank order: deterministic. */
#define _POSIX_C_SOURCE 200809L /* pthread barriers under -std=c11 */
#include "thread_transport.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <pg_sparse/ops.h>

enum { MAX_RANKS = 64, BOX = 8 };

typedef struct box {
  pgs_msg_t msgs[BOX]; /* sends from one rank to another, in order */
  int count;
} box_t;

struct pgs_thread_world {
  int ranks;
  pthread_barrier_t barrier;
  const void *pub[MAX_RANKS]; /* each rank's published buffer */
  size_t pub_bytes[MAX_RANKS];
  box_t *boxes; /* [slot][src][dst] */
};

typedef struct rank_state {
  pgs_thread_world_t *w;
  int rank;
  pgs_msg_t recvs[PGS_COMM_SLOTS][MAX_RANKS * BOX];
  int nrecvs[PGS_COMM_SLOTS];
} rank_state_t;

static box_t *box_at(pgs_thread_world_t *w, int slot, int src, int dst) {
  return &w->boxes[((size_t)slot * w->ranks + src) * w->ranks + dst];
}

static void meet(pgs_thread_world_t *w) {
  pthread_barrier_wait(&w->barrier);
}

/* Publish, meet: afterwards every rank may read every pub[]. */
static void publish(rank_state_t *s, const void *buf, size_t bytes) {
  s->w->pub[s->rank] = buf;
  s->w->pub_bytes[s->rank] = bytes;
  meet(s->w);
}

static int th_exchange_start(void *impl, const pgs_msg_t *sends, int nsends,
                             const pgs_msg_t *recvs, int nrecvs, int slot) {
  rank_state_t *s = impl;
  if (nrecvs > MAX_RANKS * BOX) return PGS_ERR_UNSUPPORTED;
  for (int i = 0; i < nsends; ++i) {
    box_t *b = box_at(s->w, slot, s->rank, sends[i].peer);
    if (b->count == BOX) return PGS_ERR_UNSUPPORTED;
    b->msgs[b->count++] = sends[i];
  }
  memcpy(s->recvs[slot], recvs, (size_t)nrecvs * sizeof *recvs);
  s->nrecvs[slot] = nrecvs;
  return PGS_OK;
}

static int th_exchange_wait(void *impl, int slot) {
  rank_state_t *s = impl;
  pgs_thread_world_t *w = s->w;
  int taken[MAX_RANKS] = {0}, st = PGS_OK;
  meet(w); /* every rank has posted */
  for (int i = 0; i < s->nrecvs[slot]; ++i) {
    const pgs_msg_t *r = &s->recvs[slot][i];
    box_t *b = box_at(w, slot, r->peer, s->rank);
    if (taken[r->peer] >= b->count) {
      st = PGS_ERR_COMM; /* a receive nobody sent */
      continue;
    }
    const pgs_msg_t *m = &b->msgs[taken[r->peer]++];
    if (m->bytes != r->bytes) st = PGS_ERR_COMM;
    memcpy(r->buf, m->buf, m->bytes < r->bytes ? m->bytes : r->bytes);
  }
  meet(w); /* every rank has read its messages */
  for (int d = 0; d < w->ranks; ++d) box_at(w, slot, s->rank, d)->count = 0;
  s->nrecvs[slot] = 0;
  return st;
}

static int th_allgatherv(void *impl, const void *send, size_t send_bytes,
                         void *recv, const size_t *recv_bytes,
                         const size_t *displs) {
  rank_state_t *s = impl;
  publish(s, send, send_bytes);
  for (int r = 0; r < s->w->ranks; ++r)
    if (r != s->rank || (char *)recv + displs[r] != send)
      memmove((char *)recv + displs[r], s->w->pub[r], recv_bytes[r]);
  meet(s->w);
  return PGS_OK;
}

/* One element of every rank combined in rank order into acc (fp32 or f64
 * or int64 arithmetic as the type asks; 16-bit through fp32, rounded once).
 */
static void combine(rank_state_t *s, pgs_dtype_t dt, pgs_redop_t op, size_t i,
                    void *out) {
  const pgs_ops_t *cpu = pgs_ops_cpu();
  const int P = s->w->ranks;
  double acc = 0.0;
  int64_t iacc = 0;
  for (int r = 0; r < P; ++r) {
    const char *p = s->w->pub[r];
    double v = 0.0;
    int64_t iv = 0;
    if (dt == PGS_INT64) {
      memcpy(&iv, p + i * 8, 8);
    } else if (dt == PGS_FLOAT64) {
      memcpy(&v, p + i * 8, 8);
    } else if (dt == PGS_FLOAT32) {
      float f;
      memcpy(&f, p + i * 4, 4);
      v = f;
    } else {
      float f;
      cpu->from_wire(cpu, p + i * 2, 1, dt, &f);
      v = f;
    }
    if (r == 0) {
      acc = v, iacc = iv;
    } else if (op == PGS_SUM) {
      acc = dt == PGS_FLOAT64 ? acc + v : (double)((float)acc + (float)v);
      iacc += iv;
    } else if (op == PGS_MAX) {
      acc = v > acc ? v : acc, iacc = iv > iacc ? iv : iacc;
    } else {
      acc = v < acc ? v : acc, iacc = iv < iacc ? iv : iacc;
    }
  }
  if (dt == PGS_INT64) {
    memcpy(out, &iacc, 8);
  } else if (dt == PGS_FLOAT64) {
    memcpy(out, &acc, 8);
  } else {
    float f = (float)acc;
    if (dt == PGS_FLOAT32)
      memcpy(out, &f, 4);
    else
      cpu->to_wire(cpu, &f, 1, dt, out, NULL);
  }
}

static int th_allreduce(void *impl, void *buf, size_t count, pgs_dtype_t dt,
                        pgs_redop_t op) {
  rank_state_t *s = impl;
  const size_t es = pgs_dtype_size(dt);
  if (es == 0 || (op != PGS_SUM && op != PGS_MAX && op != PGS_MIN))
    return PGS_ERR_UNSUPPORTED; /* before any meeting: every rank alike */
  char *tmp = malloc(count * es + 1);
  int st = tmp == NULL ? PGS_ERR_NO_MEMORY : PGS_OK;
  publish(s, buf, count * es);
  if (st == PGS_OK)
    for (size_t i = 0; i < count; ++i) combine(s, dt, op, i, tmp + i * es);
  meet(s->w); /* nobody writes buf while a peer reads it */
  if (st == PGS_OK) memcpy(buf, tmp, count * es);
  free(tmp);
  return st;
}

static int th_bcast(void *impl, void *buf, size_t bytes, int root) {
  rank_state_t *s = impl;
  publish(s, buf, bytes);
  if (s->rank != root) memcpy(buf, s->w->pub[root], bytes);
  meet(s->w);
  return PGS_OK;
}

static int th_alltoall_host(void *impl, const int64_t *send, int64_t *recv) {
  rank_state_t *s = impl;
  publish(s, send, 0);
  for (int r = 0; r < s->w->ranks; ++r)
    recv[r] = ((const int64_t *)s->w->pub[r])[s->rank];
  meet(s->w);
  return PGS_OK;
}

static int th_allgather_host(void *impl, const int64_t *send, size_t count,
                             int64_t *recv) {
  rank_state_t *s = impl;
  publish(s, send, count * 8);
  for (int r = 0; r < s->w->ranks; ++r)
    memcpy(recv + (size_t)r * count, s->w->pub[r], count * 8);
  meet(s->w);
  return PGS_OK;
}

static int th_barrier(void *impl) {
  rank_state_t *s = impl;
  meet(s->w);
  return PGS_OK;
}

static void th_destroy(void *impl) {
  free(impl);
}

static const pgs_comm_vtable_t th_vtable = {
    .exchange_start = th_exchange_start,
    .exchange_wait = th_exchange_wait,
    .allgatherv = th_allgatherv,
    .allreduce = th_allreduce,
    .bcast = th_bcast,
    .allreduce_host = th_allreduce,
    .alltoall_host = th_alltoall_host,
    .allgather_host = th_allgather_host,
    .barrier = th_barrier,
    .destroy = th_destroy,
};

int pgs_thread_world_create(int ranks, pgs_thread_world_t **out) {
  if (ranks < 1 || ranks > MAX_RANKS || out == NULL) return PGS_ERR_INVALID;
  pgs_thread_world_t *w = calloc(1, sizeof *w);
  if (w == NULL) return PGS_ERR_NO_MEMORY;
  w->ranks = ranks;
  w->boxes = calloc((size_t)PGS_COMM_SLOTS * ranks * ranks, sizeof(box_t));
  if (w->boxes == NULL ||
      pthread_barrier_init(&w->barrier, NULL, (unsigned)ranks) != 0) {
    free(w->boxes);
    free(w);
    return PGS_ERR_NO_MEMORY;
  }
  *out = w;
  return PGS_OK;
}

void pgs_thread_world_destroy(pgs_thread_world_t *w) {
  if (w == NULL) return;
  pthread_barrier_destroy(&w->barrier);
  free(w->boxes);
  free(w);
}

int pgs_thread_comm_create(pgs_thread_world_t *w, int rank, pgs_comm_t **out) {
  if (w == NULL || rank < 0 || rank >= w->ranks) return PGS_ERR_INVALID;
  rank_state_t *s = calloc(1, sizeof *s);
  if (s == NULL) return PGS_ERR_NO_MEMORY;
  s->w = w;
  s->rank = rank;
  return pgs_comm_create(&th_vtable, s, rank, w->ranks, PGS_MEM_HOST, out);
}
