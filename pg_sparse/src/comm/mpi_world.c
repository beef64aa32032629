/* MPI for a program that does not manage it: the torch shim. MPI is process
 * state by nature, so whether we initialised it is too (one flag, set once
 * under pthread_once), and only then do we finalise it. */
#include <pg_sparse/comm_mpi.h>
#include <pg_sparse/mpi_world.h>
#include <pg_sparse/status.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_once_t pgs_mpi_once_ = PTHREAD_ONCE_INIT;
static int pgs_mpi_init_status_ = PGS_OK;
static int pgs_mpi_we_initialised_ = 0;
static int pgs_mpi_provided_ = 0;

/* Each backend has its own worker and message-progress threads, so several
 * may call MPI at once (one process group per new_group): we need
 * MPI_THREAD_MULTIPLE. */
static void pgs_mpi_init_once(void) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (initialised) {
    MPI_Query_thread(&pgs_mpi_provided_);
  } else if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE,
                             &pgs_mpi_provided_) == MPI_SUCCESS) {
    pgs_mpi_we_initialised_ = 1;
  } else {
    pgs_mpi_init_status_ = PGS_ERR_COMM;
  }
}

static int fail(char *err, size_t errlen, int status, const char *fmt, ...) {
  if (err != NULL && errlen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return status;
}

/* Checks the group against MPI's world and lists its members as ints. */
static int group_members(const int64_t *ranks, int n, int group_rank,
                         int *members, char *err, size_t errlen) {
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  for (int i = 0; i < n; ++i) {
    const int64_t r = ranks != NULL ? ranks[i] : i;
    if (r < 0 || r >= world_size)
      return fail(err, errlen, PGS_ERR_INVALID,
                  "global rank %lld is not an MPI process (MPI world size "
                  "%d); launch every rank with the same mpirun",
                  (long long)r, world_size);
    members[i] = (int)r;
  }
  if (members[group_rank] != world_rank)
    return fail(err, errlen, PGS_ERR_INVALID,
                "torch rank %d runs in MPI rank %d; under mpirun RANK must "
                "equal OMPI_COMM_WORLD_RANK (import pg_sparse before "
                "init_process_group sets it)",
                members[group_rank], world_rank);
  return PGS_OK;
}

/* The MPI communicator of the group, errors returned as codes on it and on
 * every duplicate (so a failed call raises on this rank instead of
 * aborting the job). Only the members call this: MPI_Comm_create_group is
 * collective over the group alone. */
static int group_comm(const int *members, int n, MPI_Comm *sub, char *err,
                      size_t errlen) {
  MPI_Group world_group, group;
  *sub = MPI_COMM_NULL;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Group_incl(world_group, n, members, &group);
  int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, 0, sub);
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  if (rc != MPI_SUCCESS || *sub == MPI_COMM_NULL)
    return fail(err, errlen, PGS_ERR_COMM, "MPI_Comm_create_group failed");
  if (MPI_Comm_set_errhandler(*sub, MPI_ERRORS_RETURN) != MPI_SUCCESS) {
    MPI_Comm_free(sub);
    return fail(err, errlen, PGS_ERR_COMM, "MPI_Comm_set_errhandler failed");
  }
  return PGS_OK;
}

int pgs_mpi_world_create(const int64_t *ranks, int n, int group_rank,
                         pgs_mem_t mem, int ncomms, pgs_comm_t **out, char *err,
                         size_t errlen) {
  if (out == NULL || n <= 0 || group_rank < 0 || group_rank >= n || ncomms <= 0)
    return fail(err, errlen, PGS_ERR_INVALID, "invalid arguments");
  for (int i = 0; i < ncomms; ++i) out[i] = NULL;
  pthread_once(&pgs_mpi_once_, pgs_mpi_init_once);
  if (pgs_mpi_init_status_ != PGS_OK)
    return fail(err, errlen, pgs_mpi_init_status_, "MPI_Init_thread failed");
  if (pgs_mpi_provided_ < MPI_THREAD_MULTIPLE)
    return fail(err, errlen, PGS_ERR_UNSUPPORTED,
                "the MPI library does not provide MPI_THREAD_MULTIPLE (got "
                "level %d)",
                pgs_mpi_provided_);
  int *members = malloc((size_t)n * sizeof(int));
  if (members == NULL) return fail(err, errlen, PGS_ERR_NO_MEMORY, "no memory");
  MPI_Comm sub = MPI_COMM_NULL;
  int st = group_members(ranks, n, group_rank, members, err, errlen);
  if (st == PGS_OK) st = group_comm(members, n, &sub, err, errlen);
  free(members);
  /* Each transport runs on a duplicate of its own: the user's messages
   * (and their tags) can never match the algorithms' exchanges. */
  for (int i = 0; st == PGS_OK && i < ncomms; ++i) {
    st = pgs_comm_mpi_create_mem(sub, mem, &out[i]);
    if (st != PGS_OK)
      fail(err, errlen, st, "creating the Open MPI transport: %s",
           pgs_status_string(st));
  }
  if (sub != MPI_COMM_NULL) MPI_Comm_free(&sub);
  if (st != PGS_OK)
    for (int i = 0; i < ncomms; ++i) {
      pgs_comm_destroy(out[i]);
      out[i] = NULL;
    }
  return st;
}

void pgs_mpi_world_finalize(void) {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (pgs_mpi_we_initialised_ && initialised && !finalised) MPI_Finalize();
}
