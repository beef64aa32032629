"""Long run: many Ok-Topk calls on one bucket, memory and conservation
watched (the reliability issue's soak test; not part of the suite).

    torchrun --nproc_per_node=2 tests/long/long_run.py --steps 10000
    torchrun --nproc_per_node=1 tests/long/long_run.py --device cuda

Every ``--check-every`` calls the conservation invariant is checked on
every rank against a gloo sum (sum_ranks(residual) + P * output ==
sum_ranks(grad + residual_before)), and the process's RSS (and on CUDA the
allocated and reserved device memory) is sampled. After ``--settle`` calls
memory must stay within ``--tolerance`` (1%) of its first sample. Rank 0
writes a JSON summary; any failure exits non-zero.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import timedelta


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def fixed_mmap_threshold() -> None:
    """Re-exec with glibc's mmap threshold fixed: its default adapts upwards
    after large frees, after which multi-MB tensors come from the heap and
    RSS wanders by tens of MB with the allocation pattern, hiding what this
    run measures."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") is None:
        os.environ["MALLOC_MMAP_THRESHOLD_"] = "65536"
        os.execv(sys.executable, [sys.executable, *sys.argv])


def main() -> int:
    fixed_mmap_threshold()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--n", type=int, default=1_000_000, help="bucket size")
    p.add_argument("--density", type=float, default=0.01)
    p.add_argument("--algo", default="oktopk")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--wire", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--check-every", type=int, default=100)
    p.add_argument("--settle", type=int, default=500, help="calls before the baseline")
    p.add_argument("--tolerance", type=float, default=0.01)
    p.add_argument("--out", default="long_run.json")
    args = p.parse_args()

    import torch
    import torch.distributed as dist

    import pg_sparse

    torch.set_num_threads(1)
    dist.init_process_group("sparse", timeout=timedelta(seconds=120))
    gloo = dist.new_group(backend="gloo")
    rank, P = dist.get_rank(), dist.get_world_size()
    dev = torch.device(args.device, int(os.environ.get("LOCAL_RANK", 0))
                       if args.device == "cuda" else None)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    state = pg_sparse.SparseState(algo=args.algo, density=args.density, warmup_steps=1,
                                  wire_dtype=getattr(torch, args.wire))
    gen = torch.Generator(device=dev).manual_seed(1234 + rank)
    bucket = state.native_bucket(0, torch.empty(args.n, device=dev))
    samples, worst, t0 = [], 0.0, time.monotonic()
    for step in range(args.steps):
        g = torch.randn(args.n, generator=gen, device=dev)
        check = step % args.check_every == 0 or step == args.steps - 1
        before = bucket.residual().to(dev) if check else None
        t = g.clone()
        bucket.allreduce(t).wait()
        if not check:
            continue
        res = bucket.residual().double()
        lhs, rhs, mag = res + P * t.double().cpu(), (g + before).double().cpu(), \
            (g + before).abs().double().cpu()
        for x in (lhs, rhs, mag):
            dist.all_reduce(x, group=gloo)
        lhs -= (P - 1) * P * t.double().cpu()  # the output is the same everywhere
        err = float(((lhs - rhs).abs() / (mag + 1e-30)).max())
        worst = max(worst, err)
        mem = {"step": step, "rss": rss_bytes()}
        if dev.type == "cuda":
            torch.cuda.synchronize()
            mem["cuda_allocated"] = torch.cuda.memory_allocated(dev)
            mem["cuda_reserved"] = torch.cuda.memory_reserved(dev)
            mem["cuda_used"] = (lambda f, t_: t_ - f)(*torch.cuda.mem_get_info(dev))
        samples.append(mem)
    elapsed = time.monotonic() - t0
    base = next((s for s in samples if s["step"] >= args.settle), samples[-1])
    drift = {k: max(abs(s[k] - base[k]) / base[k] for s in samples if s["step"] >= base["step"])
             for k in base if k != "step" and base[k] > 0}
    ok = worst < 1e-5 and all(v <= args.tolerance for v in drift.values())
    summary = {"rank": rank, "world_size": P, "device": str(dev), "algo": args.algo,
               "wire": args.wire, "n": args.n, "density": args.density,
               "steps": args.steps, "seconds": elapsed, "worst_relative_error": worst,
               "baseline": base, "last": samples[-1], "max_drift": drift, "ok": ok,
               "samples": samples,
               "stats": state.stats()[0]}
    all_ok = torch.tensor([int(ok)])
    dist.all_reduce(all_ok, op=dist.ReduceOp.MIN, group=gloo)
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=1)
        print(json.dumps({k: summary[k] for k in ("device", "steps", "seconds",
                                                  "worst_relative_error", "max_drift",
                                                  "ok")}))
    dist.destroy_process_group()
    return 0 if all_ok.item() else 1


if __name__ == "__main__":
    sys.exit(main())
