// CUDA ops against the host ops: gather, zero_at, scatter_add,
// scatter_add_sorted, zero_common and merge_pairs, including bad indices
// (memory untouched; reported at once or by the next wait) and capacity.
#include "cuda_test_util.h"

namespace cuda_test {
namespace {

class CudaIndex : public CudaTest {};

std::vector<int32_t> random_indices(size_t m, size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(n) - 1);
  std::vector<int32_t> v(m);
  for (auto &i : v) i = d(gen);
  return v;
}

// The status of a function that may leave its index check to the device:
// its own, or else what the next wait (check) reports.
int settled(int st) {
  return st != PGS_OK ? st : gpu()->check(gpu());
}

// gather, zero_at and scatter_add (every scale) with the same indices, and
// scatter_add_sorted where they ascend strictly.
void check_index_ops(const std::vector<float> &x,
                     const std::vector<int32_t> &idx,
                     const std::vector<float> &val) {
  const size_t n = x.size(), m = idx.size();
  Dev<float> dx(x), dval(val);
  Dev<int32_t> didx(idx);
  {
    Dev<float> out(std::vector<float>(m, -9.0f));
    std::vector<float> want(m, -9.0f);
    ASSERT_EQ(
        settled(gpu()->gather(gpu(), dx.get(), n, didx.get(), m, out.get())),
        PGS_OK);
    ASSERT_EQ(cpu()->gather(cpu(), x.data(), n, idx.data(), m, want.data()),
              PGS_OK);
    EXPECT_TRUE(same(out.host(), want)) << "gather n=" << n << " m=" << m;
  }
  for (float scale : {1.0f, 0.25f, -3.0f, 1e-20f}) {
    dx.put(x);
    std::vector<float> want = x;
    ASSERT_EQ(gpu()->scatter_add(gpu(), dx.get(), n, didx.get(), dval.get(), m,
                                 scale),
              PGS_OK);
    ASSERT_EQ(cpu()->scatter_add(cpu(), want.data(), n, idx.data(), val.data(),
                                 m, scale),
              PGS_OK);
    EXPECT_TRUE(same(dx.host(), want, true))
        << "scatter_add n=" << n << " m=" << m << " scale=" << scale;
    if (!std::is_sorted(idx.begin(), idx.end()) ||
        std::adjacent_find(idx.begin(), idx.end()) != idx.end())
      continue;
    dx.put(x);
    ASSERT_EQ(settled(gpu()->scatter_add_sorted(gpu(), dx.get(), n, didx.get(),
                                                dval.get(), m, scale)),
              PGS_OK);
    EXPECT_TRUE(same(dx.host(), want, true))
        << "scatter_add_sorted n=" << n << " m=" << m << " scale=" << scale;
  }
  dx.put(x);
  std::vector<float> want = x;
  ASSERT_EQ(settled(gpu()->zero_at(gpu(), dx.get(), n, didx.get(), m)), PGS_OK);
  ASSERT_EQ(cpu()->zero_at(cpu(), want.data(), n, idx.data(), m), PGS_OK);
  EXPECT_TRUE(same(dx.host(), want)) << "zero_at n=" << n << " m=" << m;
}

TEST_F(CudaIndex, SortedUniqueIndicesMatchCpu) {
  for (size_t n : sizes()) {
    std::vector<int32_t> idx =
        sorted_subset(n / 10 + 1, static_cast<int32_t>(n), 800 + n);
    check_index_ops(normal(n, 801 + n), idx, normal(idx.size(), 802 + n));
  }
}

TEST_F(CudaIndex, RepeatedUnsortedIndicesAddInOrder) {
  for (size_t n :
       {size_t{1}, size_t{7}, size_t{1000}, size_t{65537}, size_t{1} << 20}) {
    for (size_t m : {size_t{1}, n / 2 + 1, 3 * n}) {
      if (m > (size_t{1} << 21)) continue;
      check_index_ops(normal(n, 810 + n), random_indices(m, n, 811 + m),
                      normal(m, 812 + m, 1e4f));
    }
  }
  // 1e8 + 1 - 1e8 in float depends on the order: j order exactly.
  std::vector<float> x = {0.0f, 0.0f};
  std::vector<int32_t> idx = {1, 1, 1};
  std::vector<float> val = {1e8f, 1.0f, -1e8f};
  Dev<float> dx(x), dv(val);
  Dev<int32_t> di(idx);
  ASSERT_EQ(gpu()->scatter_add(gpu(), dx.get(), 2, di.get(), dv.get(), 3, 1.0f),
            PGS_OK);
  std::vector<float> got = dx.host();
  EXPECT_EQ(got[1], (1e8f + 1.0f) - 1e8f);
  EXPECT_EQ(got[0], 0.0f);
}

TEST_F(CudaIndex, DenormalsAreNotFlushed) {
  const size_t n = 4096;
  std::vector<float> x = denormals(n, 820);
  std::vector<int32_t> idx = sorted_subset(1000, n, 821);
  std::vector<float> val = denormals(idx.size(), 822);
  check_index_ops(x, idx, val);
  check_index_ops(x, random_indices(3000, n, 823), denormals(3000, 824));
}

TEST_F(CudaIndex, BadIndexLeavesMemoryUntouched) {
  const size_t n = 100;
  const std::vector<float> x0 = normal(n, 830);
  Dev<float> dx(x0);
  for (int32_t bad : {-1, static_cast<int32_t>(n), INT32_MAX, INT32_MIN}) {
    for (bool sorted : {true, false}) {
      // The bad index comes last, after good ones.
      // Sorted lists take the direct scatter_add path, others the sort.
      std::vector<int32_t> idx = sorted ? std::vector<int32_t>{0, 5, 42, 99}
                                        : std::vector<int32_t>{0, 5, 99, 42};
      if (sorted && bad < 0)
        idx.insert(idx.begin(), bad);
      else
        idx.push_back(bad);
      std::vector<float> val = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f};
      Dev<int32_t> di(idx);
      Dev<float> dv(val);
      EXPECT_EQ(gpu()->scatter_add(gpu(), dx.get(), n, di.get(), dv.get(),
                                   idx.size(), 1.0f),
                PGS_ERR_INDEX);
      EXPECT_TRUE(same(dx.host(), x0));
      // The deferred checks: nothing written, the error read once.
      EXPECT_EQ(settled(gpu()->scatter_add_sorted(gpu(), dx.get(), n, di.get(),
                                                  dv.get(), idx.size(), 1.0f)),
                PGS_ERR_INDEX);
      EXPECT_EQ(gpu()->check(gpu()), PGS_OK);
      EXPECT_TRUE(same(dx.host(), x0));
      EXPECT_EQ(
          settled(gpu()->zero_at(gpu(), dx.get(), n, di.get(), idx.size())),
          PGS_ERR_INDEX);
      EXPECT_TRUE(same(dx.host(), x0));
      Dev<float> out(std::vector<float>(idx.size(), -9.0f));
      EXPECT_EQ(settled(gpu()->gather(gpu(), dx.get(), n, di.get(), idx.size(),
                                      out.get())),
                PGS_ERR_INDEX);
      EXPECT_TRUE(same(out.host(), std::vector<float>(idx.size(), -9.0f)));
      // zero_common checks both lists in one launch: a bad entry in either
      // stops it (the good list alone would zero x[0], x[5] and x[42]).
      Dev<int32_t> good(std::vector<int32_t>{0, 5, 42});
      EXPECT_EQ(
          settled(gpu()->zero_common(gpu(), dx.get(), n, di.get(), nullptr,
                                     idx.size(), 0, good.get(), 3)),
          PGS_ERR_INDEX);
      EXPECT_TRUE(same(dx.host(), x0));
      EXPECT_EQ(
          settled(gpu()->zero_common(gpu(), dx.get(), n, good.get(), nullptr, 3,
                                     0, di.get(), idx.size())),
          PGS_ERR_INDEX);
      EXPECT_TRUE(same(dx.host(), x0));
    }
  }
  // A bad index among a million good ones, in the middle.
  const size_t big = 1 << 20;
  std::vector<float> y0 = normal(big, 831);
  Dev<float> dy(y0);
  std::vector<int32_t> idx = random_indices(big, big, 832);
  idx[big / 2] = static_cast<int32_t>(big);
  Dev<int32_t> di(idx);
  Dev<float> dv(normal(big, 833));
  EXPECT_EQ(
      gpu()->scatter_add(gpu(), dy.get(), big, di.get(), dv.get(), big, 0.5f),
      PGS_ERR_INDEX);
  EXPECT_TRUE(same(dy.host(), y0));
  // In range but not strictly ascending: refused by scatter_add_sorted only.
  for (const std::vector<int32_t> &bad :
       {std::vector<int32_t>{1, 3, 3, 7}, std::vector<int32_t>{1, 7, 3, 9}}) {
    Dev<int32_t> dbad(bad);
    Dev<float> dv(normal(bad.size(), 834));
    EXPECT_EQ(settled(gpu()->scatter_add_sorted(gpu(), dx.get(), n, dbad.get(),
                                                dv.get(), bad.size(), 1.0f)),
              PGS_ERR_INDEX);
    EXPECT_TRUE(same(dx.host(), x0));
  }
  // Whatever waits next reports it (here kth_abs's read-back), once.
  {
    Dev<int32_t> dbad(std::vector<int32_t>{0, static_cast<int32_t>(n)});
    Dev<float> dv(std::vector<float>{1.0f, 1.0f});
    ASSERT_EQ(gpu()->scatter_add_sorted(gpu(), dx.get(), n, dbad.get(),
                                        dv.get(), 2, 1.0f),
              PGS_OK);
    float thr = 0.0f;
    int64_t n_gt = 0;
    EXPECT_EQ(gpu()->kth_abs(gpu(), dx.get(), n, 1, &thr, &n_gt),
              PGS_ERR_INDEX);
    EXPECT_EQ(gpu()->check(gpu()), PGS_OK);
    EXPECT_TRUE(same(dx.host(), x0));
  }
  // Nothing can be indexed in an empty buffer.
  Dev<int32_t> zero(std::vector<int32_t>{0});
  Dev<float> one(std::vector<float>{1.0f});
  EXPECT_EQ(
      gpu()->scatter_add(gpu(), nullptr, 0, zero.get(), one.get(), 1, 1.0f),
      PGS_ERR_INDEX);
  EXPECT_EQ(gpu()->zero_at(gpu(), nullptr, 0, nullptr, 0), PGS_OK);
  EXPECT_EQ(gpu()->zero_at(gpu(), nullptr, 5, zero.get(), 1), PGS_ERR_INVALID);
}

// ---- set_sorted -----------------------------------------------------------

// set_sorted against the host's, bit for bit: x cleared and the list's
// scaled values written, at sizes around its tile (8192 entries) and with
// -0 and denormal values; nothing past x[n) is written.
TEST_F(CudaIndex, SetSortedMatchesCpu) {
  std::vector<size_t> ns = sizes();
  for (size_t n : {size_t{8191}, size_t{8192}, size_t{8193}, size_t{40965}})
    ns.push_back(n);
  for (size_t n : ns) {
    std::vector<int32_t> idx =
        sorted_subset(n / 10 + 1, static_cast<int32_t>(n), 850 + n);
    std::vector<float> val =
        n > 1000 ? normal(idx.size(), 851 + n) : denormals(idx.size(), 851 + n);
    val[0] = -0.0f;
    Dev<int32_t> didx(idx);
    Dev<float> dval(val);
    const std::vector<float> x = normal(n, 852 + n);
    const std::vector<float> guard(64, 7.0f);
    Dev<float> dx(n + guard.size());
    for (float scale : {1.0f, 0.25f, -3.0f, 1e-20f}) {
      for (size_t m : {size_t{0}, idx.size()}) {
        dx.put(x);
        dx.put(guard, n);
        std::vector<float> want = x;
        ASSERT_EQ(cpu()->set_sorted(cpu(), want.data(), n, idx.data(),
                                    val.data(), m, scale),
                  PGS_OK);
        ASSERT_EQ(settled(gpu()->set_sorted(gpu(), dx.get(), n, didx.get(),
                                            dval.get(), m, scale)),
                  PGS_OK);
        EXPECT_TRUE(same(dx.host(0, n), want))
            << "n=" << n << " m=" << m << " scale=" << scale;
        EXPECT_TRUE(same(dx.host(n), guard)) << "n=" << n << " m=" << m;
      }
    }
  }
}

// A list the host refuses fails the call (reported by the next wait, once),
// and nothing lands outside x (inside it, blocks that start after the
// check failed write nothing); after an earlier failed check of the call,
// set_sorted writes nothing at all.
TEST_F(CudaIndex, SetSortedRefusesBadListsWithinItsBuffer) {
  const size_t n = 20000;
  const std::vector<float> x0 = normal(n, 860);
  const std::vector<float> guard(64, 7.0f);
  Dev<float> dx(n + guard.size());
  const std::vector<std::vector<int32_t>> refused = {
      {0, 5, 5, 9},   {0, 9, 5, 20},     {0, 5, static_cast<int32_t>(n)},
      {-1, 0, 5},     {0, 5, INT32_MAX}, {INT32_MIN, 0},
      {9000, 100, 50}};
  for (const auto &bad : refused) {
    dx.put(x0);
    dx.put(guard, n);
    Dev<int32_t> di(bad);
    Dev<float> dv(std::vector<float>(bad.size(), 1.0f));
    std::vector<float> y = x0;
    EXPECT_EQ(cpu()->set_sorted(cpu(), y.data(), n, bad.data(),
                                std::vector<float>(bad.size(), 1.0f).data(),
                                bad.size(), 1.0f),
              PGS_ERR_INDEX);
    EXPECT_EQ(settled(gpu()->set_sorted(gpu(), dx.get(), n, di.get(), dv.get(),
                                        bad.size(), 1.0f)),
              PGS_ERR_INDEX);
    EXPECT_EQ(gpu()->check(gpu()), PGS_OK);  // read once
    EXPECT_TRUE(same(dx.host(n), guard));
    // Each entry as it was, cleared, or one of the list's values.
    const std::vector<float> got = dx.host(0, n);
    for (size_t i = 0; i < n; ++i)
      ASSERT_TRUE(got[i] == x0[i] || got[i] == 0.0f || got[i] == 1.0f) << i;
  }
  // An earlier check's failure (a bad scatter_add_sorted) stops it.
  dx.put(x0);
  Dev<int32_t> dbad(std::vector<int32_t>{0, static_cast<int32_t>(n)});
  Dev<int32_t> dgood(std::vector<int32_t>{3, 4});
  Dev<float> dv(std::vector<float>{1.0f, 1.0f});
  ASSERT_EQ(gpu()->scatter_add_sorted(gpu(), dx.get(), n, dbad.get(), dv.get(),
                                      2, 1.0f),
            PGS_OK);
  EXPECT_EQ(settled(gpu()->set_sorted(gpu(), dx.get(), n, dgood.get(), dv.get(),
                                      2, 1.0f)),
            PGS_ERR_INDEX);
  EXPECT_TRUE(same(dx.host(0, n), x0));
  // Arguments.
  EXPECT_EQ(gpu()->set_sorted(gpu(), nullptr, 0, nullptr, nullptr, 0, 1.0f),
            PGS_OK);
  EXPECT_EQ(
      gpu()->set_sorted(gpu(), nullptr, 0, dgood.get(), dv.get(), 1, 1.0f),
      PGS_ERR_INDEX);
  EXPECT_EQ(gpu()->set_sorted(gpu(), nullptr, 4, nullptr, nullptr, 0, 1.0f),
            PGS_ERR_INVALID);
  EXPECT_EQ(gpu()->set_sorted(gpu(), dx.get(), n, nullptr, dv.get(), 1, 1.0f),
            PGS_ERR_INVALID);
}

// ---- zero_common ----------------------------------------------------------

// With @p with_values, a's entries carry values that are subtracted.
void check_zero_common(const std::vector<float> &x,
                       const std::vector<int32_t> &a, int32_t offset,
                       const std::vector<int32_t> &b,
                       bool with_values = false) {
  const size_t n = x.size();
  Dev<float> dx(x);
  Dev<int32_t> da(a), db(b);
  std::vector<float> av = normal(a.size(), 845 + a.size());
  Dev<float> dav(av);
  const float *hv = with_values ? av.data() : nullptr;
  const float *gv = with_values ? dav.get() : nullptr;
  std::vector<float> want = x;
  const int st_cpu = cpu()->zero_common(cpu(), want.data(), n, a.data(), hv,
                                        a.size(), offset, b.data(), b.size());
  const int st_gpu = settled(gpu()->zero_common(
      gpu(), dx.get(), n, da.get(), gv, a.size(), offset, db.get(), b.size()));
  EXPECT_EQ(st_gpu, st_cpu) << "offset " << offset;
  EXPECT_TRUE(same(dx.host(), want)) << "offset " << offset;
}

TEST_F(CudaIndex, ZeroCommonMatchesCpu) {
  for (size_t n : {size_t{20000}, size_t{1} << 20}) {
    const std::vector<float> x = normal(n, 840 + n);
    const int32_t N = static_cast<int32_t>(n);
    for (int32_t offset : {0, 1000, -500}) {
      std::vector<int32_t> a = sorted_subset(n / 6, N * 3 / 4, 841);
      std::vector<int32_t> b = sorted_subset(n / 3, N, 842);
      if (offset < 0)
        a.erase(a.begin(), std::lower_bound(a.begin(), a.end(), -offset));
      check_zero_common(x, a, offset, b);
      check_zero_common(x, a, offset, b, true);
    }
    // Repeated entries in both lists.
    std::vector<int32_t> a = {1, 1, 5, 9, 9, 9, 100}, b = {0, 1, 9, 9, 100};
    check_zero_common(x, a, 0, b);
    check_zero_common(x, {}, 0, b);
  }
  const std::vector<float> x = normal(100, 843);
  std::vector<int32_t> a = {1, 5, 10, 60}, b = {6, 11, 61, 99};
  check_zero_common(x, a, 40, b);  // a + 40 reaches n
  check_zero_common(x, a, -2, b);  // below 0
  check_zero_common(x, a, 1, {6, 11, 61, 100});
  check_zero_common(x, {INT32_MAX}, INT32_MAX, b);
  check_zero_common(x, {INT32_MIN + 3}, INT32_MIN, {3});
  check_zero_common(x, a, 1, b);  // valid: zeroes 6, 11, 61
}

// ---- merge_pairs ----------------------------------------------------------

void check_merge(const std::vector<int32_t> &ia, const std::vector<float> &va,
                 const std::vector<int32_t> &ib, const std::vector<float> &vb,
                 size_t cap) {
  Dev<int32_t> dia(ia), dib(ib);
  Dev<float> dva(va), dvb(vb);
  Dev<int32_t> io(std::vector<int32_t>(cap + 2, -7));
  Dev<float> vo(std::vector<float>(cap + 2, -7.0f));
  std::vector<int32_t> hio(cap + 2, -7);
  std::vector<float> hvo(cap + 2, -7.0f);
  int64_t c_gpu = -1, c_cpu = -2;
  const int st_gpu =
      gpu()->merge_pairs(gpu(), dia.get(), dva.get(), ia.size(), dib.get(),
                         dvb.get(), ib.size(), io.get(), vo.get(), cap, &c_gpu);
  const int st_cpu = cpu()->merge_pairs(cpu(), ia.data(), va.data(), ia.size(),
                                        ib.data(), vb.data(), ib.size(),
                                        hio.data(), hvo.data(), cap, &c_cpu);
  ASSERT_EQ(st_gpu, st_cpu) << "na=" << ia.size() << " nb=" << ib.size();
  EXPECT_EQ(c_gpu, c_cpu);
  EXPECT_TRUE(same(io.host(), hio)) << "na=" << ia.size() << " cap=" << cap;
  EXPECT_TRUE(same(vo.host(), hvo, true));
}

TEST_F(CudaIndex, MergePairsMatchesCpu) {
  for (size_t na :
       {size_t{0}, size_t{1}, size_t{1000}, size_t{70000}, size_t{1} << 20}) {
    for (size_t nb : {size_t{0}, size_t{3}, size_t{5000}, size_t{300000}}) {
      const int32_t range = static_cast<int32_t>(2 * (na + nb) + 10);
      std::vector<int32_t> ia = sorted_subset(na, range, 850 + na);
      std::vector<int32_t> ib = sorted_subset(nb, range, 851 + nb);
      std::vector<float> va = normal(ia.size(), 852),
                         vb = normal(ib.size(), 853);
      const size_t u = ia.size() + ib.size();
      check_merge(ia, va, ib, vb, u);
      check_merge(ia, va, ib, vb, u / 2);
      check_merge(ib, vb, ia, va, u / 2);
    }
  }
  // Identical lists: every entry sums.
  std::vector<int32_t> s = sorted_subset(50000, 1 << 30, 854);
  check_merge(s, normal(s.size(), 855), s, normal(s.size(), 856), s.size());
  // Negative indices order as signed int32, as on the host.
  check_merge({-5, -1, 3}, {1, 2, 3}, {-3, -1, 7}, {10, 20, 30}, 6);
}

TEST_F(CudaIndex, MergePairsOverflowAndBadArguments) {
  std::vector<int32_t> ia = {1, 3, 5}, ib = {2, 3, 7, 9};
  std::vector<float> va = {1.0f, 2.0f, 3.0f}, vb = {10.0f, 20.0f, 30.0f, 40.0f};
  for (size_t cap : {size_t{0}, size_t{1}, size_t{4}, size_t{6}, size_t{8}})
    check_merge(ia, va, ib, vb, cap);
  int64_t count = -1;
  EXPECT_EQ(gpu()->merge_pairs(gpu(), nullptr, nullptr, 0, nullptr, nullptr, 0,
                               nullptr, nullptr, 0, &count),
            PGS_OK);
  EXPECT_EQ(count, 0);
  Dev<int32_t> di(ia);
  Dev<float> dv(va);
  EXPECT_EQ(gpu()->merge_pairs(gpu(), di.get(), dv.get(), 3, di.get(), dv.get(),
                               3, di.get(), dv.get(), 3, nullptr),
            PGS_ERR_INVALID);
  EXPECT_EQ(gpu()->merge_pairs(gpu(), di.get(), nullptr, 3, di.get(), dv.get(),
                               3, di.get(), dv.get(), 3, &count),
            PGS_ERR_INVALID);
  EXPECT_EQ(gpu()->merge_pairs(gpu(), di.get(), dv.get(), 3, di.get(), dv.get(),
                               3, nullptr, dv.get(), 3, &count),
            PGS_ERR_INVALID);
}

}  // namespace
}  // namespace cuda_test
