// Point-to-point requests: the wrappers over a scripted vtable (no network),
// and the Open MPI transport's isend/irecv/test/cancel between real ranks.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "comm_test_util.h"

namespace {
using namespace comm_test;

// ---- wrappers over a scripted point-to-point transport --------------------

// Requests finish when the test says so; every call is recorded.
struct P2pStub {
  int posted = 0, tested = 0, cancelled = 0, destroyed = 0;
  int post_result = PGS_OK;
  int test_result = PGS_OK;
  bool finish = false;  // what test() reports as done
  int last_tag = -1, last_peer = -1;
  void *last_after = nullptr;
  int token = 0;  // the requests point here
};

P2pStub *stub_of(void *impl) {
  return static_cast<P2pStub *>(impl);
}

int p2p_post(void *impl, int peer, int tag, void *after, void **req) {
  P2pStub *s = stub_of(impl);
  ++s->posted;
  s->last_peer = peer;
  s->last_tag = tag;
  s->last_after = after;
  if (s->post_result != PGS_OK) return s->post_result;
  *req = &s->token;
  return PGS_OK;
}

int p2p_isend(void *impl, const void *, size_t, int peer, int tag, void *after,
              void **req) {
  return p2p_post(impl, peer, tag, after, req);
}

int p2p_irecv(void *impl, void *, size_t, int peer, int tag, void *after,
              void **req) {
  return p2p_post(impl, peer, tag, after, req);
}

int p2p_test(void *impl, void *req, int *done) {
  P2pStub *s = stub_of(impl);
  EXPECT_EQ(req, &s->token);
  ++s->tested;
  *done = s->finish;
  return s->test_result;
}

void p2p_cancel(void *impl, void *req) {
  P2pStub *s = stub_of(impl);
  EXPECT_EQ(req, &s->token);
  ++s->cancelled;
}

void p2p_destroy(void *impl) {
  ++stub_of(impl)->destroyed;
}

pgs_comm_vtable_t p2p_only_vtable() {
  pgs_comm_vtable_t vt{};
  vt.destroy = p2p_destroy;
  vt.isend = p2p_isend;
  vt.irecv = p2p_irecv;
  vt.test = p2p_test;
  vt.cancel = p2p_cancel;
  return vt;
}

struct P2pComm {
  P2pStub stub;
  pgs_comm_t *comm = nullptr;
  explicit P2pComm(int rank = 0, int size = 3) {
    const pgs_comm_vtable_t vt = p2p_only_vtable();
    EXPECT_EQ(pgs_comm_create(&vt, &stub, rank, size, PGS_MEM_HOST, &comm),
              PGS_OK);
  }
  ~P2pComm() { pgs_comm_destroy(comm); }
};

TEST(CommP2p, VtableIsAllOrNonePerPlane) {
  // A point-to-point plane missing one of its four entries is refused.
  for (int i = 0; i < 4; ++i) {
    P2pStub s;
    pgs_comm_vtable_t vt = p2p_only_vtable();
    if (i == 0) vt.isend = nullptr;
    if (i == 1) vt.irecv = nullptr;
    if (i == 2) vt.test = nullptr;
    if (i == 3) vt.cancel = nullptr;
    pgs_comm_t *c = nullptr;
    EXPECT_EQ(pgs_comm_create(&vt, &s, 0, 2, PGS_MEM_HOST, &c), PGS_ERR_INVALID)
        << "entry " << i;
    EXPECT_EQ(s.destroyed, 1);
  }
  // Neither plane: nothing to talk with.
  pgs_comm_vtable_t none{};
  none.destroy = p2p_destroy;
  P2pStub s;
  pgs_comm_t *c = nullptr;
  EXPECT_EQ(pgs_comm_create(&none, &s, 0, 2, PGS_MEM_HOST, &c),
            PGS_ERR_INVALID);
  // Both planes together are fine.
  Stub coll;
  pgs_comm_vtable_t both = stub_vtable();
  both.isend = p2p_isend;
  both.irecv = p2p_irecv;
  both.test = p2p_test;
  both.cancel = p2p_cancel;
  ASSERT_EQ(pgs_comm_create(&both, &coll, 0, 2, PGS_MEM_HOST, &c), PGS_OK);
  pgs_comm_destroy(c);
}

TEST(CommP2p, PointToPointTransportHasNoCollectives) {
  P2pComm p;
  int64_t v = 1, out[3];
  EXPECT_EQ(pgs_comm_barrier(p.comm), PGS_ERR_UNSUPPORTED);
  EXPECT_EQ(pgs_comm_allreduce(p.comm, &v, 1, PGS_INT64, PGS_SUM),
            PGS_ERR_UNSUPPORTED);
  EXPECT_EQ(pgs_comm_allgather_host(p.comm, &v, 1, out), PGS_ERR_UNSUPPORTED);
  EXPECT_EQ(pgs_comm_exchange_start(p.comm, nullptr, 0, nullptr, 0, 0),
            PGS_ERR_UNSUPPORTED);
}

TEST(CommP2p, CollectiveTransportWithoutPointToPointSaysUnsupported) {
  Stub s;
  pgs_comm_t *c = nullptr;
  const pgs_comm_vtable_t vt = stub_vtable();
  ASSERT_EQ(pgs_comm_create(&vt, &s, 0, 2, PGS_MEM_HOST, &c), PGS_OK);
  float x = 0;
  pgs_request_t *r = reinterpret_cast<pgs_request_t *>(&s);
  EXPECT_EQ(pgs_comm_isend(c, &x, 4, 1, 0, nullptr, &r), PGS_ERR_UNSUPPORTED);
  EXPECT_EQ(r, nullptr);
  pgs_comm_destroy(c);
}

TEST(CommP2p, AnySourceNeedsTheTransportsSourceEntry) {
  P2pComm p;
  float x = 0;
  pgs_request_t *r = nullptr;
  EXPECT_EQ(pgs_comm_irecv(p.comm, &x, 4, PGS_ANY_SOURCE, 0, nullptr, &r),
            PGS_ERR_UNSUPPORTED);
  EXPECT_EQ(pgs_comm_isend(p.comm, &x, 4, PGS_ANY_SOURCE, 0, nullptr, &r),
            PGS_ERR_INVALID);  // a send names its peer
  EXPECT_EQ(p.stub.posted, 0);
}

TEST(CommP2p, RejectsBadArgumentsBeforeTheTransport) {
  P2pComm p(1, 3);
  float x[4] = {};
  pgs_request_t *r = nullptr;
  EXPECT_EQ(pgs_comm_isend(p.comm, x, 16, 1, 0, nullptr, &r),
            PGS_ERR_INVALID);  // self
  EXPECT_EQ(pgs_comm_isend(p.comm, x, 16, 3, 0, nullptr, &r), PGS_ERR_INVALID);
  EXPECT_EQ(pgs_comm_irecv(p.comm, x, 16, -2, 0, nullptr, &r), PGS_ERR_INVALID);
  EXPECT_EQ(pgs_comm_irecv(p.comm, x, 16, 0, -5, nullptr, &r), PGS_ERR_INVALID);
  EXPECT_EQ(pgs_comm_irecv(p.comm, nullptr, 16, 0, 0, nullptr, &r),
            PGS_ERR_INVALID);
  EXPECT_EQ(pgs_comm_irecv(p.comm, x, 16, 0, 0, nullptr, nullptr),
            PGS_ERR_INVALID);
  EXPECT_EQ(pgs_comm_isend(nullptr, x, 16, 0, 0, nullptr, &r), PGS_ERR_INVALID);
  EXPECT_EQ(p.stub.posted, 0);
  // A zero-byte message with no buffer is a message all the same.
  ASSERT_EQ(pgs_comm_isend(p.comm, nullptr, 0, 2, 9, nullptr, &r), PGS_OK);
  EXPECT_EQ(p.stub.posted, 1);
  pgs_request_free(r);
}

TEST(CommP2p, CountsTheBytesOnceTheMessageIsDone) {
  P2pComm p;
  float x[10] = {};
  int marker = 0;
  pgs_request_t *s = nullptr, *r = nullptr;
  ASSERT_EQ(pgs_comm_isend(p.comm, x, 40, 1, 7, &marker, &s), PGS_OK);
  EXPECT_EQ(p.stub.last_tag, 7);
  EXPECT_EQ(p.stub.last_peer, 1);
  EXPECT_EQ(p.stub.last_after, &marker);  // handed through as it is
  ASSERT_EQ(pgs_comm_irecv(p.comm, x, 24, 2, 3, nullptr, &r), PGS_OK);
  int done = 1;
  EXPECT_EQ(pgs_request_test(s, &done), PGS_OK);
  EXPECT_EQ(done, 0);
  EXPECT_EQ(counters_of(p.comm).data_sent, 0u);
  p.stub.finish = true;
  ASSERT_EQ(pgs_request_test(s, &done), PGS_OK);
  EXPECT_EQ(done, 1);
  ASSERT_EQ(pgs_request_test(r, &done), PGS_OK);
  EXPECT_EQ(done, 1);
  const pgs_comm_counters_t k = counters_of(p.comm);
  EXPECT_EQ(k.data_sent, 40u);
  EXPECT_EQ(k.data_recv, 24u);
  EXPECT_EQ(k.calls, 2u);
  // Released by the test that finished them; testing again asks no one.
  EXPECT_EQ(p.stub.cancelled, 2);
  const int tested = p.stub.tested;
  EXPECT_EQ(pgs_request_test(s, &done), PGS_OK);
  EXPECT_EQ(done, 1);
  EXPECT_EQ(p.stub.tested, tested);
  EXPECT_EQ(counters_of(p.comm).data_sent, 40u);
  pgs_request_free(s);
  pgs_request_free(r);
  EXPECT_EQ(p.stub.cancelled, 2);
}

TEST(CommP2p, AFailureIsKeptAndCountsNothing) {
  P2pComm p;
  float x = 0;
  pgs_request_t *r = nullptr;
  ASSERT_EQ(pgs_comm_irecv(p.comm, &x, 4, 1, 0, nullptr, &r), PGS_OK);
  p.stub.test_result = PGS_ERR_COMM;
  int done = 0;
  EXPECT_EQ(pgs_request_test(r, &done), PGS_ERR_COMM);
  EXPECT_EQ(done, 1);
  EXPECT_EQ(p.stub.cancelled, 1);
  p.stub.test_result = PGS_OK;
  EXPECT_EQ(pgs_request_test(r, &done), PGS_ERR_COMM);
  EXPECT_EQ(counters_of(p.comm).data_recv, 0u);
  pgs_request_free(r);
  // A post the transport refuses returns its status and no request.
  p.stub.post_result = PGS_ERR_NO_MEMORY;
  r = reinterpret_cast<pgs_request_t *>(&p);
  EXPECT_EQ(pgs_comm_isend(p.comm, &x, 4, 1, 0, nullptr, &r),
            PGS_ERR_NO_MEMORY);
  EXPECT_EQ(r, nullptr);
}

TEST(CommP2p, FreeWithdrawsAnUnfinishedRequest) {
  P2pComm p;
  float x = 0;
  pgs_request_t *r = nullptr;
  ASSERT_EQ(pgs_comm_irecv(p.comm, &x, 4, 1, 0, nullptr, &r), PGS_OK);
  pgs_request_free(r);
  EXPECT_EQ(p.stub.cancelled, 1);
  EXPECT_EQ(counters_of(p.comm).data_recv, 0u);
  pgs_request_free(nullptr);
}

TEST(CommP2p, AbortWithdrawsPendingRequestsAndRefusesNewOnes) {
  P2pComm p;
  float x = 0;
  pgs_request_t *r = nullptr;
  ASSERT_EQ(pgs_comm_irecv(p.comm, &x, 4, 1, 0, nullptr, &r), PGS_OK);
  // No abort entry: a point-to-point transport never waits in a call.
  EXPECT_EQ(pgs_comm_abort(p.comm), PGS_OK);
  int done = 0;
  EXPECT_EQ(pgs_request_test(r, &done), PGS_ERR_ABORTED);
  EXPECT_EQ(done, 1);
  EXPECT_EQ(p.stub.cancelled, 1);  // withdrawn: the buffer may go
  EXPECT_EQ(p.stub.tested, 0);     // without asking the transport
  pgs_request_t *r2 = nullptr;
  EXPECT_EQ(pgs_comm_isend(p.comm, &x, 4, 1, 0, nullptr, &r2), PGS_ERR_ABORTED);
  EXPECT_EQ(r2, nullptr);
  pgs_request_free(r);
  EXPECT_EQ(p.stub.cancelled, 1);
}

// ---- Open MPI: real messages between the ranks ----------------------------

// Tests until every request is done, with a bound (a failure, not a hang).
int wait_all(std::vector<pgs_request_t *> &reqs) {
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (size_t left = reqs.size(); left > 0;) {
    left = 0;
    for (pgs_request_t *r : reqs) {
      int done = 0;
      int st = pgs_request_test(r, &done);
      if (st != PGS_OK) return st;
      left += done ? 0 : 1;
    }
    if (std::chrono::steady_clock::now() > until) return PGS_ERR_TIMEOUT;
    std::this_thread::yield();
  }
  return PGS_OK;
}

TEST(CommMpiP2p, RingWithTagsOutOfOrder) {
  CommPtr comm = make_comm(Transport::kMpi);
  ASSERT_NE(comm, nullptr);
  const int P = pgs_comm_size(comm.get()), me = pgs_comm_rank(comm.get());
  if (P < 2) GTEST_SKIP() << "needs two ranks";
  const int next = (me + 1) % P, prev = (me + P - 1) % P;
  // Three messages per neighbour, received in the reverse order of their
  // tags: matching is by tag, not by arrival.
  const size_t sizes[3] = {1, 1000, 300000};
  std::vector<std::vector<int32_t>> out(3), in(3);
  std::vector<pgs_request_t *> reqs;
  for (int t = 2; t >= 0; --t) {
    in[t].assign(sizes[t], -1);
    pgs_request_t *r = nullptr;
    ASSERT_EQ(pgs_comm_irecv(comm.get(), in[t].data(), sizes[t] * 4, prev, t,
                             nullptr, &r),
              PGS_OK);
    reqs.push_back(r);
  }
  for (int t = 0; t < 3; ++t) {
    out[t].resize(sizes[t]);
    for (size_t i = 0; i < sizes[t]; ++i)
      out[t][i] = static_cast<int32_t>(me * 1000003 + t * 7919 + i);
    pgs_request_t *r = nullptr;
    ASSERT_EQ(pgs_comm_isend(comm.get(), out[t].data(), sizes[t] * 4, next, t,
                             nullptr, &r),
              PGS_OK);
    reqs.push_back(r);
  }
  ASSERT_EQ(wait_all(reqs), PGS_OK);
  for (int t = 0; t < 3; ++t)
    for (size_t i = 0; i < sizes[t]; ++i)
      ASSERT_EQ(in[t][i], static_cast<int32_t>(prev * 1000003 + t * 7919 + i))
          << "tag " << t << " at " << i;
  uint64_t total = 0;
  for (size_t s : sizes) total += s * 4;
  const pgs_comm_counters_t k = counters_of(comm.get());
  EXPECT_EQ(k.data_sent, total);
  EXPECT_EQ(k.data_recv, total);
  for (pgs_request_t *r : reqs) pgs_request_free(r);
}

TEST(CommMpiP2p, AnySourceReportsEachSender) {
  CommPtr comm = make_comm(Transport::kMpi);
  ASSERT_NE(comm, nullptr);
  const int P = pgs_comm_size(comm.get()), me = pgs_comm_rank(comm.get());
  if (P < 2) GTEST_SKIP() << "needs two ranks";
  if (me == 0) {
    std::vector<int32_t> got(P - 1, -1);
    std::vector<pgs_request_t *> reqs(P - 1);
    for (int i = 0; i < P - 1; ++i)
      ASSERT_EQ(pgs_comm_irecv(comm.get(), &got[i], 4, PGS_ANY_SOURCE, 9,
                               nullptr, &reqs[i]),
                PGS_OK);
    ASSERT_EQ(wait_all(reqs), PGS_OK);
    std::vector<int> seen(P, 0);
    for (int i = 0; i < P - 1; ++i) {
      const int src = pgs_request_source(reqs[i]);
      ASSERT_GT(src, 0);
      ASSERT_LT(src, P);
      EXPECT_EQ(got[i], 100 + src);  // the payload names its sender
      ++seen[src];
      pgs_request_free(reqs[i]);
    }
    for (int r = 1; r < P; ++r) EXPECT_EQ(seen[r], 1) << "rank " << r;
  } else {
    int32_t mine = 100 + me;
    std::vector<pgs_request_t *> reqs(1);
    ASSERT_EQ(pgs_comm_isend(comm.get(), &mine, 4, 0, 9, nullptr, &reqs[0]),
              PGS_OK);
    ASSERT_EQ(wait_all(reqs), PGS_OK);
    EXPECT_EQ(pgs_request_source(reqs[0]), 0);
    pgs_request_free(reqs[0]);
  }
}

TEST(CommMpiP2p, ACancelledReceiveTakesNothing) {
  CommPtr comm = make_comm(Transport::kMpi);
  ASSERT_NE(comm, nullptr);
  const int P = pgs_comm_size(comm.get()), me = pgs_comm_rank(comm.get());
  if (P < 2) GTEST_SKIP() << "needs two ranks";
  if (me < 2) {
    const int peer = 1 - me;
    // A receive no one sends to, withdrawn: it must not take the message
    // that comes next with the same tag.
    int32_t lost = -1, got = -1;
    pgs_request_t *r = nullptr;
    ASSERT_EQ(pgs_comm_irecv(comm.get(), &lost, 4, peer, 5, nullptr, &r),
              PGS_OK);
    pgs_request_free(r);
    MPI_Barrier(MPI_COMM_WORLD);
    std::vector<pgs_request_t *> reqs(2);
    int32_t mine = 40 + me;
    ASSERT_EQ(pgs_comm_irecv(comm.get(), &got, 4, peer, 5, nullptr, &reqs[0]),
              PGS_OK);
    ASSERT_EQ(pgs_comm_isend(comm.get(), &mine, 4, peer, 5, nullptr, &reqs[1]),
              PGS_OK);
    ASSERT_EQ(wait_all(reqs), PGS_OK);
    EXPECT_EQ(got, 40 + peer);
    EXPECT_EQ(lost, -1);
    for (pgs_request_t *q : reqs) pgs_request_free(q);
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

TEST(CommMpiP2p, AbortEndsAReceiveThatNeverComes) {
  CommPtr comm = make_comm(Transport::kMpi);
  ASSERT_NE(comm, nullptr);
  const int P = pgs_comm_size(comm.get()), me = pgs_comm_rank(comm.get());
  if (P < 2) GTEST_SKIP() << "needs two ranks";
  int32_t x = -1;
  pgs_request_t *r = nullptr;
  ASSERT_EQ(pgs_comm_irecv(comm.get(), &x, 4, (me + 1) % P, 77, nullptr, &r),
            PGS_OK);
  std::thread([&] { pgs_comm_abort(comm.get()); }).join();
  int done = 0;
  EXPECT_EQ(pgs_request_test(r, &done), PGS_ERR_ABORTED);
  EXPECT_EQ(done, 1);
  EXPECT_EQ(x, -1);
  pgs_request_free(r);
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
