// Both transports (Open MPI and the ext test transport) over MPI_COMM_WORLD.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "comm_test_util.h"

namespace {
using namespace comm_test;

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

// fp16 and bf16 bits of small integers (exact in both: |x| <= 16, sums of at
// most 8 ranks within 128) and of +-Inf.
uint16_t f16_bits(float v) {
  if (std::isinf(v)) return v > 0 ? 0x7c00 : 0xfc00;
  if (v == 0.0f) return 0;
  uint32_t u;
  std::memcpy(&u, &v, 4);
  const uint32_t e = ((u >> 23) & 0xff) - 112, m = (u >> 13) & 0x3ff;
  return static_cast<uint16_t>(((u >> 16) & 0x8000) | (e << 10) | m);
}
uint16_t bf16_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return static_cast<uint16_t>(u >> 16);  // exact for these values
}
float half_input(int r, size_t i) {
  if (i == 5) return r == 0 ? INFINITY : 1.0f;  // max: Inf, sum: Inf
  return static_cast<float>(static_cast<int>((r * 7 + i * 3) % 33) - 16);
}

// The MPI transport reduces fp16 and bf16 with its own operations (each pair
// in fp32, rounded once), exactly on data whose sums are exact; the test
// transport (a stand-in for an embedder's) leaves them unsupported. The
// shim's transport over gloo and NCCL reduce them natively; the pytest
// collectives check those against gloo.
TEST_P(CommTransport, AllreduceSixteenBitFloats) {
  const int p = size_, r = rank_;
  constexpr size_t kCount = 41;
  for (pgs_dtype_t dtype : {PGS_FLOAT16, PGS_BFLOAT16}) {
    auto bits = dtype == PGS_FLOAT16 ? f16_bits : bf16_bits;
    EXPECT_EQ(pgs_dtype_size(dtype), 2u);
    for (pgs_redop_t op : {PGS_SUM, PGS_MAX, PGS_MIN}) {
      std::vector<uint16_t> buf(kCount), want(kCount);
      for (size_t i = 0; i < kCount; ++i) {
        float w = half_input(0, i);
        for (int q = 1; q < p; ++q) w = combine(w, half_input(q, i), op);
        buf[i] = bits(half_input(r, i));
        want[i] = bits(w);
      }
      const int st = pgs_comm_allreduce(comm(), buf.data(), kCount, dtype, op);
      if (GetParam() == Transport::kExt) {
        EXPECT_EQ(st, PGS_ERR_UNSUPPORTED);
        continue;
      }
      ASSERT_EQ(st, PGS_OK) << "dtype " << dtype << " op " << op;
      EXPECT_EQ(buf, want) << "dtype " << dtype << " op " << op;
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

// ---- abort -----------------------------------------------------------------

// pgs_comm_abort() from another thread (the backend's watchdog) ends a
// collective whose peers never come, on the MPI transport, and every later
// call fails at once.
TEST(CommAbort, EndsAStuckCollectiveOnMpi) {
  if (pgs_test::world_size() < 2) GTEST_SKIP() << "needs two ranks";
  CommPtr comm = pgs_test::make_comm(Transport::kMpi);
  ASSERT_TRUE(pgs_test::all_ranks(comm != nullptr));
  std::vector<int64_t> v(4, 1);
  if (pgs_test::world_rank() == 0) {
    std::thread watchdog([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      EXPECT_EQ(pgs_comm_abort(comm.get()), PGS_OK);
    });
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(
        pgs_comm_allreduce_host(comm.get(), v.data(), 4, PGS_INT64, PGS_SUM),
        PGS_ERR_ABORTED);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    watchdog.join();
    EXPECT_LT(s, 5.0);
    EXPECT_TRUE(pgs_comm_aborted(comm.get()));
    EXPECT_EQ(pgs_comm_barrier(comm.get()), PGS_ERR_ABORTED);
    EXPECT_EQ(
        pgs_comm_allreduce_host(comm.get(), v.data(), 4, PGS_INT64, PGS_SUM),
        PGS_ERR_ABORTED);
    MPI_Barrier(MPI_COMM_WORLD);  // the others come only now
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
    // Join rank 0's abandoned allreduce late, so it completes in the
    // background (rank 0 makes progress inside the barrier below).
    EXPECT_EQ(
        pgs_comm_allreduce_host(comm.get(), v.data(), 4, PGS_INT64, PGS_SUM),
        PGS_OK);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// A transport without an abort entry: the call reports it, and later calls
// still fail at once without reaching the transport.
TEST(CommAbort, WithoutTransportSupportLaterCallsFail) {
  CommPtr comm = pgs_test::make_comm(Transport::kExt);
  ASSERT_TRUE(pgs_test::all_ranks(comm != nullptr));
  EXPECT_FALSE(pgs_comm_aborted(comm.get()));
  EXPECT_EQ(pgs_comm_abort(comm.get()), PGS_ERR_UNSUPPORTED);
  EXPECT_EQ(pgs_comm_abort(nullptr), PGS_ERR_INVALID);
  int64_t v = 1;
  EXPECT_EQ(pgs_comm_allreduce_host(comm.get(), &v, 1, PGS_INT64, PGS_SUM),
            PGS_ERR_ABORTED);
  EXPECT_EQ(pgs_comm_barrier(comm.get()), PGS_ERR_ABORTED);
}

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
