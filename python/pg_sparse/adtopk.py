"""ADTopk: all-dimension top-k sparsification as a DDP comm hook.

Global top-k starves whole rows: a layer whose gradients are small sends
nothing for many steps. ADTopk keeps every row alive: on each sparse call a
rank picks, in every row of every parameter (a row is one index of dimension
0, its entries along dimension 1; a 1-D tensor is one row), the entry of
largest ``|r|``, and beside them the global top-k of the bucket. The picks
are exchanged in one gather of (index, value) pairs and summed by
scatter-add (TopkA's exchange), and the rank's residual keeps everything it
did not send (error feedback): ``sum(residuals) + P * out = sum(g + old
residuals)``. Calls alternate between the all-dimension selection (row maxima
plus the global top-k) and the global top-k alone every ``interleave`` calls,
as ADTopk interleaves the two to bound the extra volume.

The selection and the exchange run with torch ops on the bucket's device
(CPU or CUDA) over the process group's ``all_gather_into_tensor``; the call
blocks until its exchange is done (no overlap with backward yet).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from . import _C


@dataclass
class _Bucket:
    segments: list[tuple[int, int, int]]  # (offset, rows, entries per row)
    nrows: int
    residual: torch.Tensor  # fp32, the bucket's size
    calls: int = 0  # sparse calls made
    last: dict[str, Any] = field(default_factory=dict)  # the last call's picks


class ADTopkState:
    """State of :func:`pg_sparse.hooks.adtopk_hook`: settings, the iteration
    count and per DDP bucket the residual and the row layout.

    Args:
        density: the global top-k's share of the bucket (k = max(1,
            round(density * n))), in (0, 1]; the row maxima come on top.
        warmup_steps: iterations (backward passes) run as plain allreduce
            first (DDP rebuilds its buckets after the first one).
        interleave: every ``interleave``-th sparse call is the global top-k
            alone (0: never; 1 would mean always, so at least 2).
        process_group: the group to reduce over (default: the world).
    """

    def __init__(self, density: float = 0.01, warmup_steps: int = 1, interleave: int = 0,
                 process_group: dist.ProcessGroup | None = None) -> None:
        if not isinstance(density, (int, float)) or not 0.0 < density <= 1.0:
            raise ValueError(f"pg_sparse: density must be in (0, 1], got {density!r}")
        if not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise ValueError(f"pg_sparse: warmup_steps must be an integer >= 0, "
                             f"got {warmup_steps!r}")
        if not isinstance(interleave, int) or interleave < 0 or interleave == 1:
            raise ValueError(f"pg_sparse: interleave must be 0 or an integer >= 2, "
                             f"got {interleave!r}")
        self.density = float(density)
        self.warmup_steps = warmup_steps
        self.interleave = interleave
        self.process_group = process_group
        self.iteration = 0
        self.buckets: dict[int, _Bucket] = {}

    def summary(self) -> dict[str, float]:
        """The last sparse call of every bucket, summed: ``bytes_sent`` (ring
        allgather model), ``global_selected`` (entries the output carries),
        ``local_selected`` (this rank's picks) and ``n``."""
        last = [b.last for b in self.buckets.values() if "n" in b.last]
        return {"bytes_sent": float(sum(x["bytes_sent"] for x in last)),
                "global_selected": float(sum(x["applied"] for x in last)),
                "local_selected": float(sum(x["picks"] for x in last)),
                "n": float(sum(x["n"] for x in last))}

    def bucket_state(self, index: int, buf: torch.Tensor,
                     shapes: list[torch.Size]) -> _Bucket:
        """Bucket ``index``'s state, (re)made when its size changed."""
        b = self.buckets.get(index)
        if b is None or b.residual.numel() != buf.numel():
            segs = segments(shapes, buf.numel())
            b = _Bucket(segs, sum(s[1] for s in segs),
                        torch.zeros(buf.numel(), dtype=torch.float32, device=buf.device))
            self.buckets[index] = b
        return b


def segments(shapes: list[torch.Size], n: int) -> list[tuple[int, int, int]]:
    """(offset, rows, entries per row) of each tensor of ``shapes``, laid
    out in order in a bucket of n entries (dimension 0 indexes the rows; a
    0-D or 1-D tensor is one row). Without shapes that add up to n, the
    bucket is one row."""
    sizes = [int(torch.Size(s).numel()) for s in shapes]
    if sum(sizes) != n:
        return [(0, 1, n)]
    out, off = [], 0
    for s, numel in zip(shapes, sizes):
        if numel:
            nrow = s[0] if len(s) >= 2 else 1
            out.append((off, nrow, numel // nrow))
        off += numel
    return out


def row_ids(segs: list[tuple[int, int, int]], n: int) -> torch.Tensor:
    """The row of every entry (int64), from ``segments``: for checks."""
    ids = torch.zeros(n, dtype=torch.int64)
    base = 0
    for off, nrow, per in segs:
        ids[off:off + nrow * per] = torch.arange(nrow).repeat_interleave(per) + base
        base += nrow
    return ids


def select(r: torch.Tensor, segs: list[tuple[int, int, int]], k: int,
           all_dims: bool) -> torch.Tensor:
    """Indices (int64, ascending) of the picks of residual ``r`` (fp32): the
    global top-k of ``|r|`` (nonzero entries; every entry tied with the k-th
    too), with ``all_dims`` also each row's largest ``|r|`` (ties: the lowest
    index)."""
    a = r.abs()
    kk = min(k, a.numel())
    if kk > 0:  # the core's radix select: the k-th |r|, O(n)
        thr, _ = _C._ops_kth_abs(r, kk)
        picked = a >= thr
    else:
        picked = torch.zeros_like(a, dtype=torch.bool)
    if all_dims:
        for off, nrow, per in segs:  # argmax: the first of tied maxima
            best = a[off:off + nrow * per].view(nrow, per).argmax(dim=1)
            best += off + torch.arange(nrow, device=a.device) * per
            picked[best] = True
    picked &= a != 0
    return picked.nonzero().flatten()


def step(state: ADTopkState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """One call of :func:`pg_sparse.hooks.adtopk_hook`."""
    buf = bucket.buffer()
    group = state.process_group or dist.group.WORLD
    world = dist.get_world_size(group)
    index = bucket.index()
    if state.iteration < state.warmup_steps:
        out = buf.div_(world)
        dist.all_reduce(out, group=group)
    else:
        shapes = [p.shape for p in bucket.parameters()]
        b = state.bucket_state(index, buf, shapes)
        out = _sparse_call(state, b, buf, group, world)
    if bucket.is_last():
        state.iteration += 1
    fut: torch.futures.Future = torch.futures.Future(
        devices=[buf.device] if buf.is_cuda else None)
    fut.set_result(out)
    return fut


def _sparse_call(state: ADTopkState, b: _Bucket, buf: torch.Tensor, group: Any,
                 world: int) -> torch.Tensor:
    """Select, exchange (one gather of padded pairs), scatter-add, keep the
    rest; returns the average in ``buf``'s dtype."""
    b.residual.add_(buf.float())
    k = max(1, round(state.density * buf.numel()))
    all_dims = not (state.interleave and (b.calls + 1) % state.interleave == 0)
    idx = select(b.residual, b.segments, k, all_dims)
    val = b.residual[idx]
    b.residual[idx] = 0.0
    b.calls += 1
    b.last = {"idx": idx, "all_dims": all_dims}
    count = torch.tensor([idx.numel()], dtype=torch.int64, device=buf.device)
    counts = torch.empty(world, dtype=torch.int64, device=buf.device)
    dist.all_gather_into_tensor(counts, count, group=group)
    cap = int(counts.max().item())
    pad_i = torch.zeros(cap, dtype=torch.int64, device=buf.device)
    pad_v = torch.zeros(cap, dtype=torch.float32, device=buf.device)
    pad_i[:idx.numel()] = idx
    pad_v[:idx.numel()] = val
    all_i = torch.empty(world * cap, dtype=torch.int64, device=buf.device)
    all_v = torch.empty(world * cap, dtype=torch.float32, device=buf.device)
    dist.all_gather_into_tensor(all_i, pad_i, group=group)
    dist.all_gather_into_tensor(all_v, pad_v, group=group)
    total = torch.zeros(buf.numel(), dtype=torch.float32, device=buf.device)
    total.index_add_(0, all_i, all_v)  # padding adds zeros at index 0
    # Ring allgathers: a rank sends its block of cap pairs (int64 index and
    # fp32 value) and its count P - 1 times.
    b.last.update(bytes_sent=(12 * cap + 8) * (world - 1), picks=idx.numel(),
                  applied=int((total != 0).sum()), n=buf.numel())
    return buf.copy_(total.div_(world))
