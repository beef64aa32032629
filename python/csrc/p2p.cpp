#include "p2p.hpp"

#include <c10/util/Exception.h>

#include "backend.hpp"
#include "params.hpp"
#include "status.hpp"

namespace pg_sparse {

namespace {

using Clock = std::chrono::steady_clock;

std::exception_ptr backend_error(const std::string& why) {
  return std::make_exception_ptr(c10::DistBackendError(
      c10::SourceLocation{__func__, __FILE__, __LINE__}, why));
}

}  // namespace

PointToPoint::PointToPoint(int rank, std::chrono::milliseconds timeout,
                           Deliver deliver)
    : rank_(rank),
      timeout_(timeout),
      deliver_(std::move(deliver)),
      nap_min_(param_int(PGS_PARAM_P2P_NAP_MIN_US)),
      nap_busy_(param_int(PGS_PARAM_P2P_NAP_BUSY_US)),
      nap_max_(param_int(PGS_PARAM_P2P_NAP_MAX_US)) {
  thread_ = std::thread(&PointToPoint::loop, this);
}

PointToPoint::~PointToPoint() { shutdown(); }

std::string PointToPoint::describe(const Message& m) const {
  if (m.peer == PGS_ANY_SOURCE) return "recv from any rank";
  return std::string(m.is_send ? "send to" : "recv from") + " rank " +
         std::to_string(m.peer);
}

c10::intrusive_ptr<c10d::Work> PointToPoint::post(Message m) {
  auto work = c10::make_intrusive<SparseWork>(
      rank_, m.is_send ? c10d::OpType::SEND : c10d::OpType::RECV,
      m.is_send ? "pg_sparse:send" : "pg_sparse:recv",
      std::vector<at::Tensor>{m.tensor}, m.hooks);
  const size_t bytes = m.tensor.nbytes();
  pgs_request_t* request = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(!stop_, "pg_sparse: the backend has been shut down");
    void* data = m.tensor.data_ptr();
    int st = m.is_send ? pgs_comm_isend(m.channel, data, bytes, m.peer, m.tag,
                                        m.after, &request)
                       : pgs_comm_irecv(m.channel, data, bytes, m.peer, m.tag,
                                        m.after, &request);
    check(st, "posting the " + describe(m));
    last_move_ = Clock::now();
    kick_ = true;  // sweep at once: a device message is only posted there
    pending_.push_back(Pending{request, work, std::move(m), last_move_});
  }
  cv_.notify_one();
  return work;
}

bool PointToPoint::sweep(Finished& out) {
  const auto now = Clock::now();
  bool moved = false;
  for (size_t i = 0; i < pending_.size();) {
    Pending& p = pending_[i];
    int done = 0;
    last_transport_error().clear();
    const int st = pgs_request_test(p.request, &done);
    std::exception_ptr error;
    if (st != PGS_OK) {
      std::string why = "pg_sparse: " + describe(p.message) +
                        " failed: " + pgs_status_string(st);
      if (!last_transport_error().empty()) why += ": " + last_transport_error();
      error = backend_error(why);
    } else if (!done && now - p.since > timeout_) {
      error = backend_error(
          "pg_sparse: " + describe(p.message) + " timed out after " +
          std::to_string(timeout_.count()) + " ms on rank " +
          std::to_string(rank_) +
          " (the peer died, stalled or never posted the matching message)");
    } else if (!done) {
      ++i;
      continue;
    }
    if (!error) p.work->set_source(pgs_request_source(p.request));
    pgs_request_free(p.request);
    // A transport that cannot truly withdraw (gloo) may still touch the
    // memory of a failed or withdrawn message: it stays allocated.
    if (error) withdrawn_.push_back(p.message.tensor);
    out.emplace_back(p.work, error);
    pending_.erase(pending_.begin() + static_cast<long>(i));
    moved = true;
  }
  return moved;
}

void PointToPoint::loop() {
  using namespace std::chrono_literals;
  std::unique_lock<std::mutex> lock(mutex_);
  auto nap = nap_min_;
  for (;;) {
    // Test often while a message is in flight, else sleep until one comes.
    if (pending_.empty())
      cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
    else
      cv_.wait_for(lock, nap, [&] { return stop_ || kick_; });
    if (stop_) return;
    kick_ = false;
    Finished finished;
    const bool moved = sweep(finished);
    // A message finishing on the device is only seen by a test: poll at
    // most nap_busy_ (50 us) apart while messages move (a 64 MB exchange
    // takes 0.3 ms over NVLink), and back off to nap_max_ (1 ms) once
    // nothing has moved for 10 ms (a receive posted long before its send).
    const auto now = Clock::now();
    if (moved) last_move_ = now;
    const auto cap = now - last_move_ < 10ms ? nap_busy_ : nap_max_;
    nap = moved
              ? nap_min_
              : std::min(std::max(nap * 2, std::chrono::microseconds(1)), cap);
    if (finished.empty()) continue;
    lock.unlock();
    for (auto& [work, error] : finished) deliver_(work, error);
    lock.lock();
  }
}

void PointToPoint::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::vector<Pending> left;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    left.swap(pending_);
    for (auto& p : left) {
      pgs_request_free(p.request);
      withdrawn_.push_back(p.message.tensor);
    }
  }
  auto error = backend_error(
      "pg_sparse: the backend was shut down with this message in flight");
  for (auto& p : left) deliver_(p.work, error);
}

}  // namespace pg_sparse
