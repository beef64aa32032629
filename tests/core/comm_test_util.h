// Shared helpers of the transport tests.
#ifndef PGS_TESTS_COMM_TEST_UTIL_H
#define PGS_TESTS_COMM_TEST_UTIL_H

#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "harness.h"

namespace comm_test {
using namespace pgs_test;

using pgs_test::CommPtr;
using pgs_test::Transport;

// ---- helpers ---------------------------------------------------------------

inline pgs_comm_counters_t counters_of(const pgs_comm_t *c) {
  pgs_comm_counters_t k{};
  pgs_comm_get_counters(c, &k);
  return k;
}

// Counter growth since a snapshot, compared field by field in EXPECTs.
struct Delta {
  uint64_t data_sent = 0, data_recv = 0, ctrl_sent = 0, ctrl_recv = 0;
};

inline Delta delta(const pgs_comm_counters_t &before, const pgs_comm_t *c) {
  const pgs_comm_counters_t now = counters_of(c);
  return {now.data_sent - before.data_sent, now.data_recv - before.data_recv,
          now.ctrl_sent - before.ctrl_sent, now.ctrl_recv - before.ctrl_recv};
}

#define EXPECT_DELTA(d, ds, dr, cs, cr) \
  do {                                  \
    EXPECT_EQ((d).data_sent, (ds));     \
    EXPECT_EQ((d).data_recv, (dr));     \
    EXPECT_EQ((d).ctrl_sent, (cs));     \
    EXPECT_EQ((d).ctrl_recv, (cr));     \
  } while (0)

// The ring model of comm.h, written independently of comm.c (the values in
// these tests are small, so the plain formula cannot overflow).
inline uint64_t ring_bytes(uint64_t bytes, int p) {
  return 2 * bytes * static_cast<uint64_t>(p - 1) / static_cast<uint64_t>(p);
}

// Size of the message from src to dst in an exchange; salt tells batches
// apart. Some pairs get 0 bytes.
inline size_t msg_size(int src, int dst, int salt) {
  return static_cast<size_t>((src * 7 + dst * 3 + salt * 5) % 5) * 37;
}

inline uint8_t msg_byte(int src, int dst, int salt, size_t k) {
  return static_cast<uint8_t>(src * 31 + dst * 17 + salt * 5 + k * 3);
}

constexpr uint8_t kGuard = 0xA5;

// One side of an exchange batch, with the buffers it points into. Receive
// buffers carry one guard byte past the message, which must survive.
struct Batch {
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<pgs_msg_t> msgs;
  std::vector<int> peers, salts;

  void add(int peer, size_t bytes, int salt, bool fill_from, int src, int dst) {
    std::vector<uint8_t> b(bytes + 1, kGuard);
    if (fill_from)
      for (size_t k = 0; k < bytes; ++k) b[k] = msg_byte(src, dst, salt, k);
    bufs.push_back(std::move(b));
    peers.push_back(peer);
    salts.push_back(salt);
  }
  // Pointers are taken once every buffer exists (push_back may move them).
  void finish() {
    msgs.clear();
    for (size_t i = 0; i < bufs.size(); ++i) {
      const size_t bytes = bufs[i].size() - 1;
      // 0-byte messages are listed too, some with a NULL buffer.
      void *p = bytes == 0 && i % 2 == 0 ? nullptr : bufs[i].data();
      msgs.push_back(pgs_msg_t{peers[i], p, bytes});
    }
  }
  uint64_t total() const {
    uint64_t t = 0;
    for (const auto &m : msgs) t += m.bytes;
    return t;
  }
  int n() const { return static_cast<int>(msgs.size()); }
  const pgs_msg_t *data() const { return msgs.empty() ? nullptr : msgs.data(); }
};

// Checks that every received buffer holds what its sender wrote.
inline void expect_received(const Batch &recvs, int me) {
  for (size_t i = 0; i < recvs.bufs.size(); ++i) {
    const auto &b = recvs.bufs[i];
    const size_t bytes = b.size() - 1;
    size_t bad = 0;
    for (size_t k = 0; k < bytes; ++k)
      if (b[k] != msg_byte(recvs.peers[i], me, recvs.salts[i], k)) ++bad;
    EXPECT_EQ(bad, 0u) << "message " << i << " from " << recvs.peers[i]
                       << " salt " << recvs.salts[i];
    EXPECT_EQ(b[bytes], kGuard) << "overrun of message " << i;
  }
}

// ---- stub vtable: the wrappers without any transport ----------------------

struct Stub {
  int destroyed = 0;
  int calls = 0;
  int result = PGS_OK;  // what every entry returns
};

inline int stub_exchange_start(void *impl, const pgs_msg_t *, int,
                               const pgs_msg_t *, int, int) {
  auto *s = static_cast<Stub *>(impl);
  ++s->calls;
  return s->result;
}
inline int stub_exchange_wait(void *impl, int) {
  auto *s = static_cast<Stub *>(impl);
  ++s->calls;
  return s->result;
}
inline int stub_allgatherv(void *impl, const void *, size_t, void *,
                           const size_t *, const size_t *) {
  auto *s = static_cast<Stub *>(impl);
  ++s->calls;
  return s->result;
}
inline int stub_reduce(void *impl, void *, size_t, pgs_dtype_t, pgs_redop_t) {
  auto *s = static_cast<Stub *>(impl);
  ++s->calls;
  return s->result;
}
inline int stub_bcast(void *impl, void *, size_t, int) {
  auto *s = static_cast<Stub *>(impl);
  ++s->calls;
  return s->result;
}
inline int stub_alltoall(void *impl, const int64_t *, int64_t *) {
  auto *s = static_cast<Stub *>(impl);
  ++s->calls;
  return s->result;
}
inline int stub_allgather(void *impl, const int64_t *, size_t, int64_t *) {
  auto *s = static_cast<Stub *>(impl);
  ++s->calls;
  return s->result;
}
inline int stub_barrier(void *impl) {
  auto *s = static_cast<Stub *>(impl);
  ++s->calls;
  return s->result;
}
inline void stub_destroy(void *impl) {
  ++static_cast<Stub *>(impl)->destroyed;
}

inline pgs_comm_vtable_t stub_vtable() {
  pgs_comm_vtable_t vt{};
  vt.exchange_start = stub_exchange_start;
  vt.exchange_wait = stub_exchange_wait;
  vt.allgatherv = stub_allgatherv;
  vt.allreduce = stub_reduce;
  vt.bcast = stub_bcast;
  vt.allreduce_host = stub_reduce;
  vt.alltoall_host = stub_alltoall;
  vt.allgather_host = stub_allgather;
  vt.barrier = stub_barrier;
  vt.destroy = stub_destroy;
  return vt;
}

inline CommPtr make_stub(Stub *s, int rank, int size) {
  pgs_comm_t *c = nullptr;
  const pgs_comm_vtable_t vt = stub_vtable();
  EXPECT_EQ(pgs_comm_create(&vt, s, rank, size, PGS_MEM_HOST, &c), PGS_OK);
  return CommPtr(c);
}

}  // namespace comm_test

#endif  // PGS_TESTS_COMM_TEST_UTIL_H
