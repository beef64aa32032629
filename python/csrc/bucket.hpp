// A DDP bucket's sparse allreduce state (pgs_bucket_t) bound to a backend.
// Calls run as tasks on the backend's worker, in order with its collectives.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backend.hpp"

extern "C" {
#include <pg_sparse/bucket.h>
}

namespace pg_sparse {

struct BucketConfig {
  std::string algo = "oktopk";
  double density = 0.01;
  int64_t warmup_steps = 1;
  int64_t tau = 64;
  int64_t tau_prime = 32;
  bool check_finite = true;
  // On NaN/Inf (with check_finite): "raise", or "skip" (a zero output on
  // every rank, the residual restored bit for bit, no error).
  std::string nonfinite = "raise";
  std::string wire = "float32";       // float32, float16 or bfloat16
  std::string estimator = "default";  // PGS_ESTIMATOR_MAP's names
  double global_factor = 1.0;         // oktopk: |G| targets factor * k
};

class SparseBucket {
 public:
  struct State;  // shared with queued tasks (defined in bucket.cpp)

  SparseBucket(const c10::intrusive_ptr<c10d::Backend>& backend, int64_t numel,
               const BucketConfig& config);

  // In-place average of @p t (fp32, fp16 or bf16; residual kept in fp32).
  c10::intrusive_ptr<c10d::Work> allreduce(const at::Tensor& t) {
    return submit(t, false);
  }
  // The same for DDP's reducer through the C++ hook, which only waits on
  // the future: the worker completes it directly (backend.hpp).
  c10::intrusive_ptr<c10d::Work> allreduce_for_reducer(const at::Tensor& t) {
    return submit(t, true);
  }

  // Statistics of the last completed call (stats_dict() makes the dict).
  pgs_stats_t stats() const;
  std::map<std::string, std::vector<int64_t>> phase_words() const;

  at::Tensor residual() const;
  void set_density(double density);
  void set_dense(
      bool dense);  // every call dense (residual flushed) until false
  void set_residual(const at::Tensor& r);
  // residual[i] *= factor[i], in place (see pgs_bucket_scale_residual).
  void scale_residual(const at::Tensor& factor);
  // step, thresholds and (oktopk) region bounds; bounds empty when unset.
  std::map<std::string, double> get_state(std::vector<int64_t>* bounds) const;
  void set_state(const std::map<std::string, double>& st,
                 const std::vector<int64_t>& bounds);
  int64_t numel() const { return numel_; }

  // A completed call's seconds (all phases) and whether it ran dense.
  struct CallTime {
    double seconds;
    bool dense;
  };
  // Record every completed call's time from now on (algo="auto" measures
  // its choice on the calls DDP's C++ hook runs, without Python per call).
  void record_times(bool on);
  // The calls completed since the last take (a count) and the latest
  // kRecordedTimes of their times, oldest first; the record starts again.
  std::pair<int64_t, std::vector<CallTime>> take_times();
  static constexpr size_t kRecordedTimes = 1024;

 private:
  c10::intrusive_ptr<c10d::Work> submit(const at::Tensor& t,
                                        bool complete_on_worker);

  c10::intrusive_ptr<SparseBackend> backend_;
  std::shared_ptr<State> state_;
  int64_t numel_;
  std::string algo_;
};

}  // namespace pg_sparse
