"""The creator that torch.distributed calls for backend "sparse"."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from . import _C
from ._launch import mpi_launcher
from ._params import check_params, param
from ._round import round_token

logger = logging.getLogger("pg_sparse")
_TRANSPORTS = ("mpi", "gloo")
_logged = False


@dataclass
class Options:
    """Backend options, passed as ``pg_options=`` to ``init_process_group``
    or ``new_group``.

    transport: ``"mpi"``, ``"gloo"`` or ``"auto"`` (default; the
    ``PG_SPARSE_TRANSPORT`` environment variable overrides ``"auto"``).
    """

    transport: str = "auto"


def choose_transport(options: Any = None) -> tuple[str, str]:
    """The transport to use and why: forced by options or environment, else
    Open MPI when an MPI launcher started us, else gloo (torchrun)."""
    forced = getattr(options, "transport", "auto") if options is not None else "auto"
    reason = "pg_options"
    if forced == "auto" and param("PG_SPARSE_TRANSPORT") != "auto":
        forced, reason = str(param("PG_SPARSE_TRANSPORT")), "PG_SPARSE_TRANSPORT"
    if forced != "auto":
        if forced not in _TRANSPORTS:
            raise ValueError(f"pg_sparse: unknown transport {forced!r} "
                             f"(from {reason}); choose one of {_TRANSPORTS}")
        return forced, f"set by {reason}"
    launcher = mpi_launcher()
    if launcher == "srun":
        # A plain srun gives no PMI to Open MPI, whose MPI_Init then fails
        # ("not built with SLURM's PMI support"); srun --mpi=pmix is "pmix".
        return "gloo", "launched by srun without PMI (use srun --mpi=pmix for Open MPI)"
    if launcher is not None:
        return "mpi", f"launched by {launcher}"
    return "gloo", "not launched by an MPI launcher (torchrun or single process)"


def _log_once(rank: int, transport: str, why: str) -> None:
    global _logged
    if _logged or rank != 0:
        return
    _logged = True
    logger.info("transport %s (%s)", transport, why)


def create_backend(dist_options: Any, backend_options: Any = None) -> Any:
    """Extended-API creator: build the transport, then the C++ backend."""
    # A bad PG_SPARSE_* variable fails here, on every rank, naming it.
    check_params()
    transport, why = choose_transport(backend_options)
    # torchrun keeps one store across restarts (its agents share their
    # TCPStore with every rendezvous round) while the worker keys are not per
    # round: without a prefix of the round a restarted rank could read a dead
    # rank's gloo address or NCCL id left by an earlier attempt. The round's
    # token comes from the group's rank 0 (_round.py), not from the restart
    # count, which each node's agent keeps for itself.
    if "TORCHELASTIC_RESTART_COUNT" in os.environ:
        token = round_token(dist_options.store, dist_options.group_rank,
                            dist_options.group_size, dist_options.timeout)
        dist_options.store = dist.PrefixStore(f"pg_sparse/{token}/", dist_options.store)
    inner = None
    if transport == "gloo":
        # Torch wheels ship no gloo headers, so the inner backend is built
        # here and handed to C++ as a c10d::Backend.
        # gloo's own timeout comes PG_SPARSE_GLOO_TIMEOUT_SLACK_S (10 s)
        # after ours, so a stuck call fails once, with the backend's
        # watchdog message.
        store = dist.PrefixStore("pg_sparse_inner/", dist_options.store)
        slack = timedelta(seconds=float(param("PG_SPARSE_GLOO_TIMEOUT_SLACK_S")))
        inner = dist.ProcessGroupGloo(store, dist_options.group_rank,
                                      dist_options.group_size,
                                      dist_options.timeout + slack)
    backend = _C._create_backend(dist_options, transport, inner)
    # Global rank 0 logs (a sub-group's rank 0 may be any process).
    members = list(dist_options.global_ranks_in_group)
    global_rank = members[dist_options.group_rank] if members else dist_options.group_rank
    _log_once(global_rank, transport, why)
    return backend
