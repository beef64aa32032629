// Point-to-point messages of CUDA tensors (see cuda_p2p.hpp).
#ifdef PGS_SHIM_CUDA

#include "cuda_p2p.hpp"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cuda_side.hpp"
#include "status.hpp"

#include <pg_sparse/nccl_pair.h>

namespace pg_sparse {

namespace {

using Clock = std::chrono::steady_clock;
using Event = std::shared_ptr<at::cuda::CUDAEvent>;

// A Work on a CUDA tensor whose messages run on a stream known only later:
// the caller's stream waits for @p done (a no-op until it is recorded), the
// future is marked on the stream that on_stream gets by then.
c10::intrusive_ptr<SparseWork> make_work(int rank, bool is_send,
                                         const at::Tensor& t, const Event& done,
                                         std::shared_ptr<DeviceHooks>& hooks) {
  hooks = std::make_shared<DeviceHooks>();
  hooks->devices = {t.device()};
  hooks->on_stream = [](const std::function<void()>& fn) { fn(); };
  const auto dev = t.device().index();
  hooks->block_current = [done, dev] {
    done->block(c10::cuda::getCurrentCUDAStream(dev));
  };
  return c10::make_intrusive<SparseWork>(
      rank, is_send ? c10d::OpType::SEND : c10d::OpType::RECV,
      is_send ? "pg_sparse:send" : "pg_sparse:recv", std::vector<at::Tensor>{t},
      hooks);
}

void set_stream(DeviceHooks& hooks, c10::cuda::CUDAStream stream) {
  hooks.on_stream = [stream](const std::function<void()>& fn) {
    c10::cuda::CUDAStreamGuard guard(stream);
    fn();
  };
}

std::exception_ptr backend_error(const std::string& why) {
  return std::make_exception_ptr(c10::DistBackendError(
      c10::SourceLocation{__func__, __FILE__, __LINE__}, why));
}

size_t nbytes(const at::Tensor& t) {
  return static_cast<size_t>(t.numel()) * t.element_size();
}

// --- NCCL: a non-blocking two-rank communicator per peer and direction ----

class NcclPointToPoint : public PointToPoint {
 public:
  NcclPointToPoint(c10::intrusive_ptr<c10d::Store> store, int rank, int device)
      : store_(std::move(store)), rank_(rank), device_(device) {}
  ~NcclPointToPoint() override { shutdown(); }

  void attach(Deliver deliver, std::chrono::milliseconds timeout) override {
    deliver_ = std::move(deliver);
    timeout_ = timeout;
    thread_ = std::thread(&NcclPointToPoint::loop, this);
  }
  c10::intrusive_ptr<c10d::Work> send(at::Tensor& t, int dst,
                                      int tag) override {
    return post(t, dst, true);
  }
  c10::intrusive_ptr<c10d::Work> recv(at::Tensor& t, int src,
                                      int tag) override {
    return post(t, src, false);
  }
  void shutdown() override;

 private:
  struct Op {
    c10::intrusive_ptr<SparseWork> work;
    std::shared_ptr<DeviceHooks> hooks;
    at::Tensor tensor;  // kept until its message is on the pair's stream
    Event ready, done;  // on the caller's stream / after the message
    Clock::time_point since;
  };
  // The messages to one peer, or from it.
  struct Channel {
    int peer = 0;
    bool is_send = false;
    pgs_nccl_pair_t* pair = nullptr;
    bool busy = false;          // NCCL is still creating or posting
    std::optional<Op> posting;  // the message NCCL is posting
    std::deque<Op> queue;
    // Messages on the stream not yet finished there, oldest first: one past
    // the timeout aborts the pair instead of leaving the stream hung.
    std::deque<std::pair<Event, Clock::time_point>> running;
    // Backoff of the receiver's store polls while it waits for the id.
    Clock::time_point next_check{};
    std::chrono::microseconds backoff{50};
    std::string broken;  // once set, every message of the channel fails
  };
  using Finished = std::vector<
      std::pair<c10::intrusive_ptr<SparseWork>, std::exception_ptr>>;

  c10::intrusive_ptr<c10d::Work> post(at::Tensor& t, int peer, bool is_send);
  void loop();
  bool step(Channel& ch, Finished& out);
  bool create(Channel& ch, Finished& out);
  void finish(Channel& ch, Op& op, Finished& out);
  void expire(Channel& ch, Finished& out);
  void fail(Channel& ch, const std::string& why, Finished& out);
  std::string describe(const Channel& ch) const {
    return std::string(ch.is_send ? "send to" : "recv from") + " rank " +
           std::to_string(ch.peer);
  }

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_, device_;
  Deliver deliver_;
  std::chrono::milliseconds timeout_{0};
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::pair<int, bool>, Channel> channels_;
  bool stop_ = false;
  std::thread thread_;
};

c10::intrusive_ptr<c10d::Work> NcclPointToPoint::post(at::Tensor& t, int peer,
                                                      bool is_send) {
  TORCH_CHECK(t.device().index() == device_,
              "pg_sparse::", is_send ? "send" : "recv",
              ": one process group serves one GPU per rank (cuda:", device_,
              "), got a tensor on ", t.device());
  Op op;
  op.ready = std::make_shared<at::cuda::CUDAEvent>();
  op.done = std::make_shared<at::cuda::CUDAEvent>();
  op.work = make_work(rank_, is_send, t, op.done, op.hooks);
  op.tensor = t;
  op.since = Clock::now();
  if (nbytes(t) == 0) {
    deliver_(op.work, nullptr);
    return op.work;
  }
  // The message starts after everything the caller queued so far.
  op.ready->record(c10::cuda::getCurrentCUDAStream(t.device().index()));
  auto work = op.work;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(!stop_, "pg_sparse: the backend has been shut down");
    Channel& ch = channels_[{peer, is_send}];
    ch.peer = peer;
    ch.is_send = is_send;
    if (!ch.broken.empty()) C10_THROW_ERROR(DistBackendError, ch.broken);
    ch.queue.push_back(std::move(op));
  }
  cv_.notify_one();
  return work;
}

void NcclPointToPoint::loop() {
  using namespace std::chrono_literals;
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
  std::unique_lock<std::mutex> lock(mutex_);
  auto nap = std::chrono::microseconds(20);
  auto active = [&] {
    for (auto& [key, ch] : channels_)
      if (ch.busy || !ch.queue.empty() || !ch.running.empty()) return true;
    return false;
  };
  for (;;) {
    // Poll often while NCCL or a caller waits, else sleep until a message.
    if (active())
      cv_.wait_for(lock, nap, [&] { return stop_; });
    else
      cv_.wait_for(lock, 100ms, [&] { return stop_ || active(); });
    if (stop_) return;
    Finished finished;
    bool moved = false;
    for (auto& [key, ch] : channels_) moved |= step(ch, finished);
    nap = moved ? std::chrono::microseconds(20)
                : std::min<std::chrono::microseconds>(nap * 2, 1ms);
    if (finished.empty()) continue;
    lock.unlock();
    for (auto& [work, error] : finished) deliver_(work, error);
    lock.lock();
  }
}

// Moves one channel as far as NCCL lets it without waiting; true if it moved.
bool NcclPointToPoint::step(Channel& ch, Finished& out) {
  if (!ch.broken.empty()) return false;
  if (ch.pair == nullptr) return !ch.queue.empty() && create(ch, out);
  bool moved = false;
  while (!ch.running.empty() && ch.running.front().first->query()) {
    ch.running.pop_front();
    moved = true;
  }
  for (;;) {
    if (ch.busy) {
      int busy = 0;
      if (pgs_nccl_pair_test(ch.pair, &busy) != PGS_OK) {
        fail(ch, "pg_sparse: NCCL failed on the " + describe(ch), out);
        return true;
      }
      if (busy) break;
      ch.busy = false;
      moved = true;
      if (ch.posting) {
        finish(ch, *ch.posting, out);
        ch.posting.reset();
      }
    }
    if (ch.queue.empty()) break;
    Op op = std::move(ch.queue.front());
    ch.queue.pop_front();
    int st = pgs_nccl_pair_post(ch.pair, op.tensor.data_ptr(),
                                nbytes(op.tensor), op.ready->event());
    ch.posting = std::move(op);
    ch.busy = true;
    if (st != PGS_OK) {
      fail(ch,
           "pg_sparse: posting the " + describe(ch) +
               " failed: " + pgs_status_string(st),
           out);
      return true;
    }
  }
  expire(ch, out);
  return moved;
}

// The sender makes the pair's id and puts it in the store; the receiver
// joins once it is there.
bool NcclPointToPoint::create(Channel& ch, Finished& out) {
  const int src = ch.is_send ? rank_ : ch.peer;
  const int dst = ch.is_send ? ch.peer : rank_;
  const std::string key =
      "pg_sparse_p2p_" + std::to_string(src) + "_" + std::to_string(dst);
  std::vector<uint8_t> id(PGS_NCCL_ID_BYTES);
  try {
    if (ch.is_send) {
      check(pgs_nccl_make_id(id.data()), "ncclGetUniqueId");
      store_->set(key, id);
    } else {
      const auto now = Clock::now();
      if (now < ch.next_check) return false;
      if (!store_->check({key})) {
        ch.backoff = std::min<std::chrono::microseconds>(
            ch.backoff * 2, std::chrono::milliseconds(10));
        ch.next_check = now + ch.backoff;
        expire(ch, out);
        return false;
      }
      id = store_->get(key);
    }
  } catch (const std::exception& e) {
    fail(ch,
         std::string("pg_sparse: setting up the ") + describe(ch) + ": " +
             e.what(),
         out);
    return true;
  }
  int st = pgs_nccl_pair_create(id.data(), ch.is_send, &ch.pair);
  if (st != PGS_OK) {
    fail(ch,
         "pg_sparse: creating the NCCL communicator for the " + describe(ch) +
             " failed: " + pgs_status_string(st),
         out);
    return true;
  }
  ch.busy = true;
  return true;
}

// The message is on the pair's stream: the tensor's memory is kept for that
// stream, and the caller's stream (Work.wait) and the future wait for it.
void NcclPointToPoint::finish(Channel& ch, Op& op, Finished& out) {
  auto stream = c10::cuda::getStreamFromExternal(
      pgs_nccl_pair_stream(ch.pair), static_cast<c10::DeviceIndex>(device_));
  c10::cuda::CUDACachingAllocator::recordStream(op.tensor.storage().data_ptr(),
                                                stream);
  op.done->record(stream);
  ch.running.emplace_back(op.done, Clock::now());
  set_stream(*op.hooks, stream);
  out.emplace_back(op.work, nullptr);
}

// Fails the channel once a message has waited past the timeout: to be
// posted (its Work fails), or on the GPU (its Work has completed: the
// abort unblocks the stream, and the channel's later messages fail).
void NcclPointToPoint::expire(Channel& ch, Finished& out) {
  const auto now = Clock::now();
  const Op* oldest = ch.posting         ? &*ch.posting
                     : ch.queue.empty() ? nullptr
                                        : &ch.queue.front();
  const bool waiting = oldest != nullptr && now - oldest->since > timeout_;
  const bool stuck =
      !ch.running.empty() && now - ch.running.front().second > timeout_;
  if (!waiting && !stuck) return;
  const std::string why =
      "pg_sparse: " + describe(ch) + " timed out after " +
      std::to_string(timeout_.count()) + " ms on rank " +
      std::to_string(rank_) + (waiting ? "" : " on the GPU") +
      " (the peer died, stalled or never posted the matching message)";
  if (!waiting) std::fprintf(stderr, "%s; aborted\n", why.c_str());
  fail(ch, why, out);
}

// Every message of the channel fails, now and later. Aborting the pair stops
// a message that may wait on the GPU for a peer that will not come.
void NcclPointToPoint::fail(Channel& ch, const std::string& why,
                            Finished& out) {
  ch.broken = why;
  auto error = backend_error(why);
  if (ch.posting) out.emplace_back(ch.posting->work, error);
  for (auto& op : ch.queue) out.emplace_back(op.work, error);
  ch.posting.reset();
  ch.queue.clear();
  ch.running.clear();
  ch.busy = false;
  pgs_nccl_pair_destroy(ch.pair);
  ch.pair = nullptr;
}

void NcclPointToPoint::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  Finished finished;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [key, ch] : channels_) {
      if (ch.posting || !ch.queue.empty())
        fail(ch,
             "pg_sparse: the backend was shut down with this message in "
             "flight",
             finished);
      pgs_nccl_pair_destroy(ch.pair);
      ch.pair = nullptr;
    }
  }
  if (deliver_)
    for (auto& [work, error] : finished) deliver_(work, error);
}

// --- Open MPI: the host transport's messages, staged through pinned memory --

class StagedPointToPoint : public PointToPoint {
 public:
  StagedPointToPoint(std::shared_ptr<PointToPoint> host, int rank, int device)
      : host_(std::move(host)),
        rank_(rank),
        stream_(c10::cuda::getStreamFromPool(
            false, static_cast<c10::DeviceIndex>(device))) {}

  void attach(Deliver deliver, std::chrono::milliseconds timeout) override {
    deliver_ = std::move(deliver);
  }
  // The copy to pinned memory waits for the caller's stream: the send
  // returns once the data is on the host and the MPI message posted.
  c10::intrusive_ptr<c10d::Work> send(at::Tensor& t, int dst,
                                      int tag) override {
    at::Tensor host = pinned_like(t);
    host.copy_(t);
    return relay(host_->send(host, dst, tag), t, host, nullptr);
  }
  // The copy back runs on a stream of its own that waits for the caller's
  // stream as it was at the call (the tensor may still be in use there).
  c10::intrusive_ptr<c10d::Work> recv(at::Tensor& t, int src,
                                      int tag) override {
    at::Tensor host = pinned_like(t);
    auto ready = std::make_shared<at::cuda::CUDAEvent>();
    ready->record(c10::cuda::getCurrentCUDAStream(t.device().index()));
    return relay(host_->recv(host, src, tag), t, host, ready);
  }

 private:
  static at::Tensor pinned_like(const at::Tensor& t) {
    return at::empty(t.sizes(),
                     t.options().device(at::kCPU).pinned_memory(true));
  }

  // A Work on @p t that completes after the host message @p inner; a
  // receive (@p ready set) copies the data to the GPU first.
  c10::intrusive_ptr<c10d::Work> relay(c10::intrusive_ptr<c10d::Work> inner,
                                       at::Tensor t, at::Tensor host,
                                       Event ready) {
    auto done = std::make_shared<at::cuda::CUDAEvent>();
    std::shared_ptr<DeviceHooks> hooks;
    auto work = make_work(rank_, ready == nullptr, t, done, hooks);
    set_stream(*hooks, stream_);
    auto stream = stream_;
    auto deliver = deliver_;
    inner->getFuture()->addCallback([=](c10::ivalue::Future& f) {
      if (f.hasError()) {
        deliver(work, f.exception_ptr());
        return;
      }
      std::exception_ptr error;
      try {
        c10::cuda::CUDAStreamGuard guard(stream);
        if (ready) {
          ready->block(stream);
          t.copy_(host, /*non_blocking=*/true);
          c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(),
                                                        stream);
        }
        done->record(stream);
      } catch (...) {
        error = std::current_exception();
      }
      deliver(work, error);
    });
    return work;
  }

  std::shared_ptr<PointToPoint> host_;
  int rank_;
  c10::cuda::CUDAStream stream_;
  Deliver deliver_;
};

}  // namespace

std::shared_ptr<PointToPoint> make_cuda_p2p(
    const std::shared_ptr<CudaSide>& side,
    c10::intrusive_ptr<c10d::Store> store, int rank,
    std::shared_ptr<PointToPoint> host, const std::string& host_transport) {
  const int device = cuda_side_device(*side);
  if (cuda_side_kind(*side) == "nccl") {
    TORCH_CHECK(store, "pg_sparse: no store to bootstrap NCCL");
    return std::make_shared<NcclPointToPoint>(std::move(store), rank, device);
  }
  // Staging relays on the host messages' futures, which Open MPI's have.
  TORCH_CHECK(host_transport == "mpi",
              "pg_sparse: PG_SPARSE_CUDA_TRANSPORT=", cuda_side_kind(*side),
              " needs the Open MPI transport (launch "
              "with mpirun); this process group uses '",
              host_transport, "'");
  return std::make_shared<StagedPointToPoint>(std::move(host), rank, device);
}

}  // namespace pg_sparse

#endif  // PGS_SHIM_CUDA
