// Shared helpers of the CPU ops tests.
#ifndef PGS_TESTS_OPS_TEST_UTIL_H
#define PGS_TESTS_OPS_TEST_UTIL_H

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

#include "test_data.h"

namespace ops_test {

using pgs_test_data::bits_of;
using pgs_test_data::from_bits;
using pgs_test_data::normal;
using pgs_test_data::sorted_subset;
using pgs_test_data::tied;

inline const pgs_ops_t *ops() {
  return pgs_ops_cpu();
}

inline uint32_t abs_bits(float x) {
  return bits_of(x) & 0x7fffffffu;
}

// Bitwise equality of two float vectors (NaN-safe, -0 != +0).
inline bool same_bits(const std::vector<float> &a,
                      const std::vector<float> &b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

struct Kth {
  float thr;
  int64_t n_gt;
};

// Oracle: k-th largest |x| by std::nth_element on a copy.
inline Kth kth_oracle(const std::vector<float> &x, size_t k) {
  std::vector<float> a(x.size());
  for (size_t i = 0; i < x.size(); ++i) a[i] = std::fabs(x[i]);
  std::nth_element(a.begin(), a.begin() + static_cast<ptrdiff_t>(k - 1),
                   a.end(), std::greater<float>());
  Kth r{a[k - 1], 0};
  for (float v : x) r.n_gt += std::fabs(v) > r.thr;
  return r;
}

// Runs kth_abs and compares with the oracle bit for bit.
inline void expect_kth(const std::vector<float> &x, size_t k) {
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

inline std::vector<size_t> ks_for(size_t n, uint64_t seed) {
  return pgs_test_data::ks_for(n, seed, 3);
}

struct Pairs {
  std::vector<int32_t> idx;
  std::vector<float> val;
};

// Oracle of compact / select_pairs on a list of (index, value).
inline Pairs select_oracle(const std::vector<int32_t> &idx,
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

inline std::vector<int32_t> iota_idx(size_t n, int32_t offset) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(i) + offset;
  return v;
}

// Runs compact with enough capacity and compares with the oracle.
inline void expect_compact(const std::vector<float> &x, float thr,
                           int64_t quota, int32_t offset) {
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

}  // namespace ops_test

#endif  // PGS_TESTS_OPS_TEST_UTIL_H
