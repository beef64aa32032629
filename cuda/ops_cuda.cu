// The device-memory pgs_ops table: creation, scratch, memory functions.
// The kernels live in elementwise_cuda.cu, select_cuda.cu, compact_cuda.cu
// and index_cuda.cu.
#include <new>

#include "ops_cuda_internal.cuh"

namespace pgs_cuda {

// ---- scratch --------------------------------------------------------------

namespace {

// Next size for a growing buffer: 1.5x the old one, at least what is asked,
// at least 4 KB, so a sequence of slowly growing calls reallocates rarely.
size_t grown(size_t have, size_t want) {
  size_t next = have + have / 2;
  if (next < want) next = want;
  if (next < 4096) next = 4096;
  return next;
}

}  // namespace

int ensure_device(Scratch *s, size_t bytes) {
  if (bytes <= s->bytes && s->ptr != nullptr) return PGS_OK;
  size_t next = grown(s->bytes, bytes);
  // cudaFree waits for the device, so kernels still reading the old buffer
  // finish first.
  if (s->ptr != nullptr) (void)cudaFree(s->ptr);
  s->ptr = nullptr;
  s->bytes = 0;
  void *p = nullptr;
  cudaError_t e = cudaMalloc(&p, next);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return e == cudaErrorMemoryAllocation ? PGS_ERR_NO_MEMORY : PGS_ERR_DEVICE;
  }
  s->ptr = p;
  s->bytes = next;
  return PGS_OK;
}

int ensure_pinned(Scratch *s, size_t bytes) {
  if (bytes <= s->bytes && s->ptr != nullptr) return PGS_OK;
  size_t next = grown(s->bytes, bytes);
  // Every use of the pinned buffer ends with a stream synchronisation, so no
  // copy can still be reading or writing it here.
  if (s->ptr != nullptr) (void)cudaFreeHost(s->ptr);
  s->ptr = nullptr;
  s->bytes = 0;
  void *p = nullptr;
  // Mapped: read_back's kernel writes into it (unified addressing, which
  // every 64-bit platform CUDA supports, makes the host pointer the device's).
  cudaError_t e = cudaHostAlloc(&p, next, cudaHostAllocMapped);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return e == cudaErrorMemoryAllocation ? PGS_ERR_NO_MEMORY : PGS_ERR_DEVICE;
  }
  s->ptr = p;
  s->bytes = next;
  return PGS_OK;
}

int resident_blocks(Ctx *c, const void *fn, int threads) {
  for (int i = 0; i < c->n_occ; ++i)
    if (c->occ[i].fn == fn) return c->occ[i].blocks;
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fn, threads, 0) !=
          cudaSuccess ||
      blocks < 1) {
    (void)cudaGetLastError();
    blocks = 1;
  }
  if (c->n_occ < static_cast<int>(sizeof c->occ / sizeof c->occ[0]))
    c->occ[c->n_occ++] = Occupancy{fn, blocks};
  return blocks;
}

namespace {

// Read-backs up to this size are written by a kernel, larger ones copied.
constexpr size_t kKernelReadBack = 4096;

// @p bytes of device memory into pinned host memory (mapped, and under
// unified addressing the same pointer on the device), written by a kernel:
// a cudaMemcpyAsync to the host hands over from the compute engine to a
// copy engine, which on an H200 left the stream idle about 7 us after the
// kernel before it (stop 50's timeline); a kernel follows the one before it
// within about 1 us.
__global__ void to_host_kernel(const unsigned char *__restrict__ src,
                               size_t bytes, unsigned char *__restrict__ dst) {
  const bool words = ((reinterpret_cast<uintptr_t>(src) |
                       reinterpret_cast<uintptr_t>(dst) | bytes) &
                      7) == 0;
  if (words) {
    const auto *s = reinterpret_cast<const unsigned long long *>(src);
    auto *d = reinterpret_cast<unsigned long long *>(dst);
    for (size_t i = threadIdx.x; i < bytes / 8; i += blockDim.x) d[i] = s[i];
    return;
  }
  for (size_t i = threadIdx.x; i < bytes; i += blockDim.x) dst[i] = src[i];
}

// Queues the copy of @p bytes of @p dev into the pinned @p host.
int queue_to_host(Ctx *c, void *host, const void *dev, size_t bytes) {
  if (bytes > kKernelReadBack) {
    PGS_CU(
        cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, c->stream));
    return PGS_OK;
  }
  to_host_kernel<<<1, 128, 0, c->stream>>>(
      static_cast<const unsigned char *>(dev), bytes,
      static_cast<unsigned char *>(host));
  PGS_LAUNCHED();
  return PGS_OK;
}

}  // namespace

int sync_stream(Ctx *c) {
  ++c->syncs;
  auto *word = static_cast<unsigned *>(c->err_pinned.ptr);
  if (c->err_pending)
    PGS_RETURN_IF(queue_to_host(c, word, c->err_dev.ptr, sizeof *word));
  PGS_CU(cudaStreamSynchronize(c->stream));
  if (!c->err_pending) return PGS_OK;
  c->err_pending = false;
  const unsigned bits = *word;
  if (bits == 0) return PGS_OK;
  *word = 0;
  PGS_CU(cudaMemsetAsync(c->err_dev.ptr, 0, sizeof *word, c->stream));
  // A bad index (a malformed message) before a broken contract.
  return (bits & kErrIndex) != 0 ? PGS_ERR_INDEX : PGS_ERR_INVALID;
}

int read_back(Ctx *c, const void *dev, size_t bytes, void **host) {
  PGS_RETURN_IF(ensure_pinned(&c->pinned, bytes));
  PGS_RETURN_IF(queue_to_host(c, c->pinned.ptr, dev, bytes));
  PGS_RETURN_IF(sync_stream(c));
  *host = c->pinned.ptr;
  return PGS_OK;
}

// ---- memory -----------------------------------------------------------------

namespace {

int cuda_alloc(const pgs_ops_t *ops, void **ptr, size_t bytes) {
  if (ptr == nullptr) return PGS_ERR_INVALID;
  *ptr = nullptr;
  if (bytes == 0) return PGS_OK;
  PGS_ENTER(ops, c);
  (void)c;
  cudaError_t e = cudaMalloc(ptr, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    *ptr = nullptr;
    return e == cudaErrorMemoryAllocation ? PGS_ERR_NO_MEMORY : PGS_ERR_DEVICE;
  }
  return PGS_OK;
}

void cuda_free(const pgs_ops_t *ops, void *ptr) {
  if (ptr == nullptr) return;
  Ctx *c = ctx_of(ops);
  DeviceGuard guard(c->device);
  if (cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
}

int cuda_copy(const pgs_ops_t *ops, void *dst, const void *src, size_t bytes,
              pgs_copy_kind_t kind) {
  if (kind != PGS_COPY_TO_HOST && kind != PGS_COPY_FROM_HOST &&
      kind != PGS_COPY_SAME)
    return PGS_ERR_INVALID;
  if (bytes == 0) return PGS_OK;
  if (dst == nullptr || src == nullptr) return PGS_ERR_INVALID;
  PGS_ENTER(ops, c);
  if (dst == src) return PGS_OK;
  // cudaMemcpyDefault lets unified addressing pick the direction, so pinned
  // or managed host memory works as well as pageable memory.
  if (kind != PGS_COPY_SAME) {
    PGS_CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, c->stream));
    // Both host directions wait: the host buffer is the caller's again once
    // this returns (a pinned source would otherwise still be read).
    PGS_RETURN_IF(sync_stream(c));
    return PGS_OK;
  }
  if (!overlaps(dst, bytes, src, bytes)) {
    PGS_CU(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
    return PGS_OK;
  }
  // Overlapping ranges: memmove semantics through the scratch buffer
  // (cudaMemcpy leaves overlap undefined).
  PGS_RETURN_IF(ensure_device(&c->work, bytes));
  PGS_CU(cudaMemcpyAsync(c->work.ptr, src, bytes, cudaMemcpyDeviceToDevice,
                         c->stream));
  PGS_CU(cudaMemcpyAsync(dst, c->work.ptr, bytes, cudaMemcpyDeviceToDevice,
                         c->stream));
  return PGS_OK;
}

int cuda_fill_zero(const pgs_ops_t *ops, void *ptr, size_t bytes) {
  if (bytes == 0) return PGS_OK;
  if (ptr == nullptr) return PGS_ERR_INVALID;
  PGS_ENTER(ops, c);
  PGS_CU(cudaMemsetAsync(ptr, 0, bytes, c->stream));
  return PGS_OK;
}

int cuda_sync(const pgs_ops_t *ops) {
  PGS_ENTER(ops, c);
  return sync_stream(c);
}

int cuda_check(const pgs_ops_t *ops) {
  PGS_ENTER(ops, c);
  return c->err_pending ? sync_stream(c) : PGS_OK;
}

void release(Ctx *c) {
  if (c->small.ptr != nullptr) (void)cudaFree(c->small.ptr);
  if (c->err_dev.ptr != nullptr) (void)cudaFree(c->err_dev.ptr);
  if (c->err_pinned.ptr != nullptr) (void)cudaFreeHost(c->err_pinned.ptr);
  if (c->work.ptr != nullptr) (void)cudaFree(c->work.ptr);
  if (c->group_max.ptr != nullptr) (void)cudaFree(c->group_max.ptr);
  if (c->pinned.ptr != nullptr) (void)cudaFreeHost(c->pinned.ptr);
  (void)cudaGetLastError();
  delete c;
}

}  // namespace

}  // namespace pgs_cuda

// ---- public C API ---------------------------------------------------------

using namespace pgs_cuda;

extern "C" int pgs_cuda_available(void) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count > 0;
}

extern "C" int pgs_ops_cuda_create(void *cuda_stream, int device,
                                   pgs_ops_t **out) {
  if (out == nullptr) return PGS_ERR_INVALID;
  *out = nullptr;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return PGS_ERR_DEVICE;
  }
  if (device < 0 || device >= count) return PGS_ERR_INVALID;
  DeviceGuard guard(device);
  if (!guard.ok()) {
    (void)cudaGetLastError();
    return PGS_ERR_DEVICE;
  }
  Ctx *c = new (std::nothrow) Ctx();
  if (c == nullptr) return PGS_ERR_NO_MEMORY;
  c->stream = static_cast<cudaStream_t>(cuda_stream);
  c->device = device;
  if (cudaDeviceGetAttribute(&c->sms, cudaDevAttrMultiProcessorCount, device) !=
          cudaSuccess ||
      c->sms < 1) {
    release(c);
    return PGS_ERR_DEVICE;
  }
  // read_back's kernel writes pinned host memory through its host pointer.
  int uva = 0;
  if (cudaDeviceGetAttribute(&uva, cudaDevAttrUnifiedAddressing, device) !=
          cudaSuccess ||
      uva == 0) {
    (void)cudaGetLastError();
    release(c);
    return PGS_ERR_UNSUPPORTED;
  }
  // The small buffers cover every fixed-size use (histograms, radix state,
  // counters); count_regions grows them for many regions.
  int st = ensure_device(&c->small, 64 * 1024);
  if (st == PGS_OK) st = ensure_pinned(&c->pinned, 64 * 1024);
  if (st == PGS_OK) st = ensure_device(&c->err_dev, sizeof(unsigned));
  if (st == PGS_OK) st = ensure_pinned(&c->err_pinned, sizeof(unsigned));
  if (st == PGS_OK &&
      cudaMemset(c->err_dev.ptr, 0, sizeof(unsigned)) != cudaSuccess) {
    (void)cudaGetLastError();
    st = PGS_ERR_DEVICE;
  }
  if (st != PGS_OK) {
    release(c);
    return st;
  }
  pgs_ops_t &t = c->table;
  t.mem = PGS_MEM_DEVICE;
  t.ctx = c;
  t.alloc = cuda_alloc;
  t.free = cuda_free;
  t.copy = cuda_copy;
  t.fill_zero = cuda_fill_zero;
  t.sync = cuda_sync;
  t.accumulate = pgs_cuda::accumulate;
  t.scale = pgs_cuda::scale;
  t.count_nonfinite = pgs_cuda::count_nonfinite;
  t.mean_std = pgs_cuda::mean_std;
  t.abs_stats = pgs_cuda::abs_stats;
  t.accumulate_stats = pgs_cuda::accumulate_stats;
  t.accumulate_guess_select = pgs_cuda::accumulate_guess_select;
  t.set_sorted = pgs_cuda::set_sorted;
  t.count_regions = pgs_cuda::count_regions;
  t.kth_abs = pgs_cuda::kth_abs;
  t.hist_abs = pgs_cuda::hist_abs;
  t.compact = pgs_cuda::compact;
  t.select_pairs = pgs_cuda::select_pairs;
  t.gather = pgs_cuda::gather;
  t.zero_at = pgs_cuda::zero_at;
  t.scatter_add = pgs_cuda::scatter_add;
  t.scatter_add_sorted = pgs_cuda::scatter_add_sorted;
  t.zero_common = pgs_cuda::zero_common;
  t.merge_pairs = pgs_cuda::merge_pairs;
  t.accumulate_select = pgs_cuda::accumulate_select;
  t.accumulate_kth = pgs_cuda::accumulate_kth;
  t.accumulate_kth_regions = pgs_cuda::accumulate_kth_regions;
  t.unaccumulate = pgs_cuda::unaccumulate;
  t.shift_idx = pgs_cuda::shift_idx;
  t.locate = pgs_cuda::locate;
  t.check = cuda_check;
  t.count_pair_regions = pgs_cuda::count_pair_regions;
  t.host_syncs = pgs_cuda::host_syncs;
  t.to_wire = pgs_cuda::to_wire;
  t.from_wire = pgs_cuda::from_wire;
  *out = &c->table;
  return PGS_OK;
}

extern "C" void pgs_ops_cuda_destroy(pgs_ops_t *ops) {
  if (ops == nullptr || ops->ctx == nullptr) return;
  Ctx *c = ctx_of(ops);
  DeviceGuard guard(c->device);
  (void)cudaStreamSynchronize(c->stream);
  release(c);
}
