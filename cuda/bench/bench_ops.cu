// Benchmark of the CUDA ops table (a program, not a test).
//
//  (a) the fused accumulate r += g with the count of |r| >= thr, at
//      n = 4M, 8M, 16M, 32M, 128M, as a fraction of the memory-bandwidth floor
//      (12 n bytes: read g, read r, write r) at two bandwidths: the measured
//      device-to-device cudaMemcpy of the same byte count (the practical
//      peak) and the theoretical peak from the device properties; and
//      Ok-Topk's whole fused pass (accumulate_kth: the add, the list of
//      |r| >= thr, its k-th largest) over the same bytes;
//  (b) the exact k-th largest |x| (kth_abs, radix select) at n = 25M,
//      k = 250k, against a full CUB radix sort of |x| (torch.topk is timed
//      by bench_topk.py on the same machine).
//
//  (c) what each threshold estimator's guess costs on its own at n = 25M
//      and 100M (density 0.01): the statistics pass of the Gaussian and
//      SIDCo exponential guesses (mean_std), of one SIDCo stage
//      (abs_stats), DGC's 1% sample (gather + kth_abs of the sample), then
//      the count at a threshold and the compaction that every guessed
//      selection adds (also with its count planned, and with nothing
//      selected), and the exact radix select, each also in reads of
//      the input (4n bytes at the device-to-device copy's bandwidth);
//  (d) merge_pairs of two sorted lists (Ok-Topk's reduction, gTop-k's
//      tree) at the list sizes of a 27.5M bucket at density 0.01.
//  (e) the compaction at a threshold (|x| >= thr, every tie, room for 2k,
//      the full count) by the table's one-pass kernel and by CUB's
//      DeviceSelect::If, at n = 25M and 100M, in reads of x.
//
// Each figure is the median of many runs after warm-up, timed with CUDA
// events on the table's stream. Usage: pgs_cuda_bench [runs [sections]],
// sections a subset of "abcde" (default all).
#include <cuda_runtime.h>
#include <pg_sparse/ops_cuda.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/tabulate_output_iterator.h>
#include <thrust/iterator/zip_iterator.h>
#include <random>
#include <vector>

namespace {

#define CHECK_CUDA(expr)                                                 \
  do {                                                                   \
    cudaError_t e_ = (expr);                                             \
    if (e_ != cudaSuccess) {                                             \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, \
                   cudaGetErrorString(e_));                              \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

#define CHECK_PGS(expr)                                                   \
  do {                                                                    \
    int s_ = (expr);                                                      \
    if (s_ != PGS_OK) {                                                   \
      std::fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, \
                   #expr, s_);                                            \
      std::exit(1);                                                       \
    }                                                                     \
  } while (0)

// Median over runs of the milliseconds between two events around fn().
template <class F>
double median_ms(cudaStream_t s, int warmup, int runs, F &&fn) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) fn();
  CHECK_CUDA(cudaStreamSynchronize(s));
  std::vector<double> t(runs);
  for (int i = 0; i < runs; ++i) {
    CHECK_CUDA(cudaEventRecord(a, s));
    fn();
    CHECK_CUDA(cudaEventRecord(b, s));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    t[i] = ms;
  }
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[runs / 2];
}

__global__ void fill_normalish(float *x, size_t n, unsigned seed) {
  // A cheap hash-based approximately normal fill (sum of 4 uniforms).
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
    float s = 0.0f;
    for (int k = 0; k < 4; ++k) {
      h ^= h >> 13;
      h *= 0x5bd1e995u;
      h ^= h >> 15;
      s += static_cast<float>(h & 0xffffff) / 16777216.0f;
    }
    x[i] = (s - 2.0f) * 1.7320508f;
  }
}

__global__ void abs_bits_kernel(const float *x, unsigned *out, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride)
    out[i] = __float_as_uint(x[i]) & 0x7fffffffu;
}

void fill(float *x, size_t n, unsigned seed, cudaStream_t s) {
  fill_normalish<<<1024, 256, 0, s>>>(x, n, seed);
  CHECK_CUDA(cudaGetLastError());
}

// (a) Ok-Topk's fused pass at one size: accumulate_kth (add, compaction of
// the 2% of |r| above thr, the k-th largest of that list at 1%) with its one
// read-back. g is zero so r, and the list, stay the same from run to run;
// the pass reads and writes the same bytes as with a real g.
void fused_pass_at(pgs_ops_t *ops, cudaStream_t s, int runs, float *r, float *g,
                   size_t n, double floor_ms) {
  const size_t k = n / 100, cap = n / 25;
  float thr = 0;
  int64_t n_gt = 0;
  CHECK_PGS(ops->kth_abs(ops, r, n, n / 50, &thr, &n_gt));
  CHECK_CUDA(cudaMemsetAsync(g, 0, n * 4, s));
  int32_t *idx = nullptr;
  float *val = nullptr;
  CHECK_CUDA(cudaMalloc(&idx, cap * 4));
  CHECK_CUDA(cudaMalloc(&val, cap * 4));
  pgs_fused_t out{};
  const double t = median_ms(s, 3, runs, [&] {
    CHECK_PGS(ops->accumulate_kth(ops, r, g, n, thr, idx, val, cap, k, &out));
  });
  std::printf(
      "%10s fused pass (accumulate_kth, list %lld, k %zu): %.1f us, "
      "%.1f%% of the copy floor\n",
      "", static_cast<long long>(out.count), k, t * 1e3, 100.0 * floor_ms / t);
  CHECK_CUDA(cudaFree(idx));
  CHECK_CUDA(cudaFree(val));
}

// (c) The estimators' parts, one size: each call includes its read-back,
// as the selection pays it.
void estimator_costs_at(pgs_ops_t *ops, cudaStream_t s, int runs, size_t n) {
  const size_t k = n / 100, m = n / 100;  // density 0.01, DGC's 1% sample
  float *x = nullptr, *copy_dst = nullptr, *sample = nullptr, *val = nullptr;
  int32_t *sidx = nullptr, *idx = nullptr;
  CHECK_CUDA(cudaMalloc(&x, n * 4));
  CHECK_CUDA(cudaMalloc(&copy_dst, n * 4));
  CHECK_CUDA(cudaMalloc(&sample, m * 4));
  CHECK_CUDA(cudaMalloc(&sidx, m * 4));
  CHECK_CUDA(cudaMalloc(&idx, 2 * k * 4));
  CHECK_CUDA(cudaMalloc(&val, 2 * k * 4));
  fill(x, n, 4, s);
  std::vector<int32_t> host(m);
  std::mt19937_64 rng(n);
  for (auto &i : host) i = static_cast<int32_t>(rng() % n);
  CHECK_CUDA(cudaMemcpy(sidx, host.data(), m * 4, cudaMemcpyHostToDevice));
  // One read of x: half a copy of 4n bytes' worth (2n read + 2n written).
  const double t_copy = median_ms(s, 3, runs, [&] {
    CHECK_CUDA(
        cudaMemcpyAsync(copy_dst, x, n * 2, cudaMemcpyDeviceToDevice, s));
  });
  const double t_read = t_copy;  // moves 4n bytes, as one read of x does
  CHECK_CUDA(cudaMemsetAsync(copy_dst, 0, n * 4, s));  // the adds' r
  double mean = 0, sd = 0, st5[5] = {0}, st7[7] = {0};
  int64_t none = 0, bad = 0;
  float thr = 0;
  int64_t n_gt = 0, gt = 0, eq = 0, got = 0;
  const int64_t whole[2] = {0, static_cast<int64_t>(n)};
  struct Row {
    const char *what;
    double ms;
  } rows[] = {
      // The add itself (copy_dst += x), plain and with the statistics of a
      // first guess taken in its pass (a statistics estimator's start).
      {"add r += g (plain; 3 reads' traffic)",
       median_ms(s, 3, runs,
                 [&] {
                   CHECK_PGS(ops->accumulate_select(ops, copy_dst, x, n,
                                                    INFINITY, nullptr, nullptr,
                                                    0, &none, &bad));
                 })},
      {"  the same with mean_std + abs_stats",
       median_ms(s, 3, runs,
                 [&] {
                   CHECK_PGS(
                       ops->accumulate_stats(ops, copy_dst, x, n, &bad, st7));
                 })},
      // The same, the guess (SIDCo's exponential, on the device) and the
      // list at it in the same call, one wait: a statistics estimator's
      // whole first selection.
      {"  + the guess and its list (one wait)",
       median_ms(s, 3, runs,
                 [&] {
                   const pgs_guess_rule_t rule = {PGS_GUESS_LAPLACE,
                                                  std::log(100.0),
                                                  static_cast<double>(k)};
                   float gthr = 0.0f;
                   int64_t gcount = 0;
                   CHECK_PGS(ops->accumulate_guess_select(
                       ops, copy_dst, x, n, &rule, idx, val, 2 * k, &bad, st7,
                       &gthr, &gcount));
                 })},
      {"mean_std (gaussian, sidco_exp guess)",
       median_ms(s, 3, runs,
                 [&] { CHECK_PGS(ops->mean_std(ops, x, n, &mean, &sd)); })},
      {"abs_stats (one SIDCo stage)",
       median_ms(s, 3, runs,
                 [&] { CHECK_PGS(ops->abs_stats(ops, x, n, 0.0f, st5)); })},
      {"gather + kth_abs of 1% (dgc_sample)",
       median_ms(s, 3, runs,
                 [&] {
                   CHECK_PGS(ops->gather(ops, x, n, sidx, m, sample));
                   CHECK_PGS(
                       ops->kth_abs(ops, sample, m, m / 100, &thr, &n_gt));
                 })},
      {"kth_abs over n (exact)",
       median_ms(s, 3, runs,
                 [&] { CHECK_PGS(ops->kth_abs(ops, x, n, k, &thr, &n_gt)); })},
      {"count_regions at thr (any guess)",
       median_ms(s, 3, runs,
                 [&] {
                   CHECK_PGS(
                       ops->count_regions(ops, x, n, whole, 1, thr, &gt, &eq));
                 })},
      {"compact at thr (any selection)",
       median_ms(s, 3, runs,
                 [&] {
                   CHECK_PGS(ops->compact(ops, x, n, thr, -1, 0, idx, val,
                                          2 * k, &got));
                 })},
      // The same with its count planned (as the algorithms call it): no
      // read back, the count checked on the device.
      {"  the same, count planned (no wait)",
       median_ms(s, 3, runs,
                 [&] {
                   CHECK_PGS(ops->compact(ops, x, n, thr, -1, 0, idx, val,
                                          static_cast<size_t>(got), nullptr));
                 })},
      // Nothing selected: the load, the flags and the scans alone.
      {"  the same, nothing above thr",
       median_ms(s, 3, runs,
                 [&] {
                   CHECK_PGS(ops->compact(ops, x, n, INFINITY, -1, 0, idx, val,
                                          0, nullptr));
                 })},
  };
  CHECK_PGS(ops->check(ops));
  std::printf("n = %zu: one read of x (4n bytes at the copy's rate) %.1f us\n",
              n, t_read * 1e3);
  for (const Row &r : rows)
    std::printf("  %-38s %8.1f us  %5.2f reads\n", r.what, r.ms * 1e3,
                r.ms / t_read);
  CHECK_CUDA(cudaFree(x));
  CHECK_CUDA(cudaFree(copy_dst));
  CHECK_CUDA(cudaFree(sample));
  CHECK_CUDA(cudaFree(sidx));
  CHECK_CUDA(cudaFree(idx));
  CHECK_CUDA(cudaFree(val));
}

void estimator_costs(pgs_ops_t *ops, cudaStream_t s, int runs) {
  std::printf(
      "\n(c) the estimators' parts, density 0.01 (issue target: a cheap "
      "guess <= 1.5 reads, 0.25 ms at 100M on an H100)\n");
  // PGS_BENCH_N: one size instead (a profiler run).
  const char *one = std::getenv("PGS_BENCH_N");
  if (one != nullptr) {
    estimator_costs_at(ops, s, runs, std::strtoull(one, nullptr, 10));
    return;
  }
  for (size_t n : {size_t{25} << 20, size_t{100} << 20})
    estimator_costs_at(ops, s, runs, n);
}

// (d) merge_pairs of two sorted lists of m pairs each from [0, 4m) (about
// one index in seven common), as Ok-Topk's reduction and gTop-k's tree merge
// a received list into their own; with its count read back.
void merge_costs(pgs_ops_t *ops, cudaStream_t s, int runs) {
  std::printf("\n(d) merge_pairs of two sorted lists of m pairs each\n");
  for (size_t m : {size_t{68750}, size_t{275000}, size_t{1100000}}) {
    std::mt19937_64 rng(m);
    std::vector<int32_t> ha, hb;
    for (size_t i = 0; i < 4 * m; ++i) {
      if (rng() % 4 == 0) ha.push_back(static_cast<int32_t>(i));
      if (rng() % 4 == 0) hb.push_back(static_cast<int32_t>(i));
    }
    const size_t na = ha.size(), nb = hb.size(), cap = na + nb;
    int32_t *ia = nullptr, *ib = nullptr, *io = nullptr;
    float *va = nullptr, *vb = nullptr, *vo = nullptr;
    CHECK_CUDA(cudaMalloc(&ia, na * 4));
    CHECK_CUDA(cudaMalloc(&ib, nb * 4));
    CHECK_CUDA(cudaMalloc(&io, cap * 4));
    CHECK_CUDA(cudaMalloc(&va, na * 4));
    CHECK_CUDA(cudaMalloc(&vb, nb * 4));
    CHECK_CUDA(cudaMalloc(&vo, cap * 4));
    CHECK_CUDA(cudaMemcpy(ia, ha.data(), na * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(ib, hb.data(), nb * 4, cudaMemcpyHostToDevice));
    fill(va, na, 5, s);
    fill(vb, nb, 6, s);
    int64_t got = 0;
    const double t = median_ms(s, 3, runs, [&] {
      CHECK_PGS(
          ops->merge_pairs(ops, ia, va, na, ib, vb, nb, io, vo, cap, &got));
    });
    std::printf("  m = %8zu + %8zu: %8.1f us  (union %lld)\n", na, nb, t * 1e3,
                static_cast<long long>(got));
    for (void *p : {static_cast<void *>(ia), static_cast<void *>(ib),
                    static_cast<void *>(io), static_cast<void *>(va),
                    static_cast<void *>(vb), static_cast<void *>(vo)})
      CHECK_CUDA(cudaFree(p));
  }
}

// (e) CUB's selection: |x| >= thr over (index, value) pairs, written only
// below the room (an estimator's first guess may overflow its 2k).
struct AtLeast {
  float thr;
  __device__ bool operator()(const thrust::tuple<int, float> &t) const {
    return fabsf(thrust::get<1>(t)) >= thr;
  }
};
struct AbsAtLeast {
  float thr;
  __device__ bool operator()(float v) const { return fabsf(v) >= thr; }
};
struct CappedPairs {
  int32_t *idx;
  float *val;
  long long cap;
  __device__ void operator()(long long i,
                             const thrust::tuple<int, float> &t) const {
    if (i < cap) {
      idx[i] = thrust::get<0>(t);
      val[i] = thrust::get<1>(t);
    }
  }
};

void cub_select_at(pgs_ops_t *ops, cudaStream_t s, int runs, size_t n) {
  const size_t k = n / 100;
  float *x = nullptr, *val = nullptr, *copy_dst = nullptr;
  int32_t *idx = nullptr;
  long long *d_count = nullptr, *h_count = nullptr;
  CHECK_CUDA(cudaMalloc(&x, n * 4));
  CHECK_CUDA(cudaMalloc(&copy_dst, n * 4));
  CHECK_CUDA(cudaMalloc(&idx, 2 * k * 4));
  CHECK_CUDA(cudaMalloc(&val, n * 4));  // the values-only variant: uncapped
  CHECK_CUDA(cudaMalloc(&d_count, 8));
  CHECK_CUDA(cudaMallocHost(&h_count, 8));
  fill(x, n, 4, s);
  const double t_read = median_ms(s, 3, runs, [&] {
    CHECK_CUDA(
        cudaMemcpyAsync(copy_dst, x, n * 2, cudaMemcpyDeviceToDevice, s));
  });
  float thr = 0;
  int64_t n_gt = 0, got = 0;
  CHECK_PGS(ops->kth_abs(ops, x, n, k, &thr, &n_gt));
  auto in = thrust::make_zip_iterator(thrust::counting_iterator<int>(0), x);
  auto out = thrust::make_tabulate_output_iterator(
      CappedPairs{idx, val, static_cast<long long>(2 * k)});
  size_t bytes = 0, bytes2 = 0;
  CHECK_CUDA(cub::DeviceSelect::If(nullptr, bytes, in, out, d_count,
                                   static_cast<long long>(n), AtLeast{thr}, s));
  CHECK_CUDA(cub::DeviceSelect::If(nullptr, bytes2, x, val, d_count,
                                   static_cast<long long>(n), AbsAtLeast{thr},
                                   s));
  void *temp = nullptr;
  CHECK_CUDA(cudaMalloc(&temp, std::max(bytes, bytes2)));
  auto pairs = [&] {
    CHECK_CUDA(cub::DeviceSelect::If(temp, bytes, in, out, d_count,
                                     static_cast<long long>(n), AtLeast{thr},
                                     s));
  };
  auto read_back = [&] {
    CHECK_CUDA(cudaMemcpyAsync(h_count, d_count, 8, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
  };
  struct Row {
    const char *what;
    double ms;
  } rows[] = {
      {"table compact, count read back",
       median_ms(s, 3, runs,
                 [&] {
                   CHECK_PGS(ops->compact(ops, x, n, thr, -1, 0, idx, val,
                                          2 * k, &got));
                 })},
      {"CUB If pairs, count read back", median_ms(s, 3, runs,
                                                  [&] {
                                                    pairs();
                                                    read_back();
                                                  })},
      {"CUB If pairs, no read-back", median_ms(s, 3, runs, pairs)},
      {"CUB If values only (uncapped)",
       median_ms(s, 3, runs,
                 [&] {
                   CHECK_CUDA(cub::DeviceSelect::If(
                       temp, bytes2, x, val, d_count, static_cast<long long>(n),
                       AbsAtLeast{thr}, s));
                 })},
  };
  pairs();
  read_back();
  CHECK_PGS(ops->compact(ops, x, n, thr, -1, 0, idx, val, 2 * k, &got));
  std::printf("n = %zu: one read %.1f us; table count %lld, CUB count %lld%s\n",
              n, t_read * 1e3, static_cast<long long>(got), *h_count,
              got == *h_count ? "" : "  MISMATCH");
  for (const Row &r : rows)
    std::printf("  %-34s %8.1f us  %5.2f reads\n", r.what, r.ms * 1e3,
                r.ms / t_read);
  for (void *p : {static_cast<void *>(x), static_cast<void *>(copy_dst),
                  static_cast<void *>(idx), static_cast<void *>(val),
                  static_cast<void *>(d_count), temp})
    CHECK_CUDA(cudaFree(p));
  CHECK_CUDA(cudaFreeHost(h_count));
}

void cub_select(pgs_ops_t *ops, cudaStream_t s, int runs) {
  std::printf(
      "\n(e) compaction at the k-th |x| (density 0.01): table vs CUB\n");
  for (size_t n : {size_t{25} << 20, size_t{100} << 20})
    cub_select_at(ops, s, runs, n);
}

}  // namespace

int main(int argc, char **argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 50;
  // Sections to run (a profiler run takes one): default all.
  const char *sections = argc > 2 ? argv[2] : "abcde";
  auto want = [sections](char c) {
    return std::strchr(sections, c) != nullptr;
  };
  if (!pgs_cuda_available()) {
    std::printf("no CUDA device\n");
    return 0;
  }
  int dev = 0;
  CHECK_CUDA(cudaSetDevice(dev));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, dev));
  int mem_clock_khz = 0, bus_bits = 0;
  // cudaDeviceProp lost memoryClockRate in CUDA 13: ask the attributes.
  (void)cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, dev);
  (void)cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev);
  (void)cudaGetLastError();
  // DDR: two transfers per clock.
  const double peak_gbs = 2.0 * mem_clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
  std::printf("device: %s, %d SMs, %.1f GB, L2 %.0f MB\n", prop.name,
              prop.multiProcessorCount, prop.totalGlobalMem / 1e9,
              prop.l2CacheSize / 1e6);
  if (peak_gbs > 0)
    std::printf(
        "theoretical memory bandwidth: %.0f GB/s (%d kHz x %d bit x 2)\n",
        peak_gbs, mem_clock_khz, bus_bits);
  else
    std::printf("theoretical memory bandwidth: not reported by the device\n");

  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  pgs_ops_t *ops = nullptr;
  CHECK_PGS(pgs_ops_cuda_create(s, dev, &ops));

  if (want('a')) {
    // ---- (a) fused accumulate
    // ---------------------------------------------------
    std::printf(
        "\n(a) accumulate r += g with count |r| >= thr; floor = 12n bytes\n");
    std::printf("%10s %11s %11s %11s %11s %9s %9s %9s %9s\n", "n", "copy GB/s",
                "acc+cnt us", "acc us", "acc x20 us", "%copy", "%peak",
                "%copy(nc)", "%peak(nc)");
    for (size_t n : {size_t{4} << 20, size_t{8} << 20, size_t{16} << 20,
                     size_t{32} << 20, size_t{128} << 20}) {
      float *r = nullptr, *g = nullptr;
      CHECK_CUDA(cudaMalloc(&r, n * 4));
      CHECK_CUDA(cudaMalloc(&g, n * 4));
      fill(r, n, 1, s);
      fill(g, n, 2, s);
      CHECK_CUDA(cudaStreamSynchronize(s));
      const double bytes = 12.0 * n;
      // Practical peak: a device-to-device copy moving the same 12n bytes
      // (reads 6n, writes 6n).
      float *copy_src = nullptr, *copy_dst = nullptr;
      CHECK_CUDA(cudaMalloc(&copy_src, n * 6));
      CHECK_CUDA(cudaMalloc(&copy_dst, n * 6));
      const double t_copy = median_ms(s, 3, runs, [&] {
        CHECK_CUDA(cudaMemcpyAsync(copy_dst, copy_src, n * 6,
                                   cudaMemcpyDeviceToDevice, s));
      });
      CHECK_CUDA(cudaFree(copy_src));
      CHECK_CUDA(cudaFree(copy_dst));
      const double copy_gbs = bytes / (t_copy * 1e-3) / 1e9;
      int64_t cnt = 0;
      // With the count: the call includes its read-back (one host round trip).
      const double t_cnt = median_ms(s, 3, runs, [&] {
        CHECK_PGS(ops->accumulate(ops, r, g, n, 2.5f, &cnt));
      });
      // Without the count: asynchronous, one kernel.
      const double t_nc = median_ms(s, 3, runs, [&] {
        CHECK_PGS(ops->accumulate(ops, r, g, n, 2.5f, nullptr));
      });
      // 20 back-to-back calls without count: the kernel alone, launch hidden.
      const double t_20 =
          median_ms(s, 1, std::max(5, runs / 5),
                    [&] {
                      for (int i = 0; i < 20; ++i)
                        CHECK_PGS(ops->accumulate(ops, r, g, n, 2.5f, nullptr));
                    }) /
          20.0;
      const double floor_copy = bytes / (copy_gbs * 1e9) * 1e3;  // ms
      const double floor_peak =
          peak_gbs > 0 ? bytes / (peak_gbs * 1e9) * 1e3 : 0;
      std::printf(
          "%10zu %11.0f %11.1f %11.1f %11.1f %8.1f%% %8.1f%% %8.1f%% %8.1f%%\n",
          n, copy_gbs, t_cnt * 1e3, t_nc * 1e3, t_20 * 1e3,
          100.0 * floor_copy / t_cnt,
          peak_gbs > 0 ? 100.0 * floor_peak / t_cnt : 0.0,
          100.0 * floor_copy / t_20,
          peak_gbs > 0 ? 100.0 * floor_peak / t_20 : 0.0);
      fused_pass_at(ops, s, runs, r, g, n, floor_copy);
      CHECK_CUDA(cudaFree(r));
      CHECK_CUDA(cudaFree(g));
    }
    std::printf(
        "(%%copy/%%peak: floor time at the copy / theoretical bandwidth "
        "over the measured time; 'acc+cnt' is the full call with its "
        "count read back, 'nc' columns use 'acc x20', the kernel with "
        "launches overlapped)\n");
  }

  // ---- (b) exact k-th |x|
  // -----------------------------------------------------
  if (want('b')) {
    const size_t n = 25000000, k = 250000;
    std::printf("\n(b) exact k-th largest |x|, n = %zu, k = %zu\n", n, k);
    float *x = nullptr;
    unsigned *keys = nullptr, *keys_out = nullptr;
    CHECK_CUDA(cudaMalloc(&x, n * 4));
    CHECK_CUDA(cudaMalloc(&keys, n * 4));
    CHECK_CUDA(cudaMalloc(&keys_out, n * 4));
    fill(x, n, 3, s);
    float thr = 0;
    int64_t n_gt = 0;
    const double t_kth = median_ms(s, 3, runs, [&] {
      CHECK_PGS(ops->kth_abs(ops, x, n, k, &thr, &n_gt));
    });
    // Baseline: full CUB radix sort of the |x| bits (no selection at all).
    size_t temp_bytes = 0;
    CHECK_CUDA(cub::DeviceRadixSort::SortKeysDescending(
        nullptr, temp_bytes, keys, keys_out, static_cast<int>(n), 0, 32, s));
    void *temp = nullptr;
    CHECK_CUDA(cudaMalloc(&temp, temp_bytes));
    const double t_sort = median_ms(s, 3, runs, [&] {
      abs_bits_kernel<<<1024, 256, 0, s>>>(x, keys, n);
      CHECK_CUDA(cudaGetLastError());
      CHECK_CUDA(cub::DeviceRadixSort::SortKeysDescending(
          temp, temp_bytes, keys, keys_out, static_cast<int>(n), 0, 32, s));
    });
    unsigned kth_bits = 0;
    CHECK_CUDA(
        cudaMemcpy(&kth_bits, keys_out + (k - 1), 4, cudaMemcpyDeviceToHost));
    float sorted_kth = 0;
    std::memcpy(&sorted_kth, &kth_bits, 4);
    // Selection as the algorithms use it: kth_abs then compact to k pairs.
    int32_t *idx = nullptr;
    float *val = nullptr;
    CHECK_CUDA(cudaMalloc(&idx, k * 4));
    CHECK_CUDA(cudaMalloc(&val, k * 4));
    int64_t got = 0;
    const double t_topk = median_ms(s, 3, runs, [&] {
      CHECK_PGS(ops->kth_abs(ops, x, n, k, &thr, &n_gt));
      CHECK_PGS(ops->compact(ops, x, n, thr, static_cast<int64_t>(k) - n_gt, 0,
                             idx, val, k, &got));
    });
    std::printf(
        "kth_abs (radix select):          %8.1f us  thr=%.6g n_gt=%lld "
        "(sort says %.6g)%s\n",
        t_kth * 1e3, thr, static_cast<long long>(n_gt), sorted_kth,
        thr == sorted_kth ? "" : "  MISMATCH");
    std::printf("kth_abs + compact (top-k pairs): %8.1f us  (%lld pairs)\n",
                t_topk * 1e3, static_cast<long long>(got));
    std::printf("CUB full radix sort of |x|:      %8.1f us  (%.1fx kth_abs)\n",
                t_sort * 1e3, t_sort / t_kth);
    std::printf(
        "torch.topk(x.abs(), k): run cuda/bench/bench_topk.py on this "
        "machine and divide by the kth_abs time above\n");
    CHECK_CUDA(cudaFree(temp));
    CHECK_CUDA(cudaFree(x));
    CHECK_CUDA(cudaFree(keys));
    CHECK_CUDA(cudaFree(keys_out));
    CHECK_CUDA(cudaFree(idx));
    CHECK_CUDA(cudaFree(val));
  }
  if (want('c')) estimator_costs(ops, s, runs);
  if (want('d')) merge_costs(ops, s, runs);
  if (want('e')) cub_select(ops, s, runs);
  pgs_ops_cuda_destroy(ops);
  CHECK_CUDA(cudaStreamDestroy(s));
  return 0;
}
