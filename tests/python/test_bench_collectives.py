"""The ``collectives`` benchmark suite on 2 ranks at a tiny size: it launches
itself under torchrun, and rank 0's JSON has every algorithm, the gloo
baseline, words within the bounds and the dense volume of the ring model."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
from conftest import REPO, _job_env

pytest.importorskip("matplotlib")

N = 4096
P = 2
DENSITY = 0.01
ALGOS = ("dense", "topka", "topkdsa", "gtopk", "gaussiank", "oktopk")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_collectives")
    env = _job_env({})
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "python"), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    cmd = [sys.executable, "-m", "pg_sparse.bench", "collectives", "--out", str(out),
           "--nproc", str(P), "--sizes", str(N), "--densities", str(DENSITY),
           "--repeats", "2", "--warmup", "1", "--timeout", "80"]
    proc = subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True, timeout=100)
    log = f"\n--- stdout:\n{proc.stdout[-6000:]}\n--- stderr:\n{proc.stderr[-6000:]}"
    assert proc.returncode == 0, log
    return out, json.loads((out / "collectives.json").read_text()), log


def test_outputs_written(run):
    out, data, log = run
    for name in ("collectives.json", "collectives.md", "collectives_time.png",
                 "collectives_words.png"):
        assert (out / name).stat().st_size > 0, name + log
    assert data["context"]["world_size"] == P
    assert data["context"]["transport"] == "gloo"


def test_every_algorithm_present(run):
    _, data, log = run
    algos = {r["algo"] for r in data["rows"]}
    assert algos == {*ALGOS, "gloo", "stream"}, log
    for r in data["rows"]:
        assert r["n"] == N and r["P"] == P
        assert r["median_s"] > 0 and r["min_s"] <= r["median_s"] <= r["max_s"]
        assert len(r["calls"]) == 3
        assert r["vs_gloo"] > 0


def test_stream_floor(run):
    """The floor row: a pass over the bucket on every rank, moving nothing,
    timed like the calls (the same number of calls, a time each)."""
    _, data, _ = run
    rows = {r["algo"]: r for r in data["rows"]}
    floor = rows["stream"]
    assert floor["words_sent_max"] == 0 and floor["k"] == N and floor["density"] is None
    assert len(floor["calls"]) == len(rows["oktopk"]["calls"])
    assert all(c["time_s"] > 0 for c in floor["calls"])


def test_words(run):
    _, data, _ = run
    rows = {r["algo"]: r for r in data["rows"]}
    dense = 2 * N * (P - 1) / P
    assert rows["dense"]["words_sent"] == dense
    assert rows["dense"]["words_dense"] == dense
    k = max(1, round(DENSITY * N))
    ok = rows["oktopk"]
    assert ok["k"] == k
    assert ok["words_lower_bound"] == pytest.approx(2 * k * (P - 1) / P)
    import pg_sparse

    kg = math.floor(pg_sparse.SparseState().global_factor * k + 0.5)  # G's target
    assert ok["words_upper_bound"] == pytest.approx(3 * (k + kg) * (P - 1) / P)
    assert 0 < ok["words_sent_max"] <= ok["words_upper_bound"]
    for c in ok["calls"]:
        assert c["words_sent"] <= ok["words_upper_bound"]
    for algo in ("topka", "topkdsa", "gtopk", "gaussiank"):
        assert 0 < rows[algo]["words_sent"] < dense, algo
