#include "bucket.hpp"

#include <c10/util/Exception.h>

#include <utility>
#include <vector>

#include "cuda_side.hpp"
#include "params.hpp"
#include "status.hpp"

extern "C" {
#include <pg_sparse/ops.h>
}

namespace pg_sparse {

struct SparseBucket::State {
  CommHandle comm;  // keeps the transport alive as long as the bucket
  pgs_bucket_t* bucket = nullptr;
  pgs_config_t config{};
  std::shared_ptr<CudaSide> cuda;  // set once the bucket moved to a GPU
  mutable std::mutex mutex;        // the worker's call vs. readers of the state
  pgs_stats_t last{};
  bool record = false;    // record_times
  int64_t completed = 0;  // calls since the last take_times
  // The latest of them: a ring of kRecordedTimes, reserved when recording
  // starts, so a call allocates nothing; once full, times[next] is oldest.
  std::vector<SparseBucket::CallTime> times;
  size_t next = 0;
  ~State() { pgs_bucket_destroy(bucket); }
};

namespace {

#ifdef PGS_SHIM_CUDA
// First CUDA call (worker thread): rebuild the bucket on the GPU's transport
// and ops, carrying over whatever state was restored on the host one.
void move_to_cuda(SparseBucket::State& s, const std::shared_ptr<CudaSide>& side,
                  int64_t n) {
  std::vector<float> resid(n);
  std::vector<int64_t> bounds(pgs_comm_size(s.comm.get()) + 1);
  pgs_bucket_state_t st{};
  check(pgs_bucket_get_residual(s.bucket, resid.data()),
        "reading the residual");
  check(pgs_bucket_get_state(s.bucket, &st, bounds.data()), "reading state");
  pgs_bucket_t* b = nullptr;
  const int created = pgs_bucket_create(
      &s.config, cuda_comm(*side), cuda_ops(*side), static_cast<size_t>(n), &b);
  check(created, "creating a sparse bucket on the GPU",
        created == PGS_ERR_INVALID ? invalid_params() : std::string());
  int rc = pgs_bucket_set_residual(b, resid.data());
  if (rc == PGS_OK)
    rc = pgs_bucket_set_state(b, &st, st.have_bounds ? bounds.data() : nullptr);
  if (rc != PGS_OK) pgs_bucket_destroy(b);
  check(rc, "moving the bucket state to the GPU");
  pgs_bucket_destroy(s.bucket);
  s.bucket = b;
  s.cuda = side;
}
#endif

// The call just finished into the record (under the state's lock).
void record_call(SparseBucket::State& s) {
  double seconds = 0;
  for (int p = 0; p < PGS_PHASE_COUNT; ++p) seconds += s.last.time_s[p];
  const SparseBucket::CallTime t{seconds, s.last.dense != 0};
  if (s.times.size() < SparseBucket::kRecordedTimes) {
    s.times.push_back(t);
  } else {
    s.times[s.next] = t;
    s.next = (s.next + 1) % SparseBucket::kRecordedTimes;
  }
  ++s.completed;
}

}  // namespace

namespace {

pgs_dtype_t wire_dtype_of(const std::string& name) {
  if (name == "float32") return PGS_FLOAT32;
  if (name == "float16") return PGS_FLOAT16;
  if (name == "bfloat16") return PGS_BFLOAT16;
  TORCH_CHECK_VALUE(false, "pg_sparse: unknown wire type '", name,
                    "' (float32, float16 or bfloat16)");
}

std::string describe_failure(int st, int64_t n, const std::string& algo) {
  if (st == PGS_ERR_MISMATCH)
    return "bucket sizes or sparse settings differ across ranks (this rank: "
           "numel " +
           std::to_string(n) + ", algo " + algo +
           "); every rank must register the same model and SparseState "
           "(algo, density, wire_dtype, bucket dtypes)";
  if (st == PGS_ERR_NONFINITE)
    return "a gradient bucket holds NaN or Inf on some rank";
  return "";
}

}  // namespace

SparseBucket::SparseBucket(const c10::intrusive_ptr<c10d::Backend>& backend,
                           int64_t numel, const BucketConfig& config)
    : numel_(numel), algo_(config.algo) {
  backend_ = c10::dynamic_intrusive_pointer_cast<SparseBackend>(backend);
  TORCH_CHECK_TYPE(backend_,
                   "pg_sparse: the process group's backend is not 'sparse'; "
                   "call dist.init_process_group(backend='sparse')");
  pgs_config_t c = PGS_CONFIG_INIT;
  TORCH_CHECK_VALUE(pgs_algo_from_name(config.algo.c_str(), &c.algo) == PGS_OK,
                    "pg_sparse: unknown algorithm '", config.algo, "'");
  c.density = config.density;
  c.warmup_steps = config.warmup_steps;
  c.tau = config.tau;
  c.tau_prime = config.tau_prime;
  c.global_factor = config.global_factor;
  TORCH_CHECK_VALUE(config.nonfinite == "raise" || config.nonfinite == "skip",
                    "pg_sparse: nonfinite must be 'raise' or 'skip', got '",
                    config.nonfinite, "'");
  const bool skip = config.nonfinite == "skip";
  c.check_finite = !config.check_finite ? 0 : skip ? PGS_FINITE_EXACT : 1;
  c.wire_dtype = wire_dtype_of(config.wire);
  TORCH_CHECK_VALUE(
      pgs_estimator_from_name(config.estimator.c_str(), &c.estimator) == PGS_OK,
      "pg_sparse: unknown estimator '", config.estimator, "'");
  TORCH_CHECK_VALUE(numel > 0, "pg_sparse: empty bucket");
  state_ = std::make_shared<State>();
  state_->comm = backend_->comm();
  state_->config = c;
  int st = pgs_bucket_create(&c, state_->comm.get(), pgs_ops_cpu(),
                             static_cast<size_t>(numel), &state_->bucket);
  const std::string bad_env =
      st == PGS_ERR_INVALID ? invalid_params() : std::string();
  TORCH_CHECK_VALUE(bad_env.empty(), "pg_sparse: creating a sparse bucket: ",
                    "invalid parameter ", bad_env,
                    " (see `python -m pg_sparse params`)");
  if (st == PGS_ERR_INVALID)
    TORCH_CHECK_VALUE(false, "pg_sparse: invalid sparse settings (density ",
                      config.density, " must be in (0, 1], tau and tau_prime ",
                      ">= 1, warmup_steps >= 0, global_factor ",
                      config.global_factor, " in [1, 1e6])");
  check(st, "creating a sparse bucket");
}

c10::intrusive_ptr<c10d::Work> SparseBucket::submit(const at::Tensor& t,
                                                    bool complete_on_worker) {
  auto dtype = t.scalar_type();
  TORCH_CHECK_TYPE(
      dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16,
      "pg_sparse: sparse allreduce needs a float32, float16 or "
      "bfloat16 bucket, got ",
      dtype);
  TORCH_CHECK_VALUE(t.numel() == numel_, "pg_sparse: bucket has ", t.numel(),
                    " elements but this state was made for ", numel_);
  TORCH_CHECK(t.is_contiguous(),
              "pg_sparse: sparse allreduce needs a "
              "contiguous bucket");
  Route route = backend_->route({t});  // checks the device, prepares streams
  std::shared_ptr<CudaSide> side;
  if (t.is_cuda()) side = backend_->cuda_side(t.device().index());
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    TORCH_CHECK(!state_->cuda || t.is_cuda(),
                "pg_sparse: this bucket's state lives on the GPU; got a CPU "
                "tensor");
  }
  auto state = state_;
  std::string algo = algo_;
  int64_t n = numel_;
  return backend_->enqueue(
      c10d::OpType::ALLREDUCE, "pg_sparse:sparse_allreduce", {t},
      [state, t, algo, n, side, complete_on_worker,
       skip = state->config.check_finite == PGS_FINITE_EXACT] {
        std::lock_guard<std::mutex> lock(state->mutex);
#ifdef PGS_SHIM_CUDA
        if (side && !state->cuda) move_to_cuda(*state, side, n);
#endif
        // The C core computes in fp32; half buckets go through an fp32 copy
        // (on the comm stream for GPU buckets: the task runs on it), and
        // their values travel in the config's wire type.
        at::Tensor work = t.scalar_type() == at::kFloat ? t : t.to(at::kFloat);
        float* p = work.data_ptr<float>();
        // DDP's reducer only queues work after the bucket on the stream:
        // its call leaves the device's checks to the next call's start
        // (pgs_bucket_allreduce_deferred), so its future completes as soon
        // as the kernels are queued. (A half bucket's copy back below is
        // queued on the same stream.)
        int st = complete_on_worker
                     ? pgs_bucket_allreduce_deferred(state->bucket, p, p)
                     : pgs_bucket_allreduce(state->bucket, p, p);
        pgs_bucket_stats(state->bucket, &state->last);
        if (state->record) record_call(*state);
        if (st == PGS_ERR_NONFINITE && skip) {
          // Every rank sees the flag alike: all skip this step together.
          work.zero_();
          st = PGS_OK;
        }
        if (st != PGS_OK)
          check(st, "sparse allreduce (" + algo + ")",
                describe_failure(st, n, algo) +
                    (complete_on_worker &&
                             (st == PGS_ERR_INDEX || st == PGS_ERR_INVALID)
                         ? "DDP's calls report the device's checks at the "
                           "start of the next call, so this may be an earlier "
                           "call's"
                         : ""));
        if (!work.is_same(t)) t.copy_(work);
      },
      c10d::kUnsetTimeout, route.dev, complete_on_worker);
}

pgs_stats_t SparseBucket::stats() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->last;
}

std::map<std::string, std::vector<int64_t>> SparseBucket::phase_words() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  const pgs_stats_t& s = state_->last;
  return {{"sent", {s.words_sent, s.words_sent + PGS_PHASE_COUNT}},
          {"recv", {s.words_recv, s.words_recv + PGS_PHASE_COUNT}}};
}

at::Tensor SparseBucket::residual() const {
  at::Tensor r = at::empty({numel_}, at::kFloat);
  std::lock_guard<std::mutex> lock(state_->mutex);
  check(pgs_bucket_get_residual(state_->bucket, r.data_ptr<float>()),
        "reading the residual");
  return r;
}

void SparseBucket::set_density(double density) {
  TORCH_CHECK_VALUE(density > 0.0 && density <= 1.0,
                    "pg_sparse: density must be in (0, 1], got ", density);
  std::lock_guard<std::mutex> lock(state_->mutex);
  check(pgs_bucket_set_density(state_->bucket, density), "setting the density");
}

void SparseBucket::record_times(bool on) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->record = on;
  if (on) state_->times.reserve(kRecordedTimes);
}

std::pair<int64_t, std::vector<SparseBucket::CallTime>>
SparseBucket::take_times() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  auto& ring = state_->times;
  std::pair<int64_t, std::vector<CallTime>> out{state_->completed, {}};
  out.second.reserve(ring.size());
  out.second.insert(out.second.end(), ring.begin() + state_->next, ring.end());
  out.second.insert(out.second.end(), ring.begin(),
                    ring.begin() + state_->next);
  state_->completed = 0;
  state_->next = 0;
  ring.clear();  // keeps the reserved ring
  return out;
}

void SparseBucket::set_dense(bool dense) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  check(pgs_bucket_set_dense(state_->bucket, dense ? 1 : 0),
        "choosing dense or sparse");
}

void SparseBucket::scale_residual(const at::Tensor& factor) {
  TORCH_CHECK_VALUE(factor.numel() == numel_, "pg_sparse: factor has ",
                    factor.numel(), " elements, bucket has ", numel_);
  at::Tensor f = factor.to(at::kFloat).contiguous().cpu();
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (!state_->cuda) {
    check(pgs_bucket_scale_residual(state_->bucket, f.data_ptr<float>()),
          "scaling the residual");
    return;
  }
  // A device residual goes through host memory: the core's CUDA table has
  // no mul yet, and the bucket's stream is not torch's.
  at::Tensor r = at::empty({numel_}, at::kFloat);
  check(pgs_bucket_get_residual(state_->bucket, r.data_ptr<float>()),
        "reading the residual");
  r.mul_(f);
  check(pgs_bucket_set_residual(state_->bucket, r.data_ptr<float>()),
        "scaling the residual");
}

void SparseBucket::set_residual(const at::Tensor& r) {
  TORCH_CHECK_VALUE(r.numel() == numel_, "pg_sparse: residual has ", r.numel(),
                    " elements, bucket has ", numel_);
  at::Tensor f = r.to(at::kFloat).contiguous().cpu();
  std::lock_guard<std::mutex> lock(state_->mutex);
  check(pgs_bucket_set_residual(state_->bucket, f.data_ptr<float>()),
        "restoring the residual");
}

std::map<std::string, double> SparseBucket::get_state(
    std::vector<int64_t>* bounds) const {
  pgs_bucket_state_t st{};
  std::vector<int64_t> b(backend_->getSize() + 1);
  std::lock_guard<std::mutex> lock(state_->mutex);
  check(pgs_bucket_get_state(state_->bucket, &st, b.data()), "reading state");
  *bounds = st.have_bounds ? b : std::vector<int64_t>{};
  return {{"step", (double)st.step},
          {"local_threshold", st.local_threshold},
          {"global_threshold", st.global_threshold}};
}

void SparseBucket::set_state(const std::map<std::string, double>& m,
                             const std::vector<int64_t>& bounds) {
  pgs_bucket_state_t st{};
  st.step = static_cast<int64_t>(m.at("step"));
  st.local_threshold = m.at("local_threshold");
  st.global_threshold = m.at("global_threshold");
  st.have_bounds = bounds.empty() ? 0 : 1;
  TORCH_CHECK_VALUE(
      bounds.empty() || (int)bounds.size() == backend_->getSize() + 1,
      "pg_sparse: saved state is for a different world size");
  std::lock_guard<std::mutex> lock(state_->mutex);
  check(pgs_bucket_set_state(state_->bucket, &st,
                             bounds.empty() ? nullptr : bounds.data()),
        "restoring state");
}

}  // namespace pg_sparse
