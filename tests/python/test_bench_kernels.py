"""The ``kernels`` benchmark suite at tiny sizes: its outputs exist and the
values it recorded agree with oracles computed here from the same data
(torch.topk for the k-th |x|, brute force for the count and the compaction)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("matplotlib")

from pg_sparse.bench import kernels  # noqa: E402
from pg_sparse.bench.__main__ import main  # noqa: E402

SIZES = (7, 1000, 4096, 5000)
DENSITY = 0.02


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_kernels")
    rc = main(["kernels", "--out", str(out), "--sizes", ",".join(map(str, SIZES)),
               "--density", str(DENSITY), "--repeats", "2", "--threads", "0",
               "--seed", "3"])
    return rc, out, json.loads((out / "kernels.json").read_text())


def test_outputs_written(run):
    rc, out, data = run
    assert rc == 0
    for name in ("kernels.json", "kernels.md", "kernels_ns_per_value.png",
                 "kernels_vs_floor.png"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "kernels_ns_per_value.png").read_bytes()[:4] == b"\x89PNG"
    assert data["context"]["torch"] == torch.__version__
    assert [r["n"] for r in data["rows"]] == list(SIZES)
    md = (out / "kernels.md").read_text()
    assert "machine:" in md and "| n |" in md


@pytest.mark.parametrize("i", range(len(SIZES)))
def test_values_match_oracle(run, i):
    _, _, data = run
    row = data["rows"][i]
    n, k = row["n"], row["k"]
    assert k == max(1, round(DENSITY * n))
    g, r = kernels.make_data(n, row["seed"])
    x = r + g
    absx = x.abs()
    kth = float(torch.topk(absx, k).values[-1])
    assert row["kth_thr"] == kth
    assert row["topk_kth"] == kth
    assert row["kth_n_gt"] == int((absx > kth).sum())
    # accumulate: r += g, then the count of |r| >= thr among nonzeros.
    thr = row["accumulate_thr"]
    assert row["accumulate_count"] == int(((absx >= thr) & (x != 0)).sum())
    # compact: every |x| > thr, then the first ties up to k, in index order.
    above = [i for i in range(n) if x[i] != 0 and abs(float(x[i])) > thr]
    ties = [i for i in range(n) if x[i] != 0 and abs(float(x[i])) == thr]
    expect = sorted(above + ties[:k - len(above)])
    assert row["compact_idx"] == expect
    assert row["compact_count"] == k == len(expect)
    assert row["compact_idx_sum"] == sum(expect)
    assert row["ok"] and all(row["checks"].values()), row["checks"]


def test_timings_recorded(run):
    _, _, data = run
    for row in data["rows"]:
        for name in ("accumulate", "kth_abs", "compact", "topk", "stream_add", "stream_copy"):
            t = row[f"{name}_timing"]
            assert len(t["samples_s"]) == 2 and t["median_s"] > 0
            assert row[f"{name}_ns_per_value"] > 0
        assert row["floor_gbps"] > 0 and row["accumulate_vs_floor"] > 0


def test_rejects_bad_input():
    from pg_sparse import _C

    x = torch.ones(10)
    with pytest.raises(Exception, match="k must be"):
        _C._ops_kth_abs(x, 11)
    with pytest.raises(Exception, match="float32"):
        _C._ops_kth_abs(x.double(), 1)
    with pytest.raises(Exception, match="contiguous"):
        _C._ops_compact(torch.ones(10, 2).t()[0], 0.5)
    with pytest.raises(Exception, match="values"):
        _C._ops_accumulate(x, torch.ones(9), 0.0)
    with pytest.raises(Exception, match="OVERFLOW|overflow|capacity"):
        _C._ops_compact(x, 0.5, -1, 3)
