"""Launch real torchrun and mpirun jobs of the worker scripts in workers/.

Each worker runs many sub-checks in one job (a job costs seconds of startup,
mostly importing torch) and every rank writes ``rank<R>.json`` into the job's
output folder: ``{"checks": {name: {"ok": bool, "detail": str}}, "info":
{...}, "done": bool}``. Tests assert on those files; a job runs once per
session (``jobs.get``) however many tests read it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
WORKERS = HERE / "workers"

# `python -m pytest` from the repository root puts the root on sys.path, and
# there the C core's folder pg_sparse/ (no __init__.py) is found as a
# namespace package before setuptools' editable finder is asked: the package
# would import as an empty shell. Drop the root so `import pg_sparse` finds
# python/pg_sparse in this process (the workers run with their own folder
# first on sys.path and a scratch working directory, so they are unaffected).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != REPO]
if "pg_sparse" in sys.modules and getattr(sys.modules["pg_sparse"], "__file__", None) is None:
    del sys.modules["pg_sparse"]


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under tests/sanitizers/run.sh python / python_tsan
    (PGS_EXPECT_SANITIZER=asan or tsan): the extension imported must be that
    sanitizer's build, with its runtime loaded, or the run would test the
    plain build and pass for nothing."""
    kind = os.environ.get("PGS_EXPECT_SANITIZER")
    if not kind:
        return
    import pg_sparse

    maps = Path("/proc/self/maps").read_text()
    so = Path(pg_sparse._C.__file__).resolve()
    if f"{kind}-py" not in so.parts or f"lib{kind}" not in maps:
        raise pytest.UsageError(
            f"PGS_EXPECT_SANITIZER={kind}, but pg_sparse._C is {so} and the {kind} runtime "
            f"is {'' if f'lib{kind}' in maps else 'not '}loaded")


# Variables of an enclosing launcher must not leak into the jobs we start.
_LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                "ROLE_RANK", "MASTER_ADDR", "MASTER_PORT", "PG_SPARSE_TRANSPORT")
_LAUNCH_PREFIXES = ("OMPI_COMM_WORLD_", "OMPI_MCA_orte_", "PMIX_", "PMI_", "SLURM_",
                    "TORCHELASTIC_")


def _job_env(extra: dict[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in _LAUNCH_VARS and not k.startswith(_LAUNCH_PREFIXES)}
    env.update({
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        # Two cores, up to four ranks: never busy-poll while waiting.
        "OMPI_MCA_mpi_yield_when_idle": "1",
    })
    env.update(extra or {})
    return env


def run_torchrun(worker: Path, nproc: int, cwd: Path, *args: str, timeout: float = 180) -> str:
    """Run ``worker`` under ``torchrun --standalone`` with ``nproc`` ranks
    (no PG_SPARSE_* variable of this process passed on) and return its
    output; fail the test with the output's tail when the job fails."""
    env = {k: v for k, v in _job_env(None).items() if not k.startswith("PG_SPARSE_")}
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          f"--nproc_per_node={nproc}", str(worker), *args], env=env, cwd=cwd,
                         capture_output=True, text=True, timeout=timeout)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    return text


@dataclass
class Job:
    """A finished (or killed) launch and what its ranks wrote."""

    label: str
    cmd: list[str]
    nproc: int
    returncode: int | None
    timed_out: bool
    seconds: float
    stdout: str
    stderr: str
    results: dict[int, dict] = field(default_factory=dict)
    leftover: list[str] = field(default_factory=list)  # processes still alive after

    def log(self, limit: int = 8000) -> str:
        def tail(text: str) -> str:
            return text if len(text) <= limit else "...\n" + text[-limit:]
        state = "killed after timeout" if self.timed_out else f"exit code {self.returncode}"
        return (f"\n--- job {self.label}: {' '.join(self.cmd)}\n--- {state}, "
                f"{self.seconds:.1f} s\n--- stdout:\n{tail(self.stdout)}\n"
                f"--- stderr:\n{tail(self.stderr)}")

    def rank(self, r: int) -> dict:
        assert r in self.results, f"rank {r} wrote no result file{self.log()}"
        return self.results[r]

    def info(self, r: int) -> dict:
        return self.rank(r).get("info", {})

    def check(self, name: str, ranks: list[int] | None = None) -> None:
        """Assert that every rank (or ``ranks``) recorded check ``name`` as ok."""
        failures, skips = [], []
        for r in range(self.nproc) if ranks is None else ranks:
            res = self.rank(r)
            c = res["checks"].get(name)
            if c is None:
                failures.append(f"rank {r}: check {name!r} never ran "
                                f"(worker finished: {res.get('done')})")
            elif not c["ok"]:
                failures.append(f"rank {r}: {c['detail']}")
            elif c["detail"].startswith("SKIP"):
                skips.append(c["detail"])
        assert not failures, "\n".join(failures) + self.log()
        if skips:
            pytest.skip(skips[0])

    def assert_clean_exit(self) -> None:
        assert not self.timed_out and self.returncode == 0, \
            "the job did not end cleanly" + self.log()
        for r in range(self.nproc):
            assert self.rank(r).get("done"), f"rank {r} did not finish{self.log()}"


def _leftover(pgid: int) -> list[str]:
    """Processes of the job's process group still alive (then killed)."""
    # Without a preloaded sanitizer runtime (tests/sanitizers/run.sh python
    # preloads ASan for the Python ranks): ps under it can hang.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    found = subprocess.run(["ps", "-o", "pid=,stat=,args=", "-g", str(pgid)],
                           capture_output=True, text=True, env=env,
                           timeout=30).stdout.split("\n")
    # Zombies (stat Z) have ended; only their parent's reaping is missing.
    alive = [line.strip() for line in found
             if line.strip() and not line.split()[1].startswith("Z")]
    if alive:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return alive


def launch(launcher: str, script: str, nproc: int, args: tuple[str, ...] = (),
           env: dict[str, str] | None = None, timeout: float = 120.0,
           label: str | None = None, launcher_args: tuple[str, ...] = ()) -> Job:
    """Run workers/<script> on ``nproc`` ranks under ``launcher`` ("torchrun"
    or "mpirun", with ``launcher_args`` added to its options), wait at most
    ``timeout`` seconds (then kill the whole job) and collect the ranks' JSON
    results; processes of the job still alive after it are listed in
    ``Job.leftover`` (and killed)."""
    out = Path(tempfile.mkdtemp(prefix=f"pgs_{Path(script).stem}_"))
    path = str(WORKERS / script)
    if launcher == "torchrun":
        opts = ["--max_restarts=0", "--monitor_interval=0.2", *launcher_args]
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={nproc}", *opts, path]
    elif launcher == "mpirun":
        mpirun = shutil.which("mpirun")
        assert mpirun, "mpirun not found (install openmpi-bin)"
        cmd = [mpirun, "--oversubscribe", "--bind-to", "none", "-np", str(nproc),
               *launcher_args, sys.executable, path]
    else:
        raise ValueError(launcher)
    cmd += ["--out", str(out), *args]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=out, env=_job_env(env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)  # the job's own process group
        stdout, stderr = proc.communicate()
    job = Job(label or f"{launcher}-{nproc}-{script}", cmd, nproc,
              None if timed_out else proc.returncode, timed_out,
              time.monotonic() - start, stdout, stderr)
    if not timed_out:
        time.sleep(0.5)  # let the launcher's own cleanup finish
        job.leftover = _leftover(proc.pid)
    for f in out.glob("rank*.json"):
        job.results[int(f.stem[4:])] = json.loads(f.read_text())
    shutil.rmtree(out, ignore_errors=True)
    return job


class Jobs:
    """Session cache: each distinct launch runs once."""

    def __init__(self) -> None:
        self._done: dict[tuple, Job] = {}

    def get(self, launcher: str, script: str, nproc: int, args: tuple[str, ...] = (),
            env: dict[str, str] | None = None, timeout: float = 120.0,
            launcher_args: tuple[str, ...] = ()) -> Job:
        key = (launcher, script, nproc, args, tuple(sorted((env or {}).items())),
               launcher_args)
        if key not in self._done:
            self._done[key] = launch(launcher, script, nproc, args, env, timeout,
                                     launcher_args=launcher_args)
        return self._done[key]


@pytest.fixture(scope="session")
def jobs() -> Jobs:
    return Jobs()

