/* libFuzzer target: what peers send, as one rank of a bucket sees it.
 *
 * The fuzz input plays every other rank: the first bytes choose the
 * algorithm, the wire type, P, this rank's place, n, the density and the
 * number of calls; everything after is what the peers "send", consumed in
 * order by a fake transport (counts of the control plane, blocks of pairs,
 * regions). Whatever arrives, a call must return a status and never read or
 * write outside its buffers (AddressSanitizer, UBSan) nor allocate beyond
 * what n bounds (-malloc_limit_mb). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <pg_sparse/pg_sparse.h>

#include "scripted_peers.h"

enum { HEADER = 8 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < HEADER) return 0;
  static const pgs_dtype_t wires[] = {PGS_FLOAT32, PGS_FLOAT16, PGS_BFLOAT16};
  static const double densities[] = {0.01, 0.05, 0.3, 1.0};
  pgs_scripted_peers_t p = {data, size, HEADER, 0, 2 + data[2] % 4};
  p.rank = data[3] % p.ranks;
  const size_t n = 16 + ((size_t)data[4] << 4 | data[5] % 16);
  pgs_config_t cfg = PGS_CONFIG_INIT;
  cfg.algo = (pgs_algo_id_t)(data[0] % PGS_ALGO_COUNT);
  cfg.wire_dtype = wires[data[1] % 3];
  cfg.density = densities[data[6] % 4];
  cfg.warmup_steps = data[6] >> 7;
  cfg.tau = 1 + data[7] % 3;
  cfg.tau_prime = 1 + (data[7] >> 2) % 3;
  const int calls = 1 + (data[7] >> 4) % 3;

  pgs_comm_t *comm = NULL;
  pgs_bucket_t *b = NULL;
  float *grad = malloc(n * sizeof *grad), *out = malloc(n * sizeof *out);
  if (grad == NULL || out == NULL || pgs_scripted_peers_comm(&p, &comm) ||
      pgs_bucket_create(&cfg, comm, pgs_ops_cpu(), n, &b))
    goto done;
  for (int c = 0; c < calls; ++c) {
    for (size_t i = 0; i < n; ++i)
      grad[i] =
          sinf((float)(i * 7 + (size_t)c * 13 + data[4])) * (float)(1 + i % 5);
    pgs_bucket_allreduce(b, grad, out); /* any status; never a fault */
  }
done:
  pgs_bucket_destroy(b);
  pgs_comm_destroy(comm);
  free(grad);
  free(out);
  return 0;
}
