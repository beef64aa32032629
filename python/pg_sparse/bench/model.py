"""An alpha-beta model of a DDP step, fitted to measured step times.

For each method m the sweep measures the step time T at P0 ranks over links
of several rates B. The model is

    T_m(P, B) = c_m + kappa_m * V_m(P) / B + R_m(P) * alpha

- ``c_m``: the part that does not depend on the link (forward, backward,
  optimizer and the method's own compute: selection, compression), fitted;
- ``kappa_m``: how much of the wire time shows in the step (below 1 when DDP
  overlaps it with the backward pass), fitted;
- ``V_m(P)``: bytes each rank sends per step, measured at P0 and carried to P
  by the method's volume law (below);
- ``R_m(P)``: sequential message rounds per step, and ``alpha`` the per-message
  latency (``--alpha-us``: the namespaces here have no delay to measure).

c_m is this machine's compute: projections say what the link does to these
ranks' step, not what another machine would compute.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import common

# Volume laws: V(P) / V(P0) for the methods' algorithms.


def _ring(p: int) -> float:
    return (p - 1) / p


def _log2(p: int) -> float:
    return math.log2(p) if p > 1 else 0.0


# (volume factor as a function of P, message rounds as a function of P)
LAWS: dict[str, tuple[Callable[[int], float], Callable[[int], float]]] = {
    # ring allreduce: reduce-scatter + allgather, 2(P-1) steps
    "gloo": (_ring, lambda p: 2 * (p - 1)),
    "dense": (_ring, lambda p: 2 * (p - 1)),
    "bf16": (_ring, lambda p: 2 * (p - 1)),
    # two ring allreduces (P and Q) per step
    "powersgd": (_ring, lambda p: 4 * (p - 1)),
    # split-and-reduce exchange + balanced allgather: 2k..6k (P-1)/P words
    "oktopk": (_ring, lambda p: 2 * (p - 1) + 3 * _log2(p)),
    # allgather of every rank's k pairs: (P-1) blocks
    "topka": (lambda p: float(p - 1), lambda p: 2 * (p - 1)),
    "gaussiank": (lambda p: float(p - 1), lambda p: 2 * (p - 1)),
    # Ok-Topk's phase 1, then an allgather of the reduced union
    "topkdsa": (lambda p: float(p - 1), lambda p: 2 * (p - 1) + 2 * _log2(p)),
    # recursive doubling: log2 P rounds of 2k words, then k values allreduced
    "gtopk": (_log2, lambda p: 2 * _log2(p) + 2 * (p - 1)),
    "nocomm": (lambda p: 0.0, lambda p: 0.0),
}


@dataclass
class Fit:
    """One method's fitted model."""

    method: str
    c_s: float
    kappa: float
    bytes_p0: float
    p0: int
    points: list[tuple[float, float]]  # (rate bit/s, measured step s)

    def volume(self, p: int) -> float:
        """Bytes per rank per step at P ranks."""
        law = LAWS.get(self.method, LAWS["dense"])[0]
        base = law(self.p0)
        return self.bytes_p0 * (law(p) / base if base > 0 else 0.0)

    def step(self, p: int, rate_bps: float, alpha_s: float) -> float:
        """Projected step time in seconds at P ranks over a link of rate_bps."""
        rounds = LAWS.get(self.method, LAWS["dense"])[1](p)
        return self.c_s + self.kappa * 8.0 * self.volume(p) / rate_bps + rounds * alpha_s


def _least_squares(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(intercept, slope) of y = a + b x, slope kept >= 0 (a link never makes
    a step faster); one point or no spread in x gives slope 1."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if n < 2 or sxx == 0.0:
        return my - mx, 1.0
    b = max(0.0, sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx)
    return my - b * mx, b


def fit(rows: Sequence[dict[str, Any]]) -> dict[str, Fit]:
    """Fit every method of sweep rows. Each row needs ``method``,
    ``step_s_median``, ``bytes_per_rank``, ``world_size`` and ``rate_bps``
    (the measured link rate)."""
    by_method: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("rate_bps"):
            by_method.setdefault(r["method"], []).append(r)
    fits = {}
    for method, rs in by_method.items():
        v = max(float(r["bytes_per_rank"] or 0.0) for r in rs)
        xs = [8.0 * v / float(r["rate_bps"]) for r in rs]
        ys = [float(r["step_s_median"]) for r in rs]
        c, kappa = _least_squares(xs, ys)
        fits[method] = Fit(method, c, kappa, v, int(rs[0]["world_size"]),
                           sorted((float(r["rate_bps"]), float(r["step_s_median"]))
                                  for r in rs))
    return fits


def project(fits: dict[str, Fit], ps: Sequence[int], rates_gbps: Sequence[float],
            alpha_s: float) -> list[dict[str, Any]]:
    """Projected step time of every method at every (P, rate)."""
    out = []
    for f in fits.values():
        for p in ps:
            for g in rates_gbps:
                out.append({"method": f.method, "P": p, "rate_gbps": g,
                            "step_s": f.step(p, g * 1e9, alpha_s),
                            "bytes_per_rank": f.volume(p)})
    return out


def _plot_fit(fits: dict[str, Fit], alpha_s: float, path: Path,
              ctx: common.Context) -> Path:
    """Measured points and the fitted line against link rate, at P0."""
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for f in fits.values():
        rates = [r for r, _ in f.points]
        lo, hi = min(rates) / 2, max(rates) * 2
        grid = [lo * (hi / lo) ** (i / 40) for i in range(41)]
        line, = ax.plot([g / 1e9 for g in grid], [f.step(f.p0, g, alpha_s) for g in grid],
                        lw=1)
        ax.plot([r / 1e9 for r in rates], [t for _, t in f.points], "o",
                color=line.get_color(), label=f.method)
    common.log_axes(ax, "link rate (Gbit/s, measured)", "step time (s)",
                    "alpha-beta fit (lines) vs measured (points)")
    return common.save_figure(fig, path, ctx)


def _plot_projection(fits: dict[str, Fit], ps: Sequence[int],
                     rates_gbps: Sequence[float], alpha_s: float, path: Path,
                     ctx: common.Context) -> Path:
    """Projected step time against P, one panel per link rate."""
    plt = common.pyplot()
    fig, axes = plt.subplots(1, len(rates_gbps), figsize=(4 * len(rates_gbps), 4),
                             sharey=True, squeeze=False)
    for ax, g in zip(axes[0], rates_gbps):
        for f in fits.values():
            ax.plot(ps, [f.step(p, g * 1e9, alpha_s) for p in ps], label=f.method)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{g:g} Gbit/s (model)")
        ax.set_xlabel("ranks P")
    axes[0][0].set_ylabel("projected step time (s)")
    axes[0][-1].legend(fontsize=7)
    return common.save_figure(fig, path, ctx)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``python -m pg_sparse.bench model``."""
    p.add_argument("sweep_json", help="the sweep suite's sweep.json")
    p.add_argument("--out", default="bench-out/model", help="output folder")
    p.add_argument("--alpha-us", type=float, default=5.0,
                   help="per-message latency for the projection (microseconds)")
    p.add_argument("--ranks", default="16,64,256,1024", help="P to project to")
    p.add_argument("--rates-gbps", default="10,25,100,400",
                   help="link rates to project to (Gbit/s)")


def main(args: argparse.Namespace) -> int:
    """Fit, project, write model.json, model.md and two plots."""
    data = common.read_json(args.sweep_json)
    ctx = common.Context(**data["context"])
    ctx.note = (ctx.note + "; " if ctx.note else "") + "alpha-beta model"
    fits = fit(data["rows"])
    if not fits:
        raise SystemExit("pg_sparse.bench model: no rows with a measured rate_bps")
    ps = [int(x) for x in args.ranks.split(",")]
    rates = [float(x) for x in args.rates_gbps.split(",")]
    alpha = args.alpha_us * 1e-6
    rows = project(fits, ps, rates, alpha)
    out = common.out_dir(args.out)
    fitted = [{"method": f.method, "c_s": f.c_s, "kappa": f.kappa,
               "bytes_per_rank_p0": f.bytes_p0, "p0": f.p0} for f in fits.values()]
    common.write_json(out / "model.json", ctx, rows, fits=fitted, alpha_s=alpha)
    table = [dict(r, step_ms=1e3 * r["step_s"]) for r in rows]
    common.write_markdown(out / "model.md", "alpha-beta model", ctx, [
        "Fitted per method (c: link-independent part; kappa: share of wire time "
        "that shows in the step):\n",
        common.markdown_table(fitted, ["method", "c_s", "kappa", "bytes_per_rank_p0", "p0"]),
        f"\nProjected step time (alpha = {args.alpha_us:g} us per message round):\n",
        common.markdown_table(table, ["method", "P", "rate_gbps", "step_ms", "bytes_per_rank"]),
    ])
    _plot_fit(fits, alpha, out / "model_fit.png", ctx)
    _plot_projection(fits, ps, rates, alpha, out / "model_projection.png", ctx)
    print(ctx.line())
    for f in fitted:
        print(f"{f['method']:>10}: c = {1e3 * f['c_s']:.1f} ms, kappa = {f['kappa']:.2f}")
    return 0
