// Malformed peer messages: a scripted peer sends counts and pairs no correct
// rank would, and every call refuses them with a status (PGS_ERR_INDEX),
// writing nothing out of bounds (the sanitizer build checks that part).
// The fuzz target (tests/fuzz) explores the same path at random.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "scripted_peers.h"
#include "test_data.h"

extern "C" {
#include <pg_sparse/pg_sparse.h>
}

namespace {

// Appends the bytes of @p v to a script.
template <class T>
void put(std::vector<uint8_t> &s, const T &v) {
  const auto *b = reinterpret_cast<const uint8_t *>(&v);
  s.insert(s.end(), b, b + sizeof v);
}

// One call of rank 0 of 2 against the script; the call's status.
int call(pgs_algo_id_t algo, pgs_dtype_t wire, size_t n,
         const std::vector<uint8_t> &script,
         std::vector<float> *resid = nullptr) {
  pgs_scripted_peers_t peers = {script.data(), script.size(), 0, 0, 2};
  pgs_comm_t *comm = nullptr;
  pgs_bucket_t *b = nullptr;
  pgs_config_t cfg = PGS_CONFIG_INIT;
  cfg.algo = algo;
  cfg.wire_dtype = wire;
  cfg.density = 0.01;
  cfg.warmup_steps = 0;
  EXPECT_EQ(pgs_scripted_peers_comm(&peers, &comm), PGS_OK);
  EXPECT_EQ(pgs_bucket_create(&cfg, comm, pgs_ops_cpu(), n, &b), PGS_OK);
  std::vector<float> g = pgs_test_data::normal(n, 77), out(n, 0.0f);
  const int st = pgs_bucket_allreduce(b, g.data(), out.data());
  if (resid != nullptr) {
    resid->resize(n);
    pgs_bucket_get_residual(b, resid->data());
  }
  pgs_bucket_destroy(b);
  pgs_comm_destroy(comm);
  return st;
}

// TopkA's exchange: the peer's count (int64), then its block
// [indices | values].
std::vector<uint8_t> topka_script(int64_t count,
                                  const std::vector<int32_t> &idx,
                                  size_t value_bytes) {
  std::vector<uint8_t> s;
  put(s, count);
  for (int32_t i : idx) put(s, i);
  s.insert(s.end(), idx.size() * value_bytes, 0x3f);  // some finite values
  return s;
}

TEST(Malformed, CountAboveTheBucketIsRefused) {
  const size_t n = 1000;
  for (pgs_dtype_t w : {PGS_FLOAT32, PGS_BFLOAT16}) {
    EXPECT_EQ(call(PGS_ALGO_TOPKA, w, n, topka_script(int64_t{1} << 60, {}, 4)),
              PGS_ERR_INDEX);
    EXPECT_EQ(call(PGS_ALGO_TOPKA, w, n, topka_script(n + 1, {}, 4)),
              PGS_ERR_INDEX);
    EXPECT_EQ(call(PGS_ALGO_GAUSSIANK, w, n, topka_script(n + 1, {}, 4)),
              PGS_ERR_INDEX);
  }
}

TEST(Malformed, IndexOutsideTheBucketIsRefused) {
  const size_t n = 1000;
  for (pgs_dtype_t w : {PGS_FLOAT32, PGS_FLOAT16}) {
    const size_t vb = w == PGS_FLOAT32 ? 4 : 2;
    for (int32_t bad : {int32_t{1000}, int32_t{-1}, INT32_MAX, INT32_MIN})
      EXPECT_EQ(call(PGS_ALGO_TOPKA, w, n, topka_script(3, {0, 5, bad}, vb)),
                PGS_ERR_INDEX)
          << bad;
  }
}

// A negative count is a peer's NaN flag: the call fails as non-finite and
// this rank's residual is what it was (zero: a fresh bucket, and no step
// before; the hook-level tests check a used one).
TEST(Malformed, NegativeCountIsThePeersFlag) {
  std::vector<float> resid;
  EXPECT_EQ(
      call(PGS_ALGO_TOPKA, PGS_FLOAT32, 500, topka_script(-1, {}, 4), &resid),
      PGS_ERR_NONFINITE);
  for (float r : resid) ASSERT_EQ(r, 0.0f);
}

// TopkDSA's phase 1: the peer's count for our region (alltoall, int64 per
// rank) above the region's length is refused before any receive is sized.
TEST(Malformed, RegionCountAboveTheRegionIsRefused) {
  const size_t n = 1000;
  std::vector<uint8_t> s;
  put(s, int64_t{n});  // peer -> rank 0: n pairs for a region of n / 2
  EXPECT_EQ(call(PGS_ALGO_TOPKDSA, PGS_FLOAT32, n, s), PGS_ERR_INDEX);
  EXPECT_EQ(call(PGS_ALGO_OKTOPK, PGS_BFLOAT16, n, s), PGS_ERR_INDEX);
}

// gTop-k's swap: a block larger than k is refused.
TEST(Malformed, TreeBlockAboveKIsRefused) {
  std::vector<uint8_t> s;
  put(s, int64_t{0});        // the fold swap (no folded rank at P = 2)
  put(s, int64_t{1} << 40);  // the partner's block size at the first level
  EXPECT_EQ(call(PGS_ALGO_GTOPK, PGS_FLOAT32, 1000, s), PGS_ERR_INDEX);
}

}  // namespace
