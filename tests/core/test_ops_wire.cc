// Tests of the host wire codec (to_wire, from_wire) against an independent
// rounding oracle, and of zero_common's subtracting form.
#include <gtest/gtest.h>

#include "ops_test_util.h"

namespace {
using namespace ops_test;
using pgs_test_data::round_bf16;
using pgs_test_data::round_f16;

// Values at every scale a gradient has, plus the edges of both 16-bit types:
// subnormals, the largest finite values and beyond, signed zeros, ties.
std::vector<float> wire_inputs() {
  std::vector<float> x;
  for (float sd : {1e-9f, 1e-6f, 1e-3f, 1.0f, 1e3f, 6e4f, 1e30f})
    for (float v : normal(400, 900 + static_cast<uint64_t>(sd * 7), sd))
      x.push_back(v);
  const float edges[] = {
      0.0f,           -0.0f,          6e-8f,          -3e-8f,
      6.1e-5f,        65504.0f,       65519.0f,       65520.0f,
      -1e6f,          3.3895e38f,     FLT_MAX,        -FLT_MAX,
      1.0f + 0x1p-8f, 1.0f + 0x1p-9f, 1.0f + 0x3p-9f, 1.0f + 0x1p-11f,
      1e-40f,         -1e-45f};
  x.insert(x.end(), std::begin(edges), std::end(edges));
  return x;
}

void expect_codec(pgs_dtype_t dt, float (*oracle)(float)) {
  const std::vector<float> x = wire_inputs();
  const size_t m = x.size();
  std::vector<uint16_t> wire(m);
  std::vector<float> err(m, -1.0f), back(m, -1.0f);
  ASSERT_EQ(ops()->to_wire(ops(), x.data(), m, dt, wire.data(), err.data()),
            PGS_OK);
  ASSERT_EQ(ops()->from_wire(ops(), wire.data(), m, dt, back.data()), PGS_OK);
  int bad = 0;
  for (size_t j = 0; j < m; ++j) {
    const float q = oracle(x[j]);
    if (bits_of(back[j]) != bits_of(q)) ++bad;
    // Nothing is lost: value = what travels + what stays, exactly.
    if (double{back[j]} + double{err[j]} != double{x[j]}) ++bad;
  }
  EXPECT_EQ(bad, 0);
  // err may alias the input (the dense step rounds in place).
  std::vector<float> y = x;
  ASSERT_EQ(ops()->to_wire(ops(), y.data(), m, dt, wire.data(), y.data()),
            PGS_OK);
  EXPECT_TRUE(same_bits(y, err));
}

TEST(OpsCpuWire, Float16RoundsToNearestEvenAndSaturates) {
  expect_codec(PGS_FLOAT16, round_f16);
}

TEST(OpsCpuWire, BFloat16RoundsToNearestEvenAndSaturates) {
  expect_codec(PGS_BFLOAT16, round_bf16);
}

TEST(OpsCpuWire, Float32IsACopyWithNoError) {
  const std::vector<float> x = wire_inputs();
  std::vector<float> wire(x.size()), err(x.size(), 1.0f), back(x.size());
  ASSERT_EQ(ops()->to_wire(ops(), x.data(), x.size(), PGS_FLOAT32, wire.data(),
                           err.data()),
            PGS_OK);
  ASSERT_EQ(
      ops()->from_wire(ops(), wire.data(), x.size(), PGS_FLOAT32, back.data()),
      PGS_OK);
  EXPECT_TRUE(same_bits(back, x));
  EXPECT_TRUE(same_bits(err, std::vector<float>(x.size(), 0.0f)));
}

TEST(OpsCpuWire, NanTravelsAndBadArgumentsAreRefused) {
  const float x[2] = {NAN, -NAN};
  uint16_t wire[2];
  float back[2];
  for (pgs_dtype_t dt : {PGS_FLOAT16, PGS_BFLOAT16}) {
    ASSERT_EQ(ops()->to_wire(ops(), x, 2, dt, wire, nullptr), PGS_OK);
    ASSERT_EQ(ops()->from_wire(ops(), wire, 2, dt, back), PGS_OK);
    EXPECT_TRUE(std::isnan(back[0]) && std::isnan(back[1]));
  }
  EXPECT_EQ(ops()->to_wire(ops(), x, 2, PGS_INT64, wire, nullptr),
            PGS_ERR_UNSUPPORTED);
  EXPECT_EQ(ops()->from_wire(ops(), wire, 2, PGS_FLOAT64, back),
            PGS_ERR_UNSUPPORTED);
  EXPECT_EQ(ops()->to_wire(ops(), nullptr, 2, PGS_FLOAT16, wire, nullptr),
            PGS_ERR_INVALID);
  EXPECT_EQ(ops()->from_wire(ops(), wire, 2, PGS_FLOAT16, nullptr),
            PGS_ERR_INVALID);
  EXPECT_EQ(ops()->to_wire(ops(), nullptr, 0, PGS_FLOAT16, nullptr, nullptr),
            PGS_OK);
}

// With values, zero_common subtracts them where a meets b: the sender's
// residual keeps exactly what rounding left out.
TEST(OpsCpuZeroCommon, WithValuesSubtractsWhereCommon) {
  const size_t n = 5000;
  const std::vector<float> x0 = normal(n, 950);
  const std::vector<int32_t> a = sorted_subset(700, 4000, 951);
  const std::vector<int32_t> b =
      sorted_subset(1500, static_cast<int32_t>(n), 952);
  const std::set<int32_t> bs(b.begin(), b.end());
  for (int32_t offset : {0, 1000}) {
    std::vector<float> sent(a.size());
    for (size_t i = 0; i < a.size(); ++i)
      sent[i] = round_bf16(x0[a[i] + offset]);
    std::vector<float> want = x0, x = x0;
    size_t hits = 0;
    for (size_t i = 0; i < a.size(); ++i)
      if (bs.count(a[i] + offset)) {
        want[a[i] + offset] = x0[a[i] + offset] - sent[i];
        ++hits;
      }
    ASSERT_GT(hits, 0u);
    ASSERT_EQ(ops()->zero_common(ops(), x.data(), n, a.data(), sent.data(),
                                 a.size(), offset, b.data(), b.size()),
              PGS_OK);
    EXPECT_TRUE(same_bits(x, want)) << "offset " << offset;
  }
}

}  // namespace
