"""``kernels`` suite: the selection kernels of the C core against
``torch.topk`` and a streaming-pass floor.

Per bucket size n (k = max(1, round(density * n))), on the same data and
device, through the very ops table the algorithms run (``pgs_ops_cpu()`` or
the CUDA table on the current stream, bound as ``pg_sparse._C._ops_*``):

- ``accumulate``: the fused selection pass ``r += g`` with the count of
  ``|r| >= thr`` (Ok-Topk's reused-threshold check);
- ``kth_abs``: the exact k-th largest ``|x|`` (radix select);
- ``compact``: the (index, value) pairs above the threshold, in index order;
- ``torch.topk(x.abs(), k)``: what a PyTorch implementation would call;
- the floor: one pass reading g and r and writing r at memory speed, from
  torch's ``r.add_(g)`` (12 bytes a value) and ``dst.copy_(src)`` (8 bytes a
  value, scaled to 12); the faster of the two is the floor.

Times are medians of ``--repeats`` calls, reported as ns per value and as a
ratio to the floor. Every row also carries the results of one call (the
threshold, the counts, the selected indices when few) and the suite's own
agreement checks, so a test can hold them against an independent oracle.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import (
    Context,
    context,
    heavy_tailed,
    markdown_table,
    out_dir,
    parse_sizes,
    pyplot,
    save_figure,
    time_calls,
    write_json,
    write_markdown,
)

DEFAULT_SIZES = "1M,4M,16M,64M,128M"
# Rows keep the compacted indices when at most this many are selected.
RECORD_LIMIT = 4096
# Bytes a value of one accumulate pass moves: read g and r, write r.
PASS_BYTES = 12
KERNELS = ("accumulate", "kth_abs", "compact", "topk")
LABELS = {"accumulate": "accumulate (r += g, count |r| >= thr)",
          "kth_abs": "kth_abs (radix select)",
          "compact": "compact (pairs above thr)",
          "topk": "torch.topk(x.abs(), k)",
          "floor": "floor: one pass at memory speed"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The suite's command-line options."""
    parser.add_argument("--out", required=True, help="folder for the JSON, .md and .png")
    parser.add_argument("--device", default="cpu",
                        help="cpu or cuda[:i] (the CUDA ops table on the current stream)")
    parser.add_argument("--sizes", type=parse_sizes, default=parse_sizes(DEFAULT_SIZES),
                        help=f"bucket sizes n, comma-separated, K/M/G suffixes "
                             f"(default {DEFAULT_SIZES})")
    parser.add_argument("--density", type=float, default=0.01,
                        help="k = max(1, round(density * n)) (default 0.01)")
    parser.add_argument("--repeats", type=int, default=10,
                        help="timed calls per kernel and size (default 10)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed calls first (default 1)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads on CPU (default 1: the C core's CPU "
                             "ops are single-threaded, so the floor is one core's too; "
                             "0 keeps torch's default)")
    parser.add_argument("--seed", type=int, default=0, help="data seed (default 0)")


def make_data(n: int, seed: int = 0) -> tuple[Any, Any]:
    """Gradient-like ``(g, r)`` on the CPU, float32, deterministic in ``seed``
    (:func:`~pg_sparse.bench.common.heavy_tailed`): the residual r about three
    times wider than the gradient g, as error feedback leaves it."""
    return heavy_tailed(n, 2 * seed, 1e-2), heavy_tailed(n, 2 * seed + 1, 3e-2)


def k_of(n: int, density: float) -> int:
    """The selection size every algorithm uses: max(1, round(density * n))."""
    return max(1, round(density * n))


def _row(n: int, density: float, device: str, repeats: int, warmup: int,
         seed: int) -> dict[str, Any]:
    import torch

    from .. import _C

    dev = torch.device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else None
    k = k_of(n, density)
    g_cpu, r_cpu = make_data(n, seed)
    g, r0 = g_cpu.to(dev), r_cpu.to(dev)
    del g_cpu, r_cpu
    x = r0 + g  # the accumulated gradient every selection runs on

    # One call of each, kept for the checks.
    thr, n_gt = _C._ops_kth_abs(x, k)
    topk_vals = torch.topk(x.abs(), k).values
    topk_kth = float(topk_vals[-1])
    r = r0.clone()
    acc_count = int(_C._ops_accumulate(r, g, thr))
    acc_exact = bool(torch.equal(r, x))
    idx, val = _C._ops_compact(x, thr, k - n_gt, k)
    checks = {
        "kth_equals_topk": thr == topk_kth,
        "n_gt_below_k": n_gt < k,
        "accumulate_sum_exact": acc_exact,
        "accumulate_count_covers_k": acc_count >= k,
        "compact_count_is_k": int(idx.numel()) == k,
        "compact_values_match": bool(torch.equal(val, x[idx.long()])),
        "compact_sorted": bool(idx.numel() < 2 or bool((idx[1:] > idx[:-1]).all())),
    }
    row: dict[str, Any] = {
        "n": n, "k": k, "density": density, "device": str(dev), "seed": seed,
        "kth_thr": thr, "kth_n_gt": int(n_gt), "topk_kth": topk_kth,
        "accumulate_thr": thr, "accumulate_count": acc_count,
        "compact_count": int(idx.numel()),
        "compact_idx_sum": int(idx.long().sum()),
        "compact_abs_sum": float(val.double().abs().sum()),
        "checks": checks, "ok": all(checks.values()),
    }
    if idx.numel() <= RECORD_LIMIT:
        row["compact_idx"] = idx.cpu().tolist()
    del topk_vals, idx, val

    # Timings. accumulate and the add floor update r in place; over a few
    # calls r grows by a few g, harmless to both.
    dst = torch.empty_like(x)
    timed = {
        "accumulate": lambda: _C._ops_accumulate(r, g, thr),
        "kth_abs": lambda: _C._ops_kth_abs(x, k),
        "compact": lambda: _C._ops_compact(x, thr, k - n_gt, k),
        "topk": lambda: torch.topk(x.abs(), k),
        "stream_add": lambda: r.add_(g),
        "stream_copy": lambda: dst.copy_(x),
    }
    timings = {name: time_calls(fn, repeats, warmup, sync) for name, fn in timed.items()}
    add_s = timings["stream_add"].median
    copy_s = timings["stream_copy"].median
    floor_s = min(add_s, copy_s * PASS_BYTES / 8)
    row["floor_s"] = floor_s
    row["floor_ns_per_value"] = floor_s / n * 1e9
    row["floor_gbps"] = PASS_BYTES * n / floor_s / 1e9
    row["stream_add_gbps"] = PASS_BYTES * n / add_s / 1e9
    row["stream_copy_gbps"] = 8 * n / copy_s / 1e9
    row["accumulate_gbps"] = PASS_BYTES * n / timings["accumulate"].median / 1e9
    for name, t in timings.items():
        row[f"{name}_timing"] = t.as_dict()
        row[f"{name}_ns_per_value"] = t.median / n * 1e9
        row[f"{name}_vs_floor"] = t.median / floor_s
    row["topk_vs_kth_abs"] = timings["topk"].median / timings["kth_abs"].median
    return row


def _plot(rows: list[dict[str, Any]], ctx: Context, out: Any) -> list[Any]:
    plt = pyplot()
    paths = []
    ns = [r["n"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in (*KERNELS, "floor"):
        ax.plot(ns, [r[f"{name}_ns_per_value"] for r in rows], marker="o",
                linestyle="--" if name in ("topk", "floor") else "-", label=LABELS[name])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("bucket size n (values)")
    ax.set_ylabel("ns per value (median)")
    ax.set_title(f"Selection kernels on {rows[0]['device']}, density {rows[0]['density']:g}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    paths.append(save_figure(fig, out / "kernels_ns_per_value.png", ctx))

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in KERNELS:
        ax.plot(ns, [r[f"{name}_vs_floor"] for r in rows], marker="o",
                linestyle="--" if name == "topk" else "-", label=LABELS[name])
    ax.axhline(1.0, color="0.3", linewidth=0.8, label=LABELS["floor"])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("bucket size n (values)")
    ax.set_ylabel("time / floor")
    ax.set_title("Selection kernels relative to one streaming pass")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    paths.append(save_figure(fig, out / "kernels_vs_floor.png", ctx))
    return paths


def main(args: argparse.Namespace) -> int:
    """Run the suite; returns 0 when every row's checks hold, else 1."""
    import torch

    device = str(args.device)
    if device.startswith("cuda") and not torch.cuda.is_available():
        print("kernels: --device cuda but torch sees no CUDA device", file=sys.stderr)
        return 2
    if not 0.0 < args.density <= 1.0:
        print(f"kernels: --density must be in (0, 1], got {args.density}", file=sys.stderr)
        return 2
    if args.repeats < 1:
        print("kernels: --repeats must be >= 1", file=sys.stderr)
        return 2
    if device == "cpu" and args.threads > 0:
        torch.set_num_threads(args.threads)
    ctx = context(device=device,
                  note=f"device {device}; torch threads {torch.get_num_threads()}")
    print(ctx.line(), flush=True)
    out = out_dir(args.out)
    rows = []
    for n in args.sizes:
        row = _row(n, args.density, device, args.repeats, args.warmup, args.seed)
        rows.append(row)
        bad = [c for c, ok in row["checks"].items() if not ok]
        print(f"n={n:>11,} k={row['k']:>9,}  ns/value: "
              + "  ".join(f"{name} {row[f'{name}_ns_per_value']:.3g}"
                          for name in (*KERNELS, "floor"))
              + f"  floor {row['floor_gbps']:.3g} GB/s"
              + (f"  FAILED: {', '.join(bad)}" if bad else ""), flush=True)
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    settings = {"sizes": list(args.sizes), "density": args.density, "device": device,
                "repeats": args.repeats, "warmup": args.warmup, "threads": torch.get_num_threads(),
                "seed": args.seed}
    write_json(out / "kernels.json", ctx, rows, suite="kernels", settings=settings)
    cols = ["n", "k", *(f"{k}_ns_per_value" for k in (*KERNELS, "floor")),
            *(f"{k}_vs_floor" for k in KERNELS), "floor_gbps", "ok"]
    heads = ["n", "k", "accumulate ns/v", "kth_abs ns/v", "compact ns/v", "topk ns/v",
             "floor ns/v", "accumulate/floor", "kth_abs/floor", "compact/floor",
             "topk/floor", "floor GB/s", "checks"]
    write_markdown(out / "kernels.md", "Selection kernels", ctx, [
        f"Device {device}, density {args.density:g}, median of {args.repeats} calls. "
        "Floor: one pass reading g and r and writing r (12 bytes a value) at the speed "
        "of torch's `r.add_(g)` or `dst.copy_(src)`, whichever is faster.",
        "", markdown_table(rows, cols, heads)])
    _plot(rows, ctx, out)
    print(f"kernels: wrote {out}/kernels.json, kernels.md, kernels_*.png", flush=True)
    return 0 if all(r["ok"] for r in rows) else 1
