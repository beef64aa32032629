// Rooted, list-form, coalesced and sparse collectives over pgs_comm. Each is
// a short composition of the transport's allgather, allreduce and exchange:
// correct for every dtype and shape first (gloo's own choice for most of
// them), with the few bytes of extra traffic that costs.
#include "collectives.hpp"
#include "status.hpp"

namespace pg_sparse {

using RedOp = c10d::ReduceOp::RedOpType;

namespace {

// One flat tensor holding @p ts one after another (all one dtype).
at::Tensor flatten(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> flat;
  flat.reserve(ts.size());
  for (const auto& t : ts) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

// Copies consecutive pieces of @p flat into @p ts.
void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& ts) {
  int64_t at = 0;
  for (const auto& t : ts) {
    t.copy_(flat.narrow(0, at, t.numel()).view_as(t));
    at += t.numel();
  }
}

// One batch of whole-tensor messages: sends[j] goes to rank j, recvs[j]
// comes from rank j. Entries left undefined (and this rank's own) are no
// message.
void exchange_tensors(pgs_comm_t* comm, const std::vector<at::Tensor>& sends,
                      const std::vector<at::Tensor>& recvs, const char* what) {
  const int me = pgs_comm_rank(comm);
  std::vector<pgs_msg_t> s, r;
  auto add = [me](std::vector<pgs_msg_t>& msgs,
                  const std::vector<at::Tensor>& ts) {
    for (size_t j = 0; j < ts.size(); ++j)
      if (static_cast<int>(j) != me && ts[j].defined() && ts[j].nbytes() > 0)
        msgs.push_back({static_cast<int>(j), ts[j].data_ptr(), ts[j].nbytes()});
  };
  add(s, sends);
  add(r, recvs);
  check(pgs_comm_exchange(comm, s.data(), static_cast<int>(s.size()), r.data(),
                          static_cast<int>(r.size())),
        what);
}

}  // namespace

// An allreduce into a scratch copy: the root takes the result, the other
// ranks' tensors stay as they were.
void run_reduce(pgs_comm_t* comm, const at::Tensor& t, RedOp op, int root) {
  at::Tensor work = t.clone();
  run_allreduce(comm, work, op);
  if (pgs_comm_rank(comm) == root) t.copy_(work);
}

void run_gather(pgs_comm_t* comm, const at::Tensor& in,
                const std::vector<at::Tensor>& outs, int root) {
  const int me = pgs_comm_rank(comm);
  if (me == root) {
    outs[me].copy_(in.view_as(outs[me]));
    exchange_tensors(comm, {}, outs, "gather");
  } else {
    std::vector<at::Tensor> to(pgs_comm_size(comm));
    to[root] = in;
    exchange_tensors(comm, to, {}, "gather");
  }
}

void run_scatter(pgs_comm_t* comm, const at::Tensor& out,
                 const std::vector<at::Tensor>& ins, int root) {
  const int me = pgs_comm_rank(comm);
  if (me == root) {
    out.copy_(ins[me].view_as(out));
    exchange_tensors(comm, ins, {}, "scatter");
  } else {
    std::vector<at::Tensor> from(pgs_comm_size(comm));
    from[root] = out;
    exchange_tensors(comm, {}, from, "scatter");
  }
}

void run_alltoall_list(pgs_comm_t* comm, const std::vector<at::Tensor>& outs,
                       const std::vector<at::Tensor>& ins) {
  const int me = pgs_comm_rank(comm);
  outs[me].copy_(ins[me].view_as(outs[me]));
  exchange_tensors(comm, ins, outs, "alltoall");
}

void run_allreduce_coalesced(pgs_comm_t* comm,
                             const std::vector<at::Tensor>& tensors, RedOp op) {
  at::Tensor flat = flatten(tensors);
  run_allreduce(comm, flat, op);
  unflatten(flat, tensors);
}

// outs[r][i] is rank r's inputs[i]: every rank's inputs travel as one block.
void run_allgather_coalesced(pgs_comm_t* comm,
                             const std::vector<std::vector<at::Tensor>>& outs,
                             const std::vector<at::Tensor>& ins) {
  at::Tensor mine = flatten(ins);
  at::Tensor all = gather_rows(comm, mine);
  for (size_t r = 0; r < outs.size(); ++r)
    unflatten(all[static_cast<int64_t>(r)], outs[r]);
}

void run_sparse_allreduce(pgs_comm_t* comm, const at::Tensor& t) {
  const int P = pgs_comm_size(comm);
  at::Tensor s = t.coalesce();
  // Indices as [nnz, sparse_dim] rows, so each rank's block is contiguous.
  at::Tensor idx = s._indices().t().contiguous();
  at::Tensor val = s._values().contiguous();
  const int64_t nnz = idx.size(0);
  std::vector<int64_t> counts(P);
  check(pgs_comm_allgather_host(comm, &nnz, 1, counts.data()),
        "allreduce (sparse)");
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  // Every rank's rows of @p mine (nnz rows of row_bytes each) in rank order.
  auto gather = [&](const at::Tensor& mine) {
    std::vector<int64_t> shape = mine.sizes().vec();
    shape[0] = total;
    at::Tensor out = at::empty(shape, mine.options());
    int64_t per_row = 1;
    for (int64_t d = 1; d < mine.dim(); ++d) per_row *= mine.size(d);
    const size_t row = static_cast<size_t>(per_row * mine.element_size());
    std::vector<size_t> bytes(P), displs(P);
    size_t at = 0;
    for (int r = 0; r < P; ++r) {
      bytes[r] = counts[r] * row;
      displs[r] = at;
      at += bytes[r];
    }
    check(pgs_comm_allgatherv(comm, mine.data_ptr(), mine.nbytes(),
                              out.data_ptr(), bytes.data(), displs.data()),
          "allreduce (sparse)");
    return out;
  };
  at::Tensor all_idx = gather(idx).t();
  at::Tensor all_val = gather(val);
  at::Tensor sum =
      at::sparse_coo_tensor(all_idx, all_val, t.sizes(), t.options())
          .coalesce();
  t.copy_(sum);
}

}  // namespace pg_sparse
