"""What Adam in the hook costs per call on CPU: one rank, one thread, an
Ok-Topk bucket of N entries, plain error feedback against
``precondition="adam"`` ranking by size and by the pending Adam step, and
``torch.optim.AdamW.step()`` / ``SGD.step()`` on as many parameters.

    python adam_cost.py --n 25200000 --calls 8
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist


class _Bucket:
    """What the hooks read of a DDP GradBucket."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    def buffer(self) -> torch.Tensor:
        return self.t

    def index(self) -> int:
        return 0

    def is_last(self) -> bool:
        return True


def _median(ts: list[float]) -> float:
    ts = sorted(ts)
    return ts[len(ts) // 2] * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=25_200_000)
    p.add_argument("--calls", type=int, default=8, help="calls per variant; the first 3 warm up")
    p.add_argument("--density", type=float, default=0.01)
    args = p.parse_args()
    import pg_sparse
    from pg_sparse import hooks

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("sparse", rank=0, world_size=1)
    torch.set_num_threads(1)
    n = args.n
    # Entries with scales spread like a model's, fresh noise every call.
    spread = torch.randn(n, generator=torch.Generator().manual_seed(0)).abs()
    variants = (("plain error feedback", {}),
                ("adam, ranking by size", {"precondition": "adam", "adam_select": "gradient"}),
                ("adam, normalized ranking", {"precondition": "adam",
                                              "adam_select": "normalized"}))
    for label, kw in variants:
        st = pg_sparse.SparseState(algo="oktopk", density=args.density, warmup_steps=1, **kw)
        ts = []
        for i in range(args.calls):
            g = torch.randn(n, generator=torch.Generator().manual_seed(i)).mul_(spread)
            t = time.perf_counter()
            hooks._run(st, _Bucket(g), "oktopk").wait()
            ts.append(time.perf_counter() - t)
        core = st.stats()[0]["time_s"] * 1e3
        print(f"{label:26s} {_median(ts[3:]):7.1f} ms a call (core {core:.1f} ms)")
    w = torch.nn.Parameter(torch.randn(n))
    w.grad = torch.randn_like(w)
    for label, opt in (("AdamW.step()", torch.optim.AdamW([w], lr=1e-3, weight_decay=0.01)),
                       ("SGD.step(), weight decay", torch.optim.SGD([w], lr=1e-3,
                                                                    weight_decay=0.01))):
        ts = []
        for _ in range(args.calls):
            t = time.perf_counter()
            opt.step()
            ts.append(time.perf_counter() - t)
        print(f"{label:26s} {_median(ts[3:]):7.1f} ms")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
