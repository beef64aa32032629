"""Items 2, 3, 4 and 6: DDP with every hook at density 1.0 equals dense DDP
after 20 steps; fp16/bf16 buckets; error feedback; Ok-Topk at density 0.01
trains within its volume bound; the state_dict / pickle round trip resumes
identically. One job per launcher runs every check."""

import pytest
from workers import ddp

SCRIPT = "ddp.py"
CONFIGS = {
    "torchrun-P2": ("torchrun", 2),
    "mpirun-P3": ("mpirun", 3),
}
JOB_TIMEOUT = 150

XFAIL = {
    "state_dict_resume_multi_bucket_exact": pytest.mark.xfail(strict=True, reason=(
        "DDP's first iteration packs the parameters into other buckets (one 1 MB "
        "first bucket) than the rebuilt ones a checkpoint was taken with, so no "
        "checkpointed bucket state can apply to that iteration: it runs as a "
        "fresh (warm-up) bucket and the saved state is restored one iteration "
        "later. Exact resume holds when the bucket sets match (e.g. one bucket).")),
}


def job_of(jobs, config):
    launcher, nproc = CONFIGS[config]
    return jobs.get(launcher, SCRIPT, nproc, timeout=JOB_TIMEOUT)


@pytest.mark.parametrize("config,check", [
    pytest.param(config, name, id=f"{config}-{name}",
                 marks=[XFAIL[name]] if name in XFAIL else [])
    for config, (_, nproc) in CONFIGS.items()
    for name, _ in ddp.plan(nproc)])
def test_ddp(jobs, config, check):
    job_of(jobs, config).check(check)


@pytest.mark.parametrize("config", CONFIGS)
def test_job_ends_cleanly(jobs, config):
    job_of(jobs, config).assert_clean_exit()
