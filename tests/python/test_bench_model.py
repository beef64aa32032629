"""The alpha-beta model recovers known parameters and writes its outputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pg_sparse.bench import model


def _rows(c: float, kappa: float, nbytes: float, method: str) -> list[dict]:
    rates = [0.1e9, 1e9, 10e9]
    return [{"method": method, "world_size": 4, "rate_bps": r, "bytes_per_rank": nbytes,
             "step_s_median": c + kappa * 8 * nbytes / r} for r in rates]


def test_fit_recovers_parameters() -> None:
    rows = _rows(0.5, 0.8, 150e6, "gloo") + _rows(0.9, 1.0, 3e6, "oktopk")
    fits = model.fit(rows)
    assert abs(fits["gloo"].c_s - 0.5) < 1e-9 and abs(fits["gloo"].kappa - 0.8) < 1e-9
    assert abs(fits["oktopk"].c_s - 0.9) < 1e-9 and abs(fits["oktopk"].kappa - 1.0) < 1e-9
    # Volume laws: a ring's bytes per rank grow as (P-1)/P, TopkA's as P-1.
    assert abs(fits["gloo"].volume(16) - 150e6 * (15 / 16) / (3 / 4)) < 1
    topka = model.fit(_rows(0.5, 1.0, 1e6, "topka"))["topka"]
    assert abs(topka.volume(16) - 1e6 * 15 / 3) < 1e-6


def test_cli_writes_outputs(tmp_path: Path) -> None:
    ctx = {"machine": "test", "cpus": 2, "card": "none", "torch": "x"}
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps({"context": ctx, "rows": _rows(0.5, 0.8, 150e6, "gloo")
                                 + _rows(0.9, 1.0, 3e6, "oktopk")}))
    out = tmp_path / "m"
    subprocess.run([sys.executable, "-m", "pg_sparse.bench", "model", str(sweep),
                    "--out", str(out), "--ranks", "16,64"], check=True, cwd=tmp_path)
    data = json.loads((out / "model.json").read_text())
    assert {r["P"] for r in data["rows"]} == {16, 64}
    # At 10 Gbit/s and P=16, the projection is c + kappa * 8V/B + rounds * alpha.
    g = model.Fit("gloo", 0.5, 0.8, 150e6, 4, [])
    want = 0.5 + 0.8 * 8 * g.volume(16) / 10e9 + 2 * 15 * 5e-6
    got = [r for r in data["rows"] if r["method"] == "gloo" and r["P"] == 16
           and r["rate_gbps"] == 10][0]["step_s"]
    assert abs(got - want) < 1e-12
    for f in ("model.md", "model_fit.png", "model_projection.png"):
        assert (out / f).stat().st_size > 0
