// CUDA ops against the host ops: kth_abs, hist_abs, count_regions, compact
// and select_pairs, compared bit for bit.
#include "cuda_test_util.h"

namespace cuda_test {
namespace {

class CudaSelect : public CudaTest {};

// ---- kth_abs --------------------------------------------------------------

void check_kth(const Dev<float> &d, const std::vector<float> &x, size_t k,
               size_t off = 0) {
  float t_gpu = -1.0f, t_cpu = -2.0f;
  int64_t g_gpu = -1, g_cpu = -2;
  ASSERT_EQ(gpu()->kth_abs(gpu(), d.get() + off, x.size(), k, &t_gpu, &g_gpu),
            PGS_OK);
  ASSERT_EQ(cpu()->kth_abs(cpu(), x.data(), x.size(), k, &t_cpu, &g_cpu),
            PGS_OK);
  EXPECT_EQ(bits_of(t_gpu), bits_of(t_cpu))
      << "n=" << x.size() << " k=" << k << " got " << t_gpu << " want "
      << t_cpu;
  EXPECT_EQ(g_gpu, g_cpu) << "n=" << x.size() << " k=" << k;
}

void check_kth_all(const std::vector<float> &x, uint64_t seed) {
  Dev<float> d(x);
  for (size_t k : ks_for(x.size(), seed)) check_kth(d, x, k);
}

TEST_F(CudaSelect, KthAbsMatchesCpuAcrossSizes) {
  for (size_t n : sizes()) check_kth_all(normal(n, 100 + n), n);
}

TEST_F(CudaSelect, KthAbsTiesZerosNegativesDenormals) {
  for (size_t n : {size_t{7}, size_t{1000}, size_t{65537}, size_t{1} << 20}) {
    check_kth_all(tied(n, 200 + n, 5, 0.4), n + 1);
    std::vector<float> neg = normal(n, 210 + n);
    for (auto &v : neg) v = -std::fabs(v);
    check_kth_all(neg, n + 2);
    check_kth_all(denormals(n, 220 + n), n + 3);
    // Everything in one top-byte bin: the candidate list starts at a later
    // level (or never) instead of after level 0.
    check_kth_all(one_binade(n, 230 + n), n + 4);
    // Only the lowest byte differs: the last level separates.
    std::mt19937_64 gen(n);
    std::vector<float> low(n);
    for (auto &v : low) v = from_bits(bits_of(1.0f) + (gen() & 0xffu));
    check_kth_all(low, n + 5);
  }
}

TEST_F(CudaSelect, KthAbsNanInfAndAllZeros) {
  for (size_t n : {size_t{1000}, size_t{65537}}) {
    std::vector<float> x = normal(n, 300 + n);
    add_nonfinite(x, 301, 20);  // NaN sorts above Inf by bits, as on the host
    check_kth_all(x, n + 6);
  }
  std::vector<float> z(1000, 0.0f);
  z[7] = -0.0f;
  check_kth_all(z, 7);
  for (size_t i : {3, 100, 101, 500, 999}) z[i] = 0.5f * static_cast<float>(i);
  Dev<float> d(z);
  for (size_t k : {size_t{1}, size_t{5}, size_t{6}, size_t{1000}})
    check_kth(d, z, k);
}

TEST_F(CudaSelect, KthAbsUnalignedAndBadArguments) {
  std::vector<float> x = normal(100001, 310);
  Dev<float> d(x.size() + 1);
  d.put(x, 1);
  for (size_t k : ks_for(x.size(), 311)) check_kth(d, x, k, 1);
  float thr = 42.0f;
  int64_t n_gt = 42;
  const pgs_ops_t *o = gpu();
  EXPECT_EQ(o->kth_abs(o, d.get(), 3, 0, &thr, &n_gt), PGS_ERR_INVALID);
  EXPECT_EQ(o->kth_abs(o, d.get(), 3, 4, &thr, &n_gt), PGS_ERR_INVALID);
  EXPECT_EQ(o->kth_abs(o, d.get(), 0, 1, &thr, &n_gt), PGS_ERR_INVALID);
  EXPECT_EQ(o->kth_abs(o, nullptr, 3, 1, &thr, &n_gt), PGS_ERR_INVALID);
  EXPECT_EQ(o->kth_abs(o, d.get(), 3, 1, nullptr, &n_gt), PGS_ERR_INVALID);
  EXPECT_EQ(o->kth_abs(o, d.get(), 3, 1, &thr, nullptr), PGS_ERR_INVALID);
  EXPECT_EQ(thr, 42.0f);
  EXPECT_EQ(n_gt, 42);
}

// ---- hist_abs -------------------------------------------------------------

TEST_F(CudaSelect, HistAbsMatchesCpuAtEveryLevel) {
  for (size_t n : {size_t{1}, size_t{1000}, size_t{65537}, size_t{1} << 20}) {
    std::vector<float> x = normal(n, 400 + n);
    std::vector<float> t = tied(n / 2 + 1, 401, 4, 0.5);
    x.insert(x.end(), t.begin(), t.end());
    std::vector<float> dn = denormals(n / 4 + 1, 402);
    x.insert(x.end(), dn.begin(), dn.end());
    add_nonfinite(x, 403, 3);
    Dev<float> d(x.size() + 1);
    d.put(x, 1);  // unaligned on purpose
    std::mt19937_64 gen(404 + n);
    std::uniform_int_distribution<size_t> pick(0, x.size() - 1);
    for (int trial = 0; trial < 4; ++trial) {
      const uint32_t real = bits_of(x[pick(gen)]) & 0x7fffffffu;
      for (uint32_t junk : {0u, 0x00ffffffu}) {
        for (int level = 0; level < PGS_HIST_LEVELS; ++level) {
          uint32_t keep = level == 0 ? 0u : ~0u << (32 - 8 * level);
          uint32_t prefix = (real & keep) | (junk & ~keep);
          std::vector<int64_t> hg(PGS_HIST_BINS, 5), hc(PGS_HIST_BINS, 5);
          ASSERT_EQ(gpu()->hist_abs(gpu(), d.get() + 1, x.size(), level, prefix,
                                    hg.data()),
                    PGS_OK);
          ASSERT_EQ(cpu()->hist_abs(cpu(), x.data(), x.size(), level, prefix,
                                    hc.data()),
                    PGS_OK);
          EXPECT_EQ(hg, hc) << "n=" << n << " level " << level;
        }
      }
    }
  }
  std::vector<int64_t> h(PGS_HIST_BINS, 0);
  Dev<float> d(4);
  EXPECT_EQ(gpu()->hist_abs(gpu(), d.get(), 4, -1, 0, h.data()),
            PGS_ERR_INVALID);
  EXPECT_EQ(gpu()->hist_abs(gpu(), d.get(), 4, 4, 0, h.data()),
            PGS_ERR_INVALID);
  EXPECT_EQ(gpu()->hist_abs(gpu(), d.get(), 4, 0, 0, nullptr), PGS_ERR_INVALID);
  EXPECT_EQ(gpu()->hist_abs(gpu(), nullptr, 0, 0, 0, h.data()), PGS_OK);
  EXPECT_EQ(h, std::vector<int64_t>(PGS_HIST_BINS, 0));
}

// ---- count_regions --------------------------------------------------------

void check_regions(const Dev<float> &d, const std::vector<float> &x,
                   const std::vector<int64_t> &bounds, float thr) {
  const int nreg = static_cast<int>(bounds.size()) - 1;
  std::vector<int64_t> g1(nreg, -1), e1(nreg, -1), g2(nreg, -2), e2(nreg, -2);
  ASSERT_EQ(gpu()->count_regions(gpu(), d.get(), x.size(), bounds.data(), nreg,
                                 thr, g1.data(), e1.data()),
            PGS_OK);
  ASSERT_EQ(cpu()->count_regions(cpu(), x.data(), x.size(), bounds.data(), nreg,
                                 thr, g2.data(), e2.data()),
            PGS_OK);
  EXPECT_EQ(g1, g2) << "n=" << x.size() << " nreg=" << nreg << " thr=" << thr;
  EXPECT_EQ(e1, e2) << "n=" << x.size() << " nreg=" << nreg << " thr=" << thr;
}

// Ascending random bounds in [lo, hi], some regions empty.
std::vector<int64_t> random_bounds(int64_t lo, int64_t hi, int nreg,
                                   uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int64_t> d(lo, hi);
  std::vector<int64_t> b(nreg + 1);
  for (auto &v : b) v = d(gen);
  std::sort(b.begin(), b.end());
  if (nreg > 2) b[2] = b[1];  // an empty region for sure
  return b;
}

TEST_F(CudaSelect, CountRegionsMatchesCpu) {
  for (size_t n : sizes()) {
    std::vector<float> x = tied(n, 500 + n, 4, 0.3);
    add_nonfinite(x, 501, n / 1000);
    Dev<float> d(x);
    const int64_t N = static_cast<int64_t>(n);
    for (float thr : {0.0f, 0.25f, 0.5f, 1.0f, 2.0f}) {
      check_regions(d, x, {0, N}, thr);
      check_regions(d, x, {0, N / 3, N / 3, N / 2, N}, thr);
    }
    // Up to 32 regions the bounds are the kernel's parameters, from 33 on
    // they are copied to the device.
    for (int nreg : {1, 8, 32, 33, 300}) {
      check_regions(d, x, random_bounds(0, N, nreg, 502 + nreg), 0.5f);
      check_regions(d, x, random_bounds(N / 5, N - N / 7, nreg, 503), 0.75f);
    }
  }
}

TEST_F(CudaSelect, CountRegionsRejectsBadBounds) {
  std::vector<float> x(10, 1.0f);
  Dev<float> d(x);
  std::vector<int64_t> gt(3, 7), eq(3, 7);
  const pgs_ops_t *o = gpu();
  for (std::vector<int64_t> b :
       {std::vector<int64_t>{0, 5, 4, 10}, std::vector<int64_t>{-1, 5, 5, 10},
        std::vector<int64_t>{0, 5, 11}}) {
    EXPECT_EQ(o->count_regions(o, d.get(), 10, b.data(),
                               static_cast<int>(b.size()) - 1, 0.0f, gt.data(),
                               eq.data()),
              PGS_ERR_INVALID);
  }
  EXPECT_EQ(gt, std::vector<int64_t>(3, 7));
  std::vector<int64_t> b = {0, 5};
  EXPECT_EQ(
      o->count_regions(o, d.get(), 10, nullptr, 1, 0.0f, gt.data(), eq.data()),
      PGS_ERR_INVALID);
  EXPECT_EQ(o->count_regions(o, d.get(), 10, b.data(), -1, 0.0f, gt.data(),
                             eq.data()),
            PGS_ERR_INVALID);
  EXPECT_EQ(
      o->count_regions(o, d.get(), 10, b.data(), 0, 0.0f, nullptr, nullptr),
      PGS_OK);
  EXPECT_EQ(
      o->count_regions(o, nullptr, 10, b.data(), 1, 0.0f, gt.data(), eq.data()),
      PGS_ERR_INVALID);
  std::vector<int64_t> empty = {4, 4};
  EXPECT_EQ(o->count_regions(o, nullptr, 10, empty.data(), 1, 0.0f, gt.data(),
                             eq.data()),
            PGS_OK);
  EXPECT_EQ(gt[0], 0);
  EXPECT_EQ(eq[0], 0);
}

// ---- compact --------------------------------------------------------------

// compact on both tables with capacity cap; outputs past the count (and past
// cap) must be untouched on the device.
void check_compact(const std::vector<float> &x, float thr, int64_t quota,
                   int32_t offset, size_t cap, size_t xoff = 0) {
  const size_t n = x.size();
  Dev<float> d(n + xoff);
  d.put(x, xoff);
  const size_t room = cap + 3;
  Dev<int32_t> di(std::vector<int32_t>(room, -7));
  Dev<float> dv(std::vector<float>(room, -7.0f));
  std::vector<int32_t> hi(room, -7);
  std::vector<float> hv(room, -7.0f);
  int64_t c_gpu = -1, c_cpu = -2;
  const int st_gpu = gpu()->compact(gpu(), d.get() + xoff, n, thr, quota,
                                    offset, di.get(), dv.get(), cap, &c_gpu);
  const int st_cpu = cpu()->compact(cpu(), x.data(), n, thr, quota, offset,
                                    hi.data(), hv.data(), cap, &c_cpu);
  ASSERT_EQ(st_gpu, st_cpu) << "n=" << n << " thr=" << thr << " q=" << quota;
  EXPECT_EQ(c_gpu, c_cpu);
  EXPECT_TRUE(same(di.host(), hi))
      << "n=" << n << " thr=" << thr << " quota=" << quota << " cap=" << cap;
  EXPECT_TRUE(same(dv.host(), hv));
}

TEST_F(CudaSelect, CompactMatchesCpuAcrossSizesAndQuotas) {
  for (size_t n : sizes()) {
    std::vector<float> x = tied(n, 600 + n, 8, 0.25);
    const bool big = n > (size_t{1} << 20);
    for (float thr : {0.0f, 0.25f, 1.0f, 1.5f, 3.0f}) {
      for (int64_t quota : {int64_t{0}, int64_t{1}, int64_t{37}, int64_t{-1},
                            int64_t{1} << 40}) {
        if (big && quota != 37) continue;
        check_compact(x, thr, quota, 0, n);
        if (!big) check_compact(x, thr, quota, 12345, n + 1);
      }
    }
    check_compact(normal(n, 601 + n), 1.0f, -1, 0, n);
  }
}

TEST_F(CudaSelect, CompactZerosDenormalsNonfiniteUnaligned) {
  for (size_t n : {size_t{1000}, size_t{65537}}) {
    check_compact(std::vector<float>(n, 0.0f), 0.0f, -1, 0, n);
    std::vector<float> dn = denormals(n, 610 + n);
    check_compact(dn, 0.0f, -1, 0, n);
    check_compact(dn, from_bits(2000), 10, 0, n);
    std::vector<float> x = tied(n, 611 + n, 4, 0.2);
    add_nonfinite(x, 612, 30);  // NaN never selected; Inf is above any thr
    check_compact(x, 0.5f, 5, 0, n);
    check_compact(x, 0.5f, 5, 3, n, 1);
    check_compact(x, 0.5f, 5, 3, n, 3);
    // Every tie (the two-pass form): unaligned x takes the scalar loads.
    check_compact(x, 0.5f, -1, 3, n, 1);
    check_compact(x, 0.5f, -1, 3, n, 3);
  }
}

TEST_F(CudaSelect, CompactOverflowWritesOnlyUpToCap) {
  std::vector<float> x = tied(100000, 620, 4, 0.2);
  for (size_t cap : {size_t{0}, size_t{1}, size_t{20}, size_t{4095},
                     size_t{4096}, size_t{30000}})
    for (int64_t quota : {int64_t{1000}, int64_t{-1}})
      check_compact(x, 0.5f, quota, 0, cap);
  // Exactly the count is not an overflow.
  int64_t count = 0;
  Dev<float> d(x);
  ASSERT_EQ(gpu()->compact(gpu(), d.get(), x.size(), 0.5f, 1000, 0, nullptr,
                           nullptr, 0, &count),
            PGS_ERR_OVERFLOW);
  check_compact(x, 0.5f, 1000, 0, static_cast<size_t>(count));
  ASSERT_EQ(gpu()->compact(gpu(), d.get(), x.size(), 0.5f, -1, 0, nullptr,
                           nullptr, 0, &count),
            PGS_ERR_OVERFLOW);
  check_compact(x, 0.5f, -1, 0, static_cast<size_t>(count));
  check_compact(x, 0.5f, -1, 0, static_cast<size_t>(count) - 1);
}

TEST_F(CudaSelect, CompactBadArguments) {
  std::vector<float> x(100, 1.0f);
  Dev<float> d(x);
  Dev<int32_t> idx(100);
  Dev<float> val(100);
  int64_t count = 0;
  const pgs_ops_t *o = gpu();
  EXPECT_EQ(o->compact(o, nullptr, 100, 0.0f, -1, 0, idx.get(), val.get(), 100,
                       &count),
            PGS_ERR_INVALID);
  EXPECT_EQ(
      o->compact(o, d.get(), 100, 0.0f, -1, 0, nullptr, val.get(), 100, &count),
      PGS_ERR_INVALID);
  EXPECT_EQ(o->compact(o, d.get(), 100, 0.0f, -1, -1, idx.get(), val.get(), 100,
                       &count),
            PGS_ERR_INVALID);
  EXPECT_EQ(o->compact(o, d.get(), 100, 0.0f, -1, INT32_MAX - 50, idx.get(),
                       val.get(), 100, &count),
            PGS_ERR_UNSUPPORTED);
  ASSERT_EQ(o->compact(o, d.get(), 100, 0.0f, -1, INT32_MAX - 99, idx.get(),
                       val.get(), 100, &count),
            PGS_OK);
  EXPECT_EQ(idx.host(99, 1)[0], INT32_MAX);
  EXPECT_EQ(o->compact(o, nullptr, 0, 0.0f, -1, 0, nullptr, nullptr, 0, &count),
            PGS_OK);
  EXPECT_EQ(count, 0);
}

// ---- select_pairs ---------------------------------------------------------

// off: the input starts that many words into its device buffers (the
// split selects from runs at any offset), for the copy into a new output.
void check_select_pairs(const std::vector<int32_t> &idx,
                        const std::vector<float> &val, float thr, int64_t quota,
                        size_t cap, bool in_place, size_t off = 0) {
  const size_t m = idx.size();
  std::vector<int32_t> hi = idx;
  std::vector<float> hv = val;
  int64_t c_gpu = -1, c_cpu = -2;
  Dev<int32_t> di(m + off);
  Dev<float> dv(m + off);
  di.put(idx, off);
  dv.put(val, off);
  int st_gpu, st_cpu;
  if (in_place) {
    st_gpu = gpu()->select_pairs(gpu(), di.get(), dv.get(), m, thr, quota,
                                 di.get(), dv.get(), cap, &c_gpu);
    st_cpu = cpu()->select_pairs(cpu(), hi.data(), hv.data(), m, thr, quota,
                                 hi.data(), hv.data(), cap, &c_cpu);
    ASSERT_EQ(st_gpu, st_cpu);
    EXPECT_EQ(c_gpu, c_cpu);
    EXPECT_TRUE(same(di.host(), hi)) << "m=" << m << " in place";
    EXPECT_TRUE(same(dv.host(), hv));
    return;
  }
  Dev<int32_t> oi(std::vector<int32_t>(cap + 2, -7));
  Dev<float> ov(std::vector<float>(cap + 2, -7.0f));
  std::vector<int32_t> hoi(cap + 2, -7);
  std::vector<float> hov(cap + 2, -7.0f);
  st_gpu = gpu()->select_pairs(gpu(), di.get() + off, dv.get() + off, m, thr,
                               quota, oi.get(), ov.get(), cap, &c_gpu);
  st_cpu = cpu()->select_pairs(cpu(), idx.data(), val.data(), m, thr, quota,
                               hoi.data(), hov.data(), cap, &c_cpu);
  ASSERT_EQ(st_gpu, st_cpu);
  EXPECT_EQ(c_gpu, c_cpu);
  EXPECT_TRUE(same(oi.host(), hoi)) << "m=" << m << " cap=" << cap;
  EXPECT_TRUE(same(ov.host(), hov));
}

TEST_F(CudaSelect, SelectPairsMatchesCpuAndFiltersInPlace) {
  for (size_t m : {size_t{1}, size_t{7}, size_t{8000}, size_t{300000}}) {
    std::vector<int32_t> idx = sorted_subset(m * 2, 1 << 28, 700 + m);
    idx.resize(std::min(idx.size(), m));
    std::vector<float> val = tied(idx.size(), 701 + m, 6, 0.2);
    for (float thr : {0.0f, 0.5f, 1.0f}) {
      for (int64_t quota : {int64_t{0}, int64_t{3}, int64_t{-1}}) {
        check_select_pairs(idx, val, thr, quota, idx.size(), false);
        check_select_pairs(idx, val, thr, quota, idx.size(), true);
        check_select_pairs(idx, val, thr, quota, idx.size() / 3, false);
        check_select_pairs(idx, val, thr, quota, idx.size() / 3, true);
        check_select_pairs(idx, val, thr, quota, idx.size(), false, 1);
        check_select_pairs(idx, val, thr, quota, idx.size() / 3, false, 3);
      }
    }
  }
  int64_t count = -1;
  EXPECT_EQ(gpu()->select_pairs(gpu(), nullptr, nullptr, 0, 0.5f, -1, nullptr,
                                nullptr, 0, &count),
            PGS_OK);
  EXPECT_EQ(count, 0);
  Dev<int32_t> i(4);
  Dev<float> v(4);
  EXPECT_EQ(gpu()->select_pairs(gpu(), nullptr, v.get(), 4, 0.5f, -1, i.get(),
                                v.get(), 4, &count),
            PGS_ERR_INVALID);
}

// A planned count (no count pointer) is checked on the device: no host wait
// in the call, the mismatch reported by the next wait (check, or any
// function that reads back), as on the host table but later.
TEST_F(CudaSelect, PlannedCountIsCheckedOnTheDevice) {
  std::vector<float> x(100, 1.0f);
  x[10] = 0.0f;  // 99 entries above 0.5
  Dev<float> d(x);
  Dev<int32_t> idx(100);
  Dev<float> val(100);
  const pgs_ops_t *o = gpu();
  ASSERT_EQ(o->check(o), PGS_OK);
  const uint64_t s0 = o->host_syncs(o);
  ASSERT_EQ(o->compact(o, d.get(), 100, 0.5f, -1, 0, idx.get(), val.get(), 99,
                       nullptr),
            PGS_OK);
  EXPECT_EQ(o->host_syncs(o), s0);  // nothing waited for
  EXPECT_EQ(o->check(o), PGS_OK);
  EXPECT_EQ(o->host_syncs(o), s0 + 1);
  EXPECT_EQ(o->check(o), PGS_OK);  // nothing left to read
  EXPECT_EQ(o->host_syncs(o), s0 + 1);
  EXPECT_EQ(idx.host(9, 2), (std::vector<int32_t>{9, 11}));
  // A wrong plan: the call queues, check reports it once.
  ASSERT_EQ(o->compact(o, d.get(), 100, 0.5f, -1, 0, idx.get(), val.get(), 98,
                       nullptr),
            PGS_OK);
  EXPECT_EQ(o->check(o), PGS_ERR_INVALID);
  EXPECT_EQ(o->check(o), PGS_OK);
  // Reported by the next function that reads back, here a count.
  ASSERT_EQ(o->compact(o, d.get(), 100, 0.5f, -1, 0, idx.get(), val.get(), 100,
                       nullptr),
            PGS_OK);
  int64_t bad = -1;
  EXPECT_EQ(o->count_nonfinite(o, d.get(), 100, &bad), PGS_ERR_INVALID);
  EXPECT_EQ(o->check(o), PGS_OK);
  // Pairs, with the tie quota.
  Dev<int32_t> pi(std::vector<int32_t>{1, 4, 6, 9, 12});
  Dev<float> pv(std::vector<float>{0.25f, 1.0f, 1.0f, -2.0f, 0.5f});
  ASSERT_EQ(o->select_pairs(o, pi.get(), pv.get(), 5, 0.5f, 0, idx.get(),
                            val.get(), 3, nullptr),
            PGS_OK);
  EXPECT_EQ(o->check(o), PGS_OK);
  EXPECT_EQ(idx.host(0, 3), (std::vector<int32_t>{4, 6, 9}));
  ASSERT_EQ(o->select_pairs(o, pi.get(), pv.get(), 5, 0.5f, -1, idx.get(),
                            val.get(), 3, nullptr),
            PGS_OK);
  EXPECT_EQ(o->check(o), PGS_ERR_INVALID);  // the tie at 12 makes 4
}

}  // namespace
}  // namespace cuda_test
