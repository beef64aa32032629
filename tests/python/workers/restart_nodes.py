"""Two torchrun agents (``PGS_TEST_NODE`` 0 and 1, one worker each) whose
restart counts differ after a fault: node 1's worker fails on its first
attempt, so its agent counts a restart; node 0's worker is healthy and its
agent restarts it only because node 1 came back, without counting. In the
second round the two workers run with ``TORCHELASTIC_RESTART_COUNT`` 0 and 1
and must still form the group (the backend once keyed its store by that
count, and such a job failed every round until its restarts ran out). The
first round makes no group, so nothing but the counts can go wrong. Each
start writes ``OUT/start-<node>-<n>``, a finished worker ``OUT/done-<node>.json``."""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path


def main() -> int:
    out = Path(sys.argv[sys.argv.index("--out") + 1])
    import torch
    import torch.distributed as dist

    import pg_sparse  # noqa: F401 - registers the backend

    node = int(os.environ["PGS_TEST_NODE"])
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    starts = len(list(out.glob(f"start-{node}-*")))
    (out / f"start-{node}-{starts}").write_text(str(attempt))
    if starts == 0:
        if node == 1:
            return 1  # the fault: node 1's agent counts a restart
        time.sleep(60)  # healthy; its agent stops it when node 1 rejoins
        return 0
    dist.init_process_group("sparse", timeout=timedelta(seconds=15))
    t = torch.full((4,), float(dist.get_rank() + 1))
    dist.all_reduce(t)
    rec = {"node": node, "attempt": attempt, "sum": t.tolist(), "world": dist.get_world_size()}
    (out / f"done-{node}.json").write_text(json.dumps(rec))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
