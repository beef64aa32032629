"""The soak: DDP training with Ok-Topk under ``torchrun --max-restarts`` for
a bounded time while faults strike on a schedule, then checks of what it
left. Not part of CI (root: network namespaces).

    python tests/soak/soak.py --minutes 20 --out tests/soak/report

Two hosts (network namespaces on a bridge, 1 Gbit/s links, pg_sparse.bench's
harness) of two ranks each; every round of the schedule is one fault: a rank
SIGKILLed, a rank stalled past the collectives' timeout, or host 1's link
cut for longer than the timeout. torchrun's agents restart every worker
(c10d rendezvous), which resume from the last checkpoint (every ``--every``
steps). Afterwards (``OUT/soak.json`` and ``OUT/README.md``):

- the loss curve is continuous: every step has a loss, and each step redone
  after a restart has the same loss and parameters, bit for bit, as the
  first time (data and weights depend on the step only, so this holds only
  if model, optimizer and hook state came back exactly);
- each restart loaded the hook state equal to the one saved (its digest);
- no process, namespace, /dev/shm file of the job or descriptor leaked:
  each start's count of open descriptors equal, RSS within 2% of the first.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "python"))

from pg_sparse.bench.netns import Network, namespaces  # noqa: E402

PREFIX = "pgsoak"
KINDS = ("kill", "stall", "cut")


def arguments() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=20.0, help="time bound of the run")
    p.add_argument("--out", required=True)
    p.add_argument("--faults", type=int, default=6, help="faults in the schedule")
    p.add_argument("--steps-per-fault", type=int, default=150)
    p.add_argument("--every", type=int, default=25, help="checkpoint every N steps")
    p.add_argument("--timeout", type=float, default=20.0, help="collectives' timeout (s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rate", default="1gbit")
    return p.parse_args()


def schedule(n: int, per: int, seed: int) -> list[dict[str, Any]]:
    """Fault i strikes once, the first time training reaches its step,
    between ``per/3`` and ``per`` steps after fault i - 1 (past a
    checkpoint), kinds in turn, ranks at random."""
    rng = random.Random(seed)
    out, step = [], 0
    for i in range(n):
        step += rng.randint(per // 3, per)
        out.append({"step": step, "rank": rng.randrange(4), "kind": KINDS[i % len(KINDS)]})
    return out


def cutter(net: Network, out: Path, faults: list[dict[str, Any]], hold: float,
           stop: threading.Event) -> threading.Thread:
    """Acts on the ``cut`` faults: when rank 0 has logged the step before
    one, host 1's link goes down for ``hold`` seconds."""
    cuts = [f for f in faults if f["kind"] == "cut"]

    def run() -> None:
        log = out / "rank0.jsonl"
        while cuts and not stop.is_set():
            time.sleep(0.2)
            seen = _read(log)
            f = cuts[0]
            if any(r["kind"] == "loss" and r["step"] >= f["step"] for r in seen):
                cuts.pop(0)
                net.set_link(1, False)
                with open(out / "cuts.jsonl", "a") as fh:
                    fh.write(json.dumps({**f, "t": time.time(), "seconds": hold}) + "\n")
                stop.wait(hold)
                net.set_link(1, True)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> int:
    args = arguments()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for p in [*out.glob("rank*.jsonl"), out / "cuts.jsonl", *out.glob("ckpt/*"),
              *out.glob("fault-*")]:
        p.unlink(missing_ok=True)
    faults = schedule(args.faults, args.steps_per_fault, args.seed)
    steps = faults[-1]["step"] + args.steps_per_fault
    shm_before = set(os.listdir("/dev/shm"))
    started = time.time()
    stop = threading.Event()
    with Network(hosts=2, rate=args.rate, prefix=PREFIX) as net:
        cut = cutter(net, out, faults, 1.5 * args.timeout, stop)
        res = net.torchrun(
            ["--out", str(out), "--steps", str(steps), "--every", str(args.every),
             "--faults", json.dumps(faults), "--timeout", str(args.timeout)],
            script=str(HERE / "worker.py"), nproc_per_host=2, max_restarts=len(faults),
            timeout=60 * args.minutes, log_dir=out / "logs", fail_grace=120.0)
        stop.set()
        cut.join(timeout=5)
        net.set_link(1, True)
    left = subprocess.run(["pgrep", "-f", str(HERE / "worker.py")], capture_output=True,
                          text=True).stdout.split()
    report = check(out, steps, faults, res.ok, res.timed_out)
    report.update({
        "seconds": round(time.time() - started, 1), "launch": res.summary(),
        "leaked_processes": left, "leaked_namespaces": namespaces(PREFIX),
        "leaked_shm": sorted(set(os.listdir("/dev/shm")) - shm_before),
        "schedule": faults, "steps": steps, "link": res.link})
    report["ok"] = bool(report["ok"] and not left and not report["leaked_namespaces"]
                        and not report["leaked_shm"])
    (out / "soak.json").write_text(json.dumps(report, indent=1))
    (out / "README.md").write_text(markdown(report))
    print(json.dumps({k: v for k, v in report.items() if k != "schedule"}, indent=1))
    return 0 if report["ok"] else 1


def markdown(r: dict[str, Any]) -> str:
    """The soak's findings as a page (the raw ones: soak.json)."""
    from pg_sparse.bench.common import context

    kinds = ", ".join(f"{f['kind']} (step {f['step']}, rank "
                      f"{f['rank']})" for f in r["schedule"])
    rows = [("outcome", "pass" if r["ok"] else "FAIL"), ("launch", r["launch"]),
            ("wall-clock", f"{r['seconds']} s"), ("faults scheduled", kinds),
            ("faults that struck", r["faults_struck"]),
            ("rounds in which every rank started", r["attempts"]),
            ("steps with a loss / scheduled", f"{r['steps_with_loss']} / {r['steps']}"),
            ("steps redone after restarts, same loss and parameters",
             f"{r['redone_steps'] - len(r['redone_mismatched'])} of {r['redone_steps']}"),
            ("restores whose hook state equals the saved one",
             f"{r['restores_equal']} of {r['restores']}"),
            ("open descriptors at each start (per rank)", r["fds_per_rank"]),
            ("RSS spread across starts (per rank, %)", r["rss_spread_percent"]),
            ("loss, first and last step", r["losses_first_last"]),
            ("processes, namespaces, /dev/shm files left",
             f"{r['leaked_processes']}, {r['leaked_namespaces']}, {r['leaked_shm']}")]
    return ("# Soak: Ok-Topk under torchrun --max-restarts with faults\n\n"
            f"{context(world_size=4, link=r['link']).line()}; made by "
            "`python tests/soak/soak.py`.\n\n"
            "| | |\n|---|---|\n" + "".join(f"| {k} | {v} |\n" for k, v in rows))


def check(out: Path, steps: int, faults: list[dict[str, Any]], ok: bool,
          timed_out: bool) -> dict[str, Any]:
    """The soak's findings from the ranks' logs."""
    rec = {r: _read(out / f"rank{r}.jsonl") for r in range(4)}
    losses: dict[int, tuple[float, str]] = {}
    redone, mismatched = 0, []
    for r in rec[0]:
        if r["kind"] != "loss":
            continue
        key = (r["loss"], r["params"])
        if r["step"] in losses:
            redone += 1
            if losses[r["step"]] != key:
                mismatched.append(r["step"])
        else:
            losses[r["step"]] = key
    missing = [s for s in range(steps) if s not in losses]
    starts = [r for rs in rec.values() for r in rs if r["kind"] == "start"]
    restores = [r["restored"] for r in starts if r["restored"] is not None]
    probes = [r for rs in rec.values() for r in rs if r["kind"] == "probe"]
    fds = {r["rank"]: sorted({p["fds"] for p in probes if p["rank"] == r["rank"]})
           for r in probes}
    rss_spread = {}
    for rank in range(4):
        mine = [p["rss_kb"] for p in probes if p["rank"] == rank]
        if mine:
            rss_spread[rank] = round(100.0 * (max(mine) - min(mine)) / min(mine), 2)
    done = [r for rs in rec.values() for r in rs if r["kind"] == "done"]
    # Rounds of the job: every round starts every rank once. (Not the restart
    # count: each host's agent counts only its own workers' failures.)
    attempts = min((sum(1 for r in starts if r["rank"] == k) for k in range(4)), default=0)
    findings = {
        "launch_ok": ok, "timed_out": timed_out, "attempts": attempts,
        "faults_struck": sum(1 for rs in rec.values() for r in rs if r["kind"] == "fault")
        + len(_read(out / "cuts.jsonl")),
        "steps_with_loss": len(losses), "missing_steps": missing[:20],
        "redone_steps": redone, "redone_mismatched": mismatched[:20],
        "restores": len(restores), "restores_equal": sum(restores),
        "fds_per_rank": fds, "rss_spread_percent": rss_spread, "ranks_done": len(done),
        "losses_first_last": [losses[min(losses)][0], losses[max(losses)][0]]
        if losses else None}
    findings["ok"] = bool(
        ok and not missing and not mismatched and redone > 0 and len(done) == 4
        and all(restores) and len(restores) >= 4 * (attempts - 1)
        and all(len(v) == 1 for v in fds.values())
        and all(v <= 2.0 for v in rss_spread.values())
        and findings["faults_struck"] == len(faults) and attempts >= len(faults) + 1)
    return findings


if __name__ == "__main__":
    sys.exit(main())
