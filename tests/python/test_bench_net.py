"""The network harness of the benchmark CLI (pg_sparse.bench.net): namespaces
on a bridge shaped with tc, a throughput check, torchrun and mpirun launches
across namespaces, and cleanup. Needs root and ``ip netns``; skipped otherwise.
Every test uses its own prefix and asserts that none of its namespaces stay."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
WORKER = str(HERE / "workers" / "net_allreduce.py")


def _netns_usable() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    if not shutil.which("ip") or not shutil.which("tc"):
        return "needs iproute2 (ip, tc)"
    try:
        subprocess.run(["ip", "netns", "list"], check=True, capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        return f"ip netns unavailable: {e}"
    return None


pytestmark = pytest.mark.skipif(_netns_usable() is not None,
                                reason=str(_netns_usable()))


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> Iterator[str]:
    """A prefix unique to this test and process; asserts nothing of it is left."""
    from pg_sparse.bench import netns

    name = f"pgs{os.getpid() % 1000:03d}{zlib.crc32(request.node.nodeid.encode()) % 10000:04d}"
    netns.down(name)
    yield name
    left = netns.namespaces(name)
    netns.down(name)
    assert not left, f"namespaces left behind: {left}"


def _results(out: Path) -> dict[int, dict]:
    return {int(f.stem[4:]): json.loads(f.read_text()) for f in out.glob("rank*.json")}


def test_up_measure_down(prefix: str) -> None:
    from pg_sparse.bench.net import Network, namespaces

    with Network(hosts=2, rate="100mbit", prefix=prefix) as net:
        assert sorted(namespaces(prefix)) == sorted([net.bridge_ns, net.ns(0), net.ns(1)])
        mbit = net.measure(seconds=1.5)
        assert 70 <= mbit <= 105, f"100mbit link measured {mbit:.1f} Mbit/s"
        assert "measured" in net.link()
    assert namespaces(prefix) == []


@pytest.mark.parametrize("launcher", ["torchrun", "mpirun"])
def test_allreduce_across_namespaces(prefix: str, launcher: str) -> None:
    from pg_sparse.bench.net import Network

    if launcher == "mpirun" and not shutil.which("mpirun"):
        pytest.skip("mpirun not found")
    out = Path(tempfile.mkdtemp(prefix="pgs_net_"))
    try:
        with Network(hosts=2, rate="1gbit", prefix=prefix) as net:
            launch = net.torchrun if launcher == "torchrun" else net.mpirun
            res = launch(["--out", str(out)], script=WORKER, timeout=50)
        assert res.ok, res.summary() + "\n" + res.tail(0) + "\n" + res.tail(-1)
        ranks = _results(out)
        assert sorted(ranks) == [0, 1], res.tail(0)
        for r, rec in ranks.items():
            assert rec["done"], f"rank {r} did not finish"
            assert rec["checks"]["allreduce"]["ok"], rec["checks"]["allreduce"]["detail"]
            assert rec["info"]["gloo_ifname"] == "eth0"
            assert rec["info"]["link"].startswith("1gbit tbf")
        if launcher == "mpirun":
            assert ranks[0]["info"]["transport"] == "mpi"
            assert ranks[0]["info"]["master_addr"] == "10.231.0.1"
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_failing_rank_leaves_nothing(prefix: str) -> None:
    from pg_sparse.bench.net import Network, namespaces

    out = Path(tempfile.mkdtemp(prefix="pgs_net_"))
    try:
        with Network(hosts=2, rate="unshaped", prefix=prefix) as net:
            res = net.torchrun(["--out", str(out), "--fail-rank", "1"], script=WORKER,
                               timeout=50, fail_grace=3.0)
            assert not res.ok and not res.timed_out, res.summary()
            assert res.returncodes[1] != 0, res.summary()
            for ns in namespaces(prefix):  # nothing runs inside any more
                pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                      text=True).stdout.split()
                assert not pids, f"{ns} still runs {pids}"
        assert namespaces(prefix) == []
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_cli_error_cleans_up(prefix: str) -> None:
    """`net run` whose ranks fail exits non-zero and removes the network."""
    env = {**os.environ, "PYTHONPATH": str(HERE.parents[1] / "python")}
    res = subprocess.run(
        [sys.executable, "-m", "pg_sparse.bench", "net", "run", "--hosts", "2", "--rate", "1gbit",
         "--prefix", prefix, "--seconds", "0.5", "--timeout", "40", "--launcher", "mpirun",
         "--script", WORKER, "--",
         "--out", "/nonexistent/dir", "--fail-rank", "0"],
        capture_output=True, text=True, timeout=55, env=env, cwd=tempfile.gettempdir())
    assert res.returncode == 1, res.stdout + res.stderr
    assert "requested 1gbit, measured" in res.stdout, res.stdout + res.stderr
    from pg_sparse.bench.net import namespaces

    assert namespaces(prefix) == []


def test_cut_link_raises_on_every_rank(prefix: str) -> None:
    """A link cut mid-run (``ip link set down`` on host 1's veth at the
    bridge), two ranks in a DDP loop with the Ok-Topk hook: both raise a
    clear error within the process group's timeout (10 s) plus 30 s, the job
    ends and nothing of it is left running (reliability issue)."""
    import threading
    import time

    from pg_sparse.bench.net import Network, namespaces
    from pg_sparse.bench.netns import sh

    out = Path(tempfile.mkdtemp(prefix="pgs_net_"))
    worker = str(HERE / "workers" / "faults.py")
    result = {}
    try:
        with Network(hosts=2, rate="unshaped", prefix=prefix) as net:
            def launch() -> None:
                result["res"] = net.torchrun(
                    ["--out", str(out), "--mode", "cut", "--timeout-s", "10"],
                    script=worker, timeout=100, fail_grace=45.0)
            t = threading.Thread(target=launch)
            t.start()
            deadline = time.monotonic() + 60
            while not all((out / f"ready{r}").exists() for r in (0, 1)):
                assert time.monotonic() < deadline and t.is_alive(), "ranks never got ready"
                time.sleep(0.1)
            time.sleep(1.0)  # a few healthy steps over the link
            (out / "died").write_text(str(time.time()))
            sh("ip", "-n", net.bridge_ns, "link", "set", "v1", "down")
            t.join(timeout=120)
            assert not t.is_alive(), "the launch never returned"
            res = result["res"]
            assert not res.timed_out, res.summary()
            for ns in namespaces(prefix):
                pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                      text=True).stdout.split()
                assert not pids, f"{ns} still runs {pids}"
        ranks = _results(out)
        assert sorted(ranks) == [0, 1], res.tail(0) + res.tail(-1)
        for r, rec in ranks.items():
            check = rec["checks"].get("raises")
            assert check and check["ok"], f"rank {r}: {check}" + res.tail(r)
            since = float(check["detail"].split("(")[1].split(" s after")[0])
            assert since < 10 + 30, check["detail"]
            print(f"rank {r}: {check['detail']}")
            error = rec["info"]["error"].lower()
            assert any(w in error for w in ("timed out", "connection", "closed")), error
    finally:
        shutil.rmtree(out, ignore_errors=True)
