// Every algorithm on device memory (CUDA ops) over a device transport (NCCL,
// or Open MPI staged through pinned memory) against the same algorithm on
// host memory over Open MPI, with the same data: outputs and residuals agree.
// Runs under mpirun with one GPU per rank; skips where there are too few.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>
#include <tuple>

#include "harness.h"

// These headers carry their own extern "C" guards (nccl.h must not be
// wrapped: it pulls in C++ overloads of cuda_fp16.h).
#include <pg_sparse/comm_staged.h>
#include <pg_sparse/ops_cuda.h>
#ifdef PGS_HAVE_NCCL
#include <pg_sparse/comm_nccl.h>
#endif

namespace pgs_test {
namespace {

enum class DevComm { kNccl, kStagedMpi, kDirectMpi };

std::string dev_comm_name(DevComm d) {
  return d == DevComm::kNccl        ? "nccl"
         : d == DevComm::kStagedMpi ? "staged_mpi"
                                    : "direct_mpi";
}

// One GPU side: stream, ops table, device transport.
class GpuSide {
 public:
  explicit GpuSide(DevComm kind) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) return;
    // NCCL wants one GPU per rank; staging over MPI can share one.
    if (kind == DevComm::kNccl && ndev < world_size()) return;
    int dev = world_rank() % ndev;
    if (cudaSetDevice(dev) != cudaSuccess) return;
    if (cudaStreamCreate(&stream_) != cudaSuccess) return;
    if (pgs_ops_cuda_create(stream_, dev, &ops_) != PGS_OK) return;
    comm_ = make(kind);
  }
  ~GpuSide() {
    pgs_comm_destroy(comm_);
    pgs_ops_cuda_destroy(ops_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  bool ok() const { return comm_ != nullptr; }
  pgs_comm_t *comm() { return comm_; }
  const pgs_ops_t *ops() { return ops_; }

 private:
  pgs_comm_t *make(DevComm kind) {
    pgs_comm_t *c = nullptr;
    if (kind == DevComm::kDirectMpi) {
      // Device pointers straight to a CUDA-aware Open MPI.
      if (!pgs_mpi_cuda_aware()) return nullptr;
      pgs_comm_t *dev = nullptr;
      if (pgs_comm_mpi_create_mem(MPI_COMM_WORLD, PGS_MEM_DEVICE, &dev) !=
          PGS_OK)
        return nullptr;
      return pgs_comm_synced_create(dev, stream_, &c) == PGS_OK ? c : nullptr;
    }
    if (kind == DevComm::kStagedMpi) {
      pgs_comm_t *host = nullptr;
      if (pgs_comm_mpi_create(MPI_COMM_WORLD, &host) != PGS_OK) return nullptr;
      return pgs_comm_staged_create(host, stream_, &c) == PGS_OK ? c : nullptr;
    }
#ifdef PGS_HAVE_NCCL
    char id[PGS_NCCL_ID_BYTES];
    if (world_rank() == 0 && pgs_nccl_make_id(id) != PGS_OK) return nullptr;
    MPI_Bcast(id, PGS_NCCL_ID_BYTES, MPI_BYTE, 0, MPI_COMM_WORLD);
    return pgs_comm_nccl_create(id, world_rank(), world_size(), stream_, &c) ==
                   PGS_OK
               ? c
               : nullptr;
#else
    return nullptr;
#endif
  }
  cudaStream_t stream_ = nullptr;
  pgs_ops_t *ops_ = nullptr;
  pgs_comm_t *comm_ = nullptr;
};

// pgs_comm_abort() on a device transport from another thread (the
// backend's watchdog) ends a control-plane collective no peer joins, and
// later calls fail at once: NCCL (a GPU per rank) and staged Open MPI (ranks
// may share a GPU).
class GpuAbort : public testing::TestWithParam<DevComm> {};

TEST_P(GpuAbort, EndsAStuckCollective) {
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks";
  GpuSide gpu(GetParam());
  if (!all_ranks(gpu.ok())) GTEST_SKIP() << "needs this transport's GPUs";
  int64_t v[4] = {1, 1, 1, 1};
  if (world_rank() == 0) {
    std::thread watchdog([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      EXPECT_EQ(pgs_comm_abort(gpu.comm()), PGS_OK);
    });
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(pgs_comm_allreduce_host(gpu.comm(), v, 4, PGS_INT64, PGS_SUM),
              PGS_ERR_ABORTED);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    watchdog.join();
    EXPECT_LT(s, 10.0);
    EXPECT_EQ(pgs_comm_barrier(gpu.comm()), PGS_ERR_ABORTED);
    MPI_Barrier(MPI_COMM_WORLD);  // the others come only now
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
    // Staged MPI: join rank 0's abandoned allreduce late, so it completes
    // (NCCL's was aborted with its communicator).
    if (GetParam() == DevComm::kStagedMpi) {
      EXPECT_EQ(pgs_comm_allreduce_host(gpu.comm(), v, 4, PGS_INT64, PGS_SUM),
                PGS_OK);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

INSTANTIATE_TEST_SUITE_P(Transports, GpuAbort,
                         testing::Values(DevComm::kNccl, DevComm::kStagedMpi),
                         [](const testing::TestParamInfo<DevComm> &i) {
                           return dev_comm_name(i.param);
                         });

using Param = std::tuple<pgs_algo_id_t, DevComm>;

class GpuAlgo : public testing::TestWithParam<Param> {};

// A sum of more than two ranks' values depends on its order, and NCCL's
// ring adds in another order than Open MPI's reduction: from P = 3 on the
// two differ by rounding (a few ulp of the unit-scale inputs, more where the
// sum cancels), so an absolute term is allowed there. A wrong entry is off
// by the inputs' scale, 1e4 times more.
int mismatches(const std::vector<float> &a, const std::vector<float> &b) {
  const float abs_tol = world_size() > 2 ? 1e-4f : 1e-30f;
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    float tol = 1e-5f * std::max(std::fabs(a[i]), std::fabs(b[i])) + abs_tol;
    if (!(std::fabs(a[i] - b[i]) <= tol)) ++bad;
  }
  return bad;
}

TEST_P(GpuAlgo, MatchesHostAlgorithm) {
  const auto [algo, kind] = GetParam();
  GpuSide gpu(kind);
  if (!all_ranks(gpu.ok()))
    GTEST_SKIP() << "needs a GPU per rank (and CUDA-aware MPI for direct_mpi)";
  CommPtr host = make_comm(Transport::kMpi);
  ASSERT_TRUE(all_ranks(host != nullptr));
  pgs_config_t cfg = PGS_CONFIG_INIT;
  cfg.algo = algo;
  cfg.density = 0.01;
  cfg.warmup_steps = 1;
  cfg.tau = 8;
  cfg.tau_prime = 4;
  const size_t n = 1 << 18;
  pgs_bucket_t *hb = nullptr, *db = nullptr;
  ASSERT_EQ(pgs_bucket_create(&cfg, host.get(), pgs_ops_cpu(), n, &hb), PGS_OK);
  ASSERT_EQ(pgs_bucket_create(&cfg, gpu.comm(), gpu.ops(), n, &db), PGS_OK);
  float *dbuf = nullptr;
  ASSERT_EQ(cudaMalloc(&dbuf, n * sizeof(float)), cudaSuccess);
  std::vector<float> dout(n), hres(n), dres(n);
  for (int64_t step = 0; step < 20; ++step) {
    std::vector<float> g = normal_data(n, 131, world_rank(), step);
    ASSERT_EQ(cudaMemcpy(dbuf, g.data(), n * 4, cudaMemcpyHostToDevice),
              cudaSuccess);
    int hs = pgs_bucket_allreduce(hb, g.data(), g.data());
    int ds = pgs_bucket_allreduce(db, dbuf, dbuf);
    ASSERT_TRUE(all_ranks(hs == PGS_OK && ds == PGS_OK))
        << pgs_status_name(hs) << " " << pgs_status_name(ds);
    ASSERT_EQ(cudaMemcpy(dout.data(), dbuf, n * 4, cudaMemcpyDeviceToHost),
              cudaSuccess);
    pgs_bucket_get_residual(hb, hres.data());
    pgs_bucket_get_residual(db, dres.data());
    EXPECT_EQ(mismatches(g, dout), 0) << "output, step " << step;
    EXPECT_EQ(mismatches(hres, dres), 0) << "residual, step " << step;
    pgs_stats_t hst, dst;
    pgs_bucket_stats(hb, &hst);
    pgs_bucket_stats(db, &dst);
    EXPECT_EQ(hst.global_selected, dst.global_selected) << "step " << step;
  }
  cudaFree(dbuf);
  pgs_bucket_destroy(db);
  pgs_bucket_destroy(hb);
}

INSTANTIATE_TEST_SUITE_P(
    All, GpuAlgo,
    testing::Combine(testing::Values(PGS_ALGO_DENSE, PGS_ALGO_TOPKA,
                                     PGS_ALGO_TOPKDSA, PGS_ALGO_GTOPK,
                                     PGS_ALGO_GAUSSIANK, PGS_ALGO_OKTOPK),
                     testing::Values(DevComm::kNccl, DevComm::kStagedMpi,
                                     DevComm::kDirectMpi)),
    [](const testing::TestParamInfo<Param> &i) {
      return std::string(pgs_algo_name(std::get<0>(i.param))) + "_" +
             dev_comm_name(std::get<1>(i.param));
    });

}  // namespace
}  // namespace pgs_test
