// The Open MPI transport for ranks an MPI launcher started.
#include <c10/util/Exception.h>
#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "status.hpp"
#include "transports.hpp"

extern "C" {
#include <pg_sparse/comm_mpi.h>
}

namespace pg_sparse {

namespace {

// MPI is initialised at most once per process; we finalise only what we
// initialised (an embedding program may own MPI itself).
struct MpiProcess {
  std::once_flag once;
  bool we_initialised = false;
};

MpiProcess& mpi_process() {
  static MpiProcess p;
  return p;
}

void ensure_mpi() {
  auto& p = mpi_process();
  std::call_once(p.once, [&p] {
    int initialised = 0;
    MPI_Initialized(&initialised);
    // Each backend has its own worker and message-progress threads, so
    // several may call MPI at once (one process group per new_group).
    int provided = 0;
    if (initialised) {
      MPI_Query_thread(&provided);
    } else {
      TORCH_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE,
                                  &provided) == MPI_SUCCESS,
                  "pg_sparse: MPI_Init_thread failed");
      p.we_initialised = true;
    }
    TORCH_CHECK(provided >= MPI_THREAD_MULTIPLE,
                "pg_sparse: the MPI library does not provide "
                "MPI_THREAD_MULTIPLE (got level ",
                provided, ")");
  });
}

// The user's messages on a communicator of their own, posted with
// MPI_Isend/MPI_Irecv on the caller's thread. A progress thread tests them
// and hands finished Works to the backend's completion threads; one pending
// past the timeout fails its Work (the request stays, holding the tensor).
class MpiPointToPoint : public PointToPoint {
 public:
  MpiPointToPoint(MPI_Comm comm, int rank) : comm_(comm), rank_(rank) {}
  ~MpiPointToPoint() override {
    shutdown();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  void attach(Deliver deliver, std::chrono::milliseconds timeout) override {
    deliver_ = std::move(deliver);
    timeout_ = timeout;
    thread_ = std::thread(&MpiPointToPoint::progress_loop, this);
  }

  c10::intrusive_ptr<c10d::Work> send(at::Tensor& t, int dst,
                                      int tag) override {
    return post(t, dst, tag, true);
  }
  c10::intrusive_ptr<c10d::Work> recv(at::Tensor& t, int src,
                                      int tag) override {
    return post(t, src, tag, false);
  }

  void shutdown() override {
    std::vector<Pending> left;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_) return;
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      left.swap(pending_);
    }
    // Nothing will complete these now: withdraw the receives (their
    // buffers may go) and let the sends finish on their own.
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized)
      for (auto& p : left) {
        if (p.is_send) {
          MPI_Request_free(&p.request);
        } else {
          MPI_Cancel(&p.request);
          MPI_Wait(&p.request, MPI_STATUS_IGNORE);
        }
      }
    auto error = std::make_exception_ptr(c10::DistBackendError(
        c10::SourceLocation{__func__, __FILE__, __LINE__},
        "pg_sparse: the backend was shut down with this message in flight"));
    for (auto& p : left)
      if (!p.failed && deliver_) deliver_(p.work, error);
  }

 private:
  struct Pending {
    MPI_Request request;
    c10::intrusive_ptr<SparseWork> work;
    at::Tensor tensor;  // kept alive until MPI is done with it
    std::chrono::steady_clock::time_point since;
    bool is_send = false;
    bool failed = false;
    std::string what;
  };

  c10::intrusive_ptr<c10d::Work> post(at::Tensor& t, int peer, int tag,
                                      bool is_send) {
    const char* what = is_send ? "send" : "recv";
    auto work = c10::make_intrusive<SparseWork>(
        rank_, is_send ? c10d::OpType::SEND : c10d::OpType::RECV,
        is_send ? "pg_sparse:send" : "pg_sparse:recv",
        std::vector<at::Tensor>{t});
    {
      std::lock_guard<std::mutex> lock(mutex_);
      TORCH_CHECK(!stop_, "pg_sparse: the backend has been shut down");
    }
    const size_t bytes = t.nbytes();
    if (bytes == 0) {
      deliver_(work, nullptr);
      return work;
    }
    MPI_Request request = MPI_REQUEST_NULL;
    // Large messages go as a derived type of 1 GiB blocks (int counts).
    constexpr size_t kBlock = size_t{1} << 30;
    int rc = MPI_SUCCESS;
    MPI_Datatype type = MPI_BYTE;
    int count = static_cast<int>(bytes);
    if (bytes > static_cast<size_t>(INT32_MAX)) {
      TORCH_CHECK(bytes % kBlock == 0, "pg_sparse::", what,
                  ": messages over 2 GiB must be a multiple of 1 GiB");
      MPI_Type_contiguous(static_cast<int>(kBlock), MPI_BYTE, &type);
      MPI_Type_commit(&type);
      count = static_cast<int>(bytes / kBlock);
    }
    rc = is_send
             ? MPI_Isend(t.data_ptr(), count, type, peer, tag, comm_, &request)
             : MPI_Irecv(t.data_ptr(), count, type, peer, tag, comm_, &request);
    if (type != MPI_BYTE) MPI_Type_free(&type);
    if (rc != MPI_SUCCESS)
      C10_THROW_ERROR(DistBackendError, std::string("pg_sparse::") + what +
                                            ": MPI_I" + what + " failed");
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending_.push_back(Pending{
          request, work, t, std::chrono::steady_clock::now(), is_send, false,
          std::string(what) + (is_send ? " to" : " from") + " rank " +
              std::to_string(peer)});
    }
    cv_.notify_one();
    return work;
  }

  void progress_loop() {
    using namespace std::chrono_literals;
    std::unique_lock<std::mutex> lock(mutex_);
    auto nap = 20us;
    // Messages whose Work is still open (failed ones are only tested now
    // and then, until MPI lets go of them).
    auto active = [&] {
      for (auto& p : pending_)
        if (!p.failed) return true;
      return false;
    };
    for (;;) {
      // Test often while a Work waits on a message, else sleep.
      if (active())
        cv_.wait_for(lock, nap, [&] { return stop_; });
      else
        cv_.wait_for(lock, 100ms, [&] { return stop_ || active(); });
      if (stop_) return;
      std::vector<std::pair<c10::intrusive_ptr<SparseWork>, std::exception_ptr>>
          finished;
      auto now = std::chrono::steady_clock::now();
      for (size_t i = 0; i < pending_.size();) {
        Pending& p = pending_[i];
        int flag = 0;
        int rc = MPI_Test(&p.request, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS || flag) {
          if (!p.failed) {
            std::exception_ptr error;
            if (rc != MPI_SUCCESS)
              error = std::make_exception_ptr(c10::DistBackendError(
                  c10::SourceLocation{__func__, __FILE__, __LINE__},
                  "pg_sparse: " + p.what + " failed in MPI"));
            finished.emplace_back(p.work, error);
          }
          pending_.erase(pending_.begin() + static_cast<long>(i));
          continue;
        }
        if (!p.failed && now - p.since > timeout_) {
          p.failed = true;
          finished.emplace_back(
              p.work, std::make_exception_ptr(c10::DistBackendError(
                          c10::SourceLocation{__func__, __FILE__, __LINE__},
                          "pg_sparse: " + p.what + " timed out after " +
                              std::to_string(timeout_.count()) +
                              " ms on rank " + std::to_string(rank_) +
                              " (the peer died, stalled or never posted the "
                              "matching message)")));
        }
        ++i;
      }
      nap = finished.empty() ? std::min<std::chrono::microseconds>(nap * 2, 1ms)
                             : 20us;
      if (finished.empty()) continue;
      lock.unlock();
      for (auto& [work, error] : finished) deliver_(work, error);
      lock.lock();
    }
  }

  MPI_Comm comm_;
  int rank_;
  Deliver deliver_;
  std::chrono::milliseconds timeout_{0};
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Pending> pending_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

// The MPI communicator of a torch group (collective over its members only).
static MPI_Comm make_group_comm(std::vector<int64_t> global_ranks,
                                int group_rank, int group_size) {
  ensure_mpi();
  // The default group comes without a rank list: it is the whole world.
  if (global_ranks.empty())
    for (int r = 0; r < group_size; ++r) global_ranks.push_back(r);
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  TORCH_CHECK(static_cast<int>(global_ranks.size()) == group_size,
              "pg_sparse: group of ", group_size, " ranks but ",
              global_ranks.size(), " global ranks");
  std::vector<int> members;
  for (int64_t r : global_ranks) {
    TORCH_CHECK(r >= 0 && r < world_size, "pg_sparse: global rank ", r,
                " is not an MPI process (MPI world size ", world_size,
                "); launch every rank with the same mpirun");
    members.push_back(static_cast<int>(r));
  }
  TORCH_CHECK(members[group_rank] == world_rank, "pg_sparse: torch rank ",
              global_ranks[group_rank], " runs in MPI rank ", world_rank,
              "; under mpirun RANK must equal OMPI_COMM_WORLD_RANK (import "
              "pg_sparse before init_process_group sets it)");
  // Only the members call this: MPI_Comm_create_group is collective over
  // the group alone, unlike MPI_Comm_create (non-members never get here).
  MPI_Group world_group, group;
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Group_incl(world_group, group_size, members.data(), &group);
  int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, 0, &sub);
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  TORCH_CHECK(rc == MPI_SUCCESS && sub != MPI_COMM_NULL,
              "pg_sparse: MPI_Comm_create_group failed");
  // Errors come back as codes on this communicator and every duplicate of
  // it (the user's point-to-point one included), so a failed call raises
  // on this rank instead of aborting the job.
  rc = MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
  TORCH_CHECK(rc == MPI_SUCCESS, "pg_sparse: MPI_Comm_set_errhandler failed");
  return sub;
}

pgs_comm_t* make_mpi_comm(const std::vector<int64_t>& global_ranks,
                          int group_rank, int group_size, pgs_mem_t mem) {
  MPI_Comm sub = make_group_comm(global_ranks, group_rank, group_size);
  pgs_comm_t* comm = nullptr;
  int st = pgs_comm_mpi_create_mem(sub, mem, &comm);  // duplicates sub
  MPI_Comm_free(&sub);
  check(st, "creating the Open MPI transport");
  return comm;
}

int mpi_cuda_aware() { return pgs_mpi_cuda_aware(); }

Transport make_mpi_transport(std::vector<int64_t> global_ranks, int group_rank,
                             int group_size) {
  MPI_Comm sub = make_group_comm(global_ranks, group_rank, group_size);
  int rc = MPI_SUCCESS;
  pgs_comm_t* comm = nullptr;
  int st = pgs_comm_mpi_create(sub, &comm);  // duplicates sub
  if (st != PGS_OK) MPI_Comm_free(&sub);
  check(st, "creating the Open MPI transport");
  CommHandle handle(comm, pgs_comm_destroy);
  // The user's messages get a communicator of their own: their tags can
  // never match the algorithms' messages.
  MPI_Comm p2p = MPI_COMM_NULL;
  rc = MPI_Comm_dup(sub, &p2p);
  MPI_Comm_free(&sub);
  TORCH_CHECK(rc == MPI_SUCCESS, "pg_sparse: MPI_Comm_dup failed");
  return Transport{std::move(handle),
                   std::make_shared<MpiPointToPoint>(p2p, group_rank)};
}

void finalize_mpi() {
  auto& p = mpi_process();
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (p.we_initialised && initialised && !finalised) MPI_Finalize();
}

}  // namespace pg_sparse
