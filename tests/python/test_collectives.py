"""Item 1 of the acceptance list: every collective of the "sparse" backend
on CPU tensors, checked against a gloo group in the same job (and against
values computed from the known inputs), under torchrun (transport gloo) and
mpirun (transport mpi), at P = 2, 3 and 4, and under mpirun with the gloo
transport forced by PG_SPARSE_TRANSPORT."""

import pytest
from workers import collectives

SCRIPT = "collectives.py"
# name -> (launcher, ranks, extra environment)
CONFIGS = {
    "torchrun-P2": ("torchrun", 2, {}),
    "torchrun-P3": ("torchrun", 3, {}),
    "mpirun-P2": ("mpirun", 2, {}),
    # info level: test_launch reads the transport line rank 0 logs.
    "mpirun-P3": ("mpirun", 3, {"PG_SPARSE_LOG": "info"}),
    "mpirun-P4": ("mpirun", 4, {}),
    "mpirun-P2-gloo": ("mpirun", 2, {"PG_SPARSE_TRANSPORT": "gloo", "PG_SPARSE_LOG": "info"}),
}
JOB_TIMEOUT = 100


def job_of(jobs, config):
    launcher, nproc, env = CONFIGS[config]
    return jobs.get(launcher, SCRIPT, nproc, env=env, timeout=JOB_TIMEOUT)


@pytest.mark.parametrize("config,check", [
    pytest.param(config, name, id=f"{config}-{name}")
    for config, (_, nproc, _) in CONFIGS.items()
    for name, _ in collectives.plan(nproc)])
def test_collective(jobs, config, check):
    job_of(jobs, config).check(check)


@pytest.mark.parametrize("config", CONFIGS)
def test_job_ends_cleanly(jobs, config):
    """Every rank finished every check, destroyed its group and exited 0."""
    job_of(jobs, config).assert_clean_exit()
