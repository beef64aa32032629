#include "bindings.hpp"

#include <pthread.h>

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

extern "C" {
#include <pg_sparse/log.h>
}

namespace py = pybind11;

namespace pg_sparse {
namespace {

// Python's numeric levels of ERROR, WARNING, INFO and DEBUG.
int python_level(pgs_log_level_t level) {
  static const int levels[] = {40, 30, 20, 10};
  return levels[level];
}

bool finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

// One message, copied out of the core's stack buffer.
struct Entry {
  pgs_log_level_t level;
  std::string subsystem;
  std::string msg;
};

class LogForwarder {
 public:
  static LogForwarder& instance() {
    // Never destroyed: the core may log from a thread while the process
    // exits, and must find the object alive.
    static auto* f = new LogForwarder();
    return *f;
  }

  void start(pgs_log_level_t level) {
    std::lock_guard<std::mutex> lock(mutex_);
    // A new sink for each level: a message in flight on another thread may
    // still read the old one, so it is never freed (one per call).
    auto* sink = new pgs_log_sink_t{&LogForwarder::enqueue, this, level};
    if (!thread_.joinable()) {
      stop_ = false;
      thread_ = std::thread(&LogForwarder::loop, this);
      // A forked child (a DataLoader worker) has no forwarding thread and
      // may have copied the queue's mutex locked: it logs to stderr.
      static std::once_flag at_fork;
      std::call_once(at_fork, [] {
        pthread_atfork(nullptr, nullptr, [] { pgs_log_set_sink(nullptr); });
      });
    }
    pgs_log_set_sink(sink);
  }

  // Delivers what is queued, then sends the core back to stderr.
  void stop() {
    pgs_log_set_sink(nullptr);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  // A runaway producer (or a forked child without this thread) must not
  // grow the queue without bound: past this, messages are counted, dropped.
  static constexpr size_t kMaxQueued = 10000;

  static void enqueue(void* ctx, pgs_log_level_t level, const char* subsystem,
                      const char* msg) {
    auto* self = static_cast<LogForwarder*>(ctx);
    {
      std::lock_guard<std::mutex> lock(self->mutex_);
      if (self->queue_.size() >= kMaxQueued) {
        ++self->dropped_;
        return;
      }
      self->queue_.push_back({level, subsystem, msg});
    }
    self->cv_.notify_one();
  }

  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty() && stop_) return;
      std::deque<Entry> batch;
      batch.swap(queue_);
      size_t dropped = std::exchange(dropped_, 0);
      lock.unlock();
      emit(batch, dropped);
      lock.lock();
    }
  }

  static void emit(const std::deque<Entry>& batch, size_t dropped) {
    if (!Py_IsInitialized() || finalizing()) {
      for (const auto& e : batch)
        std::fprintf(stderr, "pg_sparse.%s %s: %s\n", e.subsystem.c_str(),
                     pgs_log_level_name(e.level), e.msg.c_str());
      return;
    }
    py::gil_scoped_acquire gil;
    try {
      // pg_sparse.<subsystem>: children of the package's logger, so its
      // handlers and level apply and a user can tune one subsystem.
      py::object get = py::module_::import("logging").attr("getLogger");
      for (const auto& e : batch)
        get("pg_sparse." + e.subsystem)
            .attr("log")(python_level(e.level), "%s", e.msg);
      if (dropped > 0)
        get("pg_sparse")
            .attr("warning")("%d log messages dropped (queue full)", dropped);
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("pg_sparse log forwarding");
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Entry> queue_;
  size_t dropped_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

void bind_log(py::module_& m) {
  m.def(
      "_log_start",
      [](int level) {
        TORCH_CHECK_VALUE(level >= PGS_LOG_ERROR && level <= PGS_LOG_DEBUG,
                          "pg_sparse: log level must be 0..3, got ", level);
        LogForwarder::instance().start(static_cast<pgs_log_level_t>(level));
      },
      py::arg("level"),
      "Route the C core's messages up to @p level (0 error .. 3 debug) to "
      "logging.getLogger('pg_sparse').");
  m.def(
      "_log_stop", [] { LogForwarder::instance().stop(); },
      py::call_guard<py::gil_scoped_release>(),
      "Deliver queued messages and send the core's messages to stderr.");
  m.def(
      "_log",
      [](int level, const std::string& subsystem, const std::string& msg) {
        TORCH_CHECK_VALUE(level >= PGS_LOG_ERROR && level <= PGS_LOG_DEBUG,
                          "pg_sparse: log level must be 0..3, got ", level);
        pgs_log(static_cast<pgs_log_level_t>(level), subsystem.c_str(), "%s",
                msg.c_str());
      },
      py::arg("level"), py::arg("subsystem"), py::arg("message"),
      "Log through the C core's sink (for tests of the sink).");
}

}  // namespace pg_sparse
