"""Recovery with ``torchrun --max-restarts``: a DDP job with the Ok-Topk hook
checkpoints model, optimizer and ``SparseState.state_dict()`` after every
step; on its first attempt the last rank SIGKILLs itself mid-run, torchrun
restarts every worker, they load the checkpoint and finish. The final
parameters must equal those of an uninterrupted run (``--no-kill``), bit for
bit: the residuals and thresholds came back with the checkpoint."""

from __future__ import annotations

import hashlib
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from workers.common import Recorder, parse_args  # noqa: E402

STEPS, KILL_AT = 12, 7


def main() -> None:
    args = parse_args(lambda p: (p.add_argument("--ckpt", required=True),
                                 p.add_argument("--no-kill", action="store_true")))
    import torch
    import torch.distributed as dist

    import pg_sparse

    torch.set_num_threads(1)
    dist.init_process_group("sparse", timeout=timedelta(seconds=20))
    rank, P = dist.get_rank(), dist.get_world_size()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    rec = Recorder(args.out, rank, P)
    rec.info["attempt"] = attempt
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.Tanh(),
                                torch.nn.Linear(48, 8))
    ddp = torch.nn.parallel.DistributedDataParallel(model)  # one bucket
    state = pg_sparse.SparseState(algo="oktopk", density=0.05, tau=3, tau_prime=2)
    ddp.register_comm_hook(state, pg_sparse.hooks.oktopk_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ckpt = Path(args.ckpt) / f"rank{rank}.pt"
    start = 0
    if ckpt.exists():
        saved = torch.load(ckpt, weights_only=False)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        state.load_state_dict(saved["sparse"])
        start = saved["step"]
    rec.info["resumed_at"] = start
    for step in range(start, STEPS):
        if not args.no_kill and attempt == 0 and step == KILL_AT and rank == P - 1:
            os.kill(os.getpid(), signal.SIGKILL)
        g = torch.Generator().manual_seed(100 * step + rank)
        x, y = torch.randn(16, 32, generator=g), torch.randn(16, 8, generator=g)
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        tmp = ckpt.with_suffix(".tmp")
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                    "sparse": state.state_dict(), "step": step + 1}, tmp)
        os.replace(tmp, ckpt)  # whole checkpoints only
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    rec.info["params"] = h.hexdigest()
    rec.record("finished", True, f"attempt {attempt}, resumed at step {start}")
    dist.destroy_process_group()
    rec.finish()


if __name__ == "__main__":
    main()
