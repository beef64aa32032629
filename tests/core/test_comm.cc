// Transport layer tests: the pgs_comm wrappers (validation, ownership, byte
// counters) over a stub vtable, and every operation over both transports
// (Open MPI, and the independent `ext` test transport) at whatever P mpirun
// gives.
//
// Collective sections use EXPECT_* only, so every rank reaches the same
// calls even when one of them sees a failure (see test_main.cc).
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "harness.h"

namespace {

using pgs_test::CommPtr;
using pgs_test::Transport;

// ---- helpers ---------------------------------------------------------------

pgs_comm_counters_t counters_of(const pgs_comm_t *c) {
  pgs_comm_counters_t k{};
  pgs_comm_get_counters(c, &k);
  return k;
}

// Counter growth since a snapshot, compared field by field in EXPECTs.
struct Delta {
  uint64_t data_sent = 0, data_recv = 0, ctrl_sent = 0, ctrl_recv = 0;
};

Delta delta(const pgs_comm_counters_t &before, const pgs_comm_t *c) {
  const pgs_comm_counters_t now = counters_of(c);
  return {now.data_sent - before.data_sent, now.data_recv - before.data_recv,
          now.ctrl_sent - before.ctrl_sent, now.ctrl_recv - before.ctrl_recv};
}

#define EXPECT_DELTA(d, ds, dr, cs, cr) \
  do {                                  \
    EXPECT_EQ((d).data_sent, (ds));     \
    EXPECT_EQ((d).data_recv, (dr));     \
    EXPECT_EQ((d).ctrl_sent, (cs));     \
    EXPECT_EQ((d).ctrl_recv, (cr));     \
  } while (0)

// The ring model of comm.h, written independently of comm.c (the values in
// these tests are small, so the plain formula cannot overflow).
uint64_t ring_bytes(uint64_t bytes, int p) {
  return 2 * bytes * static_cast<uint64_t>(p - 1) / static_cast<uint64_t>(p);
}

// Size of the message from src to dst in an exchange; salt tells batches
// apart. Some pairs get 0 bytes.
size_t msg_size(int src, int dst, int salt) {
  return static_cast<size_t>((src * 7 + dst * 3 + salt * 5) % 5) * 37;
}

uint8_t msg_byte(int src, int dst, int salt, size_t k) {
  return static_cast<uint8_t>(src * 31 + dst * 17 + salt * 5 + k * 3);
}

constexpr uint8_t kGuard = 0xA5;

// One side of an exchange batch, with the buffers it points into. Receive
// buffers carry one guard byte past the message, which must survive.
struct Batch {
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<pgs_msg_t> msgs;
  std::vector<int> peers, salts;

  void add(int peer, size_t bytes, int salt, bool fill_from, int src, int dst) {
    std::vector<uint8_t> b(bytes + 1, kGuard);
    if (fill_from)
      for (size_t k = 0; k < bytes; ++k) b[k] = msg_byte(src, dst, salt, k);
    bufs.push_back(std::move(b));
    peers.push_back(peer);
    salts.push_back(salt);
  }
  // Pointers are taken once every buffer exists (push_back may move them).
  void finish() {
    msgs.clear();
    for (size_t i = 0; i < bufs.size(); ++i) {
      const size_t bytes = bufs[i].size() - 1;
      // 0-byte messages are listed too, some with a NULL buffer.
      void *p = bytes == 0 && i % 2 == 0 ? nullptr : bufs[i].data();
      msgs.push_back(pgs_msg_t{peers[i], p, bytes});
    }
  }
  uint64_t total() const {
    uint64_t t = 0;
    for (const auto &m : msgs) t += m.bytes;
    return t;
  }
  int n() const { return static_cast<int>(msgs.size()); }
  const pgs_msg_t *data() const { return msgs.empty() ? nullptr : msgs.data(); }
};

// Checks that every received buffer holds what its sender wrote.
void expect_received(const Batch &recvs, int me) {
  for (size_t i = 0; i < recvs.bufs.size(); ++i) {
    const auto &b = recvs.bufs[i];
    const size_t bytes = b.size() - 1;
    size_t bad = 0;
    for (size_t k = 0; k < bytes; ++k)
      if (b[k] != msg_byte(recvs.peers[i], me, recvs.salts[i], k)) ++bad;
    EXPECT_EQ(bad, 0u) << "message " << i << " from " << recvs.peers[i]
                       << " salt " << recvs.salts[i];
    EXPECT_EQ(b[bytes], kGuard) << "overrun of message " << i;
  }
}

// ---- stub vtable: the wrappers without any transport ----------------------

struct Stub {
  int destroyed = 0;
  int calls = 0;
  int result = PGS_OK;  // what every entry returns
};

int stub_exchange_start(void *impl, const pgs_msg_t *, int, const pgs_msg_t *,
                        int, int) {
  auto *s = static_cast<Stub *>(impl);
  ++s->calls;
  return s->result;
}
int stub_exchange_wait(void *impl, int) {
  auto *s = static_cast<Stub *>(impl);
  ++s->calls;
  return s->result;
}
int stub_allgatherv(void *impl, const void *, size_t, void *, const size_t *,
                    const size_t *) {
  auto *s = static_cast<Stub *>(impl);
  ++s->calls;
  return s->result;
}
int stub_reduce(void *impl, void *, size_t, pgs_dtype_t, pgs_redop_t) {
  auto *s = static_cast<Stub *>(impl);
  ++s->calls;
  return s->result;
}
int stub_bcast(void *impl, void *, size_t, int) {
  auto *s = static_cast<Stub *>(impl);
  ++s->calls;
  return s->result;
}
int stub_alltoall(void *impl, const int64_t *, int64_t *) {
  auto *s = static_cast<Stub *>(impl);
  ++s->calls;
  return s->result;
}
int stub_allgather(void *impl, const int64_t *, size_t, int64_t *) {
  auto *s = static_cast<Stub *>(impl);
  ++s->calls;
  return s->result;
}
int stub_barrier(void *impl) {
  auto *s = static_cast<Stub *>(impl);
  ++s->calls;
  return s->result;
}
void stub_destroy(void *impl) {
  ++static_cast<Stub *>(impl)->destroyed;
}

pgs_comm_vtable_t stub_vtable() {
  pgs_comm_vtable_t vt{};
  vt.exchange_start = stub_exchange_start;
  vt.exchange_wait = stub_exchange_wait;
  vt.allgatherv = stub_allgatherv;
  vt.allreduce = stub_reduce;
  vt.bcast = stub_bcast;
  vt.allreduce_host = stub_reduce;
  vt.alltoall_host = stub_alltoall;
  vt.allgather_host = stub_allgather;
  vt.barrier = stub_barrier;
  vt.destroy = stub_destroy;
  return vt;
}

CommPtr make_stub(Stub *s, int rank, int size) {
  pgs_comm_t *c = nullptr;
  const pgs_comm_vtable_t vt = stub_vtable();
  EXPECT_EQ(pgs_comm_create(&vt, s, rank, size, PGS_MEM_HOST, &c), PGS_OK);
  return CommPtr(c);
}

// ---- status and types -----------------------------------------------------

TEST(CommStatus, StringsAndNamesFollowTheMap) {
#define PGS_TEST_STATUS_(name, value, text)              \
  EXPECT_STREQ(pgs_status_string(value), text) << #name; \
  EXPECT_STREQ(pgs_status_name(value), #name);
  PGS_STATUS_MAP(PGS_TEST_STATUS_)
#undef PGS_TEST_STATUS_
  EXPECT_STREQ(pgs_status_string(PGS_ERR_COMM), "transport error");
  EXPECT_STREQ(pgs_status_name(PGS_ERR_INVALID), "PGS_ERR_INVALID");
  for (int unknown : {1, 7, -12, -1000, INT_MIN, INT_MAX}) {
    EXPECT_STREQ(pgs_status_string(unknown), "unknown status") << unknown;
    EXPECT_STREQ(pgs_status_name(unknown), "PGS_UNKNOWN") << unknown;
  }
}

TEST(CommTypes, DtypeSize) {
  EXPECT_EQ(pgs_dtype_size(PGS_INT64), 8u);
  EXPECT_EQ(pgs_dtype_size(PGS_FLOAT32), 4u);
  EXPECT_EQ(pgs_dtype_size(PGS_FLOAT64), 8u);
  // 3 is the only out-of-enum value C++ can form for this enum.
  EXPECT_EQ(pgs_dtype_size(static_cast<pgs_dtype_t>(3)), 0u);
}

// ---- pgs_comm_create ------------------------------------------------------

TEST(CommCreate, AcceptsAValidVtableAndOwnsImpl) {
  Stub s;
  pgs_comm_t *c = nullptr;
  const pgs_comm_vtable_t vt = stub_vtable();
  ASSERT_EQ(pgs_comm_create(&vt, &s, 2, 5, PGS_MEM_DEVICE, &c), PGS_OK);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(pgs_comm_rank(c), 2);
  EXPECT_EQ(pgs_comm_size(c), 5);
  EXPECT_EQ(pgs_comm_mem(c), PGS_MEM_DEVICE);
  const pgs_comm_counters_t k = counters_of(c);
  EXPECT_EQ(k.data_sent + k.data_recv + k.ctrl_sent + k.ctrl_recv, 0u);
  EXPECT_EQ(s.destroyed, 0);
  pgs_comm_destroy(c);
  EXPECT_EQ(s.destroyed, 1);
  pgs_comm_destroy(nullptr);  // a no-op
}

TEST(CommCreate, CopiesTheVtable) {
  Stub s;
  pgs_comm_t *c = nullptr;
  pgs_comm_vtable_t vt = stub_vtable();
  ASSERT_EQ(pgs_comm_create(&vt, &s, 0, 1, PGS_MEM_HOST, &c), PGS_OK);
  vt = pgs_comm_vtable_t{};  // the caller's table may go away
  EXPECT_EQ(pgs_comm_barrier(c), PGS_OK);
  EXPECT_EQ(s.calls, 1);
  pgs_comm_destroy(c);
  EXPECT_EQ(s.destroyed, 1);
}

TEST(CommCreate, DestroyMayBeNull) {
  Stub s;
  pgs_comm_t *c = nullptr;
  pgs_comm_vtable_t vt = stub_vtable();
  vt.destroy = nullptr;
  ASSERT_EQ(pgs_comm_create(&vt, &s, 0, 1, PGS_MEM_HOST, &c), PGS_OK);
  pgs_comm_destroy(c);
  EXPECT_EQ(s.destroyed, 0);
}

TEST(CommCreate, RejectsNullVtable) {
  pgs_comm_t *c = nullptr;
  EXPECT_EQ(pgs_comm_create(nullptr, nullptr, 0, 1, PGS_MEM_HOST, &c),
            PGS_ERR_INVALID);
  EXPECT_EQ(c, nullptr);
}

TEST(CommCreate, RejectsEachMissingFunctionAndDestroysImpl) {
  // Each entry but destroy, cleared in turn.
  const std::vector<void (*)(pgs_comm_vtable_t &)> clear = {
      [](pgs_comm_vtable_t &v) { v.exchange_start = nullptr; },
      [](pgs_comm_vtable_t &v) { v.exchange_wait = nullptr; },
      [](pgs_comm_vtable_t &v) { v.allgatherv = nullptr; },
      [](pgs_comm_vtable_t &v) { v.allreduce = nullptr; },
      [](pgs_comm_vtable_t &v) { v.bcast = nullptr; },
      [](pgs_comm_vtable_t &v) { v.allreduce_host = nullptr; },
      [](pgs_comm_vtable_t &v) { v.alltoall_host = nullptr; },
      [](pgs_comm_vtable_t &v) { v.allgather_host = nullptr; },
      [](pgs_comm_vtable_t &v) { v.barrier = nullptr; },
  };
  for (size_t i = 0; i < clear.size(); ++i) {
    Stub s;
    pgs_comm_vtable_t vt = stub_vtable();
    clear[i](vt);
    pgs_comm_t *c = reinterpret_cast<pgs_comm_t *>(&s);  // must be reset
    EXPECT_EQ(pgs_comm_create(&vt, &s, 0, 2, PGS_MEM_HOST, &c), PGS_ERR_INVALID)
        << "entry " << i;
    EXPECT_EQ(c, nullptr) << "entry " << i;
    EXPECT_EQ(s.destroyed, 1) << "entry " << i;
  }
}

TEST(CommCreate, RejectsBadRankSizeOrOutAndDestroysImpl) {
  struct Case {
    int rank, size;
    pgs_mem_t mem;
    bool null_out;
  };
  const Case cases[] = {
      {-1, 4, PGS_MEM_HOST, false}, {4, 4, PGS_MEM_HOST, false},
      {5, 4, PGS_MEM_HOST, false},  {0, 0, PGS_MEM_HOST, false},
      {0, -3, PGS_MEM_HOST, false}, {0, 1, PGS_MEM_HOST, true},
      // (A pgs_mem_t outside the enum is rejected too, but C++ cannot form
      // one without undefined behaviour, so it is not tried here.)
  };
  for (const Case &k : cases) {
    Stub s;
    const pgs_comm_vtable_t vt = stub_vtable();
    pgs_comm_t *c = nullptr;
    EXPECT_EQ(pgs_comm_create(&vt, &s, k.rank, k.size, k.mem,
                              k.null_out ? nullptr : &c),
              PGS_ERR_INVALID)
        << "rank " << k.rank << " size " << k.size;
    EXPECT_EQ(c, nullptr);
    EXPECT_EQ(s.destroyed, 1) << "rank " << k.rank << " size " << k.size;
  }
}

TEST(CommCreate, AccessorsTolerateNull) {
  EXPECT_EQ(pgs_comm_rank(nullptr), -1);
  EXPECT_EQ(pgs_comm_size(nullptr), 0);
  pgs_comm_counters_t k{1, 2, 3, 4};
  pgs_comm_get_counters(nullptr, &k);
  EXPECT_EQ(k.data_sent + k.data_recv + k.ctrl_sent + k.ctrl_recv, 0u);
}

// ---- the wrappers' byte models, at sizes mpirun does not give ------------

TEST(CommCounters, ModelAtFourRanks) {
  Stub s;
  CommPtr c = make_stub(&s, 1, 4);
  ASSERT_NE(c, nullptr);
  pgs_comm_counters_t k0 = counters_of(c.get());

  // Data allreduce of 10 float32 = 40 bytes: 2 * 40 * 3 / 4 = 60.
  std::vector<float> f(10);
  EXPECT_EQ(pgs_comm_allreduce(c.get(), f.data(), 10, PGS_FLOAT32, PGS_SUM),
            PGS_OK);
  EXPECT_DELTA(delta(k0, c.get()), 60u, 60u, 0u, 0u);

  // Host allreduce of 3 int64 = 24 bytes: 2 * 24 * 3 / 4 = 36.
  k0 = counters_of(c.get());
  std::vector<int64_t> h(16);
  EXPECT_EQ(pgs_comm_allreduce_host(c.get(), h.data(), 3, PGS_INT64, PGS_MAX),
            PGS_OK);
  EXPECT_DELTA(delta(k0, c.get()), 0u, 0u, 36u, 36u);

  // Alltoall: 8 * 3; allgather of 2 per rank: 2 * 8 * 3.
  k0 = counters_of(c.get());
  EXPECT_EQ(pgs_comm_alltoall_host(c.get(), h.data(), h.data() + 4), PGS_OK);
  EXPECT_DELTA(delta(k0, c.get()), 0u, 0u, 24u, 24u);
  k0 = counters_of(c.get());
  EXPECT_EQ(pgs_comm_allgather_host(c.get(), h.data(), 2, h.data() + 8),
            PGS_OK);
  EXPECT_DELTA(delta(k0, c.get()), 0u, 0u, 48u, 48u);

  // Bcast of 100 bytes: sent at the root (us), received elsewhere.
  std::vector<uint8_t> b(100);
  k0 = counters_of(c.get());
  EXPECT_EQ(pgs_comm_bcast(c.get(), b.data(), 100, 1), PGS_OK);
  EXPECT_DELTA(delta(k0, c.get()), 100u, 0u, 0u, 0u);
  k0 = counters_of(c.get());
  EXPECT_EQ(pgs_comm_bcast(c.get(), b.data(), 100, 3), PGS_OK);
  EXPECT_DELTA(delta(k0, c.get()), 0u, 100u, 0u, 0u);

  // Allgatherv of blocks {3, 5, 7, 11}, ours is 5: recv 21, sent 5 * 3.
  const size_t rb[4] = {3, 5, 7, 11}, dp[4] = {0, 3, 8, 15};
  std::vector<uint8_t> all(26);
  k0 = counters_of(c.get());
  EXPECT_EQ(pgs_comm_allgatherv(c.get(), all.data() + 3, 5, all.data(), rb, dp),
            PGS_OK);
  EXPECT_DELTA(delta(k0, c.get()), 15u, 21u, 0u, 0u);

  // Exchange: exact bytes, including zero-byte messages; counted at start.
  const pgs_msg_t sends[3] = {
      {0, b.data(), 10}, {2, nullptr, 0}, {3, b.data(), 20}};
  const pgs_msg_t recvs[2] = {{0, b.data(), 7}, {3, b.data() + 50, 1}};
  k0 = counters_of(c.get());
  EXPECT_EQ(pgs_comm_exchange_start(c.get(), sends, 3, recvs, 2, 1), PGS_OK);
  EXPECT_DELTA(delta(k0, c.get()), 30u, 8u, 0u, 0u);
  EXPECT_EQ(pgs_comm_exchange_wait(c.get(), 1), PGS_OK);
  EXPECT_DELTA(delta(k0, c.get()), 30u, 8u, 0u, 0u);

  // Barrier counts nothing.
  k0 = counters_of(c.get());
  EXPECT_EQ(pgs_comm_barrier(c.get()), PGS_OK);
  EXPECT_DELTA(delta(k0, c.get()), 0u, 0u, 0u, 0u);
  EXPECT_EQ(s.calls, 10);
}

TEST(CommCounters, RingModelRoundsDown) {
  // 10 float32 over 3 ranks: 2 * 40 * 2 / 3 = 53.33 -> 53.
  Stub s;
  CommPtr c = make_stub(&s, 2, 3);
  ASSERT_NE(c, nullptr);
  std::vector<float> f(10);
  EXPECT_EQ(pgs_comm_allreduce(c.get(), f.data(), 10, PGS_FLOAT32, PGS_MIN),
            PGS_OK);
  const pgs_comm_counters_t k = counters_of(c.get());
  EXPECT_EQ(k.data_sent, 53u);
  EXPECT_EQ(k.data_recv, 53u);
  // 7 float64 over 5 ranks: 2 * 56 * 4 / 5 = 89.6 -> 89.
  Stub s5;
  CommPtr c5 = make_stub(&s5, 0, 5);
  ASSERT_NE(c5, nullptr);
  std::vector<double> d(7);
  EXPECT_EQ(
      pgs_comm_allreduce_host(c5.get(), d.data(), 7, PGS_FLOAT64, PGS_SUM),
      PGS_OK);
  EXPECT_EQ(counters_of(c5.get()).ctrl_sent, 89u);
  EXPECT_EQ(counters_of(c5.get()).ctrl_recv, 89u);
}

TEST(CommCounters, OneRankCallsTheTransportAndCountsZero) {
  Stub s;
  CommPtr c = make_stub(&s, 0, 1);
  ASSERT_NE(c, nullptr);
  std::vector<int64_t> h(8);
  std::vector<float> f(8);
  const size_t rb[1] = {16}, dp[1] = {0};
  EXPECT_EQ(pgs_comm_exchange(c.get(), nullptr, 0, nullptr, 0), PGS_OK);
  EXPECT_EQ(pgs_comm_allgatherv(c.get(), f.data(), 16, f.data() + 4, rb, dp),
            PGS_OK);
  EXPECT_EQ(pgs_comm_allreduce(c.get(), f.data(), 8, PGS_FLOAT32, PGS_SUM),
            PGS_OK);
  EXPECT_EQ(pgs_comm_bcast(c.get(), f.data(), 32, 0), PGS_OK);
  EXPECT_EQ(pgs_comm_allreduce_host(c.get(), h.data(), 8, PGS_INT64, PGS_SUM),
            PGS_OK);
  EXPECT_EQ(pgs_comm_alltoall_host(c.get(), h.data(), h.data() + 1), PGS_OK);
  EXPECT_EQ(pgs_comm_allgather_host(c.get(), h.data(), 2, h.data() + 4),
            PGS_OK);
  EXPECT_EQ(pgs_comm_barrier(c.get()), PGS_OK);
  EXPECT_EQ(s.calls, 9);  // exchange is start + wait
  const pgs_comm_counters_t k = counters_of(c.get());
  EXPECT_EQ(k.data_sent + k.data_recv + k.ctrl_sent + k.ctrl_recv, 0u);
}

TEST(CommCounters, FailedCallsCountNothingAndPropagate) {
  Stub s;
  s.result = PGS_ERR_COMM;
  CommPtr c = make_stub(&s, 0, 2);
  ASSERT_NE(c, nullptr);
  std::vector<int64_t> h(8);
  std::vector<uint8_t> b(64);
  const pgs_msg_t send = {1, b.data(), 10};
  EXPECT_EQ(pgs_comm_exchange_start(c.get(), &send, 1, nullptr, 0, 0),
            PGS_ERR_COMM);
  EXPECT_EQ(pgs_comm_allreduce(c.get(), b.data(), 2, PGS_FLOAT64, PGS_SUM),
            PGS_ERR_COMM);
  EXPECT_EQ(pgs_comm_bcast(c.get(), b.data(), 8, 0), PGS_ERR_COMM);
  EXPECT_EQ(pgs_comm_alltoall_host(c.get(), h.data(), h.data() + 2),
            PGS_ERR_COMM);
  EXPECT_EQ(pgs_comm_barrier(c.get()), PGS_ERR_COMM);
  const pgs_comm_counters_t k = counters_of(c.get());
  EXPECT_EQ(k.data_sent + k.data_recv + k.ctrl_sent + k.ctrl_recv, 0u);
  // A failed start leaves the slot free.
  s.result = PGS_OK;
  EXPECT_EQ(pgs_comm_exchange_start(c.get(), &send, 1, nullptr, 0, 0), PGS_OK);
  // A failed wait frees the slot too.
  s.result = PGS_ERR_COMM;
  EXPECT_EQ(pgs_comm_exchange_wait(c.get(), 0), PGS_ERR_COMM);
  s.result = PGS_OK;
  EXPECT_EQ(pgs_comm_exchange_start(c.get(), &send, 1, nullptr, 0, 0), PGS_OK);
  EXPECT_EQ(pgs_comm_exchange_wait(c.get(), 0), PGS_OK);
}

TEST(CommValidation, InvalidArgumentsNeverReachTheTransport) {
  Stub s;
  CommPtr c = make_stub(&s, 1, 3);
  ASSERT_NE(c, nullptr);
  pgs_comm_t *cc = c.get();
  std::vector<uint8_t> b(64);
  std::vector<int64_t> h(8);
  const size_t rb[3] = {4, 4, 4}, dp[3] = {0, 4, 8};

  // Exchange: slot, peer (self, out of range), NULL buffer, negative count.
  const pgs_msg_t ok = {0, b.data(), 4};
  const pgs_msg_t self = {1, b.data(), 4}, far = {3, b.data(), 4},
                  neg = {-1, b.data(), 4}, null_buf = {2, nullptr, 4};
  EXPECT_EQ(pgs_comm_exchange_start(cc, &ok, 1, &ok, 1, -1), PGS_ERR_INVALID);
  EXPECT_EQ(pgs_comm_exchange_start(cc, &ok, 1, &ok, 1, PGS_COMM_SLOTS),
            PGS_ERR_INVALID);
  for (const pgs_msg_t *bad : {&self, &far, &neg, &null_buf}) {
    EXPECT_EQ(pgs_comm_exchange_start(cc, bad, 1, nullptr, 0, 0),
              PGS_ERR_INVALID);
    EXPECT_EQ(pgs_comm_exchange_start(cc, nullptr, 0, bad, 1, 0),
              PGS_ERR_INVALID);
  }
  EXPECT_EQ(pgs_comm_exchange_start(cc, &ok, -1, nullptr, 0, 0),
            PGS_ERR_INVALID);
  EXPECT_EQ(pgs_comm_exchange_start(cc, nullptr, 1, nullptr, 0, 0),
            PGS_ERR_INVALID);
  EXPECT_EQ(pgs_comm_exchange_wait(cc, 0), PGS_ERR_INVALID);  // idle slot
  EXPECT_EQ(pgs_comm_exchange_wait(cc, 2), PGS_ERR_INVALID);
  EXPECT_EQ(pgs_comm_exchange(nullptr, nullptr, 0, nullptr, 0),
            PGS_ERR_INVALID);

  // Allgatherv: missing arrays, our block disagreeing with send_bytes.
  EXPECT_EQ(pgs_comm_allgatherv(cc, b.data(), 4, b.data() + 16, nullptr, dp),
            PGS_ERR_INVALID);
  EXPECT_EQ(pgs_comm_allgatherv(cc, b.data(), 4, b.data() + 16, rb, nullptr),
            PGS_ERR_INVALID);
  EXPECT_EQ(pgs_comm_allgatherv(cc, b.data(), 5, b.data() + 16, rb, dp),
            PGS_ERR_INVALID);
  EXPECT_EQ(pgs_comm_allgatherv(cc, nullptr, 4, b.data() + 16, rb, dp),
            PGS_ERR_INVALID);
  EXPECT_EQ(pgs_comm_allgatherv(cc, b.data(), 4, nullptr, rb, dp),
            PGS_ERR_INVALID);

  // Reductions: dtype, op, NULL buffer.
  for (auto fn : {pgs_comm_allreduce, pgs_comm_allreduce_host}) {
    EXPECT_EQ(fn(cc, b.data(), 2, static_cast<pgs_dtype_t>(3), PGS_SUM),
              PGS_ERR_INVALID);
    EXPECT_EQ(fn(cc, b.data(), 2, PGS_FLOAT32, static_cast<pgs_redop_t>(3)),
              PGS_ERR_INVALID);
    EXPECT_EQ(fn(cc, nullptr, 2, PGS_FLOAT32, PGS_SUM), PGS_ERR_INVALID);
    EXPECT_EQ(fn(cc, b.data(), SIZE_MAX / 2, PGS_FLOAT64, PGS_SUM),
              PGS_ERR_INVALID);
  }
  // Bcast root, NULL buffer; host collectives' NULL arrays.
  EXPECT_EQ(pgs_comm_bcast(cc, b.data(), 4, -1), PGS_ERR_INVALID);
  EXPECT_EQ(pgs_comm_bcast(cc, b.data(), 4, 3), PGS_ERR_INVALID);
  EXPECT_EQ(pgs_comm_bcast(cc, nullptr, 4, 0), PGS_ERR_INVALID);
  EXPECT_EQ(pgs_comm_alltoall_host(cc, nullptr, h.data()), PGS_ERR_INVALID);
  EXPECT_EQ(pgs_comm_alltoall_host(cc, h.data(), nullptr), PGS_ERR_INVALID);
  EXPECT_EQ(pgs_comm_allgather_host(cc, nullptr, 1, h.data()), PGS_ERR_INVALID);
  EXPECT_EQ(pgs_comm_allgather_host(cc, h.data(), 1, nullptr), PGS_ERR_INVALID);
  EXPECT_EQ(pgs_comm_barrier(nullptr), PGS_ERR_INVALID);

  EXPECT_EQ(s.calls, 0);
  const pgs_comm_counters_t k = counters_of(cc);
  EXPECT_EQ(k.data_sent + k.data_recv + k.ctrl_sent + k.ctrl_recv, 0u);

  // A second start on a busy slot is refused until it is waited for.
  EXPECT_EQ(pgs_comm_exchange_start(cc, &ok, 1, nullptr, 0, 0), PGS_OK);
  EXPECT_EQ(pgs_comm_exchange_start(cc, &ok, 1, nullptr, 0, 0), PGS_ERR_BUSY);
  EXPECT_EQ(pgs_comm_exchange_start(cc, &ok, 1, nullptr, 0, 1), PGS_OK);
  EXPECT_EQ(pgs_comm_exchange_wait(cc, 0), PGS_OK);
  EXPECT_EQ(pgs_comm_exchange_wait(cc, 1), PGS_OK);
  EXPECT_EQ(s.calls, 4);
}

// ---- both transports over MPI_COMM_WORLD ---------------------------------

class CommTransport : public testing::TestWithParam<Transport> {
 protected:
  void SetUp() override {
    comm_ = pgs_test::make_comm(GetParam());
    // Every rank takes the same branch, so no rank is left in a collective.
    ASSERT_TRUE(pgs_test::all_ranks(comm_ != nullptr));
    rank_ = pgs_comm_rank(comm_.get());
    size_ = pgs_comm_size(comm_.get());
  }
  pgs_comm_t *comm() { return comm_.get(); }

  CommPtr comm_;
  int rank_ = 0, size_ = 1;
};

TEST_P(CommTransport, CreateMatchesWorld) {
  EXPECT_EQ(rank_, pgs_test::world_rank());
  EXPECT_EQ(size_, pgs_test::world_size());
  EXPECT_EQ(pgs_comm_mem(comm()), PGS_MEM_HOST);
}

// Creating the MPI transport leaves the caller's communicator as it was
// (it briefly switches its error handler so that a failing dup returns).
TEST_P(CommTransport, CreateKeepsTheCallersErrorHandler) {
  MPI_Errhandler h = MPI_ERRHANDLER_NULL;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &h);
  EXPECT_TRUE(h == MPI_ERRORS_ARE_FATAL);
  MPI_Errhandler_free(&h);
}

TEST(CommMpiCreate, RejectsBadArguments) {
  pgs_comm_t *c = reinterpret_cast<pgs_comm_t *>(&c);
  EXPECT_EQ(pgs_comm_mpi_create(MPI_COMM_NULL, &c), PGS_ERR_INVALID);
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(pgs_comm_mpi_create(MPI_COMM_WORLD, nullptr), PGS_ERR_INVALID);
}

// Rotated exchange (send to r + s, receive from r - s), one message per
// peer with sizes from 0 up, repeated so the slot's arrays are reused.
TEST_P(CommTransport, ExchangeRotated) {
  const int p = size_, r = rank_;
  for (int iter = 0; iter < 3; ++iter) {
    Batch sends, recvs;
    for (int s = 1; s < p; ++s) {
      const int dst = (r + s) % p, src = (r - s + p) % p;
      sends.add(dst, msg_size(r, dst, iter), iter, true, r, dst);
      recvs.add(src, msg_size(src, r, iter), iter, false, src, r);
    }
    sends.finish();
    recvs.finish();
    const pgs_comm_counters_t k0 = counters_of(comm());
    EXPECT_EQ(pgs_comm_exchange(comm(), sends.data(), sends.n(), recvs.data(),
                                recvs.n()),
              PGS_OK);
    expect_received(recvs, r);
    EXPECT_DELTA(delta(k0, comm()), sends.total(), recvs.total(), 0u, 0u);
  }
}

// Two batches in flight at once, waited for in the opposite order: slot 0
// carries two messages per peer forward (their order within the batch
// matters), slot 1 one message per peer backward.
TEST_P(CommTransport, ExchangeTwoSlotsInFlight) {
  const int p = size_, r = rank_;
  for (int iter = 0; iter < 2; ++iter) {
    Batch s0, r0, s1, r1;
    for (int s = 1; s < p; ++s) {
      const int fwd = (r + s) % p, bwd = (r - s + p) % p;
      for (int salt : {10 + iter, 20 + iter}) {
        s0.add(fwd, msg_size(r, fwd, salt) + 1, salt, true, r, fwd);
        r0.add(bwd, msg_size(bwd, r, salt) + 1, salt, false, bwd, r);
      }
      s1.add(bwd, msg_size(r, bwd, 30 + iter), 30 + iter, true, r, bwd);
      r1.add(fwd, msg_size(fwd, r, 30 + iter), 30 + iter, false, fwd, r);
    }
    for (Batch *b : {&s0, &r0, &s1, &r1}) b->finish();
    const pgs_comm_counters_t k0 = counters_of(comm());
    EXPECT_EQ(pgs_comm_exchange_start(comm(), s0.data(), s0.n(), r0.data(),
                                      r0.n(), 0),
              PGS_OK);
    EXPECT_EQ(pgs_comm_exchange_start(comm(), s1.data(), s1.n(), r1.data(),
                                      r1.n(), 1),
              PGS_OK);
    EXPECT_EQ(pgs_comm_exchange_wait(comm(), 1), PGS_OK);
    EXPECT_EQ(pgs_comm_exchange_wait(comm(), 0), PGS_OK);
    expect_received(r0, r);
    expect_received(r1, r);
    EXPECT_DELTA(delta(k0, comm()), s0.total() + s1.total(),
                 r0.total() + r1.total(), 0u, 0u);
  }
}

// Local misuse is rejected the same way over both transports, before any
// message moves (so it cannot desynchronise the ranks).
TEST_P(CommTransport, ExchangeRejectsMisuse) {
  const pgs_comm_counters_t k0 = counters_of(comm());
  std::vector<uint8_t> b(8);
  const pgs_msg_t self = {rank_, b.data(), 8};
  EXPECT_EQ(pgs_comm_exchange_start(comm(), &self, 1, nullptr, 0, 0),
            PGS_ERR_INVALID);
  EXPECT_EQ(pgs_comm_exchange_wait(comm(), 0), PGS_ERR_INVALID);
  EXPECT_EQ(pgs_comm_exchange_start(comm(), nullptr, 0, nullptr, 0, 0), PGS_OK);
  EXPECT_EQ(pgs_comm_exchange_start(comm(), nullptr, 0, nullptr, 0, 0),
            PGS_ERR_BUSY);
  EXPECT_EQ(pgs_comm_exchange_wait(comm(), 0), PGS_OK);
  EXPECT_DELTA(delta(k0, comm()), 0u, 0u, 0u, 0u);
}

// Block i has a size that is 0 for every third rank, blocks are laid out
// with gaps that must stay untouched.
TEST_P(CommTransport, AllgathervVariableSizes) {
  const int p = size_, r = rank_;
  auto block = [](int i) -> size_t { return i % 3 == 1 ? 0 : 10 + 13 * i; };
  auto byte = [](int i, size_t k) {
    return static_cast<uint8_t>(i * 29 + k * 7 + 1);
  };
  constexpr size_t kGap = 5;
  std::vector<size_t> rb(p), dp(p);
  size_t total = kGap;
  for (int i = 0; i < p; ++i) {
    rb[i] = block(i);
    dp[i] = total;
    total += rb[i] + kGap;
  }
  for (int in_place = 0; in_place < 2; ++in_place) {
    std::vector<uint8_t> recv(total, kGuard);
    std::vector<uint8_t> send(rb[r]);
    for (size_t k = 0; k < rb[r]; ++k) send[k] = byte(r, k);
    const void *sp = send.data();
    if (in_place) {
      if (rb[r] > 0) std::memcpy(recv.data() + dp[r], send.data(), rb[r]);
      sp = recv.data() + dp[r];
    }
    const pgs_comm_counters_t k0 = counters_of(comm());
    EXPECT_EQ(pgs_comm_allgatherv(comm(), rb[r] ? sp : nullptr, rb[r],
                                  recv.data(), rb.data(), dp.data()),
              PGS_OK);
    size_t bad = 0, others = 0;
    for (int i = 0; i < p; ++i) {
      for (size_t k = 0; k < rb[i]; ++k)
        if (recv[dp[i] + k] != byte(i, k)) ++bad;
      if (i != r) others += rb[i];
    }
    for (size_t k = 0; k < dp[0]; ++k)
      if (recv[k] != kGuard) ++bad;
    for (int i = 0; i < p; ++i)
      for (size_t k = 0; k < kGap; ++k)
        if (recv[dp[i] + rb[i] + k] != kGuard) ++bad;
    EXPECT_EQ(bad, 0u) << "in_place " << in_place;
    EXPECT_DELTA(delta(k0, comm()), rb[r] * static_cast<uint64_t>(p - 1),
                 others, 0u, 0u);
  }
}

TEST_P(CommTransport, AllgathervAllEmpty) {
  std::vector<size_t> rb(size_, 0), dp(size_, 0);
  EXPECT_EQ(
      pgs_comm_allgatherv(comm(), nullptr, 0, nullptr, rb.data(), dp.data()),
      PGS_OK);
  const pgs_comm_counters_t k = counters_of(comm());
  EXPECT_EQ(k.data_sent + k.data_recv, 0u);
}

// Inputs whose reductions are exact in every dtype (small multiples of 0.5,
// or int64 values beyond 2^53 so a detour through double would show), and
// a brute-force oracle over every rank's input.
template <typename T>
T reduce_input(int rank, size_t i) {
  const int64_t small = static_cast<int64_t>((rank * 7 + i * 13) % 23) - 11;
  if constexpr (std::is_same_v<T, int64_t>)
    return (int64_t{1} << 55) + small * 1000003;
  else
    return static_cast<T>(small) + static_cast<T>(0.5);
}

template <typename T>
T combine(T a, T b, pgs_redop_t op) {
  if (op == PGS_SUM) return a + b;
  if (op == PGS_MAX) return a < b ? b : a;
  return b < a ? b : a;
}

template <typename T>
void check_allreduce(pgs_comm_t *c, pgs_dtype_t dtype, pgs_redop_t op,
                     bool host) {
  const int p = pgs_comm_size(c), r = pgs_comm_rank(c);
  constexpr size_t kCount = 37;
  std::vector<T> buf(kCount), want(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    buf[i] = reduce_input<T>(r, i);
    want[i] = reduce_input<T>(0, i);
    for (int q = 1; q < p; ++q)
      want[i] = combine(want[i], reduce_input<T>(q, i), op);
  }
  const pgs_comm_counters_t k0 = counters_of(c);
  const int st = host
                     ? pgs_comm_allreduce_host(c, buf.data(), kCount, dtype, op)
                     : pgs_comm_allreduce(c, buf.data(), kCount, dtype, op);
  EXPECT_EQ(st, PGS_OK);
  size_t bad = 0;
  for (size_t i = 0; i < kCount; ++i)
    if (buf[i] != want[i]) ++bad;
  EXPECT_EQ(bad, 0u) << "dtype " << dtype << " op " << op << " host " << host;
  const uint64_t ring = ring_bytes(kCount * sizeof(T), p);
  if (host)
    EXPECT_DELTA(delta(k0, c), 0u, 0u, ring, ring);
  else
    EXPECT_DELTA(delta(k0, c), ring, ring, 0u, 0u);
}

TEST_P(CommTransport, AllreduceEveryDtypeOpAndPlane) {
  for (bool host : {false, true}) {
    for (pgs_redop_t op : {PGS_SUM, PGS_MAX, PGS_MIN}) {
      check_allreduce<int64_t>(comm(), PGS_INT64, op, host);
      check_allreduce<float>(comm(), PGS_FLOAT32, op, host);
      check_allreduce<double>(comm(), PGS_FLOAT64, op, host);
    }
  }
}

// Random float32 data over more than one internal piece of the ext
// transport: every rank must end with bit-identical results, close to the
// oracle.
TEST_P(CommTransport, AllreduceSameBitsOnEveryRank) {
  const int p = size_, r = rank_;
  const size_t n = (size_t{1} << 20) + 3;
  std::vector<float> buf = pgs_test::normal_data(n, 42, r, 0);
  EXPECT_EQ(pgs_comm_allreduce(comm(), buf.data(), n, PGS_FLOAT32, PGS_SUM),
            PGS_OK);
  // Compare a strided sample (ending with the last element, which sits in
  // the ext transport's partial last piece) against rank 0's bits and the
  // oracle.
  constexpr size_t kSample = 4096;
  auto at = [&](size_t j) {
    return j + 1 == kSample ? n - 1 : j * (n / kSample);
  };
  std::vector<float> mine(kSample), want(kSample, 0.0f);
  for (size_t j = 0; j < kSample; ++j) mine[j] = buf[at(j)];
  for (int q = 0; q < p; ++q) {
    const std::vector<float> in = pgs_test::normal_data(n, 42, q, 0);
    for (size_t j = 0; j < kSample; ++j) want[j] += in[at(j)];
  }
  std::vector<float> root = mine;
  MPI_Bcast(root.data(), static_cast<int>(kSample), MPI_FLOAT, 0,
            MPI_COMM_WORLD);
  EXPECT_EQ(std::memcmp(root.data(), mine.data(), kSample * sizeof(float)), 0);
  size_t far = 0;
  for (size_t j = 0; j < kSample; ++j)
    if (std::abs(mine[j] - want[j]) > 1e-4f * (1.0f + std::abs(want[j]))) ++far;
  EXPECT_EQ(far, 0u);
}

TEST_P(CommTransport, AllreduceZeroCount) {
  EXPECT_EQ(pgs_comm_allreduce(comm(), nullptr, 0, PGS_FLOAT32, PGS_SUM),
            PGS_OK);
  EXPECT_EQ(pgs_comm_allreduce_host(comm(), nullptr, 0, PGS_INT64, PGS_MAX),
            PGS_OK);
  const pgs_comm_counters_t k = counters_of(comm());
  EXPECT_EQ(k.data_sent + k.data_recv + k.ctrl_sent + k.ctrl_recv, 0u);
}

TEST_P(CommTransport, AlltoallHost) {
  const int p = size_, r = rank_;
  std::vector<int64_t> send(p), recv(p, -1);
  for (int d = 0; d < p; ++d) send[d] = int64_t{r} * 1000 + d;
  const pgs_comm_counters_t k0 = counters_of(comm());
  EXPECT_EQ(pgs_comm_alltoall_host(comm(), send.data(), recv.data()), PGS_OK);
  for (int s = 0; s < p; ++s) EXPECT_EQ(recv[s], int64_t{s} * 1000 + r);
  const uint64_t b = 8u * static_cast<uint64_t>(p - 1);
  EXPECT_DELTA(delta(k0, comm()), 0u, 0u, b, b);
}

TEST_P(CommTransport, AllgatherHost) {
  const int p = size_, r = rank_;
  for (size_t count : {size_t{3}, size_t{1}, size_t{0}}) {
    std::vector<int64_t> send(count), recv(count * p, -1);
    for (size_t j = 0; j < count; ++j)
      send[j] = int64_t{r} * 100 + static_cast<int64_t>(j) - 7;
    const pgs_comm_counters_t k0 = counters_of(comm());
    EXPECT_EQ(pgs_comm_allgather_host(comm(), count ? send.data() : nullptr,
                                      count, count ? recv.data() : nullptr),
              PGS_OK);
    for (int i = 0; i < p; ++i)
      for (size_t j = 0; j < count; ++j)
        EXPECT_EQ(recv[i * count + j],
                  int64_t{i} * 100 + static_cast<int64_t>(j) - 7);
    const uint64_t b = count * 8u * static_cast<uint64_t>(p - 1);
    EXPECT_DELTA(delta(k0, comm()), 0u, 0u, b, b);
  }
}

TEST_P(CommTransport, BcastFromEveryRoot) {
  const int p = size_, r = rank_;
  uint64_t sent = 0, recvd = 0;
  const pgs_comm_counters_t k0 = counters_of(comm());
  for (int root = 0; root < p; ++root) {
    const size_t bytes = root % 3 == 2 ? 0 : 1000 + 37 * root;
    std::vector<uint8_t> buf(bytes + 1, kGuard);
    if (r == root)
      for (size_t k = 0; k < bytes; ++k) buf[k] = msg_byte(root, 0, 1, k);
    EXPECT_EQ(pgs_comm_bcast(comm(), bytes ? buf.data() : nullptr, bytes, root),
              PGS_OK);
    size_t bad = 0;
    for (size_t k = 0; k < bytes; ++k)
      if (buf[k] != msg_byte(root, 0, 1, k)) ++bad;
    EXPECT_EQ(bad, 0u) << "root " << root;
    EXPECT_EQ(buf[bytes], kGuard);
    if (p > 1) (r == root ? sent : recvd) += bytes;
  }
  EXPECT_DELTA(delta(k0, comm()), sent, recvd, 0u, 0u);
}

TEST_P(CommTransport, BarrierCountsNothing) {
  const pgs_comm_counters_t k0 = counters_of(comm());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(pgs_comm_barrier(comm()), PGS_OK);
  EXPECT_DELTA(delta(k0, comm()), 0u, 0u, 0u, 0u);
}

// Operations interleaved the way an algorithm mixes them: an exchange in
// flight while control-plane collectives run.
TEST_P(CommTransport, CollectivesWhileExchangeInFlight) {
  const int p = size_, r = rank_;
  Batch sends, recvs;
  for (int s = 1; s < p; ++s) {
    const int dst = (r + s) % p, src = (r - s + p) % p;
    sends.add(dst, msg_size(r, dst, 4) + 3, 4, true, r, dst);
    recvs.add(src, msg_size(src, r, 4) + 3, 4, false, src, r);
  }
  sends.finish();
  recvs.finish();
  EXPECT_EQ(pgs_comm_exchange_start(comm(), sends.data(), sends.n(),
                                    recvs.data(), recvs.n(), 1),
            PGS_OK);
  int64_t v = r + 1;
  EXPECT_EQ(pgs_comm_allreduce_host(comm(), &v, 1, PGS_INT64, PGS_SUM), PGS_OK);
  EXPECT_EQ(v, int64_t{p} * (p + 1) / 2);
  EXPECT_EQ(pgs_comm_barrier(comm()), PGS_OK);
  EXPECT_EQ(pgs_comm_exchange_wait(comm(), 1), PGS_OK);
  expect_received(recvs, r);
}

INSTANTIATE_TEST_SUITE_P(Transports, CommTransport,
                         testing::Values(Transport::kMpi, Transport::kExt),
                         [](const testing::TestParamInfo<Transport> &info) {
                           return pgs_test::transport_name(info.param);
                         });

// ---- messages above INT_MAX bytes (opt-in: several GiB per rank) ---------
//
// Run with PGS_TEST_LARGE=1 at P = 2, e.g.
//   PGS_TEST_LARGE=1 mpirun -np 2 tests/pgs_core_tests
//   --gtest_filter='*CommLarge*'
// They need about 9 GiB of memory in all.

class CommLarge : public CommTransport {
 protected:
  void SetUp() override {
    const char *env = std::getenv("PGS_TEST_LARGE");
    const bool on = env != nullptr && env[0] != '\0' && env[0] != '0';
    if (!pgs_test::all_ranks(on && pgs_test::world_size() == 2))
      GTEST_SKIP() << "set PGS_TEST_LARGE=1 and run at P = 2";
    CommTransport::SetUp();
  }
};

// Not a multiple of the 1 MiB block of mpi.c's large datatype.
constexpr size_t kLarge = static_cast<size_t>(INT_MAX) + 4097;

uint8_t large_byte(int src, size_t k) {
  return static_cast<uint8_t>((k * 131) ^ (k >> 20) ^ static_cast<size_t>(src));
}

size_t count_bad(const std::vector<uint8_t> &v, size_t off, size_t n, int src) {
  size_t bad = 0;
  for (size_t k = 0; k < n; ++k)
    if (v[off + k] != large_byte(src, k)) ++bad;
  return bad;
}

TEST_P(CommLarge, Exchange) {
  const int peer = 1 - rank_;
  std::vector<uint8_t> send(kLarge), recv(kLarge + 1, kGuard);
  for (size_t k = 0; k < kLarge; ++k) send[k] = large_byte(rank_, k);
  const pgs_msg_t s = {peer, send.data(), kLarge};
  const pgs_msg_t rv = {peer, recv.data(), kLarge};
  EXPECT_EQ(pgs_comm_exchange(comm(), &s, 1, &rv, 1), PGS_OK);
  EXPECT_EQ(count_bad(recv, 0, kLarge, peer), 0u);
  EXPECT_EQ(recv[kLarge], kGuard);
  const pgs_comm_counters_t k = counters_of(comm());
  EXPECT_EQ(k.data_sent, kLarge);
  EXPECT_EQ(k.data_recv, kLarge);
}

TEST_P(CommLarge, AllgathervBlockAboveIntMax) {
  // Rank 0's block is beyond int; rank 1's block sits beyond it, so its
  // displacement is beyond int too.
  const size_t rb[2] = {kLarge, 100}, dp[2] = {0, kLarge};
  std::vector<uint8_t> send(rb[rank_]);
  for (size_t k = 0; k < send.size(); ++k) send[k] = large_byte(rank_, k);
  std::vector<uint8_t> recv(kLarge + 100);
  EXPECT_EQ(
      pgs_comm_allgatherv(comm(), send.data(), rb[rank_], recv.data(), rb, dp),
      PGS_OK);
  EXPECT_EQ(count_bad(recv, 0, kLarge, 0), 0u);
  EXPECT_EQ(count_bad(recv, kLarge, 100, 1), 0u);
}

TEST_P(CommLarge, Bcast) {
  std::vector<uint8_t> buf(kLarge, 0);
  if (rank_ == 1)
    for (size_t k = 0; k < kLarge; ++k) buf[k] = large_byte(1, k);
  EXPECT_EQ(pgs_comm_bcast(comm(), buf.data(), kLarge, 1), PGS_OK);
  EXPECT_EQ(count_bad(buf, 0, kLarge, 1), 0u);
}

INSTANTIATE_TEST_SUITE_P(Transports, CommLarge,
                         testing::Values(Transport::kMpi, Transport::kExt),
                         [](const testing::TestParamInfo<Transport> &info) {
                           return pgs_test::transport_name(info.param);
                         });

}  // namespace
