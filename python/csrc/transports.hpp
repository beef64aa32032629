// Building pgs_comm transports for the backend: Open MPI under an MPI
// launcher, or the `ext` callbacks over an inner c10d backend (gloo) when
// torchrun started the ranks.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <string>
#include <vector>

#include "backend.hpp"
#include "status.hpp"

namespace pg_sparse {

// What a backend runs on: the pgs_comm of its collectives and the user's
// point-to-point messages, on separate channels (so neither can match the
// other's messages).
struct Transport {
  CommHandle comm;
  CommHandle p2p;  // isend/irecv only
};

// Transport over the collectives of @p inner (collective over the group).
Transport make_inner_transport(c10::intrusive_ptr<c10d::Backend> inner,
                               int rank, int size);

// A second transport over @p inner's collectives, on a tag range of its own:
// what the CUDA side stages device tensors through (owned by the caller).
pgs_comm_t* make_inner_staging_comm(c10::intrusive_ptr<c10d::Backend> inner,
                                    int rank, int size);

// An Open MPI transport alone over a torch group, in memory space @p mem
// (PGS_MEM_DEVICE only for a CUDA-aware Open MPI): the CUDA side's.
pgs_comm_t* make_mpi_comm(const std::vector<int64_t>& global_ranks,
                          int group_rank, int group_size, pgs_mem_t mem);
// Whether Open MPI takes CUDA device buffers.
int mpi_cuda_aware();

// Open MPI transport over the MPI processes @p global_ranks (collective over
// them only). Initialises MPI on first use.
Transport make_mpi_transport(std::vector<int64_t> global_ranks, int group_rank,
                             int group_size);

// MPI_Finalize if this module initialised MPI and nobody finalised it yet.
void finalize_mpi();

}  // namespace pg_sparse
