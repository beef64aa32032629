// What a Work on device tensors needs beyond a host Work: the devices of its
// CUDA-aware future, the stream its task runs on, and how the caller's
// stream waits for it. Filled by cuda_side.cpp; empty for host tensors.
#pragma once

#include <c10/core/Device.h>

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace pg_sparse {

// Set by the watchdog once it aborted a task's kernels; wait() rethrows it.
// Shared by the Work and the watchdog's entry for the task instead of the
// Work itself: a Work owns CUDA events (its future's), and the watchdog must
// never be the one to destroy them. cudaEventDestroy waits for the driver's
// lock, which a thread blocked in a synchronous copy behind the stuck
// kernels holds (seen with cuda-gdb on 2 x H200: the watchdog, dropping the
// last weak reference to a finished Work, sat in cuEventDestroy while
// t.cpu() sat in cuMemcpyDtoHAsync, so it never reached the timeout).
class DeviceFailure {
 public:
  void set(std::exception_ptr error) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = std::move(error);
  }
  void rethrow_if_set() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::mutex mutex_;
  std::exception_ptr error_;
};

struct DeviceHooks {
  std::vector<c10::Device> devices;
  // Runs @p fn with the comm stream current (the worker's task, and the
  // completion that marks the future, so consumers wait on that stream).
  std::function<void(const std::function<void()>&)> on_stream;
  // Records the end of the task on the comm stream (worker, after the task).
  std::function<void()> record_done;
  // Whether the comm stream has passed that end (any thread, never blocks).
  // A collective returns once its kernels are queued: this is how the
  // watchdog sees one still waiting on the device for a dead peer.
  std::function<bool()> finished;
  // Makes the caller's current stream wait for the task (Work::synchronize).
  std::function<void()> block_current;
  // Ends whatever this device's transport is stuck in (any thread; no-op
  // before the transport exists). True if it could.
  std::function<bool()> abort;
};

}  // namespace pg_sparse
