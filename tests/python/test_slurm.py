"""Launch under a real Slurm: a one-node cluster (Debian's slurm-wlm and
munge, installed by python/install.sh) started and stopped by this module,
and `srun -n 2 python worker.py` with nothing set by hand, `srun --mpi=pmix`,
and an `sbatch` job. The worker checks an allreduce against its known sum
and reports the transport the package chose."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PYTHON_DIR = HERE.parents[1] / "python"

WORKER = """
import os, torch, torch.distributed as dist, pg_sparse
dist.init_process_group("sparse")
rank, size = dist.get_rank(), dist.get_world_size()
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
ok = bool((t == size * (size + 1) / 2).all())
transport = pg_sparse._C._transport_of(dist.group.WORLD._get_backend(torch.device("cpu")))
print(f"rank {rank} of {size} transport {transport} ok {ok} "
      f"local {os.environ['LOCAL_RANK']}/{os.environ['LOCAL_WORLD_SIZE']}", flush=True)
dist.destroy_process_group()
"""

NEEDED = ("slurmctld", "slurmd", "srun", "sbatch", "munged", "scontrol", "sinfo")
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or any(shutil.which(t) is None and not Path(f"/usr/sbin/{t}").exists()
                             for t in NEEDED),
    reason="needs root and Slurm (slurm-wlm, munge: python/install.sh installs them)")


def _tool(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _wait(what: str, check, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"Slurm test cluster: {what} not ready in {timeout} s")
        time.sleep(0.3)


def _munge_running() -> bool:
    return subprocess.run([_tool("munge"), "-n"], capture_output=True).returncode == 0 \
        if shutil.which("munge") else False


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[dict[str, str]]:
    """A one-node cluster of our own (own ports, state and logs in a
    temporary folder, Slurm's SLURM_CONF pointing at it), torn down after."""
    d = tmp_path_factory.mktemp("slurm")
    host = socket.gethostname().split(".")[0]
    cpus = os.cpu_count() or 2
    conf = d / "slurm.conf"
    conf.write_text(f"""ClusterName=pgstest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/ctld
SlurmdSpoolDir={d}/d
SlurmctldPidFile={d}/ctld.pid
SlurmdPidFile={d}/d.pid
SlurmctldLogFile={d}/ctld.log
SlurmdLogFile={d}/d.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
NodeName=pgsnode NodeHostname={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=pgs Nodes=pgsnode Default=YES MaxTime=10 State=UP OverSubscribe=FORCE:4
""")
    (d / "ctld").mkdir()
    (d / "d").mkdir()
    env = {**os.environ, "SLURM_CONF": str(conf)}
    munged = None
    if not _munge_running():
        Path("/run/munge").mkdir(exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        munged = subprocess.Popen(["runuser", "-u", "munge", "--", _tool("munged"),
                                   "--foreground"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        _wait("munged", _munge_running, 15)
    ctld = subprocess.Popen([_tool("slurmctld"), "-D", "-f", str(conf)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    slurmd = subprocess.Popen([_tool("slurmd"), "-D", "-N", "pgsnode", "-f", str(conf)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def idle() -> bool:
        out = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True,
                             text=True)
        return out.returncode == 0 and out.stdout.strip() in ("idle", "mix", "alloc")

    try:
        _wait("node pgsnode", idle, 45)
        yield env
    finally:
        for p in (slurmd, ctld, munged):
            if p is not None:
                p.terminate()
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def _worker(tmp_path: Path) -> Path:
    path = tmp_path / "worker.py"
    path.write_text(WORKER)
    return path


def _job_env(env: dict[str, str]) -> dict[str, str]:
    # What a user's shell has: the package importable, nothing of ours set.
    out = {k: v for k, v in env.items()
           if not k.startswith(("PG_SPARSE_", "MASTER_", "RANK", "WORLD_SIZE", "LOCAL_"))}
    out["PYTHONPATH"] = str(PYTHON_DIR)
    out["OMP_NUM_THREADS"] = "1"
    return out


def _check(text: str, n: int, transport: str) -> None:
    for r in range(n):
        assert f"rank {r} of {n} transport {transport} ok True local {r}/{n}" in text, text


def test_plain_srun(cluster, tmp_path):
    out = subprocess.run(["srun", "-n", "2", sys.executable, str(_worker(tmp_path))],
                         env=_job_env(cluster), capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    _check(out.stdout, 2, "gloo")


def test_srun_mpi_pmix(cluster, tmp_path):
    plugins = subprocess.run(["srun", "--mpi=list"], env=cluster, capture_output=True,
                             text=True)
    if "pmix" not in plugins.stdout + plugins.stderr:
        pytest.skip("this Slurm has no PMIx plugin")
    out = subprocess.run(["srun", "--mpi=pmix", "-n", "2", sys.executable,
                          str(_worker(tmp_path))], env=_job_env(cluster), capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    _check(out.stdout, 2, "mpi")


def test_sbatch_job(cluster, tmp_path):
    script = tmp_path / "job.sh"
    log = tmp_path / "job.out"
    script.write_text(f"#!/bin/bash\n#SBATCH -n 3\n#SBATCH -O\n#SBATCH -o {log}\n"
                      f"srun -O -n 3 {sys.executable} {_worker(tmp_path)}\n")
    sub = subprocess.run(["sbatch", "--parsable", str(script)], env=_job_env(cluster),
                         capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]

    def finished() -> bool:
        q = subprocess.run(["squeue", "-h", "-j", job], env=cluster, capture_output=True,
                           text=True)
        return q.returncode == 0 and not q.stdout.strip()

    _wait(f"job {job}", finished, 90)
    _check(log.read_text(), 3, "gloo")
