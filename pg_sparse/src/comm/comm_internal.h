/* Internal layout of a communicator: the vtable a transport filled in, its
 * state, and what the counting wrappers in comm.c keep. Transports never see
 * this struct; they build a communicator through pgs_comm_create(). */
#ifndef PG_SPARSE_COMM_INTERNAL_H
#define PG_SPARSE_COMM_INTERNAL_H

#include <pg_sparse/comm.h>

#include <stdatomic.h>

struct pgs_comm {
  /* A copy, so the caller's table may be a stack object or freed after
   * pgs_comm_create() returns. */
  pgs_comm_vtable_t vt;
  void *impl; /* owned: vt.destroy(impl) runs in pgs_comm_destroy() */
  int rank;
  int size;
  pgs_mem_t mem;
  pgs_comm_counters_t counters;
  /* Whether an exchange batch is in flight in each slot. Kept here rather
   * than in each transport so that a second start on a busy slot (which
   * would overwrite the transport's requests) and a wait on an idle slot are
   * rejected the same way over every transport. */
  unsigned char slot_busy[PGS_COMM_SLOTS];
  /* Set by pgs_comm_abort() from any thread; every wrapper checks it. */
  atomic_int aborted;
};

#endif /* PG_SPARSE_COMM_INTERNAL_H */
