"""A rank of the soak (tests/soak/soak.py): DDP training with the Ok-Topk
hook and AdamW given to it (``register_comm_hook(..., optimizer=opt)``)
under ``torchrun --max-restarts``, a checkpoint of model, optimizer and hook
state every ``--every`` steps, and the faults of ``--faults`` (a JSON list
of ``{"step", "rank", "kind"}``, kind ``kill``: SIGKILL itself, ``stall``:
sleep past the collectives' timeout) acted on by the rank named, once, the
first time it reaches the step.

Each rank appends JSON lines to ``OUT/rank<R>.jsonl``: ``start`` (attempt,
step resumed from, whether the hook state loaded equals the saved one bit
for bit), ``probe`` (RSS and open descriptors, ``--probe-after`` steps after
the start), ``loss`` (rank 0: every step's loss and a digest of the
parameters) and ``done``. Data and initial weights depend on the step and
seed only, so a step redone after a restart must give the same loss.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import pg_sparse


def arguments() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--every", type=int, default=25, help="checkpoint every N steps")
    p.add_argument("--faults", default="[]", help="JSON list of faults")
    p.add_argument("--timeout", type=float, default=20.0, help="collectives' timeout (s)")
    p.add_argument("--probe-after", type=int, default=30)
    p.add_argument("--width", type=int, default=256)
    return p.parse_args()


def digest(tensors: Any) -> str:
    """sha256 of every tensor in a (nested) state dict, in key order."""
    h = hashlib.sha256()

    def walk(x: Any) -> None:
        if isinstance(x, torch.Tensor):
            h.update(str((x.dtype, tuple(x.shape))).encode())
            h.update(x.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
        elif isinstance(x, dict):
            for k in sorted(x, key=str):
                h.update(str(k).encode())
                walk(x[k])
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)
        else:
            h.update(repr(x).encode())
    walk(tensors)
    return h.hexdigest()


def probe() -> dict[str, int]:
    """This process's resident set (kB) and open file descriptors."""
    rss = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text()
               .splitlines() if line.startswith("VmRSS:"))
    return {"rss_kb": rss, "fds": len(os.listdir("/proc/self/fd"))}


def batch(step: int, rank: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1_000_003 * step + rank)
    x = torch.randn(32, width, generator=g)
    w = torch.randn(width, 10, generator=torch.Generator().manual_seed(7))
    return x, torch.tanh(x @ w)


def main() -> None:
    args = arguments()
    torch.set_num_threads(1)
    dist.init_process_group("sparse", timeout=timedelta(seconds=args.timeout))
    rank = dist.get_rank()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    out = Path(args.out)
    log = open(out / f"rank{rank}.jsonl", "a")

    def record(kind: str, **kw: Any) -> None:
        log.write(json.dumps({"kind": kind, "attempt": attempt, "rank": rank,
                              "t": time.time(), **kw}) + "\n")
        log.flush()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(args.width, 512), torch.nn.Tanh(),
                                torch.nn.Linear(512, 10))
    ddp = DDP(model)
    state = pg_sparse.SparseState(algo="oktopk", density=0.02, warmup_steps=5)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    pg_sparse.hooks.register_comm_hook(ddp, state, pg_sparse.hooks.oktopk_hook, optimizer=opt)
    ckpt = out / "ckpt" / f"rank{rank}.pt"
    start, restored = 0, None
    if ckpt.exists():
        saved = torch.load(ckpt, weights_only=False)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])  # carries the hook state too
        start = saved["step"]
        # What the hook state is now, against its digest at the save.
        restored = digest(state.state_dict()) == saved["state_digest"]
    record("start", step=start, restored=restored)
    # "cut" faults are the driver's (it takes a link down). A fault strikes
    # the first time its rank reaches its step, whatever the restart count:
    # the agents of two hosts need not count restarts alike (a round that
    # one host restarts into for a waiting peer counts on neither), so
    # keying faults on TORCHELASTIC_RESTART_COUNT lost one. A marker file,
    # created exclusively, keeps a redone step from striking again.
    faults = [(i, f) for i, f in enumerate(json.loads(args.faults))
              if f["rank"] == rank and f["kind"] in ("kill", "stall")]
    for step in range(start, args.steps):
        for i, f in faults:
            if f["step"] == step and first_time(out / f"fault-{i}"):
                record("fault", step=step, fault=f["kind"])
                if f["kind"] == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                time.sleep(3 * args.timeout)  # "stall": the others time out
        x, y = batch(step, rank, args.width)
        loss = (ddp(x) - y).square().mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if rank == 0:
            record("loss", step=step, loss=loss.item(),
                   params=digest(model.state_dict())[:16])
        if step + 1 - start == args.probe_after:
            record("probe", step=step, **probe())
        if (step + 1) % args.every == 0:
            ckpt.parent.mkdir(exist_ok=True)
            tmp = ckpt.with_suffix(".tmp")
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                        "step": step + 1, "state_digest": digest(state.state_dict())}, tmp)
            os.replace(tmp, ckpt)  # a kill mid-save leaves the last one whole
    record("done", step=args.steps)
    dist.destroy_process_group()


def first_time(marker: Path) -> bool:
    """Whether this call created ``marker`` (no earlier attempt did)."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    return True


if __name__ == "__main__":
    main()
