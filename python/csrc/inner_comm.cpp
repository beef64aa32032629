// The `ext` transport over another c10d backend's collectives (gloo under
// torchrun: Open MPI cannot join processes it did not launch).
#include <c10/util/Exception.h>

#include <cstring>

#include "status.hpp"
#include "transports.hpp"

namespace pg_sparse {

std::string& last_transport_error() {
  thread_local std::string text;
  return text;
}

namespace {

// Tags of the transport's own messages: kTagBase + (n mod kTagBase) for the
// n-th message between two ranks, disjoint from the user's tags (< kTagBase,
// which the backend checks), so dist.send/recv on the same gloo backend can
// never match an algorithm's message.
constexpr uint32_t kTagBase = 1u << 30;

struct InnerComm {
  c10::intrusive_ptr<c10d::Backend> inner;
  int size = 1;
  // Per-peer message counters: the n-th message between two ranks gets the
  // same tag on both sides, so messages match even when several go to one
  // peer.
  std::vector<uint32_t> send_seq, recv_seq;
  std::vector<c10::intrusive_ptr<c10d::Work>> slots[PGS_COMM_SLOTS];
};

InnerComm* self(void* impl) { return static_cast<InnerComm*>(impl); }

int next_tag(uint32_t& seq) {
  return static_cast<int>(kTagBase | (seq++ & (kTagBase - 1)));
}

at::Tensor bytes_of(void* p, size_t n) {
  return at::from_blob(p, {static_cast<int64_t>(n)}, at::kByte);
}

at::ScalarType scalar_of(pgs_dtype_t t) {
  switch (t) {
    case PGS_INT64: return at::kLong;
    case PGS_FLOAT64: return at::kDouble;
    case PGS_FLOAT16: return at::kHalf;
    case PGS_BFLOAT16: return at::kBFloat16;
    default: return at::kFloat;
  }
}

c10d::ReduceOp op_of(pgs_redop_t op) {
  switch (op) {
    case PGS_MAX: return c10d::ReduceOp::MAX;
    case PGS_MIN: return c10d::ReduceOp::MIN;
    default: return c10d::ReduceOp::SUM;
  }
}

// Runs @p fn, turning any exception into PGS_ERR_COMM (or TIMEOUT) and
// keeping its text for the caller's error message.
template <typename F>
int guarded(F&& fn) {
  const char* what = nullptr;
  try {
    fn();
    return PGS_OK;
  } catch (const c10::Error& e) {
    last_transport_error() = e.what_without_backtrace();
    what = last_transport_error().c_str();
  } catch (const std::exception& e) {
    last_transport_error() = e.what();
    what = last_transport_error().c_str();
  }
  bool timeout = std::strstr(what, "imed out") || std::strstr(what, "imeout");
  return timeout ? PGS_ERR_TIMEOUT : PGS_ERR_COMM;
}

int exchange_start(void* impl, const pgs_msg_t* sends, int ns,
                   const pgs_msg_t* recvs, int nr, int slot) {
  InnerComm* c = self(impl);
  return guarded([&] {
    auto& works = c->slots[slot];
    for (int i = 0; i < nr; ++i) {
      std::vector<at::Tensor> t{bytes_of(recvs[i].buf, recvs[i].bytes)};
      works.push_back(c->inner->recv(t, recvs[i].peer,
                                     next_tag(c->recv_seq[recvs[i].peer])));
    }
    for (int i = 0; i < ns; ++i) {
      std::vector<at::Tensor> t{bytes_of(sends[i].buf, sends[i].bytes)};
      works.push_back(c->inner->send(t, sends[i].peer,
                                     next_tag(c->send_seq[sends[i].peer])));
    }
  });
}

int exchange_wait(void* impl, int slot) {
  InnerComm* c = self(impl);
  auto& works = c->slots[slot];
  int st = guarded([&] {
    for (auto& w : works) w->wait();
  });
  works.clear();
  return st;
}

// gloo's allgather wants equal sizes: pad every block to the largest.
int allgatherv(void* impl, const void* send, size_t send_bytes, void* recv,
               const size_t* recv_bytes, const size_t* displs) {
  InnerComm* c = self(impl);
  size_t most = 0;
  for (int r = 0; r < c->size; ++r) most = std::max(most, recv_bytes[r]);
  if (most == 0) return PGS_OK;
  return guarded([&] {
    at::Tensor mine = at::zeros({static_cast<int64_t>(most)}, at::kByte);
    std::memcpy(mine.data_ptr(), send, send_bytes);
    // gloo splits a flat output into size chunks of the input's shape.
    at::Tensor all =
        at::empty({c->size * static_cast<int64_t>(most)}, at::kByte);
    c->inner->_allgather_base(all, mine)->wait();
    auto* dst = static_cast<char*>(recv);
    const auto* src = static_cast<const char*>(all.data_ptr());
    for (int r = 0; r < c->size; ++r)
      std::memcpy(dst + displs[r], src + r * most, recv_bytes[r]);
  });
}

int allreduce(void* impl, void* buf, size_t count, pgs_dtype_t dtype,
              pgs_redop_t op) {
  if (count == 0) return PGS_OK;
  InnerComm* c = self(impl);
  return guarded([&] {
    std::vector<at::Tensor> t{
        at::from_blob(buf, {static_cast<int64_t>(count)}, scalar_of(dtype))};
    c10d::AllreduceOptions o;
    o.reduceOp = op_of(op);
    c->inner->allreduce(t, o)->wait();
  });
}

int bcast(void* impl, void* buf, size_t bytes, int root) {
  if (bytes == 0) return PGS_OK;
  InnerComm* c = self(impl);
  return guarded([&] {
    std::vector<at::Tensor> t{bytes_of(buf, bytes)};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    c->inner->broadcast(t, o)->wait();
  });
}

int alltoall_host(void* impl, const int64_t* send, int64_t* recv) {
  InnerComm* c = self(impl);
  return guarded([&] {
    at::Tensor in =
        at::from_blob(const_cast<int64_t*>(send), {c->size}, at::kLong);
    at::Tensor out = at::from_blob(recv, {c->size}, at::kLong);
    std::vector<int64_t> none;
    c->inner->alltoall_base(out, in, none, none)->wait();
  });
}

int allgather_host(void* impl, const int64_t* send, size_t count,
                   int64_t* recv) {
  if (count == 0) return PGS_OK;
  InnerComm* c = self(impl);
  return guarded([&] {
    at::Tensor in = at::from_blob(const_cast<int64_t*>(send),
                                  {static_cast<int64_t>(count)}, at::kLong);
    at::Tensor out =
        at::from_blob(recv, {static_cast<int64_t>(count) * c->size}, at::kLong);
    c->inner->_allgather_base(out, in)->wait();
  });
}

int barrier(void* impl) {
  return guarded([&] { self(impl)->inner->barrier()->wait(); });
}

void destroy(void* impl) { delete self(impl); }

// The user's messages go straight to gloo, which posts them at once; its
// Works are returned as they are (their wait() completes them).
class InnerPointToPoint : public PointToPoint {
 public:
  explicit InnerPointToPoint(c10::intrusive_ptr<c10d::Backend> inner)
      : inner_(std::move(inner)) {}
  c10::intrusive_ptr<c10d::Work> send(at::Tensor& t, int dst,
                                      int tag) override {
    std::vector<at::Tensor> v{t};
    return inner_->send(v, dst, tag);
  }
  c10::intrusive_ptr<c10d::Work> recv(at::Tensor& t, int src,
                                      int tag) override {
    std::vector<at::Tensor> v{t};
    return inner_->recv(v, src, tag);
  }

 private:
  c10::intrusive_ptr<c10d::Backend> inner_;
};

}  // namespace

Transport make_inner_transport(c10::intrusive_ptr<c10d::Backend> inner,
                               int rank, int size) {
  auto p2p = std::make_shared<InnerPointToPoint>(inner);
  auto* c = new InnerComm;
  c->inner = std::move(inner);
  c->size = size;
  c->send_seq.assign(size, 0);
  c->recv_seq.assign(size, 0);
  static const pgs_comm_vtable_t vt = {
      .exchange_start = exchange_start,
      .exchange_wait = exchange_wait,
      .allgatherv = allgatherv,
      .allreduce = allreduce,
      .bcast = bcast,
      .allreduce_host = allreduce,
      .alltoall_host = alltoall_host,
      .allgather_host = allgather_host,
      .barrier = barrier,
      .destroy = destroy,
  };
  pgs_comm_t* comm = nullptr;
  check(pgs_comm_create(&vt, c, rank, size, PGS_MEM_HOST, &comm),
        "creating the gloo-backed transport");
  return Transport{CommHandle(comm, pgs_comm_destroy), std::move(p2p)};
}

}  // namespace pg_sparse
