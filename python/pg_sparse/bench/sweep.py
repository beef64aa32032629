"""The ddp suite across link rates: one network of namespaces, reshaped for
each rate, the rate measured, every method run in one job per rate.

    python -m pg_sparse.bench sweep --out OUT --hosts 4 \\
        --rates unshaped,10gbit,1gbit,100mbit -- --model mlp25m --steps 5

Writes sweep.json (every ddp row with ``link``, ``rate_bps`` measured and
``requested``), sweep.md and sweep.png: step time against the measured rate
per method, each sparse method's crossover with dense fp32 and bf16 marked.
The crossover comes from the alpha-beta fit of :mod:`pg_sparse.bench.model`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import common, model

BASELINES = ("gloo", "bf16")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``python -m pg_sparse.bench sweep``."""
    p.add_argument("--out", default="bench-out/sweep", help="output folder")
    p.add_argument("--hosts", type=int, default=4, help="namespaces, one rank each")
    p.add_argument("--rates", default="unshaped,10gbit,1gbit,100mbit",
                   help="link rates, comma-separated (tc syntax or 'unshaped')")
    p.add_argument("--launcher", choices=("torchrun", "mpirun"), default="torchrun")
    p.add_argument("--prefix", default="pgsw", help="namespace name prefix")
    p.add_argument("--timeout", type=float, default=1800.0,
                   help="seconds one rate's job may take")
    p.add_argument("--slow-steps", type=int, default=None,
                   help="--steps for rates below 1 Gbit/s (a dense step there takes seconds)")
    p.add_argument("ddp_args", nargs=argparse.REMAINDER,
                   help="after --: arguments of the ddp suite (model, steps, methods)")


def _ddp_args(args: argparse.Namespace, rate_bits: float | None) -> list[str]:
    extra = [a for a in args.ddp_args if a != "--"]
    if args.slow_steps and rate_bits is not None and rate_bits < 1e9:
        extra += ["--steps", str(args.slow_steps)]
    return extra


def _ddp_json(folder: Path) -> dict[str, Any]:
    found = sorted(folder.glob("*.json"))
    if not found:
        raise RuntimeError(f"the ddp suite wrote no JSON into {folder}")
    return common.read_json(found[0])


def run_sweep(args: argparse.Namespace) -> tuple[common.Context, list[dict[str, Any]]]:
    """Run the ddp suite at every rate; the rows of every run, tagged."""
    from .netns import Network, parse_rate

    out = common.out_dir(args.out)
    rows: list[dict[str, Any]] = []
    ctx: common.Context | None = None
    rates = [r.strip() for r in args.rates.split(",") if r.strip()]
    with Network(args.hosts, rate=None, prefix=args.prefix) as net:
        for rate in rates:
            bits = parse_rate(rate)
            net.shape(None if bits is None else rate)
            mbit = net.measure()
            print(f"[sweep] {rate}: requested {rate}, measured {mbit:.0f} Mbit/s", flush=True)
            tag = rate.replace("/", "_")
            res = net.torchrun if args.launcher == "torchrun" else net.mpirun
            result = res(["ddp", "--out", str(out / tag), *_ddp_args(args, bits)],
                         timeout=args.timeout, log_dir=out / tag / "logs")
            if not result.ok:
                raise RuntimeError(f"ddp suite at {rate} failed: {result.summary()}")
            data = _ddp_json(out / tag)
            ctx = common.Context(**data["context"])
            for r in data["rows"]:
                rows.append(dict(r, link=net.link(), requested=rate, rate_bps=mbit * 1e6,
                                 world_size=ctx.world_size))
    assert ctx is not None, "no rate given"
    ctx.link = "sweep: " + ", ".join(rates)
    return ctx, rows


def crossovers(fits: dict[str, model.Fit]) -> list[dict[str, Any]]:
    """Per method and baseline, the link rate below which the method's
    fitted step is faster (None: faster at every rate, or at none)."""
    out = []
    for m, f in fits.items():
        for base in BASELINES:
            b = fits.get(base)
            if b is None or m == base or m == "nocomm":
                continue
            # c_m + km 8Vm/B = c_b + kb 8Vb/B  =>  B = 8 (kb Vb - km Vm) / (c_m - c_b)
            wire = 8.0 * (b.kappa * b.bytes_p0 - f.kappa * f.bytes_p0)
            extra = f.c_s - b.c_s
            if extra <= 0:
                rate = None if wire >= 0 else 0.0
                verdict = "faster at every rate" if wire >= 0 else "slower at every rate"
            elif wire <= 0:
                rate, verdict = 0.0, "slower at every rate"
            else:
                rate = wire / extra
                verdict = f"faster below {rate / 1e9:.3g} Gbit/s"
            out.append({"method": m, "baseline": base, "crossover_bps": rate,
                        "verdict": verdict})
    return out


def _plot(rows: Sequence[dict[str, Any]], fits: dict[str, model.Fit],
          cross: Sequence[dict[str, Any]], path: Path, ctx: common.Context) -> Path:
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    colors: dict[str, Any] = {}
    for m, f in fits.items():
        pts = f.points
        line, = ax.plot([r / 1e9 for r, _ in pts], [t for _, t in pts], "o-",
                        label=m, lw=2.2 if m in BASELINES else 1.2)
        colors[m] = line.get_color()
    marker = {"gloo": ("x", 10), "bf16": ("+", 12)}
    for c in cross:
        rate = c["crossover_bps"]
        if rate and rate > 0:
            f = fits[c["method"]]
            shape, size = marker[c["baseline"]]
            ax.plot([rate / 1e9], [f.step(f.p0, rate, 0.0)], shape, ms=size,
                    color=colors[c["method"]])
    common.log_axes(ax, "link rate, measured (Gbit/s)", "DDP step time, median (s)",
                    "step time vs bandwidth (x: crossover with dense fp32, +: with bf16)")
    return common.save_figure(fig, path, ctx)


def write_outputs(out: Path, ctx: common.Context, rows: list[dict[str, Any]]) -> None:
    """sweep.json, sweep.md and sweep.png from tagged ddp rows (one model)."""
    models = {r.get("model") for r in rows}
    if len(models) > 1:
        raise ValueError(f"a sweep fits one model at a time, got {sorted(map(str, models))}")
    fits = model.fit(rows)
    cross = crossovers(fits)
    common.write_json(out / "sweep.json", ctx, rows, crossovers=cross)
    table = [dict(r, step_ms=1e3 * r["step_s_median"], gbps=r["rate_bps"] / 1e9) for r in rows]
    common.write_markdown(out / "sweep.md", "DDP step time across link rates", ctx, [
        common.markdown_table(table, ["model", "requested", "gbps", "method", "step_ms",
                                      "bytes_per_rank"],
                              ["model", "link", "measured Gbit/s", "method",
                               "step ms (median)", "bytes per rank"]),
        "\nCrossovers (alpha-beta fit of these points):\n",
        common.markdown_table(cross, ["method", "baseline", "verdict"]),
    ])
    _plot(rows, fits, cross, out / "sweep.png", ctx)


def main(args: argparse.Namespace) -> int:
    """Run the sweep and write its outputs."""
    ctx, rows = run_sweep(args)
    write_outputs(common.out_dir(args.out), ctx, rows)
    print(ctx.line())
    return 0
