// One sparse allreduce on GPUs against NCCL's dense allreduce of the same
// buffer, in the same run: mpirun -np P pgs_allreduce_bench [n] [density]
// [iterations]. One GPU per rank; prints on rank 0: card, per-call median
// time of each algorithm, the ratio to dense, and Ok-Topk's words per rank
// next to its 2k(P-1)/P and 6k(P-1)/P bounds.
#include <cuda_runtime.h>
#include <mpi.h>
#include <pg_sparse/comm_nccl.h>
#include <pg_sparse/ops_cuda.h>
#include <pg_sparse/pg_sparse.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

int rank_, size_;

void die(const char *what, int st) {
  std::fprintf(stderr, "rank %d: %s failed: %s\n", rank_, what,
               pgs_status_string(st));
  MPI_Abort(MPI_COMM_WORLD, 1);
}

struct Result {
  double median_ms;
  double phase_ms[PGS_PHASE_COUNT];  // medians over ranks and calls
  pgs_stats_t last;
  int64_t max_words_sent, max_words_recv;
};

// The median of every rank's values (the same count on each rank).
double median_over_ranks(const std::vector<double> &v) {
  std::vector<double> all(v.size() * size_);
  MPI_Allgather(v.data(), (int)v.size(), MPI_DOUBLE, all.data(), (int)v.size(),
                MPI_DOUBLE, MPI_COMM_WORLD);
  std::sort(all.begin(), all.end());
  return all[all.size() / 2];
}

// Times @p iters calls of one bucket; inputs rotate among @p inputs so the
// thresholds see changing data, as in training.
Result run(pgs_algo_id_t algo, pgs_dtype_t wire, double density,
           pgs_comm_t *comm, const pgs_ops_t *ops, size_t n,
           const std::vector<float *> &inputs, float *work, cudaStream_t stream,
           int iters) {
  pgs_config_t cfg = PGS_CONFIG_INIT;
  cfg.algo = algo;
  cfg.wire_dtype = wire;
  cfg.density = density;
  cfg.warmup_steps = 1;
  cfg.check_finite = 0;
  pgs_bucket_t *b = nullptr;
  int st = pgs_bucket_create(&cfg, comm, ops, n, &b);
  if (st) die("pgs_bucket_create", st);
  std::vector<double> ms, phase[PGS_PHASE_COUNT];
  Result r{};
  for (int i = 0; i < iters + 3; ++i) {
    cudaMemcpyAsync(work, inputs[i % inputs.size()], n * 4,
                    cudaMemcpyDeviceToDevice, stream);
    cudaStreamSynchronize(stream);
    MPI_Barrier(MPI_COMM_WORLD);
    auto t0 = std::chrono::steady_clock::now();
    st = pgs_bucket_allreduce(b, work, work);
    cudaStreamSynchronize(stream);
    auto t1 = std::chrono::steady_clock::now();
    if (st) die("pgs_bucket_allreduce", st);
    if (i < 3) continue;  // warm-up (dense first step, allocations)
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    pgs_bucket_stats(b, &r.last);
    for (int p = 0; p < PGS_PHASE_COUNT; ++p)
      phase[p].push_back(r.last.time_s[p] * 1e3);
    int64_t s = 0, v = 0;
    for (int p = 0; p < PGS_PHASE_COUNT; ++p)
      s += r.last.words_sent[p], v += r.last.words_recv[p];
    r.max_words_sent = std::max(r.max_words_sent, s);
    r.max_words_recv = std::max(r.max_words_recv, v);
  }
  r.median_ms = median_over_ranks(ms);
  for (int p = 0; p < PGS_PHASE_COUNT; ++p)
    r.phase_ms[p] = median_over_ranks(phase[p]);
  pgs_bucket_destroy(b);
  return r;
}

}  // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 27500000;
  double density = argc > 2 ? std::atof(argv[2]) : 0.01;
  int iters = argc > 3 ? std::atoi(argv[3]) : 20;
  int ndev = 0;
  cudaGetDeviceCount(&ndev);
  if (ndev < size_) {
    if (rank_ == 0) std::printf("needs one GPU per rank (%d GPUs)\n", ndev);
    MPI_Finalize();
    return 0;
  }
  cudaSetDevice(rank_);
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  pgs_ops_t *ops = nullptr;
  int st = pgs_ops_cuda_create(stream, rank_, &ops);
  if (st) die("pgs_ops_cuda_create", st);
  char id[PGS_NCCL_ID_BYTES];
  if (rank_ == 0 && (st = pgs_nccl_make_id(id))) die("nccl id", st);
  MPI_Bcast(id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  pgs_comm_t *comm = nullptr;
  if ((st = pgs_comm_nccl_create(id, rank_, size_, stream, &comm)))
    die("pgs_comm_nccl_create", st);

  // Four gradient-like inputs per rank (normal, a few heavy coordinates).
  std::vector<float *> inputs(4);
  std::vector<float> host(n);
  for (size_t k = 0; k < inputs.size(); ++k) {
    std::mt19937 gen(1000 * rank_ + k);
    std::normal_distribution<float> d(0.f, 1.f);
    for (auto &x : host) x = d(gen);
    cudaMalloc(&inputs[k], n * 4);
    cudaMemcpy(inputs[k], host.data(), n * 4, cudaMemcpyHostToDevice);
  }
  float *work = nullptr;
  cudaMalloc(&work, n * 4);

  // Each algorithm with fp32 values on the wire, and the main ones with
  // bf16 values too (dense+bf16: NCCL's bf16 allreduce, error kept).
  struct Method {
    pgs_algo_id_t algo;
    pgs_dtype_t wire;
  };
  const Method algos[] = {
      {PGS_ALGO_DENSE, PGS_FLOAT32},    {PGS_ALGO_DENSE, PGS_BFLOAT16},
      {PGS_ALGO_OKTOPK, PGS_FLOAT32},   {PGS_ALGO_OKTOPK, PGS_BFLOAT16},
      {PGS_ALGO_TOPKA, PGS_FLOAT32},    {PGS_ALGO_TOPKA, PGS_BFLOAT16},
      {PGS_ALGO_TOPKDSA, PGS_FLOAT32},  {PGS_ALGO_GTOPK, PGS_FLOAT32},
      {PGS_ALGO_GAUSSIANK, PGS_FLOAT32}};
  std::vector<Result> res;
  for (auto a : algos)
    res.push_back(run(a.algo, a.wire, density, comm, ops, n, inputs, work,
                      stream, iters));
  if (rank_ == 0) {
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    std::printf(
        "device: %d x %s, NCCL transport; n = %zu fp32 (%.1f MB), "
        "density %g, %d timed calls per algorithm\n",
        size_, prop.name, n, n * 4 / 1e6, density, iters);
    std::printf("%-10s %12s %10s %14s %14s %12s %12s\n", "algo", "median ms",
                "vs dense", "max words sent", "max words recv", "2k(P-1)/P",
                "6k(P-1)/P");
    for (size_t i = 0; i < res.size(); ++i)
      std::printf("%-10s%-5s %7.3f %10.2fx %14lld %14lld %12.0f %12.0f\n",
                  pgs_algo_name(algos[i].algo),
                  algos[i].wire == PGS_BFLOAT16 ? "+bf16" : "",
                  res[i].median_ms, res[0].median_ms / res[i].median_ms,
                  (long long)res[i].max_words_sent,
                  (long long)res[i].max_words_recv,
                  res[i].last.words_lower_bound, res[i].last.words_upper_bound);
    std::printf("%-10s %12s %12s %12s  (per phase, median ms)\n", "algo",
                "select", "reduce", "gather");
    for (size_t i = 0; i < res.size(); ++i)
      std::printf(
          "%-10s%-5s %7.3f %12.3f %12.3f\n", pgs_algo_name(algos[i].algo),
          algos[i].wire == PGS_BFLOAT16 ? "+bf16" : "",
          res[i].phase_ms[PGS_PHASE_SELECT], res[i].phase_ms[PGS_PHASE_REDUCE],
          res[i].phase_ms[PGS_PHASE_GATHER]);
    std::printf(
        "(dense = NCCL allreduce of the same buffer through the same "
        "transport; 'vs dense' > 1 means faster than fp32 dense; +bf16: "
        "values on the wire in bf16; words are 4 bytes)\n");
  }
  for (auto p : inputs) cudaFree(p);
  cudaFree(work);
  pgs_comm_destroy(comm);
  pgs_ops_cuda_destroy(ops);
  MPI_Finalize();
  return 0;
}
