/* The host wire codec: fp32 values to and from the 16-bit type they travel
 * in, with the rounding error handed back so that nothing is lost. */
#include "ops/cpu_ops_internal.h"
#include "util/half.h"

/* Largest finite values: saturating there keeps an out-of-range value's
 * excess in the error (and so in the residual) instead of sending Inf. */
#define PGS_F16_MAX 65504.0f
#define PGS_BF16_MAX 3.38953139e38f

static float saturate(float x, float max) {
  return x > max ? max : (x < -max ? -max : x); /* NaN passes through */
}

static int check_args(const float *x, size_t m, pgs_dtype_t dtype,
                      const void *wire) {
  if (m > 0 && (x == NULL || wire == NULL)) return PGS_ERR_INVALID;
  if (dtype != PGS_FLOAT32 && dtype != PGS_FLOAT16 && dtype != PGS_BFLOAT16)
    return PGS_ERR_UNSUPPORTED;
  return PGS_OK;
}

int pgs_cpu_to_wire(const pgs_ops_t *ops, const float *x, size_t m,
                    pgs_dtype_t dtype, void *wire, float *err) {
  (void)ops;
  int st = check_args(x, m, dtype, wire);
  if (st != PGS_OK) return st;
  if (dtype == PGS_FLOAT32) {
    memmove(wire, x, m * sizeof(float));
    if (err != NULL)
      for (size_t j = 0; j < m; ++j) err[j] = 0.0f;
    return PGS_OK;
  }
  uint16_t *w = wire;
  const int bf = dtype == PGS_BFLOAT16;
  for (size_t j = 0; j < m; ++j) {
    float v = x[j];
    float s = saturate(v, bf ? PGS_BF16_MAX : PGS_F16_MAX);
    uint16_t h = bf ? f32_to_bf16(s) : f32_to_f16(s);
    w[j] = h;
    if (err != NULL) err[j] = v - (bf ? bf16_to_f32(h) : f16_to_f32(h));
  }
  return PGS_OK;
}

int pgs_cpu_from_wire(const pgs_ops_t *ops, const void *wire, size_t m,
                      pgs_dtype_t dtype, float *x) {
  (void)ops;
  int st = check_args(x, m, dtype, wire);
  if (st != PGS_OK) return st;
  if (dtype == PGS_FLOAT32) {
    memmove(x, wire, m * sizeof(float));
    return PGS_OK;
  }
  const uint16_t *w = wire;
  if (dtype == PGS_BFLOAT16)
    for (size_t j = 0; j < m; ++j) x[j] = bf16_to_f32(w[j]);
  else
    for (size_t j = 0; j < m; ++j) x[j] = f16_to_f32(w[j]);
  return PGS_OK;
}
