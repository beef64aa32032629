// The `ext` transport over another c10d backend's collectives (gloo under
// torchrun: Open MPI cannot join processes it did not launch).
#include <c10/util/Exception.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>

#include "status.hpp"
#include "transports.hpp"

namespace pg_sparse {

std::string& last_transport_error() {
  thread_local std::string text;
  return text;
}

namespace {

// Tags of the transport's own messages: kTagBase + channel * kChannelSpan +
// (n mod kChannelSpan) for the n-th message between two ranks on a channel
// (0: the host collectives, 1: CUDA tensors staged through host memory),
// disjoint from the user's tags (< kTagBase, which the backend checks), so
// dist.send/recv on the same gloo backend can never match an algorithm's
// message, nor one channel's message another's.
constexpr uint32_t kTagBase = 1u << 30;
constexpr uint32_t kChannelSpan = 1u << 29;

struct InnerComm {
  c10::intrusive_ptr<c10d::Backend> inner;
  int rank = 0, size = 1;
  uint32_t channel = 0;  // 0 or 1: its tags' range
  // Per-peer message counters: the n-th message between two ranks gets the
  // same tag on both sides, so messages match even when several go to one
  // peer.
  std::vector<uint32_t> send_seq, recv_seq;
  std::vector<c10::intrusive_ptr<c10d::Work>> slots[PGS_COMM_SLOTS];
  // The allgather's scratch, sized at creation so a call allocates nothing
  // of its own: its messages (sends, then receives, size each), the layout
  // of allgather_host (bytes, then displacements) and its pending Works.
  std::vector<pgs_msg_t> gather_msgs;
  std::vector<size_t> gather_layout;
  std::vector<c10::intrusive_ptr<c10d::Work>> gather_works;
};

InnerComm* self(void* impl) { return static_cast<InnerComm*>(impl); }

int next_tag(const InnerComm* c, uint32_t& seq) {
  return static_cast<int>(kTagBase + c->channel * kChannelSpan +
                          (seq++ & (kChannelSpan - 1)));
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

// Posts the receives, then the sends, of one batch into @p works.
void post(InnerComm* c, const pgs_msg_t* sends, int ns, const pgs_msg_t* recvs,
          int nr, std::vector<c10::intrusive_ptr<c10d::Work>>& works) {
  for (int i = 0; i < nr; ++i) {
    std::vector<at::Tensor> t{bytes_of(recvs[i].buf, recvs[i].bytes)};
    works.push_back(c->inner->recv(t, recvs[i].peer,
                                   next_tag(c, c->recv_seq[recvs[i].peer])));
  }
  for (int i = 0; i < ns; ++i) {
    std::vector<at::Tensor> t{bytes_of(sends[i].buf, sends[i].bytes)};
    works.push_back(c->inner->send(t, sends[i].peer,
                                   next_tag(c, c->send_seq[sends[i].peer])));
  }
}

int exchange_start(void* impl, const pgs_msg_t* sends, int ns,
                   const pgs_msg_t* recvs, int nr, int slot) {
  InnerComm* c = self(impl);
  return guarded([&] { post(c, sends, ns, recvs, nr, c->slots[slot]); });
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

// Every block goes straight to every peer and lands in place: one round of
// messages. gloo's ring allgather takes P - 1 steps, each waiting for a
// neighbour's thread to run (on oversubscribed cores a time slice apiece),
// and wants every block padded to the largest, then copied out. The bytes
// each rank sends and receives are the ring's.
int allgatherv(void* impl, const void* send, size_t send_bytes, void* recv,
               const size_t* recv_bytes, const size_t* displs) {
  InnerComm* c = self(impl);
  auto* dst = static_cast<char*>(recv);
  pgs_msg_t* sends = c->gather_msgs.data();
  pgs_msg_t* recvs = sends + c->size;
  int ns = 0, nr = 0;
  for (int j = 0; j < c->size; ++j) {
    if (j == c->rank) continue;
    if (send_bytes > 0)
      sends[ns++] = pgs_msg_t{j, const_cast<void*>(send), send_bytes};
    if (recv_bytes[j] > 0)
      recvs[nr++] = pgs_msg_t{j, dst + displs[j], recv_bytes[j]};
  }
  if (send_bytes > 0 && dst + displs[c->rank] != send)
    std::memmove(dst + displs[c->rank], send, send_bytes);
  auto& works = c->gather_works;  // empty between calls
  int st = guarded([&] {
    post(c, sends, ns, recvs, nr, works);
    for (auto& w : works) w->wait();
  });
  works.clear();
  return st;
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
  const size_t block = count * sizeof(int64_t);
  size_t* bytes = c->gather_layout.data();
  size_t* displs = bytes + c->size;
  for (int j = 0; j < c->size; ++j) {
    bytes[j] = block;
    displs[j] = block * j;
  }
  return allgatherv(impl, send, block, recv, bytes, displs);
}

int barrier(void* impl) {
  return guarded([&] { self(impl)->inner->barrier()->wait(); });
}

void destroy(void* impl) { delete self(impl); }

// --- the user's messages: gloo's send/recv, one request each -------------

// gloo's send and recv Works can only be waited for, never polled: each
// request has a thread that waits and leaves the outcome for test(). User
// messages are few and large, so a thread apiece costs little, and one
// waiter per request lets every message finish on its own (a shared waiter
// would keep a finished send unreported behind a receive still open).
struct InnerRequest {
  c10::intrusive_ptr<c10d::Work> work;
  std::thread waiter;
  std::atomic<int> state{0};  // 0 in flight, 1 done, 2 failed
  std::string error;          // set before state becomes 2
};

int p2p_post(void* impl, void* buf, size_t bytes, int peer, int tag,
             bool is_send, void** req) {
  InnerComm* c = self(impl);
  auto* r = new InnerRequest;
  int st = guarded([&] {
    std::vector<at::Tensor> t{bytes_of(buf, bytes)};
    if (is_send)
      r->work = c->inner->send(t, peer, tag);
    else if (peer == PGS_ANY_SOURCE)
      r->work = c->inner->recvAnysource(t, tag);
    else
      r->work = c->inner->recv(t, peer, tag);
  });
  if (st != PGS_OK) {
    delete r;
    return st;
  }
  r->waiter = std::thread([r] {
    try {
      r->work->wait();
      r->state = 1;
    } catch (const std::exception& e) {
      r->error = e.what();
      r->state = 2;
    }
  });
  *req = r;
  return PGS_OK;
}

int p2p_isend(void* impl, const void* buf, size_t bytes, int peer, int tag,
              void* /*after*/, void** req) {
  return p2p_post(impl, const_cast<void*>(buf), bytes, peer, tag, true, req);
}

int p2p_irecv(void* impl, void* buf, size_t bytes, int peer, int tag,
              void* /*after*/, void** req) {
  return p2p_post(impl, buf, bytes, peer, tag, false, req);
}

int p2p_test(void*, void* req, int* done) {
  auto* r = static_cast<InnerRequest*>(req);
  const int state = r->state.load();
  *done = state != 0;
  if (state != 2) return PGS_OK;
  last_transport_error() = r->error;
  const bool timeout = r->error.find("imed out") != std::string::npos;
  return timeout ? PGS_ERR_TIMEOUT : PGS_ERR_COMM;
}

int p2p_source(void*, void* req) {
  return static_cast<InnerRequest*>(req)->work->sourceRank();
}

// gloo's abort ends the wait of a message still in flight (a receive then
// writes its buffer no more).
void p2p_cancel(void*, void* req) {
  auto* r = static_cast<InnerRequest*>(req);
  if (r->state.load() == 0) {
    try {
      r->work->abort();
    } catch (const std::exception&) {
      // A Work without abort: the wait below ends with gloo's own timeout.
    }
  }
  r->waiter.join();
  delete r;
}

const pgs_comm_vtable_t& collective_table() {
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
  return vt;
}

// The user's messages on a transport of their own over the same gloo
// backend: their tags stay below kTagBase, so they never match ours.
const pgs_comm_vtable_t& p2p_table() {
  static const pgs_comm_vtable_t vt = {
      .destroy = destroy,
      .isend = p2p_isend,
      .irecv = p2p_irecv,
      .test = p2p_test,
      .cancel = p2p_cancel,
      .source = p2p_source,
  };
  return vt;
}

pgs_comm_t* make_comm(const c10::intrusive_ptr<c10d::Backend>& inner, int rank,
                      int size, const pgs_comm_vtable_t& table,
                      uint32_t channel, const char* what) {
  auto* c = new InnerComm;
  c->inner = inner;
  c->rank = rank;
  c->size = size;
  c->channel = channel;
  c->gather_msgs.resize(2 * static_cast<size_t>(size));
  c->gather_layout.resize(2 * static_cast<size_t>(size));
  c->gather_works.reserve(2 * static_cast<size_t>(size));
  c->send_seq.assign(size, 0);
  c->recv_seq.assign(size, 0);
  pgs_comm_t* comm = nullptr;
  check(pgs_comm_create(&table, c, rank, size, PGS_MEM_HOST, &comm), what);
  return comm;
}

}  // namespace

Transport make_inner_transport(c10::intrusive_ptr<c10d::Backend> inner,
                               int rank, int size) {
  CommHandle comm(make_comm(inner, rank, size, collective_table(), 0,
                            "creating the gloo-backed transport"),
                  pgs_comm_destroy);
  CommHandle p2p(make_comm(inner, rank, size, p2p_table(), 0,
                           "creating the gloo-backed point-to-point"),
                 pgs_comm_destroy);
  return Transport{std::move(comm), std::move(p2p)};
}

pgs_comm_t* make_inner_staging_comm(c10::intrusive_ptr<c10d::Backend> inner,
                                    int rank, int size) {
  return make_comm(inner, rank, size, collective_table(), 1,
                   "creating the gloo-backed transport of CUDA tensors");
}

}  // namespace pg_sparse
