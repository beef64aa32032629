/* fp16 and bf16 reductions as MPI user operations (see mpi_half.h). */
#include "comm/mpi_half.h"

#include <string.h>

#include <pg_sparse/status.h>

static float f32_of_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint32_t bits_of_f32(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* bf16 is the top half of an fp32. Rounding to nearest even adds 0x7fff
 * plus the lowest kept bit; NaN keeps a quiet payload instead (the add could
 * carry it into Inf). */
static float bf16_to_f32(uint16_t h) {
  return f32_of_bits((uint32_t)h << 16);
}

static uint16_t f32_to_bf16(float f) {
  uint32_t u = bits_of_f32(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. */
static float f16_to_f32(uint16_t h) {
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

static uint16_t f32_to_f16(float f) {
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

typedef float (*widen_fn)(uint16_t);
typedef uint16_t (*narrow_fn)(float);

/* inout[i] = in[i] (op) inout[i], each pair in fp32 and rounded once. */
static void combine(const uint16_t *in, uint16_t *inout, int len, widen_fn w,
                    narrow_fn nr, int op) {
  for (int i = 0; i < len; ++i) {
    float a = w(in[i]), b = w(inout[i]), r;
    if (op == PGS_SUM)
      r = a + b;
    else if (op == PGS_MAX)
      r = (a > b || a != a) ? a : b; /* NaN wins, as in torch */
    else
      r = (a < b || a != a) ? a : b;
    inout[i] = nr(r);
  }
}

#define PGS_HALF_OP(name, w, nr, op)                                   \
  static void name(void *in, void *inout, int *len, MPI_Datatype *t) { \
    (void)t;                                                           \
    combine(in, inout, *len, w, nr, op);                               \
  }

PGS_HALF_OP(f16_sum, f16_to_f32, f32_to_f16, PGS_SUM)
PGS_HALF_OP(f16_max, f16_to_f32, f32_to_f16, PGS_MAX)
PGS_HALF_OP(f16_min, f16_to_f32, f32_to_f16, PGS_MIN)
PGS_HALF_OP(bf16_sum, bf16_to_f32, f32_to_bf16, PGS_SUM)
PGS_HALF_OP(bf16_max, bf16_to_f32, f32_to_bf16, PGS_MAX)
PGS_HALF_OP(bf16_min, bf16_to_f32, f32_to_bf16, PGS_MIN)

int pgs_mpi_half_ops_create(pgs_mpi_half_ops_t *h) {
  MPI_User_function *fns[2][3] = {{f16_sum, f16_max, f16_min},
                                  {bf16_sum, bf16_max, bf16_min}};
  h->made = 0;
  for (int i = 0; i < 6; ++i) {
    /* Commutative: MPI may combine in any order, as NCCL does. */
    if (MPI_Op_create(fns[i / 3][i % 3], 1, &h->ops[i / 3][i % 3]) !=
        MPI_SUCCESS) {
      pgs_mpi_half_ops_free(h);
      return PGS_ERR_COMM;
    }
    h->made = i + 1;
  }
  return PGS_OK;
}

void pgs_mpi_half_ops_free(pgs_mpi_half_ops_t *h) {
  for (int i = 0; i < h->made; ++i) (void)MPI_Op_free(&h->ops[i / 3][i % 3]);
  h->made = 0;
}

int pgs_mpi_half_lookup(const pgs_mpi_half_ops_t *h, pgs_dtype_t dtype,
                        pgs_redop_t op, MPI_Op *out) {
  int t = dtype == PGS_FLOAT16 ? 0 : dtype == PGS_BFLOAT16 ? 1 : -1;
  if (t < 0 || h->made != 6 || (int)op < 0 || op > PGS_MIN)
    return PGS_ERR_UNSUPPORTED;
  *out = h->ops[t][op];
  return PGS_OK;
}
