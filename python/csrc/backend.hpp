// The "sparse" c10d backend: a thin c10d::Backend over libpgsparse.
//
// Every collective becomes a task on one worker thread, run in submission
// order (ProcessGroupMPI's queue pattern) over a pgs_comm transport. Futures
// are completed off the worker, by a pool of completion threads that grows
// when every completer is busy in a callback: a then() callback that launches
// a collective and waits on it (PowerSGD does) needs another thread to
// complete that collective. A separate watchdog thread fails a task that runs
// past its timeout, with its Work and every queued Work, and the backend
// refuses new work, so a dead or stalled peer raises on every surviving rank
// instead of hanging.
//
// The user's point-to-point messages do not go through the worker: they are
// requests on point-to-point channels of their own (p2p.hpp), posted at
// once, since a ring of isend + irecv would deadlock with each worker
// blocked in its send while the matching receive waits in the peer's queue.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include <pg_sparse/comm.h>
}

#include "device.hpp"
#include "p2p.hpp"

namespace pg_sparse {

// Owns a pgs_comm_t; destroyed when the last user (backend, bucket) lets go.
using CommHandle = std::shared_ptr<pgs_comm_t>;

class SparseWork : public c10d::Work {
 public:
  // @p dev: device tensors (CUDA-aware future, stream-ordered completion).
  SparseWork(int rank, c10d::OpType type, const char* title,
             std::vector<at::Tensor> outputs,
             std::shared_ptr<DeviceHooks> dev = nullptr);
  std::vector<at::Tensor> result() override { return outputs_; }
  // Device tensors: the caller's stream waits for the task; the CPU doesn't.
  // Throws once the watchdog aborted the task's kernels (wait() calls it).
  void synchronize() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    return future_;
  }
  // Completes once: the first caller (worker result or watchdog) wins.
  void complete(std::exception_ptr error);
  // Where the watchdog says that the task finished on the host but its
  // kernels timed out on the device and were aborted: the outputs are
  // undefined, and wait() says so. Null for host tensors.
  const std::shared_ptr<DeviceFailure>& device_failure() const {
    return device_failure_;
  }
  // The sender of a finished receive (recvAnysource asks for it).
  int sourceRank() const override { return source_; }
  void set_source(int rank) { source_ = rank; }

 private:
  std::vector<at::Tensor> outputs_;
  std::shared_ptr<DeviceHooks> dev_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::atomic<bool> done_{false};
  std::atomic<int> source_{-1};
  // Device Works only: a host Work's call allocates nothing for it.
  std::shared_ptr<DeviceFailure> device_failure_;
};

class CudaSide;

// Where a collective runs: the host transport, or the CUDA side's.
struct Route {
  std::function<pgs_comm_t*()> comm;  // called on the worker thread
  std::shared_ptr<DeviceHooks> dev;   // null for host tensors
};

class SparseBackend : public c10d::Backend {
 public:
  // @p p2p: the host channel of the user's messages (isend/irecv only).
  SparseBackend(int rank, int size, CommHandle comm, CommHandle p2p,
                std::string transport, std::chrono::milliseconds timeout);
  ~SparseBackend() override;

  const std::string getBackendName() const override { return "sparse"; }
  const std::string& transport() const { return transport_; }
  // The CUDA tensors' transport (auto resolved), "" before their first use.
  std::string cuda_transport();
  const CommHandle& comm() const { return comm_; }

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output, at::Tensor& input,
      std::vector<int64_t>& output_splits, std::vector<int64_t>& input_splits,
      const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts) override;
  // The rest of what gloo implements (backend_ops.cpp).
  // Sparse tensors on a GPU come here (on the CPU, to allreduce).
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts) override {
    return allreduce(tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllToAllOptions& opts) override;
  // One count per group, bumped by every queued collective (what
  // TORCH_DISTRIBUTED_DEBUG=DETAIL's wrapper asks for at init).
  void setSequenceNumberForGroup() override {
    std::lock_guard<std::mutex> lock(mutex_);
    seq_ = 0;
  }
  uint64_t getSequenceNumberForGroup() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return seq_;
  }
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  void shutdown() override;
  void abort() override { shutdown(); }

  // Queue @p fn on the worker; its Work completes with @p outputs. Used by
  // the collectives above and by sparse buckets (bucket.cpp). With
  // @p complete_on_worker the worker completes the Work itself, without the
  // hop to a completer: only for a future nobody can hang a callback on
  // that waits for a later task (the one DDP's reducer gets from a C++ hook).
  c10::intrusive_ptr<c10d::Work> enqueue(
      c10d::OpType type, const char* title, std::vector<at::Tensor> outputs,
      std::function<void()> fn,
      std::chrono::milliseconds timeout = c10d::kUnsetTimeout,
      std::shared_ptr<DeviceHooks> dev = nullptr,
      bool complete_on_worker = false);

  // The transport for these tensors (all on one device), preparing the
  // stream handoff for CUDA tensors. Caller's thread.
  Route route(const std::vector<at::Tensor>& tensors);
  // The store, for bootstrapping device transports (set by the creator).
  void set_store(c10::intrusive_ptr<c10d::Store> store,
                 std::vector<int64_t> global_ranks) {
    store_ = std::move(store);
    global_ranks_ = std::move(global_ranks);
  }
  // How the CUDA side makes a host-memory transport of its own over the
  // group, to stage device tensors through (set by the creator).
  void set_staging(std::function<pgs_comm_t*()> make_host_comm) {
    staging_ = std::move(make_host_comm);
  }
  // CUDA side of @p device (created on first use); null without CUDA.
  std::shared_ptr<CudaSide> cuda_side(int device);

 private:
  // The one tensor of a send (@p is_send) or recv, checked with its peer and
  // tag, on a backend still usable.
  at::Tensor check_p2p(std::vector<at::Tensor>& tensors, int peer, int tag,
                       bool is_send);
  // Throws once a timeout broke the backend or after shutdown (mutex_ held).
  void check_usable() const;
  // The user's message of @p t: on the host channel, or the CUDA one
  // (created on first use), with what a CUDA message carries.
  c10::intrusive_ptr<c10d::Work> post_p2p(at::Tensor t, int peer, int tag,
                                          bool is_send);

  c10::intrusive_ptr<c10d::Store> store_;
  std::vector<int64_t> global_ranks_;
  std::function<pgs_comm_t*()> staging_;
  std::mutex cuda_mutex_;
  std::shared_ptr<CudaSide> cuda_;
  CommHandle cuda_p2p_;

  struct Task {
    c10::intrusive_ptr<SparseWork> work;
    std::shared_ptr<DeviceHooks> dev;
    std::function<void()> fn;
    std::chrono::milliseconds timeout;
    const char* title = "";  // a literal: no allocation per task
    bool complete_on_worker = false;
  };
  struct Done {
    c10::intrusive_ptr<SparseWork> work;
    std::exception_ptr error;
  };
  // A device task the worker finished queueing whose kernels may still run.
  // Holds nothing that owns CUDA objects, not even a weak reference to the
  // Work (whose last one runs its destructor): dropping an entry must not
  // destroy an event in the watchdog (see DeviceFailure).
  struct InFlight {
    std::shared_ptr<DeviceFailure> failure;  // the Work's
    std::function<bool()> finished;          // DeviceHooks::finished
    std::function<bool()> abort;             // DeviceHooks::abort
    const char* title;
    std::chrono::steady_clock::time_point since;  // the task's start
    std::chrono::milliseconds timeout;
  };

  void worker_loop();
  // The worker's next task (marked running); false once stopped with the
  // queue drained.
  bool next_task(Task* task);
  void completion_loop();
  void watchdog_loop();
  // With mutex_ held: queue a completion, adding a completer if none is idle.
  void push_done(Done d);
  // With mutex_ held: fail the running and queued Works, the device part of
  // those in flight, and every later call, with @p why.
  void fail_all(const std::string& why);
  // With mutex_ held: drop the device tasks that have finished; the first
  // still running past its timeout, else null.
  InFlight* late_in_flight(std::chrono::steady_clock::time_point now);
  // With mutex_ held: @p title timed out (on the device if @p device):
  // break the group, say so on stderr and abort every transport it may
  // be stuck in.
  void time_out(const char* title, std::chrono::milliseconds timeout,
                bool device);
  // With mutex_ held: abort the host transport and the CUDA side's.
  void abort_transports();

  CommHandle comm_;
  CommHandle p2p_comm_;
  std::unique_ptr<PointToPoint> p2p_;
  std::string transport_;
  std::chrono::milliseconds timeout_;
  // How long shutdown waits for a stuck call of a transport without abort
  // (gloo) to fail on its own timer: its slack past ours, plus 5 s.
  std::chrono::milliseconds unaborted_wait_;

  std::mutex mutex_;
  std::condition_variable work_cv_, done_cv_, watchdog_cv_, stopped_cv_;
  std::deque<Task> queue_;
  std::deque<Done> done_;
  // The task the worker is running, for the watchdog.
  c10::intrusive_ptr<SparseWork> running_;
  const char* running_title_ = "";
  std::chrono::steady_clock::time_point running_since_;
  std::chrono::milliseconds running_timeout_{0};
  std::shared_ptr<DeviceHooks> running_dev_;
  // Device tasks in queue order, until the comm stream passes their end.
  std::deque<InFlight> in_flight_;
  bool stop_ = false;
  bool worker_done_ = false;  // the worker drained its queue and returned
  bool pool_closed_ = false;  // shutdown is joining the completers
  int idle_completers_ = 0;   // completers waiting for a Done
  std::string broken_;        // set once a timeout has failed the backend
  bool aborted_ = false;      // the transport took the watchdog's abort
  uint64_t seq_ = 0;          // collectives queued since the last reset
  std::thread worker_, watchdog_;
  std::vector<std::thread> completers_;
};

}  // namespace pg_sparse
