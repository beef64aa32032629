"""Item 5: bad input raises a clear Python exception on every rank instead
of hanging (density 0 or > 1, integer buckets, bucket sizes or settings that
differ across ranks, NaN/Inf on one rank, bad collective arguments), and the
group stays usable afterwards."""

import pytest
from workers import errors

SCRIPT = "errors.py"
CONFIGS = {
    "torchrun-P2": ("torchrun", 2),
    "mpirun-P3": ("mpirun", 3),
}
JOB_TIMEOUT = 100


def job_of(jobs, config):
    launcher, nproc = CONFIGS[config]
    return jobs.get(launcher, SCRIPT, nproc, timeout=JOB_TIMEOUT)


@pytest.mark.parametrize("config,check", [
    pytest.param(config, name, id=f"{config}-{name}")
    for config, (_, nproc) in CONFIGS.items()
    for name, _ in errors.plan(nproc)])
def test_error_on_every_rank(jobs, config, check):
    job_of(jobs, config).check(check)


@pytest.mark.parametrize("config", CONFIGS)
def test_job_ends_cleanly(jobs, config):
    """No rank hung or died on the way: all exited 0 after the last check."""
    job_of(jobs, config).assert_clean_exit()
