// Tests of the host pgs_ops table (pgs_ops_cpu) against independent oracles:
// std::nth_element for the radix select, brute-force loops for histograms,
// counts and compaction, std::set / std::map for the merge kernels.
//
// These tests need no communication: every rank runs them on its own data
// and they never call MPI.
#include <gtest/gtest.h>

#include <pg_sparse/ops.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace {

const pgs_ops_t *ops() {
  return pgs_ops_cpu();
}

uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

float from_bits(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

uint32_t abs_bits(float x) {
  return bits_of(x) & 0x7fffffffu;
}

// Bitwise equality of two float vectors (NaN-safe, -0 != +0).
bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

std::vector<float> normal(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto &x : v) x = d(gen);
  return v;
}

// Values from a small set (many ties), a share of them zero, random signs.
std::vector<float> tied(size_t n, uint64_t seed, int levels, double zero_p) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> lvl(1, levels);
  std::bernoulli_distribution zero(zero_p), neg(0.5);
  std::vector<float> v(n);
  for (auto &x : v) {
    x = zero(gen) ? 0.0f : 0.25f * static_cast<float>(lvl(gen));
    if (neg(gen)) x = -x;
  }
  return v;
}

struct Kth {
  float thr;
  int64_t n_gt;
};

// Oracle: k-th largest |x| by std::nth_element on a copy.
Kth kth_oracle(const std::vector<float> &x, size_t k) {
  std::vector<float> a(x.size());
  for (size_t i = 0; i < x.size(); ++i) a[i] = std::fabs(x[i]);
  std::nth_element(a.begin(), a.begin() + static_cast<ptrdiff_t>(k - 1),
                   a.end(), std::greater<float>());
  Kth r{a[k - 1], 0};
  for (float v : x) r.n_gt += std::fabs(v) > r.thr;
  return r;
}

// Runs kth_abs and compares with the oracle bit for bit.
void expect_kth(const std::vector<float> &x, size_t k) {
  float thr = -1.0f;
  int64_t n_gt = -1;
  ASSERT_EQ(ops()->kth_abs(ops(), x.data(), x.size(), k, &thr, &n_gt), PGS_OK)
      << "n=" << x.size() << " k=" << k;
  Kth want = kth_oracle(x, k);
  EXPECT_EQ(bits_of(thr), bits_of(want.thr))
      << "n=" << x.size() << " k=" << k << " got " << thr << " want "
      << want.thr;
  EXPECT_EQ(n_gt, want.n_gt) << "n=" << x.size() << " k=" << k;
}

// The k values worth checking for a size: ends, middle, a few random ranks.
std::vector<size_t> ks_for(size_t n, uint64_t seed) {
  std::vector<size_t> ks = {1, n, (n + 1) / 2, n / 100 + 1};
  if (n > 1) ks.push_back(2);
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<size_t> d(1, n);
  for (int i = 0; i < 3; ++i) ks.push_back(d(gen));
  return ks;
}

struct Pairs {
  std::vector<int32_t> idx;
  std::vector<float> val;
};

// Oracle of compact / select_pairs on a list of (index, value).
Pairs select_oracle(const std::vector<int32_t> &idx,
                    const std::vector<float> &val, float thr,
                    int64_t eq_quota) {
  Pairs out;
  int64_t ties = 0;
  for (size_t j = 0; j < val.size(); ++j) {
    float a = std::fabs(val[j]);
    if (val[j] == 0.0f) continue;
    bool take = a > thr;
    if (a == thr && (eq_quota < 0 || ties < eq_quota)) {
      take = true;
      ++ties;
    }
    if (take) {
      out.idx.push_back(idx[j]);
      out.val.push_back(val[j]);
    }
  }
  return out;
}

std::vector<int32_t> iota_idx(size_t n, int32_t offset) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(i) + offset;
  return v;
}

// Runs compact with enough capacity and compares with the oracle.
void expect_compact(const std::vector<float> &x, float thr, int64_t quota,
                    int32_t offset) {
  size_t cap = x.size() + 1;
  std::vector<int32_t> idx(cap, -1);
  std::vector<float> val(cap, -1.0f);
  int64_t count = -1;
  ASSERT_EQ(ops()->compact(ops(), x.data(), x.size(), thr, quota, offset,
                           idx.data(), val.data(), cap, &count),
            PGS_OK);
  Pairs want = select_oracle(iota_idx(x.size(), offset), x, thr, quota);
  ASSERT_EQ(count, static_cast<int64_t>(want.idx.size()))
      << "thr=" << thr << " quota=" << quota;
  idx.resize(want.idx.size());
  val.resize(want.val.size());
  EXPECT_EQ(idx, want.idx);
  EXPECT_TRUE(same_bits(val, want.val));
}

// Sorted strictly ascending random subset of [0, range) of about n entries.
std::vector<int32_t> sorted_subset(size_t n, int32_t range, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int32_t> d(0, range - 1);
  std::set<int32_t> s;
  for (size_t i = 0; i < n; ++i) s.insert(d(gen));
  return std::vector<int32_t>(s.begin(), s.end());
}

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
              o->merge_pairs);
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
  EXPECT_EQ(ops()->compact(ops(), x.data(), 100, 0.0f, -1, 0, idx.data(),
                           val.data(), 100, nullptr),
            PGS_ERR_INVALID);
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
  EXPECT_EQ(ops()->select_pairs(ops(), idx.data(), val.data(), 5, 0.5f, -1,
                                io.data(), vo.data(), 4, nullptr),
            PGS_ERR_INVALID);
  EXPECT_EQ(ops()->select_pairs(ops(), nullptr, nullptr, 0, 0.5f, -1, nullptr,
                                nullptr, 0, &count),
            PGS_OK);
  EXPECT_EQ(count, 0);
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
    ASSERT_EQ(ops()->zero_common(ops(), x.data(), n, a.data(), a.size(), offset,
                                 b.data(), b.size()),
              PGS_OK);
    EXPECT_TRUE(same_bits(x, want)) << "offset " << offset;
  }
  // Disjoint and empty lists change nothing.
  std::vector<int32_t> ev = {0, 2, 4}, od = {1, 3, 5};
  std::vector<float> x = x0;
  ASSERT_EQ(
      ops()->zero_common(ops(), x.data(), n, ev.data(), 3, 0, od.data(), 3),
      PGS_OK);
  ASSERT_EQ(ops()->zero_common(ops(), x.data(), n, nullptr, 0, 0, od.data(), 3),
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
  EXPECT_EQ(ops()->zero_common(ops(), x.data(), n, a.data(), a.size(), 40,
                               b.data(), b.size()),
            PGS_ERR_INDEX);
  // a - 2 goes below 0.
  EXPECT_EQ(ops()->zero_common(ops(), x.data(), n, a.data(), a.size(), -2,
                               b.data(), b.size()),
            PGS_ERR_INDEX);
  // b out of range while the common entries (6, 11, 61) come first.
  std::vector<int32_t> bad_b = {6, 11, 61, 100};
  EXPECT_EQ(ops()->zero_common(ops(), x.data(), n, a.data(), a.size(), 1,
                               bad_b.data(), bad_b.size()),
            PGS_ERR_INDEX);
  // The offset must not wrap around int32.
  std::vector<int32_t> big = {INT32_MAX};
  EXPECT_EQ(ops()->zero_common(ops(), x.data(), n, big.data(), 1, INT32_MAX,
                               b.data(), b.size()),
            PGS_ERR_INDEX);
  // Nor wrap from very negative into range: INT32_MIN + 3 + INT32_MIN
  // would be 3 in 32-bit arithmetic.
  std::vector<int32_t> low = {INT32_MIN + 3}, three = {3};
  EXPECT_EQ(ops()->zero_common(ops(), x.data(), n, low.data(), 1, INT32_MIN,
                               three.data(), 1),
            PGS_ERR_INDEX);
  EXPECT_TRUE(same_bits(x, x0));
  // The same lists with offset 1 are valid and zero 6, 11, 61.
  ASSERT_EQ(ops()->zero_common(ops(), x.data(), n, a.data(), a.size(), 1,
                               b.data(), b.size()),
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
