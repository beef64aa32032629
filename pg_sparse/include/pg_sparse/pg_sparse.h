/* libpgsparse: sparse allreduce algorithms over pluggable transports and
 * compute kernels. Include this for the whole public C API (without MPI; see
 * comm_mpi.h for the Open MPI transport). */
#ifndef PG_SPARSE_PG_SPARSE_H
#define PG_SPARSE_PG_SPARSE_H

#include <pg_sparse/bucket.h>
#include <pg_sparse/comm.h>
#include <pg_sparse/log.h>
#include <pg_sparse/ops.h>
#include <pg_sparse/param.h>
#include <pg_sparse/status.h>
#include <pg_sparse/types.h>

#endif /* PG_SPARSE_PG_SPARSE_H */
