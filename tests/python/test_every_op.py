"""Every c10d operation gloo implements, on "sparse" against gloo in the same
job (reduce, gather, scatter, list and coalesced forms, bitwise ops, every
dtype, 0-d, empty and non-contiguous tensors, sparse allreduce and DDP over a
sparse embedding, sequence numbers, the timeout message), under torchrun and
mpirun at P = 2 and 3 (on CUDA tensors at P = 2, and 4 where four GPUs are lent;
with both ranks on one GPU wherever one is lent)."""

import pytest
import torch
from workers import every_op

NGPU = torch.cuda.device_count() if torch.cuda.is_available() else 0

SCRIPT = "every_op.py"
CONFIGS = {
    "torchrun-P2": ("torchrun", 2, {}),
    "torchrun-P3": ("torchrun", 3, {}),
    "mpirun-P2": ("mpirun", 2, {}),
    "mpirun-P3": ("mpirun", 3, {}),
    # torch's debug wrapper around every group (sequence numbers, checks of
    # every collective's shapes through a gloo helper group).
    "torchrun-P2-detail": ("torchrun", 2, {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}),
}
# The "sparse" side on CUDA tensors, one GPU per rank (NCCL; the gloo
# oracle on CPU copies), where two GPUs are lent (and at P = 4 where four are).
CUDA_CONFIGS = {
    "cuda-torchrun-P2": ("torchrun", 2, {"PGS_EVERY_OP_DEVICE": "cuda"}),
    "cuda-mpirun-P2": ("mpirun", 2, {"PGS_EVERY_OP_DEVICE": "cuda"}),
}
if NGPU >= 4:  # P = 4 too, where four GPUs are lent
    CUDA_CONFIGS.update({
        "cuda-torchrun-P4": ("torchrun", 4, {"PGS_EVERY_OP_DEVICE": "cuda"}),
        "cuda-mpirun-P4": ("mpirun", 4, {"PGS_EVERY_OP_DEVICE": "cuda"}),
    })
if NGPU >= 2:
    CONFIGS.update(CUDA_CONFIGS)
# Every rank on one GPU (any machine with a GPU): NCCL refuses that, so the
# default PG_SPARSE_CUDA_TRANSPORT=auto stages through the host transport.
if NGPU >= 1:
    CONFIGS.update({
        "cuda-shared-torchrun-P2": ("torchrun", 2, {"PGS_EVERY_OP_DEVICE": "cuda-shared"}),
        "cuda-shared-mpirun-P2": ("mpirun", 2, {"PGS_EVERY_OP_DEVICE": "cuda-shared"}),
    })
JOB_TIMEOUT = 120


def job_of(jobs, config):
    launcher, nproc, env = CONFIGS[config]
    return jobs.get(launcher, SCRIPT, nproc, env=env, timeout=JOB_TIMEOUT)


@pytest.mark.parametrize("config,check", [
    pytest.param(config, name, id=f"{config}-{name}")
    for config, (_, nproc, _) in CONFIGS.items()
    for name, _ in every_op.plan(nproc)])
def test_op(jobs, config, check):
    job_of(jobs, config).check(check)
