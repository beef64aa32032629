"""Where a threshold estimator's GaussianK call spends its device time: one
GPU, world size 1, torch.profiler over a few calls, one table per estimator of
the device operations (runs per call, microseconds per run) and of the CUDA
API calls (launches, copies, synchronisations per call).

    python3 cuda/bench/trace_estimator.py --n 100M --estimators dgc_sample exact

Writes ``trace_<estimator>.txt`` under ``--out`` and prints a summary line per
estimator (the same bucket call as ``python3 -m pg_sparse.bench estimators``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_hook import API_KINDS, device_ops  # noqa: E402
from pg_sparse.bench.common import heavy_tailed, parse_sizes  # noqa: E402

import pg_sparse  # noqa: E402,F401  (registers the backend)


def trace_one(g: torch.Tensor, est: str, density: float, calls: int, out: Path) -> str:
    """Profile ``calls`` GaussianK calls with estimator ``est`` on ``g``;
    write the tables and return a summary line."""
    from torch.profiler import ProfilerActivity, profile

    state = pg_sparse.SparseState(algo="gaussiank", density=density, warmup_steps=0, estimator=est)
    bucket = state.native_bucket(0, g)
    y = g.clone()

    def call() -> None:
        y.copy_(g)
        bucket.allreduce(y).wait()

    for _ in range(3):
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
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dist.init_process_group("sparse", store=dist.HashStore(), rank=0, world_size=1)
    (n,) = parse_sizes(args.n)
    g = heavy_tailed(n, seed=1).cuda()
    for est in args.estimators:
        print(trace_one(g, est, args.density, args.calls, out), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
