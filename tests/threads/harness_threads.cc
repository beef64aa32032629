// The threads build's world (harness_threads.h): one run per test body,
// with a world of the thread transport for each communicator the body makes
// and one of its own for the harness's allgather and all_ranks.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "harness.h"
#include "thread_transport.h"

namespace pgs_test {
namespace {

struct WorldDeleter {
  void operator()(pgs_thread_world_t *w) const { pgs_thread_world_destroy(w); }
};
using WorldPtr = std::unique_ptr<pgs_thread_world_t, WorldDeleter>;

WorldPtr new_world(int ranks) {
  pgs_thread_world_t *w = nullptr;
  return WorldPtr(pgs_thread_world_create(ranks, &w) == PGS_OK ? w : nullptr);
}

// The worlds of one body's run, created as the first rank asks for them.
struct Run {
  explicit Run(int p) : ranks(p), harness(new_world(p)) {}
  pgs_thread_world_t *world(size_t i) {
    std::lock_guard<std::mutex> lock(mutex);
    while (worlds.size() <= i) worlds.push_back(new_world(ranks));
    return worlds[i].get();
  }
  int ranks;
  WorldPtr harness;
  std::mutex mutex;
  std::vector<WorldPtr> worlds;
};

// The calling thread's place in the running body.
struct Rank {
  Run *run = nullptr;
  int rank = 0;
  size_t comms_made = 0;
  pgs_comm_t *harness = nullptr;
};
thread_local Rank self;

int ranks_from_env() {
  const char *v = std::getenv("PGS_TEST_RANKS");
  const int p = v != nullptr ? std::atoi(v) : 4;
  return p >= 1 && p <= 64 ? p : 4;
}

}  // namespace

int world_rank() {
  return self.rank;
}
int world_size() {
  return self.run != nullptr ? self.run->ranks : 1;
}

CommPtr make_comm(Transport t) {
  if (t != Transport::kThreads || self.run == nullptr) return CommPtr(nullptr);
  pgs_thread_world_t *w = self.run->world(self.comms_made++);
  pgs_comm_t *c = nullptr;
  if (w == nullptr || pgs_thread_comm_create(w, self.rank, &c) != PGS_OK)
    return CommPtr(nullptr);
  return CommPtr(c);
}

std::vector<float> allgather(const std::vector<float> &mine) {
  const int p = world_size();
  const size_t bytes = mine.size() * sizeof(float);
  std::vector<float> all(mine.size() * static_cast<size_t>(p));
  std::vector<size_t> counts(p, bytes), displs(p);
  for (int r = 0; r < p; ++r) displs[r] = bytes * static_cast<size_t>(r);
  const int st = pgs_comm_allgatherv(self.harness, mine.data(), bytes,
                                     all.data(), counts.data(), displs.data());
  EXPECT_EQ(st, PGS_OK) << "harness allgather";
  return all;
}

bool all_ranks(bool ok) {
  int64_t v = ok ? 1 : 0;
  const int st =
      pgs_comm_allreduce_host(self.harness, &v, 1, PGS_INT64, PGS_MIN);
  EXPECT_EQ(st, PGS_OK) << "harness allreduce";
  return st == PGS_OK && v == 1;
}

void on_every_rank(const std::function<void()> &body) {
  Run run(ranks_from_env());
  ASSERT_NE(run.harness, nullptr) << "creating the harness world";
  std::vector<std::thread> threads;
  for (int r = 0; r < run.ranks; ++r)
    threads.emplace_back([&run, &body, r] {
      self = Rank{&run, r, 0, nullptr};
      const int st =
          pgs_thread_comm_create(run.harness.get(), r, &self.harness);
      EXPECT_EQ(st, PGS_OK) << "rank " << r << ": harness communicator";
      if (st == PGS_OK) body();
      pgs_comm_destroy(self.harness);
      self = Rank{};
    });
  for (auto &t : threads) t.join();
}

}  // namespace pgs_test
