// A DDP comm hook in C++ for the sparse hooks' steady calls.
//
// A Python comm hook costs DDP a Python call per bucket and a Python
// callback when its future completes (on the backend's completion thread,
// under the GIL). Here the Python hook still runs every call that needs
// Python (the first calls of a bucket, a rebuilt bucket, the options that
// work in Python); each call it finds plain marks its bucket index "native"
// with the SparseBucket it used and the parameters it saw, and from then on
// runHook calls that bucket's allreduce directly, returning the Work's own
// future, while the bucket keeps the same parameters in the same order.
#pragma once

#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/utils/pybind.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "bucket.hpp"

namespace pg_sparse {

// The bucket indices the hook serves in C++, shared by the hook (owned by
// DDP's reducer) and the Python state that fills it.
class NativeTable {
 public:
  // Serve bucket @p index with @p bucket while DDP's bucket holds exactly
  // @p params (in this order; their storage is what identifies them), for
  // the next @p budget calls (-1: until cleared), after which the Python
  // hook runs the call again (algo="auto" decides there).
  void set(size_t index, std::shared_ptr<SparseBucket> bucket,
           const std::vector<at::Tensor>& params, int64_t budget = -1);
  // Every index back to the Python hook (a restored state, a new DDP), and
  // the iteration count to 0 (the caller keeps what it counted).
  void clear();
  // The bucket for DDP's @p grad_bucket, or null when Python must run it.
  std::shared_ptr<SparseBucket> find(const c10d::GradBucket& grad_bucket);
  // Backward passes whose last bucket ran here (the Python hook counts the
  // others) since the last clear.
  int64_t iterations() const { return iterations_.load(); }
  void count_iteration() { iterations_.fetch_add(1); }
  int64_t calls() const { return calls_.load(); }

 private:
  struct Entry {
    std::shared_ptr<SparseBucket> bucket;
    std::vector<const void*> params;  // storage of each parameter, in order
    int64_t numel = 0;
    int64_t left = -1;  // calls still to serve; -1: no limit
  };
  std::mutex mutex_;
  std::vector<Entry> entries_;
  std::atomic<int64_t> iterations_{0};
  std::atomic<int64_t> calls_{0};
};

// Registers the hook on @p reducer (a torch Reducer object); returns the
// table the Python state fills.
std::shared_ptr<NativeTable> register_native_hook(py::object reducer,
                                                  py::object state,
                                                  py::object hook);

}  // namespace pg_sparse
