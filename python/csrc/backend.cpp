#include "backend.hpp"

#include <c10/util/Exception.h>

#include <cstdio>

#include "collectives.hpp"
#include "cuda_p2p.hpp"
#include "cuda_side.hpp"
#include "params.hpp"
#include "status.hpp"

namespace pg_sparse {

using namespace std::chrono_literals;

SparseWork::SparseWork(int rank, c10d::OpType type, const char* title,
                       std::vector<at::Tensor> outputs,
                       std::shared_ptr<DeviceHooks> dev)
    : c10d::Work(rank, type, title),
      outputs_(std::move(outputs)),
      dev_(std::move(dev)),
      future_(dev_ ? c10::make_intrusive<c10::ivalue::Future>(
                         c10::ListType::create(c10::TensorType::get()),
                         dev_->devices)
                   : c10::make_intrusive<c10::ivalue::Future>(
                         c10::ListType::create(c10::TensorType::get()))),
      device_failure_(dev_ ? std::make_shared<DeviceFailure>() : nullptr) {}

void SparseWork::complete(std::exception_ptr error) {
  if (done_.exchange(true)) return;
  if (error) {
    future_->setError(error);
    finish(error);
    return;
  }
  // A CUDA-aware future records an event on the current stream: make that
  // the comm stream, so consumers wait for the task and not for more.
  auto mark = [this] { future_->markCompleted(c10::IValue(outputs_)); };
  if (dev_)
    dev_->on_stream(mark);
  else
    mark();
  finish();
}

void SparseWork::synchronize() {
  if (!dev_) return;
  device_failure_->rethrow_if_set();
  dev_->block_current();
}

namespace {

// Completion threads a backend may grow to; each one beyond the first exists
// because all others were busy in callbacks at once.
constexpr size_t kMaxCompleters = 64;

}  // namespace

SparseBackend::SparseBackend(int rank, int size, CommHandle comm,
                             CommHandle p2p, std::string transport,
                             std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size),
      comm_(std::move(comm)),
      p2p_comm_(std::move(p2p)),
      transport_(std::move(transport)),
      timeout_(timeout),
      unaborted_wait_(static_cast<int64_t>(
          1000 * (param_float(PGS_PARAM_GLOO_TIMEOUT_SLACK_S) + 5))) {
  p2p_ = std::make_unique<PointToPoint>(
      rank, timeout_,
      [this](c10::intrusive_ptr<SparseWork> work, std::exception_ptr error) {
        std::lock_guard<std::mutex> lock(mutex_);
        push_done(Done{std::move(work), error});
      });
  {
    std::lock_guard<std::mutex> lock(mutex_);
    idle_completers_ = 1;
    completers_.emplace_back(&SparseBackend::completion_loop, this);
  }
  worker_ = std::thread(&SparseBackend::worker_loop, this);
  watchdog_ = std::thread(&SparseBackend::watchdog_loop, this);
  init();
}

SparseBackend::~SparseBackend() { shutdown(); }

void SparseBackend::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_) return;
    stop_ = true;
  }
  work_cv_.notify_all();
  done_cv_.notify_all();
  watchdog_cv_.notify_all();
  bool stuck = false;
  {
    // The worker drains its queue first; the watchdog still guards that.
    std::unique_lock<std::mutex> lock(mutex_);
    stopped_cv_.wait(lock, [&] { return worker_done_ || !broken_.empty(); });
    // An aborted transport returns from the stuck call at once; gloo, which
    // has no abort, fails it on its own timer, PG_SPARSE_GLOO_TIMEOUT_SLACK_S
    // after the watchdog (_backend.py), so the worker is joined there too
    // (5 s later), never detached while the call can still return.
    if (!broken_.empty())
      stopped_cv_.wait_for(
          lock, aborted_ ? std::chrono::milliseconds(10000) : unaborted_wait_,
          [&] { return worker_done_; });
    stuck = !worker_done_;
  }
  // A worker stuck in a transport call after a timeout can never be joined.
  if (worker_.joinable()) stuck ? worker_.detach() : worker_.join();
  if (watchdog_.joinable()) watchdog_.join();
  // Every message still in flight is withdrawn; the channels outlive this.
  p2p_->shutdown();
  std::vector<std::thread> pool;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pool_closed_ = true;
    pool.swap(completers_);
  }
  done_cv_.notify_all();
  // shutdown() may run inside a completion callback: never join oneself.
  for (auto& t : pool) {
    if (!t.joinable()) continue;
    t.get_id() == std::this_thread::get_id() ? t.detach() : t.join();
  }
}

c10::intrusive_ptr<c10d::Work> SparseBackend::enqueue(
    c10d::OpType type, const char* title, std::vector<at::Tensor> outputs,
    std::function<void()> fn, std::chrono::milliseconds timeout,
    std::shared_ptr<DeviceHooks> dev, bool complete_on_worker) {
  auto work = c10::make_intrusive<SparseWork>(rank_, type, title,
                                              std::move(outputs), dev);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    check_usable();
    ++seq_;
    if (timeout == c10d::kUnsetTimeout) timeout = timeout_;
    queue_.push_back(Task{work, std::move(dev), std::move(fn), timeout, title,
                          complete_on_worker});
  }
  work_cv_.notify_one();
  return work;
}

void SparseBackend::check_usable() const {
  if (!broken_.empty()) C10_THROW_ERROR(DistBackendError, broken_);
  TORCH_CHECK(!stop_, "pg_sparse: the backend has been shut down");
}

void SparseBackend::push_done(Done d) {
  done_.push_back(std::move(d));
  if (idle_completers_ == 0 && !pool_closed_ &&
      completers_.size() < kMaxCompleters) {
    // Every completer is inside a callback (which may wait for this very
    // Work): add one rather than deadlock.
    ++idle_completers_;
    completers_.emplace_back(&SparseBackend::completion_loop, this);
  }
  done_cv_.notify_one();
}

bool SparseBackend::next_task(Task* task) {
  std::unique_lock<std::mutex> lock(mutex_);
  work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
  if (queue_.empty()) {
    worker_done_ = true;
    stopped_cv_.notify_all();
    done_cv_.notify_all();
    watchdog_cv_.notify_all();
    return false;
  }
  *task = std::move(queue_.front());
  queue_.pop_front();
  running_ = task->work;
  running_title_ = task->title;
  running_since_ = std::chrono::steady_clock::now();
  running_timeout_ = task->timeout;
  running_dev_ = task->dev;
  return true;
}

void SparseBackend::worker_loop() {
  for (;;) {
    Task task;
    if (!next_task(&task)) return;
    std::exception_ptr error;
    try {
      if (task.dev) {
        task.dev->on_stream([&task] {
          task.fn();
          // The reducer's future first: the event it records must not
          // follow record_done's host function, which holds the stream
          // until the driver's callback thread has run it. (Its Work's own
          // event, recorded next, is for wait(), which only the holders of
          // the Work call, and no one but this task holds it.)
          if (task.complete_on_worker) task.work->complete(nullptr);
          task.dev->record_done();
        });
      } else {
        task.fn();
      }
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // A device task returns once its kernels are queued, and a kernel
      // waiting for a dead peer never ends: watch it until the comm stream
      // passes its end. Not once a timeout broke the group: the abort ended
      // it.
      if (!error && task.dev && task.dev->finished && broken_.empty())
        in_flight_.push_back(InFlight{
            task.work->device_failure(), task.dev->finished, task.dev->abort,
            task.title, running_since_, task.timeout});
      running_.reset();
      running_dev_.reset();
      if (!task.complete_on_worker) push_done(Done{task.work, error});
    }
    // Outside the lock: completing wakes the waiter (a device task that
    // succeeded completed above, before its host function).
    if (task.complete_on_worker) task.work->complete(error);
  }
}

void SparseBackend::fail_all(const std::string& why) {
  broken_ = why;
  auto error = std::make_exception_ptr(c10::DistBackendError(
      c10::SourceLocation{__func__, __FILE__, __LINE__}, why));
  if (running_) push_done(Done{running_, error});
  for (auto& t : queue_) push_done(Done{t.work, error});
  queue_.clear();
  // Their Works completed when the kernels were queued; the abort that
  // follows ends those kernels early, so wait() must not report success.
  for (auto& f : in_flight_) f.failure->set(error);
  stopped_cv_.notify_all();
}

SparseBackend::InFlight* SparseBackend::late_in_flight(
    std::chrono::steady_clock::time_point now) {
  // finished() reads a flag (no CUDA call): the mutex is held briefly.
  std::erase_if(in_flight_, [](const InFlight& f) { return f.finished(); });
  for (auto& f : in_flight_)
    if (now - f.since > f.timeout) return &f;
  return nullptr;
}

void SparseBackend::abort_transports() {
  // One CUDA side per group: any device task's hooks reach its transport.
  std::function<bool()> abort_device;
  if (running_dev_)
    abort_device = running_dev_->abort;
  else if (!in_flight_.empty())
    abort_device = in_flight_.front().abort;
  aborted_ = comm_ && pgs_comm_abort(comm_.get()) == PGS_OK;
  if (abort_device && abort_device()) aborted_ = true;
}

void SparseBackend::time_out(const char* title,
                             std::chrono::milliseconds timeout, bool device) {
  std::string op = title;
  if (op.rfind("pg_sparse:", 0) == 0) op = op.substr(10);
  // Torch's own timeout tests look for " Timed out ".
  const std::string why =
      "pg_sparse: Timed out after " + std::to_string(timeout.count()) +
      " ms waiting for " + op + " on rank " + std::to_string(rank_) +
      (device ? " (its kernels were still running on the GPU: " : " (") +
      "a peer died, stalled or called a different collective); the process "
      "group is no longer usable" +
      (in_flight_.empty() ? ""
                          : " and its CUDA collectives in flight were "
                            "aborted (their outputs are undefined)");
  fail_all(why);
  // The next call raises it, but a program may never make one (the GPU
  // collective's output read and nothing after): say it now, as torch's
  // NCCL watchdog does. Not through pgs_log: Python's logging drops it
  // unless configured.
  std::fprintf(stderr, "%s\n", why.c_str());
  // End the stuck call where the transport can (MPI, NCCL): the worker then
  // returns and can be joined instead of left behind, and ncclCommAbort
  // makes the stuck kernels return, so streams waiting on them move on.
  abort_transports();
  in_flight_.clear();
}

void SparseBackend::watchdog_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  // After shutdown, device tasks still in flight are watched to their end:
  // destroying a communicator under a kernel that waits for a dead peer
  // would wait forever.
  while (!(stop_ && (worker_done_ || !broken_.empty()) && in_flight_.empty())) {
    watchdog_cv_.wait_for(lock, 100ms);
    if (!broken_.empty()) continue;
    const auto now = std::chrono::steady_clock::now();
    if (running_ && now - running_since_ > running_timeout_)
      time_out(running_title_, running_timeout_, false);
    else if (const InFlight* late = late_in_flight(now))
      time_out(late->title, late->timeout, true);
  }
}

void SparseBackend::completion_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    done_cv_.wait(lock, [&] {
      return !done_.empty() ||
             (stop_ && (worker_done_ || !broken_.empty()) && pool_closed_);
    });
    if (done_.empty()) {
      --idle_completers_;
      return;
    }
    Done d = std::move(done_.front());
    done_.pop_front();
    --idle_completers_;
    lock.unlock();
    d.work->complete(d.error);  // runs the future's callbacks
    d = Done{};
    lock.lock();
    ++idle_completers_;
  }
}

// --- routing and point-to-point (the collectives are in backend_ops.cpp) --

Route SparseBackend::route(const std::vector<at::Tensor>& tensors) {
  const at::Tensor& first = tensors.at(0);
  for (const auto& t : tensors)
    TORCH_CHECK(t.device() == first.device(),
                "pg_sparse: all tensors of one call must be on one device");
  if (!first.is_cuda()) {
    CommHandle comm = comm_;
    return Route{[comm] { return comm.get(); }, nullptr};
  }
#ifdef PGS_SHIM_CUDA
  std::shared_ptr<CudaSide> side = cuda_side(first.device().index());
  auto dev = cuda_prepare(side, tensors);
  return Route{[side] { return cuda_comm(*side); }, dev};
#else
  TORCH_CHECK(false, "pg_sparse: this build has no CUDA support");
#endif
}

c10::intrusive_ptr<c10d::Work> SparseBackend::post_p2p(at::Tensor t, int peer,
                                                       int tag, bool is_send) {
  Message m;
  m.channel = p2p_comm_.get();
  m.tensor = std::move(t);
  m.peer = peer;
  m.tag = tag;
  m.is_send = is_send;
  if (m.tensor.is_cuda()) {
#ifdef PGS_SHIM_CUDA
    std::shared_ptr<CudaSide> side = cuda_side(m.tensor.device().index());
    {
      std::lock_guard<std::mutex> lock(cuda_mutex_);
      if (!cuda_p2p_)
        cuda_p2p_ =
            make_cuda_p2p(side, store_, rank_, size_, p2p_comm_, transport_);
      m.channel = cuda_p2p_.get();
    }
    cuda_p2p_prepare(*side, m);
#else
    TORCH_CHECK(false, "pg_sparse: this build has no CUDA support");
#endif
  }
  return p2p_->post(std::move(m));
}

std::string SparseBackend::cuda_transport() {
#ifdef PGS_SHIM_CUDA
  std::lock_guard<std::mutex> lock(cuda_mutex_);
  if (cuda_) return cuda_side_kind(*cuda_);
#endif
  return "";
}

std::shared_ptr<CudaSide> SparseBackend::cuda_side(int device) {
#ifdef PGS_SHIM_CUDA
  std::lock_guard<std::mutex> lock(cuda_mutex_);
  if (!cuda_) {
    TORCH_CHECK(store_, "pg_sparse: no store to bootstrap NCCL");
    cuda_ =
        cuda_side_create(store_, rank_, size_, device, global_ranks_, staging_);
  }
  TORCH_CHECK(cuda_side_device(*cuda_) == device,
              "pg_sparse: one process group serves one GPU per rank (device ",
              cuda_side_device(*cuda_), "), got a tensor on cuda:", device);
  return cuda_;
#else
  (void)device;
  return nullptr;
#endif
}

namespace {

// Tags at and above this are the gloo transport's own messages.
constexpr int kMaxUserTag = (1 << 30) - 1;

}  // namespace

at::Tensor SparseBackend::check_p2p(std::vector<at::Tensor>& tensors, int peer,
                                    int tag, bool is_send) {
  const char* op = is_send ? "send" : "recv";
  at::Tensor t = single_tensor(tensors, op);
  TORCH_CHECK(peer >= 0 && peer < size_ && peer != rank_, "pg_sparse::", op,
              is_send ? ": bad destination rank " : ": bad source rank ", peer);
  TORCH_CHECK(tag >= 0 && tag <= kMaxUserTag, "pg_sparse::", op, ": tag ", tag,
              " out of range [0, ", kMaxUserTag, "]");
  std::lock_guard<std::mutex> lock(mutex_);
  check_usable();
  return t;
}

c10::intrusive_ptr<c10d::Work> SparseBackend::send(
    std::vector<at::Tensor>& tensors, int dst, int tag) {
  return post_p2p(check_p2p(tensors, dst, tag, true), dst, tag, true);
}

c10::intrusive_ptr<c10d::Work> SparseBackend::recv(
    std::vector<at::Tensor>& tensors, int src, int tag) {
  return post_p2p(check_p2p(tensors, src, tag, false), src, tag, false);
}

c10::intrusive_ptr<c10d::Work> SparseBackend::recvAnysource(
    std::vector<at::Tensor>& tensors, int tag) {
  // Checked as a receive from a valid peer; the channel takes any sender
  // (Open MPI and gloo; NCCL matches no tags or sources and refuses it).
  TORCH_CHECK(size_ > 1, "pg_sparse::recvAnysource: no other rank");
  at::Tensor t = check_p2p(tensors, rank_ == 0 ? 1 : 0, tag, false);
  return post_p2p(t, PGS_ANY_SOURCE, tag, false);
}

}  // namespace pg_sparse
