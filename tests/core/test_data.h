// Deterministic test data and float bit helpers, shared by the host and the
// CUDA ops tests (both compare against the same inputs).
#ifndef PGS_TESTS_TEST_DATA_H
#define PGS_TESTS_TEST_DATA_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <vector>

namespace pgs_test_data {

inline uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

inline float from_bits(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

inline std::vector<float> normal(size_t n, uint64_t seed, float sd = 1.0f) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto &x : v) x = d(gen);
  return v;
}

// Values from a small set (many ties), a share of them zero, random signs.
inline std::vector<float> tied(size_t n, uint64_t seed, int levels,
                               double zero_p) {
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

// Sorted strictly ascending random subset of [0, range) of about n entries.
inline std::vector<int32_t> sorted_subset(size_t n, int32_t range,
                                          uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int32_t> d(0, range - 1);
  std::set<int32_t> s;
  for (size_t i = 0; i < n; ++i) s.insert(d(gen));
  return std::vector<int32_t>(s.begin(), s.end());
}

// The k values worth checking for a size: ends, middle, @p random_ks random
// ranks.
inline std::vector<size_t> ks_for(size_t n, uint64_t seed, int random_ks) {
  std::vector<size_t> ks = {1, n, (n + 1) / 2, n / 100 + 1};
  if (n > 1) ks.push_back(2);
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<size_t> d(1, n);
  for (int i = 0; i < random_ks; ++i) ks.push_back(d(gen));
  return ks;
}

// x rounded to nearest even with @p bits significant bits, exponents below
// @p emin as subnormals, saturating at +-@p max: an oracle for the wire
// codec written with ldexp and nearbyint, independent of its bit tricks.
inline float wire_round(float x, int bits, int emin, float max) {
  if (std::isnan(x) || x == 0.0f) return x;
  int e = std::ilogb(x);
  if (e < emin) e = emin;
  double q = std::ldexp(std::nearbyint(std::ldexp(double{x}, bits - 1 - e)),
                        e - (bits - 1));
  q = std::clamp(q, -double{max}, double{max});
  return static_cast<float>(q);
}
inline float round_f16(float x) {
  return wire_round(x, 11, -14, 65504.0f);
}
inline float round_bf16(float x) {
  return wire_round(x, 8, -126, 3.38953139e38f);
}

}  // namespace pgs_test_data

#endif  // PGS_TESTS_TEST_DATA_H
