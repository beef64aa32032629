// dist.send/recv/isend/irecv of CUDA tensors. Only built when torch has CUDA.
//
// Over NCCL (the default), each peer and direction gets a two-rank NCCL
// communicator of its own, created non-blocking on first use from an id the
// sender puts in the c10d store; a thread of the backend creates them and
// posts the messages, so the caller never blocks on a peer. As with
// ProcessGroupNCCL, tags are not matched: messages between two ranks in one
// direction arrive in the order they were sent.
//
// Under PG_SPARSE_CUDA_TRANSPORT=mpi or mpi-staged, messages go over the
// host transport's Open MPI messages, staged through pinned memory.
#pragma once

#ifdef PGS_SHIM_CUDA

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <memory>
#include <string>

#include "backend.hpp"

namespace pg_sparse {

class CudaSide;

// The point-to-point channel for CUDA tensors of @p side's device, as its
// transport kind asks. @p host: the backend's own (host tensors), over
// @p host_transport ("mpi" or "gloo").
std::shared_ptr<PointToPoint> make_cuda_p2p(
    const std::shared_ptr<CudaSide>& side,
    c10::intrusive_ptr<c10d::Store> store, int rank,
    std::shared_ptr<PointToPoint> host, const std::string& host_transport);

}  // namespace pg_sparse

#endif  // PGS_SHIM_CUDA
