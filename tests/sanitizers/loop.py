"""Run the test suite's worker jobs again and again (bounded in count and
time, several at once) to catch an intermittent memory error: meant for the
ASan + UBSan build of the extension (``tests/sanitizers/run.sh
python_loop`` sets up the environment), or under plain glibc, whose heap
checks abort on a corrupted chunk.

    python tests/sanitizers/loop.py --seconds 600 --lanes 4 --out DIR

A job fails when it times out, exits non-zero, a rank's check fails, or its
output holds a sanitizer's or glibc's report. ``DIR/loop.json`` lists every
job (label, seconds, outcome); the first failures' logs are kept beside it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))

from conftest import launch  # noqa: E402
from test_ddp_hooks import XFAIL  # noqa: E402  (checks the suite expects to fail)

# (launcher, worker, ranks): every collective against gloo under both
# launchers (where the corruption was seen: mpirun, P = 3), and every hook
# through DDP.
JOBS = [("mpirun", "every_op.py", 3), ("torchrun", "every_op.py", 3),
        ("mpirun", "every_op.py", 2), ("torchrun", "ddp.py", 4)]
REPORTS = ("AddressSanitizer", "runtime error:", "LeakSanitizer", "malloc():", "free():",
           "double free", "corrupted", "Segmentation fault", "SIGSEGV", "SIGABRT")


def outcome(job) -> str:  # type: ignore[no-untyped-def]
    """"ok" or what went wrong."""
    text = job.stdout + job.stderr
    found = [r for r in REPORTS if r in text]
    if found:
        return "report: " + ", ".join(found)
    if job.timed_out:
        return "timed out"
    # The exit code is not one: every_op's last check breaks its group, and
    # its ranks then leave without MPI_Finalize (mpirun exits 1). A crash
    # shows as a report above or as a rank that did not finish.
    bad = [f"rank {r}: {name}: {c.get('detail', '')[:300]}" for r, res in job.results.items()
           for name, c in res.get("checks", {}).items()
           if not c.get("ok") and name not in XFAIL]
    if bad:
        return "failed checks: " + "; ".join(bad[:5])
    if len(job.results) != job.nproc or not all(res.get("done") for res in job.results.values()):
        return f"a rank did not finish (exit code {job.returncode}; {where(job)})"
    return "ok"


def where(job) -> str:  # type: ignore[no-untyped-def]
    """Each rank's last recorded check, or that it wrote nothing."""
    parts = []
    for r in range(job.nproc):
        res = job.results.get(r)
        if res is None:
            parts.append(f"rank {r}: no result file")
        elif not res.get("done"):
            names = list(res.get("checks", {}))
            parts.append(f"rank {r}: stopped after {names[-1] if names else 'no check'}"
                         f" ({len(names)} checks)")
    return ", ".join(parts)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=600.0)
    p.add_argument("--max-jobs", type=int, default=1000)
    p.add_argument("--lanes", type=int, default=2, help="jobs at once")
    p.add_argument("--timeout", type=float, default=300.0, help="per job (s)")
    p.add_argument("--jobs", default=",".join(f"{a}:{b}:{c}" for a, b, c in JOBS),
                   help="comma-separated LAUNCHER:WORKER:RANKS")
    p.add_argument("--max-failures", type=int, default=0,
                   help="stop after this many failed jobs (0: never)")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    kinds = [(a, b, int(c)) for a, b, c in (j.split(":") for j in args.jobs.split(","))]
    order = itertools.cycle(kinds)
    lock = threading.Lock()
    done: list[dict] = []
    deadline = time.monotonic() + args.seconds
    count = itertools.count()

    def lane() -> None:
        while time.monotonic() < deadline:
            with lock:
                if args.max_failures and \
                        sum(1 for d in done if d["outcome"] != "ok") >= args.max_failures:
                    return
                n = next(count)
                if n >= args.max_jobs:
                    return
                launcher, worker, ranks = next(order)
            left = deadline - time.monotonic()
            if left < 30:
                return
            job = launch(launcher, worker, ranks, timeout=min(args.timeout, left),
                         label=f"{launcher}-P{ranks}-{worker}")
            res = outcome(job)
            with lock:
                done.append({"n": n, "job": job.label, "seconds": round(job.seconds, 1),
                             "outcome": res})
                fails = sum(1 for d in done if d["outcome"] != "ok")
                if res != "ok" and fails <= 5:
                    (out / f"fail-{n}.log").write_text(
                        f"{job.cmd}\n{res}\n--- stdout\n{job.stdout}\n--- stderr\n{job.stderr}")
                print(f"[{len(done)}] {job.label} {job.seconds:.0f} s: {res}", flush=True)

    threads = [threading.Thread(target=lane) for _ in range(args.lanes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    summary = {"jobs": len(done), "failed": sum(1 for d in done if d["outcome"] != "ok"),
               "by_job": {k: sum(1 for d in done if d["job"] == k)
                          for k in sorted({d["job"] for d in done})},
               "runs": done}
    (out / "loop.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}), flush=True)
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
