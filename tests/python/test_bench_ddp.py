"""The DDP benchmark suite end to end: ``python -m pg_sparse.bench ddp`` on
the tiny model with 2 ranks (it launches torchrun itself), then checks of its
JSON, with two independent oracles: pg_sparse's dense hook ends on the same
parameters as plain gloo DDP, and the byte counts match the ring model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import _job_env
from pg_sparse.bench import ddp

import pg_sparse

P = 2
STEPS = 2


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("bench_ddp")
    pkg_root = str(Path(pg_sparse.__file__).resolve().parents[1])
    env = _job_env({"PYTHONPATH": os.pathsep.join(
        [pkg_root, *filter(None, [os.environ.get("PYTHONPATH")])])})
    cmd = [sys.executable, "-m", "pg_sparse.bench", "ddp", "--out", str(out),
           "--model", "tiny", "--nproc", str(P), "--steps", str(STEPS), "--warmup", "3",
           "--density", "0.1", "--methods", "nocomm", "gloo", "bf16", "fp16", "powersgd",
           *ddp.SPARSE_METHODS]
    proc = subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True, timeout=150)
    log = f"\n--- stdout:\n{proc.stdout[-6000:]}\n--- stderr:\n{proc.stderr[-6000:]}"
    assert proc.returncode == 0, log
    path = out / "ddp_tiny.json"
    assert path.exists(), log
    assert (out / "ddp_tiny.md").exists(), log
    assert (out / "ddp_tiny.png").stat().st_size > 0, log
    return json.loads(path.read_text())


def _rows(result: dict) -> dict[str, dict]:
    return {r["method"]: r for r in result["rows"]}


def test_every_method_ran(result: dict) -> None:
    rows = _rows(result)
    want = {"nocomm", "gloo", "bf16", "fp16", "powersgd", *ddp.SPARSE_METHODS}
    assert set(rows) == want
    for m, r in rows.items():
        assert "error" not in r, f"{m}: {r.get('error')}"
        assert r["steps"] == STEPS and len(r["step_s_samples"]) == STEPS
        assert 0 < r["step_s_min"] <= r["step_s_median"] <= r["step_s_max"], m
        for k in ("forward_s", "backward_s", "optimizer_s"):
            assert r[k] > 0, (m, k)
        assert r["world_size"] == P
    assert result["context"]["world_size"] == P


def test_dense_matches_gloo(result: dict) -> None:
    """Same weights, same batches, same SGD: pg_sparse's dense allreduce and
    gloo's must end on the same parameters."""
    rows = _rows(result)
    assert rows["gloo"]["param_max_abs_diff_vs_gloo"] == 0.0
    assert rows["dense"]["param_max_abs_diff_vs_gloo"] < 1e-5
    # A sparse method at density 0.1 really trains differently.
    assert rows["oktopk"]["param_max_abs_diff_vs_gloo"] > 1e-6


def test_bytes(result: dict) -> None:
    rows = _rows(result)
    n = rows["gloo"]["numel"]
    ring = 2 * (P - 1) / P * 4 * n
    assert rows["gloo"]["bytes_per_rank"] == pytest.approx(ring)
    assert rows["bf16"]["bytes_per_rank"] == pytest.approx(ring / 2)
    assert rows["nocomm"]["bytes_per_rank"] == 0
    # pg_sparse's own count for its dense allreduce: at least the ring's
    # 2(P-1)/P x 4 B x n (P=2: each rank sends half, then the other half).
    assert rows["dense"]["bytes_per_rank"] == pytest.approx(ring, rel=0.05)
    assert rows["dense"]["density"] == pytest.approx(1.0)
    for m in ("oktopk", "topka", "gaussiank"):
        assert 0 < rows[m]["density"] < 0.5, m
        assert 0 < rows[m]["bytes_per_rank"] < ring, m
        assert rows[m]["hook_time_s"] > 0, m


def test_method_names_carry_wire_and_hierarchy():
    from pg_sparse.bench.ddp import split_method

    assert split_method("oktopk") == ("oktopk", None, None)
    assert split_method("topka+bf16") == ("topka", "bfloat16", None)
    assert split_method("oktopk+fp16@node") == ("oktopk", "float16", "node")
    assert split_method("gtopk@auto") == ("gtopk", None, "auto")
    for bad in ("gloo@node", "oktopk@ring", "bf16+bf16"):
        with pytest.raises(SystemExit):
            split_method(bad)


def test_device_picks_the_baseline():
    """--device cuda defaults to NCCL DDP as the baseline; nccl on CPU is refused."""
    import argparse

    def parse(*argv: str) -> argparse.Namespace:
        p = argparse.ArgumentParser()
        ddp.add_arguments(p)
        return p.parse_args(["--out", "x", *argv])

    assert ddp._methods(parse()) == list(ddp.METHODS)
    gpu = ddp._methods(parse("--device", "cuda"))
    assert "nccl" in gpu and "gloo" not in gpu
    assert ddp.baseline_of("cuda") == "nccl" and ddp.baseline_of("cpu") == "gloo"
    with pytest.raises(SystemExit, match="nccl needs --device cuda"):
        ddp._methods(parse("--methods", "nocomm,nccl"))
    # The options reach the ranks a launch starts.
    argv = ddp._to_argv(parse("--device", "cuda", "--local-size", "2"))
    assert argv[argv.index("--device") + 1] == "cuda"
    assert argv[argv.index("--local-size") + 1] == "2"
