"""Launch ranks across the namespaces of a :class:`~pg_sparse.bench.netns.Network`:
one ``torchrun`` a host (static rendezvous on host 0), or one ``mpirun`` in
host 0 that reaches the other hosts through an rsh agent mapping each host
address to its namespace. Every launch has a timeout; what is left inside
the namespaces afterwards is killed."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from .netns import NetError, Network

MASTER_PORT = 29500
# Variables of an enclosing launcher must not leak into the ranks we start.
_LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                "ROLE_RANK", "MASTER_ADDR", "MASTER_PORT")
_LAUNCH_PREFIXES = ("OMPI_COMM_WORLD_", "OMPI_MCA_orte_", "PMIX_", "PMI_", "SLURM_",
                    "TORCHELASTIC_")


@dataclass
class LaunchResult:
    """A finished (or killed) launch: one exit code a launcher process (a
    torchrun per host, or the one mpirun), and where their output went."""

    launcher: str
    cmds: list[list[str]]
    returncodes: list[int | None]
    timed_out: bool
    seconds: float
    logs: list[Path] = field(default_factory=list)
    link: str = ""

    @property
    def ok(self) -> bool:
        """Whether every launcher process exited 0 in time."""
        return not self.timed_out and all(rc == 0 for rc in self.returncodes)

    def tail(self, i: int = 0, limit: int = 4000) -> str:
        """The last ``limit`` characters of launcher process ``i``'s output."""
        try:
            text = self.logs[i].read_text(errors="replace")
        except (IndexError, OSError):
            return ""
        return text if len(text) <= limit else "...\n" + text[-limit:]

    def summary(self) -> str:
        """One line: launcher, exit codes, time."""
        state = "timed out (killed)" if self.timed_out else f"exit codes {self.returncodes}"
        return f"{self.launcher}: {state} after {self.seconds:.1f} s; link: {self.link}"


def rank_env(net: Network, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of launched ranks: ours minus launcher variables, plus
    GLOO_SOCKET_IFNAME=eth0, PG_SPARSE_BENCH_LINK, OMP_NUM_THREADS=1 and this
    package on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items()
           if k not in _LAUNCH_VARS and not k.startswith(_LAUNCH_PREFIXES)}
    pkg_root = str(Path(__file__).resolve().parents[2])
    env.update({
        "GLOO_SOCKET_IFNAME": "eth0",
        "PG_SPARSE_BENCH_LINK": net.link(),
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p),
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OMPI_MCA_mpi_yield_when_idle": "1",
    })
    env.update(extra or {})
    return env


def _program(args: Sequence[str], script: str | None, module: str) -> list[str]:
    return [str(Path(script).resolve()), *args] if script else ["-m", module, *args]




def _tee(src: IO[str], dst: Path, echo: bool, failed: threading.Event) -> threading.Thread:
    def pump() -> None:
        with open(dst, "w") as f:
            for line in src:
                f.write(line)
                f.flush()
                if " failed (exitcode: " in line or "ChildFailedError" in line:
                    failed.set()
                if echo:
                    sys.stdout.write(line)
                    sys.stdout.flush()

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    return t


def _run(net: Network, launcher: str, per_host: list[tuple[int, list[str]]],
         env: dict[str, str], log_dir: Path, timeout: float, fail_grace: float,
         stream: bool, watch_log: bool = True) -> LaunchResult:
    """Start each (host, cmd), wait for all (at most ``timeout`` s; once one
    fails the others get ``fail_grace`` s), kill leftovers, collect.

    A torchrun agent whose worker failed can stay up, waiting on its peers,
    until the other hosts end: its log line "failed (exitcode: N)" counts as
    a failure too (``watch_log``; not where agents restart their workers)."""
    procs: list[subprocess.Popen] = []
    failed_log = threading.Event()
    pumps, logs = [], []
    start = time.monotonic()
    timed_out = False
    try:
        for n, (host, cmd) in enumerate(per_host):
            p = net.popen(host, cmd, env=env, cwd=log_dir, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                          errors="replace")
            procs.append(p)
            logs.append(log_dir / f"{launcher}-host{host}.log")
            assert p.stdout is not None
            pumps.append(_tee(p.stdout, logs[-1], stream and n == 0, failed_log))
        deadline, failed = start + timeout, False
        while any(p.poll() is None for p in procs):
            if not failed and ((watch_log and failed_log.is_set()) or
                               any(p.returncode not in (None, 0) for p in procs)):
                failed, deadline = True, min(deadline, time.monotonic() + fail_grace)
            if time.monotonic() > deadline:
                timed_out = not failed
                break
            time.sleep(0.1)
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        net.kill_all()
        for p in procs:
            p.wait()
        for t in pumps:
            t.join(timeout=5)
    rcs = [p.returncode for p in procs]
    return LaunchResult(launcher, [c for _, c in per_host], rcs, timed_out,
                        time.monotonic() - start, logs, net.link())


def torchrun(net: Network, args: Sequence[str] = (), script: str | None = None,
             module: str = "pg_sparse.bench", nproc_per_host: int = 1,
             timeout: float = 600.0, env: dict[str, str] | None = None,
             log_dir: str | os.PathLike[str] | None = None, stream: bool = False,
             fail_grace: float = 10.0, port: int = MASTER_PORT,
             max_restarts: int = 0) -> LaunchResult:
    """One ``torchrun`` a namespace (static rendezvous at host 0), running
    ``script args`` or ``-m module args``. With ``max_restarts`` the agents
    meet through the c10d rendezvous at host 0 instead, so that when one
    host's workers fail every agent restarts its own (a static rendezvous
    cannot be joined again)."""
    logd = Path(log_dir or tempfile.mkdtemp(prefix=f"{net.prefix}-torchrun-"))
    logd.mkdir(parents=True, exist_ok=True)
    per_host = []
    for i in range(net.hosts):
        per_host.append((i, [
            sys.executable, "-m", "torch.distributed.run", f"--nnodes={net.hosts}",
            f"--nproc_per_node={nproc_per_host}", f"--node_rank={i}",
            *([f"--master_addr={net.addr(0)}", f"--master_port={port}"] if not max_restarts
              else ["--rdzv-backend=c10d", f"--rdzv-endpoint={net.addr(0)}:{port}",
                    f"--rdzv-id={net.prefix}",
                    # Host 0 serves the store: in a namespace the machine's
                    # host name resolves to none of its addresses.
                    f"--rdzv-conf=join_timeout=300,is_host={str(i == 0).lower()}",
                    # and the workers' store address is the host's own.
                    f"--local-addr={net.addr(i)}"]),
            f"--max_restarts={max_restarts}", "--monitor_interval=0.2",
            *_program(args, script, module)]))
    env = {"PG_SPARSE_BENCH_MACHINE_RANKS": str(net.hosts * nproc_per_host), **(env or {})}
    return _run(net, "torchrun", per_host, rank_env(net, env), logd, timeout,
                fail_grace, stream, watch_log=not max_restarts)


_AGENT = """#!/bin/sh
# plm_rsh_agent written by pg_sparse.bench.netlaunch: called as an ssh would be
# ("AGENT [options] HOST COMMAND..."), runs COMMAND in HOST's network namespace.
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
host=$1; shift
case "$host" in
{cases}
  *) echo "pg_sparse net agent: unknown host $host" >&2; exit 1 ;;
esac
exec ip netns exec "$ns" sh -c "$*"
"""


def mpirun(net: Network, args: Sequence[str] = (), script: str | None = None,
           module: str = "pg_sparse.bench", nproc_per_host: int = 1,
           timeout: float = 600.0, env: dict[str, str] | None = None,
           log_dir: str | os.PathLike[str] | None = None, stream: bool = False,
           port: int = MASTER_PORT, mca: Sequence[tuple[str, str]] = ()) -> LaunchResult:
    """One Open MPI ``mpirun`` in host 0's namespace placing ``nproc_per_host``
    ranks on each host; TCP over ``eth0`` only (no shared memory, which would
    bypass the shaped link)."""
    exe = shutil.which("mpirun")
    if not exe:
        raise NetError("mpirun not found (install openmpi-bin)")
    logd = Path(log_dir or tempfile.mkdtemp(prefix=f"{net.prefix}-mpirun-"))
    logd.mkdir(parents=True, exist_ok=True)
    hostfile = logd / "hostfile"
    hostfile.write_text("".join(f"{net.addr(i)} slots={nproc_per_host}\n"
                                for i in range(net.hosts)))
    agent = logd / "rsh_agent.sh"
    cases = "\n".join(f"  {net.addr(i)}) ns={net.ns(i)} ;;" for i in range(net.hosts))
    agent.write_text(_AGENT.format(cases=cases))
    agent.chmod(0o755)
    env = {"PG_SPARSE_BENCH_MACHINE_RANKS": str(net.hosts * nproc_per_host), **(env or {})}
    renv = rank_env(net, {"MASTER_ADDR": net.addr(0), "MASTER_PORT": str(port), **env})
    xs = ["GLOO_SOCKET_IFNAME", "PG_SPARSE_BENCH_LINK", "OMP_NUM_THREADS", "PYTHONUNBUFFERED",
          "PYTHONPATH", "MASTER_ADDR", "MASTER_PORT", *(env or {})]
    params: list[tuple[str, str]] = [
        ("plm_rsh_agent", str(agent)), ("plm_rsh_no_tree_spawn", "1"),
        ("pml", "ob1"), ("btl", "tcp,self"), ("btl_tcp_if_include", "eth0"),
        ("oob_tcp_if_include", "eth0"), ("mpi_yield_when_idle", "1"), *mca]
    cmd = [exe, "--hostfile", str(hostfile), "-np", str(net.hosts * nproc_per_host),
           "--map-by", f"ppr:{nproc_per_host}:node", "--bind-to", "none", "--wdir", str(logd)]
    for k, v in params:
        cmd += ["--mca", k, v]
    for x in dict.fromkeys(xs):
        cmd += ["-x", x]
    cmd += [sys.executable, *_program(args, script, module)]
    return _run(net, "mpirun", [(0, cmd)], renv, logd, timeout, 0.0, stream)


def launch(net: Network, launcher: str, **kw: Any) -> LaunchResult:
    """:func:`torchrun` or :func:`mpirun` by name."""
    if launcher == "torchrun":
        return torchrun(net, **kw)
    if launcher == "mpirun":
        kw.pop("fail_grace", None)
        return mpirun(net, **kw)
    raise ValueError(f"launcher {launcher!r}: torchrun or mpirun")
