// The Open MPI transport for ranks an MPI launcher started.
#include <c10/util/Exception.h>
#include <mpi.h>

#include <mutex>
#include <vector>

#include "status.hpp"
#include "transports.hpp"

extern "C" {
#include <pg_sparse/comm_mpi.h>
}

namespace pg_sparse {

namespace {

// MPI is initialised at most once per process; we finalise only what we
// initialised (an embedding program may own MPI itself).
struct MpiProcess {
  std::once_flag once;
  bool we_initialised = false;
};

MpiProcess& mpi_process() {
  static MpiProcess p;
  return p;
}

void ensure_mpi() {
  auto& p = mpi_process();
  std::call_once(p.once, [&p] {
    int initialised = 0;
    MPI_Initialized(&initialised);
    // Each backend has its own worker and message-progress threads, so
    // several may call MPI at once (one process group per new_group).
    int provided = 0;
    if (initialised) {
      MPI_Query_thread(&provided);
    } else {
      TORCH_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE,
                                  &provided) == MPI_SUCCESS,
                  "pg_sparse: MPI_Init_thread failed");
      p.we_initialised = true;
    }
    TORCH_CHECK(provided >= MPI_THREAD_MULTIPLE,
                "pg_sparse: the MPI library does not provide "
                "MPI_THREAD_MULTIPLE (got level ",
                provided, ")");
  });
}

}  // namespace

// The MPI communicator of a torch group (collective over its members only).
static MPI_Comm make_group_comm(std::vector<int64_t> global_ranks,
                                int group_rank, int group_size) {
  ensure_mpi();
  // The default group comes without a rank list: it is the whole world.
  if (global_ranks.empty())
    for (int r = 0; r < group_size; ++r) global_ranks.push_back(r);
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  TORCH_CHECK(static_cast<int>(global_ranks.size()) == group_size,
              "pg_sparse: group of ", group_size, " ranks but ",
              global_ranks.size(), " global ranks");
  std::vector<int> members;
  for (int64_t r : global_ranks) {
    TORCH_CHECK(r >= 0 && r < world_size, "pg_sparse: global rank ", r,
                " is not an MPI process (MPI world size ", world_size,
                "); launch every rank with the same mpirun");
    members.push_back(static_cast<int>(r));
  }
  TORCH_CHECK(members[group_rank] == world_rank, "pg_sparse: torch rank ",
              global_ranks[group_rank], " runs in MPI rank ", world_rank,
              "; under mpirun RANK must equal OMPI_COMM_WORLD_RANK (import "
              "pg_sparse before init_process_group sets it)");
  // Only the members call this: MPI_Comm_create_group is collective over
  // the group alone, unlike MPI_Comm_create (non-members never get here).
  MPI_Group world_group, group;
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Group_incl(world_group, group_size, members.data(), &group);
  int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, 0, &sub);
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  TORCH_CHECK(rc == MPI_SUCCESS && sub != MPI_COMM_NULL,
              "pg_sparse: MPI_Comm_create_group failed");
  // Errors come back as codes on this communicator and every duplicate of
  // it (the user's point-to-point one included), so a failed call raises
  // on this rank instead of aborting the job.
  rc = MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
  TORCH_CHECK(rc == MPI_SUCCESS, "pg_sparse: MPI_Comm_set_errhandler failed");
  return sub;
}

pgs_comm_t* make_mpi_comm(const std::vector<int64_t>& global_ranks,
                          int group_rank, int group_size, pgs_mem_t mem) {
  MPI_Comm sub = make_group_comm(global_ranks, group_rank, group_size);
  pgs_comm_t* comm = nullptr;
  int st = pgs_comm_mpi_create_mem(sub, mem, &comm);  // duplicates sub
  MPI_Comm_free(&sub);
  check(st, "creating the Open MPI transport");
  return comm;
}

int mpi_cuda_aware() { return pgs_mpi_cuda_aware(); }

Transport make_mpi_transport(std::vector<int64_t> global_ranks, int group_rank,
                             int group_size) {
  MPI_Comm sub = make_group_comm(global_ranks, group_rank, group_size);
  // Each transport runs on a duplicate of its own: the user's messages (and
  // their tags) can never match the algorithms' exchanges.
  pgs_comm_t* comm = nullptr;
  pgs_comm_t* p2p = nullptr;
  int st = pgs_comm_mpi_create(sub, &comm);
  if (st == PGS_OK) st = pgs_comm_mpi_create(sub, &p2p);
  MPI_Comm_free(&sub);
  if (st != PGS_OK) pgs_comm_destroy(comm);
  check(st, "creating the Open MPI transport");
  return Transport{CommHandle(comm, pgs_comm_destroy),
                   CommHandle(p2p, pgs_comm_destroy)};
}

void finalize_mpi() {
  auto& p = mpi_process();
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (p.we_initialised && initialised && !finalised) MPI_Finalize();
}

}  // namespace pg_sparse
