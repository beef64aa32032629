// The tests' world as threads (gloo's and UCC's test style): on_every_rank
// runs a test's body on PGS_TEST_RANKS threads of this process (4 unless
// set), each a rank over the thread transport (tests/threads). GoogleTest's
// assertions are thread-safe; as under mpirun, ASSERT_* may only leave a
// body where every rank leaves it.
#ifndef PGS_TESTS_HARNESS_THREADS_H
#define PGS_TESTS_HARNESS_THREADS_H

#include <functional>
#include <vector>

namespace pgs_test {

int world_rank();
int world_size();

inline std::vector<Transport> all_transports() {
  return {Transport::kThreads};
}

// The calling rank's communicator over a fresh world: the i-th call of each
// rank in a body joins the i-th world, so ranks pair up as under mpirun.
CommPtr make_comm(Transport t);

std::vector<float> allgather(const std::vector<float> &mine);
bool all_ranks(bool ok);

// Runs @p body on every rank (one thread each) and waits for all.
void on_every_rank(const std::function<void()> &body);

}  // namespace pgs_test

#endif  // PGS_TESTS_HARNESS_THREADS_H
