// The CUDA side of a backend: a comm stream, the CUDA ops table on it, and a
// device transport (NCCL, bootstrapped through the c10d store) created on
// first use by the worker thread. Only built when torch has CUDA.
#pragma once

#ifdef PGS_SHIM_CUDA

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "device.hpp"

extern "C" {
#include <pg_sparse/comm.h>
#include <pg_sparse/ops.h>
}

namespace pg_sparse {

class CudaSide;

// Caller's thread, cheap: no communication until cuda_comm(), which under
// PG_SPARSE_CUDA_TRANSPORT=auto first has every rank put its GPU's UUID in
// @p store and read the others', so all choose alike. @p global_ranks: the
// group's MPI ranks, for PG_SPARSE_CUDA_TRANSPORT=mpi; @p make_host_comm: a
// host transport of the group's own kind, for staging.
std::shared_ptr<CudaSide> cuda_side_create(
    c10::intrusive_ptr<c10d::Store> store, int rank, int size, int device,
    std::vector<int64_t> global_ranks,
    std::function<pgs_comm_t*()> make_host_comm);
int cuda_side_device(const CudaSide& side);
// The collectives' device transport: nccl, mpi (CUDA-aware Open MPI, or
// staged where it is not), mpi-staged, or staged (through the host
// transport: gloo under torchrun, Open MPI under mpirun). auto resolves at
// the first CUDA collective (every rank takes part): staged where two ranks
// share a GPU (NCCL refuses them), else nccl; "auto" until then.
std::string cuda_side_kind(CudaSide& side);
// What send/recv of CUDA tensors take: the collectives' transport once
// resolved, else the one requested, with auto taking NCCL (a message
// involves two ranks, the decision all of them).
std::string cuda_side_p2p_kind(CudaSide& side);

// Caller's thread: the comm stream waits for the caller's current stream and
// the tensors' memory is kept for it until the task is done.
std::shared_ptr<DeviceHooks> cuda_prepare(
    const std::shared_ptr<CudaSide>& side,
    const std::vector<at::Tensor>& tensors);

// Worker thread: the device transport (created collectively on first use)
// and the ops table, both on the comm stream.
pgs_comm_t* cuda_comm(CudaSide& side);
const pgs_ops_t* cuda_ops(CudaSide& side);

}  // namespace pg_sparse

#endif  // PGS_SHIM_CUDA
