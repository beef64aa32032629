// Point-to-point messages of CUDA tensors (see cuda_p2p.hpp).
#ifdef PGS_SHIM_CUDA

#include "cuda_p2p.hpp"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <string>
#include <vector>

#include "cuda_side.hpp"
#include "status.hpp"
#include "transports.hpp"

#include <pg_sparse/comm_nccl.h>
#include <pg_sparse/comm_staged.h>

namespace pg_sparse {

namespace {

// The c10d store as the NCCL transport's key-value store. Exceptions become
// PGS_ERR_COMM with their text kept for the error message.
struct StoreKv {
  c10::intrusive_ptr<c10d::Store> store;

  static int put(void* ctx, const char* key, const void* val, size_t n) {
    auto* self = static_cast<StoreKv*>(ctx);
    try {
      const auto* p = static_cast<const uint8_t*>(val);
      self->store->set(key, std::vector<uint8_t>(p, p + n));
      return PGS_OK;
    } catch (const std::exception& e) {
      last_transport_error() = e.what();
      return PGS_ERR_COMM;
    }
  }
  static int get(void* ctx, const char* key, void* val, size_t n, int* found) {
    auto* self = static_cast<StoreKv*>(ctx);
    try {
      *found = 0;
      if (!self->store->check({key})) return PGS_OK;
      std::vector<uint8_t> v = self->store->get(key);
      if (v.size() != n) return PGS_ERR_COMM;
      std::memcpy(val, v.data(), n);
      *found = 1;
      return PGS_OK;
    } catch (const std::exception& e) {
      last_transport_error() = e.what();
      return PGS_ERR_COMM;
    }
  }
};

}  // namespace

CommHandle make_cuda_p2p(const std::shared_ptr<CudaSide>& side,
                         c10::intrusive_ptr<c10d::Store> store, int rank,
                         int size, CommHandle host,
                         const std::string& host_transport) {
  const int device = cuda_side_device(*side);
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  pgs_comm_t* comm = nullptr;
  const std::string kind = cuda_side_p2p_kind(*side);
  if (kind == "nccl") {
    TORCH_CHECK(store, "pg_sparse: no store to bootstrap NCCL");
    auto* kv = new StoreKv{std::move(store)};
    const pgs_kv_t table{kv, &StoreKv::put, &StoreKv::get};
    int st = pgs_comm_nccl_p2p_create(&table, rank, size, device, &comm);
    if (st != PGS_OK) delete kv;
    check(st, "creating the NCCL point-to-point transport");
    return CommHandle(comm, [kv](pgs_comm_t* c) {
      pgs_comm_destroy(c);
      delete kv;
    });
  }
  // Staging relays on the host channel's messages: Open MPI's for the mpi
  // kinds, the group's own transport (gloo or Open MPI) for staged.
  TORCH_CHECK(kind == "staged" || host_transport == "mpi",
              "pg_sparse: PG_SPARSE_CUDA_TRANSPORT=", kind,
              " needs the Open MPI transport (launch "
              "with mpirun); this process group uses '",
              host_transport, "'");
  const bool direct = kind == "mpi" && mpi_cuda_aware();
  auto stream = c10::cuda::getStreamFromPool(
      false, static_cast<c10::DeviceIndex>(device));
  check(pgs_comm_staged_p2p_create(host.get(), stream.stream(), direct, &comm),
        "creating the staged point-to-point transport");
  return CommHandle(comm, [host](pgs_comm_t* c) { pgs_comm_destroy(c); });
}

void cuda_p2p_prepare(const CudaSide& side, Message& m) {
  const int device = cuda_side_device(side);
  TORCH_CHECK(m.tensor.device().index() == device,
              "pg_sparse::", m.is_send ? "send" : "recv",
              ": one process group serves one GPU per rank (cuda:", device,
              "), got a tensor on ", m.tensor.device());
  auto after = std::make_shared<at::cuda::CUDAEvent>();
  after->record(c10::cuda::getCurrentCUDAStream(device));
  m.after = after->event();
  m.keep = after;
  // The message is done on the device when its Work completes: nothing
  // left for the caller's stream to wait for.
  auto hooks = std::make_shared<DeviceHooks>();
  hooks->devices = {m.tensor.device()};
  hooks->on_stream = [](const std::function<void()>& fn) { fn(); };
  hooks->block_current = [] {};
  m.hooks = std::move(hooks);
}

}  // namespace pg_sparse

#endif  // PGS_SHIM_CUDA
