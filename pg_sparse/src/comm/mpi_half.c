/* fp16 and bf16 reductions as MPI user operations (see mpi_half.h). */
#include "comm/mpi_half.h"

#include <pg_sparse/status.h>

#include "util/half.h"

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
