"""pg_sparse: a torch.distributed backend for sparse gradient allreduce.

``import pg_sparse`` registers backend ``"sparse"``; then
``dist.init_process_group(backend="sparse")``, wrap the model in DDP and
register a hook from ``pg_sparse.hooks`` with a ``pg_sparse.SparseState``.
"""

import atexit

import torch  # noqa: F401  (the native module needs libtorch loaded first)
import torch.distributed as dist

from . import _C, hooks
from ._backend import Options, choose_transport, create_backend
from ._launch import map_mpi_environment, mpi_launcher, tune_open_mpi
from ._log import configure_logging
from ._params import Param, check_params, format_params, param, params
from .state import ALGORITHMS, ESTIMATORS, SparseState

__all__ = ["ALGORITHMS", "ESTIMATORS", "Options", "Param", "SparseState", "algorithms",
           "check_params", "estimators",
           "choose_transport", "format_params", "hooks", "map_mpi_environment",
           "mpi_launcher", "param", "params", "stats_docs", "tune_open_mpi"]
__version__ = "0.1.0"


def algorithms() -> tuple[str, ...]:
    """The sparse allreduce algorithms, from the C core's table."""
    return ALGORITHMS


def estimators() -> dict[str, str]:
    """The threshold estimators of ``SparseState(estimator=...)``, name ->
    what it does, from the C core's table."""
    return dict(ESTIMATORS)


def stats_docs() -> dict[str, str]:
    """One doc line per key of a bucket's statistics (``SparseState.stats()``)."""
    return dict(_C._stats_docs())


# The C core's messages and ours go to logging.getLogger("pg_sparse"), with
# only a NullHandler unless PG_SPARSE_LOG asks for output.
configure_logging()

# Under mpirun, torch's env:// rendezvous needs RANK/WORLD_SIZE/...: derive
# them from the launcher before the user calls init_process_group.
map_mpi_environment()
tune_open_mpi()

if "sparse" not in dist.Backend.backend_list:
    dist.Backend.register_backend("sparse", create_backend, extended_api=True,
                                  devices=["cpu", "cuda"])

# Stop the backends' threads and finalise MPI (if we started it) at exit:
# mpirun reports a rank that exits without MPI_Finalize as failed.
atexit.register(_C._shutdown_and_finalize)
