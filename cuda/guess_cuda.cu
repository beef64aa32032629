// accumulate_guess_select: the add with its statistics, a threshold
// estimator's first guess from them (pgs_guess_eval, in one thread on the
// device) and the compaction at that guess, queued together with one wait
// at the end. Where the host computed the guess, the device sat idle for
// the statistics' read-back, the host's fit and the next launches (on an
// H200, about 0.2-0.3 reads of a 100M bucket).
//
// Built with --fmad=false (cuda/CMakeLists.txt): the guess is the host's
// expression, and a fused multiply-add would round differently from it.
#include "compact_mask_cuda.cuh"
#include "ops_cuda_internal.cuh"

namespace pgs_cuda {

namespace {

// What the one wait reads back.
struct GuessOut {
  double stats[kFlatStats];
  ulonglong2 total;
  float thr;
};

__global__ void guess_kernel(const double *__restrict__ stats,
                             pgs_guess_rule_t rule, float *thr) {
  *thr = pgs_guess_eval(&rule, stats);  // one thread
}

}  // namespace

int accumulate_guess_select(const pgs_ops_t *ops, float *r, const float *g,
                            size_t n, const pgs_guess_rule_t *rule,
                            int32_t *idx, float *val, size_t cap,
                            int64_t *nonfinite_host, double out[7],
                            float *thr_host, int64_t *count_host) {
  if (rule == nullptr || out == nullptr || nonfinite_host == nullptr ||
      thr_host == nullptr || count_host == nullptr)
    return PGS_ERR_INVALID;
  if ((r == nullptr || g == nullptr) && n > 0) return PGS_ERR_INVALID;
  if (idx == nullptr && cap > 0) return PGS_ERR_INVALID;  // val null: packed
  if (n > static_cast<size_t>(INT32_MAX) + 1) return PGS_ERR_UNSUPPORTED;
  *nonfinite_host = 0;
  *count_host = 0;
  if (n == 0) {
    for (int j = 0; j < 7; ++j) out[j] = 0.0;
    *thr_host = pgs_guess_eval(rule, out);
    return PGS_OK;
  }
  PGS_ENTER(ops, c);
  // small: what is read back, then accumulate_stats' scratch.
  const size_t head = (sizeof(GuessOut) + 255) & ~static_cast<size_t>(255);
  PGS_RETURN_IF(ensure_device(&c->small, head + add_stats_scratch_bytes(c, n)));
  auto *go = static_cast<GuessOut *>(c->small.ptr);
  // The add's largest |r| of each group of 32, so the compaction reads r
  // only where a group can hold a pick (at density 1% about a quarter of
  // the groups).
  float *largest = nullptr;
  if (add_group_max_ok(r, g) && n >= 32) {
    PGS_RETURN_IF(ensure_device(&c->group_max, n / 32 * sizeof(float)));
    largest = static_cast<float *>(c->group_max.ptr);
  }
  PGS_RETURN_IF(accumulate_stats_queue(c, r, g, n,
                                       static_cast<char *>(c->small.ptr) + head,
                                       go->stats, largest));
  guess_kernel<<<1, 1, 0, c->stream>>>(go->stats, *rule, &go->thr);
  PGS_LAUNCHED();
  const ulonglong2 *total = nullptr;
  PGS_RETURN_IF(compact_by_mask(
      c, r, n, MaskRule{}, &go->thr, 0, idx, val, cap, CountCheck{}, &go->total,
      &total, GroupMax{largest, largest != nullptr ? n / 32 : 0}));
  void *host = nullptr;
  PGS_RETURN_IF(read_back(c, go, sizeof(GuessOut), &host));
  const GuessOut h = *static_cast<const GuessOut *>(host);
  for (int j = 0; j < 7; ++j) out[j] = h.stats[j];
  *nonfinite_host = static_cast<int64_t>(h.stats[7]);
  *thr_host = h.thr;
  *count_host = static_cast<int64_t>(h.total.x);
  return PGS_OK;
}

}  // namespace pgs_cuda
