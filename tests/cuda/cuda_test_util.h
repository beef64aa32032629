// Shared helpers of the CUDA ops tests: the device table, device buffers,
// deterministic data, and bitwise comparisons against the host table.
//
// Every test compares the CUDA op with pgs_ops_cpu() on the same data. All
// tests skip (GTEST_SKIP) when no CUDA device is usable, so the binary runs
// green on machines without a GPU.
#ifndef PGS_TESTS_CUDA_TEST_UTIL_H
#define PGS_TESTS_CUDA_TEST_UTIL_H

#include <gtest/gtest.h>

#include <pg_sparse/ops.h>
#include <pg_sparse/ops_cuda.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test_data.h"

namespace cuda_test {

using pgs_test_data::bits_of;
using pgs_test_data::from_bits;
using pgs_test_data::normal;
using pgs_test_data::sorted_subset;
using pgs_test_data::tied;

inline const pgs_ops_t *cpu() {
  return pgs_ops_cpu();
}

// The device table under test, created once on device 0 (default stream).
inline const pgs_ops_t *gpu() {
  static pgs_ops_t *ops = [] {
    pgs_ops_t *o = nullptr;
    if (!pgs_cuda_available()) return o;
    if (pgs_ops_cuda_create(nullptr, 0, &o) != PGS_OK) o = nullptr;
    return o;
  }();
  return ops;
}

// Base fixture: skips without a device.
class CudaTest : public testing::Test {
 protected:
  void SetUp() override {
    if (!pgs_cuda_available()) GTEST_SKIP() << "no CUDA device";
    ASSERT_NE(gpu(), nullptr) << "pgs_ops_cuda_create failed";
  }
};

// ---- device buffers ---------------------------------------------------------

template <class T>
class Dev {
 public:
  explicit Dev(size_t n, const pgs_ops_t *ops = gpu()) : ops_(ops), n_(n) {
    EXPECT_EQ(ops_->alloc(ops_, &p_, n * sizeof(T)), PGS_OK);
  }
  explicit Dev(const std::vector<T> &h, const pgs_ops_t *ops = gpu())
      : Dev(h.size(), ops) {
    put(h);
  }
  ~Dev() { ops_->free(ops_, p_); }
  Dev(const Dev &) = delete;
  Dev &operator=(const Dev &) = delete;

  T *get() const { return static_cast<T *>(p_); }
  size_t size() const { return n_; }
  void put(const std::vector<T> &h, size_t at = 0) {
    ASSERT_LE(at + h.size(), n_);
    EXPECT_EQ(ops_->copy(ops_, get() + at, h.data(), h.size() * sizeof(T),
                         PGS_COPY_FROM_HOST),
              PGS_OK);
  }
  std::vector<T> host(size_t at = 0, size_t count = SIZE_MAX) const {
    if (count == SIZE_MAX) count = n_ - at;
    std::vector<T> h(count);
    EXPECT_EQ(ops_->copy(ops_, h.data(), get() + at, count * sizeof(T),
                         PGS_COPY_TO_HOST),
              PGS_OK);
    return h;
  }

 private:
  const pgs_ops_t *ops_;
  size_t n_;
  void *p_ = nullptr;
};

// ---- data -------------------------------------------------------------------

// Denormals, zeros (both signs) and a few normals.
inline std::vector<float> denormals(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<uint32_t> low(0, 0x007fffffu);
  std::uniform_int_distribution<int> kind(0, 9);
  std::vector<float> v(n);
  for (auto &x : v) {
    int k = kind(gen);
    uint32_t b = k == 0 ? 0u : k == 1 ? bits_of(1e-30f) : low(gen) % 4096u;
    if (gen() & 1) b |= 0x80000000u;
    x = from_bits(b);
  }
  return v;
}

// All values in [1, 2): one top-byte radix bin, spread over the lower bits.
inline std::vector<float> one_binade(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> d(1.0f, 2.0f);
  std::vector<float> v(n);
  for (auto &x : v) x = (gen() & 1) ? d(gen) : -d(gen);
  return v;
}

// Sprinkles NaN (several payloads) and +-Inf into v.
inline void add_nonfinite(std::vector<float> &v, uint64_t seed, size_t count) {
  if (v.empty()) return;
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<size_t> pos(0, v.size() - 1);
  const float inf = std::numeric_limits<float>::infinity();
  const float vals[] = {std::numeric_limits<float>::quiet_NaN(), inf, -inf,
                        from_bits(0x7f800001u), from_bits(0xffc00123u)};
  for (size_t i = 0; i < count; ++i) v[pos(gen)] = vals[i % 5];
}

// Largest size of the size sweeps: PGS_CUDA_TEST_MAX_N in the environment
// lowers it (compute-sanitizer runs many times slower), default 2^24.
inline size_t max_n() {
  static const size_t m = [] {
    const char *e = std::getenv("PGS_CUDA_TEST_MAX_N");
    return e != nullptr ? static_cast<size_t>(std::strtoull(e, nullptr, 10))
                        : size_t{1} << 24;
  }();
  return m;
}

// The sizes every op is checked at (the 2^27 case lives in the Huge tests).
inline std::vector<size_t> sizes() {
  std::vector<size_t> out;
  for (size_t n : {size_t{1}, size_t{2}, size_t{7}, size_t{1000}, size_t{65537},
                   size_t{1} << 20, size_t{1} << 24})
    if (n <= max_n() || n <= 7) out.push_back(n);
  return out;
}

inline std::vector<size_t> ks_for(size_t n, uint64_t seed) {
  return pgs_test_data::ks_for(n, seed, 2);
}

// ---- comparisons ----------------------------------------------------------

// Bitwise equality; with nan_equal, any two NaNs also count as equal
// (arithmetic on NaN gives payloads that differ between host and device).
template <class T>
inline testing::AssertionResult same(const std::vector<T> &got,
                                     const std::vector<T> &want,
                                     bool nan_equal = false) {
  if (got.size() != want.size())
    return testing::AssertionFailure()
           << "size " << got.size() << " != " << want.size();
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    bool eq = std::memcmp(&got[i], &want[i], sizeof(T)) == 0;
    if constexpr (std::is_floating_point_v<T>) {
      if (!eq && nan_equal && std::isnan(got[i]) && std::isnan(want[i]))
        eq = true;
    }
    if (!eq && bad++ == 0) first = i;
  }
  if (bad == 0) return testing::AssertionSuccess();
  std::ostringstream os;
  os << bad << " of " << got.size() << " differ; first at " << first << ": got "
     << +got[first] << " want " << +want[first];
  if constexpr (std::is_same_v<T, float>)
    os << " (bits 0x" << std::hex << bits_of(got[first]) << " vs 0x"
       << bits_of(want[first]) << ")";
  return testing::AssertionFailure() << os.str();
}

}  // namespace cuda_test

#endif  // PGS_TESTS_CUDA_TEST_UTIL_H
