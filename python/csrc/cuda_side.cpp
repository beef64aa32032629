// CUDA path of the backend, after ProcessGroupGloo's CUDA handling: an event
// on the caller's stream that the comm stream waits for, recordStream on
// every tensor, the task on the comm stream, and a CUDA-aware future marked
// under a stream guard, so consumers' streams wait without blocking the CPU.
#ifdef PGS_SHIM_CUDA

#include "cuda_side.hpp"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <atomic>
#include <mutex>
#include <set>
#include <string>

#include "backend.hpp"
#include "params.hpp"
#include "status.hpp"

#include <pg_sparse/comm_nccl.h>
#include <pg_sparse/comm_staged.h>
#include <pg_sparse/ops_cuda.h>

#include <cstdlib>

#include "transports.hpp"

namespace pg_sparse {

class CudaSide {
 public:
  CudaSide(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
           int device, std::vector<int64_t> global_ranks,
           std::function<pgs_comm_t*()> make_host_comm)
      : global_ranks_(std::move(global_ranks)),
        make_host_comm_(std::move(make_host_comm)),
        store_(std::move(store)),
        rank_(rank),
        size_(size),
        device_(device),
        stream_(c10::cuda::getStreamFromPool(
            /*isHighPriority=*/true, static_cast<c10::DeviceIndex>(device))) {
    requested_ = param_string(PGS_PARAM_CUDA_TRANSPORT);
  }
  ~CudaSide() {
    comm_.reset();
    if (ops_ != nullptr) pgs_ops_cuda_destroy(ops_);
  }

  pgs_comm_t* comm() {
    std::call_once(once_, [this] { init(); });
    return comm_.get();
  }
  const pgs_ops_t* ops() {
    comm();
    return ops_;
  }
  int device() const { return device_; }
  // Ends a call stuck on this side's transport (any thread). Never creates
  // the transport: before it exists there is nothing to end.
  bool abort() {
    pgs_comm_t* c = ready_.load(std::memory_order_acquire);
    return c != nullptr && pgs_comm_abort(c) == PGS_OK;
  }
  // The collectives' transport: as requested, auto resolved by their first
  // call ("auto" before it).
  std::string kind() {
    std::lock_guard<std::mutex> lock(kind_mutex_);
    return kind_.empty() ? requested_ : kind_;
  }
  // What send/recv take: the collectives' choice once made, else NCCL for
  // auto. Deciding needs every rank of the group (the GPU UUIDs), and a
  // message involves two: a rank waiting for a peer that never touches CUDA
  // on this group would hang.
  std::string p2p_kind() {
    std::string k = kind();
    return k == "auto" ? "nccl" : k;
  }
  c10::cuda::CUDAStream stream() const { return stream_; }

 private:
  // Collective: every rank reaches its first CUDA task in the same order.
  void init() {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    check(pgs_ops_cuda_create(stream_.stream(), device_, &ops_),
          "creating the CUDA ops table");
    std::string kind = requested_;
    if (kind == "auto") kind = shared_gpu() ? "staged" : "nccl";
    {
      std::lock_guard<std::mutex> lock(kind_mutex_);
      kind_ = kind;
    }
    if (kind == "nccl")
      init_nccl();
    else if (kind == "staged")
      init_staged();
    else
      init_mpi(kind == "mpi" && mpi_cuda_aware());
    ready_.store(comm_.get(), std::memory_order_release);
  }

  // Open MPI for device buffers: directly when it is CUDA-aware (the stream
  // is synchronised before each call), else staged through pinned memory.
  void init_mpi(bool direct) {
    pgs_comm_t* inner = make_mpi_comm(global_ranks_, rank_, size_,
                                      direct ? PGS_MEM_DEVICE : PGS_MEM_HOST);
    pgs_comm_t* c = nullptr;
    int st = direct ? pgs_comm_synced_create(inner, stream_.stream(), &c)
                    : pgs_comm_staged_create(inner, stream_.stream(), &c);
    check(st, direct ? "creating the CUDA-aware MPI transport"
                     : "creating the staged MPI transport");
    comm_ = CommHandle(c, pgs_comm_destroy);
  }

  // Through pinned host memory over a transport of the host's kind.
  void init_staged() {
    TORCH_CHECK(make_host_comm_,
                "pg_sparse: no host transport to stage "
                "CUDA tensors through");
    pgs_comm_t* c = nullptr;
    check(pgs_comm_staged_create(make_host_comm_(), stream_.stream(), &c),
          "creating the staged transport of CUDA tensors");
    comm_ = CommHandle(c, pgs_comm_destroy);
  }

  // Whether any two ranks of the group run on one GPU (same UUID), through
  // the store, so every rank reaches the same answer.
  bool shared_gpu() {
    cudaDeviceProp prop{};
    TORCH_CHECK(cudaGetDeviceProperties(&prop, device_) == cudaSuccess,
                "pg_sparse: cudaGetDeviceProperties(", device_, ") failed");
    const auto* u = reinterpret_cast<const uint8_t*>(prop.uuid.bytes);
    const std::vector<uint8_t> mine(u, u + sizeof(prop.uuid.bytes));
    const std::string key = "pg_sparse_gpu_uuid/";
    store_->set(key + std::to_string(rank_), mine);
    std::set<std::vector<uint8_t>> seen;
    for (int r = 0; r < size_; ++r)
      seen.insert(r == rank_ ? mine : store_->get(key + std::to_string(r)));
    return static_cast<int>(seen.size()) < size_;
  }

  void init_nccl() {
    std::vector<uint8_t> id(PGS_NCCL_ID_BYTES);
    const std::string key = "pg_sparse_nccl_id";
    if (rank_ == 0) {
      check(pgs_nccl_make_id(id.data()), "ncclGetUniqueId");
      store_->set(key, id);
    } else {
      id = store_->get(key);
    }
    pgs_comm_t* c = nullptr;
    check(pgs_comm_nccl_create(id.data(), rank_, size_, stream_.stream(), &c),
          "creating the NCCL transport");
    comm_ = CommHandle(c, pgs_comm_destroy);
  }

  std::vector<int64_t> global_ranks_;
  std::function<pgs_comm_t*()> make_host_comm_;
  c10::intrusive_ptr<c10d::Store> store_;
  int rank_, size_, device_;
  std::string requested_;  // PG_SPARSE_CUDA_TRANSPORT
  std::mutex kind_mutex_;
  std::string kind_;  // nccl, mpi, mpi-staged or staged; "" until init()
  c10::cuda::CUDAStream stream_;
  std::once_flag once_;
  pgs_ops_t* ops_ = nullptr;
  CommHandle comm_;
  std::atomic<pgs_comm_t*> ready_{nullptr};  // comm_ once init() is done
};

std::shared_ptr<CudaSide> cuda_side_create(
    c10::intrusive_ptr<c10d::Store> store, int rank, int size, int device,
    std::vector<int64_t> global_ranks,
    std::function<pgs_comm_t*()> make_host_comm) {
  return std::make_shared<CudaSide>(std::move(store), rank, size, device,
                                    std::move(global_ranks),
                                    std::move(make_host_comm));
}

int cuda_side_device(const CudaSide& side) { return side.device(); }
std::string cuda_side_kind(CudaSide& side) { return side.kind(); }
std::string cuda_side_p2p_kind(CudaSide& side) { return side.p2p_kind(); }

namespace {

using Flag = std::shared_ptr<std::atomic<bool>>;

// Sets the flag when the stream gets here (the driver's callback thread).
void CUDART_CB mark_passed(void* arg) {
  auto* flag = static_cast<Flag*>(arg);
  (*flag)->store(true);
  delete flag;
}

// Queues on @p stream a host function that sets @p flag once the stream has
// passed everything queued before it. The watchdog reads the flag instead of
// calling cudaEventQuery: a CUDA call can block while another thread waits
// in a synchronous copy on the legacy default stream (t.cpu() behind a
// collective stuck on a dead peer), which is exactly when the watchdog must
// act. A flag that cannot be queued counts as passed (nothing is watched).
void watch_end(const c10::cuda::CUDAStream& stream, const Flag& flag) {
  auto* arg = new Flag(flag);
  if (cudaLaunchHostFunc(stream.stream(), mark_passed, arg) != cudaSuccess) {
    (void)cudaGetLastError();
    delete arg;
    flag->store(true);
  }
}

}  // namespace

std::shared_ptr<DeviceHooks> cuda_prepare(
    const std::shared_ptr<CudaSide>& side,
    const std::vector<at::Tensor>& tensors) {
  const auto dev = static_cast<c10::DeviceIndex>(side->device());
  auto comm_stream = side->stream();
  // The comm stream starts after everything the caller queued so far.
  at::cuda::CUDAEvent ready;
  ready.record(c10::cuda::getCurrentCUDAStream(dev));
  ready.block(comm_stream);
  for (const auto& t : tensors)
    c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(),
                                                  comm_stream);
  auto done = std::make_shared<at::cuda::CUDAEvent>();
  auto hooks = std::make_shared<DeviceHooks>();
  hooks->devices = {c10::Device(c10::DeviceType::CUDA, dev)};
  hooks->on_stream = [comm_stream](const std::function<void()>& fn) {
    c10::cuda::CUDAStreamGuard guard(comm_stream);
    fn();
  };
  // On the comm stream, after the task: the stream the transport queues
  // its kernels on (NCCL's main stream is this one, and its side streams
  // join it before the task returns), so the end follows every kernel.
  auto passed = std::make_shared<std::atomic<bool>>(false);
  hooks->record_done = [done, comm_stream, passed] {
    done->record(comm_stream);
    watch_end(comm_stream, passed);
  };
  hooks->finished = [passed] { return passed->load(); };
  hooks->block_current = [done, dev] {
    done->block(c10::cuda::getCurrentCUDAStream(dev));
  };
  std::weak_ptr<CudaSide> weak = side;
  hooks->abort = [weak] {
    auto s = weak.lock();
    return s != nullptr && s->abort();
  };
  return hooks;
}

pgs_comm_t* cuda_comm(CudaSide& side) { return side.comm(); }
const pgs_ops_t* cuda_ops(CudaSide& side) { return side.ops(); }

}  // namespace pg_sparse

#endif  // PGS_SHIM_CUDA
