"""Launch detection: which launcher started this process, and the torch
environment variables (RANK, WORLD_SIZE, LOCAL_RANK, ...) it implies."""

from __future__ import annotations

import os
import socket
from collections.abc import MutableMapping
from pathlib import Path

# (rank, size, local rank, local size) variables of each MPI-style launcher,
# in order of preference.
_LAUNCHERS: tuple[tuple[str, str, str, str, str], ...] = (
    ("mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("pmix", "PMIX_RANK", "PMIX_SIZE", "PMIX_LOCAL_RANK", "PMIX_LOCAL_SIZE"),
    ("pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
     "SLURM_NTASKS_PER_NODE"),
)


def mpi_launcher(env: MutableMapping[str, str] | None = None) -> str | None:
    """Name of the MPI-style launcher that started this process, if any.

    torchrun sets TORCHELASTIC_RUN_ID; a torchrun job inside a Slurm
    allocation is still a torchrun job."""
    env = os.environ if env is None else env
    if "TORCHELASTIC_RUN_ID" in env:
        return None
    for name, rank, size, _, _ in _LAUNCHERS:
        if rank in env and (size in env or name == "pmix"):
            return name
    return None


def map_mpi_environment(env: MutableMapping[str, str] | None = None) -> bool:
    """Set RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (and, on one node,
    MASTER_ADDR/MASTER_PORT) from the MPI launcher's variables. Values the
    user already set win. Returns whether an MPI launcher was found."""
    env = os.environ if env is None else env
    launcher = mpi_launcher(env)
    if launcher is None:
        return False
    _, rank, size, local_rank, local_size = next(
        entry for entry in _LAUNCHERS if entry[0] == launcher)
    env.setdefault("RANK", env[rank])
    if size in env:
        env.setdefault("WORLD_SIZE", env[size])
    if local_rank in env:
        env.setdefault("LOCAL_RANK", env[local_rank])
    if local_size in env:
        env.setdefault("LOCAL_WORLD_SIZE", env[local_size].split("(")[0].split(",")[0])
    if env.get("WORLD_SIZE") == env.get("LOCAL_WORLD_SIZE"):
        # One node: every rank can agree on a rendezvous without being told.
        env.setdefault("MASTER_ADDR", "127.0.0.1")
        env.setdefault("MASTER_PORT", str(_port_for_job(env)))
    return True


def _port_for_job(env: MutableMapping[str, str]) -> int:
    """A port every rank of one job derives alike (from the job's id)."""
    job = env.get("OMPI_MCA_orte_hnp_uri") or env.get("PMIX_NAMESPACE") or \
        env.get("SLURM_JOB_ID") or socket.gethostname()
    return 20000 + sum(job.encode()) * 7919 % 20000


# Open MPI 4.1's fixed decision picks a non-ring allreduce for large buffers
# (measured: 1.37x gloo's time for 100 MB over four 1 Gbit/s links, where its
# own ring takes 1.06x). The rules file keeps the fixed decision below 1 MiB
# (latency-bound sizes) and takes the bandwidth-optimal ring above it.
OMPI_RULES = Path(__file__).with_name("data") / "ompi_coll_rules.conf"
_OMPI_TUNING = ("OMPI_MCA_coll_tuned_use_dynamic_rules",
                "OMPI_MCA_coll_tuned_dynamic_rules_filename",
                "OMPI_MCA_coll_tuned_allreduce_algorithm")


def tune_open_mpi(env: MutableMapping[str, str] | None = None) -> bool:
    """Point Open MPI's tuned collectives at the package's rules file, unless
    the user chose any tuned-collective setting (``--mca`` arrives as the
    same variables). Takes effect only if MPI is not yet initialised. Returns
    whether the rules were set."""
    env = os.environ if env is None else env
    if mpi_launcher(env) is None or any(k in env for k in _OMPI_TUNING):
        return False
    env[_OMPI_TUNING[0]] = "1"
    env[_OMPI_TUNING[1]] = str(OMPI_RULES)
    return True
