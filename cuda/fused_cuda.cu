// The fused pass of a call on the device (accumulate with the non-finite and
// threshold counts, and the list of |r| >= thr), its undo, and the
// pair-list helpers (shift_idx, locate). With a list to write
// (accumulate_kth, accumulate_select with room) the add is the compaction's
// load: one kernel reads the accumulator once, as the host table does, and
// one read back brings the counts. Without one (+Inf or no room: the add
// alone) a plain streaming kernel adds and counts.
#include <cub/block/block_reduce.cuh>

#include "ops_cuda_internal.cuh"

namespace pgs_cuda {
namespace {

using BlockReduceU64 = cub::BlockReduce<unsigned long long, kThreads>;

// r[i] += g[i] where the sum is finite; counts the rejected sums into
// out[0] and the entries with r != 0, |r| >= thr afterwards into out[1].
__global__ void __launch_bounds__(kThreads)
    fused_add_kernel(float *__restrict__ r, const float *__restrict__ g,
                     size_t n, float thr, unsigned long long *out) {
  __shared__ typename BlockReduceU64::TempStorage tmp;
  unsigned long long bad = 0, hit = 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    const float nr = add_or_keep(r[i], g[i], bad);
    r[i] = nr;
    hit += (nr != 0.0f) & (fabsf(nr) >= thr);
  }
  unsigned long long t = BlockReduceU64(tmp).Sum(bad);
  if (threadIdx.x == 0 && t != 0) atomicAdd(&out[0], t);
  __syncthreads();
  t = BlockReduceU64(tmp).Sum(hit);
  if (threadIdx.x == 0 && t != 0) atomicAdd(&out[1], t);
}

__global__ void __launch_bounds__(kThreads)
    unaccumulate_kernel(float *__restrict__ r, const float *__restrict__ g,
                        size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride)
    if (finite_bits(g[i])) r[i] -= g[i];
}

__global__ void __launch_bounds__(kThreads)
    shift_kernel(int32_t *idx, size_t m, int32_t delta) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       j < m; j += stride)
    idx[j] -= delta;
}

// pos[j] = number of idx entries below keys[j] (idx ascending); keys a
// device pointer or ParamBounds. Also clears zero[0..zero_words), the
// counters a kernel after it adds into (no memset of their own).
template <class Keys>
__global__ void locate_kernel(const int32_t *__restrict__ idx, size_t m,
                              Keys keys, int nkeys, long long *pos,
                              unsigned long long *zero, int zero_words) {
  const int j = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  for (int w = j; w < zero_words; w += gridDim.x * blockDim.x) zero[w] = 0;
  if (j >= nkeys) return;
  pos[j] = static_cast<long long>(lower_bound_i32(idx, m, keys[j]));
}

// accumulate_select with a list to write: the add is the compaction's load,
// one pass (the first cap entries listed), and one read back of the
// non-finite count beside the totals, laid out in c->small as
// [nonfinite, pad, total.x, total.y] (the totals 16-byte aligned).
int select_once(Ctx *c, float *r, const float *g, size_t n, float thr,
                int32_t *idx, float *val, size_t cap, int64_t *count_host,
                int64_t *nonfinite_host) {
  PGS_RETURN_IF(ensure_device(&c->small, 4 * sizeof(unsigned long long)));
  PGS_RETURN_IF(ensure_device(&c->work, compact_scratch_bytes(n)));
  auto *small = static_cast<unsigned long long *>(c->small.ptr);
  const ulonglong2 *total = nullptr;
  // The pass's reset kernel clears the non-finite count.
  PGS_RETURN_IF(accumulate_compact_queue(
      c, r, g, n, thr, idx, val, cap, c->work.ptr, small,
      reinterpret_cast<ulonglong2 *>(small + 2), &total, small, 1));
  void *host = nullptr;
  PGS_RETURN_IF(read_back(c, small, 4 * sizeof *small, &host));
  const auto *h = static_cast<const unsigned long long *>(host);
  *nonfinite_host = static_cast<int64_t>(h[0]);
  *count_host = static_cast<int64_t>(h[2] + h[3]);
  return PGS_OK;
}

}  // namespace

int accumulate_select(const pgs_ops_t *ops, float *r, const float *g, size_t n,
                      float thr, int32_t *idx, float *val, size_t cap,
                      int64_t *count_host, int64_t *nonfinite_host) {
  if (count_host == nullptr || nonfinite_host == nullptr)
    return PGS_ERR_INVALID;
  if ((r == nullptr || g == nullptr) && n > 0) return PGS_ERR_INVALID;
  if ((idx == nullptr || val == nullptr) && cap > 0) return PGS_ERR_INVALID;
  if (n > static_cast<size_t>(INT32_MAX) + 1u) return PGS_ERR_UNSUPPORTED;
  *count_host = 0;
  *nonfinite_host = 0;
  if (n == 0) return PGS_OK;
  PGS_ENTER(ops, c);
  if (cap > 0 && thr < INFINITY)
    return select_once(c, r, g, n, thr, idx, val, cap, count_host,
                       nonfinite_host);
  auto *counts = static_cast<unsigned long long *>(c->small.ptr);
  PGS_CU(cudaMemsetAsync(counts, 0, 2 * sizeof *counts, c->stream));
  fused_add_kernel<<<grid_for(c, fused_add_kernel, n, 4), kThreads, 0,
                     c->stream>>>(r, g, n, thr, counts);
  PGS_LAUNCHED();
  void *host = nullptr;
  PGS_RETURN_IF(read_back(c, counts, 2 * sizeof *counts, &host));
  const auto *h = static_cast<const unsigned long long *>(host);
  *nonfinite_host = static_cast<int64_t>(h[0]);
  *count_host = static_cast<int64_t>(h[1]);
  return PGS_OK;  // nothing to list (cap 0 or thr +Inf)
}

namespace {

// accumulate_kth, with @p reg (may be null) its regions at the k-th in the
// same read back: the counts and run starts lie right after *fo in c->small,
// cleared by the pass's reset kernel with the radix state.
int accumulate_kth_queue(const pgs_ops_t *ops, float *r, const float *g,
                         size_t n, float thr, int32_t *idx, float *val,
                         size_t cap, size_t k, pgs_fused_t *out,
                         pgs_regions_t *reg) {
  if (out == nullptr) return PGS_ERR_INVALID;
  *out = pgs_fused_t{0, 0, -1.0f, 0};
  // Without a list to read, the plain fused pass.
  if (k < 1 || cap < k || n == 0)
    return accumulate_select(ops, r, g, n, thr, idx, val, cap, &out->count,
                             &out->nonfinite);
  if (r == nullptr || g == nullptr || idx == nullptr || val == nullptr)
    return PGS_ERR_INVALID;
  if (n > static_cast<size_t>(INT32_MAX) + 1u) return PGS_ERR_UNSUPPORTED;
  PGS_ENTER(ops, c);
  const size_t nreg = reg != nullptr ? static_cast<size_t>(reg->nreg) : 0;
  const size_t reg_bytes = reg != nullptr ? (3 * nreg + 1) * 8 : 0;
  PGS_RETURN_IF(
      ensure_device(&c->small, kFusedOutOffset + sizeof(FusedOut) + reg_bytes));
  auto *fo = reinterpret_cast<FusedOut *>(static_cast<char *>(c->small.ptr) +
                                          kFusedOutOffset);
  auto *counts = reinterpret_cast<unsigned long long *>(fo + 1);
  auto *dpos = reinterpret_cast<long long *>(counts + 2 * nreg);
  // The compaction's tiles: grown before anything is queued, as growing
  // frees the old buffer.
  PGS_RETURN_IF(ensure_device(&c->work, compact_scratch_bytes(n)));
  // The pass's reset kernel clears the radix state at the start of c->small
  // (kth_list_queue), the two counters of *fo and the region counts: no
  // memset of its own.
  const ulonglong2 *total = nullptr;
  static_assert(kFusedOutOffset % 8 == 0 && sizeof(FusedOut) % 8 == 0,
                "whole words");
  const unsigned zero_words = static_cast<unsigned>(
      reg != nullptr ? (kFusedOutOffset + sizeof(FusedOut)) / 8 + 2 * nreg
                     : (kFusedOutOffset + 2 * sizeof(unsigned long long)) / 8);
  PGS_RETURN_IF(accumulate_compact_queue(
      c, r, g, n, thr, idx, val, cap, c->work.ptr, &fo->nonfinite, nullptr,
      &total, static_cast<unsigned long long *>(c->small.ptr), zero_words));
  ListRegions lr;
  if (reg != nullptr) {
    lr.idx = idx;
    for (size_t j = 0; j <= nreg; ++j) lr.keys.b[j] = reg->keys[j];
    lr.nreg = reg->nreg;
    lr.counts = counts;
    lr.pos = dpos;
  }
  PGS_RETURN_IF(kth_list_queue(c, val, cap, k, total, lr, fo));
  void *host = nullptr;
  PGS_RETURN_IF(read_back(c, fo, sizeof(FusedOut) + reg_bytes, &host));
  const auto *h = static_cast<const FusedOut *>(host);
  out->nonfinite = static_cast<int64_t>(h->nonfinite);
  out->count = static_cast<int64_t>(h->count);
  out->kth = h->kth;
  out->n_gt = static_cast<int64_t>(h->n_gt);
  if (reg == nullptr || out->kth < 0.0f) return PGS_OK;
  const auto *hc = reinterpret_cast<const unsigned long long *>(h + 1);
  for (size_t j = 0; j < nreg; ++j) {
    reg->n_gt[j] = static_cast<int64_t>(hc[2 * j]);
    reg->n_eq[j] = static_cast<int64_t>(hc[2 * j + 1]);
  }
  memcpy(reg->pos, hc + 2 * nreg, (nreg + 1) * 8);
  reg->counted = 1;
  return PGS_OK;
}

}  // namespace

int accumulate_kth(const pgs_ops_t *ops, float *r, const float *g, size_t n,
                   float thr, int32_t *idx, float *val, size_t cap, size_t k,
                   pgs_fused_t *out) {
  return accumulate_kth_queue(ops, r, g, n, thr, idx, val, cap, k, out,
                              nullptr);
}

int accumulate_kth_regions(const pgs_ops_t *ops, float *r, const float *g,
                           size_t n, float thr, int32_t *idx, float *val,
                           size_t cap, size_t k, pgs_fused_t *out,
                           pgs_regions_t *reg) {
  if (reg == nullptr) return PGS_ERR_INVALID;
  reg->counted = 0;
  if (reg->nreg < 1 || reg->keys == nullptr || reg->pos == nullptr ||
      reg->n_gt == nullptr || reg->n_eq == nullptr)
    return PGS_ERR_INVALID;
  for (int j = 0; j < reg->nreg; ++j)
    if (reg->keys[j + 1] < reg->keys[j]) return PGS_ERR_INVALID;
  // Keys in the kernel's parameters, or accumulate_kth alone (no counts).
  const bool fits = reg->nreg + 1 <= kParamBounds;
  return accumulate_kth_queue(ops, r, g, n, thr, idx, val, cap, k, out,
                              fits ? reg : nullptr);
}

int unaccumulate(const pgs_ops_t *ops, float *r, const float *g, size_t n) {
  if ((r == nullptr || g == nullptr) && n > 0) return PGS_ERR_INVALID;
  if (n == 0) return PGS_OK;
  PGS_ENTER(ops, c);
  unaccumulate_kernel<<<grid_for(c, unaccumulate_kernel, n, 4), kThreads, 0,
                        c->stream>>>(r, g, n);
  PGS_LAUNCHED();
  return PGS_OK;
}

int shift_idx(const pgs_ops_t *ops, int32_t *idx, size_t m, int32_t delta) {
  if (m == 0) return PGS_OK;
  if (idx == nullptr) return PGS_ERR_INVALID;
  if (delta == 0) return PGS_OK; /* the first region's picks: no launch */
  PGS_ENTER(ops, c);
  shift_kernel<<<grid_for(c, shift_kernel, m, 4), kThreads, 0, c->stream>>>(
      idx, m, delta);
  PGS_LAUNCHED();
  return PGS_OK;
}

int locate(const pgs_ops_t *ops, const int32_t *idx, size_t m,
           const int64_t *keys_host, int nkeys, int64_t *pos_host) {
  if (nkeys < 0 || (nkeys > 0 && (keys_host == nullptr || pos_host == nullptr)))
    return PGS_ERR_INVALID;
  if (idx == nullptr && m > 0) return PGS_ERR_INVALID;
  if (nkeys == 0) return PGS_OK;
  PGS_ENTER(ops, c);
  // small: nkeys positions, then nkeys keys (sent through the pinned buffer,
  // past the part read back).
  const size_t bytes = static_cast<size_t>(nkeys) * 8;
  const size_t key_off = (bytes + 255) & ~static_cast<size_t>(255);
  PGS_RETURN_IF(ensure_device(&c->small, key_off + bytes));
  PGS_RETURN_IF(ensure_pinned(&c->pinned, key_off + bytes));
  char *dsmall = static_cast<char *>(c->small.ptr);
  auto *dpos = reinterpret_cast<long long *>(dsmall);
  auto *dkeys = reinterpret_cast<long long *>(dsmall + key_off);
  char *pin = static_cast<char *>(c->pinned.ptr);
  memcpy(pin + key_off, keys_host, bytes);
  PGS_CU(cudaMemcpyAsync(dkeys, pin + key_off, bytes, cudaMemcpyHostToDevice,
                         c->stream));
  locate_kernel<<<(nkeys + kThreads - 1) / kThreads, kThreads, 0, c->stream>>>(
      idx, m, static_cast<const long long *>(dkeys), nkeys, dpos, nullptr, 0);
  PGS_LAUNCHED();
  void *host = nullptr;
  PGS_RETURN_IF(read_back(c, dpos, bytes, &host));
  memcpy(pos_host, host, bytes);
  return PGS_OK;
}

int count_pair_regions(const pgs_ops_t *ops, const int32_t *idx,
                       const float *val, size_t m, const int64_t *keys_host,
                       int nreg, float thr, int64_t *pos_host,
                       int64_t *n_gt_host, int64_t *n_eq_host) {
  if (nreg < 0 || keys_host == nullptr || pos_host == nullptr)
    return PGS_ERR_INVALID;
  if (nreg > 0 && (n_gt_host == nullptr || n_eq_host == nullptr))
    return PGS_ERR_INVALID;
  if ((idx == nullptr || val == nullptr) && m > 0) return PGS_ERR_INVALID;
  for (int j = 0; j < nreg; ++j)
    if (keys_host[j + 1] < keys_host[j]) return PGS_ERR_INVALID;
  PGS_ENTER(ops, c);
  // small: 2 * nreg counts, then nreg + 1 positions (read back together),
  // then the keys (sent through the pinned buffer, past that part, where
  // there are too many for the kernel's parameters).
  const size_t nk = static_cast<size_t>(nreg) + 1;
  const size_t cnt_bytes = 2 * static_cast<size_t>(nreg) * 8;
  const size_t back = cnt_bytes + nk * 8;
  const size_t key_off = (back + 255) & ~static_cast<size_t>(255);
  PGS_RETURN_IF(ensure_device(&c->small, key_off + nk * 8));
  PGS_RETURN_IF(ensure_pinned(&c->pinned, key_off + nk * 8));
  char *dsmall = static_cast<char *>(c->small.ptr);
  auto *counts = reinterpret_cast<unsigned long long *>(dsmall);
  auto *dpos = reinterpret_cast<long long *>(dsmall + cnt_bytes);
  const int grid = (static_cast<int>(nk) + kThreads - 1) / kThreads;
  // The locate kernel clears the counts the count kernel adds into.
  const int zero_words = 2 * nreg;
  if (nk <= static_cast<size_t>(kParamBounds)) {
    ParamBounds pk{};
    for (size_t j = 0; j < nk; ++j) pk.b[j] = keys_host[j];
    locate_kernel<<<grid, kThreads, 0, c->stream>>>(
        idx, m, pk, static_cast<int>(nk), dpos, counts, zero_words);
  } else {
    auto *dkeys = reinterpret_cast<long long *>(dsmall + key_off);
    char *pin = static_cast<char *>(c->pinned.ptr);
    memcpy(pin + key_off, keys_host, nk * 8);
    PGS_CU(cudaMemcpyAsync(dkeys, pin + key_off, nk * 8, cudaMemcpyHostToDevice,
                           c->stream));
    locate_kernel<<<grid, kThreads, 0, c->stream>>>(
        idx, m, static_cast<const long long *>(dkeys), static_cast<int>(nk),
        dpos, counts, zero_words);
  }
  PGS_LAUNCHED();
  // The positions ascend within [0, m]: they are the regions' bounds.
  if (nreg > 0)
    PGS_RETURN_IF(
        count_regions_launch(c, val, dpos, nreg, thr, m, counts, true));
  void *host = nullptr;
  PGS_RETURN_IF(read_back(c, dsmall, back, &host));
  const auto *h = static_cast<const unsigned long long *>(host);
  for (int j = 0; j < nreg; ++j) {
    n_gt_host[j] = static_cast<int64_t>(h[2 * j]);
    n_eq_host[j] = static_cast<int64_t>(h[2 * j + 1]);
  }
  memcpy(pos_host, static_cast<const char *>(host) + cnt_bytes, nk * 8);
  return PGS_OK;
}

uint64_t host_syncs(const pgs_ops_t *ops) {
  return ops == nullptr || ops->ctx == nullptr ? 0 : ctx_of(ops)->syncs;
}

}  // namespace pgs_cuda
