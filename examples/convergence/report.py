"""Tables and plots of the convergence runs that ``train.py`` wrote.

    python report.py --data DIR --out DIR

For every TASK.json in ``--data``: ``TASK.png`` (the test metric against
steps, against bytes sent per rank and against wall-clock training time, all
methods on one figure, mean over seeds with the min-max band) and a markdown
table in ``results.md``: final metric (mean +- std over seeds), gap to dense,
steps to reach dense's final metric, bytes per step, achieved density, and
the training wall-clock to reach the same seed's dense final metric and to
within 1% of it (median over seeds, and the median ratio to the time dense
took to it).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any


def load(data: Path) -> dict[str, dict[str, Any]]:
    """Every task's document, keyed by task (runs of TASK-*.json merged)."""
    docs: dict[str, dict[str, Any]] = {}
    for p in sorted(data.glob("*.json")):
        doc = json.loads(p.read_text())
        machine = doc["context"].get("machine", "?")
        if doc["task"] in docs:
            docs[doc["task"]]["runs"] += doc["runs"]
        else:
            docs[doc["task"]] = doc
            doc["machines"] = {}
        machines = docs[doc["task"]]["machines"]
        machines[machine] = machines.get(machine, 0) + len(doc["runs"])
    return docs


def by_method(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Runs grouped by method, in first-seen order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in doc["runs"]:
        out.setdefault(r["method"], []).append(r)
    return out


def better(metric: str, a: float, b: float) -> bool:
    """``a`` at least as good as ``b``."""
    return a >= b if metric == "accuracy" else a <= b


def steps_to(run: dict[str, Any], target: float, metric: str) -> int | None:
    """First evaluated step at which ``run`` reaches ``target``."""
    for s, m in zip(run["curve"]["step"], run["curve"]["metric"]):
        if better(metric, m, target):
            return int(s)
    return None


def seconds_to(run: dict[str, Any], target: float, metric: str) -> float | None:
    """Training wall-clock (the ranks' mean summed step times, evaluation
    left out) at the first evaluation at which ``run`` reaches ``target``."""
    for s, m in zip(run["curve"]["seconds"], run["curve"]["metric"]):
        if better(metric, m, target):
            return float(s)
    return None


def within(target: float, metric: str, frac: float = 0.01) -> float:
    """The metric ``frac`` (relative) worse than ``target``."""
    return target * (1.0 - frac) if metric == "accuracy" else target * (1.0 + frac)


def _times(runs: list[dict[str, Any]], dense_of: dict[int, dict[str, Any]], metric: str,
           frac: float) -> tuple[list[float | None], list[float]]:
    """Each run's seconds to reach its own seed's dense final metric (made
    ``frac`` worse), and the ratio to the seconds dense took to it."""
    secs, ratios = [], []
    for r in runs:
        dense = dense_of.get(r["seed"])
        if dense is None:
            secs.append(None)
            continue
        goal = within(dense["final"], metric, frac)
        t, ref = seconds_to(r, goal, metric), seconds_to(dense, goal, metric)
        secs.append(t)
        if t is not None and ref:
            ratios.append(t / ref)
    return secs, ratios


def _fmt_seconds(values: list[float | None], ratios: list[float]) -> str:
    hit = [v for v in values if v is not None]
    if not hit:
        return "not reached"
    text = f"{statistics.median(hit):.0f}" + (
        f" ({statistics.median(ratios):.2f}x)" if ratios else "")
    return text if len(hit) == len(values) else f"{text}, {len(hit)}/{len(values)} seeds"


def _fmt_steps(values: list[int | None]) -> str:
    hit = [v for v in values if v is not None]
    if not hit:
        return "not reached"
    text = f"{statistics.median(hit):.0f}"
    return text if len(hit) == len(values) else f"{text} ({len(hit)}/{len(values)} seeds)"


def table(doc: dict[str, Any]) -> tuple[list[dict[str, Any]], float]:
    """One row per method and dense's mean final metric."""
    metric = doc["metric"]
    groups = by_method(doc)
    dense = [r["final"] for r in groups.get("dense", [])]
    target = statistics.mean(dense) if dense else math.nan
    dense_of = {r["seed"]: r for r in groups.get("dense", [])}
    rows = []
    for method, runs in groups.items():
        finals = [r["final"] for r in runs]
        mean = statistics.mean(finals)
        # Against the same seed's dense run where there is one (paired),
        # else against dense's mean.
        refs = [dense_of[r["seed"]]["final"] if r["seed"] in dense_of else target
                for r in runs]
        if metric == "accuracy":
            gap = f"{statistics.mean(f - t for f, t in zip(finals, refs)):+.2f} pt"
        else:  # and in validation loss (nats), the measure
            ppl = statistics.mean(f / t - 1 for f, t in zip(finals, refs))
            loss = statistics.mean(math.log(f) / math.log(t) - 1 for f, t in zip(finals, refs))
            gap = f"{100 * ppl:+.1f}% (loss {100 * loss:+.1f}%)"
        dens = [r["achieved_density"] for r in runs if r.get("achieved_density") is not None]
        rows.append({
            "method": method, "seeds": len(runs), "mean": mean,
            "std": statistics.stdev(finals) if len(finals) > 1 else 0.0,
            "min": min(finals), "max": max(finals), "gap": gap,
            "steps_to_dense": _fmt_steps([steps_to(r, target, metric) for r in runs]),
            "s_to_dense": _fmt_seconds(*_times(runs, dense_of, metric, 0.0)),
            "s_to_near": _fmt_seconds(*_times(runs, dense_of, metric, 0.01)),
            "bytes_per_step": statistics.mean(r["bytes_per_step"] for r in runs),
            "density": statistics.mean(dens) if dens else None,
            "step_ms": 1e3 * statistics.median(r["step_s_median"] for r in runs),
            "train_s": statistics.mean(r["train_s"] for r in runs),
        })
    return rows, target


def markdown(doc: dict[str, Any]) -> str:
    rows, target = table(doc)
    metric = doc["metric"]
    unit = "%" if metric == "accuracy" else ""
    r = doc["recipe"]
    ctx = doc["context"]
    head = (f"### {doc['task']}\n\n{doc['params']:,} parameters; {r['optimizer']} "
            f"lr {r['lr']}, batch {r['batch']} per rank x {ctx['world_size']} ranks, "
            f"{r['steps']} steps, dense warm-up {doc['warmup']} steps for the compressed "
            f"methods. Test {metric} (dense's final: {target:.3f}{unit}). "
            f"Link: {ctx['link']}" + (f"; {ctx['note']}" if ctx.get("note") else "") +
            ".\n\n")
    if len(doc.get("machines", {})) > 1:
        head += ("Runs from several machines (step times compare only within one): " +
                 "; ".join(f"{m}: {n} runs" for m, n in doc["machines"].items()) + ".\n\n")
    lines = [f"| method | seeds | final {metric} (mean +- std) | min..max | vs dense | "
             f"steps to dense's final | bytes/step/rank | achieved density | "
             f"step ms (median) | train s | s to its seed's dense final (x dense) | "
             f"s to within 1% of it (x dense) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for x in rows:
        d = "-" if x["density"] is None else f"{x['density']:.4f}"
        lines.append(
            f"| {x['method']} | {x['seeds']} | {x['mean']:.3f} +- {x['std']:.3f} | "
            f"{x['min']:.2f}..{x['max']:.2f} | {x['gap']} | {x['steps_to_dense']} | "
            f"{x['bytes_per_step']:,.0f} | {d} | {x['step_ms']:.1f} | {x['train_s']:.1f} | "
            f"{x['s_to_dense']} | {x['s_to_near']} |")
    return head + "\n".join(lines) + "\n"


def plot(doc: dict[str, Any], path: Path, time_axis: bool = True) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    groups = by_method(doc)
    xs = (("step", "training step", False), ("bytes", "bytes sent per rank", True),
          ("seconds", "wall-clock training time (s)", False))[:3 if time_axis else 2]
    fig, axes = plt.subplots(1, len(xs), figsize=(6 * len(xs), 5.5))
    styles = {"dense": ("k", "-", 2.4), "bf16": ("0.45", "-", 2.0),
              "powersgd": ("tab:brown", "-", 2.0)}
    colors = {"oktopk": "tab:blue", "topka": "tab:orange", "topkdsa": "tab:green",
              "gtopk": "tab:red", "gaussiank": "tab:purple"}
    extra = iter(["tab:cyan", "tab:olive", "tab:pink", "tab:gray"])
    for m in groups:
        if m in styles:
            continue
        head, _, dens = m.partition("@")
        if head not in colors:  # a variant (flags after +): a colour of its own
            colors[head] = next(extra, "tab:gray")
        ls = "-" if dens == "0.01" else "--"
        styles[m] = (colors[head], ls, 2.2 if "+" in head else 1.5)
    for ax, (key, label, logx) in zip(axes, xs):
        for m, runs in groups.items():
            n = min(len(r["curve"]["metric"]) for r in runs)
            y = np.array([r["curve"]["metric"][:n] for r in runs])
            x = np.array([r["curve"][key][:n] for r in runs]).mean(0)
            color, ls, lw = styles[m]
            ax.plot(x, y.mean(0), ls, color=color, lw=lw, label=m)
            if len(runs) > 1:
                ax.fill_between(x, y.min(0), y.max(0), color=color, alpha=0.08)
        if logx:
            ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel(f"test {doc['metric']}")
        ax.grid(alpha=0.3)
        if doc["metric"] == "perplexity":
            ax.set_yscale("log")
        else:
            top = max(max(r["curve"]["metric"]) for r in doc["runs"])
            ax.set_ylim(max(0.0, top - 25), top + 1)
    axes[0].legend(fontsize=7, ncol=2)
    ctx = doc["context"]
    machines = "; ".join(doc.get("machines") or [ctx["machine"]])
    note = f"; {ctx['note']}" if ctx.get("note") else ""
    fig.suptitle(f"{doc['task']}: {ctx['world_size']} ranks, {ctx['link']}; "
                 f"{machines}{note}; mean of seeds, band min..max", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="folder with TASK.json files")
    p.add_argument("--out", required=True, help="folder for results.md and TASK.png")
    p.add_argument("--no-time", action="store_true",
                   help="no wall-clock panel (runs from machines whose times differ)")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    docs = load(Path(args.data))
    parts = []
    for task in ("digits", "mnist1d", "lstm", "gpt", *sorted(docs)):
        if task in docs:
            doc = docs.pop(task)
            plot(doc, out / f"{task}.png", time_axis=not args.no_time)
            parts.append(markdown(doc) + f"\n![{task}]({task}.png)\n")
    (out / "results.md").write_text("\n".join(parts))
    print(f"wrote {out / 'results.md'} and {len(parts)} figure(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
