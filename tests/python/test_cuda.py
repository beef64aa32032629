"""The GPU path end to end: torchrun and mpirun with one process per GPU, every
collective on CUDA tensors against NCCL, send/recv of CUDA tensors, DDP with
every hook on CUDA, Ok-Topk training on the GPU. Skips where fewer than two
GPUs (or a CPU torch)."""

import os

import pytest
import torch

NGPU = torch.cuda.device_count() if torch.cuda.is_available() else 0
# One process per GPU; PGS_CUDA_NPROC=4 (or 8) on bigger machines.
NPROC = int(os.environ.get("PGS_CUDA_NPROC", "2"))
pytestmark = pytest.mark.skipif(NGPU < NPROC, reason=f"needs {NPROC} CUDA GPUs")

CHECKS = ["broadcast"] + [
    f"all_reduce_{op}_{dt}" for op in ("SUM", "AVG", "MAX", "MIN", "PRODUCT")
    for dt in ("float32", "float16", "bfloat16", "int64")
    if not (op == "AVG" and dt == "int64")] + [
    "all_gather", "reduce_scatter", "all_to_all", "barrier_and_async",
    "p2p_ring", "p2p_exchange_same_peer", "p2p_ordered_and_streams",
    "p2p_recv_timeout"] + [
    f"ddp_hook_density1_{a}" for a in
    ("dense", "topka", "topkdsa", "gtopk", "gaussiank", "oktopk")] + [
    f"ddp_hook_density1_{a}_node" for a in ("dense", "oktopk", "gtopk")] + [
    "oktopk_density001_trains", "adam_gradient_matches_cpu", "adam_normalized_matches_cpu",
    "then_sees_gathered", "adtopk_conserves"]


# CUDA tensors take NCCL under either launcher; under mpirun,
# PG_SPARSE_CUDA_TRANSPORT=mpi moves them over Open MPI instead (directly if
# it is CUDA-aware, else staged through pinned memory).
CONFIGS = {
    "torchrun-nccl": ("torchrun", {}),
    "mpirun-nccl": ("mpirun", {}),
    "mpirun-mpi": ("mpirun", {"PG_SPARSE_CUDA_TRANSPORT": "mpi"}),
    "mpirun-mpi-staged": ("mpirun", {"PG_SPARSE_CUDA_TRANSPORT": "mpi-staged"}),
}


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("check", CHECKS)
def test_cuda(jobs, config, check):
    launcher, env = CONFIGS[config]
    jobs.get(launcher, "cuda.py", NPROC, env={"NCCL_NVLS_ENABLE": "0", **env},
             timeout=300).check(check)
