// What a Work on device tensors needs beyond a host Work: the devices of its
// CUDA-aware future, the stream its task runs on, and how the caller's
// stream waits for it. Filled by cuda_side.cpp; empty for host tensors.
#pragma once

#include <c10/core/Device.h>

#include <functional>
#include <memory>
#include <vector>

namespace pg_sparse {

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
