// Python bindings to the pgs_ops tables, for benchmarks and tests: the same
// kernels the algorithms run, on CPU tensors (pgs_ops_cpu) or CUDA tensors (a
// CUDA ops table on the device's current stream). Translation only: argument
// checks, status codes to exceptions.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/utils/pybind.h>

#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <utility>

#include "status.hpp"

extern "C" {
#include <pg_sparse/ops.h>
}

#ifdef PGS_SHIM_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <pg_sparse/ops_cuda.h>
#endif

namespace py = pybind11;

namespace pg_sparse {
namespace {

#ifdef PGS_SHIM_CUDA
// CUDA ops tables, one per (device, stream), made on first use and kept for
// the life of the process (their scratch grows to the largest call and is
// reused, as in a bucket; never destroyed, since the CUDA runtime may be gone
// at static destruction). A table is not thread-safe: calls hold the mutex.
struct CudaTables {
  std::mutex mutex;
  std::map<std::pair<int, cudaStream_t>, pgs_ops_t*> tables;
};

CudaTables& cuda_tables() {
  static auto* t = new CudaTables();  // leaked on purpose, see above
  return *t;
}
#endif

// The pgs_ops table for the memory of @p t: the shared host table, or the
// CUDA table of t's device on that device's current stream (locked, and the
// device made current, while the handle lives).
class OpsFor {
 public:
  explicit OpsFor(const at::Tensor& t) {
    if (t.is_cpu()) {
      ops_ = pgs_ops_cpu();
      return;
    }
#ifdef PGS_SHIM_CUDA
    TORCH_CHECK(t.is_cuda(), "pg_sparse: ops need a CPU or CUDA tensor, got ",
                t.device());
    const auto dev = t.device().index();
    guard_.emplace(dev);
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream(dev).stream();
    auto& c = cuda_tables();
    lock_ = std::unique_lock<std::mutex>(c.mutex);
    auto key = std::make_pair(static_cast<int>(dev), stream);
    auto it = c.tables.find(key);
    if (it == c.tables.end()) {
      pgs_ops_t* ops = nullptr;
      check(pgs_ops_cuda_create(stream, static_cast<int>(dev), &ops),
            "creating the CUDA ops table");
      it = c.tables.emplace(key, ops).first;
    }
    ops_ = it->second;
#else
    TORCH_CHECK(false,
                "pg_sparse: ops need a CPU tensor (this build has no CUDA "
                "path), got ",
                t.device());
#endif
  }
  OpsFor(const OpsFor&) = delete;
  OpsFor& operator=(const OpsFor&) = delete;

  const pgs_ops_t* get() const { return ops_; }

 private:
  const pgs_ops_t* ops_ = nullptr;
#ifdef PGS_SHIM_CUDA
  std::optional<c10::cuda::CUDAGuard> guard_;
  std::unique_lock<std::mutex> lock_;
#endif
};

void check_vector(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.scalar_type() == at::kFloat, "pg_sparse: ", name,
              " must be float32, got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "pg_sparse: ", name, " must be contiguous");
  TORCH_CHECK(t.is_cpu() || t.is_cuda(), "pg_sparse: ", name,
              " must be a CPU or CUDA tensor, got ", t.device());
}

// r += g; returns the number of |r| >= thr, r != 0 after the add.
int64_t ops_accumulate(at::Tensor r, const at::Tensor& g, double thr) {
  check_vector(r, "r");
  check_vector(g, "g");
  TORCH_CHECK(r.device() == g.device(), "pg_sparse: r and g on ", r.device(),
              " and ", g.device());
  TORCH_CHECK(r.numel() == g.numel(), "pg_sparse: r has ", r.numel(),
              " values, g ", g.numel());
  OpsFor ops(r);
  int64_t n_ge = 0;
  {
    py::gil_scoped_release nogil;
    check(ops.get()->accumulate(
              ops.get(), r.data_ptr<float>(), g.data_ptr<float>(),
              static_cast<size_t>(r.numel()), static_cast<float>(thr), &n_ge),
          "accumulate");
  }
  return n_ge;
}

// Exact k-th largest |x| and the number of |x| above it.
std::tuple<double, int64_t> ops_kth_abs(const at::Tensor& x, int64_t k) {
  check_vector(x, "x");
  TORCH_CHECK(k >= 1 && k <= x.numel(), "pg_sparse: k must be in [1, ",
              x.numel(), "], got ", k);
  OpsFor ops(x);
  float thr = 0.0f;
  int64_t n_gt = 0;
  {
    py::gil_scoped_release nogil;
    check(ops.get()->kth_abs(ops.get(), x.data_ptr<float>(),
                             static_cast<size_t>(x.numel()),
                             static_cast<size_t>(k), &thr, &n_gt),
          "kth_abs");
  }
  return {static_cast<double>(thr), n_gt};
}

// Compaction in index order of |x| > thr plus the first @p eq_quota entries
// with |x| == thr (all if negative): (int32 indices, values) on x's device.
std::tuple<at::Tensor, at::Tensor> ops_compact(const at::Tensor& x, double thr,
                                               int64_t eq_quota, int64_t cap) {
  check_vector(x, "x");
  TORCH_CHECK(x.numel() <= std::numeric_limits<int32_t>::max(),
              "pg_sparse: compact indexes with int32, x has ", x.numel(),
              " values");
  if (cap < 0) cap = x.numel();
  TORCH_CHECK(cap <= x.numel(), "pg_sparse: cap must be in [0, ", x.numel(),
              "], got ", cap);
  OpsFor ops(x);
  auto idx = at::empty({cap}, x.options().dtype(at::kInt));
  auto val = at::empty({cap}, x.options());
  int64_t count = 0;
  {
    py::gil_scoped_release nogil;
    check(ops.get()->compact(
              ops.get(), x.data_ptr<float>(), static_cast<size_t>(x.numel()),
              static_cast<float>(thr), eq_quota, 0, idx.data_ptr<int32_t>(),
              val.data_ptr<float>(), static_cast<size_t>(cap), &count),
          "compact");
  }
  const int64_t m = count < cap ? count : cap;
  return {idx.narrow(0, 0, m), val.narrow(0, 0, m)};
}

}  // namespace

void bind_ops(py::module_& m) {
  m.def("_ops_accumulate", &ops_accumulate, py::arg("r"), py::arg("g"),
        py::arg("thr"),
        "r += g through the ops table of r's device; returns the count of "
        "|r| >= thr, r != 0 (the fused selection pass).");
  m.def("_ops_kth_abs", &ops_kth_abs, py::arg("x"), py::arg("k"),
        "Exact k-th largest |x| (radix select): (thr, count of |x| > thr).");
  m.def("_ops_compact", &ops_compact, py::arg("x"), py::arg("thr"),
        py::arg("eq_quota") = -1, py::arg("cap") = -1,
        "Indices (int32) and values of x != 0 with |x| > thr, plus the first "
        "eq_quota with |x| == thr (all if negative), in index order; at most "
        "cap pairs (default numel).");
}

}  // namespace pg_sparse
