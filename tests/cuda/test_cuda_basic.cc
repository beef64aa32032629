// CUDA ops against the host ops: the table, memory functions and the
// elementwise kernels (accumulate, scale, count_nonfinite, mean_std,
// abs_stats, accumulate_stats, accumulate_guess_select).
#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "cuda_test_util.h"

namespace cuda_test {
namespace {

class CudaBasic : public CudaTest {};

// ---- table and memory -----------------------------------------------------

TEST_F(CudaBasic, TableIsCompleteForDeviceMemory) {
  const pgs_ops_t *o = gpu();
  EXPECT_EQ(o->mem, PGS_MEM_DEVICE);
  EXPECT_NE(o->ctx, nullptr);
  EXPECT_TRUE(o->alloc && o->free && o->copy && o->fill_zero && o->sync);
  EXPECT_TRUE(o->accumulate && o->scale && o->count_nonfinite && o->mean_std &&
              o->abs_stats && o->accumulate_stats &&
              o->accumulate_guess_select);
  EXPECT_TRUE(o->count_regions && o->kth_abs && o->hist_abs && o->compact &&
              o->select_pairs);
  EXPECT_TRUE(o->gather && o->zero_at && o->scatter_add &&
              o->scatter_add_sorted && o->zero_common && o->merge_pairs);
  pgs_ops_t *bad = nullptr;
  EXPECT_EQ(pgs_ops_cuda_create(nullptr, -1, &bad), PGS_ERR_INVALID);
  EXPECT_EQ(pgs_ops_cuda_create(nullptr, 1 << 20, &bad), PGS_ERR_INVALID);
  EXPECT_EQ(pgs_ops_cuda_create(nullptr, 0, nullptr), PGS_ERR_INVALID);
  pgs_ops_cuda_destroy(nullptr);  // harmless
}

TEST_F(CudaBasic, AllocCopyFillRoundTrip) {
  const pgs_ops_t *o = gpu();
  const size_t n = 100003;
  std::vector<float> src = normal(n, 1);
  Dev<float> a(src), b(n);
  EXPECT_EQ(o->copy(o, b.get(), a.get(), n * 4, PGS_COPY_SAME), PGS_OK);
  EXPECT_TRUE(same(b.host(), src));
  EXPECT_EQ(o->fill_zero(o, b.get() + 7, 100 * 4), PGS_OK);
  std::vector<float> want = src;
  std::fill(want.begin() + 7, want.begin() + 107, 0.0f);
  EXPECT_TRUE(same(b.host(), want));
  EXPECT_EQ(o->sync(o), PGS_OK);
  // Overlapping device copies behave like memmove, both directions.
  Dev<float> c(src);
  EXPECT_EQ(o->copy(o, c.get() + 10, c.get(), 5000 * 4, PGS_COPY_SAME), PGS_OK);
  want = src;
  std::memmove(want.data() + 10, src.data(), 5000 * 4);
  EXPECT_TRUE(same(c.host(), want));
  c.put(src);
  EXPECT_EQ(o->copy(o, c.get(), c.get() + 10, 5000 * 4, PGS_COPY_SAME), PGS_OK);
  want = src;
  std::memmove(want.data(), src.data() + 10, 5000 * 4);
  EXPECT_TRUE(same(c.host(), want));
}

TEST_F(CudaBasic, MemoryEdgeCasesAndBadArguments) {
  const pgs_ops_t *o = gpu();
  void *p = reinterpret_cast<void *>(1);
  EXPECT_EQ(o->alloc(o, &p, 0), PGS_OK);
  EXPECT_EQ(p, nullptr);
  o->free(o, nullptr);
  EXPECT_EQ(o->alloc(o, nullptr, 8), PGS_ERR_INVALID);
  Dev<float> d(4);
  float h = 1.0f;
  EXPECT_EQ(o->copy(o, nullptr, &h, 4, PGS_COPY_FROM_HOST), PGS_ERR_INVALID);
  EXPECT_EQ(o->copy(o, d.get(), nullptr, 4, PGS_COPY_FROM_HOST),
            PGS_ERR_INVALID);
  EXPECT_EQ(o->copy(o, d.get(), &h, 4, static_cast<pgs_copy_kind_t>(7)),
            PGS_ERR_INVALID);
  EXPECT_EQ(o->copy(o, nullptr, nullptr, 0, PGS_COPY_SAME), PGS_OK);
  EXPECT_EQ(o->fill_zero(o, nullptr, 4), PGS_ERR_INVALID);
  EXPECT_EQ(o->fill_zero(o, nullptr, 0), PGS_OK);
  // Absurd allocation: an error status, not an abort.
  void *huge = nullptr;
  EXPECT_EQ(o->alloc(o, &huge, size_t{1} << 60), PGS_ERR_NO_MEMORY);
  EXPECT_EQ(huge, nullptr);
  // The table still works afterwards.
  EXPECT_EQ(o->fill_zero(o, d.get(), 16), PGS_OK);
  EXPECT_TRUE(same(d.host(), std::vector<float>(4, 0.0f)));
}

// A table on its own stream (and a device set elsewhere) gives the same
// results as the default-stream table.
TEST_F(CudaBasic, OwnStreamTable) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  pgs_ops_t *o = nullptr;
  ASSERT_EQ(pgs_ops_cuda_create(s, 0, &o), PGS_OK);
  const size_t n = 1 << 20;
  std::vector<float> r = normal(n, 2), g = normal(n, 3);
  {
    Dev<float> dr(r, o), dg(g, o);
    int64_t c1 = -1, c2 = -1;
    ASSERT_EQ(o->accumulate(o, dr.get(), dg.get(), n, 1.5f, &c1), PGS_OK);
    std::vector<float> hr = r;
    ASSERT_EQ(cpu()->accumulate(cpu(), hr.data(), g.data(), n, 1.5f, &c2),
              PGS_OK);
    EXPECT_EQ(c1, c2);
    EXPECT_TRUE(same(dr.host(), hr));
    float t1 = 0, t2 = 0;
    int64_t g1 = 0, g2 = 0;
    ASSERT_EQ(o->kth_abs(o, dr.get(), n, 1000, &t1, &g1), PGS_OK);
    ASSERT_EQ(cpu()->kth_abs(cpu(), hr.data(), n, 1000, &t2, &g2), PGS_OK);
    EXPECT_EQ(bits_of(t1), bits_of(t2));
    EXPECT_EQ(g1, g2);
  }
  pgs_ops_cuda_destroy(o);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

// ---- accumulate -----------------------------------------------------------

// r (at offset ro) += g (at offset go) on both tables; offsets that differ
// mod 4 take the scalar path, equal ones the float4 path with a head.
void check_accumulate(const std::vector<float> &r, const std::vector<float> &g,
                      size_t ro, size_t go, float thr, bool count) {
  const size_t n = r.size();
  Dev<float> dr(n + ro), dg(n + go);
  dr.put(r, ro);
  dg.put(g, go);
  int64_t c_gpu = -7, c_cpu = -9;
  ASSERT_EQ(gpu()->accumulate(gpu(), dr.get() + ro, dg.get() + go, n, thr,
                              count ? &c_gpu : nullptr),
            PGS_OK);
  std::vector<float> want = r;
  ASSERT_EQ(cpu()->accumulate(cpu(), want.data(), g.data(), n, thr,
                              count ? &c_cpu : nullptr),
            PGS_OK);
  EXPECT_TRUE(same(dr.host(ro), want, true))
      << "n=" << n << " ro=" << ro << " go=" << go;
  if (count) {
    EXPECT_EQ(c_gpu, c_cpu) << "n=" << n << " thr=" << thr;
  } else {
    EXPECT_EQ(c_gpu, -7);
  }
}

TEST_F(CudaBasic, AccumulateMatchesCpuAcrossSizes) {
  for (size_t n : sizes()) {
    std::vector<float> r = normal(n, 10 + n), g = normal(n, 20 + n);
    for (float thr : {-1.0f, 0.0f, 1.0f, 2.5f})
      check_accumulate(r, g, 0, 0, thr, true);
    check_accumulate(r, g, 0, 0, 1.0f, false);
    if (n <= (size_t{1} << 20)) {
      check_accumulate(r, g, 1, 1, 1.0f, true);  // same misalignment
      check_accumulate(r, g, 3, 0, 1.0f, true);  // different: scalar path
      check_accumulate(r, g, 2, 5, 1.0f, false);
    }
  }
}

TEST_F(CudaBasic, AccumulateTiesZerosDenormalsNonfinite) {
  for (size_t n : {size_t{7}, size_t{1000}, size_t{65537}}) {
    std::vector<float> r = tied(n, 30 + n, 8, 0.3), g = tied(n, 31 + n, 8, 0.3);
    for (float thr : {0.0f, 0.5f, 1.0f, 1.75f, 100.0f})
      check_accumulate(r, g, 0, 0, thr, true);
    // Denormal sums must not be flushed to zero.
    std::vector<float> dr = denormals(n, 32 + n), dg = denormals(n, 33 + n);
    for (float thr : {0.0f, from_bits(100), 1e-30f})
      check_accumulate(dr, dg, 0, 0, thr, true);
    add_nonfinite(r, 34 + n, n / 10 + 1);
    check_accumulate(r, g, 0, 0, 0.5f, true);
    check_accumulate(r, g, 1, 2, 0.5f, true);
    // All zeros: nothing counts, even at threshold 0.
    std::vector<float> z(n, 0.0f), mz(n, -0.0f);
    check_accumulate(z, mz, 0, 0, 0.0f, true);
  }
  int64_t c = -1;
  EXPECT_EQ(gpu()->accumulate(gpu(), nullptr, nullptr, 0, 0.0f, &c), PGS_OK);
  EXPECT_EQ(c, 0);
  Dev<float> d(4);
  EXPECT_EQ(gpu()->accumulate(gpu(), d.get(), nullptr, 4, 0.0f, nullptr),
            PGS_ERR_INVALID);
}

// ---- scale, count_nonfinite, mean_std -------------------------------------

TEST_F(CudaBasic, ScaleMatchesCpu) {
  for (size_t n : sizes()) {
    std::vector<float> x = normal(n, 40 + n);
    if (n > 10) add_nonfinite(x, 41, 5);
    for (float s : {0.125f, -3.0f, 1e-39f, 0.0f}) {
      for (size_t off : {size_t{0}, size_t{1}}) {
        if (off && n > (size_t{1} << 20)) continue;
        Dev<float> d(n + off);
        d.put(x, off);
        ASSERT_EQ(gpu()->scale(gpu(), d.get() + off, n, s), PGS_OK);
        std::vector<float> want = x;
        ASSERT_EQ(cpu()->scale(cpu(), want.data(), n, s), PGS_OK);
        EXPECT_TRUE(same(d.host(off), want, true)) << "n=" << n << " s=" << s;
      }
    }
  }
  EXPECT_EQ(gpu()->scale(gpu(), nullptr, 3, 2.0f), PGS_ERR_INVALID);
  EXPECT_EQ(gpu()->scale(gpu(), nullptr, 0, 2.0f), PGS_OK);
}

TEST_F(CudaBasic, CountNonfiniteMatchesCpu) {
  for (size_t n : sizes()) {
    for (size_t bad : {size_t{0}, size_t{1}, n / 7 + 1}) {
      std::vector<float> x = normal(n, 50 + n);
      add_nonfinite(x, 51 + bad, bad);
      if (n > 3) x[n - 1] = FLT_MAX;
      Dev<float> d(x);
      int64_t c_gpu = -1, c_cpu = -2;
      ASSERT_EQ(gpu()->count_nonfinite(gpu(), d.get(), n, &c_gpu), PGS_OK);
      ASSERT_EQ(cpu()->count_nonfinite(cpu(), x.data(), n, &c_cpu), PGS_OK);
      EXPECT_EQ(c_gpu, c_cpu) << "n=" << n;
    }
  }
  int64_t c = -1;
  EXPECT_EQ(gpu()->count_nonfinite(gpu(), nullptr, 0, &c), PGS_OK);
  EXPECT_EQ(c, 0);
  EXPECT_EQ(gpu()->count_nonfinite(gpu(), nullptr, 0, nullptr),
            PGS_ERR_INVALID);
}

TEST_F(CudaBasic, MeanStdMatchesCpu) {
  for (size_t n : sizes()) {
    std::vector<float> x = normal(n, 60 + n);
    for (auto &v : x) v = 1000.0f + 3.0f * v;  // large mean
    for (size_t off : {size_t{0}, size_t{3}}) {
      Dev<float> d(n + off);
      d.put(x, off);
      double m1 = -1, s1 = -1, m2 = -2, s2 = -2;
      ASSERT_EQ(gpu()->mean_std(gpu(), d.get() + off, n, &m1, &s1), PGS_OK);
      ASSERT_EQ(cpu()->mean_std(cpu(), x.data(), n, &m2, &s2), PGS_OK);
      EXPECT_NEAR(m1, m2, 1e-9 * std::fabs(m2)) << "n=" << n;
      EXPECT_NEAR(s1, s2, 1e-9 * s2 + 1e-12) << "n=" << n;
    }
  }
  double m = -1, s = -1;
  EXPECT_EQ(gpu()->mean_std(gpu(), nullptr, 0, &m, &s), PGS_OK);
  EXPECT_EQ(m, 0.0);
  EXPECT_EQ(s, 0.0);
  Dev<float> c(std::vector<float>(17, -2.5f));
  ASSERT_EQ(gpu()->mean_std(gpu(), c.get(), 17, &m, &s), PGS_OK);
  EXPECT_EQ(m, -2.5);
  EXPECT_EQ(s, 0.0);
  EXPECT_EQ(gpu()->mean_std(gpu(), c.get(), 17, nullptr, &s), PGS_ERR_INVALID);
}

TEST_F(CudaBasic, AbsStatsMatchesCpu) {
  for (size_t n : sizes()) {
    std::vector<float> x = normal(n, 70 + n);
    for (float thr : {0.0f, 1.5f, 1e9f}) {
      for (size_t off : {size_t{0}, size_t{3}}) {
        Dev<float> d(n + off);
        d.put(x, off);
        double g[5], c[5];
        ASSERT_EQ(gpu()->abs_stats(gpu(), d.get() + off, n, thr, g), PGS_OK);
        ASSERT_EQ(cpu()->abs_stats(cpu(), x.data(), n, thr, c), PGS_OK);
        EXPECT_EQ(g[0], c[0]) << "n=" << n << " thr=" << thr;
        for (int j = 1; j < 4; ++j)
          EXPECT_NEAR(g[j], c[j], 1e-9 * (1 + std::fabs(c[j])))
              << "n=" << n << " thr=" << thr << " j=" << j;
        EXPECT_EQ(g[4], c[4]) << "n=" << n << " thr=" << thr;
      }
    }
  }
  // Denormal and tiny magnitudes (the device splits each |x| into mantissa
  // and exponent instead of taking its log): the same sums as the host.
  std::vector<float> scaled = normal(4099, 77);
  for (size_t i = 0; i < scaled.size(); ++i)
    scaled[i] *= i % 3 == 0 ? 1e-39f : (i % 3 == 1 ? 1e-30f : 1e30f);
  for (const std::vector<float> &x : {scaled, denormals(4099, 78)}) {
    Dev<float> d(x.size());
    d.put(x, 0);
    double g[5], c[5];
    ASSERT_EQ(gpu()->abs_stats(gpu(), d.get(), x.size(), 0.0f, g), PGS_OK);
    ASSERT_EQ(cpu()->abs_stats(cpu(), x.data(), x.size(), 0.0f, c), PGS_OK);
    EXPECT_EQ(g[0], c[0]);
    for (int j = 1; j < 4; ++j)
      EXPECT_NEAR(g[j], c[j], 1e-9 * (1 + std::fabs(c[j]))) << "j=" << j;
    EXPECT_EQ(g[4], c[4]);
  }
  double out[5] = {-1, -1, -1, -1, -1};
  EXPECT_EQ(gpu()->abs_stats(gpu(), nullptr, 0, 0.0f, out), PGS_OK);
  EXPECT_EQ(out[0], 0.0);
  EXPECT_EQ(gpu()->abs_stats(gpu(), nullptr, 3, 0.0f, out), PGS_ERR_INVALID);
}

// ---- accumulate_stats -----------------------------------------------------

// The one pass against the host's three (its add, abs_stats at 0 and
// mean_std of the sums), r at offset ro and g at go.
void check_accumulate_stats(const std::vector<float> &r,
                            const std::vector<float> &g, size_t ro, size_t go) {
  const size_t n = r.size();
  Dev<float> dr(n + ro), dg(n + go);
  dr.put(r, ro);
  dg.put(g, go);
  double got[7], want[7];
  int64_t bad_gpu = -1, bad_cpu = -2;
  ASSERT_EQ(gpu()->accumulate_stats(gpu(), dr.get() + ro, dg.get() + go, n,
                                    &bad_gpu, got),
            PGS_OK);
  std::vector<float> sum = r;
  ASSERT_EQ(
      cpu()->accumulate_stats(cpu(), sum.data(), g.data(), n, &bad_cpu, want),
      PGS_OK);
  const std::string at = "n=" + std::to_string(n) +
                         " ro=" + std::to_string(ro) +
                         " go=" + std::to_string(go);
  EXPECT_TRUE(same(dr.host(ro), sum, true)) << at;
  EXPECT_EQ(bad_gpu, bad_cpu) << at;
  EXPECT_EQ(got[0], want[0]) << at;
  for (int j = 1; j < 4; ++j)
    EXPECT_NEAR(got[j], want[j], 1e-9 * (1 + std::fabs(want[j])))
        << at << " j=" << j;
  EXPECT_EQ(got[4], want[4]) << at;
  EXPECT_NEAR(got[5], want[5], 1e-9 * std::fabs(want[5]) + 1e-12) << at;
  EXPECT_NEAR(got[6], want[6], 1e-9 * want[6] + 1e-12) << at;
}

TEST_F(CudaBasic, AccumulateStatsMatchesCpu) {
  for (size_t n : sizes()) {
    std::vector<float> r = normal(n, 80 + n), g = normal(n, 81 + n);
    for (auto &v : r) v = 100.0f + 3.0f * v;  // a mean far from 0
    check_accumulate_stats(r, g, 0, 0);
    if (n <= (size_t{1} << 20)) {
      check_accumulate_stats(r, g, 1, 1);  // same misalignment: float4 body
      check_accumulate_stats(r, g, 3, 0);  // different: scalar
      add_nonfinite(g, 82 + n, n / 10 + 1);
      check_accumulate_stats(r, g, 0, 0);  // rejected sums keep r
      std::vector<float> z(n, 0.0f), mz(n, -0.0f);
      check_accumulate_stats(z, mz, 2, 2);  // no a > 0: smallest a is 0
    }
  }
  double out[7];
  int64_t bad = -1;
  EXPECT_EQ(gpu()->accumulate_stats(gpu(), nullptr, nullptr, 0, &bad, out),
            PGS_OK);
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(out[0], 0.0);
  EXPECT_EQ(out[6], 0.0);
  Dev<float> d(4);
  EXPECT_EQ(gpu()->accumulate_stats(gpu(), d.get(), nullptr, 4, &bad, out),
            PGS_ERR_INVALID);
  EXPECT_EQ(gpu()->accumulate_stats(gpu(), d.get(), d.get(), 4, nullptr, out),
            PGS_ERR_INVALID);
}

// ---- accumulate_guess_select ----------------------------------------------

// The device's add, guess and list in one wait against the host's: the
// sums bit for bit, the statistics as accumulate_stats, the guess equal to
// the host's expression on the statistics the device returned (--fmad=false
// there), and the list and count equal to the host's compact at that guess.
void check_guess_select(const std::vector<float> &r,
                        const std::vector<float> &g,
                        const pgs_guess_rule_t &rule, size_t cap, size_t off) {
  const size_t n = r.size();
  Dev<float> dr(n + off), dg(n + off);
  dr.put(r, off);
  dg.put(g, off);
  Dev<int32_t> di(std::vector<int32_t>(cap + 1, -7));
  Dev<float> dv(std::vector<float>(cap + 1, -7.0f));
  double got[7], want[7];
  int64_t bad_gpu = -1, bad_cpu = -2, count = -1;
  float thr = -1.0f;
  const std::string at = "n=" + std::to_string(n) +
                         " kind=" + std::to_string(rule.kind) +
                         " cap=" + std::to_string(cap);
  ASSERT_EQ(gpu()->accumulate_guess_select(
                gpu(), dr.get() + off, dg.get() + off, n, &rule, di.get(),
                dv.get(), cap, &bad_gpu, got, &thr, &count),
            PGS_OK)
      << at;
  std::vector<float> sum = r;
  ASSERT_EQ(
      cpu()->accumulate_stats(cpu(), sum.data(), g.data(), n, &bad_cpu, want),
      PGS_OK);
  EXPECT_TRUE(same(dr.host(off), sum, true)) << at;
  EXPECT_EQ(bad_gpu, bad_cpu) << at;
  EXPECT_EQ(got[0], want[0]) << at;
  EXPECT_NEAR(got[1], want[1], 1e-9 * (1 + std::fabs(want[1]))) << at;
  EXPECT_NEAR(got[6], want[6], 1e-9 * want[6] + 1e-12) << at;
  EXPECT_EQ(bits_of(thr), bits_of(pgs_guess_eval(&rule, got))) << at;
  std::vector<int32_t> hi(cap + 1, -7);
  std::vector<float> hv(cap + 1, -7.0f);
  int64_t want_count = -1;
  const int st = cpu()->compact(cpu(), sum.data(), n, thr, -1, 0, hi.data(),
                                hv.data(), cap, &want_count);
  ASSERT_TRUE(st == PGS_OK || st == PGS_ERR_OVERFLOW) << at;
  EXPECT_EQ(count, want_count) << at;
  EXPECT_TRUE(same(di.host(), hi)) << at;
  EXPECT_TRUE(same(dv.host(), hv)) << at;
  // Packed (val null): the same list as one block [idx | val], the values
  // behind the count's entries where it fits cap; never past 2 cap entries.
  Dev<float> pr(n + off);
  pr.put(r, off);
  Dev<int32_t> block(std::vector<int32_t>(2 * cap + 1, -7));
  int64_t packed_count = -1;
  ASSERT_EQ(gpu()->accumulate_guess_select(
                gpu(), pr.get() + off, dg.get() + off, n, &rule, block.get(),
                nullptr, cap, &bad_gpu, got, &thr, &packed_count),
            PGS_OK)
      << at;
  EXPECT_EQ(packed_count, want_count) << at;
  const std::vector<int32_t> b = block.host();
  EXPECT_EQ(b[2 * cap], -7) << at << " wrote past the block";
  if (static_cast<size_t>(want_count) > cap) return;
  const size_t m = static_cast<size_t>(want_count);
  for (size_t j = 0; j < m; ++j) {
    ASSERT_EQ(b[j], hi[j]) << at << " j=" << j;
    float v;
    std::memcpy(&v, &b[m + j], sizeof v);
    ASSERT_EQ(bits_of(v), bits_of(hv[j])) << at << " j=" << j;
  }
}

TEST_F(CudaBasic, AccumulateGuessSelectMatchesCpu) {
  for (size_t n : sizes()) {
    if (n < 1000) continue;
    std::vector<float> r = normal(n, 90 + n), g = normal(n, 91 + n);
    const double k = 0.01 * static_cast<double>(n);
    const size_t room = static_cast<size_t>(2 * k);
    for (const pgs_guess_rule_t &rule :
         {pgs_guess_rule_t{PGS_GUESS_NORMAL, 2.5758293035489, k},
          pgs_guess_rule_t{PGS_GUESS_LAPLACE, std::log(100.0), k},
          pgs_guess_rule_t{PGS_GUESS_GP, 0.0, k},
          pgs_guess_rule_t{PGS_GUESS_GAMMA, 0.0, k}}) {
      check_guess_select(r, g, rule, room, 0);
      if (n <= (size_t{1} << 20)) {
        check_guess_select(r, g, rule, room / 8, 0);  // a count past cap
        check_guess_select(r, g, rule, room, 1);      // scalar loads
      }
    }
    if (n <= (size_t{1} << 20)) {
      // Groups of 32 the compaction skips by their largest |r|: three in
      // four all zero, and every eighth all one value (ties across a
      // group), with the tail's partial group as it falls.
      std::vector<float> rz = r, gz = g;
      for (size_t i = 0; i < n; ++i) {
        const size_t q = i / 32;
        if (q % 4 != 0) rz[i] = gz[i] = 0.0f;
        if (q % 8 == 0) {
          rz[i] = 1.5f;
          gz[i] = 0.25f;
        }
      }
      for (size_t off : {size_t{0}, size_t{1}})
        check_guess_select(rz, gz, {PGS_GUESS_LAPLACE, std::log(100.0), k},
                           room, off);
      add_nonfinite(g, 92 + n, n / 10 + 1);  // rejected sums keep r
      check_guess_select(r, g, {PGS_GUESS_LAPLACE, std::log(100.0), k}, room,
                         0);
    }
  }
  double out[7];
  int64_t bad = -1, count = -1;
  float thr = -1.0f;
  const pgs_guess_rule_t rule = {PGS_GUESS_NORMAL, 1.0, 1.0};
  EXPECT_EQ(
      gpu()->accumulate_guess_select(gpu(), nullptr, nullptr, 0, &rule, nullptr,
                                     nullptr, 0, &bad, out, &thr, &count),
      PGS_OK);
  EXPECT_EQ(count, 0);
  EXPECT_EQ(thr, 0.0f);
  Dev<float> d(4);
  EXPECT_EQ(gpu()->accumulate_guess_select(gpu(), d.get(), d.get(), 4, nullptr,
                                           nullptr, nullptr, 0, &bad, out, &thr,
                                           &count),
            PGS_ERR_INVALID);
  EXPECT_EQ(
      gpu()->accumulate_guess_select(gpu(), d.get(), d.get(), 4, &rule, nullptr,
                                     nullptr, 4, &bad, out, &thr, &count),
      PGS_ERR_INVALID);
}

}  // namespace
}  // namespace cuda_test
