/* The NCCL point-to-point transport: the user's send/recv of CUDA tensors.
 *
 * Each peer and direction is a channel with a two-rank NCCL communicator of
 * its own (nccl_pair.h says why one-way and non-blocking), created on the
 * first message from an id the sender puts in the caller's key-value store.
 * isend/irecv only queue; test() moves the request's channel as far as NCCL
 * lets it without waiting: join the pair, post the oldest queued message on
 * the pair's stream once NCCL is done with the previous call, and report a
 * message done once its event on that stream has fired. As with
 * ProcessGroupNCCL, tags are not matched: the messages of one direction
 * between two ranks arrive in the order they were posted.
 *
 * A request withdrawn while NCCL holds it (posting or on the stream) aborts
 * its channel's communicator, which is the only way to free a stream waiting
 * for a peer that will not come; every later message of that channel fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_check.h"
#include "nccl_pair.h"

enum { OP_QUEUED, OP_POSTING, OP_RUNNING };

typedef struct p2p_chan p2p_chan_t;

typedef struct p2p_op {
  struct p2p_op *next; /* in the channel's queue while OP_QUEUED */
  p2p_chan_t *ch;
  void *buf;
  size_t bytes;
  cudaEvent_t after; /* the caller's; only used while queued */
  cudaEvent_t done;  /* recorded after the message on the pair's stream */
  int state;
} p2p_op_t;

struct p2p_chan {
  int peer;
  int is_send;
  pgs_nccl_pair_t *pair;
  int busy;          /* NCCL still works on the join or the last post */
  p2p_op_t *posting; /* the message of that post */
  p2p_op_t *head, *tail;
  int broken; /* a status once the channel failed for good */
  /* The receiver polls the store for the id with a growing pause. */
  double next_check, backoff;
};

typedef struct nccl_p2p {
  pgs_kv_t kv;
  int rank;
  int size;
  int device;
  p2p_chan_t *chans; /* 2 * size: [peer * 2 + is_send] */
} nccl_p2p_t;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The channel fails for good: its communicator is aborted (a message on
 * the stream may wait for a peer that is gone) and nothing is posted. */
static void chan_break(p2p_chan_t *ch, int status) {
  if (!ch->broken) ch->broken = status;
  pgs_nccl_pair_destroy(ch->pair);
  ch->pair = NULL;
  ch->busy = 0;
  if (ch->posting != NULL) ch->posting->state = OP_RUNNING;
  ch->posting = NULL;
}

/* The sender makes the pair's id and publishes it; the receiver joins once
 * it is there. Returns PGS_OK also while still waiting for the id. */
static int chan_join(nccl_p2p_t *p, p2p_chan_t *ch) {
  const int src = ch->is_send ? p->rank : ch->peer;
  const int dst = ch->is_send ? ch->peer : p->rank;
  char key[64];
  snprintf(key, sizeof(key), "pg_sparse_p2p_%d_%d", src, dst);
  unsigned char id[PGS_NCCL_ID_BYTES];
  int st = PGS_OK;
  if (ch->is_send) {
    st = pgs_nccl_make_id(id);
    if (st == PGS_OK) st = p->kv.put(p->kv.ctx, key, id, sizeof(id));
  } else {
    const double t = now_s();
    if (t < ch->next_check) return PGS_OK;
    int found = 0;
    st = p->kv.get(p->kv.ctx, key, id, sizeof(id), &found);
    if (st == PGS_OK && !found) {
      ch->backoff = ch->backoff < 5e-5 ? 5e-5 : ch->backoff * 2;
      if (ch->backoff > 1e-2) ch->backoff = 1e-2;
      ch->next_check = t + ch->backoff;
      return PGS_OK;
    }
  }
  if (st == PGS_OK) st = pgs_nccl_pair_create(id, ch->is_send, &ch->pair);
  if (st != PGS_OK) return st;
  ch->busy = 1;
  return PGS_OK;
}

/* NCCL is done with the host side of its last call: the message it posted
 * is on the stream, and the oldest queued one goes next. */
static int chan_step(nccl_p2p_t *p, p2p_chan_t *ch) {
  if (ch->pair == NULL) {
    int st = ch->head != NULL ? chan_join(p, ch) : PGS_OK;
    if (st != PGS_OK || ch->pair == NULL) return st;
  }
  for (;;) {
    if (ch->busy) {
      int busy = 0;
      int st = pgs_nccl_pair_test(ch->pair, &busy);
      if (st != PGS_OK) return st;
      if (busy) return PGS_OK;
      ch->busy = 0;
      if (ch->posting != NULL) {
        CUDA_TRY(
            cudaEventRecord(ch->posting->done, pgs_nccl_pair_stream(ch->pair)));
        ch->posting->state = OP_RUNNING;
        ch->posting = NULL;
      }
    }
    p2p_op_t *op = ch->head;
    if (op == NULL) return PGS_OK;
    ch->head = op->next;
    if (ch->head == NULL) ch->tail = NULL;
    op->next = NULL;
    op->state = OP_POSTING;
    ch->posting = op;
    ch->busy = 1;
    int st = pgs_nccl_pair_post(ch->pair, op->buf, op->bytes, op->after);
    if (st != PGS_OK) return st;
  }
}

static int post(void *impl, void *buf, size_t bytes, int peer, int is_send,
                void *after, void **req) {
  nccl_p2p_t *p = impl;
  p2p_chan_t *ch = &p->chans[peer * 2 + is_send];
  if (ch->broken) return ch->broken;
  /* NCCL needs an event to order after; a caller with none has its data
   * ready already (the stream wait then returns at once). */
  if (after == NULL) return PGS_ERR_INVALID;
  p2p_op_t *op = calloc(1, sizeof(*op));
  if (op == NULL) return PGS_ERR_NO_MEMORY;
  pgs_dev_scope_t scope;
  int st = pgs_dev_enter(p->device, &scope);
  if (st != PGS_OK) {
    free(op);
    return st;
  }
  if (cudaEventCreateWithFlags(&op->done, cudaEventDisableTiming) !=
      cudaSuccess) {
    pgs_dev_leave(&scope);
    free(op);
    return PGS_ERR_DEVICE;
  }
  pgs_dev_leave(&scope);
  op->ch = ch;
  op->buf = buf;
  op->bytes = bytes;
  op->after = (cudaEvent_t)after;
  op->state = OP_QUEUED;
  if (ch->tail != NULL)
    ch->tail->next = op;
  else
    ch->head = op;
  ch->tail = op;
  *req = op;
  return PGS_OK;
}

static int p2p_isend(void *impl, const void *buf, size_t bytes, int peer,
                     int tag, void *after, void **req) {
  (void)tag; /* NCCL matches by order, not tags */
  return post(impl, (void *)buf, bytes, peer, 1, after, req);
}

static int p2p_irecv(void *impl, void *buf, size_t bytes, int peer, int tag,
                     void *after, void **req) {
  (void)tag;
  return post(impl, buf, bytes, peer, 0, after, req);
}

static int p2p_test(void *impl, void *req, int *done) {
  nccl_p2p_t *p = impl;
  p2p_op_t *op = req;
  p2p_chan_t *ch = op->ch;
  *done = 0;
  if (ch->broken) return ch->broken;
  pgs_dev_scope_t scope;
  int st = pgs_dev_enter(p->device, &scope);
  if (st != PGS_OK) return st;
  st = chan_step(p, ch);
  if (st != PGS_OK) {
    chan_break(ch, st);
  } else if (op->state == OP_RUNNING) {
    cudaError_t e = cudaEventQuery(op->done);
    if (e == cudaSuccess)
      *done = 1;
    else if (e != cudaErrorNotReady)
      st = PGS_ERR_DEVICE;
  }
  pgs_dev_leave(&scope);
  return st;
}

/* A queued message just leaves the queue; one NCCL holds (and not known
 * finished) takes the channel down with it. */
static void p2p_cancel(void *impl, void *req) {
  nccl_p2p_t *p = impl;
  p2p_op_t *op = req;
  p2p_chan_t *ch = op->ch;
  pgs_dev_scope_t scope;
  const int entered = pgs_dev_enter(p->device, &scope) == PGS_OK;
  if (op->state == OP_QUEUED) {
    p2p_op_t **at = &ch->head;
    while (*at != op) at = &(*at)->next;
    *at = op->next;
    if (ch->tail == op) {
      ch->tail = NULL;
      for (p2p_op_t *o = ch->head; o != NULL; o = o->next) ch->tail = o;
    }
  } else if (op->state == OP_POSTING ||
             (ch->pair != NULL && cudaEventQuery(op->done) != cudaSuccess)) {
    chan_break(ch, PGS_ERR_ABORTED);
  }
  (void)cudaEventDestroy(op->done);
  if (entered) pgs_dev_leave(&scope);
  free(op);
}

static void p2p_destroy(void *impl) {
  nccl_p2p_t *p = impl;
  if (p == NULL) return;
  pgs_dev_scope_t scope;
  const int entered = pgs_dev_enter(p->device, &scope) == PGS_OK;
  for (int i = 0; p->chans != NULL && i < 2 * p->size; ++i)
    pgs_nccl_pair_destroy(p->chans[i].pair);
  if (entered) pgs_dev_leave(&scope);
  free(p->chans);
  free(p);
}

static const pgs_comm_vtable_t p2p_vtable = {
    .destroy = p2p_destroy,
    .isend = p2p_isend,
    .irecv = p2p_irecv,
    .test = p2p_test,
    .cancel = p2p_cancel,
};

int pgs_comm_nccl_p2p_create(const pgs_kv_t *kv, int rank, int size, int device,
                             pgs_comm_t **out) {
  if (out == NULL) return PGS_ERR_INVALID;
  *out = NULL;
  if (kv == NULL || kv->put == NULL || kv->get == NULL || size < 1 ||
      rank < 0 || rank >= size || device < 0)
    return PGS_ERR_INVALID;
  nccl_p2p_t *p = calloc(1, sizeof(*p));
  if (p == NULL) return PGS_ERR_NO_MEMORY;
  p->kv = *kv;
  p->rank = rank;
  p->size = size;
  p->device = device;
  p->chans = calloc(2 * (size_t)size, sizeof(*p->chans));
  if (p->chans == NULL) {
    free(p);
    return PGS_ERR_NO_MEMORY;
  }
  for (int i = 0; i < 2 * size; ++i) {
    p->chans[i].peer = i / 2;
    p->chans[i].is_send = i % 2;
  }
  return pgs_comm_create(&p2p_vtable, p, rank, size, PGS_MEM_DEVICE, out);
}
