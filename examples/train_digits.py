"""The main job: data-parallel training where the network is slow, with the
user's AdamW, under dense DDP, torch's bf16 and PowerSGD hooks
and pg_sparse's Ok-Topk, and how long each takes to reach dense's accuracy.

    bash examples/run_main.sh               # installs everything, then this
    python3 examples/train_digits.py        # once installed

As root it makes 4 network namespaces on a bridge whose links ``tc`` shapes
to ``--net`` (1 Gbit/s; ``pg_sparse.bench``'s harness) and runs one torchrun
agent in each, one rank each (c10d rendezvous). Otherwise, or with ``--net
none``, it runs ``torchrun --standalone --nproc_per_node=4`` on loopback and
says so: communication costs little there, so sparse cannot win on time.

The task: an MLP (64 -> 2048 -> 2048 -> 2048 -> 10, 8.5M parameters, a 34 MB
gradient) on scikit-learn's digits, AdamW, batch 16 per rank, one DDP
bucket. Every method trains the same model from the same seed
on the same data order; the
baselines on a gloo group (what DDP does today), Ok-Topk on the ``"sparse"``
backend at density 0.01 with ``register_comm_hook(..., optimizer=opt)``.
This process shows the progress (rank 0 reports its steps through a file)
and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from pg_sparse.bench.baselines import powersgd_groups_needed, register_hook, ring_bytes
from pg_sparse.bench.netns import NetError, Network
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from tqdm import tqdm

import pg_sparse

HERE = Path(__file__).resolve().parent
METHODS = ("dense", "bf16", "powersgd", "oktopk")
LABELS = {"dense": "dense DDP (gloo, fp32)", "bf16": "torch bf16 hook",
          "powersgd": "torch PowerSGD (rank 4)", "oktopk": "pg_sparse Ok-Topk d=0.01"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line arguments."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--net", default="1gbit",
                   help="link rate of the namespaces (tc syntax), or none: loopback")
    p.add_argument("--methods", default=",".join(METHODS),
                   help=f"comma-separated, of {', '.join(METHODS)}")
    p.add_argument("--density", type=float, default=0.01, help="Ok-Topk's density")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=16, help="per rank")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--bucket-cap-mb", type=float, default=64.0,
                   help="DDP's bucket size for every method (default: the whole model in one)")
    p.add_argument("--eval-every", type=int, default=7, help="steps between evaluations")
    p.add_argument("--hidden", type=int, default=2048, help="width of the 3 hidden layers")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=900.0, help="bound of the whole job (s)")
    args = p.parse_args(argv)
    if not 0.0 < args.density <= 1.0:
        p.error(f"--density must be in (0, 1], got {args.density}")
    bad = [m for m in args.methods.split(",") if m not in METHODS]
    if bad or "dense" not in args.methods.split(","):
        p.error(f"--methods: dense and any of {METHODS}, got {args.methods}")
    return args


# -- one rank ------------------------------------------------------------------
def rank_main(args: argparse.Namespace) -> int:
    """Train every method in turn; rank 0 writes the results file."""
    torch.set_num_threads(1)
    dist.init_process_group(backend="sparse")
    gloo = dist.new_group(backend="gloo")
    data = load_data(args.seed)
    n_params = sum(p.numel() for p in make_model(args.hidden, args.seed).parameters())
    groups = [dist.new_group(backend="gloo")
              for _ in range(powersgd_groups_needed(n_params, 25.0))]
    results = [train(m, args, data, gloo, groups) for m in args.methods.split(",")]
    if dist.get_rank() == 0:
        Path(os.environ["PG_MAIN_RESULTS"]).write_text(json.dumps({
            "params": n_params, "world_size": dist.get_world_size(),
            "link": os.environ.get("PG_SPARSE_BENCH_LINK", "loopback"),
            "runs": results}, indent=1))
    dist.barrier(group=gloo)
    dist.destroy_process_group()
    return 0


def load_data(seed: int) -> dict[str, Any]:
    """Digits (1797 8x8 images, shipped with scikit-learn), a stratified 75/25
    split fixed by ``seed``, standardized with the training set's statistics."""
    x, y = load_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.25, stratify=y,
                                              random_state=seed)
    sc = StandardScaler().fit(x_tr)
    f32, i64 = torch.float32, torch.long
    return {"x_train": torch.tensor(sc.transform(x_tr), dtype=f32),
            "y_train": torch.tensor(y_tr, dtype=i64),
            "x_test": torch.tensor(sc.transform(x_te), dtype=f32),
            "y_test": torch.tensor(y_te, dtype=i64)}


def make_model(hidden: int, seed: int) -> Any:
    """64 -> hidden -> hidden -> hidden -> 10, initialised from ``seed``."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                         nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, 10))


def hook(method: str, ddp: Any, opt: Any, args: argparse.Namespace, gloo: Any,
         groups: list[Any], steps: int) -> Any:
    """Register ``method``'s hook; returns the pg_sparse state, if any."""
    if method != "oktopk":
        register_hook(ddp, "gloo" if method == "dense" else method, args.density, gloo, groups)
        return None
    # 5% of the steps dense first, as in the convergence report's runs.
    state = pg_sparse.SparseState(density=args.density, warmup_steps=max(1, steps // 20))
    pg_sparse.hooks.register_comm_hook(ddp, state, pg_sparse.hooks.oktopk_hook, optimizer=opt)
    return state


def train(method: str, args: argparse.Namespace, data: dict[str, Any], gloo: Any,
          groups: list[Any]) -> dict[str, Any]:
    """One run; on rank 0 the test accuracy every ``--eval-every`` steps
    against the run's training seconds (the ranks' mean step time, summed;
    evaluation left out). Only rank 0 evaluates: the replicas are equal."""
    world = dist.get_world_size()
    model = make_model(args.hidden, args.seed)
    ddp = DDP(model, process_group=None if method == "oktopk" else gloo,
              bucket_cap_mb=args.bucket_cap_mb)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    dataset = TensorDataset(data["x_train"], data["y_train"])
    sampler = DistributedSampler(dataset, shuffle=True, seed=args.seed, drop_last=True)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    steps = args.epochs * len(loader)
    state = hook(method, ddp, opt, args, gloo, groups, steps)
    torch_bytes = ring_bytes(method, model, world)
    rank0 = dist.get_rank() == 0
    progress = Progress(method, steps) if rank0 else None
    times, sent, curve = [], [], []
    loss_fn = torch.nn.CrossEntropyLoss()
    dist.barrier(group=gloo)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            t0 = time.perf_counter()
            loss = loss_fn(ddp(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - t0)
            sent.append(state.summary()["bytes_sent"] if state is not None else torch_bytes)
            if progress:
                progress.step(loss.item())
            if len(times) % args.eval_every == 0 or len(times) == steps:
                mean_t = torch.tensor([sum(times)], dtype=torch.float64)
                dist.all_reduce(mean_t, group=gloo)
                curve.append((mean_t.item() / world, accuracy(model, data) if rank0 else 0.0))
    total = torch.tensor([sum(sent)], dtype=torch.float64)
    dist.all_reduce(total, group=gloo)
    return {"method": method, "steps": steps, "curve": curve, "accuracy": curve[-1][1],
            "train_s": curve[-1][0], "mb_per_rank": total.item() / world / 1e6}


def accuracy(model: Any, data: dict[str, Any]) -> float:
    """Fraction of the test set classified correctly."""
    with torch.no_grad():
        model.eval()
        pred = model(data["x_test"]).argmax(dim=1)
        model.train()
    return (pred == data["y_test"]).float().mean().item()


class Progress:
    """Rank 0's steps, appended to the file the launcher follows."""

    def __init__(self, method: str, steps: int) -> None:
        self.path = Path(os.environ["PG_MAIN_PROGRESS"])
        self.method, self.steps, self.done = method, steps, 0

    def step(self, loss: float) -> None:
        self.done += 1
        with self.path.open("a") as f:
            f.write(json.dumps({"method": self.method, "step": self.done,
                                "steps": self.steps, "loss": loss}) + "\n")


# -- the launcher --------------------------------------------------------------
def follow(path: Path, stop: threading.Event) -> None:
    """Draw a tqdm bar per method from rank 0's progress file."""
    bar, method, seen = None, None, 0
    while not stop.is_set():
        # Whole lines only: rank 0 may be writing the last one.
        lines = path.read_text().split("\n")[:-1] if path.exists() else []
        for line in lines[seen:]:
            rec = json.loads(line)
            if rec["method"] != method:
                if bar is not None:
                    bar.close()
                method = rec["method"]
                bar = tqdm(total=rec["steps"], desc=f"{LABELS[rec['method']]:>24}",
                           unit="step", dynamic_ncols=True)
            bar.n = rec["step"]
            bar.set_postfix(loss=f"{rec['loss']:.3f}")
        seen = len(lines)
        stop.wait(0.3)
    if bar is not None:
        bar.close()


def launch(args: argparse.Namespace, argv: list[str], work: Path) -> tuple[bool, str]:
    """Run the ranks: in namespaces when root can make them, else loopback."""
    env = {"PG_MAIN_PROGRESS": str(work / "progress.jsonl"),
           "PG_MAIN_RESULTS": str(work / "results.json"), "OMP_NUM_THREADS": "1",
           "PYTHONUNBUFFERED": "1"}
    if args.net != "none" and os.geteuid() == 0:
        try:
            with Network(hosts=4, rate=args.net, prefix="pgmain") as net:
                net.measure(seconds=1.0, max_bytes=1 << 27)
                print(f"network: 4 namespaces, one rank each, {net.link()}", flush=True)
                res = net.torchrun(argv, script=str(Path(__file__).resolve()),
                                   timeout=args.timeout, log_dir=work,
                                   env={**env, "PG_SPARSE_BENCH_LINK": net.link()})
                return res.ok, res.tail()
        except (NetError, OSError, subprocess.CalledProcessError) as e:
            print(f"network namespaces unavailable ({e}); running on loopback", flush=True)
    print("network: loopback (not root, or --net none): communication costs little "
          "here, so the sparse run cannot win on time", flush=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc_per_node=4", "--max_restarts=0", str(Path(__file__).resolve()), *argv]
    with open(work / "torchrun.log", "w") as log:
        rc = subprocess.call(cmd, env={**os.environ, **env}, cwd=str(HERE), stdout=log,
                             stderr=subprocess.STDOUT, timeout=args.timeout)
    return rc == 0, (work / "torchrun.log").read_text()[-4000:]


def time_to(curve: list[list[float]], target: float) -> float | None:
    """Training seconds at the first evaluation whose accuracy reaches ``target``."""
    return next((t for t, acc in curve if acc >= target - 1e-9), None)


def table(res: dict[str, Any]) -> str:
    """The final comparison, against the dense run."""
    runs = {r["method"]: r for r in res["runs"]}
    dense = runs["dense"]
    head = (f"{'method':<26} | {'accuracy':>8} | {'train s':>8} | "
            f"{'s to dense acc.':>15} | {'within 1 pt':>11} | {'MB sent/rank':>12}")
    rows = [head, "-" * len(head)]
    for r in runs.values():
        reach = time_to(r["curve"], dense["accuracy"])
        near = time_to(r["curve"], dense["accuracy"] - 0.01)

        def cell(t: float | None) -> str:
            return "not reached" if t is None else f"{t:.1f} ({t / dense['train_s']:.2f}x)"

        rows.append(f"{LABELS[r['method']]:<26} | {r['accuracy']:>8.2%} | "
                    f"{r['train_s']:>8.1f} | {cell(reach):>15} | {cell(near):>11} | "
                    f"{r['mb_per_rank']:>12.1f}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """Launch the job (or, under torchrun, be one of its ranks)."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if "RANK" in os.environ:
        return rank_main(args)
    with tempfile.TemporaryDirectory(prefix="pg_sparse-main-") as tmp:
        work = Path(tmp)
        stop = threading.Event()
        drawer = threading.Thread(target=follow, args=(work / "progress.jsonl", stop))
        drawer.start()
        try:
            ok, tail = launch(args, argv, work)
        finally:
            stop.set()
            drawer.join()
        if not ok or not (work / "results.json").exists():
            print(f"the job failed; the end of its log:\n{tail}", file=sys.stderr)
            return 1
        res = json.loads((work / "results.json").read_text())
    print(f"\npg_sparse on digits: {res['world_size']} ranks, {res['params']:,} parameters, "
          f"AdamW lr {args.lr}, one DDP bucket, {args.epochs} epochs, "
          f"batch {args.batch_size} per rank; "
          f"link: {res['link']}")
    print(table(res))
    print(f"\ntrain s: training wall-clock, evaluation left out. s to dense acc.: the "
          f"first evaluation (every {args.eval_every} steps) at or above dense's final "
          "accuracy, and in brackets that time over dense's training time. MB sent/rank: "
          "pg_sparse's counted bytes; for torch's hooks the ring-allreduce volume.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
