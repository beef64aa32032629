"""``collectives`` suite: one call of every algorithm and of dense, per
bucket size and density, with torch's own gloo allreduce as the same-run
baseline.

A rank program. Under a launcher (RANK and WORLD_SIZE set by torchrun, or
mapped from mpirun's variables when pg_sparse is imported) it runs as one
rank; otherwise it launches itself on ``--nproc`` local ranks with
``python -m torch.distributed.run --standalone`` (or ``mpirun`` with
``--launcher mpirun``). Nothing assumes one host: LOCAL_RANK only picks the
CUDA device, and only rank 0 writes.

Per case every rank feeds its own gradient-like data (a component shared by
all ranks plus per-rank noise, heavy-tailed, different every call) through
``SparseState(algo=..., density=..., warmup_steps=0).native_bucket(...)``,
``--warmup`` untimed calls first so thresholds and regions reach their steady
state (Ok-Topk reuses them), then ``--repeats`` timed calls. A call's time is
the slowest rank's (each call starts after a barrier); its words are the
largest ``words_sent`` of any rank, held against the lower bound 2k(P-1)/P
and the upper bound 3(k + kg)(P-1)/P (kg: Ok-Topk's global target,
``global_factor`` k; 6k(P-1)/P at factor 1), and the dense volume 2n(P-1)/P (the ring
model the backend counts dense allreduce by). The first call (exact
thresholds, first repartition) is reported apart, as ``first_s``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .common import (
    Context,
    context,
    heavy_tailed,
    markdown_table,
    out_dir,
    parse_floats,
    parse_sizes,
    pyplot,
    save_figure,
    size_label,
    write_json,
    write_markdown,
)

SPARSE_ALGOS = ("topka", "topkdsa", "gtopk", "gaussiank", "oktopk")
ALL_ALGOS = ("dense", *SPARSE_ALGOS)
BASELINE = "gloo"  # torch's dense allreduce on an inner gloo group
STREAM = "stream"  # r.add_(g) on each rank: the memory floor of a call
DEFAULT_SIZES = "1M,4M,16M,64M,128M"
DEFAULT_DENSITIES = "0.001,0.01,0.05"
# Per-call fields gathered from every rank (max over ranks).
FIELDS = ("time_s", "words_sent", "words_recv", "bytes_sent", "local_recomputed",
          "global_recomputed", "repartitioned", "global_selected", "capped", "trimmed",
          "dense")


def parse_algos(text: str) -> list[str]:
    """``all`` or a comma-separated subset of the algorithms."""
    if text.strip() == "all":
        return list(ALL_ALGOS)
    algos = [a.strip() for a in text.split(",") if a.strip()]
    bad = [a for a in algos if a not in ALL_ALGOS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown algorithm(s) {bad}; choose from "
                                         f"{', '.join(ALL_ALGOS)} or all")
    return algos


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The suite's command-line options."""
    parser.add_argument("--out", required=True, help="folder for the JSON, .md and .png")
    parser.add_argument("--sizes", default=DEFAULT_SIZES,
                        help=f"bucket sizes n, comma-separated, K/M/G suffixes "
                             f"(default {DEFAULT_SIZES})")
    parser.add_argument("--densities", default=DEFAULT_DENSITIES,
                        help=f"densities, comma-separated (default {DEFAULT_DENSITIES})")
    parser.add_argument("--algos", default="all",
                        help=f"all or a subset of {','.join(ALL_ALGOS)}; torch's gloo "
                             "allreduce always runs as the baseline")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls a case (default 5)")
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed calls first, so reused thresholds settle (default 3)")
    parser.add_argument("--device", default="cpu",
                        help="cpu or cuda (cuda:LOCAL_RANK for each rank)")
    parser.add_argument("--seed", type=int, default=0, help="data seed (default 0)")
    parser.add_argument("--nproc", type=int, default=4,
                        help="ranks to launch when not started by a launcher (default 4)")
    parser.add_argument("--launcher", choices=("torchrun", "mpirun"), default="torchrun",
                        help="how to launch --nproc ranks when not under a launcher")
    parser.add_argument("--timeout", type=float, default=0,
                        help="kill a self-launched job after this many seconds (0: never)")


def dense_words(n: int, p: int) -> float:
    """Words a rank sends in a ring allreduce of n values, the model the
    backend counts dense allreduce by: 2n(P-1)/P (in whole bytes of fp32)."""
    nbytes = 4 * n
    q, r = divmod(nbytes, p)
    return (2 * q * (p - 1) + (2 * r * (p - 1)) // p) / 4


def k_of(n: int, density: float) -> int:
    """max(1, round(density * n)), as every algorithm takes k."""
    return max(1, round(density * n))


# -- launching ----------------------------------------------------------------

def _under_launcher() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def _suite_argv(args: argparse.Namespace) -> list[str]:
    """The options of this run, to hand to the ranks."""
    return ["collectives", "--out", str(Path(args.out).resolve()), "--sizes", args.sizes,
            "--densities", args.densities, "--algos", args.algos,
            "--repeats", str(args.repeats), "--warmup", str(args.warmup),
            "--device", args.device, "--seed", str(args.seed)]


def _launch(args: argparse.Namespace) -> int:
    """Start ``--nproc`` ranks of this suite on this host and wait."""
    pkg_parent = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [pkg_parent, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
    suite = ["-m", "pg_sparse.bench", *_suite_argv(args)]
    if args.launcher == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={args.nproc}", "--max_restarts=0", *suite]
    else:
        mpirun = shutil.which("mpirun")
        if mpirun is None:
            print("collectives: mpirun not found", file=sys.stderr)
            return 2
        cmd = [mpirun, "--oversubscribe", "--bind-to", "none", "-np", str(args.nproc),
               sys.executable, *suite]
    print("collectives: launching " + " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        return proc.wait(timeout=args.timeout or None)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)  # the job's own process group
        proc.wait()
        print(f"collectives: job killed after {args.timeout} s", file=sys.stderr)
        return 124
    except KeyboardInterrupt:
        os.killpg(proc.pid, 2)
        proc.wait()
        raise


# -- one rank -----------------------------------------------------------------

class _Rank:
    """What every case needs: the groups, the device and the data."""

    def __init__(self, args: argparse.Namespace) -> None:
        import torch
        import torch.distributed as dist

        import pg_sparse  # noqa: F401  (registers "sparse", maps MPI variables)

        self.torch, self.dist = torch, dist
        self.rank = int(os.environ["RANK"])
        self.size = int(os.environ["WORLD_SIZE"])
        if args.device.startswith("cuda"):
            self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(self.device)
            self.sync = torch.cuda.synchronize
        else:
            self.device = torch.device("cpu")
            self.sync = None
        dist.init_process_group(backend="sparse")
        self.gloo = dist.new_group(backend="gloo")
        self.seed = args.seed

    def transport(self) -> str:
        from pg_sparse import _C

        try:
            return str(_C._transport_of(
                self.dist.group.WORLD._get_backend(self.torch.device("cpu"))))
        except Exception:  # noqa: BLE001 - only a label
            from pg_sparse import choose_transport

            return choose_transport()[0]

    def grads(self, n: int, count: int = 2) -> list[Any]:
        """``count`` gradients of this rank: a part shared by all ranks plus
        this rank's noise, different per call."""
        out = []
        for c in range(count):
            g = heavy_tailed(n, 1_000_003 * self.seed + 7919 * c, 1e-2)
            g.add_(heavy_tailed(n, 1_000_003 * self.seed + 7919 * c + 101 * (self.rank + 1),
                                1e-2))
            out.append(g.to(self.device))
        return out

    def measure(self, call: Any, stats: Any, buf: Any, grads: list[Any],
                calls: int) -> list[dict[str, float]]:
        """``calls`` calls, each on fresh data after a barrier; per call the
        maximum over ranks of every field of FIELDS."""
        torch = self.torch
        local = torch.zeros(calls, len(FIELDS), dtype=torch.float64)
        for c in range(calls):
            buf.copy_(grads[c % len(grads)])
            if self.sync:
                self.sync()
            self.dist.barrier(group=self.gloo)
            t0 = time.perf_counter()
            call(buf)
            if self.sync:
                self.sync()
            local[c, 0] = time.perf_counter() - t0
            st = stats()
            for j, f in enumerate(FIELDS[1:], 1):
                local[c, j] = float(st.get(f, 0.0))
        self.dist.all_reduce(local, op=self.dist.ReduceOp.MAX, group=self.gloo)
        return [dict(zip(FIELDS, row)) for row in local.tolist()]

    def stream_floor(self, n: int, grads: list[Any], warmup: int,
                     repeats: int) -> dict[str, Any]:
        """The memory floor of a call on this rank, timed like one: a single
        pass reading g and r and writing r (``r.add_(g)``), 12 bytes a value,
        what the fused pass of a sparse call cannot go below."""
        r = self.torch.empty(n, device=self.device)
        g = grads[0]
        per_call = self.measure(lambda b: b.add_(g), dict, r, grads, warmup + repeats)
        times = sorted(c["time_s"] for c in per_call[warmup:])
        w = dense_words(n, self.size)
        return {"algo": STREAM, "n": n, "density": None, "k": n, "P": self.size,
                "median_s": _median(times), "min_s": times[0], "max_s": times[-1],
                "first_s": per_call[0]["time_s"], "exact_median_s": None,
                "words_sent": 0.0, "words_sent_max": 0.0, "words_dense": w,
                "words_lower_bound": 0.0, "words_upper_bound": 0.0,
                "first_words_sent": 0.0, "words_vs_upper": 0.0, "words_vs_dense": 0.0,
                "warmup": warmup, "repeats": repeats, "calls": per_call}

    def case(self, algo: str, n: int, density: float | None, grads: list[Any],
             warmup: int, repeats: int) -> dict[str, Any]:
        import pg_sparse

        torch, dist, p = self.torch, self.dist, self.size
        buf = torch.empty(n, device=self.device)
        extra: dict[str, Any] = {}
        if algo == BASELINE:
            def call(b: Any) -> None:
                dist.all_reduce(b, group=self.gloo)
                b.div_(p)

            def stats() -> dict[str, float]:
                w = dense_words(n, p)
                return {"words_sent": w, "words_recv": w, "bytes_sent": 4 * w, "dense": 1}
            k = n
        else:
            state = pg_sparse.SparseState(algo=algo, density=density or 1.0, warmup_steps=0)
            bucket = state.native_bucket(0, buf)

            def call(b: Any) -> None:
                bucket.allreduce(b).wait()

            stats = bucket.stats
            k = n if algo == "dense" else k_of(n, density or 1.0)
        per_call = self.measure(call, stats, buf, grads, warmup + repeats)
        if algo not in (BASELINE, "dense"):
            st = bucket.stats()
            extra = {"words_lower_bound": st["words_lower_bound"],
                     "words_upper_bound": st["words_upper_bound"]}
        timed = per_call[warmup:]
        times = sorted(c["time_s"] for c in timed)
        words = [c["words_sent"] for c in timed]
        exact = [c["time_s"] for c in timed
                 if c["local_recomputed"] or c["global_recomputed"]]
        row: dict[str, Any] = {
            "algo": algo, "n": n, "density": density, "k": k, "P": p,
            "median_s": _median(times), "min_s": times[0], "max_s": times[-1],
            "first_s": per_call[0]["time_s"],
            "exact_median_s": _median(sorted(exact)) if exact else None,
            "words_sent": _median(sorted(words)), "words_sent_max": max(words),
            "words_dense": dense_words(n, p),
            "words_lower_bound": extra.get("words_lower_bound", dense_words(n, p)),
            "words_upper_bound": extra.get("words_upper_bound", dense_words(n, p)),
            "first_words_sent": per_call[0]["words_sent"],
            "warmup": warmup, "repeats": repeats, "calls": per_call,
        }
        # At P = 1 nothing travels: every bound is 0 and so is every ratio.
        row["words_vs_upper"] = _ratio(row["words_sent_max"], row["words_upper_bound"])
        row["words_vs_dense"] = _ratio(row["words_sent"], row["words_dense"])
        return row


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def _median(sorted_values: list[float]) -> float:
    m = len(sorted_values)
    return (sorted_values[(m - 1) // 2] + sorted_values[m // 2]) / 2


def _rank_main(args: argparse.Namespace) -> int:
    sizes = parse_sizes(args.sizes)
    densities = parse_floats(args.densities)
    algos = parse_algos(args.algos)
    if args.repeats < 1 or args.warmup < 0:
        raise SystemExit("collectives: --repeats must be >= 1 and --warmup >= 0")
    if any(not 0.0 < d <= 1.0 for d in densities):
        raise SystemExit(f"collectives: densities must be in (0, 1], got {densities}")
    me = _Rank(args)
    ctx = context(world_size=me.size, transport=me.transport(), device=str(me.device),
                  note=f"device {me.device}; {args.warmup} warm-up + {args.repeats} "
                       "timed calls a case")
    lead = me.rank == 0
    if lead:
        print(ctx.line(), flush=True)
    rows: list[dict[str, Any]] = []
    for n in sizes:
        cases: list[tuple[str, float | None]] = [(BASELINE, None), (STREAM, None)]
        cases += [("dense", None)] if "dense" in algos else []
        cases += [(a, d) for d in densities for a in algos if a != "dense"]
        base = None
        grads = me.grads(n)
        for algo, d in cases:
            row = (me.stream_floor(n, grads, args.warmup, args.repeats) if algo == STREAM
                   else me.case(algo, n, d, grads, args.warmup, args.repeats))
            if algo == BASELINE:
                base = row["median_s"]
            row["vs_gloo"] = row["median_s"] / base if base else None
            rows.append(row)
            if lead:
                print(f"n={size_label(n):>5} {algo:>9} d={'-' if d is None else f'{d:g}':>6}"
                      f"  median {row['median_s'] * 1e3:9.3f} ms"
                      f" [{row['min_s'] * 1e3:.3f}, {row['max_s'] * 1e3:.3f}]"
                      f"  first {row['first_s'] * 1e3:9.3f} ms  x gloo {row['vs_gloo']:.3g}"
                      f"  words {row['words_sent_max']:,.0f}"
                      f" (bounds {row['words_lower_bound']:,.0f}"
                      f"..{row['words_upper_bound']:,.0f})", flush=True)
        del grads
    if lead:
        _write(args, ctx, rows, sizes, densities, algos)
    me.dist.barrier(group=me.gloo)
    me.dist.destroy_process_group()
    return 0


# -- outputs ------------------------------------------------------------------

def _write(args: argparse.Namespace, ctx: Context, rows: list[dict[str, Any]],
           sizes: list[int], densities: list[float], algos: list[str]) -> None:
    out = out_dir(args.out)
    settings = {"sizes": sizes, "densities": densities, "algos": algos,
                "warmup": args.warmup, "repeats": args.repeats, "device": args.device,
                "seed": args.seed, "baseline": BASELINE}
    write_json(out / "collectives.json", ctx, rows, suite="collectives", settings=settings)
    cols = ["algo", "n", "density", "k", "median_s", "min_s", "max_s", "first_s", "vs_gloo",
            "words_sent_max", "words_lower_bound", "words_upper_bound", "words_vs_upper",
            "words_vs_dense"]
    heads = ["algo", "n", "density", "k", "median s", "min s", "max s", "first call s",
             "x gloo", "words/rank (max)", "2k(P-1)/P", "3(k+kg)(P-1)/P", "words/upper",
             "words/dense"]
    write_markdown(out / "collectives.md", "Collectives: one call of every algorithm", ctx, [
        f"P = {ctx.world_size}; per case {args.warmup} warm-up calls, then the median "
        f"of {args.repeats} timed calls (each the slowest rank's time). Words: the largest "
        "words_sent of any rank; for dense rows the bounds are the ring volume "
        "2n(P-1)/P. `x gloo`: time over torch's gloo allreduce of the same n in this run. "
        "`stream`: one pass reading g and r and writing r (`r.add_(g)`) on every rank, "
        "the memory floor a call's fused pass cannot beat. "
        "`first call`: the first sparse step (exact thresholds, first repartition).",
        "", markdown_table(rows, cols, heads)])
    _plot(rows, ctx, out, densities)
    print(f"collectives: wrote {out}/collectives.json, collectives.md, collectives_*.png",
          flush=True)


def _plot(rows: list[dict[str, Any]], ctx: Context, out: Path,
          densities: list[float]) -> None:
    plt = pyplot()
    dense_rows = [r for r in rows if r["density"] is None]
    for what in ("time", "words"):
        fig, axes = plt.subplots(1, len(densities), figsize=(5 * len(densities), 4.2),
                                 squeeze=False)
        for ax, d in zip(axes[0], densities):
            sub = [r for r in rows if r["density"] == d]
            for algo in [*dict.fromkeys(r["algo"] for r in dense_rows),
                         *dict.fromkeys(r["algo"] for r in sub)]:
                rs = sorted((r for r in (dense_rows if algo in (BASELINE, "dense") else sub)
                             if r["algo"] == algo), key=lambda r: r["n"])
                ns = [r["n"] for r in rs]
                if what == "time":
                    ax.plot(ns, [r["median_s"] * 1e3 for r in rs], marker="o",
                            linestyle="--" if algo in (BASELINE, "dense") else "-",
                            label=f"{algo} (torch)" if algo == BASELINE else algo)
                elif algo not in (BASELINE, "dense"):
                    ax.plot(ns, [r["words_sent_max"] for r in rs], marker="o", label=algo)
            if what == "words" and sub:
                bound = sorted({(r["n"], r["words_lower_bound"], r["words_upper_bound"],
                                 r["words_dense"]) for r in sub if r["algo"] != "dense"})
                ns = [b[0] for b in bound]
                ax.plot(ns, [b[1] for b in bound], color="0.4", linestyle=":",
                        marker="_", label="2k(P-1)/P")
                ax.plot(ns, [b[2] for b in bound], color="0.2", linestyle="--",
                        marker="_", label="3(k+kg)(P-1)/P")
                ax.plot(ns, [b[3] for b in bound], color="k", linestyle="-.",
                        marker="_", label="dense 2n(P-1)/P")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("bucket size n (values)")
            ax.set_ylabel("median time per call (ms)" if what == "time"
                          else "words sent per rank (max)")
            ax.set_title(f"density {d:g}, P={ctx.world_size}")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        save_figure(fig, out / f"collectives_{what}.png", ctx)


def main(args: argparse.Namespace) -> int:
    """One rank under a launcher; otherwise launch ``--nproc`` ranks."""
    try:
        parse_sizes(args.sizes)
        parse_floats(args.densities)
        parse_algos(args.algos)
    except (argparse.ArgumentTypeError, ValueError) as e:
        print(f"collectives: {e}", file=sys.stderr)
        return 2
    if not _under_launcher():
        # An MPI launcher's variables become RANK/WORLD_SIZE on import.
        from .._launch import map_mpi_environment

        map_mpi_environment()
    if _under_launcher():
        return _rank_main(args)
    return _launch(args)
