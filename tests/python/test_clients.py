"""Real clients on "sparse" against the same client on gloo in the same job:
FSDP2 training and full_tensor(), FSDP1, DCP save/load of a DDP and an FSDP2
model on the default group; under torchrun and mpirun at P = 2, and where
two GPUs are lent the same on CUDA tensors against NCCL."""

import pytest
import torch
from workers import clients

SCRIPT = "clients.py"
CONFIGS = {
    "torchrun-P2": ("torchrun", 2, {}),
    "mpirun-P2": ("mpirun", 2, {}),
}
if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
    CUDA = {"PGS_CLIENTS_DEVICE": "cuda", "NCCL_NVLS_ENABLE": "0"}
    CONFIGS |= {"torchrun-P2-cuda": ("torchrun", 2, CUDA), "mpirun-P2-cuda": ("mpirun", 2, CUDA)}


def job_of(jobs, config):
    launcher, nproc, env = CONFIGS[config]
    return jobs.get(launcher, SCRIPT, nproc, env=env, timeout=180)


@pytest.mark.parametrize("config,check", [
    pytest.param(config, name, id=f"{config}-{name}")
    for config, (_, nproc, _) in CONFIGS.items()
    for name, _ in clients.plan(nproc)])
def test_client(jobs, config, check):
    job_of(jobs, config).check(check)


@pytest.mark.parametrize("config", CONFIGS)
def test_job_ends_cleanly(jobs, config):
    job_of(jobs, config).assert_clean_exit()
