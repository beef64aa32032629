// Tests of the host ops table: memory, elementwise and index functions.
#include <gtest/gtest.h>

#include "ops_test_util.h"

namespace {
using namespace ops_test;

// ---- the table and the memory functions ----------------------------------

TEST(OpsCpuTable, EveryEntryIsSetForHostMemory) {
  const pgs_ops_t *o = ops();
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o, pgs_ops_cpu());
  EXPECT_EQ(o->mem, PGS_MEM_HOST);
  EXPECT_EQ(o->ctx, nullptr);
  EXPECT_TRUE(o->alloc && o->free && o->copy && o->fill_zero && o->sync);
  EXPECT_TRUE(o->accumulate && o->scale && o->count_nonfinite && o->mean_std);
  EXPECT_TRUE(o->count_regions && o->kth_abs && o->hist_abs && o->compact &&
              o->select_pairs);
  EXPECT_TRUE(o->gather && o->zero_at && o->scatter_add && o->zero_common &&
              o->merge_pairs && o->scatter_add_sorted);
}

TEST(OpsCpuMemory, AllocCopyFillRoundTrip) {
  const size_t n = 1000;
  void *p = nullptr;
  void *q = nullptr;
  ASSERT_EQ(ops()->alloc(ops(), &p, n * sizeof(float)), PGS_OK);
  ASSERT_EQ(ops()->alloc(ops(), &q, n * sizeof(float)), PGS_OK);
  ASSERT_NE(p, nullptr);
  std::vector<float> src = normal(n, 1), back(n, 0.0f);
  EXPECT_EQ(ops()->copy(ops(), p, src.data(), n * 4, PGS_COPY_FROM_HOST),
            PGS_OK);
  EXPECT_EQ(ops()->copy(ops(), q, p, n * 4, PGS_COPY_SAME), PGS_OK);
  EXPECT_EQ(ops()->copy(ops(), back.data(), q, n * 4, PGS_COPY_TO_HOST),
            PGS_OK);
  EXPECT_TRUE(same_bits(back, src));
  EXPECT_EQ(ops()->fill_zero(ops(), q, n * 4), PGS_OK);
  EXPECT_EQ(ops()->copy(ops(), back.data(), q, n * 4, PGS_COPY_TO_HOST),
            PGS_OK);
  EXPECT_TRUE(same_bits(back, std::vector<float>(n, 0.0f)));
  EXPECT_EQ(ops()->sync(ops()), PGS_OK);
  ops()->free(ops(), p);
  ops()->free(ops(), q);
}

TEST(OpsCpuMemory, EdgeCasesAndBadArguments) {
  void *p = reinterpret_cast<void *>(1);
  EXPECT_EQ(ops()->alloc(ops(), &p, 0), PGS_OK);
  EXPECT_EQ(p, nullptr);
  ops()->free(ops(), nullptr);  // must be harmless
  EXPECT_EQ(ops()->alloc(ops(), nullptr, 8), PGS_ERR_INVALID);
  float a = 1.0f, b = 2.0f;
  EXPECT_EQ(ops()->copy(ops(), nullptr, &a, 4, PGS_COPY_SAME), PGS_ERR_INVALID);
  EXPECT_EQ(ops()->copy(ops(), &b, nullptr, 4, PGS_COPY_SAME), PGS_ERR_INVALID);
  EXPECT_EQ(ops()->copy(ops(), &b, &a, 4, static_cast<pgs_copy_kind_t>(7)),
            PGS_ERR_INVALID);
  EXPECT_EQ(b, 2.0f);
  EXPECT_EQ(ops()->copy(ops(), nullptr, nullptr, 0, PGS_COPY_SAME), PGS_OK);
  EXPECT_EQ(ops()->fill_zero(ops(), nullptr, 4), PGS_ERR_INVALID);
  EXPECT_EQ(ops()->fill_zero(ops(), nullptr, 0), PGS_OK);
}

// ---- elementwise -----------------------------------------------------------

TEST(OpsCpuElementwise, AccumulateAddsAndCountsAtThreshold) {
  const size_t n = 10007;
  std::vector<float> r = tied(n, 2, 8, 0.2), g = tied(n, 3, 8, 0.3);
  std::vector<float> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = r[i] + g[i];
  for (float thr : {0.0f, 0.5f, 1.0f, 1.75f, 100.0f}) {
    std::vector<float> acc = r;
    int64_t n_ge = -1;
    ASSERT_EQ(ops()->accumulate(ops(), acc.data(), g.data(), n, thr, &n_ge),
              PGS_OK);
    EXPECT_TRUE(same_bits(acc, want));
    int64_t expect = 0;
    for (float v : want) expect += v != 0.0f && std::fabs(v) >= thr;
    EXPECT_EQ(n_ge, expect) << "thr=" << thr;
  }
  std::vector<float> acc = r;
  ASSERT_EQ(ops()->accumulate(ops(), acc.data(), g.data(), n, 0.0f, nullptr),
            PGS_OK);
  EXPECT_TRUE(same_bits(acc, want));
  int64_t n_ge = -1;
  EXPECT_EQ(ops()->accumulate(ops(), nullptr, nullptr, 0, 0.0f, &n_ge), PGS_OK);
  EXPECT_EQ(n_ge, 0);
  EXPECT_EQ(ops()->accumulate(ops(), acc.data(), nullptr, n, 0.0f, nullptr),
            PGS_ERR_INVALID);
}

TEST(OpsCpuElementwise, ScaleMultipliesEveryEntry) {
  std::vector<float> x = normal(1001, 4), want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = x[i] * 0.125f;
  ASSERT_EQ(ops()->scale(ops(), x.data(), x.size(), 0.125f), PGS_OK);
  EXPECT_TRUE(same_bits(x, want));
  EXPECT_EQ(ops()->scale(ops(), nullptr, 3, 2.0f), PGS_ERR_INVALID);
}

TEST(OpsCpuElementwise, MulMultipliesEntryByEntry) {
  std::vector<float> x = normal(1001, 4), f = normal(1001, 5), want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = x[i] * f[i];
  ASSERT_EQ(ops()->mul(ops(), x.data(), f.data(), x.size()), PGS_OK);
  EXPECT_TRUE(same_bits(x, want));
  EXPECT_EQ(ops()->mul(ops(), x.data(), nullptr, 3), PGS_ERR_INVALID);
  EXPECT_EQ(ops()->mul(ops(), nullptr, nullptr, 0), PGS_OK);
}

// abs_stats by one scalar loop in double: the oracle of the lanes' sums.
void tail_oracle(const std::vector<float> &x, float thr, double out[5]) {
  double c = 0, s = 0, s2 = 0, sl = 0, lo = 0;
  for (float v : x) {
    const double a = std::fabs(static_cast<double>(v));
    if (!(a > thr)) continue;
    lo = c == 0 ? a : std::min(lo, a);
    c += 1;
    s += a;
    s2 += a * a;
    sl += std::log(a);
  }
  out[0] = c, out[1] = s, out[2] = s2, out[3] = sl, out[4] = lo;
}

// abs_stats of x at thr against the oracle: counts and the smallest value
// exactly, the sums to 1e-9 relative.
void expect_tail_stats(const std::vector<float> &x, float thr,
                       const std::string &at) {
  double got[5], want[5];
  ASSERT_EQ(ops()->abs_stats(ops(), x.data(), x.size(), thr, got), PGS_OK);
  tail_oracle(x, thr, want);
  EXPECT_EQ(got[0], want[0]) << at;
  for (int j = 1; j < 4; ++j)
    EXPECT_NEAR(got[j], want[j], 1e-9 * (1 + std::fabs(want[j])))
        << at << " j " << j;
  EXPECT_EQ(got[4], want[4]) << at;
}

TEST(OpsCpuElementwise, AbsStatsOfTheTailAboveThr) {
  std::vector<float> x = normal(5001, 6);
  x[7] = std::numeric_limits<float>::quiet_NaN();  // never counted
  for (float thr : {0.0f, 1.0f, 2.5f, 100.0f})
    expect_tail_stats(x, thr, "thr " + std::to_string(thr));
  double out[5];
  EXPECT_EQ(ops()->abs_stats(ops(), nullptr, 3, 0.0f, out), PGS_ERR_INVALID);
  EXPECT_EQ(ops()->abs_stats(ops(), x.data(), 3, 0.0f, nullptr),
            PGS_ERR_INVALID);
}

// The lanes' sums over every magnitude a float has: denormals (the log's
// split scales them), tiny and huge values, a zero taken by a negative
// threshold (ln 0 = -Inf), Inf (ln Inf = Inf), and lengths around the
// 128-entry blocks.
TEST(OpsCpuElementwise, AbsStatsAcrossMagnitudes) {
  for (size_t n :
       {size_t{1}, size_t{127}, size_t{128}, size_t{129}, size_t{4099}}) {
    std::vector<float> x = normal(n, 90 + n);
    for (size_t i = 0; i < n; ++i)
      x[i] *= i % 4 == 0   ? 1e-39f
              : i % 4 == 1 ? 1e-30f
              : i % 4 == 2 ? 1e30f
                           : 1.0f;
    for (float thr : {0.0f, 1e-41f, 1.0f})
      expect_tail_stats(
          x, thr, "n " + std::to_string(n) + " thr " + std::to_string(thr));
  }
  std::vector<float> x = normal(300, 95);
  x[5] = 0.0f;
  double got[5];
  ASSERT_EQ(ops()->abs_stats(ops(), x.data(), x.size(), -1.0f, got), PGS_OK);
  EXPECT_EQ(got[0], 300.0);
  EXPECT_EQ(got[3], -std::numeric_limits<double>::infinity());
  EXPECT_EQ(got[4], 0.0);
  x[5] = -std::numeric_limits<float>::infinity();
  ASSERT_EQ(ops()->abs_stats(ops(), x.data(), x.size(), 0.5f, got), PGS_OK);
  EXPECT_EQ(got[3], std::numeric_limits<double>::infinity());
  EXPECT_EQ(got[1], std::numeric_limits<double>::infinity());
}

// Past the 2^20-entry blocks of the lane counts, and in the scalar tail.
TEST(OpsCpuElementwise, CountNonfiniteAcrossBlocks) {
  const size_t n = (size_t{1} << 21) + 37;
  std::vector<float> x(n, 1.0f);
  const size_t at[] = {0,      15,   16, (size_t{1} << 20) - 1, size_t{1} << 20,
                       n - 37, n - 1};
  for (size_t i : at) x[i] = std::numeric_limits<float>::quiet_NaN();
  x[12345] = std::numeric_limits<float>::infinity();
  int64_t c = -1;
  ASSERT_EQ(ops()->count_nonfinite(ops(), x.data(), n, &c), PGS_OK);
  EXPECT_EQ(c, 8);
}

TEST(OpsCpuElementwise, CountNonfiniteSeesNanAndInf) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = normal(999, 5);
  x.push_back(FLT_MAX);
  x.push_back(-FLT_MAX);
  x.push_back(from_bits(1));  // smallest denormal
  int64_t c = -1;
  ASSERT_EQ(ops()->count_nonfinite(ops(), x.data(), x.size(), &c), PGS_OK);
  EXPECT_EQ(c, 0);
  x[3] = nan;
  x[10] = inf;
  x[500] = -inf;
  x[998] = -nan;
  x[999] = from_bits(0x7f800001u);  // signalling-NaN pattern
  ASSERT_EQ(ops()->count_nonfinite(ops(), x.data(), x.size(), &c), PGS_OK);
  EXPECT_EQ(c, 5);
  EXPECT_EQ(ops()->count_nonfinite(ops(), x.data(), x.size(), nullptr),
            PGS_ERR_INVALID);
}

TEST(OpsCpuElementwise, MeanStdMatchesDoubleLoop) {
  for (size_t n : {size_t{1}, size_t{2}, size_t{1000}, size_t{100003}}) {
    std::vector<float> x = normal(n, 6 + n);
    for (auto &v : x) v = 1000.0f + 3.0f * v;  // large mean: no cancellation
    long double s = 0, ss = 0;
    for (float v : x) s += v;
    long double mu = s / n;
    for (float v : x) ss += (v - mu) * (v - mu);
    double want_std = std::sqrt(static_cast<double>(ss / n));
    double mean = -1, std_ = -1;
    ASSERT_EQ(ops()->mean_std(ops(), x.data(), n, &mean, &std_), PGS_OK);
    EXPECT_NEAR(mean, static_cast<double>(mu), 1e-12 * 1000.0) << n;
    EXPECT_NEAR(std_, want_std, 1e-9 * 1000.0 + 1e-9 * want_std) << n;
  }
  double mean = -1, std_ = -1;
  ASSERT_EQ(ops()->mean_std(ops(), nullptr, 0, &mean, &std_), PGS_OK);
  EXPECT_EQ(mean, 0.0);
  EXPECT_EQ(std_, 0.0);
  std::vector<float> c(17, -2.5f);
  ASSERT_EQ(ops()->mean_std(ops(), c.data(), c.size(), &mean, &std_), PGS_OK);
  EXPECT_EQ(mean, -2.5);
  EXPECT_EQ(std_, 0.0);
  EXPECT_EQ(ops()->mean_std(ops(), c.data(), c.size(), nullptr, &std_),
            PGS_ERR_INVALID);
}

// ---- gather / zero_at / scatter_add -------------------------------------

TEST(OpsCpuIndexOps, GatherZeroAtScatterAddMatchLoops) {
  const size_t n = 5000;
  std::vector<float> x = normal(n, 23);
  std::mt19937_64 gen(24);
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(n) - 1);
  std::vector<int32_t> idx(3000);
  for (auto &i : idx) i = d(gen);  // unsorted, with repeats
  std::vector<float> val = normal(idx.size(), 25);

  std::vector<float> got(idx.size(), -1.0f);
  ASSERT_EQ(
      ops()->gather(ops(), x.data(), n, idx.data(), idx.size(), got.data()),
      PGS_OK);
  for (size_t j = 0; j < idx.size(); ++j) EXPECT_EQ(got[j], x[idx[j]]);

  for (float scale : {1.0f, 0.25f, -3.0f}) {
    std::vector<float> want = x, y = x;
    for (size_t j = 0; j < idx.size(); ++j) {
      float p = scale * val[j];
      want[idx[j]] = want[idx[j]] + p;  // j order, float arithmetic
    }
    ASSERT_EQ(ops()->scatter_add(ops(), y.data(), n, idx.data(), val.data(),
                                 idx.size(), scale),
              PGS_OK);
    EXPECT_TRUE(same_bits(y, want)) << "scale " << scale;
  }

  std::vector<float> want = x, y = x;
  for (int32_t i : idx) want[i] = 0.0f;
  ASSERT_EQ(ops()->zero_at(ops(), y.data(), n, idx.data(), idx.size()), PGS_OK);
  EXPECT_TRUE(same_bits(y, want));
}

TEST(OpsCpuIndexOps, ScatterAddRepeatedIndexInOrder) {
  // 1e8 + 1 - 1e8 in float depends on the order: checks j order exactly.
  std::vector<float> x = {0.0f, 0.0f};
  std::vector<int32_t> idx = {1, 1, 1};
  std::vector<float> val = {1e8f, 1.0f, -1e8f};
  ASSERT_EQ(
      ops()->scatter_add(ops(), x.data(), 2, idx.data(), val.data(), 3, 1.0f),
      PGS_OK);
  EXPECT_EQ(x[1], (1e8f + 1.0f) - 1e8f);
  EXPECT_EQ(x[0], 0.0f);
}

TEST(OpsCpuIndexOps, BadIndexLeavesMemoryUntouched) {
  const size_t n = 100;
  const std::vector<float> x0 = normal(n, 26);
  for (int32_t bad : {-1, static_cast<int32_t>(n), INT32_MAX, INT32_MIN}) {
    // The bad index comes last, after good ones that would be applied first.
    std::vector<int32_t> idx = {0, 5, 99, 42, bad};
    std::vector<float> val = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f};
    std::vector<float> x = x0;
    EXPECT_EQ(ops()->scatter_add(ops(), x.data(), n, idx.data(), val.data(),
                                 idx.size(), 1.0f),
              PGS_ERR_INDEX);
    EXPECT_TRUE(same_bits(x, x0));
    EXPECT_EQ(ops()->zero_at(ops(), x.data(), n, idx.data(), idx.size()),
              PGS_ERR_INDEX);
    EXPECT_TRUE(same_bits(x, x0));
    std::vector<float> out(idx.size(), -9.0f);
    EXPECT_EQ(
        ops()->gather(ops(), x.data(), n, idx.data(), idx.size(), out.data()),
        PGS_ERR_INDEX);
    EXPECT_TRUE(same_bits(out, std::vector<float>(idx.size(), -9.0f)));
  }
  // Nothing can be indexed in an empty buffer.
  int32_t zero = 0;
  float v = 1.0f;
  EXPECT_EQ(ops()->scatter_add(ops(), nullptr, 0, &zero, &v, 1, 1.0f),
            PGS_ERR_INDEX);
  EXPECT_EQ(ops()->zero_at(ops(), nullptr, 0, nullptr, 0), PGS_OK);
  EXPECT_EQ(ops()->zero_at(ops(), nullptr, 5, &zero, 1), PGS_ERR_INVALID);
}

// scatter_add_sorted: scatter_add's sums on strictly ascending lists; any
// other order, a repeat or an index out of range is refused untouched.
TEST(OpsCpuIndexOps, ScatterAddSortedMatchesScatterAddAndRefusesDisorder) {
  const size_t n = 5000;
  const std::vector<float> x = normal(n, 27);
  std::vector<int32_t> idx;
  for (int32_t i = 3; i < static_cast<int32_t>(n); i += 7) idx.push_back(i);
  const std::vector<float> val = normal(idx.size(), 28);
  for (float scale : {1.0f, 0.25f, -1.0f}) {
    std::vector<float> want = x, got = x;
    ASSERT_EQ(ops()->scatter_add(ops(), want.data(), n, idx.data(), val.data(),
                                 idx.size(), scale),
              PGS_OK);
    ASSERT_EQ(ops()->scatter_add_sorted(ops(), got.data(), n, idx.data(),
                                        val.data(), idx.size(), scale),
              PGS_OK);
    EXPECT_TRUE(same_bits(got, want)) << "scale " << scale;
  }
  const std::vector<std::vector<int32_t>> refused = {
      {0, 5, 5, 9},                     // a repeat
      {0, 9, 5, 20},                    // out of order
      {0, 5, static_cast<int32_t>(n)},  // out of range
      {-1, 0, 5},
      {0, 5, INT32_MAX},
      {INT32_MIN, 0}};
  for (const auto &bad : refused) {
    std::vector<float> y = x, v(bad.size(), 1.0f);
    EXPECT_EQ(ops()->scatter_add_sorted(ops(), y.data(), n, bad.data(),
                                        v.data(), bad.size(), 1.0f),
              PGS_ERR_INDEX);
    EXPECT_TRUE(same_bits(y, x));
  }
  EXPECT_EQ(
      ops()->scatter_add_sorted(ops(), nullptr, 0, nullptr, nullptr, 0, 1.0f),
      PGS_OK);
  int32_t zero = 0;
  float one = 1.0f;
  EXPECT_EQ(ops()->scatter_add_sorted(ops(), nullptr, 0, &zero, &one, 1, 1.0f),
            PGS_ERR_INDEX);
}

// set_sorted: fill_zero then scatter_add_sorted in one pass, bit for bit
// (-0 values land as +0, denormals kept); a list scatter_add_sorted refuses
// is refused, and the host then writes nothing.
TEST(OpsCpuIndexOps, SetSortedEqualsFillAndScatterSorted) {
  ASSERT_NE(ops()->set_sorted, nullptr);
  const size_t n = 5000;
  const std::vector<float> x = normal(n, 29);
  std::vector<int32_t> idx;
  for (int32_t i = 0; i < static_cast<int32_t>(n); i += 3) idx.push_back(i);
  std::vector<float> val = normal(idx.size(), 30);
  val[0] = -0.0f;
  val[1] = 1e-41f;  // a denormal
  val[2] = -1e-41f;
  for (float scale : {1.0f, 0.25f, -1.0f, 1.0f / 3.0f}) {
    for (size_t m : {size_t{0}, size_t{1}, idx.size()}) {
      std::vector<float> want = x, got = x;
      ASSERT_EQ(ops()->fill_zero(ops(), want.data(), n * 4), PGS_OK);
      ASSERT_EQ(ops()->scatter_add_sorted(ops(), want.data(), n, idx.data(),
                                          val.data(), m, scale),
                PGS_OK);
      ASSERT_EQ(ops()->set_sorted(ops(), got.data(), n, idx.data(), val.data(),
                                  m, scale),
                PGS_OK);
      EXPECT_TRUE(same_bits(got, want)) << "scale " << scale << " m " << m;
    }
  }
  const std::vector<std::vector<int32_t>> refused = {
      {0, 5, 5, 9}, {0, 9, 5, 20},     {0, 5, static_cast<int32_t>(n)},
      {-1, 0, 5},   {0, 5, INT32_MAX}, {INT32_MIN, 0}};
  for (const auto &bad : refused) {
    std::vector<float> y = x, v(bad.size(), 1.0f);
    EXPECT_EQ(ops()->set_sorted(ops(), y.data(), n, bad.data(), v.data(),
                                bad.size(), 1.0f),
              PGS_ERR_INDEX);
    EXPECT_TRUE(same_bits(y, x));
  }
  EXPECT_EQ(ops()->set_sorted(ops(), nullptr, 0, nullptr, nullptr, 0, 1.0f),
            PGS_OK);
  int32_t zero = 0;
  float one = 1.0f;
  EXPECT_EQ(ops()->set_sorted(ops(), nullptr, 0, &zero, &one, 1, 1.0f),
            PGS_ERR_INDEX);
  EXPECT_EQ(ops()->set_sorted(ops(), nullptr, 4, nullptr, nullptr, 0, 1.0f),
            PGS_ERR_INVALID);
  std::vector<float> y = x;
  EXPECT_EQ(ops()->set_sorted(ops(), y.data(), n, nullptr, &one, 1, 1.0f),
            PGS_ERR_INVALID);
}

// ---- zero_common -----------------------------------------------------------

TEST(OpsCpuZeroCommon, ZeroesIntersectionWithOffset) {
  const size_t n = 20000;
  const std::vector<float> x0 = normal(n, 27);
  for (int32_t offset : {0, 1000, -500}) {
    std::vector<int32_t> a = sorted_subset(3000, 15000, 28);
    std::vector<int32_t> b = sorted_subset(6000, 20000, 29);
    if (offset < 0)
      a.erase(a.begin(), std::lower_bound(a.begin(), a.end(), -offset));
    std::set<int32_t> bs(b.begin(), b.end());
    std::vector<float> want = x0, x = x0;
    size_t hits = 0;
    for (int32_t i : a)
      if (bs.count(i + offset)) {
        want[i + offset] = 0.0f;
        ++hits;
      }
    ASSERT_GT(hits, 0u);
    ASSERT_EQ(ops()->zero_common(ops(), x.data(), n, a.data(), nullptr,
                                 a.size(), offset, b.data(), b.size()),
              PGS_OK);
    EXPECT_TRUE(same_bits(x, want)) << "offset " << offset;
  }
  // Disjoint and empty lists change nothing.
  std::vector<int32_t> ev = {0, 2, 4}, od = {1, 3, 5};
  std::vector<float> x = x0;
  ASSERT_EQ(ops()->zero_common(ops(), x.data(), n, ev.data(), nullptr, 3, 0,
                               od.data(), 3),
            PGS_OK);
  ASSERT_EQ(ops()->zero_common(ops(), x.data(), n, nullptr, nullptr, 0, 0,
                               od.data(), 3),
            PGS_OK);
  EXPECT_TRUE(same_bits(x, x0));
}

TEST(OpsCpuZeroCommon, BadIndexLeavesMemoryUntouched) {
  const size_t n = 100;
  const std::vector<float> x0 = normal(n, 30);
  std::vector<float> x = x0;
  std::vector<int32_t> a = {1, 5, 10, 60};
  std::vector<int32_t> b = {6, 11, 61, 99};
  // a + 40 reaches 100 == n.
  EXPECT_EQ(ops()->zero_common(ops(), x.data(), n, a.data(), nullptr, a.size(),
                               40, b.data(), b.size()),
            PGS_ERR_INDEX);
  // a - 2 goes below 0.
  EXPECT_EQ(ops()->zero_common(ops(), x.data(), n, a.data(), nullptr, a.size(),
                               -2, b.data(), b.size()),
            PGS_ERR_INDEX);
  // b out of range while the common entries (6, 11, 61) come first.
  std::vector<int32_t> bad_b = {6, 11, 61, 100};
  EXPECT_EQ(ops()->zero_common(ops(), x.data(), n, a.data(), nullptr, a.size(),
                               1, bad_b.data(), bad_b.size()),
            PGS_ERR_INDEX);
  // The offset must not wrap around int32.
  std::vector<int32_t> big = {INT32_MAX};
  EXPECT_EQ(ops()->zero_common(ops(), x.data(), n, big.data(), nullptr, 1,
                               INT32_MAX, b.data(), b.size()),
            PGS_ERR_INDEX);
  // Nor wrap from very negative into range: INT32_MIN + 3 + INT32_MIN
  // would be 3 in 32-bit arithmetic.
  std::vector<int32_t> low = {INT32_MIN + 3}, three = {3};
  EXPECT_EQ(ops()->zero_common(ops(), x.data(), n, low.data(), nullptr, 1,
                               INT32_MIN, three.data(), 1),
            PGS_ERR_INDEX);
  EXPECT_TRUE(same_bits(x, x0));
  // The same lists with offset 1 are valid and zero 6, 11, 61.
  ASSERT_EQ(ops()->zero_common(ops(), x.data(), n, a.data(), nullptr, a.size(),
                               1, b.data(), b.size()),
            PGS_OK);
  EXPECT_EQ(x[6], 0.0f);
  EXPECT_EQ(x[11], 0.0f);
  EXPECT_EQ(x[61], 0.0f);
  EXPECT_EQ(x[99], x0[99]);
}

// ---- merge_pairs -----------------------------------------------------------

TEST(OpsCpuMergePairs, MatchesStdMap) {
  for (uint64_t seed : {31u, 32u, 33u}) {
    std::vector<int32_t> ia = sorted_subset(4000, 10000, seed);
    std::vector<int32_t> ib =
        sorted_subset(3000 * (seed - 30), 10000, seed + 100);
    std::vector<float> va = normal(ia.size(), seed + 1);
    std::vector<float> vb = normal(ib.size(), seed + 2);
    std::map<int32_t, float> want;
    for (size_t i = 0; i < ia.size(); ++i) want[ia[i]] = va[i];
    for (size_t j = 0; j < ib.size(); ++j) {
      auto it = want.find(ib[j]);
      if (it == want.end())
        want[ib[j]] = vb[j];
      else
        it->second = it->second + vb[j];  // va + vb, in that order
    }
    size_t cap = ia.size() + ib.size();
    std::vector<int32_t> io(cap, -1);
    std::vector<float> vo(cap, -1.0f);
    int64_t count = -1;
    ASSERT_EQ(ops()->merge_pairs(ops(), ia.data(), va.data(), ia.size(),
                                 ib.data(), vb.data(), ib.size(), io.data(),
                                 vo.data(), cap, &count),
              PGS_OK);
    ASSERT_EQ(count, static_cast<int64_t>(want.size()));
    size_t j = 0;
    for (const auto &[i, v] : want) {
      EXPECT_EQ(io[j], i);
      EXPECT_EQ(bits_of(vo[j]), bits_of(v)) << "index " << i;
      ++j;
    }
  }
}

TEST(OpsCpuMergePairs, EmptyListsOverflowAndBadArguments) {
  std::vector<int32_t> ia = {1, 3, 5}, ib = {2, 3, 7, 9};
  std::vector<float> va = {1.0f, 2.0f, 3.0f}, vb = {10.0f, 20.0f, 30.0f, 40.0f};
  std::vector<int32_t> io(8, -7);
  std::vector<float> vo(8, -7.0f);
  int64_t count = -1;
  // Union {1,2,3,5,7,9} is 6 pairs; capacity 4 writes the first 4.
  EXPECT_EQ(ops()->merge_pairs(ops(), ia.data(), va.data(), 3, ib.data(),
                               vb.data(), 4, io.data(), vo.data(), 4, &count),
            PGS_ERR_OVERFLOW);
  EXPECT_EQ(count, 6);
  EXPECT_EQ(io, (std::vector<int32_t>{1, 2, 3, 5, -7, -7, -7, -7}));
  EXPECT_EQ(vo, (std::vector<float>{1.0f, 10.0f, 22.0f, 3.0f, -7.0f, -7.0f,
                                    -7.0f, -7.0f}));
  // One side empty: a copy of the other.
  EXPECT_EQ(ops()->merge_pairs(ops(), nullptr, nullptr, 0, ib.data(), vb.data(),
                               4, io.data(), vo.data(), 8, &count),
            PGS_OK);
  EXPECT_EQ(count, 4);
  EXPECT_EQ(std::vector<int32_t>(io.begin(), io.begin() + 4), ib);
  EXPECT_EQ(ops()->merge_pairs(ops(), nullptr, nullptr, 0, nullptr, nullptr, 0,
                               nullptr, nullptr, 0, &count),
            PGS_OK);
  EXPECT_EQ(count, 0);
  EXPECT_EQ(ops()->merge_pairs(ops(), ia.data(), va.data(), 3, ib.data(),
                               vb.data(), 4, io.data(), vo.data(), 8, nullptr),
            PGS_ERR_INVALID);
  EXPECT_EQ(ops()->merge_pairs(ops(), ia.data(), nullptr, 3, ib.data(),
                               vb.data(), 4, io.data(), vo.data(), 8, &count),
            PGS_ERR_INVALID);
  EXPECT_EQ(ops()->merge_pairs(ops(), ia.data(), va.data(), 3, ib.data(),
                               vb.data(), 4, nullptr, vo.data(), 8, &count),
            PGS_ERR_INVALID);
}

}  // namespace
