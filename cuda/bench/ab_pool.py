"""Pools the runs of ab_hook.sh: each round's difference between the Ok-Topk
hook and a baseline measured in the same round, median over every round of
every run of one tree, against NCCL DDP, the step without communication and
the C++ dense hook (the NCCL step drifts between runs, so one column alone
can mislead).

    python3 cuda/bench/ab_pool.py LOGS [--method oktopk_native]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

BASELINES = ("nccl", "compute", "dense_native")


def rounds(run: Path) -> list[dict[str, float]]:
    """Each round's median step (ms) per method, from one run's json."""
    rows = {r["method"]: r["round_medians_ms"]
            for r in json.loads(run.read_text())["rows"]}
    return [{m: v[k] for m, v in rows.items()} for k in range(len(rows["nccl"]))]


def pool(logs: Path, side: str, method: str) -> str:
    """One line for one tree ('old' or 'new'): pooled medians and per run."""
    runs = sorted(logs.glob(f"{side}[0-9]*/bench_hook.json"),
                  key=lambda p: int(p.parent.name[len(side):]))
    every: list[dict[str, float]] = []
    per_run = []
    for run in runs:
        rr = rounds(run)
        every += rr
        per_run.append(statistics.median(r[method] - r["nccl"] for r in rr))
    if not every:
        return f"{side}: no runs"
    cols = ", ".join(
        f"minus {b} {statistics.median(r[method] - r[b] for r in every):+.3f}"
        for b in BASELINES if b in every[0])
    runs_text = " ".join(f"{x:+.3f}" for x in per_run)
    return (f"{side}: {len(runs)} runs, {len(every)} rounds; {method} {cols} ms; "
            f"per run minus nccl: {runs_text}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", type=Path, help="ab_hook.sh's $OUT")
    ap.add_argument("--method", default="oktopk_native")
    args = ap.parse_args()
    for side in ("old", "new"):
        print(pool(args.logs, side, args.method))


if __name__ == "__main__":
    main()
