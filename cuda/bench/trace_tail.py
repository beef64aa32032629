"""The end of each DDP step in a Chrome trace of bench_hook.py --trace: when
the worker ends the last bucket's call (it queues the watchdog's host
function last), when the reducer's thread resumes (its first
copy_bucket_to_grad after that) and when the optimizer starts, in
microseconds from the step's forward.

    python3 cuda/bench/trace_tail.py hook_trace_oktopk_native.json
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def spans(events: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    """Complete events whose name starts with ``prefix``, in time order."""
    return sorted((e for e in events if e["name"].startswith(prefix)
                   and e.get("cat") != "gpu_user_annotation"), key=lambda e: e["ts"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    args = ap.parse_args()
    with open(args.trace) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    fwd = spans(events, "DistributedDataParallel.forward")
    opt = spans(events, "Optimizer.step")
    host_fn = spans(events, "cudaLaunchHostFunc")
    copies = spans(events, "torch.distributed.ddp.reducer::copy_bucket_to_grad")
    print("| step | worker ends the last call | reducer resumes | gap | optimizer |")
    print("|---|---|---|---|---|")
    for i, (f0, o) in enumerate(zip(fwd, opt)):
        t0, t1 = f0["ts"], o["ts"]
        # The worker queues the watchdog's host function as a call's last act.
        call_ends = [e["ts"] for e in host_fn if t0 <= e["ts"] <= t1]
        if not call_ends:
            continue
        last = call_ends[-1]
        # A reducer that resumed before the host function was queued (the
        # worker completes its future first) shows a negative gap.
        resumed = [e["ts"] for e in copies if last - 50 <= e["ts"] <= t1]
        r = resumed[0] - t0 if resumed else float("nan")
        print(f"| {i} | {last - t0:.0f} | {r:.0f} | {r - (last - t0):.0f} | {t1 - t0:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
