// Every algorithm with P = 2 to 16 ranks as threads of this process (the
// thread transport): conservation against the dense sum, identical outputs
// on every rank, and the same bits when the world runs again, whatever the
// scheduling. Milliseconds per case; ThreadSanitizer checks the library's
// shared state in the tsan build.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "test_data.h"
#include "thread_transport.h"

extern "C" {
#include <pg_sparse/pg_sparse.h>
}

namespace {

struct Call {
  std::vector<float> acc, out, resid;
  int status = PGS_OK;
  int dense = 0;
};

using World = std::vector<std::vector<Call>>;  // [rank][step]

World run_world(int P, const pgs_config_t &cfg, size_t n, int steps) {
  pgs_thread_world_t *w = nullptr;
  EXPECT_EQ(pgs_thread_world_create(P, &w), PGS_OK);
  World calls(P, std::vector<Call>(steps));
  std::vector<std::thread> ranks;
  for (int r = 0; r < P; ++r) {
    ranks.emplace_back([&, r] {
      pgs_comm_t *comm = nullptr;
      pgs_bucket_t *b = nullptr;
      int st = pgs_thread_comm_create(w, r, &comm);
      if (st == PGS_OK)
        st = pgs_bucket_create(&cfg, comm, pgs_ops_cpu(), n, &b);
      for (int s = 0; s < steps && st == PGS_OK; ++s) {
        Call &c = calls[r][s];
        std::vector<float> g =
            pgs_test_data::normal(n, 1000 * static_cast<uint64_t>(s) + r + 1);
        c.resid.resize(n);
        pgs_bucket_get_residual(b, c.resid.data());
        c.acc.resize(n);
        for (size_t i = 0; i < n; ++i) c.acc[i] = g[i] + c.resid[i];
        c.out.assign(n, 0.0f);
        c.status = pgs_bucket_allreduce(b, g.data(), c.out.data());
        pgs_bucket_get_residual(b, c.resid.data());
        pgs_stats_t stats;
        pgs_bucket_stats(b, &stats);
        c.dense = stats.dense;
      }
      pgs_bucket_destroy(b);
      pgs_comm_destroy(comm);
    });
  }
  for (auto &t : ranks) t.join();
  pgs_thread_world_destroy(w);
  return calls;
}

using Param = std::tuple<pgs_algo_id_t, int, pgs_dtype_t>;

class Threads : public testing::TestWithParam<Param> {
 protected:
  pgs_config_t config() const {
    pgs_config_t c = PGS_CONFIG_INIT;
    c.algo = std::get<0>(GetParam());
    c.wire_dtype = std::get<2>(GetParam());
    c.density = 0.02;
    c.warmup_steps = 1;
    c.tau = 3;
    c.tau_prime = 2;
    return c;
  }
  int ranks() const { return std::get<1>(GetParam()); }
};

TEST_P(Threads, ConservesAndAgrees) {
  const size_t n = 2003;
  const int P = ranks(), steps = 6;
  const pgs_config_t cfg = config();
  World calls = run_world(P, cfg, n, steps);
  const bool narrow = cfg.wire_dtype != PGS_FLOAT32;
  for (int s = 0; s < steps; ++s) {
    int bad = 0;
    for (int r = 0; r < P; ++r) ASSERT_EQ(calls[r][s].status, PGS_OK) << s;
    // Sums formed in the 16-bit type (dense calls, gTop-k's values) round
    // once per element here.
    const bool wire_sum =
        narrow && (calls[0][s].dense || cfg.algo == PGS_ALGO_GTOPK);
    const double rel = wire_sum ? 0x1p-7 : 2e-6;
    for (size_t i = 0; i < n; ++i) {
      double lhs = P * static_cast<double>(calls[0][s].out[i]), rhs = 0,
             mag = 0;
      for (int r = 0; r < P; ++r) {
        lhs += calls[r][s].resid[i];
        rhs += calls[r][s].acc[i];
        mag += std::fabs(calls[r][s].acc[i]);
        bad += calls[r][s].out[i] != calls[0][s].out[i];
      }
      bad += std::fabs(lhs - rhs) > rel * mag + 1e-30;
    }
    EXPECT_EQ(bad, 0) << "step " << s;
  }
}

TEST_P(Threads, SameBitsAgain) {
  const size_t n = 1001;
  const int P = ranks();
  World a = run_world(P, config(), n, 4), b = run_world(P, config(), n, 4);
  for (int r = 0; r < P; ++r)
    for (int s = 0; s < 4; ++s) {
      EXPECT_EQ(std::memcmp(a[r][s].out.data(), b[r][s].out.data(), n * 4), 0);
      EXPECT_EQ(std::memcmp(a[r][s].resid.data(), b[r][s].resid.data(), n * 4),
                0);
    }
}

INSTANTIATE_TEST_SUITE_P(
    All, Threads,
    testing::Combine(testing::Values(PGS_ALGO_DENSE, PGS_ALGO_TOPKA,
                                     PGS_ALGO_TOPKDSA, PGS_ALGO_GTOPK,
                                     PGS_ALGO_GAUSSIANK, PGS_ALGO_OKTOPK),
                     testing::Values(2, 3, 4, 8, 16),
                     testing::Values(PGS_FLOAT32, PGS_BFLOAT16)),
    [](const testing::TestParamInfo<Param> &i) {
      return std::string(pgs_algo_name(std::get<0>(i.param))) + "_P" +
             std::to_string(std::get<1>(i.param)) +
             (std::get<2>(i.param) == PGS_FLOAT32 ? "_f32" : "_bf16");
    });

}  // namespace
