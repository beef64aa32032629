// Algorithm tests: every sparse allreduce against independent oracles, over
// both transports at whatever P mpirun gave us, and over the thread
// transport with P threads as ranks in the threads build (tests/threads).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <numeric>
#include <tuple>

#include "harness.h"
#include "test_data.h"

namespace pgs_test {
namespace {

// Every row of the core's table: a new algorithm is tested by adding it.
constexpr pgs_algo_id_t kAllAlgos[] = {
#define PGS_TEST_ALGO_(id, name, vtable) id,
    PGS_ALGO_MAP(PGS_TEST_ALGO_)
#undef PGS_TEST_ALGO_
};

pgs_config_t make_config(pgs_algo_id_t algo, double density, int64_t warmup,
                         int64_t tau = 64, int64_t tau_prime = 32) {
  pgs_config_t c = PGS_CONFIG_INIT;
  c.algo = algo;
  c.density = density;
  c.warmup_steps = warmup;
  c.tau = tau;
  c.tau_prime = tau_prime;
  return c;
}

// One bucket on one transport; each step records what the oracles need.
class Runner {
 public:
  Runner(Transport t, const pgs_config_t &cfg, size_t n,
         const pgs_ops_t *ops = pgs_ops_cpu())
      : n_(n) {
    comm_ = make_comm(t);
    if (comm_) status_ = pgs_bucket_create(&cfg, comm_.get(), ops, n, &b_);
  }
  ~Runner() { pgs_bucket_destroy(b_); }
  bool ok() const { return comm_ && status_ == PGS_OK && b_ != nullptr; }

  // Runs one call on grad; afterwards acc = grad + residual before (as the
  // library computes it, in fp32), out and resid are this rank's results.
  int step(const std::vector<float> &grad) {
    std::vector<float> before(n_);
    pgs_bucket_get_residual(b_, before.data());
    acc.resize(n_);
    for (size_t i = 0; i < n_; ++i) acc[i] = grad[i] + before[i];
    out.assign(n_, -12345.0f);
    int st = pgs_bucket_allreduce(b_, grad.data(), out.data());
    resid.resize(n_);
    pgs_bucket_get_residual(b_, resid.data());
    pgs_bucket_stats(b_, &stats);
    return st;
  }

  // step() on every rank; true when every rank succeeded. Keeps ranks in
  // step when one fails, where an early ASSERT on one rank would hang them.
  bool step_all(const std::vector<float> &grad, int expect = PGS_OK) {
    int st = step(grad);
    EXPECT_EQ(st, expect) << pgs_status_name(st);
    return all_ranks(st == expect);
  }

  pgs_bucket_t *bucket() { return b_; }
  int status() const { return status_; }
  std::vector<float> acc, out, resid;
  pgs_stats_t stats{};

 private:
  size_t n_;
  CommPtr comm_;
  pgs_bucket_t *b_ = nullptr;
  int status_ = PGS_ERR_INVALID;
};

// sum_r resid_r + P * out == sum_r acc_r, elementwise, up to rounding (fp32
// by default). Checked on every rank with everyone's data; returns the
// failing count.
int conservation_failures(const Runner &run, size_t n, double rel = 2e-6) {
  const int P = world_size();
  std::vector<float> acc = allgather(run.acc), res = allgather(run.resid);
  std::vector<float> outs = allgather(run.out);
  int bad = 0;
  for (size_t i = 0; i < n; ++i) {
    double lhs = P * static_cast<double>(run.out[i]), rhs = 0.0, mag = 0.0;
    for (int r = 0; r < P; ++r) {
      lhs += res[r * n + i];
      rhs += acc[r * n + i];
      mag += std::fabs(acc[r * n + i]);
      // Every rank must return the same output.
      if (outs[r * n + i] != run.out[i]) ++bad;
    }
    if (std::fabs(lhs - rhs) > rel * mag + 1e-30) ++bad;
  }
  return bad;
}

// Exact top-k of |x| with ties to the lowest index, as a 0/1 mask.
std::vector<char> topk_mask(const float *x, size_t n, int64_t k) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::fabs(x[a]) > std::fabs(x[b]);
  });
  std::vector<char> mask(n, 0);
  for (int64_t j = 0; j < k && j < static_cast<int64_t>(n); ++j)
    if (x[order[j]] != 0.0f) mask[order[j]] = 1;
  return mask;
}

int64_t target_k(double density, size_t n) {
  int64_t k = static_cast<int64_t>(std::floor(density * n + 0.5));
  return std::clamp<int64_t>(k, 1, static_cast<int64_t>(n));
}

using AlgoParam = std::tuple<pgs_algo_id_t, Transport>;

class AlgoTest : public testing::TestWithParam<AlgoParam> {
 protected:
  pgs_algo_id_t algo() const { return std::get<0>(GetParam()); }
  Transport transport() const { return std::get<1>(GetParam()); }
};

std::string param_name(const testing::TestParamInfo<AlgoParam> &info) {
  return std::string(pgs_algo_name(std::get<0>(info.param))) + "_" +
         transport_name(std::get<1>(info.param));
}

// Density 1.0: every algorithm is the dense average.
TEST_P(AlgoTest, DensityOneEqualsDenseAverage) {
  on_every_rank([&] {
    const size_t n = 1031;
    Runner run(transport(), make_config(algo(), 1.0, 0), n);
    ASSERT_TRUE(all_ranks(run.ok()));
    const int P = world_size();
    for (int64_t step = 0; step < 3; ++step) {
      auto g = normal_data(n, 11, world_rank(), step);
      ASSERT_TRUE(run.step_all(g));
      std::vector<float> all = allgather(g);
      int bad = 0;
      for (size_t i = 0; i < n; ++i) {
        double sum = 0.0, mag = 0.0;
        for (int r = 0; r < P; ++r)
          sum += all[r * n + i], mag += std::fabs(all[r * n + i]);
        if (std::fabs(run.out[i] - sum / P) > 1e-6 * mag / P + 1e-30) ++bad;
        if (run.resid[i] != 0.0f) ++bad;
      }
      EXPECT_EQ(bad, 0) << "step " << step;
    }
  });
}

// Nothing lost: the conservation invariant over 60 steps of fresh data, with
// warm-up, threshold reuse and repartitioning all exercised.
TEST_P(AlgoTest, ConservationOverManySteps) {
  on_every_rank([&] {
    const size_t n = 4099;
    Runner run(transport(), make_config(algo(), 0.02, 2, 8, 4), n);
    ASSERT_TRUE(all_ranks(run.ok()));
    for (int64_t step = 0; step < 60; ++step) {
      auto g = normal_data(n, 23, world_rank(), step);
      ASSERT_TRUE(run.step_all(g));
      EXPECT_EQ(conservation_failures(run, n), 0) << "step " << step;
      EXPECT_EQ(run.stats.step, step);
      EXPECT_EQ(run.stats.dense != 0, step < 2 || algo() == PGS_ALGO_DENSE);
    }
  });
}

// A density schedule (pgs_bucket_set_density between calls): every call
// selects the k of its density and nothing is lost across the changes.
TEST_P(AlgoTest, DensityScheduleKeepsConservation) {
  on_every_rank([&] {
    const size_t n = 4099;
    Runner run(transport(), make_config(algo(), 0.01, 1, 8, 4), n);
    ASSERT_TRUE(all_ranks(run.ok()));
    const double schedule[] = {0.25, 0.1, 0.04, 0.01, 0.01, 0.2, 0.01};
    for (int64_t step = 0; step < 7; ++step) {
      ASSERT_EQ(pgs_bucket_set_density(run.bucket(), schedule[step]), PGS_OK);
      ASSERT_TRUE(run.step_all(normal_data(n, 29, world_rank(), step)));
      EXPECT_EQ(run.stats.k, target_k(schedule[step], n)) << "step " << step;
      EXPECT_EQ(conservation_failures(run, n), 0) << "step " << step;
    }
    EXPECT_EQ(pgs_bucket_set_density(run.bucket(), 0.0), PGS_ERR_INVALID);
    EXPECT_EQ(pgs_bucket_set_density(run.bucket(), 1.5), PGS_ERR_INVALID);
    EXPECT_EQ(pgs_bucket_set_density(run.bucket(), NAN), PGS_ERR_INVALID);
    EXPECT_EQ(pgs_bucket_set_density(nullptr, 0.1), PGS_ERR_INVALID);
  });
}

// A dense/sparse choice (pgs_bucket_set_dense between calls): a dense call
// flushes the residual into the sum (output = average of g + r, residual
// zero afterwards), sparse calls resume, and nothing is lost at any switch.
TEST_P(AlgoTest, DenseChoiceFlushesResidual) {
  on_every_rank([&] {
    const size_t n = 3001;
    Runner run(transport(), make_config(algo(), 0.02, 0, 8, 4), n);
    ASSERT_TRUE(all_ranks(run.ok()));
    const int choice[] = {0, 0, 1, 0, 0, 1, 1, 0};
    for (int64_t step = 0; step < 8; ++step) {
      ASSERT_EQ(pgs_bucket_set_dense(run.bucket(), choice[step]), PGS_OK);
      ASSERT_TRUE(run.step_all(normal_data(n, 37, world_rank(), step)));
      EXPECT_EQ(conservation_failures(run, n), 0) << "step " << step;
      EXPECT_EQ(run.stats.dense != 0, choice[step] || algo() == PGS_ALGO_DENSE)
          << "step " << step;
      if (choice[step]) {
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(run.resid[i], 0.0f) << i;
      }
    }
    EXPECT_EQ(pgs_bucket_set_dense(run.bucket(), 2), PGS_ERR_INVALID);
    EXPECT_EQ(pgs_bucket_set_dense(nullptr, 1), PGS_ERR_INVALID);
  });
}

// Ranks that choose differently fail the next call on every rank.
TEST_P(AlgoTest, DenseChoiceComparedAcrossRanks) {
  on_every_rank([&] {
    if (world_size() < 2) GTEST_SKIP() << "needs two ranks";
    const size_t n = 500;
    Runner run(transport(), make_config(algo(), 0.05, 0), n);
    ASSERT_TRUE(all_ranks(run.ok()));
    ASSERT_TRUE(run.step_all(normal_data(n, 41, world_rank(), 0)));
    ASSERT_EQ(pgs_bucket_set_dense(run.bucket(), world_rank() == 0), PGS_OK);
    EXPECT_EQ(run.step(normal_data(n, 41, world_rank(), 1)), PGS_ERR_MISMATCH);
  });
}

// In-place output (DDP hands the bucket buffer in and takes it back).
TEST_P(AlgoTest, InPlaceOutput) {
  on_every_rank([&] {
    const size_t n = 2000;
    Runner ref(transport(), make_config(algo(), 0.05, 0), n);
    Runner inplace(transport(), make_config(algo(), 0.05, 0), n);
    ASSERT_TRUE(all_ranks(ref.ok() && inplace.ok()));
    for (int64_t step = 0; step < 4; ++step) {
      auto g = normal_data(n, 5, world_rank(), step);
      ASSERT_TRUE(ref.step_all(g));
      std::vector<float> buf = g;
      ASSERT_EQ(pgs_bucket_allreduce(inplace.bucket(), buf.data(), buf.data()),
                PGS_OK);
      EXPECT_EQ(std::memcmp(buf.data(), ref.out.data(), n * sizeof(float)), 0);
    }
  });
}

// Edge shapes: n < P, n not divisible by P, n = 1, k = 1.
TEST_P(AlgoTest, EdgeSizes) {
  on_every_rank([&] {
    const int P = world_size();
    const size_t sizes[] = {1, 2, static_cast<size_t>(P > 1 ? P - 1 : 1),
                            static_cast<size_t>(7 * P + 3)};
    const double densities[] = {0.001, 0.3, 1.0};
    for (size_t n : sizes) {
      for (double d : densities) {
        Runner run(transport(), make_config(algo(), d, 1, 2, 2), n);
        ASSERT_TRUE(all_ranks(run.ok()));
        for (int64_t step = 0; step < 6; ++step) {
          auto g = normal_data(n, 31, world_rank(), step);
          ASSERT_TRUE(run.step_all(g)) << "n=" << n << " d=" << d;
          EXPECT_EQ(conservation_failures(run, n), 0)
              << "n=" << n << " d=" << d;
        }
      }
    }
  });
}

// All-zero input: zero output, zero residual, no error.
TEST_P(AlgoTest, AllZeroInput) {
  on_every_rank([&] {
    const size_t n = 999;
    Runner run(transport(), make_config(algo(), 0.01, 0, 2, 2), n);
    ASSERT_TRUE(all_ranks(run.ok()));
    std::vector<float> zeros(n, 0.0f);
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE(run.step_all(zeros));
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(run.out[i], 0.0f);
        EXPECT_EQ(run.resid[i], 0.0f);
      }
    }
  });
}

// One rank selects nothing (its gradient is zero); the others still reduce.
TEST_P(AlgoTest, OneRankWithoutSelection) {
  on_every_rank([&] {
    const size_t n = 3001;
    Runner run(transport(), make_config(algo(), 0.01, 0, 4, 2), n);
    ASSERT_TRUE(all_ranks(run.ok()));
    for (int64_t step = 0; step < 8; ++step) {
      auto g = normal_data(n, 41, world_rank(), step);
      if (world_rank() == 0) std::fill(g.begin(), g.end(), 0.0f);
      ASSERT_TRUE(run.step_all(g));
      EXPECT_EQ(conservation_failures(run, n), 0) << "step " << step;
      if (world_rank() == 0 && algo() != PGS_ALGO_DENSE &&
          algo() != PGS_ALGO_GTOPK) {
        EXPECT_EQ(run.stats.local_selected, 0);
      }
    }
  });
}

// Ties at the threshold: many equal magnitudes.
TEST_P(AlgoTest, TiesAtThreshold) {
  on_every_rank([&] {
    const size_t n = 1200;
    const int64_t k = target_k(0.05, n);
    Runner run(transport(), make_config(algo(), 0.05, 0, 4, 2), n);
    ASSERT_TRUE(all_ranks(run.ok()));
    for (int64_t step = 0; step < 6; ++step) {
      std::vector<float> g(n);
      auto noise = normal_data(n, 53, world_rank(), step);
      // Three magnitudes only, so the k-th value is tied hundreds of times.
      for (size_t i = 0; i < n; ++i)
        g[i] = (noise[i] > 0 ? 1.0f : -1.0f) *
               (1.0f + std::floor(std::fabs(noise[i]) * 1.5f));
      ASSERT_TRUE(run.step_all(g));
      EXPECT_EQ(conservation_failures(run, n), 0) << "step " << step;
      if (algo() == PGS_ALGO_TOPKA || algo() == PGS_ALGO_TOPKDSA ||
          algo() == PGS_ALGO_GTOPK) {
        EXPECT_EQ(run.stats.local_selected, k);
      }
      if (algo() == PGS_ALGO_GAUSSIANK) {
        EXPECT_LE(run.stats.local_selected, 2 * k);
      }
    }
  });
}

// A NaN on one rank fails the call on every rank, leaving the state as is.
TEST_P(AlgoTest, NonFiniteFailsEverywhere) {
  on_every_rank([&] {
    const size_t n = 500;
    Runner run(transport(), make_config(algo(), 0.1, 0), n);
    ASSERT_TRUE(all_ranks(run.ok()));
    auto g = normal_data(n, 61, world_rank(), 0);
    if (world_rank() == world_size() - 1) g[17] = NAN;
    EXPECT_EQ(run.step(g), PGS_ERR_NONFINITE);
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(run.resid[i], 0.0f);
    g = normal_data(n, 61, world_rank(), 1);
    EXPECT_EQ(run.step(g), PGS_OK);
    EXPECT_EQ(run.stats.step, 0);
  });
}

// Once the first call has checked the bucket, a NaN or Inf on one rank still
// fails every rank and leaves the residual as it was: dense calls (warm-up
// here) find it in the reduced sum and never touch the residual; sparse calls
// carry the flag in their first message and take the fused add back, which
// restores the residual up to the rounding of r + g - g.
TEST_P(AlgoTest, NonFiniteAfterFirstCallFailsEverywhere) {
  on_every_rank([&] {
    const size_t n = 500;
    Runner run(transport(), make_config(algo(), 0.1, 2), n);
    ASSERT_TRUE(all_ranks(run.ok()));
    for (int64_t step = 0; step < 4; ++step) {
      ASSERT_TRUE(run.step_all(normal_data(n, 62, world_rank(), step)));
      std::vector<float> kept = run.resid;
      auto g = normal_data(n, 62, world_rank(), step + 10);
      if (world_rank() == world_size() - 1)
        g[(size_t)step * 7] = step % 2 ? INFINITY : NAN;
      ASSERT_TRUE(run.step_all(g, PGS_ERR_NONFINITE)) << "step " << step;
      const bool dense = step + 1 < 2;  // the failing call is call step + 1
      for (size_t i = 0; i < n; ++i) {
        const float add = std::isfinite(g[i]) ? std::fabs(g[i]) : 0.0f;
        const float tol =
            dense ? 0.0f : FLT_EPSILON * (std::fabs(kept[i]) + add);
        EXPECT_LE(std::fabs(run.resid[i] - kept[i]), tol)
            << "step " << step << " i " << i;
      }
    }
  });
}

// PGS_FINITE_EXACT: the same failure, and the residual comes back bit for
// bit after real sparse calls (the hooks' nonfinite="skip" policy).
TEST_P(AlgoTest, NonFiniteExactRestoresResidualBits) {
  on_every_rank([&] {
    const size_t n = 500;
    pgs_config_t cfg = make_config(algo(), 0.1, 1, 3, 2);
    cfg.check_finite = PGS_FINITE_EXACT;
    Runner run(transport(), cfg, n);
    ASSERT_TRUE(all_ranks(run.ok()));
    for (int64_t step = 0; step < 5; ++step) {
      ASSERT_TRUE(run.step_all(normal_data(n, 63, world_rank(), step)));
      std::vector<float> kept = run.resid;
      auto g = normal_data(n, 63, world_rank(), step + 10);
      if (world_rank() == 0) g[(size_t)step * 5] = step % 2 ? -INFINITY : NAN;
      ASSERT_TRUE(run.step_all(g, PGS_ERR_NONFINITE)) << "step " << step;
      EXPECT_EQ(std::memcmp(run.resid.data(), kept.data(), n * 4), 0) << step;
    }
    EXPECT_TRUE(run.step_all(normal_data(n, 63, world_rank(), 99)));
    EXPECT_EQ(conservation_failures(run, n), 0);
  });
}

// Without check_finite nothing fails: a sparse call drops the non-finite
// entry (never added to the residual, so the residual stays finite and the
// rest of the call is exact), a dense call reduces it as it is (NaN there
// on every rank, as DDP's own allreduce would give).
TEST_P(AlgoTest, UncheckedNonFiniteIsDroppedOrReduced) {
  on_every_rank([&] {
    const size_t n = 500;
    pgs_config_t cfg = make_config(algo(), 0.1, 0);
    cfg.check_finite = 0;
    Runner run(transport(), cfg, n);
    ASSERT_TRUE(all_ranks(run.ok()));
    for (int64_t step = 0; step < 3; ++step) {
      auto g = normal_data(n, 64, world_rank(), step);
      const bool bad_rank = world_rank() == world_size() - 1;
      const std::vector<float> kept =
          bad_rank ? run.resid : std::vector<float>{};
      if (bad_rank) g[17] = NAN;
      ASSERT_TRUE(run.step_all(g)) << "step " << step;
      const bool dense = algo() == PGS_ALGO_DENSE;
      for (size_t i = 0; i < n; ++i) {
        EXPECT_TRUE(std::isfinite(run.resid[i]))
            << "step " << step << " i " << i;
        if (!dense || i != 17) {
          EXPECT_TRUE(std::isfinite(run.out[i]))
              << "step " << step << " i " << i;
        }
      }
      if (dense) {
        EXPECT_TRUE(std::isnan(run.out[17])) << "step " << step;
      } else if (bad_rank && step > 0) {
        // Entry 17 kept what it had: nothing was added to it.
        EXPECT_TRUE(run.resid[17] == kept[17] || run.resid[17] == 0.0f)
            << "step " << step;
      }
    }
  });
}

// Transport calls of a steady call (no threshold recompute, no
// repartition), by algorithm and P, never by n: exchange batches of four
// steps in phase 1 (B), the tree's swaps for gTop-k. The settings check runs
// on the first call only, and no call makes a control message of its own
// for the input flags (they ride in the counts).
int64_t steady_calls(pgs_algo_id_t algo, int P, bool dense_gather) {
  const int64_t B = (P - 1 + 3) / 4;
  int64_t log2p = 0;
  while ((2 << log2p) <= P) ++log2p;
  switch (algo) {
    case PGS_ALGO_DENSE: return 1;  // the allreduce
    case PGS_ALGO_TOPKA:            // counts, pairs
    case PGS_ALGO_GAUSSIANK: return 2;
    case PGS_ALGO_TOPKDSA: return 2 + B + (dense_gather ? 1 : 2);
    case PGS_ALGO_GTOPK: return 2 * (2 + log2p) + 1;  // swaps, values
    case PGS_ALGO_OKTOPK: return 4 + B;  // counts, B, info, balance, gather
    default: return -1;
  }
}

TEST_P(AlgoTest, TransportCallBudgetIndependentOfN) {
  on_every_rank([&] {
    const int P = world_size();
    for (size_t n : {size_t{6000}, size_t{60000}}) {
      Runner run(transport(), make_config(algo(), 0.01, 0, 1000, 1000), n);
      ASSERT_TRUE(all_ranks(run.ok()));
      int steady = 0;
      for (int64_t step = 0; step < 20; ++step) {
        auto g = normal_data(n, 81, world_rank(), step);
        ASSERT_TRUE(run.step_all(g)) << "step " << step;
        const pgs_stats_t &st = run.stats;
        // TopkDSA gathers densely when the union is large.
        const bool dense_gather = 3 * st.global_selected > (int64_t)n;
        const int64_t want = steady_calls(algo(), P, dense_gather);
        EXPECT_EQ(st.host_syncs, 0);  // host memory: nothing to wait for
        // A local threshold recompute is local work; a global one and a
        // repartition add collectives, and the first call adds the check.
        if (step == 0) {
          EXPECT_GT(st.transport_calls, want);
          continue;
        }
        if (st.global_recomputed || st.repartitioned) continue;
        EXPECT_EQ(st.transport_calls, want) << "n " << n << " step " << step;
        ++steady;
      }
      EXPECT_GT(steady, 2) << "n " << n;
    }
  });
}

// Determinism: two buckets fed the same inputs give bitwise the same output
// and residual at every step (fixed reduction orders, no races), threshold
// reuse and repartitioning included.
TEST_P(AlgoTest, SameInputsGiveSameBits) {
  on_every_rank([&] {
    const size_t n = 3001;
    Runner a(transport(), make_config(algo(), 0.03, 1, 4, 2), n);
    Runner b(transport(), make_config(algo(), 0.03, 1, 4, 2), n);
    ASSERT_TRUE(all_ranks(a.ok() && b.ok()));
    for (int64_t step = 0; step < 15; ++step) {
      auto g = normal_data(n, 97, world_rank(), step);
      ASSERT_TRUE(a.step_all(g));
      ASSERT_TRUE(b.step_all(g));
      EXPECT_EQ(std::memcmp(a.out.data(), b.out.data(), n * 4), 0) << step;
      EXPECT_EQ(std::memcmp(a.resid.data(), b.resid.data(), n * 4), 0) << step;
    }
  });
}

// A deferred call (DDP's reducer) on the host ops: every check is made at
// once there, so it returns what pgs_bucket_allreduce returns, bit for bit.
TEST_P(AlgoTest, DeferredCallEqualsPlainCall) {
  on_every_rank([&] {
    const size_t n = 3001;
    Runner ref(transport(), make_config(algo(), 0.03, 1, 4, 2), n);
    Runner def(transport(), make_config(algo(), 0.03, 1, 4, 2), n);
    ASSERT_TRUE(all_ranks(ref.ok() && def.ok()));
    std::vector<float> out(n), resid(n);
    for (int64_t step = 0; step < 8; ++step) {
      auto g = normal_data(n, 98, world_rank(), step);
      ASSERT_TRUE(ref.step_all(g));
      const int st =
          pgs_bucket_allreduce_deferred(def.bucket(), g.data(), out.data());
      ASSERT_TRUE(all_ranks(st == PGS_OK)) << pgs_status_name(st);
      ASSERT_EQ(pgs_bucket_get_residual(def.bucket(), resid.data()), PGS_OK);
      EXPECT_EQ(std::memcmp(out.data(), ref.out.data(), n * 4), 0) << step;
      EXPECT_EQ(std::memcmp(resid.data(), ref.resid.data(), n * 4), 0) << step;
    }
  });
}

// The host table with its set_sorted calls counted (ctx: the count).
int counted_set_sorted(const pgs_ops_t *o, float *x, size_t n,
                       const int32_t *idx, const float *val, size_t m,
                       float scale) {
  ++*static_cast<int *>(o->ctx);
  return pgs_ops_cpu()->set_sorted(o, x, n, idx, val, m, scale);
}

// A table's one-pass set_sorted gives the outputs and residuals of its
// fill_zero and scatter_add_sorted (a table without it), bit for bit, and
// every sparse algorithm lands its result through it.
TEST_P(AlgoTest, OnePassSetSortedEqualsTwoCalls) {
  on_every_rank([&] {
    const size_t n = 3001;
    int calls[2] = {0, 0};
    pgs_ops_t ops[2] = {*pgs_ops_cpu(), *pgs_ops_cpu()};
    for (int fused = 0; fused < 2; ++fused) {
      ops[fused].ctx = &calls[fused];
      ops[fused].set_sorted = fused ? counted_set_sorted : nullptr;
    }
    Runner two(transport(), make_config(algo(), 0.03, 1, 4, 2), n, &ops[0]);
    Runner one(transport(), make_config(algo(), 0.03, 1, 4, 2), n, &ops[1]);
    ASSERT_TRUE(all_ranks(two.ok() && one.ok()));
    for (int64_t step = 0; step < 6; ++step) {
      auto g = normal_data(n, 97, world_rank(), step);
      ASSERT_TRUE(two.step_all(g));
      ASSERT_TRUE(one.step_all(g));
      EXPECT_EQ(std::memcmp(one.out.data(), two.out.data(), n * 4), 0) << step;
      EXPECT_EQ(std::memcmp(one.resid.data(), two.resid.data(), n * 4), 0)
          << step;
    }
    EXPECT_EQ(calls[0], 0);
    // The sparse steps (after the one dense warm-up step) land through it.
    if (algo() != PGS_ALGO_DENSE) {
      EXPECT_GE(calls[1], 5);
    }
  });
}

// Buckets of different sizes across ranks are rejected on every rank.
TEST_P(AlgoTest, MismatchedSizesFailEverywhere) {
  on_every_rank([&] {
    if (world_size() == 1) GTEST_SKIP() << "needs two ranks";
    const size_t n = 300 + (world_rank() == 1 ? 1 : 0);
    Runner run(transport(), make_config(algo(), 0.1, 0), n);
    ASSERT_TRUE(all_ranks(run.ok()));
    auto g = normal_data(n, 71, world_rank(), 0);
    EXPECT_EQ(run.step(g), PGS_ERR_MISMATCH);
  });
}

INSTANTIATE_TEST_SUITE_P(All, AlgoTest,
                         testing::Combine(testing::ValuesIn(kAllAlgos),
                                          testing::ValuesIn(all_transports())),
                         param_name);

// ---- values on a narrow wire (fp16, bf16) --------------------------------

using WireParam = std::tuple<pgs_algo_id_t, pgs_dtype_t, Transport>;

class WireTest : public testing::TestWithParam<WireParam> {
 protected:
  pgs_algo_id_t algo() const { return std::get<0>(GetParam()); }
  pgs_dtype_t wire() const { return std::get<1>(GetParam()); }
  Transport transport() const { return std::get<2>(GetParam()); }
  pgs_config_t config(double density, int64_t warmup,
                      pgs_dtype_t wire_dtype) const {
    pgs_config_t c = make_config(algo(), density, warmup, 8, 4);
    c.wire_dtype = wire_dtype;
    return c;
  }
  float round(float x) const {
    return wire() == PGS_FLOAT16 ? pgs_test_data::round_f16(x)
                                 : pgs_test_data::round_bf16(x);
  }
  // Unit roundoff of the wire type: a sum formed in it (dense calls, gTop-k's
  // values at G) rounds at most once per combine.
  double eps() const { return wire() == PGS_FLOAT16 ? 0x1p-11 : 0x1p-8; }
};

std::string wire_name(const testing::TestParamInfo<WireParam> &info) {
  const char *dt = std::get<1>(info.param) == PGS_FLOAT16 ? "f16" : "bf16";
  return std::string(pgs_algo_name(std::get<0>(info.param))) + "_" + dt + "_" +
         transport_name(std::get<2>(info.param));
}

// Nothing lost on a narrow wire: each rank keeps what rounding its values
// left out, so the invariant holds to fp32 rounding wherever sums are formed
// in fp32, and to the wire type's where they are formed in it.
TEST_P(WireTest, ConservationHolds) {
  on_every_rank([&] {
    const size_t n = 4099;
    const int P = world_size();
    Runner run(transport(), config(0.02, 2, wire()), n);
    ASSERT_TRUE(all_ranks(run.ok()));
    for (int64_t step = 0; step < 30; ++step) {
      ASSERT_TRUE(run.step_all(normal_data(n, 23, world_rank(), step)));
      // Open MPI and the thread transport sum 16-bit values in their type;
      // the test's ext transport widens them first.
      const bool wire_sum = (run.stats.dense || algo() == PGS_ALGO_GTOPK) &&
                            transport() != Transport::kExt;
      const double rel = wire_sum && P > 1 ? eps() * P : 2e-6;
      EXPECT_EQ(conservation_failures(run, n, rel), 0) << "step " << step;
      if (P > 1) continue;
      // Alone, the output is exactly what the wire carried.
      int bad = 0;
      for (size_t i = 0; i < n; ++i) bad += round(run.out[i]) != run.out[i];
      EXPECT_EQ(bad, 0) << "step " << step;
    }
  });
}

// The same first call on an fp32 and a narrow wire: the value bytes halve,
// so a pair costs 6 bytes instead of 8 and a dense value 2 instead of 4.
TEST_P(WireTest, ValuesTakeHalfTheBytes) {
  on_every_rank([&] {
    const int P = world_size();
    if (P == 1) GTEST_SKIP() << "no data moves at P = 1";
    const size_t n = 6007;
    Runner wide(transport(), config(0.05, 0, PGS_FLOAT32), n);
    Runner narrow(transport(), config(0.05, 0, wire()), n);
    ASSERT_TRUE(all_ranks(wide.ok() && narrow.ok()));
    auto g = normal_data(n, 41, world_rank(), 0);
    ASSERT_TRUE(wide.step_all(g));
    ASSERT_TRUE(narrow.step_all(g));
    int64_t w32 = 0, w16 = 0;
    for (int p = 0; p < PGS_PHASE_COUNT; ++p) {
      w32 += wide.stats.words_sent[p];
      w16 += narrow.stats.words_sent[p];
    }
    ASSERT_GT(w32, 0);
    const double ratio = static_cast<double>(w16) / static_cast<double>(w32);
    if (algo() == PGS_ALGO_DENSE) {
      // The test's ext transport has no 16-bit sum, so dense values travel
      // as fp32 there (rounded all the same).
      EXPECT_NEAR(ratio, transport() == Transport::kExt ? 1.0 : 0.5, 0.01);
    } else if (algo() == PGS_ALGO_TOPKA || algo() == PGS_ALGO_GAUSSIANK) {
      EXPECT_EQ(narrow.stats.local_selected, wide.stats.local_selected);
      EXPECT_NEAR(ratio, 0.75, 0.01);
    } else {
      EXPECT_LT(ratio, 0.9);
    }
  });
}

// TopkA against brute force: every rank's exact top-k, each value rounded to
// the wire type by an independent oracle, summed over ranks.
TEST_P(WireTest, TopkaMatchesRoundedBruteForce) {
  on_every_rank([&] {
    if (algo() != PGS_ALGO_TOPKA) GTEST_SKIP() << "topka only";
    const size_t n = 5003;
    const int P = world_size();
    const int64_t k = target_k(0.01, n);
    Runner run(transport(), config(0.01, 0, wire()), n);
    ASSERT_TRUE(all_ranks(run.ok()));
    for (int64_t step = 0; step < 6; ++step) {
      ASSERT_TRUE(run.step_all(normal_data(n, 83, world_rank(), step)));
      std::vector<float> acc = allgather(run.acc);
      std::vector<double> expect(n, 0.0), mag(n, 0.0);
      for (int r = 0; r < P; ++r) {
        auto mask = topk_mask(&acc[r * n], n, k);
        for (size_t i = 0; i < n; ++i)
          if (mask[i]) {
            expect[i] += round(acc[r * n + i]);
            mag[i] += std::fabs(acc[r * n + i]);
          }
      }
      int bad = 0;
      for (size_t i = 0; i < n; ++i)
        if (std::fabs(expect[i] / P - run.out[i]) > 1e-6 * mag[i]) ++bad;
      EXPECT_EQ(bad, 0) << "step " << step;
    }
  });
}

// Ranks that disagree on the wire type fail on every rank, before a value
// travels.
TEST_P(WireTest, MismatchedWireFailsEverywhere) {
  on_every_rank([&] {
    if (world_size() == 1) GTEST_SKIP() << "needs two ranks";
    const size_t n = 300;
    Runner run(transport(),
               config(0.1, 0, world_rank() == 1 ? PGS_FLOAT32 : wire()), n);
    ASSERT_TRUE(all_ranks(run.ok()));
    EXPECT_EQ(run.step(normal_data(n, 72, world_rank(), 0)), PGS_ERR_MISMATCH);
  });
}

INSTANTIATE_TEST_SUITE_P(All, WireTest,
                         testing::Combine(testing::ValuesIn(kAllAlgos),
                                          testing::Values(PGS_FLOAT16,
                                                          PGS_BFLOAT16),
                                          testing::ValuesIn(all_transports())),
                         wire_name);

class TransportTest : public testing::TestWithParam<Transport> {};

// TopkA and TopkDSA equal the brute-force sum of every rank's exact top-k,
// over P: on data of a few levels (the sums stay on their lattice, so the
// k-th value is tied and ties go in index order), then on normal data;
// whether a call selected from its candidate list or over all of n.
TEST_P(TransportTest, TopkaMatchesBruteForce) {
  on_every_rank([&] {
    const size_t n = 5003;
    const int P = world_size();
    const int64_t k = target_k(0.01, n);
    for (pgs_algo_id_t algo : {PGS_ALGO_TOPKA, PGS_ALGO_TOPKDSA}) {
      Runner run(GetParam(), make_config(algo, 0.01, 0), n);
      ASSERT_TRUE(all_ranks(run.ok()));
      int listed = 0;
      for (int64_t step = 0; step < 16; ++step) {
        const uint64_t seed = 83 + 1000 * world_rank() + step;
        ASSERT_TRUE(run.step_all(step < 8
                                     ? pgs_test_data::tied(n, seed, 5, 0.3)
                                     : normal_data(n, 83, world_rank(), step)));
        listed += static_cast<int>(run.stats.candidates);
        std::vector<float> acc = allgather(run.acc);
        std::vector<double> expect(n, 0.0), mag(n, 0.0);
        for (int r = 0; r < P; ++r) {
          auto mask = topk_mask(&acc[r * n], n, k);
          for (size_t i = 0; i < n; ++i)
            if (mask[i]) {
              expect[i] += acc[r * n + i];
              mag[i] += std::fabs(acc[r * n + i]);
            }
        }
        // The average in double; fp32 sums of terms that nearly cancel
        // round relative to the terms' magnitudes.
        int bad = 0;
        for (size_t i = 0; i < n; ++i)
          if (std::fabs(expect[i] / P - run.out[i]) > 1e-6 * mag[i]) ++bad;
        EXPECT_EQ(bad, 0) << pgs_algo_name(algo) << " step " << step;
        EXPECT_EQ(run.stats.local_selected, k) << pgs_algo_name(algo);
      }
      EXPECT_GE(listed, 8) << pgs_algo_name(algo)
                           << ": calls that selected from the list";
    }
  });
}

// gtopk: support of at most k entries, where the output is the exact average
// of every rank's accumulator (the exactness fix).
TEST_P(TransportTest, GtopkIsExactAtItsSupport) {
  on_every_rank([&] {
    const size_t n = 4000;
    const int P = world_size();
    const int64_t k = target_k(0.01, n);
    Runner run(GetParam(), make_config(PGS_ALGO_GTOPK, 0.01, 0), n);
    ASSERT_TRUE(all_ranks(run.ok()));
    int listed = 0;
    for (int64_t step = 0; step < 10; ++step) {
      ASSERT_TRUE(run.step_all(normal_data(n, 89, world_rank(), step)));
      std::vector<float> acc = allgather(run.acc);
      int64_t support = 0;
      int bad = 0;
      for (size_t i = 0; i < n; ++i) {
        if (run.out[i] == 0.0f) continue;
        ++support;
        double sum = 0.0, mag = 0.0;
        for (int r = 0; r < P; ++r)
          sum += acc[r * n + i], mag += std::fabs(acc[r * n + i]);
        // fp32 sums of values that nearly cancel: tolerance on the magnitudes.
        if (std::fabs(sum / P - run.out[i]) > 1e-6 * mag) ++bad;
        if (run.resid[i] != 0.0f) ++bad;
      }
      EXPECT_EQ(bad, 0);
      EXPECT_LE(support, k);
      EXPECT_EQ(support, run.stats.global_selected);
      listed += static_cast<int>(run.stats.candidates);
    }
    EXPECT_GE(listed, 5) << "calls that selected from the list";
  });
}

// The candidate list holds the k-th on nearly every call once error
// feedback has piled the residual just below the threshold: gradients of
// a fixed per-entry scale (as a model's are from step to step) make every
// unsent entry climb toward the threshold, so the count at slack * thr
// rises steeply as the slack falls. Fixed slack steps of 5-15% jumped
// across the band there (on this data 74-75 of the 100 calls counted
// listed, at P = 1 and 2; now all 100). The selection is exact either way
// (TopkaMatchesBruteForce), so the count of listed calls is the check.
TEST_P(TransportTest, CandidateListHoldsTheKthUnderErrorFeedback) {
  on_every_rank([&] {
    const size_t n = 40000;
    Runner run(GetParam(), make_config(PGS_ALGO_TOPKA, 0.01, 0), n);
    ASSERT_TRUE(all_ranks(run.ok()));
    const std::vector<float> scale = normal_data(n, 97, world_rank(), 0);
    int listed = 0, calls = 0;
    for (int64_t step = 0; step < 140; ++step) {
      std::vector<float> g = normal_data(n, 98, world_rank(), step);
      for (size_t i = 0; i < n; ++i) g[i] = scale[i] * (1.0f + 0.1f * g[i]);
      ASSERT_TRUE(run.step_all(g));
      if (step < 40) continue;
      ++calls;
      listed += static_cast<int>(run.stats.candidates);
    }
    EXPECT_GE(listed, calls * 9 / 10) << listed << " of " << calls;
  });
}

// gaussiank picks within [k/2, 2k] on every step.
TEST_P(TransportTest, GaussiankCountsInBand) {
  on_every_rank([&] {
    const size_t n = 20000;
    const int64_t k = target_k(0.01, n);
    Runner run(GetParam(), make_config(PGS_ALGO_GAUSSIANK, 0.01, 0), n);
    ASSERT_TRUE(all_ranks(run.ok()));
    for (int64_t step = 0; step < 10; ++step) {
      ASSERT_TRUE(run.step_all(normal_data(n, 97, world_rank(), step)));
      EXPECT_GE(run.stats.local_selected, (k + 1) / 2);
      EXPECT_LE(run.stats.local_selected, 2 * k);
    }
  });
}

// Laplace data (scale 1): the distribution SIDCo's exponential fit assumes.
std::vector<float> laplace_data(size_t n, uint64_t seed, int rank) {
  std::mt19937_64 gen(seed * 31ULL + static_cast<uint64_t>(rank));
  std::exponential_distribution<float> e(1.0f);
  std::bernoulli_distribution sign(0.5);
  std::vector<float> v(n);
  for (auto &x : v) x = sign(gen) ? e(gen) : -e(gen);
  return v;
}

// Heavy tails (Student t, 2 degrees of freedom): no estimator's model fits.
std::vector<float> heavy_data(size_t n, uint64_t seed, int rank) {
  std::mt19937_64 gen(seed * 37ULL + static_cast<uint64_t>(rank));
  std::student_t_distribution<float> t(2.0f);
  std::vector<float> v(n);
  for (auto &x : v) x = t(gen);
  return v;
}

// Every estimator on gaussiank and topkdsa: picks in [k/2, 2k] and nothing
// lost on any data; each model's first guess lands without correction on the
// data it assumes (Gaussian on normal data, SIDCo's exponential on Laplace
// data, DGC's sample on either); the exact estimator never guesses (nor does
// topkdsa's default, which is exact).
TEST_P(TransportTest, EstimatorsOnThresholdAlgorithms) {
  on_every_rank([&] {
    const size_t n = 200000;
    const int64_t k = target_k(0.01, n);
    struct Case {
      pgs_estimator_t est;
      int data;  // 0 normal, 1 Laplace, 2 heavy tails
      bool first_guess_lands;
    };
    const Case cases[] = {{PGS_EST_GAUSSIAN, 0, true},
                          {PGS_EST_DEFAULT, 0, true},
                          {PGS_EST_SIDCO_EXP, 1, true},
                          {PGS_EST_DGC_SAMPLE, 0, true},
                          {PGS_EST_DGC_SAMPLE, 1, true},
                          {PGS_EST_EXACT, 2, true},
                          {PGS_EST_GAUSSIAN, 2, false},
                          {PGS_EST_SIDCO_EXP, 2, false},
                          {PGS_EST_DGC_SAMPLE, 2, false},
                          {PGS_EST_SIDCO_EXP, 0, false},
                          {PGS_EST_SIDCO_GP, 1, true},
                          {PGS_EST_SIDCO_GAMMA, 1, true},
                          {PGS_EST_SIDCO_EXP_MS, 1, true},
                          {PGS_EST_SIDCO_GP_MS, 1, true},
                          {PGS_EST_SIDCO_GAMMA_GP_MS, 1, true},
                          {PGS_EST_SIDCO_GP, 0, false},
                          {PGS_EST_SIDCO_GP, 2, false},
                          {PGS_EST_SIDCO_GAMMA, 2, false},
                          {PGS_EST_SIDCO_EXP_MS, 2, false},
                          {PGS_EST_SIDCO_GP_MS, 2, false},
                          {PGS_EST_SIDCO_GAMMA_GP_MS, 2, false},
                          {PGS_EST_REUSE, 0, false},
                          {PGS_EST_REUSE, 2, false}};
    for (pgs_algo_id_t algo :
         {PGS_ALGO_GAUSSIANK, PGS_ALGO_TOPKDSA, PGS_ALGO_OKTOPK})
      for (const Case &c : cases) {
        const bool guesses =
            c.est != PGS_EST_EXACT &&
            !(algo != PGS_ALGO_GAUSSIANK && c.est == PGS_EST_DEFAULT);
        pgs_config_t cfg = make_config(algo, 0.01, 0);
        cfg.estimator = c.est;
        Runner run(GetParam(), cfg, n);
        ASSERT_TRUE(all_ranks(run.ok()));
        for (int64_t step = 0; step < 3; ++step) {
          std::vector<float> g =
              c.data == 0   ? normal_data(n, 13, world_rank(), step)
              : c.data == 1 ? laplace_data(n, 13 + step, world_rank())
                            : heavy_data(n, 13 + step, world_rank());
          ASSERT_TRUE(run.step_all(g));
          const std::string name = std::string(pgs_algo_name(algo)) + "/" +
                                   pgs_estimator_name(c.est);
          EXPECT_GE(run.stats.local_selected, (k + 1) / 2) << name;
          EXPECT_LE(run.stats.local_selected, 2 * k) << name;
          EXPECT_EQ(conservation_failures(run, n), 0) << name;
          if (step == 0 && c.first_guess_lands) {
            EXPECT_EQ(run.stats.estimate_corrections, 0)
                << name << " " << c.data;
          }
          if (c.est == PGS_EST_REUSE && step == 0) {  // nothing to reuse yet
            EXPECT_EQ(run.stats.estimate_corrections, 0) << name;
            EXPECT_EQ(run.stats.local_recomputed, 1) << name;
          }
          if (!guesses) {
            EXPECT_EQ(run.stats.estimate_corrections, 0) << name;
            EXPECT_EQ(run.stats.local_recomputed, 1) << name;
          }
        }
      }
  });
}

// The host table with its statistics passes counted (ctx: the counts).
struct StatCalls {
  int mean_std = 0, abs_stats = 0, accumulate_stats = 0, guess_select = 0;
};
StatCalls &calls_of(const pgs_ops_t *o) {
  return *static_cast<StatCalls *>(o->ctx);
}
int counted_mean_std(const pgs_ops_t *o, const float *x, size_t n, double *m,
                     double *sd) {
  ++calls_of(o).mean_std;
  return pgs_ops_cpu()->mean_std(o, x, n, m, sd);
}
int counted_abs_stats(const pgs_ops_t *o, const float *x, size_t n, float thr,
                      double out[5]) {
  ++calls_of(o).abs_stats;
  return pgs_ops_cpu()->abs_stats(o, x, n, thr, out);
}
int counted_accumulate_stats(const pgs_ops_t *o, float *r, const float *g,
                             size_t n, int64_t *bad, double out[7]) {
  ++calls_of(o).accumulate_stats;
  return pgs_ops_cpu()->accumulate_stats(o, r, g, n, bad, out);
}

// The add with its statistics, the guess and the list at it in one call
// (counted as an add with statistics).
int counted_guess_select(const pgs_ops_t *o, float *r, const float *g, size_t n,
                         const pgs_guess_rule_t *rule, int32_t *idx, float *val,
                         size_t cap, int64_t *bad, double out[7], float *thr,
                         int64_t *count) {
  ++calls_of(o).accumulate_stats;
  ++calls_of(o).guess_select;
  return pgs_ops_cpu()->accumulate_guess_select(o, r, g, n, rule, idx, val, cap,
                                                bad, out, thr, count);
}

// A statistics estimator's first guess takes the statistics its accumulate
// took (ops->accumulate_stats, where the device fuses them into the add; in
// GaussianK ops->accumulate_guess_select, where the device also guesses and
// selects without a host wait) instead of a pass of its own, and selects
// exactly what the separate passes of a table without either select.
TEST_P(TransportTest, FirstGuessTakesTheAccumulatesStatistics) {
  on_every_rank([&] {
    const size_t n = 50000;
    const int steps = 3;
    for (pgs_algo_id_t algo :
         {PGS_ALGO_GAUSSIANK, PGS_ALGO_TOPKDSA, PGS_ALGO_OKTOPK})
      for (pgs_estimator_t est :
           {PGS_EST_GAUSSIAN, PGS_EST_SIDCO_EXP, PGS_EST_SIDCO_GP_MS}) {
        pgs_config_t cfg = make_config(algo, 0.01, 0);
        cfg.estimator = est;
        const std::string name =
            std::string(pgs_algo_name(algo)) + "/" + pgs_estimator_name(est);
        StatCalls calls[2];
        std::vector<std::vector<float>> outs[2], resids[2];
        std::vector<double> thrs[2];
        for (int fused = 0; fused < 2; ++fused) {
          pgs_ops_t ops = *pgs_ops_cpu();
          ops.ctx = &calls[fused];
          ops.mean_std = counted_mean_std;
          ops.abs_stats = counted_abs_stats;
          ops.accumulate_stats = fused ? counted_accumulate_stats : nullptr;
          ops.accumulate_guess_select = fused ? counted_guess_select : nullptr;
          Runner run(GetParam(), cfg, n, &ops);
          ASSERT_TRUE(all_ranks(run.ok())) << name;
          for (int step = 0; step < steps; ++step) {
            ASSERT_TRUE(run.step_all(laplace_data(n, 5 + step, world_rank())));
            outs[fused].push_back(run.out);
            resids[fused].push_back(run.resid);
            thrs[fused].push_back(run.stats.local_threshold);
          }
        }
        EXPECT_EQ(outs[0], outs[1]) << name;
        EXPECT_EQ(resids[0], resids[1]) << name;
        EXPECT_EQ(thrs[0], thrs[1]) << name;
        EXPECT_EQ(calls[1].accumulate_stats, steps) << name;
        EXPECT_EQ(calls[0].accumulate_stats, 0) << name;
        // GaussianK's one-pass guesses, on the host after a guess landed
        // (the Laplace fit's first guess lands on Laplace data; the first
        // call has no landed guess before it); never a multi-stage fit, nor
        // another algorithm's guess (a threshold, no list).
        if (algo != PGS_ALGO_GAUSSIANK || est == PGS_EST_SIDCO_GP_MS) {
          EXPECT_EQ(calls[1].guess_select, 0) << name;
        } else if (est == PGS_EST_SIDCO_EXP) {
          EXPECT_GE(calls[1].guess_select, 1) << name;
          EXPECT_LT(calls[1].guess_select, steps) << name;
        }
        // Each call's first statistics pass is the one the add took.
        EXPECT_EQ(calls[0].mean_std + calls[0].abs_stats -
                      (calls[1].mean_std + calls[1].abs_stats),
                  steps)
            << name;
      }
  });
}

// GaussianK's selection against brute force on each rank, whether its
// first guess was selected by the pass that counted it (in band) or after
// corrections or exactly: the residual keeps exactly the entries below the
// threshold used (and zeros), the count sent is that of |acc| >= thr, and
// nothing is lost. Normal data lands the first guesses of these
// estimators; heavy tails make the Gaussian and exponential guesses miss.
TEST_P(TransportTest, GaussiankSelectionMatchesBruteForce) {
  on_every_rank([&] {
    const size_t n = 100000;
    int landed = 0, corrected = 0;
    for (pgs_estimator_t est :
         {PGS_EST_DEFAULT, PGS_EST_SIDCO_EXP, PGS_EST_DGC_SAMPLE, PGS_EST_REUSE,
          PGS_EST_EXACT}) {
      pgs_config_t cfg = make_config(PGS_ALGO_GAUSSIANK, 0.01, 0);
      cfg.estimator = est;
      Runner run(GetParam(), cfg, n);
      ASSERT_TRUE(all_ranks(run.ok()));
      // Two normal calls, then alternating: a guess after a landed one is
      // selected in its counting pass, after a missed one counted first.
      for (int64_t step = 0; step < 6; ++step) {
        const std::vector<float> g =
            step < 2 || step % 2 == 0 ? normal_data(n, 71, world_rank(), step)
                                      : heavy_data(n, 71 + step, world_rank());
        ASSERT_TRUE(run.step_all(g));
        const float thr = static_cast<float>(run.stats.local_threshold);
        int64_t picked = 0;
        int bad = 0;
        for (size_t i = 0; i < n; ++i) {
          const float a = run.acc[i];
          const bool sent = a != 0.0f && std::fabs(a) >= thr;
          picked += sent;
          bad += run.resid[i] != (sent ? 0.0f : a);
        }
        const std::string name = pgs_estimator_name(est);
        EXPECT_EQ(bad, 0) << name << " step " << step;
        EXPECT_EQ(run.stats.capped, 0) << name;
        EXPECT_EQ(run.stats.local_selected, picked) << name;
        EXPECT_EQ(conservation_failures(run, n), 0) << name;
        if (est != PGS_EST_EXACT) {
          landed += run.stats.estimate_corrections == 0;
          corrected += run.stats.estimate_corrections > 0;
        }
      }
    }
    EXPECT_GT(landed, 0) << "no first guess was selected in band";
    EXPECT_GT(corrected, 0) << "no guess needed a correction";
  });
}

// SIDCo's stage adaptation on heavy tails (Student t, 2 degrees of
// freedom), where one exponential fit of the bulk over-selects: the
// multi-stage estimator starts at 2 stages, adds stages while its first
// guesses pick too many, and ends with first guesses in [k/2, 2k] (no
// correction) more often than the one-stage fit, which never adapts.
TEST_P(TransportTest, SidcoStagesAdaptOnHeavyTails) {
  on_every_rank([&] {
    const size_t n = 100000;
    const int64_t k = target_k(0.01, n);
    int landed[2] = {0, 0}, most_stages = 0;
    const pgs_estimator_t ests[2] = {PGS_EST_SIDCO_EXP, PGS_EST_SIDCO_EXP_MS};
    for (int e = 0; e < 2; ++e) {
      pgs_config_t cfg = make_config(PGS_ALGO_GAUSSIANK, 0.01, 0);
      cfg.estimator = ests[e];
      Runner run(GetParam(), cfg, n);
      ASSERT_TRUE(all_ranks(run.ok()));
      for (int64_t step = 0; step < 30; ++step) {
        ASSERT_TRUE(run.step_all(heavy_data(n, 500 + step, world_rank())));
        EXPECT_GE(run.stats.local_selected, (k + 1) / 2);
        EXPECT_LE(run.stats.local_selected, 2 * k);
        EXPECT_EQ(conservation_failures(run, n), 0);
        if (step >= 15) landed[e] += run.stats.estimate_corrections == 0;
        if (e == 1)
          most_stages = std::max(most_stages, run.stats.estimate_stages);
        if (e == 0) {
          EXPECT_EQ(run.stats.estimate_stages, 1);
        }
      }
    }
    EXPECT_GT(most_stages, 2) << "the stage count never grew";
    EXPECT_GT(landed[1], landed[0]) << landed[0] << " vs " << landed[1];
  });
}

// Ok-Topk on exact-threshold steps: the output support is the global top-k
// of the reduced local selections (each rank's exact top-k), and the values
// are those sums over P. Also checks the schedule of recomputes.
TEST_P(TransportTest, OktopkSupportIsGlobalTopkOfReducedSelections) {
  on_every_rank([&] {
    const size_t n = 16000;
    const int P = world_size();
    const int64_t k = target_k(0.02, n);
    const int64_t tau_prime = 4, tau = 8;
    Runner run(GetParam(),
               make_config(PGS_ALGO_OKTOPK, 0.02, 1, tau, tau_prime), n);
    ASSERT_TRUE(all_ranks(run.ok()));
    int checked = 0;
    for (int64_t step = 0; step < 26; ++step) {
      ASSERT_TRUE(run.step_all(normal_data(n, 101, world_rank(), step)));
      if (step < 1) continue;
      const int64_t sparse = step - 1;
      EXPECT_EQ(run.stats.repartitioned != 0, sparse % tau == 0) << step;
      if (sparse % tau_prime == 0) {
        EXPECT_TRUE(run.stats.local_recomputed);
        EXPECT_TRUE(run.stats.global_recomputed);
      }
      if (sparse % tau_prime != 0 || run.stats.capped != 0 ||
          run.stats.trimmed != 0)
        continue;
      // Everyone agrees on whether this step is checked (capping is per rank).
      if (!all_ranks(run.stats.capped == 0)) continue;
      std::vector<float> acc = allgather(run.acc);
      std::vector<double> v(n, 0.0);
      for (int r = 0; r < P; ++r) {
        auto mask = topk_mask(&acc[r * n], n, k);
        for (size_t i = 0; i < n; ++i)
          if (mask[i]) v[i] += acc[r * n + i];
      }
      std::vector<double> mags;
      for (double x : v)
        if (x != 0.0) mags.push_back(std::fabs(x));
      std::sort(mags.rbegin(), mags.rend());
      double thr = static_cast<int64_t>(mags.size()) > k ? mags[k - 1] : 0.0;
      int bad = 0;
      for (size_t i = 0; i < n; ++i) {
        bool expect = v[i] != 0.0 && std::fabs(v[i]) >= thr;
        bool got = run.out[i] != 0.0f;
        // Membership may differ only for sums within rounding of the threshold.
        if (expect != got && std::fabs(std::fabs(v[i]) - thr) > 1e-5 * thr)
          ++bad;
        if (got &&
            std::fabs(run.out[i] - v[i] / P) > 1e-5 * std::fabs(v[i] / P))
          ++bad;
      }
      EXPECT_EQ(bad, 0) << "step " << step;
      ++checked;
    }
    EXPECT_GE(checked, 4);
  });
}

// Ok-Topk's measured words per rank stay below 6k(P-1)/P on every step, for
// sizes from tiny k to a realistic bucket, and the phase-1 caps and phase-2
// trim leave the invariant intact.
TEST_P(TransportTest, OktopkVolumeBelowBound) {
  on_every_rank([&] {
    const int P = world_size();
    if (P == 1) GTEST_SKIP() << "no communication at P = 1";
    struct Case {
      size_t n;
      double d;
    } cases[] = {{50000, 0.01}, {20000, 0.001}, {3000, 0.0005}, {800, 0.05}};
    int64_t trimmed = 0, capped = 0;
    for (auto c : cases) {
      Runner run(GetParam(), make_config(PGS_ALGO_OKTOPK, c.d, 1, 6, 3), c.n);
      ASSERT_TRUE(all_ranks(run.ok()));
      for (int64_t step = 0; step < 14; ++step) {
        // Skewed data: a hot spot whose position drifts, so regions go stale.
        auto g = normal_data(c.n, 107, world_rank(), step);
        size_t hot = (step * c.n / 13) % c.n;
        for (size_t i = hot; i < std::min(c.n, hot + c.n / 20); ++i)
          g[i] *= 8.0f;
        ASSERT_TRUE(run.step_all(g));
        if (step == 0) continue;
        int64_t sent = 0, recv = 0;
        for (int ph = 0; ph < PGS_PHASE_COUNT; ++ph)
          sent += run.stats.words_sent[ph], recv += run.stats.words_recv[ph];
        const double bound = run.stats.words_upper_bound;
        EXPECT_LT(sent, bound) << "n=" << c.n << " step " << step;
        EXPECT_LT(recv, bound) << "n=" << c.n << " step " << step;
        EXPECT_DOUBLE_EQ(bound, 6.0 * run.stats.k * (P - 1) / P);
        EXPECT_EQ(conservation_failures(run, c.n), 0);
        trimmed += run.stats.trimmed;
        capped += run.stats.capped;
      }
    }
    // Phase 2's trim ran (in place, where the rank's picks land in G)
    EXPECT_GT(trimmed, 0);
    EXPECT_FALSE(all_ranks(capped == 0));  // and phase 1's on some rank
  });
}

// Ok-Topk with global_factor f: G targets kg = f * k entries of the reduced
// sum (the exact global threshold every step: |G| = kg unless fewer are
// nonzero), each rank still selects k; nothing is lost, and the words per
// rank stay below the bound 3 (k + kg)(P-1)/P the stats report.
TEST_P(TransportTest, OktopkGlobalFactorWidensG) {
  on_every_rank([&] {
    const int P = world_size();
    if (P == 1) GTEST_SKIP() << "no communication at P = 1";
    const size_t n = 40000;
    int64_t picked[3] = {0, 0, 0};
    for (double f : {1.0, 2.0, 3.5}) {
      pgs_config_t cfg = make_config(PGS_ALGO_OKTOPK, 0.01, 1, 4, 1);
      cfg.global_factor = f;
      Runner run(GetParam(), cfg, n);
      ASSERT_TRUE(all_ranks(run.ok()));
      for (int64_t step = 0; step < 6; ++step) {
        ASSERT_TRUE(run.step_all(normal_data(n, 131, world_rank(), step)));
        if (step == 0) continue;
        const int64_t k = run.stats.k;
        const int64_t kg = static_cast<int64_t>(std::floor(f * k + 0.5));
        int64_t sent = 0, recv = 0;
        for (int ph = 0; ph < PGS_PHASE_COUNT; ++ph)
          sent += run.stats.words_sent[ph], recv += run.stats.words_recv[ph];
        const double bound = 3.0 * (k + kg) * (P - 1) / P;
        EXPECT_DOUBLE_EQ(run.stats.words_upper_bound, bound);
        EXPECT_LT(sent, bound) << "f=" << f << " step " << step;
        EXPECT_LT(recv, bound) << "f=" << f << " step " << step;
        // Exact every step: G is the kg largest reduced sums (before the
        // volume cap trims), or every one when the union of the ranks' k
        // picks is smaller (at f = 1 it never is).
        const int64_t g = run.stats.global_selected + run.stats.trimmed;
        EXPECT_LE(g, kg) << "f=" << f << " step " << step;
        if (f == 1.0) {
          EXPECT_EQ(g, k) << "step " << step;
        }
        picked[f == 1.0 ? 0 : f == 2.0 ? 1 : 2] += g;
        EXPECT_EQ(conservation_failures(run, n), 0);
      }
    }
    // Random data: the ranks' picks differ, so a wider G takes more.
    EXPECT_GT(picked[1], picked[0]);
    EXPECT_GE(picked[2], picked[1]);
    pgs_config_t bad = make_config(PGS_ALGO_OKTOPK, 0.01, 1);
    for (double f : {0.5, 0.0, -1.0, std::nan(""), 2e6}) {
      bad.global_factor = f;
      Runner run(GetParam(), bad, n);
      EXPECT_EQ(run.status(), PGS_ERR_INVALID) << "global_factor " << f;
    }
  });
}

// A bucket restored from another's residual and state continues exactly as
// the original would have (the checkpoint / state_dict path).
TEST_P(TransportTest, RestoredBucketResumesIdentically) {
  on_every_rank([&] {
    const size_t n = 6000;
    const int P = world_size();
    for (pgs_algo_id_t algo : kAllAlgos) {
      pgs_config_t cfg = make_config(algo, 0.02, 1, 4, 3);
      Runner a(GetParam(), cfg, n);
      ASSERT_TRUE(all_ranks(a.ok()));
      for (int64_t step = 0; step < 7; ++step)
        ASSERT_TRUE(a.step_all(normal_data(n, 113, world_rank(), step)));
      pgs_bucket_state_t st;
      std::vector<int64_t> bounds(P + 1, -1);
      ASSERT_EQ(pgs_bucket_get_state(a.bucket(), &st, bounds.data()), PGS_OK);
      EXPECT_EQ(st.step, 7);
      Runner b(GetParam(), cfg, n);
      ASSERT_TRUE(all_ranks(b.ok()));
      ASSERT_EQ(pgs_bucket_set_residual(b.bucket(), a.resid.data()), PGS_OK);
      ASSERT_EQ(pgs_bucket_set_state(b.bucket(), &st, bounds.data()), PGS_OK);
      for (int64_t step = 7; step < 14; ++step) {
        auto g = normal_data(n, 113, world_rank(), step);
        ASSERT_TRUE(a.step_all(g));
        ASSERT_TRUE(b.step_all(g));
        EXPECT_EQ(std::memcmp(a.out.data(), b.out.data(), n * sizeof(float)), 0)
            << pgs_algo_name(algo) << " step " << step;
        EXPECT_EQ(
            std::memcmp(a.resid.data(), b.resid.data(), n * sizeof(float)), 0);
      }
      // Bounds that do not partition [0, n) are refused.
      if (algo == PGS_ALGO_OKTOPK && st.have_bounds) {
        std::vector<int64_t> bad = bounds;
        bad[P] = static_cast<int64_t>(n) + 1;
        EXPECT_EQ(pgs_bucket_set_state(b.bucket(), &st, bad.data()),
                  PGS_ERR_INVALID);
      }
    }
  });
}

// pgs_bucket_scale_residual multiplies each entry in place (the oracle: the
// residual read out and multiplied here), leaves a zero residual zero, and
// refuses a missing factor.
TEST_P(TransportTest, ScaleResidualMultipliesEachEntry) {
  on_every_rank([&] {
    const size_t n = 3000;
    pgs_config_t cfg = make_config(PGS_ALGO_OKTOPK, 0.02, 0, 4, 3);
    Runner a(GetParam(), cfg, n);
    ASSERT_TRUE(all_ranks(a.ok()));
    std::vector<float> f = normal_data(n, 7, world_rank(), 99), r(n), got(n);
    ASSERT_EQ(pgs_bucket_scale_residual(a.bucket(), f.data()), PGS_OK);
    ASSERT_EQ(pgs_bucket_get_residual(a.bucket(), got.data()), PGS_OK);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], 0.0f) << i;
    for (int64_t step = 0; step < 3; ++step)
      ASSERT_TRUE(a.step_all(normal_data(n, 17, world_rank(), step)));
    ASSERT_EQ(pgs_bucket_get_residual(a.bucket(), r.data()), PGS_OK);
    size_t nonzero = 0;
    for (float v : r) nonzero += v != 0.0f;
    ASSERT_GT(nonzero, n / 2);
    ASSERT_EQ(pgs_bucket_scale_residual(a.bucket(), f.data()), PGS_OK);
    ASSERT_EQ(pgs_bucket_get_residual(a.bucket(), got.data()), PGS_OK);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], r[i] * f[i]) << i;
    EXPECT_EQ(pgs_bucket_scale_residual(a.bucket(), nullptr), PGS_ERR_INVALID);
    EXPECT_EQ(pgs_bucket_scale_residual(nullptr, f.data()), PGS_ERR_INVALID);
  });
}

INSTANTIATE_TEST_SUITE_P(All, TransportTest,
                         testing::ValuesIn(all_transports()),
                         [](const testing::TestParamInfo<Transport> &i) {
                           return transport_name(i.param);
                         });

// Configuration errors are reported at creation, not at the first call.
TEST(BucketConfig, RejectsBadConfiguration) {
  on_every_rank([&] {
    CommPtr comm = make_comm(all_transports()[0]);
    ASSERT_TRUE(comm);
    pgs_bucket_t *b = nullptr;
    for (double d : {0.0, -0.5, 1.5, std::nan("")}) {
      pgs_config_t c = make_config(PGS_ALGO_OKTOPK, d, 0);
      EXPECT_EQ(pgs_bucket_create(&c, comm.get(), pgs_ops_cpu(), 100, &b),
                PGS_ERR_INVALID);
      EXPECT_EQ(b, nullptr);
    }
    pgs_config_t c = make_config(PGS_ALGO_OKTOPK, 0.1, 0);
    EXPECT_EQ(pgs_bucket_create(&c, comm.get(), pgs_ops_cpu(), 0, &b),
              PGS_ERR_UNSUPPORTED);
    c.tau = 0;
    EXPECT_EQ(pgs_bucket_create(&c, comm.get(), pgs_ops_cpu(), 100, &b),
              PGS_ERR_INVALID);
    c = make_config(PGS_ALGO_TOPKA, 0.1, 0);
    for (int bad : {-1, PGS_FINITE_EXACT + 1}) {
      c.check_finite = bad;
      EXPECT_EQ(pgs_bucket_create(&c, comm.get(), pgs_ops_cpu(), 100, &b),
                PGS_ERR_INVALID);
    }
    c = make_config(static_cast<pgs_algo_id_t>(PGS_ALGO_COUNT), 0.1, 0);
    EXPECT_EQ(pgs_bucket_create(&c, comm.get(), pgs_ops_cpu(), 100, &b),
              PGS_ERR_INVALID);
    c = make_config(PGS_ALGO_OKTOPK, 0.1, 0);
    c.struct_size = 8;
    EXPECT_EQ(pgs_bucket_create(&c, comm.get(), pgs_ops_cpu(), 100, &b),
              PGS_ERR_INVALID);
    // Values travel as fp32, fp16 or bf16, nothing else (99 stored as an int:
    // not a value of the C++ enum, as a C caller could pass it).
    c = make_config(PGS_ALGO_OKTOPK, 0.1, 0);
    for (int bad : {int{PGS_INT64}, int{PGS_FLOAT64}, 99}) {
      std::memcpy(&c.wire_dtype, &bad, sizeof bad);
      EXPECT_EQ(pgs_bucket_create(&c, comm.get(), pgs_ops_cpu(), 100, &b),
                PGS_ERR_UNSUPPORTED);
    }
    // An ops table that lacks a function (an embedder's, written against an
    // older header) is refused at creation, never called.
    c = make_config(PGS_ALGO_OKTOPK, 0.1, 0);
    pgs_ops_t partial = *pgs_ops_cpu();
    partial.accumulate_select = nullptr;
    EXPECT_EQ(pgs_bucket_create(&c, comm.get(), &partial, 100, &b),
              PGS_ERR_INVALID);
    EXPECT_EQ(b, nullptr);
  });
}

TEST(BucketConfig, EstimatorNamesRoundTrip) {
  on_every_rank([&] {
    for (int i = 0; i < PGS_EST_COUNT; ++i) {
      pgs_estimator_t id;
      const char *name = pgs_estimator_name(static_cast<pgs_estimator_t>(i));
      ASSERT_NE(name, nullptr);
      EXPECT_EQ(pgs_estimator_from_name(name, &id), PGS_OK);
      EXPECT_EQ(id, i);
    }
    pgs_estimator_t id;
    EXPECT_EQ(pgs_estimator_from_name("nope", &id), PGS_ERR_INVALID);
    EXPECT_EQ(pgs_estimator_name(PGS_EST_COUNT), nullptr);
    CommPtr comm = make_comm(all_transports()[0]);
    pgs_config_t cfg = PGS_CONFIG_INIT;
    cfg.estimator = PGS_EST_COUNT;
    pgs_bucket_t *b = nullptr;
    EXPECT_EQ(pgs_bucket_create(&cfg, comm.get(), pgs_ops_cpu(), 100, &b),
              PGS_ERR_INVALID);
    EXPECT_EQ(b, nullptr);
  });
}

TEST(BucketConfig, AlgorithmNamesRoundTrip) {
  for (int i = 0; i < PGS_ALGO_COUNT; ++i) {
    pgs_algo_id_t id;
    ASSERT_NE(pgs_algo_name(static_cast<pgs_algo_id_t>(i)), nullptr);
    EXPECT_EQ(
        pgs_algo_from_name(pgs_algo_name(static_cast<pgs_algo_id_t>(i)), &id),
        PGS_OK);
    EXPECT_EQ(id, i);
  }
  pgs_algo_id_t id;
  EXPECT_EQ(pgs_algo_from_name("nope", &id), PGS_ERR_INVALID);
  EXPECT_EQ(pgs_algo_name(PGS_ALGO_COUNT), nullptr);
}

}  // namespace
}  // namespace pgs_test
