"""The parameter table and the log sink, as a user sees them: every
PG_SPARSE_* variable has a row (name, type, default, doc) generated from the
C core; values are typed and validated, a bad one fails init_process_group
naming it; the core reads its rows when it creates objects; the C core's
messages reach logging.getLogger("pg_sparse.<subsystem>"), from any thread,
with only a NullHandler unless PG_SPARSE_LOG asks for output."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import pg_sparse
from pg_sparse import _C

ROOT = Path(__file__).resolve().parents[2]
HEADER = ROOT / "pg_sparse" / "include" / "pg_sparse" / "param.h"


def run_py(code: str, env: dict[str, str] | None = None,
           timeout: float = 60) -> subprocess.CompletedProcess:
    """Runs ``code`` in a fresh interpreter with only ``env`` added."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("PG_SPARSE_")}
    full.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full,
                          capture_output=True, text=True, timeout=timeout, cwd="/tmp")


# One process group of one rank over the sparse backend, and a bucket.
ONE_RANK = """
    import torch, torch.distributed as dist, pg_sparse
    dist.init_process_group("sparse", store=dist.HashStore(), rank=0, world_size=1)
    state = pg_sparse.SparseState(algo="oktopk", density=0.25, warmup_steps=0)
    b = state.native_bucket(0, torch.zeros(64))
    t = torch.arange(64, dtype=torch.float32)
    b.allreduce(t).wait()
"""


def test_table_rows_match_the_header():
    names = re.findall(r'"(PG_SPARSE_[A-Z0-9_]+)"', HEADER.read_text())
    rows = pg_sparse.params()
    assert [p.name for p in rows] == names
    for p in rows:
        assert p.type in ("int", "float", "str") and len(p.doc) > 10, p
        if not p.set:
            assert p.text == p.default
            assert type(p.value).__name__ == p.type, p  # typed, not text


def test_param_reads_validates_and_names(monkeypatch):
    monkeypatch.setenv("PG_SPARSE_OKTOPK_NUDGE_UP", "1.5")
    assert pg_sparse.param("PG_SPARSE_OKTOPK_NUDGE_UP") == 1.5
    monkeypatch.setenv("PG_SPARSE_MPI_CANCEL_POLLS", "77")
    value = pg_sparse.param("PG_SPARSE_MPI_CANCEL_POLLS")
    assert value == 77 and isinstance(value, int)
    monkeypatch.setenv("PG_SPARSE_OKTOPK_NUDGE_UP", "fast")
    with pytest.raises(ValueError, match=r"PG_SPARSE_OKTOPK_NUDGE_UP='fast' is invalid: "
                       r"expected a number in \[1, 2\]"):
        pg_sparse.param("PG_SPARSE_OKTOPK_NUDGE_UP")
    with pytest.raises(ValueError, match="no parameter 'PG_SPARSE_NOPE'"):
        pg_sparse.param("PG_SPARSE_NOPE")


def test_check_params_names_every_problem_and_logs_set_ones(monkeypatch, caplog):
    monkeypatch.setenv("PG_SPARSE_LOG", "loud")
    monkeypatch.setenv("PG_SPARSE_TRANSPROT", "gloo")
    with pytest.raises(ValueError) as err:
        pg_sparse.check_params()
    assert "PG_SPARSE_LOG='loud': choose one of error, warn, info, debug" in str(err.value)
    assert "PG_SPARSE_TRANSPROT: not a pg_sparse parameter" in str(err.value)
    monkeypatch.delenv("PG_SPARSE_TRANSPROT")
    monkeypatch.setenv("PG_SPARSE_LOG", "info")
    monkeypatch.setenv("PG_SPARSE_P2P_NAP_MAX_US", "321")
    with caplog.at_level(logging.INFO, logger="pg_sparse"):
        pg_sparse.check_params()
        pg_sparse.check_params()  # once per process
    lines = [r.getMessage() for r in caplog.records if r.name == "pg_sparse"]
    assert lines.count("PG_SPARSE_P2P_NAP_MAX_US=321 (default 1000)") == 1, lines


def test_cli_prints_the_table_and_fails_on_a_bad_value():
    out = subprocess.run([sys.executable, "-m", "pg_sparse", "params"], capture_output=True,
                         text=True, timeout=60, cwd="/tmp",
                         env={**os.environ, "PG_SPARSE_MPI_BCAST_CHUNK": "4096"})
    assert out.returncode == 0, out.stderr
    for p in pg_sparse.params():
        assert p.name in out.stdout and p.doc in out.stdout
    assert re.search(r"^\* PG_SPARSE_MPI_BCAST_CHUNK +4096 ", out.stdout, re.M), out.stdout
    bad = subprocess.run([sys.executable, "-m", "pg_sparse", "params"], capture_output=True,
                         text=True, timeout=60, cwd="/tmp",
                         env={**os.environ, "PG_SPARSE_MPI_BCAST_CHUNK": "-1"})
    assert bad.returncode == 1 and "'-1' (INVALID)" in bad.stdout, bad.stdout
    algos = subprocess.run([sys.executable, "-m", "pg_sparse", "algorithms"],
                           capture_output=True, text=True, timeout=60, cwd="/tmp")
    assert algos.stdout.split() == list(pg_sparse.algorithms())


def test_algorithms_and_stats_come_from_the_core():
    header = (ROOT / "pg_sparse" / "include" / "pg_sparse" / "bucket.h").read_text()
    block = header[header.index("#define PGS_ALGO_MAP"):header.index("typedef enum pgs_algo_id")]
    assert list(pg_sparse.algorithms()) == re.findall(r'"([a-z]+)"', block)
    docs = pg_sparse.stats_docs()
    assert {"step", "k", "host_syncs", "bytes_sent", "density"} <= set(docs)


def test_bad_variable_fails_init_naming_it():
    out = run_py(ONE_RANK, {"PG_SPARSE_OKTOPK_NUDGE_DOWN": "0.5"})
    assert out.returncode != 0
    assert ("ValueError: pg_sparse: bad environment: PG_SPARSE_OKTOPK_NUDGE_DOWN='0.5': "
            "expected a number in [1, 2]") in out.stderr, out.stderr


def test_core_reads_its_rows_when_it_creates_a_bucket():
    # Not through check_params: the bucket is created after init, with the
    # variable set afterwards, so only the C core's own read can fail it.
    code = ONE_RANK.replace('    b = state.native_bucket',
                            '    import os; os.environ["PG_SPARSE_OKTOPK_CAND_SLACK"] = "3"\n'
                            '    b = state.native_bucket')
    out = run_py(code)
    assert out.returncode != 0, out.stderr
    assert ("ValueError: pg_sparse: creating a sparse bucket: invalid parameter "
            "PG_SPARSE_OKTOPK_CAND_SLACK='3'") in out.stderr, out.stderr


def test_stats_are_typed_and_debug_reaches_stderr():
    code = ONE_RANK + """
    s = b.stats()
    assert isinstance(s["step"], int) and isinstance(s["n"], int), s
    assert isinstance(s["k"], int) and s["k"] == 16, s
    assert isinstance(s["density"], float) and isinstance(s["time_s"], float), s
    assert t.tolist() == [float(i) for i in range(64)] or s["dense"] == 0
    import logging
    h = [type(x).__name__ for x in logging.getLogger("pg_sparse").handlers]
    print("handlers", h)
    dist.destroy_process_group()
    """
    quiet = run_py(code)
    assert quiet.returncode == 0, quiet.stderr
    assert "handlers ['NullHandler']" in quiet.stdout
    assert "pg_sparse" not in quiet.stderr, quiet.stderr  # nothing by default
    loud = run_py(code, {"PG_SPARSE_LOG": "debug"})
    assert loud.returncode == 0, loud.stderr
    assert "[pg_sparse.bucket] DEBUG bucket of 64 values: oktopk, k = 16, rank 0 of 1" \
        in loud.stderr, loud.stderr
    assert "[pg_sparse] INFO transport gloo" in loud.stderr, loud.stderr


def test_messages_from_any_thread_reach_the_logger(caplog):
    got: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            got.append(record)

    handler = Keep()
    logging.getLogger("pg_sparse").addHandler(handler)
    old = logging.getLogger("pg_sparse").level
    logging.getLogger("pg_sparse").setLevel(logging.DEBUG)
    try:
        _C._log_start(3)
        threads = [threading.Thread(target=_C._log, args=(1, "test", f"from thread {i}"))
                   for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        _C._log(3, "test", "from the main thread")
        deadline = time.monotonic() + 10
        while len(got) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        texts = sorted(r.getMessage() for r in got)
        assert texts == sorted([f"from thread {i}" for i in range(4)] + ["from the main thread"])
        assert {r.name for r in got} == {"pg_sparse.test"}
        assert sorted(r.levelno for r in got) == [10, 30, 30, 30, 30]
        _C._log_start(1)  # warn: debug is no longer produced
        _C._log(3, "test", "dropped")
        _C._log(1, "test", "kept")
        deadline = time.monotonic() + 10
        while len(got) < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        assert [r.getMessage() for r in got[5:]] == ["kept"]
        with pytest.raises(ValueError, match="log level must be 0..3"):
            _C._log_start(7)
    finally:
        logging.getLogger("pg_sparse").removeHandler(handler)
        logging.getLogger("pg_sparse").setLevel(old)
        _C._log_start(1)


def test_a_forked_child_logs_to_stderr():
    # A DataLoader worker forked from a process that imported pg_sparse has
    # no forwarding thread: the core's messages must still come out.
    out = run_py("""
        import os, pg_sparse
        from pg_sparse import _C
        pid = os.fork()
        if pid == 0:
            _C._log(1, "test", "from the child")
            os._exit(0)
        os.waitpid(pid, 0)
    """)
    assert out.returncode == 0, out.stderr
    assert "pg_sparse.test warn: from the child" in out.stderr, out.stderr
