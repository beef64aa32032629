"""A rank dies (SIGKILL) in the middle of a job: the others must raise a
clear error instead of hanging, and the job must end.

``--mode allreduce``: the survivors are in ``all_reduce`` when the victim
dies; ``hook``: in a DDP backward with the Ok-Topk hook; ``p2p``: rank 0
waits in ``recv`` from the victim. The victim (the last rank) announces its
death in a file, then kills itself; each survivor records whether its call
raised, how long after the death, and the message.

``--device cuda``: one GPU per rank (LOCAL_RANK), the model, the hook's
buckets and the tensors on it, so the survivors are inside the CUDA path
(NCCL, or Open MPI where PG_SPARSE_CUDA_TRANSPORT says) when the victim dies.

``--mode cut``: nobody dies; every rank writes ``ready<R>`` and keeps
running hook steps until one raises, while the test cuts a link between
network namespaces and writes the time into ``died``.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from workers.common import Recorder, parse_args  # noqa: E402
from workers.timeout import file_barrier  # noqa: E402


def main() -> None:
    args = parse_args(lambda p: (p.add_argument("--timeout-s", type=float, default=10.0),
                                 p.add_argument("--mode", default="allreduce",
                                                choices=("allreduce", "hook", "p2p",
                                                         "cut")),
                                 p.add_argument("--device", default="cpu",
                                                choices=("cpu", "cuda"))))
    import torch
    import torch.distributed as dist

    import pg_sparse

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dev = torch.device("cpu")
    if args.device == "cuda":
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(dev)
    out = Path(args.out)
    file_barrier(out, "arrived", rank, world_size)
    dist.init_process_group("sparse", timeout=timedelta(seconds=args.timeout_s))
    rec = Recorder(args.out, rank, world_size)
    rec.info["transport"] = pg_sparse._C._transport_of(
        dist.group.WORLD._get_backend(torch.device("cpu")))
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64).to(dev))
    model.register_comm_hook(pg_sparse.SparseState(density=0.1), pg_sparse.hooks.oktopk_hook)
    for _ in range(3):  # healthy steps first: the hook's buckets are built
        model(torch.randn(4, 64, device=dev)).sum().backward()
    t = torch.ones(8, device=dev)
    dist.all_reduce(t)
    rec.record("healthy_before", t[0].item() == world_size, f"sum {t[0].item()}")
    victim = world_size - 1
    died = out / "died"
    if args.mode == "cut":
        (out / f"ready{rank}").touch()
    elif rank == victim:
        time.sleep(1.0)  # the survivors are inside their call by now
        died.write_text(str(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)

    def call() -> None:
        if args.mode == "cut":
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                model(torch.randn(4, 64, device=dev)).sum().backward()
                time.sleep(0.05)
        elif args.mode == "allreduce":
            t = torch.ones(1 << 16, device=dev)
            dist.all_reduce(t)
            if dev.type == "cuda":
                # A CUDA collective ends on its stream: this waits until the
                # watchdog aborts the stuck kernels, and the next call raises.
                t.cpu()
                dist.all_reduce(torch.ones(1, device=dev))
        elif args.mode == "hook":
            model(torch.randn(4, 64, device=dev)).sum().backward()
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
        else:
            if rank == 0:
                dist.recv(torch.zeros(16, device=dev), src=victim)
            else:
                dist.all_reduce(torch.ones(4, device=dev))

    if dev.type == "cuda":
        import faulthandler  # where a survivor waits, if it waits too long

        faulthandler.dump_traceback_later(args.timeout_s + 15, exit=False)
    t0 = time.monotonic()
    try:
        call()
        rec.record("raises", False, "the call returned although a rank died")
    except Exception as e:  # noqa: BLE001
        waited = time.monotonic() - t0
        since = time.time() - float(died.read_text()) if died.exists() else float("nan")
        rec.info["error"] = str(e)[:500]
        rec.record("raises", True, f"{type(e).__name__} after {waited:.1f} s "
                   f"({since:.1f} s after the death): {str(e).splitlines()[0][:200]}")
    rec.finish()
    # Leave at once: the group cannot be shut down cleanly with a dead peer
    # and a thread may still sit in the transport. After a cut link, leave
    # failed: torchrun's agents would otherwise wait at their exit barrier
    # for a peer they cannot reach. (mpirun with
    # orte_abort_on_non_zero_status=0, in turn, never returns once a rank
    # killed by a signal and another exiting non-zero both happened.)
    os._exit(1 if args.mode == "cut" else 0)


if __name__ == "__main__":
    main()
