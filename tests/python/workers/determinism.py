"""Determinism: a short DDP training with every hook (fp32 and bf16 values on
the wire), fixed seeds. Each rank records a SHA-256 of every step's averaged
gradients and of the final parameters; the test runs the job twice and
compares the digests bitwise across runs and ranks."""

from __future__ import annotations

import hashlib
import sys
import warnings
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ALGOS, Recorder, parse_args  # noqa: E402

SIZES = (24, 40, 16)
STEPS = 10


def digest(tensors) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()


def train(torch, dist, pg_sparse, algo: str, wire) -> str:
    """Digests of the gradients after each step and of the final weights."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(SIZES[0], SIZES[1]), torch.nn.Tanh(),
                                torch.nn.Linear(SIZES[1], SIZES[2]))
    ddp = DDP(model, bucket_cap_mb=0.002)  # several buckets
    state = pg_sparse.SparseState(algo=algo, density=0.05, tau=3, tau_prime=2,
                                  wire_dtype=wire)
    ddp.register_comm_hook(state, pg_sparse.hooks.HOOKS[algo])
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    steps = []
    for step in range(STEPS):
        g = torch.Generator().manual_seed(1000 * step + dist.get_rank())
        x, y = torch.randn(8, SIZES[0], generator=g), torch.randn(8, SIZES[-1], generator=g)
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        steps.append(digest(p.grad for p in model.parameters()))
        opt.step()
    final = digest(model.parameters())
    return hashlib.sha256(("".join(steps) + final).encode()).hexdigest()


def main() -> None:
    # --tag only makes the two runs distinct launches.
    args = parse_args(lambda p: p.add_argument("--tag", default=""))
    warnings.filterwarnings("ignore", category=FutureWarning)
    import torch
    import torch.distributed as dist

    import pg_sparse

    torch.set_num_threads(1)
    dist.init_process_group("sparse", timeout=timedelta(seconds=60))
    rec = Recorder(args.out, dist.get_rank(), dist.get_world_size())
    for algo in ALGOS:
        for name, wire in (("fp32", None), ("bf16", torch.bfloat16)):
            key = f"{algo}_{name}"

            def fn(a=algo, w=wire, k=key) -> str:
                rec.info[k] = train(torch, dist, pg_sparse, a, w)
                return rec.info[k][:16]
            rec.run(key, fn)
    dist.destroy_process_group()
    rec.finish()


if __name__ == "__main__":
    main()
