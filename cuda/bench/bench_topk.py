#!/usr/bin/env python3
"""Baseline for pgs_cuda_bench (b): torch.topk(x.abs(), k) on CUDA.

Times torch.topk(x.abs(), k) at n = 25M, k = 250k (density 0.01) on the
same kind of data as the C++ benchmark (approximately normal), as the median
of 20 runs after warm-up, with torch.cuda.Event. Run it on the machine that
ran pgs_cuda_bench and compare with its kth_abs line:

    python3 cuda/bench/bench_topk.py [--n N] [--k K] [--runs R]
"""

import argparse
import statistics

import torch


def median_ms(fn, warmup: int, runs: int) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=25_000_000)
    p.add_argument("--k", type=int, default=250_000)
    p.add_argument("--runs", type=int, default=20)
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device")
        return
    dev = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name(dev)}, torch {torch.__version__}")
    gen = torch.Generator(device=dev).manual_seed(3)
    x = torch.randn(args.n, device=dev, generator=gen)
    n, k = args.n, args.k

    t_topk = median_ms(lambda: torch.topk(x.abs(), k), 3, args.runs)
    t_abs = median_ms(lambda: x.abs(), 3, args.runs)
    t_kth = median_ms(lambda: torch.kthvalue(x.abs(), n - k + 1), 3, args.runs)
    vals, _ = torch.topk(x.abs(), k)
    print(f"n = {n}, k = {k}")
    print(
        f"torch.topk(x.abs(), k):          {t_topk * 1e3:8.1f} us "
        f"(k-th |x| = {vals[-1].item():.6g})"
    )
    print(f"  of which x.abs():              {t_abs * 1e3:8.1f} us")
    print(f"torch.kthvalue(x.abs(), n-k+1):  {t_kth * 1e3:8.1f} us")
    print("speedup = torch.topk time / pgs_cuda_bench kth_abs time")


if __name__ == "__main__":
    main()
