"""The hook path on a single GPU (world size 1): CUDA buckets against CPU
buckets on the same data, so the GPU path is tested whenever any GPU is lent.
Skips without a GPU (or with a CPU torch)."""

import pytest
import torch
from workers.common import ALGOS

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CHECKS = [f"{kind}_{a}" for a in ALGOS for kind in ("bucket_parity", "nonfinite", "ddp_twin")]


@pytest.mark.parametrize("check", CHECKS)
def test_cuda_one_gpu(jobs, check):
    jobs.get("torchrun", "cuda_one.py", 1, env={"NCCL_NVLS_ENABLE": "0"},
             timeout=300).check(check)
