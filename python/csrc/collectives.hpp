// Dense collectives of the backend, expressed over the pgs_comm transport.
// Each run_* executes on the worker thread and throws on failure; the check_*
// and plan_* helpers validate on the caller's thread, so bad arguments raise
// at the call site.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <vector>

extern "C" {
#include <pg_sparse/comm.h>
}

namespace pg_sparse {

void check_tensor(const at::Tensor& t, const char* op);
void check_reduce_op(c10d::ReduceOp::RedOpType op, const at::Tensor& t,
                     const char* what);

// Byte counts and offsets of an alltoall, per rank.
struct AlltoallPlan {
  std::vector<size_t> send_bytes, send_off, recv_bytes, recv_off;
};
AlltoallPlan plan_alltoall(const at::Tensor& in, const at::Tensor& out,
                           const std::vector<int64_t>& in_splits,
                           const std::vector<int64_t>& out_splits, int size);

void run_broadcast(pgs_comm_t* comm, const at::Tensor& t, int root);
void run_allreduce(pgs_comm_t* comm, const at::Tensor& t,
                   c10d::ReduceOp::RedOpType op);
void run_allgather(pgs_comm_t* comm, const at::Tensor& in,
                   const std::vector<at::Tensor>& outs);
void run_allgather_base(pgs_comm_t* comm, const at::Tensor& in,
                        const at::Tensor& out);
void run_reduce_scatter(pgs_comm_t* comm, const at::Tensor& in,
                        const at::Tensor& out, c10d::ReduceOp::RedOpType op);
void run_alltoall(pgs_comm_t* comm, const at::Tensor& in, const at::Tensor& out,
                  const AlltoallPlan& plan);

}  // namespace pg_sparse
