"""The DDP suite's outputs (rank 0): JSON, a markdown table and a PNG of
the phases per method."""

from __future__ import annotations

import os
from typing import Any

from .common import fmt, markdown_table, out_dir, pyplot, save_figure, write_json, write_markdown
from .ddp import PHASES

# pg_sparse's own time in its hooks (C core, summed over buckets) and its
# phases: select (accumulate, threshold, compaction), reduce (split and reduce,
# or the dense allreduce), gather (global selection, allgather).
HOOK_PHASES = ("hook_time_s", "hook_select_s", "hook_reduce_s", "hook_gather_s")


def _cell_ms(r: dict[str, Any], key: str) -> str:
    v = r.get(key)
    return "" if v is None else f"{v * 1e3:.1f}"


def _ratio(v: Any) -> str:
    return "" if v is None else f"{v:.2f}x"


def write_outputs(out_path: str | os.PathLike[str], result: dict[str, Any]) -> dict[str, str]:
    """JSON, markdown table and PNG of :func:`run_ddp_suite`'s ``result``
    in folder ``out_path``; returns their paths."""
    ctx, config, rows = result["context"], result["config"], result["rows"]
    out = out_dir(out_path)
    stem = f"ddp_{config['model']}"
    paths = {"json": str(write_json(out / f"{stem}.json", ctx, rows, config=config))}
    base = config.get("baseline", "gloo")
    table = []
    for r in rows:
        if "error" in r:
            table.append({"method": r["method"], "step": f"failed: {r['error']}"})
            continue
        table.append({
            "method": r["method"],
            "step": f"{r['step_s_median'] * 1e3:.1f} [{r['step_s_min'] * 1e3:.1f}"
                    f"\u2013{r['step_s_max'] * 1e3:.1f}]",
            "base": _ratio(r.get(f"ratio_to_{base}")), "bf16": _ratio(r.get("ratio_to_bf16")),
            "floor": "" if r.get("over_nocomm_s") is None else
                     f"{r['over_nocomm_s'] * 1e3:+.1f} ms ({_ratio(r.get('ratio_to_nocomm'))})",
            "bytes": fmt(int(r["bytes_per_rank"])) + ("*" if "estimate" in r["bytes_source"]
                                                       else ""),
            "density": f"{r['density']:.4g}",
            **{k: _cell_ms(r, k) for k in (*PHASES, *HOOK_PHASES)},
        })
    cols = ["method", "step", "base", "bf16", "floor", "bytes", "density", *PHASES,
            *HOOK_PHASES]
    heads = ["method", "step ms median [min\u2013max]", f"ratio to {base}", "ratio to bf16",
             "vs nocomm floor", "bytes per rank", "density", "forward ms",
             "backward compute ms", "backward wait ms", "optimizer ms", "hook time ms",
             "hook select ms", "hook reduce ms", "hook gather ms"]
    notes = [
        f"Model: {config['shape']}; {config['numel']:,} parameters; P = "
        f"{config['world_size']}; {config['warmup']} warm-up + {config['steps']} timed steps "
        f"per method; {config['optimizer']}; bucket_cap_mb {config['bucket_cap_mb']}; "
        f"gradient_as_bucket_view {config['gradient_as_bucket_view']}; density "
        f"{config['density']}; {config['threads_per_rank']} torch thread(s) per rank.",
        "",
        markdown_table(table, cols, heads),
        "Each step's figures are the slowest rank's; phases are medians over steps, so "
        "they need not add up to the step. Backward compute: from backward's start to "
        "the last gradient accumulated; backward wait: from there to backward's end "
        "(the communication DDP could not overlap). Bytes: pg_sparse from its stats; "
        "gloo, bf16 and fp16 from the ring model 2(P-1)/P x bytes; * marks an estimate "
        "(PowerSGD: ring model over its P and Q matrices and uncompressed tensors). "
        "DDP's buffer broadcasts (BatchNorm) are not counted. bf16 is torch's "
        "bf16_compress_hook registered under another name (torch's DDP refuses that name "
        "without CUDA and NCCL; gloo reduces bf16 on CPU). PowerSGD: rank 4 from iteration "
        f"2, one state and {base} group per bucket (with one group its chained allreduces "
        "race the next bucket's on gloo). torch's hooks run on the baseline group "
        f"({base}).",
        *(["On CUDA every phase ends with torch.cuda.synchronize(); the backward "
           "compute/wait split is when the last gradient's hook ran on the host, so on "
           "the GPU it tells little."] if config.get("device") == "cuda" else []),
    ]
    paths["markdown"] = str(write_markdown(out / f"{stem}.md",
                                           f"DDP step time: {config['model']}", ctx, notes))
    try:
        paths["png"] = str(_plot(out / f"{stem}.png", ctx, config, rows))
    except ImportError as e:  # matplotlib missing: the table and JSON still stand
        print(f"ddp: no plot ({e})", flush=True)
    print(markdown_table(table, cols, heads), flush=True)
    print("wrote", ", ".join(paths.values()), flush=True)
    return paths


def _plot(path: Any, ctx: Any, config: dict[str, Any], rows: list[dict[str, Any]]) -> Any:
    plt = pyplot()
    ok = [r for r in rows if "error" not in r]
    names = [r["method"] for r in ok]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.5),
                                 gridspec_kw={"width_ratios": [2, 1]})
    bottom = [0.0] * len(ok)
    labels = {"forward_s": "forward", "backward_compute_s": "backward (compute)",
              "backward_wait_s": "backward (comm wait)", "optimizer_s": "optimizer"}
    for k in PHASES:
        vals = [r[k] * 1e3 for r in ok]
        ax.bar(names, vals, bottom=bottom, label=labels[k])
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.scatter(names, [r["step_s_median"] * 1e3 for r in ok], color="k", marker="_",
               s=400, label="step (median)", zorder=3)
    ax.set_ylabel("ms per step (slowest rank)")
    ax.set_title(f"{config['model']}: DDP step phases, P={config['world_size']}")
    ax.legend(fontsize=7)
    ax.tick_params(axis="x", rotation=45)
    bx.bar(names, [r["bytes_per_rank"] / 1e6 or float("nan") for r in ok], color="tab:gray")
    bx.set_yscale("log")
    bx.set_ylabel("MB sent per rank per step")
    bx.set_title("volume")
    bx.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    return save_figure(fig, path, ctx)
