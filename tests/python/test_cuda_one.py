"""The hook path on a single GPU: CUDA buckets against CPU buckets on the same
data at world size 1 (torchrun) and with 2 and 3 ranks sharing the GPU
(mpirun over the staged Open MPI transport, and under the default
PG_SPARSE_CUDA_TRANSPORT=auto, which finds the shared GPU and stages
through the host transport: gloo under torchrun, Open MPI under mpirun), so
the GPU path is tested whenever any GPU is lent. Skips without a GPU (or
with a CPU torch)."""

import pytest
import torch
from workers.common import ALGOS

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CHECKS = [f"{kind}_{a}" for a in ALGOS for kind in ("bucket_parity", "nonfinite", "ddp_twin",
                                                     "native_hook")]
CHECKS.append("cuda_transport")


STAGED = {"NCCL_NVLS_ENABLE": "0", "PG_SPARSE_CUDA_TRANSPORT": "mpi-staged",
          "PGS_EXPECT_CUDA_TRANSPORT": "mpi-staged"}
# The default (auto): NCCL alone on the GPU, staged where ranks share it.
AUTO_SHARED = {"NCCL_NVLS_ENABLE": "0", "PGS_EXPECT_CUDA_TRANSPORT": "staged"}
CONFIGS = {"ws1": ("torchrun", 1, {"NCCL_NVLS_ENABLE": "0", "PGS_EXPECT_CUDA_TRANSPORT": "nccl"}),
           "shared2-staged": ("mpirun", 2, STAGED),
           "shared3-staged": ("mpirun", 3, STAGED),
           "shared2-auto-torchrun": ("torchrun", 2, AUTO_SHARED),
           "shared3-auto-torchrun": ("torchrun", 3, AUTO_SHARED),
           "shared2-auto-mpirun": ("mpirun", 2, AUTO_SHARED)}


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("check", CHECKS)
def test_cuda_one_gpu(jobs, config, check):
    launcher, nproc, env = CONFIGS[config]
    jobs.get(launcher, "cuda_one.py", nproc, env=env, timeout=300).check(check)


def test_hierarchy_on_one_gpu(tmp_path):
    """Hierarchical mode on CUDA tensors with 4 ranks sharing the GPU as 2
    nodes x 2 (tests/python/workers/hierarchy.py with ``cuda``): the
    conservation invariant per call, equal outputs, the exact average on
    dense calls, and training as well as flat."""
    from conftest import run_torchrun
    from test_hierarchy import WORKER, assert_two_nodes_ok

    assert_two_nodes_ok(run_torchrun(WORKER, 4, tmp_path, "cuda", timeout=240))


def test_auto_native_on_one_gpu(tmp_path):
    """algo="auto" through the C++ hook on CUDA tensors, 2 ranks sharing the
    GPU (tests/python/workers/auto.py with ``cuda``): the calls between
    decisions run natively, the decisions still switch, and training gives
    the Python hook's bits; trials rebuild CUDA buckets and the replicas
    stay equal on both ranks."""
    from conftest import run_torchrun
    from test_auto import WORKER

    text = run_torchrun(WORKER, 2, tmp_path, "cuda", timeout=240)
    for rank in range(2):
        assert f"rank {rank}: C++ hook served the calls between decisions, same bits " \
               "(cuda)" in text, text[-3000:]
        assert f"rank {rank}: trials through the C++ hook (cuda)" in text, text[-3000:]
