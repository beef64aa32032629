"""Train one task with every method, several seeds, in one distributed job.

Methods (same model, data order, recipe and initial weights per seed):

- ``dense``: DDP on a gloo group, no hook (fp32 allreduce);
- ``bf16``: the same with torch's ``bf16_compress_hook``;
- ``powersgd``: torch's PowerSGD hook (rank 4, error feedback, warm start),
  vanilla allreduce for the first ``--warmup`` steps;
- ``ALGO@DENSITY``: a pg_sparse hook (``oktopk``, ``topka``, ``topkdsa``,
  ``gtopk``, ``gaussiank``) on the ``"sparse"`` group after ``--warmup``
  dense steps; ``ALGO+mc@DENSITY`` adds DGC's momentum correction in the
  hook (``SparseState(momentum=...)``) with plain SGD in the optimizer;
  ``ALGO+adam@DENSITY`` (AdamW tasks) runs Adam in the hook on the sparse
  stream (``SparseState(precondition="adam")``: an entry that waited ``a``
  steps in the residuals gets the ``a`` Adam steps it missed) with SGD (the
  recipe's weight decay) in the optimizer and the recipe's gradient clipping
  inside the hook (``max_grad_norm``; its output is the update), ranking
  entries by raw size (``adam_select="gradient"``, as the first runs did);
  ``ALGO+adam+norm@DENSITY`` ranks them by their pending Adam step
  (``adam_select="normalized"``, the library's default);
  ``ALGO+opt@DENSITY`` keeps the recipe's own optimizer (AdamW, momentum SGD)
  and registers it with the hook (``register_comm_hook(..., optimizer=opt)``:
  the library steps Adam's moments for the sparse stream);
  ``+noclip`` runs any method without gradient clipping; ``ALGO+node@DENSITY``
  reduces hierarchically (dense inside "nodes" of 2 ranks, sparse across:
  ``SparseState(hierarchy="node", local_size=2)``); ``auto@DENSITY`` lets
  ``SparseState(algo="auto")`` choose dense or a sparse algorithm per bucket;
  ``adtopk@DENSITY`` runs ADTopk (``pg_sparse.adtopk``: every row's largest
  entry beside the global top-k).

Launch with torchrun (4 ranks on CPU)::

    torchrun --standalone --nproc_per_node=4 train.py --task digits --out out/

or let it launch itself: without RANK in the environment it starts
``--nproc`` ranks with torchrun, or, with ``--net RATE``, one rank in each of
``--nproc`` network namespaces on a bridge whose links are shaped to RATE with
tc (``pg_sparse.bench``'s harness; root only), so the wall-clock times are
those of that link. Rank 0 writes ``OUT/TASK.json`` after every run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from tasks import TASKS, Task, optimizer  # noqa: E402

SPARSE = ("oktopk", "topka", "topkdsa", "gtopk", "gaussiank")
TORCH = ("dense", "bf16", "powersgd")


def default_methods(densities: list[float], sgd: bool) -> list[str]:
    """dense, bf16, PowerSGD, then every sparse hook at every density, and
    Ok-Topk with momentum correction (SGD) or Adam in the hook (AdamW)."""
    extra = [f"oktopk+{'mc' if sgd else 'adam+norm'}@{d:g}" for d in densities]
    return [*TORCH, *(f"{a}@{d:g}" for d in densities for a in SPARSE), *extra]


@dataclass
class Method:
    """A method name parsed: ``dense``, ``bf16``, ``powersgd`` or
    ``ALGO[+FLAG...]@DENSITY`` with flags ``mc`` (momentum correction in the
    hook, plain SGD in the optimizer), ``adam`` (Adam in the hook, SGD in
    the optimizer), ``norm`` (with ``adam``: rank entries by their pending
    Adam step), ``est=NAME`` (the threshold estimator, one of
    ``pg_sparse.estimators()``), ``noclip`` (no gradient clipping; also on dense, bf16
    and powersgd), ``exact`` (exact thresholds every step: tau_prime = 1),
    ``wN`` (N dense warm-up steps instead of the run's default),
    ``gfF`` (Ok-Topk's ``global_factor``: G targets F k entries) and
    ``dwN`` (density warm-up: from 0.25 down to DENSITY over the first N
    sparse steps)."""

    name: str
    algo: str
    density: float | None = None
    mc: bool = False
    adam: bool = False
    norm: bool = False
    estimator: str | None = None
    noclip: bool = False
    exact: bool = False
    warmup: int | None = None
    density_warmup: int = 0
    node: bool = False
    opt: bool = False
    global_factor: float | None = None  # None: the library's default


def parse_method(m: str) -> Method:
    head, _, dens = m.partition("@")
    algo, *flags = head.split("+")
    out = Method(m, algo, float(dens) if dens else None)
    if algo in TORCH and not dens and set(flags) <= {"noclip"}:
        out.noclip = bool(flags)
        return out
    for f in flags:
        if f == "noclip":
            out.noclip = True
        elif f == "mc":
            out.mc = True
        elif f == "adam":
            out.adam = True
        elif f == "opt":
            out.opt = True
        elif f == "norm":
            out.norm = True
        elif f.startswith("est="):
            out.estimator = f[4:]
        elif f == "exact":
            out.exact = True
        elif f == "node":
            out.node = True
        elif f[:1] == "w" and f[1:].isdigit():
            out.warmup = int(f[1:])
        elif f[:2] == "gf" and f[2:].replace(".", "", 1).isdigit():
            out.global_factor = float(f[2:])
        elif f[:2] == "dw" and f[2:].isdigit():
            out.density_warmup = int(f[2:])
        else:
            algo = ""
    if algo not in (*SPARSE, "auto", "adtopk") or out.density is None or \
            (out.norm and not out.adam) or (out.opt and (out.adam or out.mc)):
        raise argparse.ArgumentTypeError(
            f"method {m!r}: one of {TORCH}[+noclip] or "
            f"ALGO[+mc|+adam[+norm]|+opt][+est=NAME][+noclip][+exact][+node][+wN][+dwN][+gfF]"
            f"@DENSITY, "
            f"ALGO in {SPARSE}, auto or adtopk")
    return out


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", choices=sorted(TASKS), required=True)
    p.add_argument("--out", required=True, help="folder for TASK.json")
    p.add_argument("--methods", default=None,
                   help="comma-separated (default: dense,bf16,powersgd and every sparse "
                        "hook at every --densities)")
    p.add_argument("--densities", default="0.01,0.001")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--steps", type=int, default=None, help="override the recipe's steps")
    p.add_argument("--warmup", type=int, default=None,
                   help="dense steps before a compressed method starts (default: 5%% "
                        "of the steps, at least 2: DDP rebuilds its buckets after step 1)")
    p.add_argument("--lr-decay", choices=["recipe", "constant", "cosine"], default="recipe",
                   help="learning-rate schedule after the warm-up (default: the recipe's); "
                        "cosine decays to a tenth of lr at the last step")
    p.add_argument("--tag", default="", help="suffix of the output file (TASK-TAG.json)")
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--net", default=None, help="link rate, e.g. 1gbit: run in namespaces")
    p.add_argument("--timeout", type=float, default=7200.0)
    args = p.parse_args(argv)
    args.density_list = [float(d) for d in args.densities.split(",") if d]
    for m in (args.methods or "").split(","):
        if m:
            parse_method(m)
    args.seed_list = [int(s) for s in args.seeds.split(",") if s]
    return args


# -- one run ----------------------------------------------------------------
def _hook(ddp: DDP, method: str, warmup: int, recipe_momentum: float, nesterov: bool,
          gloo: Any, psgd_groups: list[Any], clip: float = 0.0,
          opt: torch.optim.Optimizer | None = None) -> Any:
    from pg_sparse.bench.baselines import PowerSGDPerBucket, register_hook

    import pg_sparse

    spec = parse_method(method)
    if spec.algo == "dense":
        return None
    if spec.algo == "powersgd":
        return _register_psgd(ddp, PowerSGDPerBucket(psgd_groups, start_iter=warmup))
    if spec.algo == "bf16":
        return register_hook(ddp, "bf16", 0.0, gloo)
    if spec.algo == "adtopk":
        from pg_sparse.adtopk import ADTopkState

        state = ADTopkState(density=spec.density, warmup_steps=warmup)
        ddp.register_comm_hook(state, pg_sparse.hooks.adtopk_hook)
        return state
    state = pg_sparse.SparseState(
        algo="auto" if spec.algo == "auto" else None,
        density=spec.density, warmup_steps=warmup, tau_prime=1 if spec.exact else 32,
        density_warmup_steps=spec.density_warmup,
        momentum=recipe_momentum if spec.mc else 0.0, nesterov=nesterov and spec.mc,
        precondition="adam" if spec.adam else None,
        max_grad_norm=clip if spec.adam else 0.0,
        # +adam: as the first runs; +opt: the library default (normalized)
        adam_select="normalized" if spec.norm or spec.opt else "gradient",
        estimator=spec.estimator,
        **({} if spec.global_factor is None else {"global_factor": spec.global_factor}),
        hierarchy="node" if spec.node else "flat", local_size=2 if spec.node else None)
    if spec.algo == "auto" and not spec.opt:
        ddp.register_comm_hook(state, pg_sparse.hooks.sparse_hook)
        return state
    if spec.algo == "auto":
        pg_sparse.hooks.register_comm_hook(ddp, state, pg_sparse.hooks.sparse_hook,
                                           optimizer=opt)
        return state
    if spec.opt:
        pg_sparse.hooks.register_comm_hook(ddp, state, pg_sparse.hooks.HOOKS[spec.algo],
                                           optimizer=opt)
        return state
    return register_hook(ddp, spec.algo, spec.density, gloo, state=state)


def _register_psgd(ddp: DDP, state: Any) -> Any:
    from pg_sparse.bench.baselines import powersgd_dispatch

    ddp.register_comm_hook(state, powersgd_dispatch)
    return state


def run_one(task: Task, method: str, seed: int, warmup: int, gloo: Any,
            psgd_groups: list[Any]) -> dict[str, Any]:
    """Train ``task`` with ``method`` from seed ``seed``; on every rank the
    curve (step, metric, cumulative bytes and seconds) and summary."""

    from pg_sparse.bench.baselines import ring_bytes

    rank, world = dist.get_rank(), dist.get_world_size()
    r = task.recipe
    spec = parse_method(method)
    warmup = spec.warmup if spec.warmup is not None else warmup
    torch.manual_seed(seed)
    model = task.build()
    group = gloo if spec.algo in TORCH else None
    ddp = DDP(model, process_group=group)
    recipe_clip = 0.0 if spec.noclip else r.clip
    opt, sched = optimizer(task, list(model.parameters()), plain_sgd=spec.mc or spec.adam)
    state = _hook(ddp, method, warmup, r.momentum, r.optimizer == "nesterov", gloo,
                  psgd_groups, recipe_clip, opt)
    clip = 0.0 if spec.adam else recipe_clip  # Adam in the hook clips there
    gen = torch.Generator().manual_seed(1_000_003 * seed + rank)  # each rank its own data
    dense_bytes = ring_bytes("dense", model, world)
    step_bytes = ring_bytes(spec.algo, model, world)
    curve: dict[str, list[float]] = {"step": [], "metric": [], "bytes": [], "seconds": [],
                                     "train_loss": []}
    times, sent, selected, losses = [], [], [], []
    for step in range(1, r.steps + 1):
        b = task.batch(gen, r.batch)
        t0 = time.perf_counter()
        loss = task.loss(ddp, b)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
        losses.append(loss.detach().item())
        if hasattr(state, "summary"):  # SparseState, ADTopkState
            s = state.summary()
            sent.append(s["bytes_sent"])
            selected.append(s["global_selected"] / s["n"] if s["n"] else 1.0)
        elif spec.algo == "powersgd" and step <= warmup:
            sent.append(dense_bytes)
        else:
            sent.append(step_bytes)
        if step % r.eval_every == 0 or step == r.steps:
            dist.barrier(group=gloo)
            metric = task.evaluate(model) if rank == 0 else 0.0
            curve["step"].append(step)
            curve["metric"].append(metric)
            curve["train_loss"].append(sum(losses[-r.eval_every:]) / len(losses[-r.eval_every:]))
            dist.barrier(group=gloo)
    # Per step: the ranks' mean time and the largest bytes sent. The ranks
    # move in step, so each one's summed step times is the run's wall-clock
    # (evaluation left out); a sum of per-step maxima would add every step's
    # scheduling jitter (with 4 ranks on 2 cores, 0.3 s a step of 2).
    per = torch.tensor([times, sent], dtype=torch.float64)
    dist.all_reduce(per[0], op=dist.ReduceOp.SUM, group=gloo)
    per[0] /= world
    dist.all_reduce(per[1], op=dist.ReduceOp.MAX, group=gloo)
    m = torch.tensor(curve["metric"], dtype=torch.float64)
    dist.broadcast(m, 0, group=gloo)
    cum_t, cum_b = per[0].cumsum(0), per[1].cumsum(0)
    curve["metric"] = m.tolist()
    curve["seconds"] = [float(cum_t[s - 1]) for s in curve["step"]]
    curve["bytes"] = [float(cum_b[s - 1]) for s in curve["step"]]
    sparse_steps = selected[warmup:] if selected else []
    return {
        "task": task.name, "method": method, "algo": spec.algo, "density": spec.density,
        "momentum_correction": spec.mc, "adam_in_hook": spec.adam, "seed": seed,
        "warmup": warmup, "world_size": world,
        "params": sum(p.numel() for p in model.parameters()),
        "final": curve["metric"][-1], "curve": curve,
        "bytes_per_step": float(per[1][warmup:].mean()),
        "bytes_per_step_dense": dense_bytes,
        "bytes_source": "pg_sparse stats" if hasattr(state, "summary") else "ring model",
        "achieved_density": sum(sparse_steps) / len(sparse_steps) if sparse_steps else None,
        "step_s_median": float(per[0].median()), "train_s": float(cum_t[-1]),
    }


# -- the job ---------------------------------------------------------------
def rank_main(args: argparse.Namespace) -> int:
    from pg_sparse.bench.baselines import powersgd_groups_needed
    from pg_sparse.bench.common import context

    import pg_sparse  # noqa: F401 - registers the "sparse" backend

    dist.init_process_group("sparse")
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    torch.set_num_threads(1)
    task = TASKS[args.task](args.steps)
    if args.lr_decay != "recipe":
        task.recipe.lr_decay = args.lr_decay
    methods = args.methods.split(",") if args.methods else \
        default_methods(args.density_list, task.recipe.optimizer != "adamw")
    numel = sum(p.numel() for p in task.build().parameters())
    psgd_groups = [dist.new_group(backend="gloo")
                   for _ in range(powersgd_groups_needed(numel, 25.0))]
    warmup = args.warmup if args.warmup is not None else max(2, task.recipe.steps // 20)
    ctx = context(world_size=world, transport="sparse hooks on \"sparse\"; "
                  "dense, bf16 and PowerSGD on gloo")
    out = Path(args.out) / (f"{args.task}-{args.tag}.json" if args.tag else f"{args.task}.json")
    doc: dict[str, Any] = {"context": ctx.__dict__, "task": args.task, "metric": task.metric,
                           "recipe": task.recipe.__dict__, "params": numel,
                           "warmup": warmup, "runs": []}
    if rank == 0:
        print(ctx.line(), flush=True)
        print(f"task {args.task}: {numel:,} parameters, recipe {task.recipe}, "
              f"{warmup} dense warm-up steps", flush=True)
        out.parent.mkdir(parents=True, exist_ok=True)
    for seed in args.seed_list:
        for method in methods:
            t0 = time.perf_counter()
            res = run_one(task, method, seed, warmup, gloo, psgd_groups)
            if rank == 0:
                doc["runs"].append(res)
                out.write_text(json.dumps(doc, indent=1))
                d = res["achieved_density"]
                print(f"seed {seed} {method:>16}: {task.metric} {res['final']:.3f}  "
                      f"bytes/step {res['bytes_per_step']:,.0f}  "
                      f"step {res['step_s_median'] * 1e3:.1f} ms"
                      + (f"  density {d:.4f}" if d is not None else "")
                      + f"  ({time.perf_counter() - t0:.0f} s)", flush=True)
    dist.barrier(group=gloo)
    dist.destroy_process_group()
    return 0


def launch(args: argparse.Namespace, argv: list[str]) -> int:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    if args.net:
        from pg_sparse.bench.netns import Network

        with Network(hosts=args.nproc, rate=args.net, prefix="pgcv") as net:
            net.measure(seconds=1.0, max_bytes=1 << 28)
            print(f"network: {args.nproc} namespaces, {net.link()}", flush=True)
            res = net.torchrun(argv, script=str(Path(__file__).resolve()),
                               timeout=args.timeout, stream=True,
                               env={"PG_SPARSE_BENCH_LINK": net.link()})
            return 0 if res.ok else 1
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={args.nproc}", "--max_restarts=0", __file__, *argv]
    return subprocess.call(cmd, env=env, cwd=str(HERE), timeout=args.timeout)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = arguments(argv)
    if "RANK" in os.environ:
        return rank_main(args)
    return launch(args, argv)


if __name__ == "__main__":
    sys.exit(main())
