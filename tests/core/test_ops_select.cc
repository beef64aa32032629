// Tests of the host ops table: selection (radix select, histograms,
// region counts, compaction).
#include <gtest/gtest.h>

#include "ops_test_util.h"

namespace {
using namespace ops_test;

// ---- kth_abs --------------------------------------------------------------

TEST(OpsCpuKthAbs, MatchesNthElementAcrossSizes) {
  for (size_t n : {size_t{1}, size_t{2}, size_t{7}, size_t{1000},
                   size_t{100000}, size_t{1} << 20}) {
    std::vector<float> x = normal(n, 100 + n);
    for (size_t k : ks_for(n, n)) expect_kth(x, k);
  }
}

TEST(OpsCpuKthAbs, TiesZerosAndInfinities) {
  for (size_t n : {size_t{7}, size_t{1000}, size_t{100000}}) {
    std::vector<float> x = tied(n, 200 + n, 5, 0.4);
    for (size_t k : ks_for(n, n + 1)) expect_kth(x, k);
    x[n / 2] = std::numeric_limits<float>::infinity();
    x[n / 3] = -std::numeric_limits<float>::infinity();
    for (size_t k : ks_for(n, n + 2)) expect_kth(x, k);
  }
}

TEST(OpsCpuKthAbs, AllZerosAndMostlyZeros) {
  std::vector<float> z(1000, 0.0f);
  z[7] = -0.0f;
  for (size_t k : {size_t{1}, size_t{500}, size_t{1000}}) {
    float thr = -1.0f;
    int64_t n_gt = -1;
    ASSERT_EQ(ops()->kth_abs(ops(), z.data(), z.size(), k, &thr, &n_gt),
              PGS_OK);
    EXPECT_EQ(bits_of(thr), bits_of(0.0f));  // +0, not -0
    EXPECT_EQ(n_gt, 0);
  }
  // Five nonzeros: k <= 5 selects among them, k > 5 gives 0 with n_gt 5.
  for (size_t i : {3, 100, 101, 500, 999}) z[i] = 0.5f * static_cast<float>(i);
  for (size_t k : {size_t{1}, size_t{5}, size_t{6}, size_t{1000}})
    expect_kth(z, k);
}

TEST(OpsCpuKthAbs, NegativeValuesUseMagnitude) {
  std::vector<float> x = normal(50000, 7);
  for (auto &v : x) v = -std::fabs(v);
  for (size_t k : ks_for(x.size(), 8)) expect_kth(x, k);
  float thr = 0;
  int64_t n_gt = 0;
  std::vector<float> y = {-3.0f, 1.0f, -2.0f};
  ASSERT_EQ(ops()->kth_abs(ops(), y.data(), 3, 1, &thr, &n_gt), PGS_OK);
  EXPECT_EQ(thr, 3.0f);
  EXPECT_EQ(n_gt, 0);
  ASSERT_EQ(ops()->kth_abs(ops(), y.data(), 3, 3, &thr, &n_gt), PGS_OK);
  EXPECT_EQ(thr, 1.0f);
  EXPECT_EQ(n_gt, 2);
}

TEST(OpsCpuKthAbs, DenormalsAndLowMantissaBits) {
  // Values that differ only in the lowest byte of the bits: only the last
  // radix level separates them.
  std::mt19937_64 gen(9);
  std::uniform_int_distribution<uint32_t> low(0, 255);
  std::bernoulli_distribution neg(0.5);
  std::vector<float> x(20000);
  for (auto &v : x) {
    v = from_bits(bits_of(1.0f) + low(gen));
    if (neg(gen)) v = -v;
  }
  for (size_t k : ks_for(x.size(), 10)) expect_kth(x, k);
  // Denormals (with zeros): smallest magnitudes, all in the bottom bins.
  for (auto &v : x) {
    uint32_t b = low(gen) * 3u;  // 0 makes a zero
    v = from_bits(b | (neg(gen) ? 0x80000000u : 0u));
  }
  for (size_t k : ks_for(x.size(), 11)) expect_kth(x, k);
  // Mixed: denormals, normals and the largest finite value.
  x[0] = FLT_MAX;
  x[1] = -FLT_MIN;
  x[2] = 1e-30f;
  for (size_t k : ks_for(x.size(), 12)) expect_kth(x, k);
}

TEST(OpsCpuKthAbs, RejectsBadArguments) {
  std::vector<float> x = {1.0f, 2.0f, 3.0f};
  float thr = 42.0f;
  int64_t n_gt = 42;
  EXPECT_EQ(ops()->kth_abs(ops(), x.data(), 3, 0, &thr, &n_gt),
            PGS_ERR_INVALID);
  EXPECT_EQ(ops()->kth_abs(ops(), x.data(), 3, 4, &thr, &n_gt),
            PGS_ERR_INVALID);
  EXPECT_EQ(ops()->kth_abs(ops(), x.data(), 0, 1, &thr, &n_gt),
            PGS_ERR_INVALID);
  EXPECT_EQ(ops()->kth_abs(ops(), nullptr, 3, 1, &thr, &n_gt), PGS_ERR_INVALID);
  EXPECT_EQ(ops()->kth_abs(ops(), x.data(), 3, 1, nullptr, &n_gt),
            PGS_ERR_INVALID);
  EXPECT_EQ(ops()->kth_abs(ops(), x.data(), 3, 1, &thr, nullptr),
            PGS_ERR_INVALID);
  EXPECT_EQ(thr, 42.0f);
  EXPECT_EQ(n_gt, 42);
}

// The intended use: threshold then compaction with the tie quota selects
// exactly k entries, the k largest.
TEST(OpsCpuKthAbs, ThresholdPlusTieQuotaSelectsExactlyK) {
  std::vector<float> x = tied(100000, 13, 6, 0.3);
  for (size_t k :
       {size_t{1}, size_t{10}, size_t{5000}, size_t{60000}, size_t{70000}}) {
    float thr = 0;
    int64_t n_gt = 0;
    ASSERT_EQ(ops()->kth_abs(ops(), x.data(), x.size(), k, &thr, &n_gt),
              PGS_OK);
    std::vector<int32_t> idx(x.size());
    std::vector<float> val(x.size());
    int64_t count = 0;
    ASSERT_EQ(ops()->compact(ops(), x.data(), x.size(), thr,
                             static_cast<int64_t>(k) - n_gt, 0, idx.data(),
                             val.data(), idx.size(), &count),
              PGS_OK);
    int64_t nnz = 0;
    for (float v : x) nnz += v != 0.0f;
    // Zeros are never selected, so k beyond the nonzeros gets them all.
    EXPECT_EQ(count, std::min<int64_t>(static_cast<int64_t>(k), nnz)) << k;
  }
}

// ---- hist_abs --------------------------------------------------------------

std::vector<int64_t> hist_oracle(const std::vector<float> &x, int level,
                                 uint32_t prefix) {
  std::vector<int64_t> h(PGS_HIST_BINS, 0);
  for (float v : x) {
    uint32_t b = abs_bits(v);
    if (b == 0) continue;
    if (level > 0 && (b >> (32 - 8 * level)) != (prefix >> (32 - 8 * level)))
      continue;
    ++h[(b >> (24 - 8 * level)) & 0xffu];
  }
  return h;
}

TEST(OpsCpuHistAbs, MatchesBruteForceAtEveryLevel) {
  std::vector<float> x = normal(50000, 14);
  std::vector<float> t = tied(20000, 15, 4, 0.5);
  x.insert(x.end(), t.begin(), t.end());
  for (uint32_t b = 0; b < 3000; b += 7)
    x.push_back(from_bits(b));  // denormals
  std::mt19937_64 gen(16);
  std::uniform_int_distribution<size_t> pick(0, x.size() - 1);
  for (int trial = 0; trial < 6; ++trial) {
    float real = x[pick(gen)];
    if (trial == 5) real = from_bits(77);  // a denormal's prefix
    // Low bits below the compared prefix must not matter: set them to junk.
    for (uint32_t junk : {0u, 0x00ffffffu}) {
      for (int level = 0; level < PGS_HIST_LEVELS; ++level) {
        uint32_t keep = level == 0 ? 0u : ~0u << (32 - 8 * level);
        uint32_t prefix = (abs_bits(real) & keep) | (junk & ~keep);
        std::vector<int64_t> h(PGS_HIST_BINS, 5);  // added to, not overwritten
        ASSERT_EQ(
            ops()->hist_abs(ops(), x.data(), x.size(), level, prefix, h.data()),
            PGS_OK);
        std::vector<int64_t> want = hist_oracle(x, level, prefix);
        for (auto &w : want) w += 5;
        EXPECT_EQ(h, want) << "level " << level << " trial " << trial;
        // The real value's own bin is never empty.
        uint32_t bin = (abs_bits(real) >> (24 - 8 * level)) & 0xffu;
        if (real != 0.0f) {
          EXPECT_GT(h[bin], 5) << level;
        }
      }
    }
  }
}

TEST(OpsCpuHistAbs, SkipsZerosAndRejectsBadLevels) {
  std::vector<float> x(100, 0.0f);
  x[5] = -0.0f;
  x[6] = 1.0f;
  std::vector<int64_t> h(PGS_HIST_BINS, 0);
  ASSERT_EQ(ops()->hist_abs(ops(), x.data(), x.size(), 0, 0, h.data()), PGS_OK);
  int64_t total = 0;
  for (auto v : h) total += v;
  EXPECT_EQ(total, 1);
  EXPECT_EQ(h[bits_of(1.0f) >> 24], 1);
  // Level 3 with prefix 0 would see the zeros' bits if they were not skipped.
  std::fill(h.begin(), h.end(), 0);
  ASSERT_EQ(ops()->hist_abs(ops(), x.data(), x.size(), 3, 0, h.data()), PGS_OK);
  EXPECT_EQ(h[0], 0);
  EXPECT_EQ(ops()->hist_abs(ops(), x.data(), x.size(), -1, 0, h.data()),
            PGS_ERR_INVALID);
  EXPECT_EQ(ops()->hist_abs(ops(), x.data(), x.size(), 4, 0, h.data()),
            PGS_ERR_INVALID);
  EXPECT_EQ(ops()->hist_abs(ops(), x.data(), x.size(), 0, 0, nullptr),
            PGS_ERR_INVALID);
  EXPECT_EQ(ops()->hist_abs(ops(), nullptr, 0, 0, 0, h.data()), PGS_OK);
}

// ---- count_regions --------------------------------------------------------

TEST(OpsCpuCountRegions, MatchesBruteForceWithEmptyRegions) {
  std::vector<float> x = tied(5000, 17, 4, 0.3);
  std::vector<int64_t> bounds = {0, 0, 10, 10, 10, 2500, 4999, 5000, 5000};
  int nreg = static_cast<int>(bounds.size()) - 1;
  for (float thr : {0.0f, 0.25f, 0.5f, 1.0f, 2.0f}) {
    std::vector<int64_t> gt(nreg, -1), eq(nreg, -1);
    ASSERT_EQ(ops()->count_regions(ops(), x.data(), x.size(), bounds.data(),
                                   nreg, thr, gt.data(), eq.data()),
              PGS_OK);
    for (int j = 0; j < nreg; ++j) {
      int64_t g = 0, e = 0;
      for (int64_t i = bounds[j]; i < bounds[j + 1]; ++i) {
        g += x[i] != 0.0f && std::fabs(x[i]) > thr;
        e += x[i] != 0.0f && std::fabs(x[i]) == thr;
      }
      EXPECT_EQ(gt[j], g) << "region " << j << " thr " << thr;
      EXPECT_EQ(eq[j], e) << "region " << j << " thr " << thr;
    }
  }
  // Regions need not start at 0.
  std::vector<int64_t> sub = {100, 100, 200};
  std::vector<int64_t> gt(2), eq(2);
  ASSERT_EQ(ops()->count_regions(ops(), x.data(), x.size(), sub.data(), 2,
                                 0.25f, gt.data(), eq.data()),
            PGS_OK);
  EXPECT_EQ(gt[0], 0);
  EXPECT_EQ(eq[0], 0);
  int64_t g = 0;
  for (int i = 100; i < 200; ++i) g += std::fabs(x[i]) > 0.25f;
  EXPECT_EQ(gt[1], g);
}

TEST(OpsCpuCountRegions, RejectsBadBounds) {
  std::vector<float> x(10, 1.0f);
  std::vector<int64_t> gt(3, 7), eq(3, 7);
  std::vector<int64_t> decreasing = {0, 5, 4, 10};
  std::vector<int64_t> negative = {-1, 5, 5, 10};
  EXPECT_EQ(ops()->count_regions(ops(), x.data(), x.size(), decreasing.data(),
                                 3, 0.0f, gt.data(), eq.data()),
            PGS_ERR_INVALID);
  EXPECT_EQ(ops()->count_regions(ops(), x.data(), x.size(), negative.data(), 3,
                                 0.0f, gt.data(), eq.data()),
            PGS_ERR_INVALID);
  std::vector<int64_t> past_end = {0, 5, 11};
  EXPECT_EQ(ops()->count_regions(ops(), x.data(), x.size(), past_end.data(), 2,
                                 0.0f, gt.data(), eq.data()),
            PGS_ERR_INVALID);
  EXPECT_EQ(gt, std::vector<int64_t>(3, 7));
  EXPECT_EQ(ops()->count_regions(ops(), x.data(), x.size(), nullptr, 3, 0.0f,
                                 gt.data(), eq.data()),
            PGS_ERR_INVALID);
  EXPECT_EQ(ops()->count_regions(ops(), x.data(), x.size(), decreasing.data(),
                                 -1, 0.0f, gt.data(), eq.data()),
            PGS_ERR_INVALID);
  // No regions: valid, nothing written.
  EXPECT_EQ(ops()->count_regions(ops(), x.data(), x.size(), decreasing.data(),
                                 0, 0.0f, nullptr, nullptr),
            PGS_OK);
}

// ---- compact / select_pairs -----------------------------------------------

TEST(OpsCpuCompact, MatchesLoopForEveryQuota) {
  std::vector<float> x = tied(20000, 18, 8, 0.25);
  for (float thr : {0.0f, 0.25f, 1.0f, 1.5f, 2.0f, 3.0f}) {
    for (int64_t quota : {int64_t{0}, int64_t{1}, int64_t{37}, int64_t{1000},
                          int64_t{-1}, int64_t{-5}, int64_t{1} << 40}) {
      expect_compact(x, thr, quota, 0);
      expect_compact(x, thr, quota, 12345);
    }
  }
  expect_compact(normal(3000, 19), 1.0f, -1, 0);
  expect_compact(std::vector<float>(100, 0.0f), 0.0f, -1, 0);
}

TEST(OpsCpuCompact, OverflowWritesOnlyUpToCap) {
  std::vector<float> x = tied(1000, 20, 4, 0.2);
  Pairs want = select_oracle(iota_idx(x.size(), 0), x, 0.5f, 10);
  ASSERT_GT(want.idx.size(), 20u);
  const size_t cap = 20;
  std::vector<int32_t> idx(cap + 5, -7);
  std::vector<float> val(cap + 5, -7.0f);
  int64_t count = -1;
  EXPECT_EQ(ops()->compact(ops(), x.data(), x.size(), 0.5f, 10, 0, idx.data(),
                           val.data(), cap, &count),
            PGS_ERR_OVERFLOW);
  EXPECT_EQ(count, static_cast<int64_t>(want.idx.size()));
  for (size_t j = 0; j < cap; ++j) {
    EXPECT_EQ(idx[j], want.idx[j]);
    EXPECT_EQ(val[j], want.val[j]);
  }
  for (size_t j = cap; j < idx.size(); ++j) {
    EXPECT_EQ(idx[j], -7);
    EXPECT_EQ(val[j], -7.0f);
  }
  // Capacity 0 with no buffers: a pure count.
  EXPECT_EQ(ops()->compact(ops(), x.data(), x.size(), 0.5f, 10, 0, nullptr,
                           nullptr, 0, &count),
            PGS_ERR_OVERFLOW);
  EXPECT_EQ(count, static_cast<int64_t>(want.idx.size()));
  // Exactly enough capacity is not an overflow.
  std::vector<int32_t> i2(want.idx.size());
  std::vector<float> v2(want.idx.size());
  EXPECT_EQ(ops()->compact(ops(), x.data(), x.size(), 0.5f, 10, 0, i2.data(),
                           v2.data(), i2.size(), &count),
            PGS_OK);
  EXPECT_EQ(i2, want.idx);
}

TEST(OpsCpuCompact, RejectsBadArguments) {
  std::vector<float> x(100, 1.0f);
  std::vector<int32_t> idx(100);
  std::vector<float> val(100);
  int64_t count = 0;
  EXPECT_EQ(ops()->compact(ops(), nullptr, 100, 0.0f, -1, 0, idx.data(),
                           val.data(), 100, &count),
            PGS_ERR_INVALID);
  EXPECT_EQ(ops()->compact(ops(), x.data(), 100, 0.0f, -1, 0, nullptr,
                           val.data(), 100, &count),
            PGS_ERR_INVALID);
  EXPECT_EQ(ops()->compact(ops(), x.data(), 100, 0.0f, -1, -1, idx.data(),
                           val.data(), 100, &count),
            PGS_ERR_INVALID);
  // Indices that would not fit int32 after the offset.
  EXPECT_EQ(ops()->compact(ops(), x.data(), 100, 0.0f, -1, INT32_MAX - 50,
                           idx.data(), val.data(), 100, &count),
            PGS_ERR_UNSUPPORTED);
  ASSERT_EQ(ops()->compact(ops(), x.data(), 100, 0.0f, -1, INT32_MAX - 99,
                           idx.data(), val.data(), 100, &count),
            PGS_OK);
  EXPECT_EQ(idx[99], INT32_MAX);
}

TEST(OpsCpuSelectPairs, MatchesLoopAndFiltersInPlace) {
  std::vector<float> val = tied(8000, 21, 6, 0.2);
  std::vector<int32_t> idx = sorted_subset(20000, 1 << 20, 22);
  idx.resize(std::min(idx.size(), val.size()));
  val.resize(idx.size());
  for (float thr : {0.0f, 0.5f, 1.0f}) {
    for (int64_t quota : {int64_t{0}, int64_t{3}, int64_t{-1}}) {
      Pairs want = select_oracle(idx, val, thr, quota);
      std::vector<int32_t> io(idx.size(), -1);
      std::vector<float> vo(idx.size(), -1.0f);
      int64_t count = -1;
      ASSERT_EQ(
          ops()->select_pairs(ops(), idx.data(), val.data(), idx.size(), thr,
                              quota, io.data(), vo.data(), io.size(), &count),
          PGS_OK);
      ASSERT_EQ(count, static_cast<int64_t>(want.idx.size()));
      // Nothing is written past the count (the device table agrees).
      for (size_t j = static_cast<size_t>(count); j < io.size(); ++j) {
        ASSERT_EQ(io[j], -1) << "slot " << j << " past the count";
        ASSERT_EQ(vo[j], -1.0f) << "slot " << j << " past the count";
      }
      io.resize(count);
      vo.resize(count);
      EXPECT_EQ(io, want.idx);
      EXPECT_TRUE(same_bits(vo, want.val));
      // In place: output aliases input.
      std::vector<int32_t> ii = idx;
      std::vector<float> vv = val;
      ASSERT_EQ(
          ops()->select_pairs(ops(), ii.data(), vv.data(), ii.size(), thr,
                              quota, ii.data(), vv.data(), ii.size(), &count),
          PGS_OK);
      ii.resize(count);
      vv.resize(count);
      EXPECT_EQ(ii, want.idx);
      EXPECT_TRUE(same_bits(vv, want.val));
      // A capacity below the count: the first cap pairs, nothing past it.
      const size_t cap = want.idx.size() / 2;
      std::vector<int32_t> ic(cap + 1, -7);
      std::vector<float> vc(cap + 1, -7.0f);
      ASSERT_EQ(
          ops()->select_pairs(ops(), idx.data(), val.data(), idx.size(), thr,
                              quota, ic.data(), vc.data(), cap, &count),
          cap < want.idx.size() ? PGS_ERR_OVERFLOW : PGS_OK);
      EXPECT_EQ(count, static_cast<int64_t>(want.idx.size()));
      EXPECT_EQ(ic[cap], -7) << "wrote past the capacity";
      EXPECT_EQ(vc[cap], -7.0f) << "wrote past the capacity";
      ic.resize(cap);
      EXPECT_EQ(ic,
                std::vector<int32_t>(want.idx.begin(), want.idx.begin() + cap));
    }
  }
}

TEST(OpsCpuSelectPairs, OverflowAndBadArguments) {
  std::vector<int32_t> idx = {4, 9, 11, 20, 31};
  std::vector<float> val = {1.0f, -2.0f, 0.0f, 3.0f, -1.0f};
  std::vector<int32_t> io(4, -7);
  std::vector<float> vo(4, -7.0f);
  int64_t count = -1;
  EXPECT_EQ(ops()->select_pairs(ops(), idx.data(), val.data(), 5, 0.5f, -1,
                                io.data(), vo.data(), 2, &count),
            PGS_ERR_OVERFLOW);
  EXPECT_EQ(count, 4);
  EXPECT_EQ(io, (std::vector<int32_t>{4, 9, -7, -7}));
  EXPECT_EQ(vo, (std::vector<float>{1.0f, -2.0f, -7.0f, -7.0f}));
  EXPECT_EQ(ops()->select_pairs(ops(), idx.data(), val.data(), 5, 1.0f, 1,
                                io.data(), vo.data(), 4, &count),
            PGS_OK);
  EXPECT_EQ(count, 3);  // -2, 3 above; the first of the two ties at 1
  EXPECT_EQ(io[0], 4);
  EXPECT_EQ(ops()->select_pairs(ops(), nullptr, val.data(), 5, 0.5f, -1,
                                io.data(), vo.data(), 4, &count),
            PGS_ERR_INVALID);
  EXPECT_EQ(ops()->select_pairs(ops(), nullptr, nullptr, 0, 0.5f, -1, nullptr,
                                nullptr, 0, &count),
            PGS_OK);
  EXPECT_EQ(count, 0);
}

// Without a count pointer the caller planned the count: exactly cap must be
// selected, and the host table says at once when not (ops.h).
TEST(OpsCpuCompact, PlannedCountIsChecked) {
  std::vector<float> x(100, 1.0f);
  x[10] = 0.0f;  // zeros are never selected: 99 entries above 0.5
  std::vector<int32_t> idx(100, -7);
  std::vector<float> val(100, -7.0f);
  EXPECT_EQ(ops()->compact(ops(), x.data(), 100, 0.5f, -1, 0, idx.data(),
                           val.data(), 99, nullptr),
            PGS_OK);
  EXPECT_EQ(idx[9], 9);
  EXPECT_EQ(idx[10], 11);
  EXPECT_EQ(idx[99], -7);
  EXPECT_EQ(ops()->compact(ops(), x.data(), 100, 0.5f, -1, 0, idx.data(),
                           val.data(), 98, nullptr),
            PGS_ERR_INVALID);
  EXPECT_EQ(ops()->compact(ops(), x.data(), 100, 0.5f, -1, 0, idx.data(),
                           val.data(), 100, nullptr),
            PGS_ERR_INVALID);
  EXPECT_EQ(ops()->compact(ops(), x.data(), 0, 0.5f, -1, 0, nullptr, nullptr, 0,
                           nullptr),
            PGS_OK);
  // Pairs: 3 above 0.5 of 5, the tie quota counted too.
  std::vector<int32_t> pi = {1, 4, 6, 9, 12};
  std::vector<float> pv = {0.25f, 1.0f, 1.0f, -2.0f, 0.5f};
  std::vector<int32_t> io(5, -7);
  std::vector<float> vo(5, -7.0f);
  EXPECT_EQ(ops()->select_pairs(ops(), pi.data(), pv.data(), 5, 0.5f, 0,
                                io.data(), vo.data(), 3, nullptr),
            PGS_OK);
  EXPECT_EQ(io, (std::vector<int32_t>{4, 6, 9, -7, -7}));
  EXPECT_EQ(ops()->select_pairs(ops(), pi.data(), pv.data(), 5, 0.5f, -1,
                                io.data(), vo.data(), 3, nullptr),
            PGS_ERR_INVALID);  // the tie at 12 makes 4
  EXPECT_EQ(ops()->check(ops()), PGS_OK);
}

}  // namespace
