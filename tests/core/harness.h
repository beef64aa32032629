// Shared helpers of the C-core tests: world rank/size, transports under
// test, and deterministic data.
#ifndef PGS_TESTS_HARNESS_H
#define PGS_TESTS_HARNESS_H

#include <mpi.h>
#include <pg_sparse/pg_sparse.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "ext_mpi_transport.h"
#include <pg_sparse/comm_mpi.h>
}

namespace pgs_test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// The transports every algorithm test runs over.
enum class Transport { kMpi, kExt };

inline std::string transport_name(Transport t) {
  return t == Transport::kMpi ? "mpi" : "ext";
}

struct CommDeleter {
  void operator()(pgs_comm_t *c) const { pgs_comm_destroy(c); }
};
using CommPtr = std::unique_ptr<pgs_comm_t, CommDeleter>;

// Creates a communicator over MPI_COMM_WORLD (collective).
inline CommPtr make_comm(Transport t) {
  pgs_comm_t *c = nullptr;
  int st = t == Transport::kMpi ? pgs_comm_mpi_create(MPI_COMM_WORLD, &c)
                                : pgs_test_ext_mpi_create(MPI_COMM_WORLD, &c);
  if (st != PGS_OK) return CommPtr(nullptr);
  return CommPtr(c);
}

// Deterministic data: the same (seed, rank, step) always gives the same
// values, so every rank can rebuild any other rank's input for an oracle.
inline std::vector<float> normal_data(size_t n, uint64_t seed, int rank,
                                      int64_t step) {
  std::mt19937_64 gen(seed * 1000003ULL +
                      static_cast<uint64_t>(rank) * 7919ULL +
                      static_cast<uint64_t>(step) * 104729ULL);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto &x : v) x = dist(gen);
  return v;
}

// Allgather of a float vector of the same length on every rank.
inline std::vector<float> allgather(const std::vector<float> &mine) {
  std::vector<float> all(mine.size() * world_size());
  MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_FLOAT,
                all.data(), static_cast<int>(mine.size()), MPI_FLOAT,
                MPI_COMM_WORLD);
  return all;
}

// Logical AND of a condition over all ranks.
inline bool all_ranks(bool ok) {
  int v = ok ? 1 : 0, r = 0;
  MPI_Allreduce(&v, &r, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return r == 1;
}

}  // namespace pgs_test

#endif  // PGS_TESTS_HARNESS_H
