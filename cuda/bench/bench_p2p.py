"""Point-to-point of CUDA tensors: the "sparse" backend against an NCCL group
in the same job (not a test). Ranks 2i and 2i+1 exchange a tensor both ways
at once (batch_isend_irecv of an isend and an irecv); median time per
exchange over repeated calls.

    torchrun --nproc_per_node=2 cuda/bench/bench_p2p.py

On 2x H200 with torch 2.11 the processes have died of SIGSEGV at exit,
after printing every figure, as main() returned and its NCCL group was
released (faulthandler shows no frame below the module's main() call).
"""

from __future__ import annotations

import faulthandler
import os
import platform
import statistics
import time

import torch
import torch.distributed as dist

import pg_sparse  # noqa: F401  registers the "sparse" backend

SIZES = (1 << 10, 1 << 20, 1 << 24)  # fp32 elements: 4 KB, 4 MB, 64 MB
REPEATS = 20


def exchange_ms(x: torch.Tensor, y: torch.Tensor, peer: int, group) -> float:
    """Median ms of one isend + irecv pair, timed with the device drained."""
    times = []
    sync = (torch.cuda.synchronize if os.environ.get("BENCH_P2P_SYNC", "device") == "device"
            else torch.cuda.current_stream().synchronize)
    for i in range(REPEATS + 3):
        if os.environ.get("BENCH_P2P_VERBOSE"):
            print(f"rank {dist.get_rank()} iteration {i} n {x.numel()}", flush=True)
        sync()
        dist.barrier(group=group)
        t0 = time.perf_counter()
        # Batched: ProcessGroupNCCL (torch 2.11) hangs on an unbatched
        # isend + irecv with one peer; the "sparse" backend takes either.
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, x, peer, group),
                                        dist.P2POp(dist.irecv, y, peer, group)])
        for w in works:
            w.wait()
        sync()
        if i >= 3:  # the first calls create the communicators
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    # A hang shows where it is instead of eating the machine's time.
    faulthandler.dump_traceback_later(float(os.environ.get("BENCH_P2P_LIMIT_S", "120")),
                                      exit=True)
    dist.init_process_group("sparse")
    rank, size = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    torch.cuda.set_device(dev)
    nccl = dist.new_group(backend="nccl")
    assert size % 2 == 0, "run with an even number of ranks"
    peer = rank ^ 1
    if rank == 0:
        print(f"machine {platform.node()}, card {torch.cuda.get_device_name(dev)}, "
              f"torch {torch.__version__}, {size} ranks, pairs 2i <-> 2i+1, "
              f"median of {REPEATS}")
        print(f"{'bytes':>10} {'nccl ms':>9} {'sparse ms':>10} {'sparse/nccl':>12} "
              f"{'sparse GB/s':>12}")
    for n in SIZES:
        x = torch.full((n,), float(rank + 1), device=dev)
        y = torch.zeros(n, device=dev)
        t_sparse = exchange_ms(x, y, peer, None)
        assert torch.all(y == peer + 1).item(), "wrong data received"
        t_nccl = exchange_ms(x, y, peer, nccl)
        if rank == 0:
            gbs = 4 * n / (t_sparse * 1e-3) / 1e9
            print(f"{4 * n:>10} {t_nccl:>9.3f} {t_sparse:>10.3f} "
                  f"{t_sparse / t_nccl:>12.2f} {gbs:>12.1f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
