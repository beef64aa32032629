"""What a comm hook adds to a DDP step on one GPU, against NCCL DDP in the
same run.

The model of the fast-path issue: 6 x Linear(2048, 2048) (25.2M parameters),
batch 256, SGD. Every method trains the same model from the same weights;
the step is forward + backward (with DDP's communication) + optimizer, timed
with the device synchronised, median of --steps after --warmup. Methods:
``nccl`` (DDP on an NCCL group, no hook: the baseline), ``compute`` (the
model without DDP: no communication at all), torch's ``bf16`` and
``powersgd`` (rank 4) hooks on NCCL, every pg_sparse hook on the "sparse"
group, and some of them registered through
``pg_sparse.hooks.register_comm_hook`` (``*_native``: steady calls in C++).
Two floors of any Python comm hook: ``py_allreduce`` (torch's
``allreduce_hook`` on NCCL: DDP's own allreduce, called from Python) and
``py_noop`` (a Python hook that returns the bucket in a completed future: no
communication, the average at world size 1). For Ok-Topk a torch.profiler
pass counts what one step launches and how often the host waits for the
device.

    torchrun --nproc_per_node=1 cuda/bench/bench_hook.py --out $OUT
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import pg_sparse

SPARSE = ("dense", "oktopk", "topka", "topkdsa", "gtopk", "gaussiank")
# The same hooks through pg_sparse.hooks.register_comm_hook (steady calls in C++).
NATIVE = ("dense_native", "oktopk_native", "topka_native", "gtopk_native")
TORCH_HOOKS = ("nccl", "py_noop", "py_allreduce", "bf16", "powersgd")


def noop_hook(state, bucket):  # type: ignore[no-untyped-def]
    """Returns the bucket as it is (the average at world size 1): what a Python
    comm hook costs DDP before it communicates anything. (Not annotated: DDP
    checks the annotations and this module's are strings.)"""
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def make_model(dev: torch.device) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(6)]).to(dev)


def wrap(method: str, dev: torch.device, nccl: Any, density: float,
         bucket_cap_mb: float) -> nn.Module:
    """The model as ``method`` trains it (DDP with buckets of ``bucket_cap_mb``)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

    model = make_model(dev)
    if method == "compute":
        return model
    group = nccl if method in TORCH_HOOKS else None
    ddp = DDP(model, device_ids=[dev.index], process_group=group,
              bucket_cap_mb=bucket_cap_mb)
    if method == "bf16":
        ddp.register_comm_hook(nccl, default_hooks.bf16_compress_hook)
    elif method == "py_allreduce":
        ddp.register_comm_hook(nccl, default_hooks.allreduce_hook)
    elif method == "py_noop":
        ddp.register_comm_hook(None, noop_hook)
    elif method == "powersgd":
        state = psgd.PowerSGDState(process_group=nccl, matrix_approximation_rank=4,
                                   start_powerSGD_iter=2)
        ddp.register_comm_hook(state, psgd.powerSGD_hook)
    elif method in SPARSE:
        state = pg_sparse.SparseState(density=density, warmup_steps=2)
        ddp.register_comm_hook(state, pg_sparse.hooks.HOOKS[method])
    elif method in NATIVE:
        state = pg_sparse.SparseState(density=density, warmup_steps=2)
        pg_sparse.hooks.register_comm_hook(ddp, state,
                                           pg_sparse.hooks.HOOKS[method.removesuffix("_native")])
    return ddp


def stepper(model: nn.Module, x: torch.Tensor) -> Callable[[], None]:
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)

    def step() -> None:
        opt.zero_grad(set_to_none=False)
        model(x).square().mean().backward()
        opt.step()
    return step


def time_steps(step: Callable[[], None], warmup: int, steps: int) -> list[float]:
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    out = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return out


API_KINDS = {
    "launches": ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel"),
    "memcpy": ("cudaMemcpyAsync",),
    "syncs": ("cudaStreamSynchronize", "cudaDeviceSynchronize"),
    "hostfn": ("cudaLaunchHostFunc",),
    "events": ("cudaEventRecord", "cudaStreamWaitEvent"),
    "malloc": ("cudaMalloc",),
    "free": ("cudaFree",),
}


def device_ops(events: Any, steps: int) -> str:
    """One line per device operation (kernel, copy, memset): runs per step,
    microseconds per run and the name, most frequent first."""
    from torch.autograd import DeviceType

    rows = sorted((e for e in events if e.device_type == DeviceType.CUDA),
                  key=lambda e: (-e.count, e.key))
    lines = []
    for e in rows:
        us = getattr(e, "device_time_total", 0.0) / max(e.count, 1)
        lines.append(f"{e.count / steps:7.1f}  {us:9.2f} us  {e.key[:150]}\n")
    return "".join(lines)


def profile_counts(step: Callable[[], None], steps: int = 5,
                   table: Path | None = None,
                   trace: Path | None = None) -> dict[str, float]:
    """Per step: calls of each CUDA API kind (kernel launches, cudaMemcpyAsync,
    stream synchronisations, ...) and the host milliseconds spent in them
    (``<kind>_ms``; a synchronisation's time is its wait for the device).
    ``table``: also write the profiler's table of the busiest events there;
    ``trace``: and its Chrome trace (every CUDA call of each bucket call)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    out = {k: 0.0 for k in API_KINDS} | {f"{k}_ms": 0.0 for k in API_KINDS}
    events = prof.key_averages()
    for e in events:
        for kind, names in API_KINDS.items():
            if e.key in names:
                out[kind] += e.count
                out[f"{kind}_ms"] += e.cpu_time_total / 1e3
    if table is not None:
        table.write_text(events.table(sort_by="cpu_time_total", row_limit=45))
        table.with_name(table.stem + "_device.txt").write_text(device_ops(events, steps))
    if trace is not None:
        prof.export_chrome_trace(str(trace))
    return {k: v / steps for k, v in out.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--density", type=float, default=0.01)
    ap.add_argument("--repeats", type=int, default=3,
                    help="rounds over all methods (interleaved against drift)")
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0,
                    help="DDP's bucket_cap_mb for every method (25: DDP's default, 4 "
                    "buckets of this model; 100 or more: one)")
    ap.add_argument("--methods", nargs="+", default=None,
                    help="only these methods (default: all); nccl is always run")
    ap.add_argument("--no-profile", action="store_true",
                    help="skip the profiled steps (timings only)")
    ap.add_argument("--trace", action="store_true",
                    help="also write Ok-Topk's Chrome traces (hook_trace_oktopk.json, "
                    "hook_trace_oktopk_native.json)")
    args = ap.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device("cuda", local)
    torch.cuda.set_device(dev)
    dist.init_process_group(backend="sparse")
    nccl = dist.new_group(backend="nccl")
    x = torch.randn(256, 2048, device=dev)
    methods = ["compute", *TORCH_HOOKS, *SPARSE, *NATIVE]
    if args.methods:
        unknown = set(args.methods) - set(methods)
        if unknown:
            ap.error(f"unknown methods {sorted(unknown)}; choose from {methods}")
        methods = [m for m in methods if m in args.methods or m == "nccl"]
    times: dict[str, list[float]] = {m: [] for m in methods}
    rounds: dict[str, list[float]] = {m: [] for m in methods}  # a median each
    steps = {m: stepper(wrap(m, dev, nccl, args.density, args.bucket_cap_mb), x)
             for m in methods}
    for _ in range(args.repeats):
        for m in methods:
            t = time_steps(steps[m], args.warmup, args.steps)
            times[m] += t
            rounds[m].append(statistics.median(t) * 1e3)
    med = {m: statistics.median(t) * 1e3 for m, t in times.items()}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    tables = {m: out / f"hook_profile_{m}.txt" for m in ("oktopk", "oktopk_native")}
    prof = {m: profile_counts(steps[m], table=tables.get(m),
                              trace=out / f"hook_trace_{m}.json" if args.trace and
                              m in tables else None)
            for m in ("nccl", "oktopk", "oktopk_native", "topka", "powersgd")
            if m in methods and not args.no_profile}
    card = torch.cuda.get_device_name(dev)
    rows = []
    for m in methods:
        t = sorted(times[m])
        # Each round's median against NCCL's in the same round: paired, so
        # the drift between rounds cancels.
        paired = [a - b for a, b in zip(rounds[m], rounds["nccl"])]
        rows.append({"method": m, "median_ms": med[m], "min_ms": t[0] * 1e3,
                     "max_ms": t[-1] * 1e3, "vs_nccl_ms": med[m] - med["nccl"],
                     "round_medians_ms": rounds[m], "paired_vs_nccl_ms": paired,
                     **({f"prof_{k}": v for k, v in prof[m].items()} if m in prof else {})})
    doc = {"card": card, "torch": torch.__version__, "world_size": dist.get_world_size(),
           "density": args.density, "bucket_cap_mb": args.bucket_cap_mb,
           "steps": args.steps, "repeats": args.repeats,
           "rows": rows}
    if dist.get_rank() == 0:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "bench_hook.json").write_text(json.dumps(doc, indent=1))
        print(f"card: {card}; torch {torch.__version__}; world size "
              f"{dist.get_world_size()}; 6 x Linear(2048, 2048), batch 256; density "
              f"{args.density}; bucket_cap_mb {args.bucket_cap_mb}; median of "
              f"{args.repeats} x {args.steps} steps")
        print("| method | step ms (median) | min-max | added vs NCCL DDP (ms) | "
              "launches/step | memcpy/step | syncs/step | host ms in launches / "
              "copies / syncs / host functions |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['method']} | {r['median_ms']:.3f} | {r['min_ms']:.3f}-"
                  f"{r['max_ms']:.3f} | {r['vs_nccl_ms']:+.3f} | "
                  f"{r.get('prof_launches', float('nan')):.0f} | "
                  f"{r.get('prof_memcpy', float('nan')):.0f} | "
                  f"{r.get('prof_syncs', float('nan')):.0f} | "
                  + " / ".join(f"{r.get(f'prof_{k}_ms', float('nan')):.2f}"
                               for k in ("launches", "memcpy", "syncs", "hostfn"))
                  + " |")
        print("\nAdded to NCCL DDP's step, round by round (each round's median "
              "minus NCCL's in the same round), ms: median [min-max]")
        for r in rows:
            p = sorted(r["paired_vs_nccl_ms"])
            print(f"  {r['method']:>14}: {statistics.median(p):+.3f} "
                  f"[{p[0]:+.3f} .. {p[-1]:+.3f}] over {len(p)} rounds")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
