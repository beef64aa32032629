#include "collectives.hpp"

#include <optional>

#include "status.hpp"

namespace pg_sparse {

using RedOp = c10d::ReduceOp::RedOpType;

void check_tensor(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.layout() == at::kStrided, "pg_sparse::", op,
              ": only dense tensors are supported, got layout ", t.layout());
#ifdef PGS_SHIM_CUDA
  TORCH_CHECK(t.device().is_cpu() || t.device().is_cuda(), "pg_sparse::", op,
              ": tensors must be on the CPU or a CUDA GPU, got ", t.device());
#else
  TORCH_CHECK(t.device().is_cpu(), "pg_sparse::", op,
              ": tensors must be on the CPU in this build, got ", t.device());
#endif
}

at::Tensor single_tensor(std::vector<at::Tensor>& tensors, const char* op) {
  TORCH_CHECK(tensors.size() == 1, "pg_sparse::", op,
              ": expects exactly one tensor, got ", tensors.size());
  check_tensor(tensors[0], op);
  return tensors[0];
}

void check_reduce_op(RedOp op, const at::Tensor& t, const char* what) {
  const bool bitwise =
      op == RedOp::BAND || op == RedOp::BOR || op == RedOp::BXOR;
  TORCH_CHECK(op == RedOp::SUM || op == RedOp::AVG || op == RedOp::MAX ||
                  op == RedOp::MIN || op == RedOp::PRODUCT || bitwise,
              "pg_sparse::", what, ": unsupported reduce op ",
              static_cast<int>(op),
              " (supported: SUM, AVG, MAX, MIN, PRODUCT, BAND, BOR, BXOR)");
  TORCH_CHECK(op != RedOp::AVG || at::isFloatingType(t.scalar_type()),
              "pg_sparse::", what, ": AVG needs a floating-point tensor, got ",
              t.scalar_type());
  TORCH_CHECK(!bitwise || at::isIntegralType(t.scalar_type(), true),
              "pg_sparse::", what,
              ": BAND, BOR and BXOR need an integer or bool tensor, got ",
              t.scalar_type());
}

namespace {

// The transport reduces these natively (every transport: MPI with its own
// fp16/bf16 operations, gloo, NCCL); everything else goes through an
// allgather and a local torch reduction (P times the traffic).
std::optional<pgs_dtype_t> native_dtype(at::ScalarType s) {
  switch (s) {
    case at::kFloat: return PGS_FLOAT32;
    case at::kDouble: return PGS_FLOAT64;
    case at::kLong: return PGS_INT64;
    case at::kHalf: return PGS_FLOAT16;
    case at::kBFloat16: return PGS_BFLOAT16;
    default: return std::nullopt;
  }
}

std::optional<pgs_redop_t> native_op(RedOp op) {
  switch (op) {
    case RedOp::SUM:
    case RedOp::AVG: return PGS_SUM;
    case RedOp::MAX: return PGS_MAX;
    case RedOp::MIN: return PGS_MIN;
    default: return std::nullopt;
  }
}

}  // namespace

// Every rank's @p in, one after another in @p out (P times its size).
void allgather_blocks(pgs_comm_t* comm, const at::Tensor& in,
                      const at::Tensor& out, const char* what) {
  const int P = pgs_comm_size(comm);
  std::vector<size_t> bytes(P, in.nbytes()), displs(P);
  for (int r = 0; r < P; ++r) displs[r] = r * in.nbytes();
  check(pgs_comm_allgatherv(comm, in.data_ptr(), in.nbytes(), out.data_ptr(),
                            bytes.data(), displs.data()),
        what);
}

// Every rank's copy of t as rows of a [P, numel] tensor.
at::Tensor gather_rows(pgs_comm_t* comm, const at::Tensor& t) {
  at::Tensor all = at::empty({pgs_comm_size(comm), t.numel()}, t.options());
  allgather_blocks(comm, t, all, "allgather");
  return all;
}

namespace {

// Bitwise reductions fold the rows one after another.
at::Tensor fold_rows(const at::Tensor& rows, RedOp op) {
  at::Tensor acc = rows[0].clone();
  for (int64_t r = 1; r < rows.size(0); ++r) {
    if (op == RedOp::BAND) acc.bitwise_and_(rows[r]);
    if (op == RedOp::BOR) acc.bitwise_or_(rows[r]);
    if (op == RedOp::BXOR) acc.bitwise_xor_(rows[r]);
  }
  return acc;
}

}  // namespace

// Reduce the rows of @p rows (one per rank) with torch, keeping the dtype.
// On bool, as gloo does: SUM and MAX are a logical or, PRODUCT and MIN a
// logical and.
at::Tensor reduce_rows(const at::Tensor& rows, RedOp op) {
  auto dtype = rows.scalar_type();
  if (op == RedOp::BAND || op == RedOp::BOR || op == RedOp::BXOR)
    return fold_rows(rows, op);
  if (dtype == at::kBool)
    return op == RedOp::SUM || op == RedOp::MAX ? rows.any(0) : rows.all(0);
  switch (op) {
    case RedOp::SUM: return rows.sum(0, false, dtype);
    case RedOp::AVG: return rows.sum(0, false, dtype).div_(rows.size(0));
    case RedOp::PRODUCT: return rows.prod(0, false, dtype);
    case RedOp::MAX: return std::get<0>(rows.max(0));
    case RedOp::MIN: return std::get<0>(rows.min(0));
    default: TORCH_CHECK(false, "pg_sparse: unsupported reduce op");
  }
}

void run_broadcast(pgs_comm_t* comm, const at::Tensor& t, int root) {
  check(pgs_comm_bcast(comm, t.data_ptr(), t.nbytes(), root), "broadcast");
}

void run_allreduce(pgs_comm_t* comm, const at::Tensor& t, RedOp op) {
  auto dt = native_dtype(t.scalar_type());
  auto nop = native_op(op);
  if (dt && nop) {
    check(pgs_comm_allreduce(comm, t.data_ptr(), t.numel(), *dt, *nop),
          "allreduce");
    if (op == RedOp::AVG) t.div_(pgs_comm_size(comm));
    return;
  }
  at::Tensor rows = gather_rows(comm, t.reshape({-1}));
  t.copy_(reduce_rows(rows, op).view_as(t));
}

void run_allgather(pgs_comm_t* comm, const at::Tensor& in,
                   const std::vector<at::Tensor>& outs) {
  at::Tensor rows = gather_rows(comm, in.reshape({-1}));
  for (size_t r = 0; r < outs.size(); ++r)
    outs[r].copy_(rows[r].view_as(outs[r]));
}

void run_allgather_base(pgs_comm_t* comm, const at::Tensor& in,
                        const at::Tensor& out) {
  allgather_blocks(comm, in, out, "_allgather_base");
}

// Rank j's chunk goes to rank j; each rank reduces the P chunks it holds.
void run_reduce_scatter(pgs_comm_t* comm, const at::Tensor& in,
                        const at::Tensor& out, RedOp op) {
  const int P = pgs_comm_size(comm), me = pgs_comm_rank(comm);
  const size_t chunk = out.nbytes();
  at::Tensor rows = at::empty({P, out.numel()}, out.options());
  auto* src = static_cast<char*>(in.data_ptr());
  auto* dst = static_cast<char*>(rows.data_ptr());
  std::vector<pgs_msg_t> sends, recvs;
  for (int j = 0; j < P; ++j) {
    if (j == me || chunk == 0) continue;
    sends.push_back({j, src + j * chunk, chunk});
    recvs.push_back({j, dst + j * chunk, chunk});
  }
  // A tensor copy, not memcpy: the buffers may be on a GPU.
  rows[me].copy_(in.reshape({-1}).narrow(0, me * out.numel(), out.numel()));
  check(pgs_comm_exchange(comm, sends.data(), (int)sends.size(), recvs.data(),
                          (int)recvs.size()),
        "_reduce_scatter_base");
  out.copy_(reduce_rows(rows, op).view_as(out));
}

AlltoallPlan plan_alltoall(const at::Tensor& in, const at::Tensor& out,
                           const std::vector<int64_t>& in_splits,
                           const std::vector<int64_t>& out_splits, int size) {
  TORCH_CHECK(
      in.dim() >= 1 && out.dim() >= 1 && in.scalar_type() == out.scalar_type(),
      "pg_sparse::alltoall_base: tensors need a first dimension and "
      "one dtype");
  AlltoallPlan p;
  auto fill = [&](const at::Tensor& t, const std::vector<int64_t>& splits,
                  std::vector<size_t>& bytes, std::vector<size_t>& off) {
    const int64_t rows = t.size(0);
    const size_t row = rows ? t.nbytes() / rows : 0;
    TORCH_CHECK(splits.empty() || (int)splits.size() == size,
                "pg_sparse::alltoall_base: need one split per rank");
    TORCH_CHECK(!splits.empty() || rows % size == 0,
                "pg_sparse::alltoall_base: dim 0 (", rows,
                ") must divide by world size without split sizes");
    size_t at = 0;
    int64_t sum = 0;
    for (int j = 0; j < size; ++j) {
      int64_t n = splits.empty() ? rows / size : splits[j];
      TORCH_CHECK(n >= 0, "pg_sparse::alltoall_base: negative split size");
      bytes.push_back(n * row);
      off.push_back(at);
      at += n * row;
      sum += n;
    }
    TORCH_CHECK(sum == rows, "pg_sparse::alltoall_base: split sizes sum to ",
                sum, " but dim 0 is ", rows);
  };
  fill(in, in_splits, p.send_bytes, p.send_off);
  fill(out, out_splits, p.recv_bytes, p.recv_off);
  return p;
}

void run_alltoall(pgs_comm_t* comm, const at::Tensor& in, const at::Tensor& out,
                  const AlltoallPlan& p) {
  const int P = pgs_comm_size(comm), me = pgs_comm_rank(comm);
  auto* src = static_cast<char*>(in.data_ptr());
  auto* dst = static_cast<char*>(out.data_ptr());
  TORCH_CHECK(p.send_bytes[me] == p.recv_bytes[me],
              "pg_sparse::alltoall_base: this rank sends itself ",
              p.send_bytes[me], " bytes but expects ", p.recv_bytes[me]);
  std::vector<pgs_msg_t> sends, recvs;
  for (int j = 0; j < P; ++j) {
    if (j == me) continue;
    if (p.send_bytes[j])
      sends.push_back({j, src + p.send_off[j], p.send_bytes[j]});
    if (p.recv_bytes[j])
      recvs.push_back({j, dst + p.recv_off[j], p.recv_bytes[j]});
  }
  // The own block as a byte copy through tensors (the buffers may be on a
  // GPU, where memcpy cannot reach).
  if (p.send_bytes[me] > 0) {
    auto bytes = [](const at::Tensor& t) {
      return at::from_blob(t.data_ptr(), {static_cast<int64_t>(t.nbytes())},
                           t.options().dtype(at::kByte));
    };
    bytes(out)
        .narrow(0, p.recv_off[me], p.recv_bytes[me])
        .copy_(bytes(in).narrow(0, p.send_off[me], p.send_bytes[me]));
  }
  check(pgs_comm_exchange(comm, sends.data(), (int)sends.size(), recvs.data(),
                          (int)recvs.size()),
        "alltoall_base");
}

}  // namespace pg_sparse
