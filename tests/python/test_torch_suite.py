"""PyTorch's own DistributedTest suite against "sparse" (tests/torch_suite):
the tests that pass on gloo and on "sparse" at world size 2 (or 3 with
PGS_TORCH_SUITE_WORLD=3), a quick part by default at world sizes 2 and 3 (a
few seconds each: every one spawns its processes), all of them with
PGS_TORCH_SUITE=full."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SUITE = Path(__file__).resolve().parents[1] / "torch_suite"
# PGS_TORCH_SUITE_WORLD=3 runs the full lists at world size 3 (the same 86 tests).
WORLD = os.environ.get("PGS_TORCH_SUITE_WORLD", "2")


def passing(world: str) -> list[str]:
    return (SUITE / f"passing_w{world}.txt").read_text().split()


# One or two of each kind: collectives, rooted and list forms, coalesced,
# point-to-point, groups, barriers, DDP.
_QUICK = {
    "test_reduce_sum", "test_reduce_max", "test_gather", "test_scatter",
    "test_all_reduce_sum", "test_all_reduce_coalesced_sum", "test_all_gather_coalesced_simple",
    "test_send_recv", "test_send_recv_any_source", "test_isend", "test_irecv",
    "test_barrier", "test_broadcast", "test_sparse_all_reduce_sum",
    "test_DistributedDataParallelCPU", "test_all_gather_object_default_pg",
    "test_batch_isend_irecv_gloo",
    "test_scatter_checks", "test_gather_checks"}
# And a smaller part at world size 3, where rooted, list and any-source
# forms meet a third rank (about a minute on 2 cores).
_QUICK_W3 = {"test_reduce_sum", "test_gather", "test_scatter", "test_all_reduce_coalesced_sum",
             "test_send_recv_any_source", "test_barrier", "test_DistributedDataParallelCPU"}


def selected(world: str, quick: set[str]) -> list[str]:
    full = os.environ.get("PGS_TORCH_SUITE") == "full"
    return ["test_zz_groups_are_sparse"] + [t for t in passing(world)
                                            if t != "test_zz_groups_are_sparse"
                                            and (full or t in quick)]


# The suite's CUDA-gated tests that pass on gloo, at world size 2. They
# need a GPU per rank (its skip guards), except that
# test_sparse_all_reduce_sum_cuda then puts both ranks' tensors on cuda:0:
# ranks sharing a GPU, where the backend stages through its host transport.
CUDA_TESTS = ["test_all_reduce_sum_cuda", "test_all_reduce_sum_cuda_async",
              "test_all_reduce_sum_cuda_complex", "test_barrier_cuda", "test_broadcast_cuda",
              "test_sparse_all_reduce_sum_cuda"]

# Run name -> (world size, tests).
RUNS = {WORLD: (WORLD, selected(WORLD, _QUICK))}
if WORLD == "2":
    RUNS["3"] = ("3", selected("3", _QUICK_W3))
_NGPU = torch.cuda.device_count() if torch.cuda.is_available() else 0
if _NGPU >= 2:
    RUNS["2-cuda"] = ("2", ["test_zz_groups_are_sparse", *CUDA_TESTS])

_RESULTS: dict[str, dict[str, str]] = {}


def suite_results(run: str) -> dict[str, str]:
    """Runs every test of ``run`` in one pytest process (the suite's import
    is the slow part) and returns test name -> PASSED/FAILED/SKIPPED/ERROR."""
    if run not in _RESULTS:
        world, tests = RUNS[run]
        env = dict(os.environ, WORLD_SIZE=world, BACKEND="gloo", PGS_SUITE_BACKEND="sparse",
                   OMP_NUM_THREADS="1")
        ids = [f"dist_suite.py::TestSparseBackend::{t}" for t in tests]
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA",
                               "-p", "no:cacheprovider", *ids],
                              cwd=SUITE, env=env, capture_output=True, text=True,
                              timeout=60 * len(tests))
        res: dict[str, str] = {}
        for line in proc.stdout.splitlines():
            word, _, rest = line.partition(" ")
            if word in ("PASSED", "FAILED", "SKIPPED", "ERROR") and "::" in rest:
                res[rest.split("::")[-1].split(" ")[0]] = word
        res["__log__"] = (proc.stdout + proc.stderr)[-4000:]
        _RESULTS[run] = res
    return _RESULTS[run]


@pytest.mark.parametrize("run,name", [
    pytest.param(r, t, id=f"w{r}-{t}") for r, (_, tests) in RUNS.items() for t in tests])
def test_torch_distributed_test(run, name):
    results = suite_results(run)
    assert results.get(name) == "PASSED", f"{name}: {results.get(name)}\n{results['__log__']}"
