// GoogleTest entry point for the C core under mpirun.
//
// Every rank runs every test. Tests must reach the same collectives on every
// rank, so they record failures with EXPECT_* inside collective sections and
// only ASSERT_* where all ranks take the same branch. The process exit code
// is the OR of all ranks' results, and only rank 0 prints the summary, so a
// failure on any rank fails the ctest case.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

namespace {

// Silences the default printer on ranks other than 0, except for failures.
class QuietPrinter : public testing::EmptyTestEventListener {
 public:
  explicit QuietPrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult &r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_,
                   r.file_name() ? r.file_name() : "?", r.line_number(),
                   r.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    testing::TestEventListeners &ls =
        testing::UnitTest::GetInstance()->listeners();
    delete ls.Release(ls.default_result_printer());
    ls.Append(new QuietPrinter(rank));
  }
  int local = RUN_ALL_TESTS();
  int global = 0;
  MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && global != local)
    std::fprintf(stderr, "a test failed on another rank\n");
  MPI_Finalize();
  return global;
}
