"""ACP-SGD (pg_sparse.lowrank) and torch's PowerSGD hook on the sparse
backend: a real torchrun job of 2 ranks (tests/python/workers/lowrank.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_torchrun
from pg_sparse.lowrank import ACPSGDState

WORKER = Path(__file__).resolve().parent / "workers" / "lowrank.py"


def test_acpsgd_and_powersgd_job(tmp_path):
    text = run_torchrun(WORKER, 2, tmp_path)
    for rank in (0, 1):
        assert f"rank {rank}: acp math ok (3 compressed calls)" in text, text[-4000:]
        assert f"rank {rank}: acp training" in text
        assert f"rank {rank}: powersgd on sparse == on gloo" in text


def test_acpsgd_state_checks_and_round_trips():
    with pytest.raises(ValueError, match="rank must be >= 1"):
        ACPSGDState(rank=0)
    with pytest.raises(ValueError, match="start_iter must be >= 0"):
        ACPSGDState(start_iter=-1)
    state = ACPSGDState(rank=3, seed=5)
    state.iteration = 7
    again = ACPSGDState()
    again.load_state_dict(state.state_dict())
    assert (again.rank, again.seed, again.iteration) == (3, 5, 7)
    with pytest.raises(ValueError, match="ACPSGDState format"):
        again.load_state_dict({**state.state_dict(), "version": 9})
