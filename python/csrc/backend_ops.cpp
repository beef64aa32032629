// The backend's collectives: arguments checked on the caller's thread (so a
// bad call raises where it is made), the transport work queued for the
// worker (collectives.cpp, collectives_lists.cpp). Non-contiguous tensors
// get contiguous copies, copied back into the caller's outputs after the
// task.
#include <c10/util/Exception.h>

#include "backend.hpp"
#include "collectives.hpp"
#include "status.hpp"

namespace pg_sparse {

using RedOp = c10d::ReduceOp::RedOpType;

namespace {

// Contiguous stand-ins of @p ts (the same tensors where already contiguous).
std::vector<at::Tensor> dense(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  for (const auto& t : ts) out.push_back(t.contiguous());
  return out;
}

// What route() must see of a CUDA task: its arguments and the contiguous
// copies made of them on the caller's stream, so the comm stream waits for
// those copies and the caching allocator keeps them until the task is done.
std::vector<at::Tensor> joined(std::vector<at::Tensor> a,
                               const std::vector<at::Tensor>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

void copy_back_all(const std::vector<at::Tensor>& orig,
                   const std::vector<at::Tensor>& buf) {
  for (size_t i = 0; i < orig.size(); ++i) copy_back(orig[i], buf[i]);
}

void check_root(int64_t root, int size, const char* op) {
  TORCH_CHECK(root >= 0 && root < size, "pg_sparse::", op, ": root rank ", root,
              " out of range [0, ", size, ")");
}

// @p t matches @p like in element count and dtype.
void check_like(const at::Tensor& t, const at::Tensor& like, const char* op) {
  check_tensor(t, op);
  TORCH_CHECK(
      t.numel() == like.numel() && t.scalar_type() == like.scalar_type(),
      "pg_sparse::", op, ": tensors must match in size and dtype (",
      like.numel(), " x ", like.scalar_type(), "), got ", t.numel(), " x ",
      t.scalar_type());
}

void check_all(const std::vector<at::Tensor>& ts, const char* op) {
  TORCH_CHECK(!ts.empty(), "pg_sparse::", op, ": needs at least one tensor");
  for (const auto& t : ts) {
    check_tensor(t, op);
    TORCH_CHECK(t.scalar_type() == ts[0].scalar_type(), "pg_sparse::", op,
                ": all tensors must have one dtype");
  }
}

}  // namespace

c10::intrusive_ptr<c10d::Work> SparseBackend::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  at::Tensor t = single_tensor(tensors, "broadcast");
  check_root(opts.rootRank, size_, "broadcast");
  at::Tensor c = t.contiguous();
  Route r = route({t, c});
  int root = static_cast<int>(opts.rootRank);
  return enqueue(
      c10d::OpType::BROADCAST, "pg_sparse:broadcast", tensors,
      [r, t, c, root] {
        run_broadcast(r.comm(), c, root);
        copy_back(t, c);
      },
      opts.timeout, r.dev);
}

c10::intrusive_ptr<c10d::Work> SparseBackend::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1,
              "pg_sparse::allreduce: expects exactly one tensor, got ",
              tensors.size());
  at::Tensor t = tensors[0];
  auto op = opts.reduceOp.op_;
  if (t.layout() == at::kSparse) {
    // DDP over a sparse embedding: gloo's sparse allreduce, a sum.
    TORCH_CHECK(op == RedOp::SUM,
                "pg_sparse::allreduce: sparse tensors support SUM only");
    // A sparse tensor has no storage of its own: the stream handoff keeps
    // its indices and values.
    Route r = route({t._indices(), t._values()});
    return enqueue(
        c10d::OpType::ALLREDUCE, "pg_sparse:allreduce", tensors,
        [r, t] { run_sparse_allreduce(r.comm(), t); }, opts.timeout, r.dev);
  }
  check_tensor(t, "allreduce");
  check_reduce_op(op, t, "allreduce");
  at::Tensor c = t.contiguous();
  Route r = route({t, c});
  return enqueue(
      c10d::OpType::ALLREDUCE, "pg_sparse:allreduce", tensors,
      [r, t, c, op] {
        run_allreduce(r.comm(), c, op);
        copy_back(t, c);
      },
      opts.timeout, r.dev);
}

c10::intrusive_ptr<c10d::Work> SparseBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceCoalescedOptions& opts) {
  check_all(tensors, "allreduce_coalesced");
  auto op = opts.reduceOp.op_;
  check_reduce_op(op, tensors[0], "allreduce_coalesced");
  Route r = route(tensors);
  auto ts = tensors;
  return enqueue(
      c10d::OpType::ALLREDUCE_COALESCED, "pg_sparse:allreduce_coalesced",
      tensors, [r, ts, op] { run_allreduce_coalesced(r.comm(), ts, op); },
      opts.timeout, r.dev);
}

c10::intrusive_ptr<c10d::Work> SparseBackend::reduce(
    std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  at::Tensor t = single_tensor(tensors, "reduce");
  check_root(opts.rootRank, size_, "reduce");
  auto op = opts.reduceOp.op_;
  check_reduce_op(op, t, "reduce");
  at::Tensor c = t.contiguous();
  Route r = route({t, c});
  int root = static_cast<int>(opts.rootRank);
  return enqueue(
      c10d::OpType::REDUCE, "pg_sparse:reduce", tensors,
      [r, t, c, op, root] {
        run_reduce(r.comm(), c, op, root);
        copy_back(t, c);
      },
      opts.timeout, r.dev);
}

c10::intrusive_ptr<c10d::Work> SparseBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  at::Tensor in = single_tensor(inputs, "allgather");
  TORCH_CHECK(
      outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
      "pg_sparse::allgather: expects one list of ", size_, " output tensors");
  for (auto& o : outputs[0]) check_like(o, in, "allgather");
  auto outs = outputs[0];
  std::vector<at::Tensor> all = outs;
  all.push_back(in);
  at::Tensor c = in.contiguous();
  Route r = route(joined(all, {c}));
  return enqueue(
      c10d::OpType::ALLGATHER, "pg_sparse:allgather", outs,
      [r, c, outs] { run_allgather(r.comm(), c, outs); }, opts.timeout, r.dev);
}

c10::intrusive_ptr<c10d::Work> SparseBackend::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  check_tensor(input, "_allgather_base");
  check_tensor(output, "_allgather_base");
  TORCH_CHECK(output.numel() == input.numel() * size_ &&
                  output.scalar_type() == input.scalar_type(),
              "pg_sparse::_allgather_base: output must hold world_size times "
              "the input, same dtype");
  at::Tensor in = input.contiguous(), out = output, oc = output.contiguous();
  Route r = route({in, out, oc});
  return enqueue(
      c10d::OpType::_ALLGATHER_BASE, "pg_sparse:_allgather_base", {out},
      [r, in, out, oc] {
        run_allgather_base(r.comm(), in, oc);
        copy_back(out, oc);
      },
      opts.timeout, r.dev);
}

c10::intrusive_ptr<c10d::Work> SparseBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  check_all(inputs, "allgather_coalesced");
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_,
              "pg_sparse::allgather_coalesced: expects ", size_,
              " output lists, got ", outputs.size());
  std::vector<at::Tensor> all = inputs, flat_outs;
  for (auto& list : outputs) {
    TORCH_CHECK(list.size() == inputs.size(),
                "pg_sparse::allgather_coalesced: each output list must have ",
                inputs.size(), " tensors");
    for (size_t i = 0; i < list.size(); ++i) {
      check_like(list[i], inputs[i], "allgather_coalesced");
      all.push_back(list[i]);
      flat_outs.push_back(list[i]);
    }
  }
  Route r = route(all);
  auto ins = inputs;
  auto outs = outputs;
  return enqueue(
      c10d::OpType::ALLGATHER_COALESCED, "pg_sparse:allgather_coalesced",
      flat_outs,
      [r, ins, outs] { run_allgather_coalesced(r.comm(), outs, ins); },
      opts.timeout, r.dev);
}

c10::intrusive_ptr<c10d::Work> SparseBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(),
              "pg_sparse::allgather_into_tensor_coalesced: expects one output "
              "per input");
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_tensor(inputs[i], "allgather_into_tensor_coalesced");
    check_tensor(outputs[i], "allgather_into_tensor_coalesced");
    TORCH_CHECK(outputs[i].numel() == inputs[i].numel() * size_ &&
                    outputs[i].scalar_type() == inputs[i].scalar_type(),
                "pg_sparse::allgather_into_tensor_coalesced: output ", i,
                " must hold world_size times its input, same dtype");
  }
  std::vector<at::Tensor> all = inputs;
  all.insert(all.end(), outputs.begin(), outputs.end());
  auto ins = dense(inputs), outs = outputs, ocs = dense(outputs);
  Route r = route(joined(joined(all, ins), ocs));
  return enqueue(
      c10d::OpType::COALESCED, "pg_sparse:allgather_into_tensor_coalesced",
      outputs,
      [r, ins, outs, ocs] {
        for (size_t i = 0; i < ins.size(); ++i)
          run_allgather_base(r.comm(), ins[i], ocs[i]);
        copy_back_all(outs, ocs);
      },
      opts.timeout, r.dev);
}

c10::intrusive_ptr<c10d::Work> SparseBackend::gather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  at::Tensor in = single_tensor(inputs, "gather");
  check_root(opts.rootRank, size_, "gather");
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> outs;
  if (rank_ == root) {
    TORCH_CHECK(
        outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
        "pg_sparse::gather: the root expects one list of ", size_,
        " output tensors");
    for (auto& o : outputs[0]) check_like(o, in, "gather");
    outs = outputs[0];
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                "pg_sparse::gather: only the root passes output tensors");
  }
  std::vector<at::Tensor> all = outs;
  all.push_back(in);
  auto ocs = dense(outs);
  at::Tensor c = in.contiguous();
  Route r = route(joined(joined(all, ocs), {c}));
  return enqueue(
      c10d::OpType::GATHER, "pg_sparse:gather", outs,
      [r, c, outs, ocs, root] {
        run_gather(r.comm(), c, ocs, root);
        copy_back_all(outs, ocs);
      },
      opts.timeout, r.dev);
}

c10::intrusive_ptr<c10d::Work> SparseBackend::scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  at::Tensor out = single_tensor(outputs, "scatter");
  check_root(opts.rootRank, size_, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> ins;
  if (rank_ == root) {
    TORCH_CHECK(
        inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
        "pg_sparse::scatter: the root expects one list of ", size_,
        " input tensors");
    for (auto& i : inputs[0]) check_like(i, out, "scatter");
    ins = inputs[0];
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                "pg_sparse::scatter: only the root passes input tensors");
  }
  std::vector<at::Tensor> all = ins;
  all.push_back(out);
  auto ics = dense(ins);
  at::Tensor oc = out.contiguous();
  Route r = route(joined(joined(all, ics), {oc}));
  return enqueue(
      c10d::OpType::SCATTER, "pg_sparse:scatter", outputs,
      [r, out, oc, ics, root] {
        run_scatter(r.comm(), oc, ics, root);
        copy_back(out, oc);
      },
      opts.timeout, r.dev);
}

c10::intrusive_ptr<c10d::Work> SparseBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  at::Tensor out = single_tensor(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
              "pg_sparse::reduce_scatter: expects one list of ", size_,
              " input tensors");
  for (auto& i : inputs[0]) check_like(i, out, "reduce_scatter");
  auto op = opts.reduceOp.op_;
  check_reduce_op(op, out, "reduce_scatter");
  std::vector<at::Tensor> all = inputs[0];
  all.push_back(out);
  auto ins = inputs[0];
  at::Tensor oc = out.contiguous();
  Route r = route(joined(all, {oc}));
  return enqueue(
      c10d::OpType::REDUCE_SCATTER, "pg_sparse:reduce_scatter", outputs,
      [r, out, oc, ins, op] {
        std::vector<at::Tensor> flat;
        for (const auto& i : ins) flat.push_back(i.reshape({-1}));
        run_reduce_scatter(r.comm(), at::cat(flat), oc, op);
        copy_back(out, oc);
      },
      opts.timeout, r.dev);
}

c10::intrusive_ptr<c10d::Work> SparseBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input,
    const c10d::ReduceScatterOptions& opts) {
  check_tensor(input, "_reduce_scatter_base");
  check_tensor(output, "_reduce_scatter_base");
  TORCH_CHECK(input.numel() == output.numel() * size_ &&
                  output.scalar_type() == input.scalar_type(),
              "pg_sparse::_reduce_scatter_base: input must hold world_size "
              "times the output, same dtype");
  auto op = opts.reduceOp.op_;
  check_reduce_op(op, input, "_reduce_scatter_base");
  at::Tensor in = input.contiguous(), out = output, oc = output.contiguous();
  Route r = route({in, out, oc});
  return enqueue(
      c10d::OpType::_REDUCE_SCATTER_BASE, "pg_sparse:_reduce_scatter_base",
      {out},
      [r, in, out, oc, op] {
        run_reduce_scatter(r.comm(), in, oc, op);
        copy_back(out, oc);
      },
      opts.timeout, r.dev);
}

c10::intrusive_ptr<c10d::Work> SparseBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(),
              "pg_sparse::reduce_scatter_tensor_coalesced: expects one output "
              "per input");
  auto op = opts.reduceOp.op_;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_tensor(inputs[i], "reduce_scatter_tensor_coalesced");
    check_tensor(outputs[i], "reduce_scatter_tensor_coalesced");
    TORCH_CHECK(inputs[i].numel() == outputs[i].numel() * size_ &&
                    outputs[i].scalar_type() == inputs[i].scalar_type(),
                "pg_sparse::reduce_scatter_tensor_coalesced: input ", i,
                " must hold world_size times its output, same dtype");
    check_reduce_op(op, inputs[i], "reduce_scatter_tensor_coalesced");
  }
  std::vector<at::Tensor> all = inputs;
  all.insert(all.end(), outputs.begin(), outputs.end());
  auto ins = dense(inputs), outs = outputs, ocs = dense(outputs);
  Route r = route(joined(joined(all, ins), ocs));
  return enqueue(
      c10d::OpType::COALESCED, "pg_sparse:reduce_scatter_tensor_coalesced",
      outputs,
      [r, ins, outs, ocs, op] {
        for (size_t i = 0; i < ins.size(); ++i)
          run_reduce_scatter(r.comm(), ins[i], ocs[i], op);
        copy_back_all(outs, ocs);
      },
      opts.timeout, r.dev);
}

c10::intrusive_ptr<c10d::Work> SparseBackend::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
    std::vector<int64_t>& input_splits, const c10d::AllToAllOptions& opts) {
  check_tensor(input, "alltoall_base");
  check_tensor(output, "alltoall_base");
  auto plan = plan_alltoall(input, output, input_splits, output_splits, size_);
  at::Tensor in = input.contiguous(), out = output, oc = output.contiguous();
  Route r = route({in, out, oc});
  return enqueue(
      c10d::OpType::ALLTOALL_BASE, "pg_sparse:alltoall_base", {out},
      [r, in, out, oc, plan] {
        run_alltoall(r.comm(), in, oc, plan);
        copy_back(out, oc);
      },
      opts.timeout, r.dev);
}

c10::intrusive_ptr<c10d::Work> SparseBackend::alltoall(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllToAllOptions& opts) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ &&
                  static_cast<int>(outputs.size()) == size_,
              "pg_sparse::alltoall: expects ", size_,
              " input and output tensors");
  check_all(inputs, "alltoall");
  check_all(outputs, "alltoall");
  TORCH_CHECK(inputs[0].scalar_type() == outputs[0].scalar_type(),
              "pg_sparse::alltoall: inputs and outputs must have one dtype");
  TORCH_CHECK(inputs[rank_].numel() == outputs[rank_].numel(),
              "pg_sparse::alltoall: this rank sends itself ",
              inputs[rank_].numel(), " elements but expects ",
              outputs[rank_].numel());
  std::vector<at::Tensor> all = inputs;
  all.insert(all.end(), outputs.begin(), outputs.end());
  auto ins = dense(inputs), outs = outputs, ocs = dense(outputs);
  Route r = route(joined(joined(all, ins), ocs));
  return enqueue(
      c10d::OpType::ALLTOALL, "pg_sparse:alltoall", outputs,
      [r, ins, outs, ocs] {
        run_alltoall_list(r.comm(), ocs, ins);
        copy_back_all(outs, ocs);
      },
      opts.timeout, r.dev);
}

c10::intrusive_ptr<c10d::Work> SparseBackend::barrier(
    const c10d::BarrierOptions& opts) {
  auto comm = comm_;
  return enqueue(
      c10d::OpType::BARRIER, "pg_sparse:barrier", {},
      [comm] { check(pgs_comm_barrier(comm.get()), "barrier"); }, opts.timeout);
}

}  // namespace pg_sparse
