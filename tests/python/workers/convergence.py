"""Short versions of two convergence tasks (examples/convergence): dense DDP
and Ok-Topk at density 0.01 from the same seed, weights and data, with the
task's momentum SGD; every rank records each method's final test metric and
checks the gap to dense against a bound.

The oracle is dense DDP (gloo, no hook) trained in the same job."""

from __future__ import annotations

import os
import sys
import warnings
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from workers.common import Recorder, parse_args  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "examples" / "convergence"))


def extra(p) -> None:
    p.add_argument("--task", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--methods", required=True, help="comma-separated, dense first")
    p.add_argument("--bound", type=float, required=True,
                   help="largest gap to dense: accuracy points, or perplexity ratio - 1")
    p.add_argument("--seed", type=int, default=0)


def main() -> None:
    args = parse_args(extra)
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist
    import train as cv

    import pg_sparse  # noqa: F401 - registers "sparse"

    torch.set_num_threads(1)
    dist.init_process_group("sparse", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    gloo = dist.new_group(backend="gloo")
    rec = Recorder(args.out, rank, dist.get_world_size())
    task = cv.TASKS[args.task](args.steps)
    warmup = max(2, args.steps // 20)
    methods = args.methods.split(",")
    finals: dict[str, float] = {}
    for m in methods:
        def run(m: str = m) -> str:
            res = cv.run_one(task, m, args.seed, warmup, gloo, [])
            finals[m] = res["final"]
            rec.info[m] = {k: res[k] for k in ("final", "bytes_per_step", "achieved_density")}
            if m == "dense":
                return f"{task.metric} {res['final']:.3f}"
            ref = finals["dense"]
            gap = ref - res["final"] if task.higher_is_better else res["final"] / ref - 1
            assert gap <= args.bound, (
                f"{m}: {task.metric} {res['final']:.3f} vs dense {ref:.3f}: "
                f"gap {gap:.4g} > {args.bound}")
            if not m.startswith("auto"):  # auto may rightly choose dense
                assert res["bytes_per_step"] < 0.1 * res["bytes_per_step_dense"], res
            return f"{task.metric} {res['final']:.3f} vs dense {ref:.3f} (gap {gap:.3g})"
        rec.run(f"{args.task}_{m}", run)
    dist.destroy_process_group()
    rec.finish()


if __name__ == "__main__":
    main()
