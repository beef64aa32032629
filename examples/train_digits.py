"""Distributed training of an MLP on scikit-learn's digits with pg_sparse.

Launch with torchrun (4 processes on CPU)::

    python3 -m torch.distributed.run --nproc_per_node=4 examples/train_digits.py

The job trains the same model twice on the same data, seed and process group
(backend ``"sparse"``):

1. sparse: DDP with the Ok-Topk hook (``--algo``) at ``--density`` 0.01, with
   error feedback;
2. dense: DDP with ``pg_sparse.hooks.dense_hook``, i.e. a plain allreduce of
   the gradients divided by the world size -- what DDP does without a hook,
   but going through the same ``SparseState`` statistics, so the bytes sent
   are measured the same way for both runs (``--verify-dense`` also trains
   with hook-less DDP and checks that it ends with the same parameters).

Rank 0 shows a progress bar and ends with a table of test accuracy, training
time and megabytes sent per rank.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from tqdm import tqdm

import pg_sparse
from pg_sparse import SparseState

SPARSE_ALGOS = tuple(a for a in pg_sparse.ALGORITHMS if a != "dense")
Hook = Callable[..., torch.futures.Future]


@dataclass
class Data:
    """Standardized digits, split once into a training and a test set."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


@dataclass
class RunResult:
    """What one training run measured on this rank."""

    name: str
    accuracy: float = 0.0
    time_s: float = 0.0
    bytes_sent: float = 0.0
    steps: int = 0
    sparse_steps: int = 0
    selected: float = 0.0  # entries reduced over the sparse (non-warm-up) steps
    entries: float = 0.0  # bucket entries over the same steps
    max_bound_ratio: float = 0.0  # max over steps of words_sent / words_upper_bound
    final_loss: float = math.nan
    params: torch.Tensor = field(default_factory=lambda: torch.empty(0))

    @property
    def density(self) -> float:
        """Achieved density over the sparse steps (global_selected / n)."""
        return self.selected / self.entries if self.entries else 1.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line arguments."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--algo", default="oktopk", choices=SPARSE_ALGOS,
                   help="sparse allreduce of the first run (default: oktopk)")
    p.add_argument("--density", type=float, default=0.01,
                   help="fraction of gradient entries sent (default: 0.01)")
    p.add_argument("--warmup-steps", type=int, default=1,
                   help="dense steps before sparsifying (default: 1)")
    p.add_argument("--epochs", type=int, default=25)
    p.add_argument("--batch-size", type=int, default=16, help="per rank")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--hidden", type=int, default=256, help="hidden layer width")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--verify-dense", action="store_true",
                   help="also train with hook-less DDP and check it matches the dense run")
    args = p.parse_args(argv)
    if not 0.0 < args.density <= 1.0:
        p.error(f"--density must be in (0, 1], got {args.density}")
    return args


def load_data(seed: int) -> Data:
    """Digits (1797 8x8 images, shipped with scikit-learn), a stratified 75/25
    split fixed by ``seed``, features standardized with the training set's
    mean and deviation."""
    x, y = load_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.25, stratify=y,
                                              random_state=seed)
    scaler = StandardScaler().fit(x_tr)

    def features(a: np.ndarray) -> torch.Tensor:
        return torch.tensor(scaler.transform(a), dtype=torch.float32)

    def labels(a: np.ndarray) -> torch.Tensor:
        return torch.tensor(a, dtype=torch.long)

    return Data(features(x_tr), labels(y_tr), features(x_te), labels(y_te))


def make_model(hidden: int, seed: int) -> nn.Module:
    """64 -> hidden -> hidden -> 10 MLP, initialised from ``seed``."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(),
                         nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, 10))


def make_loader(data: Data, batch_size: int, seed: int) -> DataLoader:
    """This rank's shard of the training set (DistributedSampler)."""
    dataset = TensorDataset(data.x_train, data.y_train)
    sampler = DistributedSampler(dataset, shuffle=True, seed=seed, drop_last=True)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True)


def wrap(model: nn.Module, hook: Hook | None, state: SparseState | None) -> DDP:
    """DDP over the default ("sparse") group, with ``hook`` if given (its
    steady calls in C++: ``pg_sparse.hooks.register_comm_hook``)."""
    ddp = DDP(model)
    if hook is not None:
        pg_sparse.hooks.register_comm_hook(ddp, state, hook)
    return ddp


@torch.no_grad()
def accuracy(model: nn.Module, data: Data) -> float:
    """Fraction of the test set classified correctly."""
    model.eval()
    pred = model(data.x_test).argmax(dim=1)
    model.train()
    return (pred == data.y_test).float().mean().item()


def record_step(result: RunResult, state: SparseState | None) -> None:
    """Add the last step's communication statistics to ``result``.

    ``SparseState`` keeps the statistics of each bucket's *last* call only,
    so this runs after every optimizer step."""
    result.steps += 1
    if state is None:
        return
    per_bucket = state.stats()
    total = state.summary()
    result.bytes_sent += total["bytes_sent"]
    if not any(s["dense"] for s in per_bucket.values()):
        result.sparse_steps += 1
        result.selected += total["global_selected"]
        result.entries += total["n"]
        if total["words_upper_bound"] > 0:
            result.max_bound_ratio = max(result.max_bound_ratio,
                                         total["words_sent"] / total["words_upper_bound"])


def train(name: str, args: argparse.Namespace, data: Data, hook: Hook | None,
          state: SparseState | None) -> RunResult:
    """One training run; returns what this rank measured."""
    rank = dist.get_rank()
    model = wrap(make_model(args.hidden, args.seed), hook, state)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    loader = make_loader(data, args.batch_size, args.seed)
    loss_fn = nn.CrossEntropyLoss()
    result = RunResult(name)
    bar = tqdm(total=args.epochs * len(loader), desc=f"{name:>6}", unit="step",
               disable=rank != 0, dynamic_ncols=True, mininterval=0.5)
    dist.barrier()
    start = time.perf_counter()
    for epoch in range(args.epochs):
        loader.sampler.set_epoch(epoch)  # type: ignore[attr-defined]
        running = 0.0
        for i, (x, y) in enumerate(loader, 1):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()  # DDP's hook runs (and completes) in here
            opt.step()
            record_step(result, state)
            running += loss.item()
            bar.set_postfix(epoch=epoch + 1, loss=f"{running / i:.4f}", refresh=False)
            bar.update()
        result.final_loss = running / len(loader)
    dist.barrier()
    result.time_s = time.perf_counter() - start
    bar.close()
    result.accuracy = accuracy(model.module, data)
    result.params = torch.cat([p.detach().reshape(-1) for p in model.module.parameters()])
    return result


def replicas_agree(params: torch.Tensor) -> bool:
    """Whether every rank holds exactly the same parameters."""
    hi, lo = params.clone(), params.clone()
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    return bool(torch.equal(hi, lo))


def reduce_max(value: float) -> float:
    """Largest ``value`` over the ranks."""
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def reduce_mean(value: float) -> float:
    """Mean of ``value`` over the ranks."""
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t)
    return t.item() / dist.get_world_size()


def report(args: argparse.Namespace, sparse: RunResult, dense: RunResult,
           n_params: int) -> None:
    """Gather the ranks' numbers and print the table on rank 0."""
    rows = []
    for r in (sparse, dense):
        rows.append((r.name, r.accuracy, reduce_max(r.time_s),
                     reduce_mean(r.bytes_sent) / 1e6, reduce_max(r.bytes_sent) / 1e6,
                     replicas_agree(r.params)))
    bound = reduce_max(sparse.max_bound_ratio)
    if dist.get_rank() != 0:
        return
    dense_mb = rows[1][3]
    world = dist.get_world_size()
    print(f"\npg_sparse on digits: {world} ranks, {n_params} parameters, "
          f"{dense.steps} steps of {args.batch_size} per rank, SGD lr {args.lr} "
          f"momentum {args.momentum}")
    header = (f"{'run':<22} | {'accuracy':>8} | {'time (s)':>8} | "
              f"{'MB sent per rank':>16} | {'ratio vs dense':>14}")
    print(header)
    print("-" * len(header))
    for name, acc, secs, mb, _, _ in rows:
        print(f"{name:<22} | {acc:>8.2%} | {secs:>8.2f} | {mb:>16.3f} | "
              f"{mb / dense_mb:>14.4f}")
    print(f"\n{sparse.name}: achieved density {sparse.density:.4f} "
          f"(target {args.density}) over {sparse.sparse_steps} sparse steps "
          f"after {sparse.steps - sparse.sparse_steps} dense warm-up step(s); "
          f"max over its steps of words sent / Ok-Topk's bound 3(k+kg)(P-1)/P "
          f"(kg = global_factor k): {bound:.4f}")
    for name, _, _, _, mb_max, agree in rows:
        print(f"{name}: max MB sent by one rank {mb_max:.3f}; "
              f"replicas identical: {'yes' if agree else 'NO'}")


def verify_dense(args: argparse.Namespace, data: Data, dense: RunResult) -> None:
    """Train with hook-less DDP (the backend's own allreduce) and compare."""
    plain = train("ddp (no hook)", args, data, None, None)
    diff = (plain.params - dense.params).abs().max().item()
    diff = reduce_max(diff)
    if dist.get_rank() == 0:
        print(f"hook-less DDP: accuracy {plain.accuracy:.2%}; max |param diff| "
              f"vs dense_hook run {diff:.2e}")


def main(argv: list[str] | None = None) -> None:
    """Train sparse, then dense, and print the comparison."""
    args = parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group(backend="sparse")
    try:
        data = load_data(args.seed)
        n_params = sum(p.numel() for p in make_model(args.hidden, args.seed).parameters())
        sparse_state = SparseState(algo=args.algo, density=args.density,
                                   warmup_steps=args.warmup_steps)
        sparse = train(f"{args.algo} d={args.density:g}", args, data,
                       pg_sparse.hooks.HOOKS[args.algo], sparse_state)
        dense_state = SparseState(algo="dense")
        dense = train("dense allreduce", args, data, pg_sparse.hooks.dense_hook,
                      dense_state)
        report(args, sparse, dense, n_params)
        if args.verify_dense:
            verify_dense(args, data, dense)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
