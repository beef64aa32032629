"""Where a threshold estimator's GaussianK call spends its device time: one
GPU, world size 1, torch.profiler over a few calls, one table per estimator of
the device operations (runs per call, microseconds per run) and of the CUDA
API calls (launches, copies, synchronisations per call).

    python3 cuda/bench/trace_estimator.py --n 100M --estimators dgc_sample exact

Writes ``trace_<estimator>.txt`` under ``--out`` and prints a summary line per
estimator (the same bucket call as ``python3 -m pg_sparse.bench estimators``).
With ``--timeline``, also ``timeline_<estimator>.txt``: the last call's host
API calls and device operations in time order, in microseconds from the
call's start (where the host waits and where the device idles), and the
core's select-phase time of each profiled call.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_hook import API_KINDS, device_ops  # noqa: E402
from pg_sparse.bench.common import heavy_tailed, parse_sizes  # noqa: E402

import pg_sparse  # noqa: E402,F401  (registers the backend)

TIMELINE_CATS = ("cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset")


def timeline(trace: Path, selects: list[tuple[float, int]]) -> str:
    """The last ``pg_sparse:sparse_allreduce`` range of a chrome trace: every
    host API call and device operation that starts inside it (or within
    200 us after it), in time order, microseconds from the range's start."""
    events = json.loads(trace.read_text())["traceEvents"]
    calls = [
        e for e in events if e.get("name") == "pg_sparse:sparse_allreduce" and e.get("ph") == "X"
    ]
    last = max(calls, key=lambda e: e["ts"])
    t0, t1 = last["ts"], last["ts"] + last["dur"] + 200
    rows = sorted(
        (
            e
            for e in events
            if e.get("ph") == "X" and e.get("cat") in TIMELINE_CATS and t0 <= e["ts"] <= t1
        ),
        key=lambda e: e["ts"],
    )
    lines = [
        "select phase per call (core's clock, us; corrections): "
        + ", ".join(f"{s * 1e6:.1f} ({c})" for s, c in selects),
        f"call range: {last['dur']:.1f} us",
        f"{'start':>9} {'dur':>8}  {'where':<6} name",
    ]
    for e in rows:
        where = "device" if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset") else "host"
        lines.append(f"{e['ts'] - t0:9.1f} {e['dur']:8.1f}  {where:<6} {e['name'][:90]}")
    return "\n".join(lines) + "\n"


def trace_one(
    g: torch.Tensor,
    est: str,
    density: float,
    calls: int,
    out: Path,
    with_timeline: bool = False,
    warmup: int = 3,
) -> str:
    """Profile ``calls`` GaussianK calls with estimator ``est`` on ``g``;
    write the tables and return a summary line."""
    from torch.profiler import ProfilerActivity, profile

    state = pg_sparse.SparseState(algo="gaussiank", density=density, warmup_steps=0, estimator=est)
    bucket = state.native_bucket(0, g)
    y = g.clone()

    selects: list[tuple[float, int]] = []

    def call() -> None:
        y.copy_(g)
        torch.cuda.synchronize()  # as the estimators suite: the refill waited for
        bucket.allreduce(y).wait()
        s = bucket.stats()
        selects.append((s["time_select_s"], s["estimate_corrections"]))

    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    events = prof.key_averages()
    api = {k: 0 for k in API_KINDS}
    for e in events:
        for kind, names in API_KINDS.items():
            if e.key in names:
                api[kind] += e.count
    table = device_ops(events, calls)
    (out / f"trace_{est}.txt").write_text(
        table + "\n" + events.table(sort_by="cpu_time_total", row_limit=30)
    )
    if with_timeline:
        chrome = out / f"chrome_{est}.json"
        prof.export_chrome_trace(str(chrome))
        (out / f"timeline_{est}.txt").write_text(timeline(chrome, selects[-calls:]))
    s = bucket.stats()
    per = ", ".join(f"{k} {v / calls:.1f}" for k, v in api.items())
    return (
        f"{est:>20}: select {s['time_select_s'] * 1e3:.3f} ms (last call), per call: {per}\n{table}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--n", default="100M")
    ap.add_argument("--density", type=float, default=0.01)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--estimators", nargs="+", default=["dgc_sample"])
    ap.add_argument("--warmup", type=int, default=3, help="calls before the profiled ones")
    ap.add_argument(
        "--timeline",
        action="store_true",
        help="also the last call's host and device events in time order",
    )
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dist.init_process_group("sparse", store=dist.HashStore(), rank=0, world_size=1)
    (n,) = parse_sizes(args.n)
    g = heavy_tailed(n, seed=1).cuda()
    for est in args.estimators:
        print(
            trace_one(g, est, args.density, args.calls, out, args.timeline, args.warmup), flush=True
        )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
