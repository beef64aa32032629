"""The bucket calls of one DDP step in a Chrome trace of bench_hook.py
--trace, event by event: the backend worker's CUDA runtime calls (when each
began and how long it took, in µs from the step's forward) beside the device
work each one queued (start, duration, stream, name), with the reducer's
annotations and the optimizer, so the host waits and the device's idle time
of each call, the last one above all, can be read off.

    python3 cuda/bench/trace_call.py hook_trace_oktopk_native.json [--step 2]
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
from typing import Any

from trace_tail import spans  # this folder: the host events of one name

Event = dict[str, Any]
DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")


def load(path: str) -> list[Event]:
    """The trace's complete ('X') events, in time order (.json or .json.gz)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    return sorted(events, key=lambda e: e["ts"])


def device_work(events: list[Event]) -> dict[int, Event]:
    """Device events by their runtime call's correlation id."""
    return {e["args"]["correlation"]: e for e in events
            if e.get("cat") in DEVICE and "correlation" in e.get("args", {})}


def worker_tid(events: list[Event], work: dict[int, Event]) -> int:
    """The thread that launches pg_sparse's kernels: the backend's worker."""
    tids: collections.Counter[int] = collections.Counter()
    for e in events:
        if e.get("cat") == "cuda_runtime":
            w = work.get(e.get("args", {}).get("correlation"))
            if w is not None and "pgs_cuda" in w["name"]:
                tids[e["tid"]] += 1
    if not tids:
        raise SystemExit("no pg_sparse kernels in this trace")
    return tids.most_common(1)[0][0]


def short(name: str, width: int = 44) -> str:
    """A kernel name without its arguments, cut to its last ``width``."""
    return name.replace("(anonymous namespace)::", "").split("(")[0][-width:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--step", type=int, default=2, help="which profiled step")
    args = ap.parse_args()
    events = load(args.trace)
    work = device_work(events)
    wt = worker_tid(events, work)
    fwd = spans(events, "DistributedDataParallel.forward")
    if args.step + 1 >= len(fwd):
        raise SystemExit(f"the trace holds {len(fwd)} steps")
    t0, t1 = fwd[args.step]["ts"], fwd[args.step + 1]["ts"]
    print("| host µs | dur | thread | event | device µs | dur | stream | work |")
    print("|---|---|---|---|---|---|---|---|")
    waits = 0.0
    for e in events:
        if not t0 <= e["ts"] < t1:
            continue
        mine = e["tid"] == wt and e.get("cat") == "cuda_runtime"
        if not (mine or e.get("cat") == "user_annotation"):
            continue
        if mine and "Synchronize" in e["name"]:
            waits += e["dur"]
        w = work.get(e.get("args", {}).get("correlation"))
        dev = ["", "", "", ""]
        if w is not None:
            dev = [f"{w['ts'] - t0:.1f}", f"{w['dur']:.1f}",
                   str(w["args"].get("stream", "")), short(w["name"])]
        who = "worker" if e["tid"] == wt else str(e["tid"])
        print(f"| {e['ts'] - t0:.1f} | {e['dur']:.1f} | {who} | {e['name'][:40]} | "
              + " | ".join(dev) + " |")
    print(f"\nthe worker's synchronisations this step: {waits:.0f} µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
