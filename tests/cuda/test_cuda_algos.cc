// The whole algorithm layer on the CUDA ops: every algorithm's bucket run on
// device memory over a single-rank transport, against the same bucket on the
// host ops. With one rank the transport only copies (allgatherv) or does
// nothing (allreduce of one contribution), so outputs, residuals and
// statistics must agree exactly: every op the algorithms use is exact, and
// mean_std (gaussiank's estimate) agrees to double rounding, far below what
// could move a float threshold.
#include <pg_sparse/pg_sparse.h>

#include <cstdio>
#include <memory>
#include <string>
#include <tuple>

#include "cuda_test_util.h"

namespace cuda_test {
namespace {

// ---- a P = 1 transport in either memory space -----------------------------

struct Loopback {
  const pgs_ops_t *ops;  // copies in the data plane go through the ops
};

int lb_exchange_start(void *, const pgs_msg_t *, int, const pgs_msg_t *, int,
                      int) {
  return PGS_OK;  // peers are never self: with one rank there is nothing
}
int lb_exchange_wait(void *, int) {
  return PGS_OK;
}
int lb_allgatherv(void *impl, const void *send, size_t send_bytes, void *recv,
                  const size_t *, const size_t *displs) {
  auto *s = static_cast<Loopback *>(impl);
  char *dst = static_cast<char *>(recv) + displs[0];
  if (send_bytes == 0 || dst == send) return PGS_OK;
  return s->ops->copy(s->ops, dst, send, send_bytes, PGS_COPY_SAME);
}
int lb_reduce(void *, void *, size_t, pgs_dtype_t, pgs_redop_t) {
  return PGS_OK;  // the sum, max or min of one contribution is itself
}
int lb_bcast(void *, void *, size_t, int) {
  return PGS_OK;
}
int lb_alltoall(void *, const int64_t *send, int64_t *recv) {
  recv[0] = send[0];
  return PGS_OK;
}
int lb_allgather(void *, const int64_t *send, size_t count, int64_t *recv) {
  std::memmove(recv, send, count * sizeof(int64_t));
  return PGS_OK;
}
int lb_barrier(void *) {
  return PGS_OK;
}
void lb_destroy(void *impl) {
  delete static_cast<Loopback *>(impl);
}

pgs_comm_t *make_loopback(const pgs_ops_t *ops) {
  pgs_comm_vtable_t vt{};
  vt.exchange_start = lb_exchange_start;
  vt.exchange_wait = lb_exchange_wait;
  vt.allgatherv = lb_allgatherv;
  vt.allreduce = lb_reduce;
  vt.bcast = lb_bcast;
  vt.allreduce_host = lb_reduce;
  vt.alltoall_host = lb_alltoall;
  vt.allgather_host = lb_allgather;
  vt.barrier = lb_barrier;
  vt.destroy = lb_destroy;
  pgs_comm_t *c = nullptr;
  EXPECT_EQ(pgs_comm_create(&vt, new Loopback{ops}, 0, 1, ops->mem, &c),
            PGS_OK);
  return c;
}

// One bucket with its communicator.
class Bucket {
 public:
  Bucket(const pgs_ops_t *ops, const pgs_config_t &cfg, size_t n) : n_(n) {
    comm_ = make_loopback(ops);
    if (comm_ != nullptr) status_ = pgs_bucket_create(&cfg, comm_, ops, n, &b_);
  }
  ~Bucket() {
    pgs_bucket_destroy(b_);
    pgs_comm_destroy(comm_);
  }
  bool ok() const { return status_ == PGS_OK && b_ != nullptr; }
  pgs_bucket_t *get() const { return b_; }
  std::vector<float> residual() const {
    std::vector<float> r(n_);
    EXPECT_EQ(pgs_bucket_get_residual(b_, r.data()), PGS_OK);
    return r;
  }
  pgs_stats_t stats() const {
    pgs_stats_t s{};
    pgs_bucket_stats(b_, &s);
    return s;
  }

 private:
  size_t n_;
  pgs_comm_t *comm_ = nullptr;
  pgs_bucket_t *b_ = nullptr;
  int status_ = PGS_ERR_INVALID;
};

constexpr pgs_algo_id_t kAlgos[] = {PGS_ALGO_DENSE,     PGS_ALGO_TOPKA,
                                    PGS_ALGO_TOPKDSA,   PGS_ALGO_GTOPK,
                                    PGS_ALGO_GAUSSIANK, PGS_ALGO_OKTOPK};

class CudaAlgo : public CudaTest,
                 public testing::WithParamInterface<pgs_algo_id_t> {};

std::string algo_name(const testing::TestParamInfo<pgs_algo_id_t> &info) {
  return pgs_algo_name(info.param);
}

// Gradient of one step: normal data, some steps with ties and zeros.
std::vector<float> grad_for(size_t n, int64_t step, uint64_t seed) {
  if (step % 3 == 2) return tied(n, seed * 131 + step, 6, 0.3);
  return normal(n, seed * 131 + step);
}

void run_both(pgs_algo_id_t algo, size_t n, double density, int64_t warmup,
              int steps, uint64_t seed, pgs_dtype_t wire = PGS_FLOAT32,
              pgs_estimator_t est = PGS_EST_DEFAULT) {
  pgs_config_t cfg = PGS_CONFIG_INIT;
  cfg.wire_dtype = wire;
  cfg.estimator = est;
  cfg.algo = algo;
  cfg.density = density;
  cfg.warmup_steps = warmup;
  cfg.tau = 4;
  cfg.tau_prime = 2;
  Bucket host(cpu(), cfg, n), dev(gpu(), cfg, n);
  ASSERT_TRUE(host.ok() && dev.ok());
  for (int64_t step = 0; step < steps; ++step) {
    const std::vector<float> g = grad_for(n, step, seed);
    std::vector<float> out_h(n, -1.0f);
    Dev<float> gd(g), out_d(std::vector<float>(n, -1.0f));
    const int st_h = pgs_bucket_allreduce(host.get(), g.data(), out_h.data());
    // Odd steps run in place on the device (out aliases grad).
    const bool in_place = step % 2 == 1;
    const int st_d = pgs_bucket_allreduce(dev.get(), gd.get(),
                                          in_place ? gd.get() : out_d.get());
    const std::string where =
        std::string(pgs_algo_name(algo)) + "/" + pgs_estimator_name(est) +
        " n=" + std::to_string(n) + " d=" + std::to_string(density) +
        " step=" + std::to_string(step);
    ASSERT_EQ(st_d, st_h) << where;
    EXPECT_TRUE(same(in_place ? gd.host() : out_d.host(), out_h)) << where;
    EXPECT_TRUE(same(dev.residual(), host.residual())) << where;
    const pgs_stats_t sh = host.stats(), sd = dev.stats();
    EXPECT_EQ(sd.dense, sh.dense) << where;
    EXPECT_EQ(sd.local_selected, sh.local_selected) << where;
    EXPECT_EQ(sd.global_selected, sh.global_selected) << where;
    EXPECT_EQ(sd.local_threshold, sh.local_threshold) << where;
    EXPECT_EQ(sd.global_threshold, sh.global_threshold) << where;
    EXPECT_EQ(sd.local_recomputed, sh.local_recomputed) << where;
    EXPECT_EQ(sd.global_recomputed, sh.global_recomputed) << where;
    EXPECT_EQ(sd.repartitioned, sh.repartitioned) << where;
    EXPECT_EQ(sd.capped, sh.capped) << where;
    EXPECT_EQ(sd.trimmed, sh.trimmed) << where;
    EXPECT_EQ(sd.candidates, sh.candidates) << where;
    EXPECT_EQ(sd.estimate_corrections, sh.estimate_corrections) << where;
    EXPECT_EQ(sd.estimate_stages, sh.estimate_stages) << where;
    EXPECT_EQ(sd.transport_calls, sh.transport_calls) << where;
    for (int p = 0; p < PGS_PHASE_COUNT; ++p) {
      EXPECT_EQ(sd.words_sent[p], sh.words_sent[p]) << where;
      EXPECT_EQ(sd.words_recv[p], sh.words_recv[p]) << where;
    }
  }
}

TEST_P(CudaAlgo, MatchesHostOpsOverManySteps) {
  for (size_t n : {size_t{1}, size_t{7}, size_t{1000}, size_t{65537}}) {
    for (double density : {0.01, 0.1, 1.0})
      run_both(GetParam(), n, density, 1, 8, n);
  }
}

// 16-bit values on the wire: rounding and the kept error agree bit for bit.
TEST_P(CudaAlgo, MatchesHostOpsOnANarrowWire) {
  for (pgs_dtype_t wire : {PGS_FLOAT16, PGS_BFLOAT16})
    for (size_t n : {size_t{1000}, size_t{65537}})
      for (double density : {0.01, 1.0})
        run_both(GetParam(), n, density, 1, 6, n + 5, wire);
}

// Every threshold estimator on the device against the host: the fits run on
// the host from the ops' sums (mean_std, abs_stats), which agree to double
// rounding, so guesses, corrections, stages and outputs agree exactly.
class CudaAlgoEstimators : public CudaTest {};

TEST_F(CudaAlgoEstimators, MatchHostOps) {
  for (pgs_algo_id_t algo :
       {PGS_ALGO_GAUSSIANK, PGS_ALGO_TOPKDSA, PGS_ALGO_OKTOPK})
    for (int e = 0; e < PGS_EST_COUNT; ++e)
      run_both(algo, 65537, 0.01, 1, 12, 7 + e, PGS_FLOAT32,
               static_cast<pgs_estimator_t>(e));
}

TEST_P(CudaAlgo, MatchesHostOpsOnALargeBucket) {
  if (max_n() < (size_t{1} << 22)) GTEST_SKIP() << "PGS_CUDA_TEST_MAX_N";
  run_both(GetParam(), size_t{1} << 22, 0.01, 1, 5, 99);
}

TEST_P(CudaAlgo, NonfiniteInputFailsOnBoth) {
  const size_t n = 5000;
  pgs_config_t cfg = PGS_CONFIG_INIT;
  cfg.algo = GetParam();
  cfg.warmup_steps = 0;
  Bucket host(cpu(), cfg, n), dev(gpu(), cfg, n);
  ASSERT_TRUE(host.ok() && dev.ok());
  std::vector<float> g = normal(n, 5);
  g[1234] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> out_h(n);
  Dev<float> gd(g), out_d(n);
  EXPECT_EQ(pgs_bucket_allreduce(host.get(), g.data(), out_h.data()),
            PGS_ERR_NONFINITE);
  EXPECT_EQ(pgs_bucket_allreduce(dev.get(), gd.get(), out_d.get()),
            PGS_ERR_NONFINITE);
  EXPECT_TRUE(same(dev.residual(), host.residual()));
}

// DDP's reducer's call on the device: the same outputs, residuals and
// statistics as the plain call; the wait for its device checks moves to
// the start of the next call, so over the calls it waits no more often.
TEST_P(CudaAlgo, DeferredCallsMatchPlainCalls) {
  const size_t n = 65537;
  pgs_config_t cfg = PGS_CONFIG_INIT;
  cfg.algo = GetParam();
  cfg.warmup_steps = 1;
  cfg.tau = 4;
  cfg.tau_prime = 2;
  Bucket plain(gpu(), cfg, n), deferred(gpu(), cfg, n);
  ASSERT_TRUE(plain.ok() && deferred.ok());
  int64_t syncs_plain = 0, syncs_deferred = 0;
  for (int64_t step = 0; step < 8; ++step) {
    const std::vector<float> g = grad_for(n, step, 31);
    Dev<float> ga(g), gb(g), oa(n), ob(n);
    ASSERT_EQ(pgs_bucket_allreduce(plain.get(), ga.get(), oa.get()), PGS_OK);
    syncs_plain += plain.stats().host_syncs;
    ASSERT_EQ(pgs_bucket_allreduce_deferred(deferred.get(), gb.get(), ob.get()),
              PGS_OK);
    syncs_deferred += deferred.stats().host_syncs;
    EXPECT_TRUE(same(ob.host(), oa.host())) << step;
    EXPECT_TRUE(same(deferred.residual(), plain.residual())) << step;
    EXPECT_EQ(deferred.stats().local_selected, plain.stats().local_selected);
    EXPECT_EQ(deferred.stats().global_threshold,
              plain.stats().global_threshold);
  }
  // The reads above (outputs, residuals) read the checks too; what the
  // calls themselves waited never exceeds the plain calls' waits.
  EXPECT_LE(syncs_deferred, syncs_plain);
  EXPECT_EQ(gpu()->check(gpu()), PGS_OK);
}

// A check left unread on the device (here a planned compaction whose count
// was wrong) fails the next deferred call before it touches its bucket:
// residual and step as they were; the call after it runs normally.
TEST_P(CudaAlgo, DeferredCallFailsOnAnUnreadCheck) {
  const size_t n = 5000;
  pgs_config_t cfg = PGS_CONFIG_INIT;
  cfg.algo = GetParam();
  cfg.warmup_steps = 0;
  Bucket dev(gpu(), cfg, n);
  ASSERT_TRUE(dev.ok());
  const std::vector<float> g = normal(n, 17);
  Dev<float> gd(g), out(n);
  ASSERT_EQ(pgs_bucket_allreduce_deferred(dev.get(), gd.get(), out.get()),
            PGS_OK);
  const std::vector<float> resid = dev.residual();  // reads any check too
  const int64_t step = dev.stats().step;
  const pgs_ops_t *ops = gpu();
  Dev<float> x(normal(1000, 18)), val(10);
  Dev<int32_t> idx(10);
  // About 600 entries lie above 0.5; the planned count says 10.
  ASSERT_EQ(ops->compact(ops, x.get(), 1000, 0.5f, -1, 0, idx.get(), val.get(),
                         10, nullptr),
            PGS_OK);
  EXPECT_EQ(pgs_bucket_allreduce_deferred(dev.get(), gd.get(), out.get()),
            PGS_ERR_INVALID);
  EXPECT_TRUE(same(dev.residual(), resid));
  // The next call is the failed one's step again: the failure left the
  // step count alone.
  EXPECT_EQ(pgs_bucket_allreduce_deferred(dev.get(), gd.get(), out.get()),
            PGS_OK);
  EXPECT_EQ(dev.stats().step, step + 1);
  EXPECT_EQ(ops->check(ops), PGS_OK);
}

// Host waits of a steady call at one rank (threshold reused, no
// repartition; the exact top-k algorithms from their candidate list): the
// step path's budget.
int64_t sync_budget(const std::string &algo) {
  if (algo == "dense") return 1;
  if (algo == "topka" || algo == "gtopk") return 2;
  // The fused pass plans Ok-Topk's and TopkDSA's split in its own wait.
  if (algo == "oktopk" || algo == "topkdsa") return 3;
  return 4;  // gaussiank
}

// The algorithms whose exact local top-k comes from the candidate list.
bool lists(pgs_algo_id_t algo) {
  return algo == PGS_ALGO_OKTOPK || algo == PGS_ALGO_TOPKA ||
         algo == PGS_ALGO_GTOPK || algo == PGS_ALGO_TOPKDSA;
}

// The host synchronisations of a device call follow from the algorithm and
// what the call did (list or full selection, threshold recomputes), never
// from n, and a steady call stays within its budget. Printed for the report.
TEST_P(CudaAlgo, HostSyncsIndependentOfN) {
  struct Call {
    int64_t syncs;
    int candidates, global_recomputed, repartitioned;
  };
  std::vector<std::vector<Call>> per_n;
  for (size_t n : {size_t{1} << 16, size_t{1} << 21}) {
    pgs_config_t cfg = PGS_CONFIG_INIT;
    cfg.algo = GetParam();
    cfg.density = 0.01;
    cfg.warmup_steps = 0;
    cfg.tau = 1000;
    cfg.tau_prime = 1000;
    Bucket dev(gpu(), cfg, n);
    ASSERT_TRUE(dev.ok());
    std::vector<Call> calls;
    for (int64_t step = 0; step < 6; ++step) {
      Dev<float> gd(normal(n, 700 + step)), out(n);
      ASSERT_EQ(pgs_bucket_allreduce(dev.get(), gd.get(), out.get()), PGS_OK);
      const pgs_stats_t st = dev.stats();
      calls.push_back({st.host_syncs, st.candidates, st.global_recomputed,
                       st.repartitioned});
      std::printf(
          "[ syncs    ] %s n=%zu call %lld: %lld host syncs, %lld "
          "transport calls%s\n",
          pgs_algo_name(GetParam()), n, (long long)step,
          (long long)st.host_syncs, (long long)st.transport_calls,
          st.candidates ? " (candidate list)" : "");
    }
    per_n.push_back(calls);
  }
  int compared = 0;
  for (size_t i = 1; i < per_n[0].size(); ++i) {
    const Call &a = per_n[0][i], &b = per_n[1][i];
    if (a.candidates != b.candidates ||
        a.global_recomputed != b.global_recomputed ||
        a.repartitioned != b.repartitioned)
      continue;
    EXPECT_EQ(a.syncs, b.syncs) << "call " << i;
    const bool steady = !a.global_recomputed && !a.repartitioned &&
                        (!lists(GetParam()) || a.candidates);
    if (steady) {
      EXPECT_LE(a.syncs, sync_budget(pgs_algo_name(GetParam())))
          << "call " << i;
    }
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

INSTANTIATE_TEST_SUITE_P(AllAlgos, CudaAlgo, testing::ValuesIn(kAlgos),
                         algo_name);

}  // namespace
}  // namespace cuda_test
