// The tests' world under mpirun: every process is a rank of MPI_COMM_WORLD.
#ifndef PGS_TESTS_HARNESS_MPI_H
#define PGS_TESTS_HARNESS_MPI_H

#include <mpi.h>

#include <utility>
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

inline std::vector<Transport> all_transports() {
  return {Transport::kMpi, Transport::kExt};
}

// Creates a communicator over MPI_COMM_WORLD (collective).
inline CommPtr make_comm(Transport t) {
  pgs_comm_t *c = nullptr;
  int st = t == Transport::kMpi ? pgs_comm_mpi_create(MPI_COMM_WORLD, &c)
                                : pgs_test_ext_mpi_create(MPI_COMM_WORLD, &c);
  if (st != PGS_OK) return CommPtr(nullptr);
  return CommPtr(c);
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

// A test's body: every process already is a rank, so it just runs.
template <class F>
void on_every_rank(F &&body) {
  std::forward<F>(body)();
}

}  // namespace pgs_test

#endif  // PGS_TESTS_HARNESS_MPI_H
