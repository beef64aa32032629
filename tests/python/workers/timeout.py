"""The init_process_group timeout is honoured: rank 0 calls all_reduce, the
other ranks never do; rank 0 must get an exception that says it timed out,
soon after the timeout, instead of hanging.

``--mode p2p`` instead: rank 0 posts a recv that no rank ever sends; its
wait must fail after the timeout, and the group must stay usable (a
point-to-point timeout does not break collectives).

``--exit os`` leaves with os._exit (the surviving rank's worker thread may
be stuck in MPI); ``--exit normal`` returns from main, so interpreter exit
(atexit: backend shutdown, MPI_Finalize) must not hang either.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from workers.common import Recorder, parse_args  # noqa: E402


def file_barrier(folder: Path, name: str, rank: int, world_size: int, limit: float = 60.0) -> None:
    """Every rank arrives before any goes on (import times differ by
    seconds; the short store timeout must not cut the rendezvous)."""
    (folder / f"{name}{rank}").touch()
    deadline = time.monotonic() + limit
    while not all((folder / f"{name}{r}").exists() for r in range(world_size)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"file barrier {name}: not every rank arrived")
        time.sleep(0.02)


def wait_for(path: Path, limit: float = 60.0) -> None:
    """Sleep until ``path`` exists or ``limit`` seconds pass (no collectives)."""
    deadline = time.monotonic() + limit
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def main() -> None:
    args = parse_args(lambda p: (p.add_argument("--timeout-s", type=float, default=3.0),
                                 p.add_argument("--exit", choices=("os", "normal"),
                                                default="os"),
                                 p.add_argument("--mode", choices=("collective", "p2p"),
                                                default="collective")))
    import torch
    import torch.distributed as dist

    import pg_sparse

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    out = Path(args.out)
    file_barrier(out, "arrived", rank, world_size)
    T = args.timeout_s
    dist.init_process_group("sparse", timeout=timedelta(seconds=T))
    rec = Recorder(args.out, rank, world_size)
    rec.info["transport"] = pg_sparse._C._transport_of(
        dist.group.WORLD._get_backend(torch.device("cpu")))
    rec.info["timeout_s"] = T

    def healthy() -> str:
        t = torch.ones(4)
        dist.all_reduce(t)
        assert torch.equal(t, torch.full((4,), float(world_size))), t
        return "a collective of every rank works"

    rec.run("healthy_before", healthy)
    if args.mode == "p2p":
        if rank == 0:
            t0 = time.monotonic()
            work = dist.irecv(torch.zeros(5), src=1, tag=77)  # never sent
            try:
                work.wait()
                rec.record("recv_times_out", False, "recv returned without a sender")
            except Exception as e:  # noqa: BLE001
                waited = time.monotonic() - t0
                rec.record("recv_times_out", "timed out" in str(e).lower() and
                           T - 0.5 <= waited <= T + 7,
                           f"{type(e).__name__} after {waited:.2f} s: {e}")
            (out / "rank0_finished").touch()
        else:
            wait_for(out / "rank0_finished")
        # Matched messages and collectives still work afterwards.
        rec.run("healthy_after", healthy)

        def ping() -> str:
            if rank == 0:
                d = torch.zeros(3)
                dist.recv(d, src=1, tag=5)
                assert torch.equal(d, torch.full((3,), 5.0)), d
            elif rank == 1:
                dist.send(torch.full((3,), 5.0), dst=0, tag=5)
            return "ok"

        rec.run("p2p_after", ping)
    elif rank == 0:
        t0 = time.monotonic()
        work = dist.all_reduce(torch.ones(10), async_op=True)  # nobody else joins
        fut = work.get_future()
        try:
            work.wait()
            rec.record("times_out", False, "all_reduce returned without the other ranks")
        except Exception as e:  # noqa: BLE001
            waited = time.monotonic() - t0
            msg = f"{type(e).__name__} after {waited:.2f} s: {e}"
            ok = "timed out" in str(e).lower() and isinstance(e, RuntimeError) and \
                T - 0.5 <= waited <= T + 7
            rec.record("times_out", ok, msg)
        try:
            fut.wait()
            rec.record("future_errors", False, "the future completed without error")
        except Exception as e:  # noqa: BLE001
            rec.record("future_errors", "timed out" in str(e).lower(), f"{type(e).__name__}: {e}")
        t1 = time.monotonic()
        try:
            dist.all_reduce(torch.ones(1))
            rec.record("later_collective_errors", False, "a later all_reduce returned")
        except Exception as e:  # noqa: BLE001
            waited = time.monotonic() - t1
            rec.record("later_collective_errors", waited <= T + 7,
                       f"{type(e).__name__} after {waited:.2f} s: {e}")
        (out / "rank0_finished").touch()
    else:
        # Never join; wait (without collectives) until rank 0 has its answer.
        wait_for(out / "rank0_finished")
        rec.record("peer_stayed_out", (out / "rank0_finished").exists(),
                   "waited for rank 0 without calling the collective")
    rec.finish()
    sys.stdout.flush()
    sys.stderr.flush()
    if args.exit == "os":
        os._exit(0)


if __name__ == "__main__":
    main()
