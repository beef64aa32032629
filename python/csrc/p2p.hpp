// dist.send/recv/isend/irecv of one process group.
//
// Every message is a request on a pgs_comm point-to-point channel (the host
// one, and the CUDA one of the group's device), posted at once on the
// caller's thread: a ring of isend + irecv would deadlock if they queued
// behind the worker's collectives. One progress thread tests the requests,
// owns their deadlines and hands finished Works to the backend's completion
// threads. A message past the timeout is withdrawn and its Work fails.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <condition_variable>
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

namespace pg_sparse {

class SparseWork;

// Completes a Work off the caller's thread (the backend's completion pool).
using Deliver =
    std::function<void(c10::intrusive_ptr<SparseWork>, std::exception_ptr)>;

// One user message, as the backend hands it over.
struct Message {
  pgs_comm_t* channel = nullptr;  // outlives the PointToPoint's shutdown
  at::Tensor tensor;
  int peer = 0;
  int tag = 0;
  bool is_send = false;
  // Device messages: the event the message starts after (recorded on the
  // caller's stream) and what keeps it alive until the request is freed.
  void* after = nullptr;
  std::shared_ptr<void> keep;
  std::shared_ptr<DeviceHooks> hooks;  // the Work's (null for host tensors)
};

class PointToPoint {
 public:
  PointToPoint(int rank, std::chrono::milliseconds timeout, Deliver deliver);
  ~PointToPoint();
  PointToPoint(const PointToPoint&) = delete;
  PointToPoint& operator=(const PointToPoint&) = delete;

  c10::intrusive_ptr<c10d::Work> post(Message m);
  // Withdraws every message still in flight (their Works fail) and stops
  // the thread. The channels may be destroyed afterwards.
  void shutdown();

 private:
  struct Pending {
    pgs_request_t* request;
    c10::intrusive_ptr<SparseWork> work;
    Message message;
    std::chrono::steady_clock::time_point since;
  };
  using Finished = std::vector<
      std::pair<c10::intrusive_ptr<SparseWork>, std::exception_ptr>>;

  void loop();
  // Tests every request once (mutex_ held); true if one finished.
  bool sweep(Finished& out);
  std::string describe(const Message& m) const;

  int rank_;
  std::chrono::milliseconds timeout_;
  Deliver deliver_;
  std::mutex mutex_;  // also serialises every call on the channels
  std::condition_variable cv_;
  std::vector<Pending> pending_;
  // Tensors of failed or withdrawn messages, which a transport that cannot
  // truly withdraw (gloo) may still read or write, kept until destruction.
  std::vector<at::Tensor> withdrawn_;
  // The last post or finished message: the progress thread polls closely
  // for 10 ms after it.
  std::chrono::steady_clock::time_point last_move_;
  bool kick_ = false;  // a new message: sweep without waiting out the nap
  // Sleeps of the progress thread (PG_SPARSE_P2P_NAP_*_US).
  const std::chrono::microseconds nap_min_, nap_busy_, nap_max_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace pg_sparse
