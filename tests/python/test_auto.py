"""SparseState(algo="auto"): the model's arithmetic against hand-written
formulas, settings refused with clear errors, and a real 2-rank torchrun job
(tests/python/workers/auto.py) checking the choices against oracles."""

from __future__ import annotations

from pathlib import Path

import pytest
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
    # Slow link: sparse wins; fast link: dense wins.
    assert ok < dense
    fast = _auto.Link(alpha_s=5e-6, beta_bytes_s=50e9)
    assert _auto.predict("dense", p, n, k, fast, 2e-9) < \
        min(_auto.predict(a, p, n, k, fast, 2e-9) for a in _auto.CANDIDATES)


@pytest.mark.parametrize("kwargs,match", [
    ({"auto_algos": ("dense",)}, "auto_algos"),
    ({"auto_algos": ()}, "auto_algos"),
    ({"auto_interval": 0}, "auto_interval"),
    ({"auto_link": (0.0, 1e9)}, "auto_link"),
    ({"hierarchy": "node"}, "runs flat"),
    ({"precondition": "adam"}, "runs flat"),
])
def test_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        pg_sparse.SparseState(algo="auto", **kwargs)


def test_choices_in_a_real_job(tmp_path):
    text = run_torchrun(WORKER, 2, tmp_path)  # 2 ranks on 2 cores
    for rank in range(2):
        for line in ("fast link dense", "slow link sparse", "switched to dense",
                     "measured alpha"):
            assert f"rank {rank}: {line}" in text, text[-3000:]
