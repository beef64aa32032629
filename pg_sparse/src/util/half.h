/* fp32 <-> fp16/bf16 conversions on the host, rounding to nearest even:
 * shared by the MPI 16-bit reductions and the CPU wire codec, so both round
 * exactly as the CUDA intrinsics do. */
#ifndef PGS_UTIL_HALF_H
#define PGS_UTIL_HALF_H

#include <stdint.h>
#include <string.h>

static inline float f32_of_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint32_t bits_of_f32(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* bf16 is the top half of an fp32. Rounding to nearest even adds 0x7fff
 * plus the lowest kept bit; NaN keeps a quiet payload instead (the add could
 * carry it into Inf). */
static inline float bf16_to_f32(uint16_t h) {
  return f32_of_bits((uint32_t)h << 16);
}

static inline uint16_t f32_to_bf16(float f) {
  uint32_t u = bits_of_f32(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. */
static inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1fu) /* Inf or NaN */
    return f32_of_bits(sign | 0x7f800000u | (man << 13));
  if (exp != 0) /* normal: rebias 15 -> 127 */
    return f32_of_bits(sign | ((exp + 112u) << 23) | (man << 13));
  /* zero or subnormal: man * 2^-24, exact in fp32 */
  float v = (float)man * f32_of_bits(0x33800000u); /* 2^-24 */
  return sign ? -v : v;
}

static inline uint16_t f32_to_f16(float f) {
  const uint32_t u = bits_of_f32(f);
  const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to Inf */
  if (a < 0x38800000u) {
    /* Below the smallest normal (2^-14): a multiple of 2^-24, rounded to
     * nearest even by the fp32 add of a large power of two. */
    float v = f32_of_bits(a) + 0.5f; /* 0.5 = 2^-1: ulp 2^-24 */
    return (uint16_t)(sign | (uint16_t)(bits_of_f32(v) - 0x3f000000u));
  }
  /* Normal: drop 13 mantissa bits, nearest even; a carry into the exponent
   * is the correct result (up to Inf, excluded above). */
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
  return (uint16_t)(sign | (uint16_t)((r - 0x38000000u) >> 13));
}

#endif /* PGS_UTIL_HALF_H */
