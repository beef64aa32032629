// pybind11 module pg_sparse._C: translation between Python and the backend.
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/utils/pybind.h>

#include <map>
#include <mutex>
#include <vector>

#include "backend.hpp"
#include "bindings.hpp"
#include "bucket.hpp"
#include "native_hook.hpp"
#include "ops_bindings.hpp"
#include "transports.hpp"

namespace py = pybind11;
using namespace pg_sparse;

namespace {

// Live backends, so interpreter exit can stop their threads before MPI is
// finalised.
struct Registry {
  std::mutex mutex;
  std::vector<c10::weak_intrusive_ptr<SparseBackend>> backends;
};

Registry& registry() {
  static Registry r;
  return r;
}

c10::intrusive_ptr<c10d::Backend> create_backend(
    const c10d::DistributedBackendOptions& opts, const std::string& transport,
    c10::intrusive_ptr<c10d::Backend> inner) {
  Transport t;
  if (transport == "mpi") {
    t = make_mpi_transport(opts.global_ranks_in_group, opts.group_rank,
                           opts.group_size);
  } else {
    TORCH_CHECK(inner, "pg_sparse: transport '", transport,
                "' needs an inner backend");
    t = make_inner_transport(inner, opts.group_rank, opts.group_size);
  }
  auto timeout =
      std::chrono::duration_cast<std::chrono::milliseconds>(opts.timeout);
  auto b = c10::make_intrusive<SparseBackend>(
      opts.group_rank, opts.group_size, std::move(t.comm), std::move(t.p2p),
      transport, timeout);
  b->set_store(opts.store, opts.global_ranks_in_group);
  // CUDA tensors staged through host memory ride a second transport of the
  // same kind, so they never meet the host collectives' messages.
  const int rank = opts.group_rank, size = opts.group_size;
  if (transport == "mpi") {
    auto ranks = opts.global_ranks_in_group;
    b->set_staging([ranks, rank, size] {
      return make_mpi_comm(ranks, rank, size, PGS_MEM_HOST);
    });
  } else {
    b->set_staging([inner, rank, size] {
      return make_inner_staging_comm(inner, rank, size);
    });
  }
  std::lock_guard<std::mutex> lock(registry().mutex);
  registry().backends.emplace_back(b);
  return b;
}

void shutdown_all() {
  std::vector<c10::weak_intrusive_ptr<SparseBackend>> live;
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    live.swap(registry().backends);
  }
  for (auto& w : live)
    if (auto b = w.lock()) b->shutdown();
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "pg_sparse native module: the 'sparse' c10d backend";
  m.def(
      "_create_backend",
      [](const c10d::DistributedBackendOptions& opts,
         const std::string& transport, py::object inner) {
        c10::intrusive_ptr<c10d::Backend> in;
        if (!inner.is_none())
          in = inner.cast<c10::intrusive_ptr<c10d::Backend>>();
        py::gil_scoped_release nogil;  // MPI communicator setup blocks
        return create_backend(opts, transport, in);
      },
      py::arg("options"), py::arg("transport"), py::arg("inner"));
  m.def("_shutdown_and_finalize", [] {
    py::gil_scoped_release nogil;
    shutdown_all();
    finalize_mpi();
  });
  m.def("_transport_of", [](const c10::intrusive_ptr<c10d::Backend>& b) {
    auto s = c10::dynamic_intrusive_pointer_cast<SparseBackend>(b);
    TORCH_CHECK_TYPE(s, "pg_sparse: not a 'sparse' backend");
    return s->transport();
  });
  m.def("_cuda_transport_of", [](const c10::intrusive_ptr<c10d::Backend>& b) {
    auto s = c10::dynamic_intrusive_pointer_cast<SparseBackend>(b);
    TORCH_CHECK_TYPE(s, "pg_sparse: not a 'sparse' backend");
    return s->cuda_transport();
  });

  py::class_<BucketConfig>(m, "BucketConfig")
      .def(py::init<>())
      .def_readwrite("algo", &BucketConfig::algo)
      .def_readwrite("density", &BucketConfig::density)
      .def_readwrite("warmup_steps", &BucketConfig::warmup_steps)
      .def_readwrite("tau", &BucketConfig::tau)
      .def_readwrite("tau_prime", &BucketConfig::tau_prime)
      .def_readwrite("global_factor", &BucketConfig::global_factor)
      .def_readwrite("check_finite", &BucketConfig::check_finite)
      .def_readwrite("wire", &BucketConfig::wire)
      .def_readwrite("nonfinite", &BucketConfig::nonfinite)
      .def_readwrite("estimator", &BucketConfig::estimator);

  py::class_<SparseBucket, std::shared_ptr<SparseBucket>>(m, "SparseBucket")
      .def(py::init<const c10::intrusive_ptr<c10d::Backend>&, int64_t,
                    const BucketConfig&>(),
           py::arg("backend"), py::arg("numel"), py::arg("config"))
      .def("allreduce", &SparseBucket::allreduce, py::arg("tensor"),
           py::call_guard<py::gil_scoped_release>())
      // These wait for the bucket's lock, which a running allreduce holds.
      .def("stats",
           [](const SparseBucket& b) {
             pgs_stats_t s;
             {
               py::gil_scoped_release nogil;
               s = b.stats();
             }
             return stats_dict(s);
           })
      .def("phase_words", &SparseBucket::phase_words,
           py::call_guard<py::gil_scoped_release>())
      .def("residual", &SparseBucket::residual,
           py::call_guard<py::gil_scoped_release>())
      .def("set_residual", &SparseBucket::set_residual,
           py::call_guard<py::gil_scoped_release>())
      .def("scale_residual", &SparseBucket::scale_residual, py::arg("factor"),
           py::call_guard<py::gil_scoped_release>())
      .def("set_density", &SparseBucket::set_density, py::arg("density"),
           py::call_guard<py::gil_scoped_release>())
      .def("set_dense", &SparseBucket::set_dense, py::arg("dense"),
           py::call_guard<py::gil_scoped_release>())
      .def("record_times", &SparseBucket::record_times, py::arg("on"),
           py::call_guard<py::gil_scoped_release>())
      .def("take_times",
           [](SparseBucket& b) {
             std::pair<int64_t, std::vector<SparseBucket::CallTime>> t;
             {
               py::gil_scoped_release nogil;
               t = b.take_times();
             }
             py::list times;
             for (const auto& c : t.second)
               times.append(py::make_tuple(c.seconds, c.dense));
             return py::make_tuple(t.first, times);
           })
      .def("get_state",
           [](const SparseBucket& b) {
             std::vector<int64_t> bounds;
             std::map<std::string, double> st;
             {
               py::gil_scoped_release nogil;
               st = b.get_state(&bounds);
             }
             return py::make_tuple(st, bounds);
           })
      .def("set_state", &SparseBucket::set_state,
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("numel", &SparseBucket::numel);
  py::class_<NativeTable, std::shared_ptr<NativeTable>>(m, "NativeTable")
      .def("set", &NativeTable::set, py::arg("index"), py::arg("bucket"),
           py::arg("params"), py::arg("budget") = -1)
      .def("clear", &NativeTable::clear)
      .def_property_readonly("iterations", &NativeTable::iterations)
      .def_property_readonly("calls", &NativeTable::calls);
  m.def("_register_native_hook", &register_native_hook, py::arg("reducer"),
        py::arg("state"), py::arg("hook"));
  bind_ops(m);
  bind_log(m);
  bind_params(m);
  bind_vocab(m);
}
