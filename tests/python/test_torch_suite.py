"""PyTorch's own DistributedTest suite against "sparse" (tests/torch_suite):
the tests that pass on gloo and on "sparse" at world size 2 (or 3 with
PGS_TORCH_SUITE_WORLD=3), a quick part by default (a few seconds each: every
one spawns its processes), all of them with PGS_TORCH_SUITE=full."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SUITE = Path(__file__).resolve().parents[1] / "torch_suite"
# PGS_TORCH_SUITE_WORLD=3 runs the world-size-3 list (the same 86 tests).
WORLD = os.environ.get("PGS_TORCH_SUITE_WORLD", "2")
PASSING = (SUITE / f"passing_w{WORLD}.txt").read_text().split()
# One or two of each kind: collectives, rooted and list forms, coalesced,
# point-to-point, groups, barriers, DDP.
QUICK = ["test_zz_groups_are_sparse"] + [t for t in PASSING if t in {
    "test_reduce_sum", "test_reduce_max", "test_gather", "test_scatter",
    "test_all_reduce_sum", "test_all_reduce_coalesced_sum", "test_all_gather_coalesced_simple",
    "test_send_recv", "test_send_recv_any_source", "test_isend", "test_irecv",
    "test_barrier", "test_broadcast", "test_sparse_all_reduce_sum",
    "test_DistributedDataParallelCPU", "test_all_gather_object_default_pg",
    "test_batch_isend_irecv_gloo",
    "test_scatter_checks", "test_gather_checks"} - {"test_zz_groups_are_sparse"}]
TESTS = PASSING if os.environ.get("PGS_TORCH_SUITE") == "full" else QUICK


_RESULTS: dict[str, str] = {}


def suite_results() -> dict[str, str]:
    """Runs every selected test in one pytest process (the suite's import is
    the slow part) and returns test name -> PASSED/FAILED/SKIPPED/ERROR."""
    if not _RESULTS:
        env = dict(os.environ, WORLD_SIZE=WORLD, BACKEND="gloo", PGS_SUITE_BACKEND="sparse",
                   OMP_NUM_THREADS="1")
        ids = [f"dist_suite.py::TestSparseBackend::{t}" for t in TESTS]
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA",
                               "-p", "no:cacheprovider", *ids],
                              cwd=SUITE, env=env, capture_output=True, text=True,
                              timeout=60 * len(TESTS))
        for line in proc.stdout.splitlines():
            word, _, rest = line.partition(" ")
            if word in ("PASSED", "FAILED", "SKIPPED", "ERROR") and "::" in rest:
                _RESULTS[rest.split("::")[-1].split(" ")[0]] = word
        _RESULTS["__log__"] = (proc.stdout + proc.stderr)[-4000:]
    return _RESULTS


@pytest.mark.parametrize("name", TESTS)
def test_torch_distributed_test(name):
    results = suite_results()
    assert results.get(name) == "PASSED", f"{name}: {results.get(name)}\n{results['__log__']}"
