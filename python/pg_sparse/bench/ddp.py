"""``python -m pg_sparse.bench ddp``: DDP step time of real architectures
with every pg_sparse hook and torch's baselines, in one job.

Every method runs in the same processes, one after another, from the same
initial weights on the same batches, with DDP's overlap on:

- ``nocomm``: the model without DDP (the floor: no communication at all);
- ``gloo``: plain DDP on a gloo group; ``nccl``: plain DDP on an NCCL group
  (``--device cuda`` only); ``bf16`` / ``fp16``: DDP with torch's
  ``bf16_compress_hook`` / ``fp16_compress_hook``; ``powersgd``: torch's
  PowerSGD hook (rank 4, from iteration 2); these three on the baseline
  group (gloo on CPU, NCCL with ``--device cuda``);
- ``acpsgd``: pg_sparse's ACP-SGD hook (rank 4, from iteration 2) on the
  ``"sparse"`` default group's dense allreduce;
- ``auto``: ``SparseState(algo="auto")``: per bucket dense or the sparse
  algorithm predicted fastest on the measured link;
- ``adtopk``: ``pg_sparse.adtopk`` (every row's largest entry beside the
  global top-k; warm-up 2 iterations; bytes from its ring-allgather model);
- ``dense``, ``oktopk``, ``topka``, ``topkdsa``, ``gtopk``, ``gaussiank``:
  pg_sparse hooks on the ``"sparse"`` default group; a suffix ``+bf16`` or
  ``+fp16`` (``oktopk+bf16``) sends the values in that type
  (``SparseState(wire_dtype=...)``), a suffix ``@node`` (``oktopk@node``)
  reduces hierarchically: dense inside a node (LOCAL_WORLD_SIZE ranks),
  sparse across nodes (``SparseState(hierarchy="node")``).

With ``--device cuda`` each rank trains on GPU LOCAL_RANK and the phases
are timed with ``torch.cuda.synchronize()`` at their ends.

Without RANK/WORLD_SIZE in the environment it launches itself under
``torch.distributed.run --standalone``; under torchrun, mpirun or a harness
that sets them it runs as one rank. Only rank 0 writes the outputs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from typing import Any

from .baselines import TORCH_METHODS, powersgd_elements, powersgd_groups_needed, register_hook
from .common import context, ranks_on_machine

SPARSE_METHODS = ("dense", "oktopk", "topka", "topkdsa", "gtopk", "gaussiank")
METHODS = ("nocomm", "gloo", "bf16", "powersgd", *SPARSE_METHODS)  # the default list
GPU_METHODS = ("nocomm", "nccl", "bf16", "powersgd", *SPARSE_METHODS)  # --device cuda
ALL_METHODS = ("nocomm", *TORCH_METHODS, *SPARSE_METHODS, "acpsgd", "auto", "adtopk")
PHASES = ("forward_s", "backward_compute_s", "backward_wait_s", "optimizer_s")
# Per step and rank: step, forward, backward, backward compute, wait, optimizer.
_TIMES = ("step_s", "forward_s", "backward_s", *PHASES[1:])
_PARAM_CHECK_MAX = 50_000_000  # compare final parameters with gloo's up to this size
_WIRES = {"bf16": "bfloat16", "fp16": "float16"}


def split_method(method: str) -> tuple[str, str | None, str | None]:
    """``"oktopk+bf16@node"`` -> ``("oktopk", "bfloat16", "node")``: the
    wire type and the hierarchy (``SparseState(hierarchy=...)``), each
    None when not given."""
    rest, _, hierarchy = method.partition("@")
    base, _, wire = rest.partition("+")
    if wire and (base not in SPARSE_METHODS or wire not in _WIRES):
        raise SystemExit(f"ddp: {method!r}: a wire suffix is +bf16 or +fp16, "
                         f"after one of {SPARSE_METHODS}")
    if hierarchy and (base not in SPARSE_METHODS or hierarchy not in ("node", "auto")):
        raise SystemExit(f"ddp: {method!r}: a hierarchy suffix is @node or @auto, "
                         f"after one of {SPARSE_METHODS}")
    return base, _WIRES.get(wire), hierarchy or None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The suite's options."""
    parser.add_argument("--out", required=True, help="output folder (rank 0 writes)")
    parser.add_argument("--model", default="mlp25m",
                        help="tiny | mlp25m | resnet50 | bert-base | gpt2")
    parser.add_argument("--methods", nargs="+", default=None,
                        help=f"some of {' '.join(ALL_METHODS)} (commas allowed; default "
                             f"{','.join(METHODS)}, with nccl for gloo on cuda)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: one GPU per rank (LOCAL_RANK), baselines on NCCL")
    parser.add_argument("--local-size", type=int, default=0,
                        help="ranks per node for @node methods (0: LOCAL_WORLD_SIZE)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per method")
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed steps per method first (at least 3)")
    parser.add_argument("--batch", type=int, default=0, help="per-rank batch (0: model's)")
    parser.add_argument("--seq", type=int, default=0,
                        help="sequence length, or ResNet image side (0: model's)")
    parser.add_argument("--density", type=float, default=0.01)
    parser.add_argument("--nproc", type=int, default=4, help="ranks when launching itself")
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0)
    parser.add_argument("--bucket-view", action="store_true",
                        help="DDP gradient_as_bucket_view=True")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads per rank (0: cores / local ranks)")
    parser.add_argument("--lr", type=float, default=1e-3, help="SGD learning rate")
    parser.add_argument("--seed", type=int, default=0)


def _to_argv(args: argparse.Namespace) -> list[str]:
    """The options again, for the ranks this process launches (without
    ``--nproc``: torchrun's own parser would take it for an abbreviation of
    its ``--nproc-per-node`` even after the module name)."""
    argv = ["--out", str(args.out), "--model", args.model, "--methods", *_methods(args),
            "--steps", str(args.steps), "--warmup", str(args.warmup),
            "--batch", str(args.batch), "--seq", str(args.seq),
            "--density", repr(args.density),
            "--bucket-cap-mb", repr(args.bucket_cap_mb), "--threads", str(args.threads),
            "--lr", repr(args.lr), "--seed", str(args.seed), "--device", args.device,
            "--local-size", str(args.local_size)]
    return argv + (["--bucket-view"] if args.bucket_view else [])


def _methods(args: argparse.Namespace) -> list[str]:
    given = args.methods or (GPU_METHODS if args.device == "cuda" else METHODS)
    out = [m for item in given for m in item.split(",") if m]
    bad = [m for m in out if split_method(m)[0] not in ALL_METHODS]
    if bad:
        raise SystemExit(f"ddp: unknown method(s) {bad}; choose from {ALL_METHODS}")
    if "nccl" in out and args.device != "cuda":
        raise SystemExit("ddp: method nccl needs --device cuda")
    return out


def baseline_of(device: str) -> str:
    """The plain-DDP method the ratios and parameter checks refer to."""
    return "nccl" if device == "cuda" else "gloo"


def _to_device(batch: Any, device: Any) -> Any:
    if isinstance(batch, (tuple, list)):
        return type(batch)(_to_device(b, device) for b in batch)
    return batch.to(device, non_blocking=True)


def main(args: argparse.Namespace) -> int:
    """Run as one rank when RANK/WORLD_SIZE are set, else launch the ranks."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return launch(args)
    result = run_ddp_suite(args)
    if result["rank"] == 0:
        from .ddp_report import write_outputs

        write_outputs(args.out, result)
    return 0


def launch(args: argparse.Namespace) -> int:
    """``torch.distributed.run --standalone --nproc_per_node=NPROC`` of this suite."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={args.nproc}", "-m", "pg_sparse.bench", "ddp", *_to_argv(args)]
    print("launching:", " ".join(cmd), flush=True)
    return subprocess.call(cmd)


def _sync_max(values: Any, group: Any) -> Any:
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t


def run_ddp_suite(args: argparse.Namespace) -> dict[str, Any]:
    """Run every method in this rank's process (initialising the default
    ``"sparse"`` group if needed) and return ``{"rank", "context", "config",
    "rows"}``; the rows' figures are maxima over ranks, the same on every rank."""
    import copy
    import gc

    import torch
    import torch.distributed as dist

    import pg_sparse

    from .models import get_model

    methods = _methods(args)
    warmup = max(3, args.warmup)
    spec = get_model(args.model)
    batch, seq = args.batch or spec.batch, args.seq or spec.seq
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group("sparse")
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")  # timing figures, and the CPU baselines
    baseline = baseline_of(args.device)
    nccl = dist.new_group(backend="nccl") if cuda else None
    threads = args.threads or max(1, (os.cpu_count() or 1) // ranks_on_machine(world))
    torch.set_num_threads(threads)
    transport, why = pg_sparse.choose_transport()
    if cuda:  # CUDA tensors take their own transport (NCCL unless told otherwise)
        transport, why = str(pg_sparse.param("PG_SPARSE_CUDA_TRANSPORT")), "CUDA tensors"
    ctx = context(world_size=world, device=args.device,
                  transport=f"sparse over {transport} ({why}); baselines on {baseline}")
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    base = spec.build().to(device)
    build_s = time.perf_counter() - t0
    numel = sum(p.numel() for p in base.parameters() if p.requires_grad)
    # PowerSGD: a group per bucket (see PowerSGDPerBucket).
    n_groups = powersgd_groups_needed(numel, args.bucket_cap_mb)
    psgd_groups = [dist.new_group(backend=baseline) for _ in range(n_groups)] \
        if "powersgd" in methods else []
    gen = torch.Generator().manual_seed(args.seed * 7919 + rank + 1)
    batches = [_to_device(spec.make_batch(gen, batch, seq), device)
               for _ in range(warmup + args.steps)]
    groups = {"gloo": gloo, "baseline": nccl if cuda else gloo, "powersgd": psgd_groups}
    config = {"model": spec.name, "shape": spec.describe(batch, seq), "numel": numel,
              "batch": batch, "seq": seq, "steps": args.steps, "warmup": warmup,
              "density": args.density, "world_size": world, "threads_per_rank": threads,
              "bucket_cap_mb": args.bucket_cap_mb, "gradient_as_bucket_view": args.bucket_view,
              "optimizer": f"SGD(lr={args.lr}, momentum=0.9)", "methods": methods,
              "build_s": build_s, "device": args.device, "baseline": baseline,
              "local_size": args.local_size or None}
    if rank == 0:
        print(ctx.line(), flush=True)
        print(f"model {spec.name}: {config['shape']}; {numel:,} parameters; "
              f"{warmup} warm-up + {args.steps} timed steps per method; "
              f"{threads} torch thread(s) per rank", flush=True)
    rows: list[dict[str, Any]] = []
    ref_params = None
    for method in methods:
        torch.manual_seed(args.seed + rank)  # same dropout masks for every method
        model = copy.deepcopy(base)
        try:
            row, params = _run_method(method, model, spec, batches, warmup, args,
                                      groups, world, numel)
        except Exception as e:  # keep going: one method's failure is a result too
            row, params = {"model": spec.name, "method": method, "error": repr(e)}, None
            if rank == 0:
                print(f"  {method}: FAILED {e!r}", flush=True)
        if params is not None and method == baseline:
            ref_params = params
        if params is not None and ref_params is not None:
            row[f"param_max_abs_diff_vs_{baseline}"] = float((params - ref_params).abs().max())
        rows.append(row)
        if rank == 0 and "error" not in row:
            print(f"  {method:>9}: step {row['step_s_median'] * 1e3:8.1f} ms "
                  f"[{row['step_s_min'] * 1e3:.1f}-{row['step_s_max'] * 1e3:.1f}]  "
                  f"bytes/rank {row['bytes_per_rank']:,.0f}", flush=True)
        del model, params
        gc.collect()
        dist.barrier(group=gloo)
    _ratios(rows, baseline)
    for r in rows:
        r["link"] = ctx.link  # a bandwidth sweep groups rows by it
    return {"rank": rank, "context": ctx, "config": config, "rows": rows}


def _run_method(method: str, model: Any, spec: Any, batches: list[Any], warmup: int,
                args: argparse.Namespace, groups: dict[str, Any], world: int,
                numel: int) -> tuple[dict[str, Any], Any]:
    """Warm up, then time ``args.steps`` steps of one method. ``groups``:
    ``gloo`` (CPU figures), ``baseline`` (torch's hooks) and ``powersgd``
    (one per bucket)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    import pg_sparse

    ddp, state = model, None
    base, wire, hierarchy = split_method(method)
    gloo = groups["gloo"]
    if method != "nocomm":
        group = None
        if method in TORCH_METHODS:
            group = gloo if method == "gloo" else groups["baseline"]
        ddp = DDP(model, process_group=group, bucket_cap_mb=args.bucket_cap_mb,
                  gradient_as_bucket_view=args.bucket_view)
        if wire is not None or hierarchy is not None:
            state = pg_sparse.SparseState(
                density=args.density, wire_dtype=None if wire is None else getattr(torch, wire),
                hierarchy=hierarchy or "flat", local_size=args.local_size or None)
        state = register_hook(ddp, base, args.density, group, groups["powersgd"], state)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    ready = [0.0]

    def mark(_p: torch.Tensor) -> None:
        ready[0] = time.perf_counter()

    handles = [p.register_post_accumulate_grad_hook(mark)
               for p in model.parameters() if p.requires_grad]
    if args.device == "cuda":  # a phase ends when the GPU is done with it
        def pc() -> float:
            torch.cuda.synchronize()
            return time.perf_counter()
    else:
        pc = time.perf_counter
    times: list[list[float]] = []
    stats: list[list[float]] = []
    for i, b in enumerate(batches):
        ready[0] = 0.0
        t0 = pc()
        loss = spec.loss(ddp, b)
        t1 = pc()
        loss.backward()
        t2 = pc()
        opt.step()
        opt.zero_grad(set_to_none=not args.bucket_view)
        t3 = pc()
        if i < warmup:
            continue
        last = ready[0] if ready[0] else t2
        times.append([t3 - t0, t1 - t0, t2 - t1, last - t1, t2 - last, t3 - t2])
        if isinstance(state, pg_sparse.SparseState):
            s = state.summary()
            stats.append([s["bytes_sent"], s["time_s"], s["global_selected"], s["n"],
                          s["time_select_s"], s["time_reduce_s"], s["time_gather_s"]])
        elif hasattr(state, "summary"):  # ADTopk: bytes and picks, no core timers
            s = state.summary()
            stats.append([s["bytes_sent"], float("nan"), s["global_selected"], s["n"],
                          float("nan"), float("nan"), float("nan")])
    for h in handles:
        h.remove()
    per_step = _sync_max(times, gloo)  # each step's figures: the slowest rank's
    sent = {"powersgd": lambda: powersgd_elements(model),
            "acpsgd": lambda: powersgd_elements(model, factors=1.0)}
    row = _row(method, spec.name, per_step, world, numel,
               sent[method]() if method in sent else 0, args.device)
    if stats:
        st = _sync_max(stats, gloo)
        row["bytes_per_rank"] = float(st[:, 0].mean())
        row["bytes_source"] = "pg_sparse stats (bytes_sent, max over ranks, mean over steps)"
        row["hook_time_s"] = _or_none(float(st[:, 1].median()))
        row["density"] = float((st[:, 2] / st[:, 3]).mean())
        # The core's own phases, summed over buckets (slowest rank, median).
        for j, phase in enumerate(("select", "reduce", "gather")):
            row[f"hook_{phase}_s"] = _or_none(float(st[:, 4 + j].median()))
    auto = getattr(state, "_auto", None)
    if auto is not None:  # each bucket's choice and what it rested on (rank 0's view)
        row["auto_buckets"] = {str(i): {"algo": c.algo, **auto.stats(i)}
                               for i, c in auto.buckets.items()}
    params = None
    if numel <= _PARAM_CHECK_MAX:
        params = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
    del ddp, opt, state
    return row, params


def _or_none(v: float) -> float | None:
    """None for a figure a method does not report (NaN)."""
    return None if v != v else v


def _row(method: str, model: str, per_step: Any, world: int, numel: int,
         psgd_elements: float = 0, device: str = "cpu") -> dict[str, Any]:
    """One method's row from its per-step (max over ranks) times."""
    med = per_step.quantile(0.5, dim=0)  # the median (mean of the middle two)
    step = per_step[:, 0]
    ring = 2.0 * (world - 1) / world
    row: dict[str, Any] = {
        "model": model, "method": method,
        "group": "-" if method == "nocomm" else (
            ("gloo" if method == "gloo" else baseline_of(device)) if method in TORCH_METHODS
            else "sparse"),
        "steps": int(per_step.shape[0]), "world_size": world, "numel": numel,
        "step_s_median": float(med[0]), "step_s_min": float(step.min()),
        "step_s_max": float(step.max()), "step_s_samples": [float(x) for x in step],
        **{k: float(med[i]) for i, k in enumerate(_TIMES) if i > 0},
        "hook_time_s": None, "density": 1.0 if method != "nocomm" else 0.0,
    }
    if method == "nocomm":
        row["bytes_per_rank"], row["bytes_source"] = 0.0, "no communication"
    elif method in ("gloo", "nccl", "auto", "adtopk") or \
            split_method(method)[0] in SPARSE_METHODS:
        row["bytes_per_rank"] = ring * 4 * numel
        row["bytes_source"] = "ring model 2(P-1)/P x 4 B x n"
    elif method in ("bf16", "fp16"):
        row["bytes_per_rank"] = ring * 2 * numel
        row["bytes_source"] = "ring model 2(P-1)/P x 2 B x n"
    elif method in ("powersgd", "acpsgd"):
        row["bytes_per_rank"] = ring * 4 * psgd_elements
        row["density"] = psgd_elements / numel  # values sent per gradient entry
        row["bytes_source"] = (f"estimate: ring model over {method}'s factors "
                               "(P and Q, or one of them) and the uncompressed tensors")
    row["bytes_model_dense"] = ring * 4 * numel
    return row


def _ratios(rows: list[dict[str, Any]], baseline: str = "gloo") -> None:
    """Ratios to the baseline (gloo or nccl), bf16 and the nocomm floor, in place."""
    by = {r["method"]: r for r in rows if "error" not in r}
    for r in rows:
        if "error" in r:
            continue
        for ref in (baseline, "bf16", "nocomm"):
            other = by.get(ref)
            r[f"ratio_to_{ref}"] = (r["step_s_median"] / other["step_s_median"]
                                    if other else None)
        floor = by.get("nocomm")
        r["over_nocomm_s"] = r["step_s_median"] - floor["step_s_median"] if floor else None

