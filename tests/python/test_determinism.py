"""Determinism: the same job run twice (same seeds, same P) gives bitwise the
same averaged gradients at every step and the same final weights, for every
hook, with fp32 and bf16 values on the wire, under torchrun and mpirun."""

import pytest
from workers.common import ALGOS

SCRIPT = "determinism.py"
CONFIGS = {"torchrun-P3": ("torchrun", 3), "mpirun-P2": ("mpirun", 2)}
KEYS = [f"{a}_{w}" for a in ALGOS for w in ("fp32", "bf16")]


def runs(jobs, config):
    launcher, nproc = CONFIGS[config]
    return [jobs.get(launcher, SCRIPT, nproc, args=("--tag", str(i)), timeout=150)
            for i in (1, 2)]


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("key", KEYS)
def test_two_runs_are_bitwise_identical(jobs, config, key):
    first, second = runs(jobs, config)
    for job in (first, second):
        job.check(key)
    digests = {(i, r): job.info(r)[key] for i, job in enumerate((first, second))
               for r in range(job.nproc)}
    # Every rank applies the same average, so all ranks of a run agree too.
    assert len(set(digests.values())) == 1, digests


@pytest.mark.parametrize("config", CONFIGS)
def test_jobs_end_cleanly(jobs, config):
    for job in runs(jobs, config):
        job.assert_clean_exit()
