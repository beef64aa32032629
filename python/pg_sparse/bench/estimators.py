"""``estimators`` suite: GaussianK's selection with each threshold estimator
(``SparseState(estimator=...)``) against the exact radix select and
``torch.topk``, on gradient-like heavy-tailed data.

Per bucket size n and estimator, one world-size-1 ``"sparse"`` group and one
GaussianK bucket at ``--density``; each timed call adds the same data to the
residual, picks by the estimator's guess (corrected toward [k/2, 2k], then
exact), and compacts. Reported: the core's own select-phase time (accumulate,
threshold, compaction; ``stats()["time_select_s"]``, host time: on CUDA, work
the phase queued without waiting for it is counted in a later phase, and the
input's refill before each call is waited for before the call starts), the
whole call with a device synchronisation (the input's copy, the call at world
size 1, its gather and apply: the comparable figure on CUDA), the achieved
density against the target and how many corrections the guess needed; beside
them ``torch.topk(x.abs(), k)`` on the same data.

The select phase includes the add (r += g): where the first guess precedes
it, one fused pass adds and selects. So that the figure compares with
``torch.topk`` (which adds nothing), the same run also times the plain add
(the ops table's accumulate on the same data) and one read of the input (half
a device copy of x), and reports each estimator's selection beyond the add:
the select phase less the plain add, in reads of the input.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from .common import (
    context,
    heavy_tailed,
    markdown_table,
    out_dir,
    parse_sizes,
    time_calls,
    write_json,
    write_markdown,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The suite's options."""
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--sizes", default="25M", help="bucket sizes, e.g. 1M,25M")
    parser.add_argument("--density", type=float, default=0.01)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")


def main(args: argparse.Namespace) -> int:
    """Run the suite and write ``estimators.json`` and ``estimators.md``."""
    import torch
    import torch.distributed as dist

    import pg_sparse

    if not dist.is_initialized():
        dist.init_process_group("sparse", store=dist.HashStore(), rank=0, world_size=1)
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    ctx = context(device=args.device, transport="world size 1")
    rows: list[dict[str, Any]] = []
    for n in parse_sizes(args.sizes):
        g = heavy_tailed(n, seed=1).to(device)
        k = max(1, round(args.density * n))
        add_ms, read_ms = _add_and_read(g, args.repeats, sync)
        topk = time_calls(lambda g=g, k=k: torch.topk(g.abs(), k), args.repeats, sync=sync)
        rows.append({"n": n, "method": "torch.topk(|x|, k)", "select_ms": topk.median * 1e3,
                     "min_ms": topk.spread[0] * 1e3, "max_ms": topk.spread[1] * 1e3,
                     "call_ms": topk.median * 1e3, "achieved": 1.0, "corrections": "-",
                     "add_ms": 0.0, "read_ms": read_ms})
        for est in pg_sparse.estimators():
            rows.append({**_one(pg_sparse, g, n, k, est, args, sync),
                         "add_ms": add_ms, "read_ms": read_ms})
            print(_line(rows[-1]), flush=True)
    table = markdown_table(
        [{**r, "select_ms": f"{r['select_ms']:.2f}",
          "spread": f"{r['min_ms']:.2f}-{r['max_ms']:.2f}", "call_ms": f"{r['call_ms']:.2f}",
          "achieved": f"{r['achieved']:.3f}", **_beyond_add(r)} for r in rows],
        ["n", "method", "select_ms", "spread", "beyond_ms", "beyond_reads", "call_ms",
         "achieved", "corrections"],
        ["n", "method", "select ms (median)", "min-max", "beyond the add, ms",
         "beyond the add, reads of x", "whole call ms (median, synced)",
         "achieved / target density", "guess corrections per call"])
    out = out_dir(args.out)
    write_json(out / "estimators.json", ctx, rows, density=args.density)
    write_markdown(out / "estimators.md", "Threshold estimators: GaussianK's selection", ctx,
                   [table, "", __doc__.split("\n\n", 1)[1]])
    print(table)
    return 0


def _add_and_read(g: Any, repeats: int, sync: Any) -> tuple[float, float]:
    """Medians (ms) of the plain add r += g (the ops table's accumulate, as the
    select phase runs it) and of one read of g (half a copy of it)."""
    import torch

    from .. import _C

    r = torch.zeros_like(g)
    add = time_calls(lambda: _C._ops_accumulate(r, g, float("inf")), repeats, sync=sync)
    dst = torch.empty_like(g)
    copy = time_calls(lambda: dst.copy_(g), repeats, sync=sync)
    return add.median * 1e3, copy.median * 1e3 / 2


def _beyond_add(r: dict[str, Any]) -> dict[str, str]:
    """The select phase less the plain add, in ms and in reads of x."""
    beyond = r["select_ms"] - r["add_ms"]
    return {"beyond_ms": f"{beyond:.2f}", "beyond_reads": f"{beyond / r['read_ms']:.2f}"}


def _one(pg_sparse: Any, g: Any, n: int, k: int, est: str, args: argparse.Namespace,
         sync: Any) -> dict[str, Any]:
    """Time one estimator's selection (the core's select phase), the whole call
    (with ``sync`` after it, on CUDA) and its picks."""
    state = pg_sparse.SparseState(algo="gaussiank", density=args.density, warmup_steps=0,
                                  estimator=est)
    bucket = state.native_bucket(0, g)
    y = g.clone()
    picks, selects, corrections = [], [], []

    def call() -> None:
        y.copy_(g)
        if sync is not None:
            # The select phase's clock is the host's: without this wait it
            # would also count the refill above (a device copy, two reads of
            # x) still running when the call starts.
            sync()
        bucket.allreduce(y).wait()
        s = bucket.stats()
        picks.append(s["local_selected"] / k)
        selects.append(s["time_select_s"])
        corrections.append(s["estimate_corrections"])

    whole = time_calls(call, args.repeats, sync=sync)
    timed = selects[1:]  # the first call was time_calls' warm-up
    return {"n": n, "method": f"gaussiank, estimator={est}",
            "select_ms": statistics.median(timed) * 1e3, "min_ms": min(timed) * 1e3,
            "max_ms": max(timed) * 1e3, "call_ms": whole.median * 1e3,
            "achieved": statistics.median(picks[1:]),
            "corrections": ",".join(str(c) for c in corrections[1:])}


def _line(r: dict[str, Any]) -> str:
    b = _beyond_add(r)
    return (f"  n={r['n']:,} {r['method']:>34}: select {r['select_ms']:8.2f} ms "
            f"[{r['min_ms']:.2f}-{r['max_ms']:.2f}]  beyond add {b['beyond_ms']} ms "
            f"({b['beyond_reads']} reads)  call {r['call_ms']:8.2f} ms  "
            f"achieved {r['achieved']:.3f}  "
            f"corrections {r['corrections']}")
