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
// The one tensor of @p tensors, checked.
at::Tensor single_tensor(std::vector<at::Tensor>& tensors, const char* op);
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

// Building blocks (collectives.cpp): every rank's @p in one after another
// in @p out; every rank's copy of @p t as the rows of a [P, numel] tensor;
// the rows reduced with torch as gloo reduces them.
void allgather_blocks(pgs_comm_t* comm, const at::Tensor& in,
                      const at::Tensor& out, const char* what);
at::Tensor gather_rows(pgs_comm_t* comm, const at::Tensor& t);
at::Tensor reduce_rows(const at::Tensor& rows, c10d::ReduceOp::RedOpType op);

// Collectives work on contiguous buffers: a non-contiguous tensor gets a
// contiguous copy (copy in), and an output is copied back after the task.
inline void copy_back(const at::Tensor& orig, const at::Tensor& buf) {
  if (!orig.is_same(buf)) orig.copy_(buf);
}

// Rooted, list-form, coalesced and sparse collectives (collectives_lists.cpp),
// simple compositions of the ones above: correctness first, as gloo.
void run_reduce(pgs_comm_t* comm, const at::Tensor& t,
                c10d::ReduceOp::RedOpType op, int root);
void run_gather(pgs_comm_t* comm, const at::Tensor& in,
                const std::vector<at::Tensor>& outs, int root);
void run_scatter(pgs_comm_t* comm, const at::Tensor& out,
                 const std::vector<at::Tensor>& ins, int root);
void run_alltoall_list(pgs_comm_t* comm, const std::vector<at::Tensor>& outs,
                       const std::vector<at::Tensor>& ins);
void run_allreduce_coalesced(pgs_comm_t* comm,
                             const std::vector<at::Tensor>& tensors,
                             c10d::ReduceOp::RedOpType op);
void run_allgather_coalesced(pgs_comm_t* comm,
                             const std::vector<std::vector<at::Tensor>>& outs,
                             const std::vector<at::Tensor>& ins);
// SUM of sparse COO tensors: every rank's coalesced indices and values
// gathered, summed and coalesced, written into @p t.
void run_sparse_allreduce(pgs_comm_t* comm, const at::Tensor& t);

}  // namespace pg_sparse
