"""Two torchrun agents whose restart counts differ after a fault on one of
them still form the group in the next round (see workers/restart_nodes.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

WORKER = Path(__file__).resolve().parent / "workers" / "restart_nodes.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_agents_with_different_restart_counts_form_the_group(tmp_path):
    port = _free_port()
    agents = []
    for node in (0, 1):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
               "--nproc_per_node=1", "--rdzv-backend=c10d",
               f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=pgs-restart-nodes",
               "--max_restarts=1", "--monitor_interval=0.2", "--local-addr=127.0.0.1",
               str(WORKER), "--out", str(tmp_path)]
        env = {**os.environ, "PGS_TEST_NODE": str(node), "OMP_NUM_THREADS": "1"}
        agents.append(subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True))
    logs = []
    try:
        for a in agents:
            logs.append(a.communicate(timeout=55)[0])
    finally:
        for a in agents:
            if a.poll() is None:
                a.kill()
                a.wait()
    tail = "\n".join(log[-3000:] for log in logs)
    assert [a.returncode for a in agents] == [0, 0], tail
    second = {n: json.loads((tmp_path / f"done-{n}.json").read_text()) for n in (0, 1)}
    # The counts did differ in the round that had to work...
    assert (second[0]["attempt"], second[1]["attempt"]) == (0, 1), second
    # ...and its collective reduced over both ranks: 1 + 2.
    for rec in second.values():
        assert rec["world"] == 2 and rec["sum"] == [3.0] * 4, rec
