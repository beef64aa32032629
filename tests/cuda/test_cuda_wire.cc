// The CUDA wire codec against the host codec, bit for bit, and against the
// independent rounding oracle of the host tests.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>

#include "cuda_test_util.h"
#include "test_data.h"

namespace {
using namespace cuda_test;

class CudaWire : public CudaTest {};

std::vector<float> inputs(size_t n) {
  std::vector<float> x;
  for (float sd : {1e-9f, 1e-3f, 1.0f, 6e4f, 1e30f})
    for (float v : normal(n, 860 + static_cast<uint64_t>(sd * 3), sd))
      x.push_back(v);
  const float edges[] = {0.0f,     -0.0f,         6e-8f,    -3e-8f,
                         65504.0f, 65519.0f,      65520.0f, 3.3895e38f,
                         FLT_MAX,  -FLT_MAX,      1e-40f,   -1e-45f,
                         NAN,      1.0f + 0x1p-9f};
  x.insert(x.end(), std::begin(edges), std::end(edges));
  return x;
}

void check(pgs_dtype_t dt, size_t n) {
  const std::vector<float> x = inputs(n);
  const size_t m = x.size();
  std::vector<uint16_t> hw(m);
  std::vector<float> herr(m), hback(m);
  ASSERT_EQ(cpu()->to_wire(cpu(), x.data(), m, dt, hw.data(), herr.data()),
            PGS_OK);
  ASSERT_EQ(cpu()->from_wire(cpu(), hw.data(), m, dt, hback.data()), PGS_OK);
  Dev<float> dx(x), derr(m), dback(m);
  Dev<uint16_t> dw(m);
  ASSERT_EQ(gpu()->to_wire(gpu(), dx.get(), m, dt, dw.get(), derr.get()),
            PGS_OK);
  ASSERT_EQ(gpu()->from_wire(gpu(), dw.get(), m, dt, dback.get()), PGS_OK);
  // NaN payloads may differ between host and device; everything else not.
  EXPECT_TRUE(same(dback.host(), hback, true));
  EXPECT_TRUE(same(derr.host(), herr, true));
  int bad = 0;
  const std::vector<float> back = dback.host();
  for (size_t j = 0; j < m; ++j) {
    if (std::isnan(x[j])) {
      bad += !std::isnan(back[j]);
      continue;
    }
    const float q = dt == PGS_FLOAT16 ? pgs_test_data::round_f16(x[j])
                                      : pgs_test_data::round_bf16(x[j]);
    bad += pgs_test_data::bits_of(back[j]) != pgs_test_data::bits_of(q);
  }
  EXPECT_EQ(bad, 0);
  // In place: err aliasing the input, as the dense step uses it.
  ASSERT_EQ(gpu()->to_wire(gpu(), dx.get(), m, dt, dw.get(), dx.get()), PGS_OK);
  EXPECT_TRUE(same(dx.host(), herr, true));
}

TEST_F(CudaWire, Float16MatchesHost) {
  check(PGS_FLOAT16, 1000);
  check(PGS_FLOAT16, 300000);
}

TEST_F(CudaWire, BFloat16MatchesHost) {
  check(PGS_BFLOAT16, 1000);
  check(PGS_BFLOAT16, 300000);
}

TEST_F(CudaWire, Float32CopiesAndBadTypesAreRefused) {
  const std::vector<float> x = inputs(100);
  Dev<float> dx(x), dw(x.size()), derr(x.size());
  ASSERT_EQ(gpu()->to_wire(gpu(), dx.get(), x.size(), PGS_FLOAT32, dw.get(),
                           derr.get()),
            PGS_OK);
  EXPECT_TRUE(same(dw.host(), x));
  EXPECT_TRUE(same(derr.host(), std::vector<float>(x.size(), 0.0f)));
  EXPECT_EQ(gpu()->to_wire(gpu(), dx.get(), 4, PGS_INT64, dw.get(), nullptr),
            PGS_ERR_UNSUPPORTED);
  EXPECT_EQ(gpu()->from_wire(gpu(), dw.get(), 4, PGS_FLOAT64, dx.get()),
            PGS_ERR_UNSUPPORTED);
  EXPECT_EQ(gpu()->to_wire(gpu(), nullptr, 4, PGS_FLOAT16, dw.get(), nullptr),
            PGS_ERR_INVALID);
}

}  // namespace
