// Transport layer without a network: status strings, pgs_comm_create and
// the counting wrappers over a stub vtable.
#include <gtest/gtest.h>

#include "comm_test_util.h"

namespace {
using namespace comm_test;

// ---- status and types -----------------------------------------------------

TEST(CommStatus, StringsAndNamesFollowTheMap) {
#define PGS_TEST_STATUS_(name, value, text)              \
  EXPECT_STREQ(pgs_status_string(value), text) << #name; \
  EXPECT_STREQ(pgs_status_name(value), #name);
  PGS_STATUS_MAP(PGS_TEST_STATUS_)
#undef PGS_TEST_STATUS_
  EXPECT_STREQ(pgs_status_string(PGS_ERR_COMM), "transport error");
  EXPECT_STREQ(pgs_status_name(PGS_ERR_INVALID), "PGS_ERR_INVALID");
  for (int unknown : {1, 7, -13, -1000, INT_MIN, INT_MAX}) {
    EXPECT_STREQ(pgs_status_string(unknown), "unknown status") << unknown;
    EXPECT_STREQ(pgs_status_name(unknown), "PGS_UNKNOWN") << unknown;
  }
}

TEST(CommTypes, DtypeSize) {
  EXPECT_EQ(pgs_dtype_size(PGS_INT64), 8u);
  EXPECT_EQ(pgs_dtype_size(PGS_FLOAT32), 4u);
  EXPECT_EQ(pgs_dtype_size(PGS_FLOAT64), 8u);
  EXPECT_EQ(pgs_dtype_size(PGS_FLOAT16), 2u);
  EXPECT_EQ(pgs_dtype_size(PGS_BFLOAT16), 2u);
  // 5..7 are the out-of-enum values C++ can form for this enum (0..7).
  EXPECT_EQ(pgs_dtype_size(static_cast<pgs_dtype_t>(7)), 0u);
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
  pgs_comm_counters_t k{1, 2, 3, 4, 5};
  pgs_comm_get_counters(nullptr, &k);
  EXPECT_EQ(k.data_sent + k.data_recv + k.ctrl_sent + k.ctrl_recv + k.calls,
            0u);
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
  // Transport calls: the nine above (an exchange is one call, start and
  // wait together), what the per-call budget of the algorithms counts.
  EXPECT_EQ(counters_of(c.get()).calls, 9u);
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
    EXPECT_EQ(fn(cc, b.data(), 2, static_cast<pgs_dtype_t>(7), PGS_SUM),
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

}  // namespace
