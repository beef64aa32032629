// The largest size of the acceptance list, 2^27 entries (512 MB a buffer),
// for every op that reads a whole bucket. Named *Huge* so it can be left out:
//   pgs_cuda_tests --gtest_filter=-*Huge*
#include "cuda_test_util.h"

namespace cuda_test {
namespace {

class CudaHuge : public CudaTest {};

constexpr size_t kHugeN = size_t{1} << 27;

TEST_F(CudaHuge, WholeBucketOpsMatchCpuAt2Pow27) {
  const size_t n = kHugeN;
  std::vector<float> r = normal(n, 900), g = normal(n, 901);
  // Ties and zeros in part of the bucket.
  std::vector<float> t = tied(n / 8, 902, 6, 0.3);
  std::copy(t.begin(), t.end(), r.begin() + n / 2);
  Dev<float> dr(r), dg(g);

  // accumulate with the count (the fused threshold pass).
  int64_t c_gpu = -1, c_cpu = -2;
  ASSERT_EQ(gpu()->accumulate(gpu(), dr.get(), dg.get(), n, 2.0f, &c_gpu),
            PGS_OK);
  ASSERT_EQ(cpu()->accumulate(cpu(), r.data(), g.data(), n, 2.0f, &c_cpu),
            PGS_OK);
  EXPECT_EQ(c_gpu, c_cpu);
  ASSERT_TRUE(same(dr.host(), r));

  // kth_abs at the densities the algorithms use, and the ends.
  for (size_t k : {size_t{1}, n / 1000, n / 100, n / 10, n}) {
    float t1 = -1, t2 = -2;
    int64_t g1 = -1, g2 = -2;
    ASSERT_EQ(gpu()->kth_abs(gpu(), dr.get(), n, k, &t1, &g1), PGS_OK);
    ASSERT_EQ(cpu()->kth_abs(cpu(), r.data(), n, k, &t2, &g2), PGS_OK);
    EXPECT_EQ(bits_of(t1), bits_of(t2)) << "k=" << k;
    EXPECT_EQ(g1, g2) << "k=" << k;

    // compact with the tie quota that makes exactly k.
    const size_t cap = k < n / 10 ? k : n / 10;
    Dev<int32_t> di(cap);
    Dev<float> dv(cap);
    std::vector<int32_t> hi(cap);
    std::vector<float> hv(cap);
    int64_t n1 = -1, n2 = -2;
    const int64_t quota = static_cast<int64_t>(k) - g2;
    const int s1 = gpu()->compact(gpu(), dr.get(), n, t1, quota, 7, di.get(),
                                  dv.get(), cap, &n1);
    const int s2 = cpu()->compact(cpu(), r.data(), n, t2, quota, 7, hi.data(),
                                  hv.data(), cap, &n2);
    EXPECT_EQ(s1, s2) << "k=" << k;
    EXPECT_EQ(n1, n2) << "k=" << k;
    EXPECT_TRUE(same(di.host(), hi)) << "k=" << k;
    EXPECT_TRUE(same(dv.host(), hv)) << "k=" << k;
  }

  // count_regions over 8 regions, hist_abs levels 0 and 1, mean_std.
  std::vector<int64_t> bounds(9);
  for (int j = 0; j <= 8; ++j) bounds[j] = static_cast<int64_t>(n / 8 * j);
  std::vector<int64_t> g1(8), e1(8), g2(8), e2(8);
  ASSERT_EQ(gpu()->count_regions(gpu(), dr.get(), n, bounds.data(), 8, 1.0f,
                                 g1.data(), e1.data()),
            PGS_OK);
  ASSERT_EQ(cpu()->count_regions(cpu(), r.data(), n, bounds.data(), 8, 1.0f,
                                 g2.data(), e2.data()),
            PGS_OK);
  EXPECT_EQ(g1, g2);
  EXPECT_EQ(e1, e2);
  for (int level = 0; level < 2; ++level) {
    const uint32_t prefix = bits_of(1.5f);
    std::vector<int64_t> h1(PGS_HIST_BINS, 0), h2(PGS_HIST_BINS, 0);
    ASSERT_EQ(gpu()->hist_abs(gpu(), dr.get(), n, level, prefix, h1.data()),
              PGS_OK);
    ASSERT_EQ(cpu()->hist_abs(cpu(), r.data(), n, level, prefix, h2.data()),
              PGS_OK);
    EXPECT_EQ(h1, h2) << "level " << level;
  }
  double m1 = 0, s1 = 0, m2 = 0, s2 = 0;
  ASSERT_EQ(gpu()->mean_std(gpu(), dr.get(), n, &m1, &s1), PGS_OK);
  ASSERT_EQ(cpu()->mean_std(cpu(), r.data(), n, &m2, &s2), PGS_OK);
  EXPECT_NEAR(m1, m2, 1e-9 * std::fabs(m2) + 1e-12);
  EXPECT_NEAR(s1, s2, 1e-9 * s2);

  // scatter_add of 1% sorted pairs, then zero_at of the same indices.
  std::vector<int32_t> idx =
      sorted_subset(n / 100, static_cast<int32_t>(n), 903);
  std::vector<float> val = normal(idx.size(), 904);
  Dev<int32_t> didx(idx);
  Dev<float> dval(val);
  ASSERT_EQ(gpu()->scatter_add(gpu(), dr.get(), n, didx.get(), dval.get(),
                               idx.size(), 0.5f),
            PGS_OK);
  ASSERT_EQ(cpu()->scatter_add(cpu(), r.data(), n, idx.data(), val.data(),
                               idx.size(), 0.5f),
            PGS_OK);
  ASSERT_EQ(gpu()->zero_at(gpu(), dr.get(), n, didx.get(), idx.size() / 2),
            PGS_OK);
  ASSERT_EQ(cpu()->zero_at(cpu(), r.data(), n, idx.data(), idx.size() / 2),
            PGS_OK);
  EXPECT_TRUE(same(dr.host(), r));
}

}  // namespace
}  // namespace cuda_test
