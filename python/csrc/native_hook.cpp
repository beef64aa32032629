#include "native_hook.hpp"

#include <torch/csrc/distributed/c10d/reducer.hpp>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <utility>

namespace pg_sparse {

namespace {

std::vector<const void*> storages(const std::vector<at::Tensor>& params) {
  std::vector<const void*> out;
  out.reserve(params.size());
  for (const auto& p : params) out.push_back(p.storage().data());
  return out;
}

// The Python hook for the calls it must run, the table for the others.
class NativeHook : public c10d::CommHookInterface {
 public:
  NativeHook(py::object state, py::object hook,
             std::shared_ptr<NativeTable> table)
      : state_(std::move(state)),
        hook_(std::move(hook)),
        table_(std::move(table)) {}

  ~NativeHook() override {
    py::gil_scoped_acquire gil;
    state_ = py::object();
    hook_ = py::object();
  }

  c10::intrusive_ptr<c10::ivalue::Future> runHook(
      c10d::GradBucket& bucket) override {
    if (auto native = table_->find(bucket)) {
      // The Work's own future: its value is [bucket], read by
      // parseHookResult, so no callback runs when it completes, and the
      // reducer only waits on it: the worker completes it itself.
      auto fut =
          native->allreduce_for_reducer(bucket.getBufferRef())->getFuture();
      if (bucket.isLast()) table_->count_iteration();
      return fut;
    }
    py::gil_scoped_acquire gil;
    py::object fut = hook_(state_, bucket);
    // As torch's Python hooks: the hook returns a torch.futures.Future.
    c10::IValue value;
    try {
      value = torch::jit::toIValue(
          fut, c10::FutureType::create(c10::PyObjectType::get()));
    } catch (const std::exception& e) {
      TORCH_CHECK_TYPE(false,
                       "pg_sparse: a DDP comm hook must return a "
                       "torch.futures.Future: ",
                       e.what());
    }
    return value.toFuture();
  }

  at::Tensor parseHookResult(const c10::IValue& result) override {
    if (result.isTensorList()) return result.toTensorVector().at(0);
    if (result.isTensor()) return result.toTensor();
    py::gil_scoped_acquire gil;
    py::object obj = torch::jit::toPyObject(result);
    return torch::jit::toIValue(obj, c10::TensorType::get()).toTensor();
  }

 private:
  py::object state_, hook_;
  std::shared_ptr<NativeTable> table_;
};

}  // namespace

void NativeTable::set(size_t index, std::shared_ptr<SparseBucket> bucket,
                      const std::vector<at::Tensor>& params, int64_t budget) {
  Entry e{std::move(bucket), storages(params), 0, budget < 0 ? -1 : budget};
  e.numel = e.bucket->numel();
  std::lock_guard<std::mutex> lock(mutex_);
  if (entries_.size() <= index) entries_.resize(index + 1);
  entries_[index] = std::move(e);
}

void NativeTable::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.clear();
  iterations_.store(0);
}

std::shared_ptr<SparseBucket> NativeTable::find(
    const c10d::GradBucket& grad_bucket) {
  const size_t index = grad_bucket.getIndex();
  std::lock_guard<std::mutex> lock(mutex_);
  if (index >= entries_.size() || !entries_[index].bucket) return nullptr;
  Entry& e = entries_[index];
  if (e.left == 0) {  // its budget is spent: Python runs this call
    e = Entry{};
    return nullptr;
  }
  const auto& params = grad_bucket.getParameters();
  bool same = e.numel == grad_bucket.getBuffer().numel() &&
              params.size() == e.params.size();
  for (size_t i = 0; same && i < params.size(); ++i)
    same = params[i].storage().data() == e.params[i];
  if (!same) {
    // DDP rebuilt its buckets: Python checks the layout again.
    e = Entry{};
    return nullptr;
  }
  calls_.fetch_add(1);
  if (e.left > 0) --e.left;
  return e.bucket;
}

std::shared_ptr<NativeTable> register_native_hook(py::object reducer,
                                                  py::object state,
                                                  py::object hook) {
  auto r = reducer.cast<std::shared_ptr<c10d::Reducer>>();
  auto table = std::make_shared<NativeTable>();
  r->register_comm_hook(
      std::make_unique<NativeHook>(std::move(state), std::move(hook), table));
  return table;
}

}  // namespace pg_sparse
