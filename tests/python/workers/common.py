"""Shared by the worker scripts: argument parsing, the per-rank result file
and comparison helpers. Workers import torch and pg_sparse themselves."""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Every algorithm the hooks offer, in the order the checks run them.
ALGOS = ("dense", "topka", "topkdsa", "gtopk", "gaussiank", "oktopk")

# Half-precision tolerances of a result rounded once from fp32 (collectives'
# AVG, half buckets through the fp32 core).
HALF_TOL = {"float16": {"rtol": 1e-3, "atol": 1e-3},
            "bfloat16": {"rtol": 8e-3, "atol": 8e-3}}

LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
               "MASTER_PORT")


def parse_args(extra: Callable[[argparse.ArgumentParser], None] | None = None):
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True, help="folder for rank<R>.json")
    if extra:
        extra(p)
    return p.parse_args()


def launch_env() -> dict[str, str | None]:
    return {k: os.environ.get(k) for k in LAUNCH_VARS}


class Recorder:
    """Collects check results of one rank and rewrites rank<R>.json after
    every check, so a job killed half-way still tells what passed."""

    def __init__(self, out: str, rank: int, world_size: int) -> None:
        self.path = Path(out) / f"rank{rank}.json"
        self.rank, self.world_size = rank, world_size
        self.checks: dict[str, dict[str, Any]] = {}
        self.info: dict[str, Any] = {}
        self.done = False
        self.flush()

    def flush(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"rank": self.rank, "world_size": self.world_size,
                                   "checks": self.checks, "info": self.info,
                                   "done": self.done}, indent=1, default=str))
        os.replace(tmp, self.path)

    def record(self, name: str, ok: bool, detail: str = "") -> None:
        self.checks[name] = {"ok": bool(ok), "detail": detail}
        self.flush()

    def run(self, name: str, fn: Callable[[], Any]) -> None:
        """Run one check: ok unless it raises (the traceback is the detail)."""
        t0 = time.monotonic()
        try:
            detail = fn()
            self.record(name, True, f"{detail or ''} ({time.monotonic() - t0:.2f} s)")
        except BaseException as e:  # noqa: BLE001 - everything is a failure here
            self.record(name, False, f"{type(e).__name__}: {e}\n{traceback.format_exc()}")

    def finish(self) -> None:
        self.done = True
        self.flush()


def expect_error(fn: Callable[[], Any], types: tuple[type[BaseException], ...],
                 *needles: str) -> str:
    """Call fn; it must raise one of ``types`` whose message contains every
    needle (case-insensitive). Returns the message."""
    try:
        fn()
    except types as e:
        msg = str(e)
        missing = [n for n in needles if n.lower() not in msg.lower()]
        assert not missing, f"{type(e).__name__} lacks {missing}: {msg}"
        return f"{type(e).__name__}: {msg.splitlines()[0] if msg else ''}"
    except BaseException as e:
        raise AssertionError(f"expected {[t.__name__ for t in types]}, got "
                             f"{type(e).__name__}: {e}") from e
    raise AssertionError(f"expected {[t.__name__ for t in types]}, nothing raised")


def assert_close(actual, expected, what: str, rtol: float = 0.0, atol: float = 0.0) -> None:
    import torch
    assert actual.shape == expected.shape, \
        f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    try:
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=False)
    except AssertionError as e:
        raise AssertionError(f"{what}:\n{e}\nactual={actual.flatten()[:12].tolist()}\n"
                             f"expected={expected.flatten()[:12].tolist()}") from None
