"""Hierarchical sparse allreduce (SparseState(hierarchy=...)): real torchrun
jobs of 4 ranks, as 2 nodes x 2 (local_size=2) and as one node ("auto" is
then flat). The worker is tests/python/workers/hierarchy.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import run_torchrun

import pg_sparse

WORKER = Path(__file__).resolve().parent / "workers" / "hierarchy.py"


def torchrun(tmp_path: Path, *args: str) -> str:
    return run_torchrun(WORKER, 4, tmp_path, *args, timeout=240)


def assert_two_nodes_ok(text: str) -> None:
    """Every rank's lines of the worker's 2 x 2 checks (CPU or ``cuda``)."""
    for rank in range(4):
        for algo, sparse in (("oktopk", 4), ("topka", 4), ("gtopk", 4), ("dense", 0)):
            assert f"rank {rank}: {algo} hierarchical ok (5 calls, {sparse} sparse)" in text, \
                text[-3000:]
        assert f"rank {rank}: training loss flat" in text, text[-3000:]


def test_two_nodes_of_two(tmp_path):
    # 4 ranks on 2 cores.
    text = torchrun(tmp_path)
    assert_two_nodes_ok(text)
    assert text.count("(shared memory and group paths equal)") == 4, text[-3000:]
    # The two leaders made the segments owner-only and unlinked them.
    assert text.count("segments, mode 0600, unlinked") == 2, text[-3000:]


def test_planted_segment_refused_on_every_rank(tmp_path):
    # 4 ranks on 2 cores. Another user's file waiting under the name the
    # leaders will use (as if they had guessed it): both nodes refuse it.
    prefix = f"/dev/shm/pg_sparse-test-planted-{os.getpid()}"
    with open(f"{prefix}-0", "wb") as f:
        f.write(b"planted")
    try:
        text = torchrun(tmp_path, "planted", prefix)
    finally:
        os.unlink(f"{prefix}-0")
    for rank in range(4):
        assert f"rank {rank}: planted segment refused" in text, text[-3000:]


def test_auto_is_flat_on_one_node(tmp_path):
    text = torchrun(tmp_path, "auto")
    assert text.count("auto is flat on one node") == 4, text[-3000:]


def test_bad_settings():
    with pytest.raises(ValueError, match="hierarchy must be one of"):
        pg_sparse.SparseState(hierarchy="ring")
    with pytest.raises(ValueError, match="no momentum, precondition or process_group"):
        pg_sparse.SparseState(hierarchy="node", momentum=0.9)
    with pytest.raises(ValueError, match="local_size must be an integer >= 1"):
        pg_sparse.SparseState(hierarchy="node", local_size=0)
