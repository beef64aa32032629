"""SparseState(algo="auto"): the model's arithmetic against hand-written
formulas, settings refused with clear errors, and a real 2-rank torchrun job
(tests/python/workers/auto.py) checking the choices against oracles."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import run_torchrun

import pg_sparse
from pg_sparse import _auto

WORKER = Path(__file__).resolve().parent / "workers" / "auto.py"


def test_model_matches_the_formulas():
    link = _auto.Link(alpha_s=50e-6, beta_bytes_s=125e6)  # 1 Gbit/s
    p, n, k = 4, 1_000_000, 10_000
    dense = 2 * 3 * 50e-6 + 4 * (2 * 3 / 4 * n) / 125e6
    assert _auto.predict("dense", p, n, k, link, 1e-9) == pytest.approx(dense)
    ok = 1e-9 * n + (6 + 3 * 2) * 50e-6 + 4 * (4 * k * 3 / 4) / 125e6
    assert _auto.predict("oktopk", p, n, k, link, 1e-9) == pytest.approx(ok)
    topka = 1e-9 * n + 6 * 50e-6 + 4 * (2 * k * 3) / 125e6
    assert _auto.predict("topka", p, n, k, link, 1e-9) == pytest.approx(topka)
    # Ok-Topk with global_factor g gathers g k entries: 2 (k + g k)(P-1)/P words.
    ok3 = 1e-9 * n + (6 + 3 * 2) * 50e-6 + 4 * (2 * (k + 3 * k) * 3 / 4) / 125e6
    assert _auto.predict("oktopk", p, n, k, link, 1e-9, None, 3.0) == pytest.approx(ok3)
    assert pg_sparse.SparseState(algo="auto", global_factor=3)._auto.global_factor == 3.0
    # Slow link: sparse wins; fast link: dense wins.
    assert ok < dense
    fast = _auto.Link(alpha_s=5e-6, beta_bytes_s=50e9)
    assert _auto.predict("dense", p, n, k, fast, 2e-9) < \
        min(_auto.predict(a, p, n, k, fast, 2e-9) for a in _auto.CANDIDATES)


def test_link_classes_split_the_sparse_bytes():
    """2 nodes x 2 ranks: a sparse method's bytes go 1/3 to the node's other
    rank (fast class) and 2/3 across nodes (slow class), in parallel; dense
    keeps the whole group's ring measurement."""
    link = _auto.Link(alpha_s=50e-6, beta_bytes_s=125e6)
    classes = _auto.LinkClasses(2, intra=_auto.Link(5e-6, 20e9),
                                cross=_auto.Link(50e-6, 60e6))
    p, n, k = 4, 1_000_000, 10_000
    sent = 4 * 2 * k * 3  # TopkA's bytes per rank
    topka = 1e-9 * n + 6 * 50e-6 + max(sent / 3 / 20e9, sent * 2 / 3 / 60e6)
    assert _auto.predict("topka", p, n, k, link, 1e-9, classes) == pytest.approx(topka)
    assert _auto.predict("dense", p, n, k, link, 1e-9, classes) == \
        _auto.predict("dense", p, n, k, link, 1e-9)
    # A slow intra-node class (a node whose ranks share a slow bus) decides.
    slow_in = _auto.LinkClasses(2, intra=_auto.Link(5e-6, 1e6), cross=classes.cross)
    assert _auto.predict("topka", p, n, k, link, 1e-9, slow_in) == \
        pytest.approx(1e-9 * n + 6 * 50e-6 + sent / 3 / 1e6)


@pytest.mark.parametrize("times,probe,extra", [
    ((20e-6, 1e-3), 1 << 20, 1e-3 - 20e-6),  # a slow link: the 4 MB probe decides
    ((20e-6, 21e-6, 60e-6), 1 << 24, 40e-6),  # fast: the 64 MB probe decides
    ((20e-6, 21e-6, 22e-6), 1 << 24, 22e-6),  # too fast for both: a lower bound
])
def test_link_probe_grows_on_fast_links(monkeypatch, times, probe, extra):
    """beta never comes from the difference of two times within noise (it
    gave 4e15 bytes/s over NVLink): the probe grows once, then beta is
    bounded by the probe's whole time. The collectives are stubbed; the
    times are what the ranks agreed on."""
    left = list(times)
    monkeypatch.setattr(_auto.dist, "get_world_size", lambda group=None: 2)
    monkeypatch.setattr(_auto.dist, "all_reduce", lambda t, **kw: None)
    monkeypatch.setattr(_auto, "_timed", lambda fn, repeats, cuda: left.pop(0))
    monkeypatch.setattr(_auto, "_agreed", lambda values, group: list(values))
    link = _auto.measure_link(None, torch.device("cpu"))
    assert not left  # exactly the probes expected were timed
    assert link.alpha_s == pytest.approx(20e-6 / 2)
    assert link.beta_bytes_s == pytest.approx(4 * probe / extra)  # P = 2: n words each


@pytest.mark.parametrize("kwargs,match", [
    ({"auto_algos": ("dense",)}, "auto_algos"),
    ({"auto_algos": ()}, "auto_algos"),
    ({"auto_interval": 0}, "auto_interval"),
    ({"auto_trial_calls": 1}, "auto_trial_calls"),
    ({"auto_trial_calls": -1}, "auto_trial_calls"),
    ({"auto_link": (0.0, 1e9)}, "auto_link"),
    ({"hierarchy": "node"}, "runs flat"),
    ({"precondition": "adam"}, "runs flat"),
    ({"auto_density": (0.1, 0.01)}, "auto_density"),
    ({"auto_density": (0.0, 0.1)}, "auto_density"),
    ({"auto_density": (0.01,)}, "auto_density"),
    ({"auto_density": (0.01, 0.1), "density_warmup_steps": 5}, "auto_density"),
])
def test_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        pg_sparse.SparseState(algo="auto", **kwargs)


def test_density_range_needs_auto():
    with pytest.raises(ValueError, match="auto_density needs algo='auto'"):
        pg_sparse.SparseState(algo="oktopk", auto_density=(0.01, 0.1))


def test_density_range_picks_the_densest_affordable_point():
    """The chooser's rule on its own: the densest grid point whose fastest
    sparse method is predicted within 10% of the fastest anywhere."""
    ch = _auto.AutoChooser(_auto.CANDIDATES, 100, (50e-6, 125e6), (0.001, 0.1))
    ch.select_s = 1e-9
    p, n = 4, 10_000_000
    d = ch._density_for(n, p, 0.01)
    grid = [0.001 * 100 ** (i / 4) for i in range(5)]
    t = {g: min(_auto.predict(m, p, n, max(1, round(g * n)), ch.link, 1e-9)
                for m in _auto.CANDIDATES) for g in grid}
    assert d == max(g for g in grid if t[g] <= 1.1 * min(t.values()))
    assert d < 0.1  # at 1 Gbit/s the densest point costs far more
    ch.select_s = 1.0  # selection dominates: every point is as fast
    assert ch._density_for(n, p, 0.01) == pytest.approx(0.1)


def test_choices_in_a_real_job(tmp_path):
    text = run_torchrun(WORKER, 2, tmp_path)  # 2 ranks on 2 cores
    for rank in range(2):
        for line in ("fast link dense", "slow link sparse", "density range chose",
                     "switched to dense",
                     "C++ hook served the calls between decisions, same bits (cpu)",
                     "trials measured ['gaussiank', 'topka', 'topkdsa'] and, with dense, "
                     "['dense', 'gaussiank', 'topka']",
                     "measured alpha"):
            assert f"rank {rank}: {line}" in text, text[-3000:]


def test_recorded_call_times_keep_the_latest_in_order():
    """A native bucket's record of call times (what auto drains): the count
    of every call, and the latest 1024 (time, dense) pairs oldest first,
    also after the ring wrapped; the dense flags follow a known pattern.
    One rank."""
    code = """
        import torch, torch.distributed as dist, pg_sparse
        dist.init_process_group("sparse", store=dist.HashStore(), rank=0, world_size=1)
        b = pg_sparse.SparseState(warmup_steps=0).native_bucket(0, torch.zeros(64))
        b.record_times(True)
        flag = lambda i: i % 3 == 0
        for n in (1100, 5):
            for i in range(n):
                b.set_dense(flag(i))
                b.allreduce(torch.randn(64)).wait()
            count, times = b.take_times()
            assert count == n, count
            assert [d for _, d in times] == [flag(i) for i in range(max(0, n - 1024), n)]
            assert all(t >= 0 for t, _ in times)
        print("ring ok")
    """
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd="/tmp",
                         env={k: v for k, v in os.environ.items()
                              if not k.startswith("PG_SPARSE_")},
                         capture_output=True, text=True, timeout=120)
    assert "ring ok" in out.stdout, out.stdout + out.stderr[-3000:]


def test_link_classes_in_a_real_job(tmp_path):
    """4 ranks as 2 nodes x 2 (local_size=2): the link classes are measured
    and used, and a world of one node has none (4 ranks on 2 cores)."""
    text = run_torchrun(WORKER, 4, tmp_path, "classes")
    for rank in range(4):
        assert f"rank {rank}: link classes measured" in text, text[-3000:]
