// Shared helpers of the C-core tests: world rank/size, transports under
// test, and deterministic data. Under mpirun (the default) every process is
// a rank; built with PGS_TEST_THREADS (tests/threads), every rank is a
// thread of one process over the thread transport (harness_threads.h).
#ifndef PGS_TESTS_HARNESS_H
#define PGS_TESTS_HARNESS_H

#include <pg_sparse/pg_sparse.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace pgs_test {

// The transports every algorithm test runs over: Open MPI and the ext
// transport over it under mpirun, the thread transport in the threads build.
enum class Transport { kMpi, kExt, kThreads };

inline std::string transport_name(Transport t) {
  switch (t) {
    case Transport::kMpi: return "mpi";
    case Transport::kExt: return "ext";
    default: return "threads";
  }
}

struct CommDeleter {
  void operator()(pgs_comm_t *c) const { pgs_comm_destroy(c); }
};
using CommPtr = std::unique_ptr<pgs_comm_t, CommDeleter>;

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

}  // namespace pgs_test

#ifdef PGS_TEST_THREADS
#include "harness_threads.h"
#else
#include "harness_mpi.h"
#endif

#endif  // PGS_TESTS_HARNESS_H
