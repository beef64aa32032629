// dist.send/recv/isend/irecv of CUDA tensors: the CUDA point-to-point
// channel and what a message of a CUDA tensor carries. Only built when torch
// has CUDA.
//
// Over NCCL (the default) the channel is libpgsparse_cuda's NCCL
// point-to-point transport: one two-rank communicator per peer and
// direction, created on first use from an id the sender puts in the c10d
// store. As with ProcessGroupNCCL, tags are not matched: messages between
// two ranks in one direction arrive in the order they were sent. Under
// PG_SPARSE_CUDA_TRANSPORT=mpi or mpi-staged, the messages are the host
// channel's Open MPI messages, staged through pinned memory (or handed over
// as device pointers to a CUDA-aware Open MPI).
#pragma once

#ifdef PGS_SHIM_CUDA

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <memory>
#include <string>

#include "backend.hpp"
#include "p2p.hpp"

namespace pg_sparse {

class CudaSide;

// The point-to-point channel for CUDA tensors of @p side's device, as its
// transport kind asks. @p host: the backend's host channel, over
// @p host_transport ("mpi" or "gloo"); kept alive by the new channel.
CommHandle make_cuda_p2p(const std::shared_ptr<CudaSide>& side,
                         c10::intrusive_ptr<c10d::Store> store, int rank,
                         int size, CommHandle host,
                         const std::string& host_transport);

// Caller's thread: checks @p m's tensor is on @p side's device and records
// the event the message starts after on the caller's current stream. The
// Work completes once the message is done on the device, so waiting on it
// needs no stream handoff.
void cuda_p2p_prepare(const CudaSide& side, Message& m);

}  // namespace pg_sparse

#endif  // PGS_SHIM_CUDA
