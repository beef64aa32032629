"""ADTopk (pg_sparse.adtopk, pg_sparse.hooks.adtopk_hook): the row layout
and the selection against hand-made cases, bad settings, and a real 2-rank
torchrun job (tests/python/workers/adtopk.py) checked against oracles."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import run_torchrun

from pg_sparse import adtopk

WORKER = Path(__file__).resolve().parent / "workers" / "adtopk.py"


def test_rows_follow_the_shapes():
    segs = adtopk.segments([torch.Size([2, 3]), torch.Size([4]), torch.Size([0, 3]),
                            torch.Size([])], 11)
    assert segs == [(0, 2, 3), (6, 1, 4), (10, 1, 1)]
    assert adtopk.row_ids(segs, 11).tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 3]
    # Shapes that do not add up: the bucket is one row.
    assert adtopk.segments([torch.Size([5])], 7) == [(0, 1, 7)]


def test_selection_keeps_every_row():
    r = torch.tensor([5.0, -4.0, 0.1, 0.2, -0.3, 0.0, 0.0, 0.05])
    segs = [(0, 2, 3), (6, 1, 2)]  # rows [5, -4, .1], [.2, -.3, 0], [0, .05]
    # Global top-2 alone: the first row's two entries.
    assert adtopk.select(r, segs, 2, all_dims=False).tolist() == [0, 1]
    # Plus each row's largest |r| (row 2's 0.05; zeros never picked).
    assert adtopk.select(r, segs, 2, all_dims=True).tolist() == [0, 1, 4, 7]
    assert adtopk.select(torch.zeros(4), [(0, 2, 2)], 2, all_dims=True).tolist() == []


@pytest.mark.parametrize("kwargs,match", [
    ({"density": 0.0}, "density"), ({"density": 1.5}, "density"),
    ({"warmup_steps": -1}, "warmup_steps"), ({"interleave": 1}, "interleave"),
])
def test_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        adtopk.ADTopkState(**kwargs)


def test_ddp_job(tmp_path):
    text = run_torchrun(WORKER, 2, tmp_path)  # 2 ranks on 2 cores
    for rank in (0, 1):
        for il in (0, 2):
            assert f"rank {rank}: adtopk interleave={il} ok" in text, text[-3000:]
