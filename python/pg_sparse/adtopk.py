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

The selection runs with the core's kernels (the exact k-th ``|r|`` and the
compaction) and torch ops on the bucket's device (CPU or CUDA); the
exchange is one ``all_gather_into_tensor`` of a fixed-size block per rank
(k + rows pairs: int32 indices and fp32 values bit-cast to int32, padded
with index n), so no count travels first. On CPU buckets the call returns
a future that DDP overlaps with the rest of backward; CUDA buckets wait for
the gather before summing. Per bucket the send, receive, ``|r|`` and sum
buffers are kept between calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from . import _C

# True: CUDA buckets sum after work.wait() on the caller's stream. False (the
# default): the sum is chained on the exchange's future as on host buckets,
# so DDP overlaps it with the backward pass; a GPU check runs both forms
# (both conserve mass and match the CPU's outputs on 2 x H200).
_CUDA_WAIT = False


@dataclass
class _Bucket:
    segments: list[tuple[int, int, int]]  # (offset, rows, entries per row)
    nrows: int
    residual: torch.Tensor  # fp32, the bucket's size
    scratch: dict[str, torch.Tensor] = field(default_factory=dict)  # kept buffers
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
                "global_selected": float(sum(int(x["applied"]) for x in last)),
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
           all_dims: bool, absbuf: torch.Tensor | None = None) -> torch.Tensor:
    """Indices (int64, ascending) of the picks of residual ``r`` (fp32): the
    global top-k of ``|r|`` (nonzero entries; ties of the k-th in index
    order, so exactly min(k, nonzero) of them), with ``all_dims`` also each
    row's largest ``|r|`` (ties: the lowest index). ``absbuf``: a kept
    buffer for ``|r|``."""
    kk = min(k, r.numel())
    if kk > 0:  # the core's radix select and compaction: O(n), no mask
        thr, n_gt = _C._ops_kth_abs(r, kk)
        top, _ = _C._ops_compact(r, thr, kk - n_gt, -1)
        top = top.long()
    else:
        top = torch.zeros(0, dtype=torch.int64, device=r.device)
    if not all_dims:
        return top
    a = torch.abs(r, out=absbuf) if absbuf is not None else r.abs()
    best = [a[off:off + nrow * per].view(nrow, per).argmax(dim=1)
            + off + torch.arange(nrow, device=r.device) * per
            for off, nrow, per in segs]  # argmax: the first of tied maxima
    rows = torch.cat(best)
    rows = rows[r[rows] != 0]
    return torch.cat([top, rows]).unique()


def step(state: ADTopkState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """One call of :func:`pg_sparse.hooks.adtopk_hook`."""
    buf = bucket.buffer()
    group = state.process_group or dist.group.WORLD
    world = dist.get_world_size(group)
    index = bucket.index()
    last = bucket.is_last()
    if state.iteration < state.warmup_steps:
        out = buf.div_(world)
        dist.all_reduce(out, group=group)
        fut: torch.futures.Future = torch.futures.Future(
            devices=[buf.device] if buf.is_cuda else None)
        fut.set_result(out)
    else:
        shapes = [p.shape for p in bucket.parameters()]
        b = state.bucket_state(index, buf, shapes)
        fut = _sparse_call(state, b, buf, group, world)
    if last:
        state.iteration += 1
    return fut


def _kept(b: _Bucket, name: str, size: int, dtype: torch.dtype,
          device: torch.device) -> torch.Tensor:
    """Bucket ``b``'s buffer ``name`` of ``size`` entries, made once."""
    t = b.scratch.get(name)
    if t is None or t.numel() != size or t.dtype != dtype or t.device != device:
        t = b.scratch[name] = torch.empty(size, dtype=dtype, device=device)
    return t


def _sparse_call(state: ADTopkState, b: _Bucket, buf: torch.Tensor, group: Any,
                 world: int) -> torch.futures.Future[torch.Tensor]:
    """Select, exchange (one asynchronous gather of fixed-size blocks),
    scatter-add, keep the rest; the future's value is the average, in
    ``buf``'s dtype."""
    n, dev = buf.numel(), buf.device
    b.residual.add_(buf)
    k = max(1, round(state.density * n))
    all_dims = not (state.interleave and (b.calls + 1) % state.interleave == 0)
    idx = select(b.residual, b.segments, k, all_dims,
                 _kept(b, "abs", n, torch.float32, dev) if all_dims else None)
    m = idx.numel()
    # The block every rank sends: at most min(k, n) global picks and one
    # per row, the same size on every rank.
    cap = min(k, n) + (b.nrows if all_dims else 0)
    send = _kept(b, "send", 2 * cap, torch.int32, dev)
    send[:cap].fill_(n)  # padding: index n, a slot past the bucket
    send[:m] = idx.to(torch.int32)
    vals = send[cap:].view(torch.float32)
    vals.zero_()
    vals[:m] = b.residual[idx]
    b.residual[idx] = 0.0
    b.calls += 1
    b.last = {"idx": idx, "all_dims": all_dims}
    recv = _kept(b, "recv", world * 2 * cap, torch.int32, dev)

    def finish(_: Any) -> torch.Tensor:
        blocks = recv.view(world, 2 * cap)
        all_i = blocks[:, :cap].reshape(-1).long()
        all_v = blocks[:, cap:].contiguous().view(torch.float32).reshape(-1)
        total = _kept(b, "total", n + 1, torch.float32, dev)
        total.zero_()
        total.index_add_(0, all_i, all_v)
        out = total[:n]
        # A ring allgather: a rank sends its block (4-byte indices and
        # values) P - 1 times.
        # The count stays a tensor until summary() asks: no device wait
        # inside the future's callback on CUDA.
        b.last.update(bytes_sent=8 * cap * (world - 1), picks=m,
                      applied=torch.count_nonzero(out), n=n)
        return buf.copy_(out.div_(world))
    work = dist.all_gather_into_tensor(recv, send, group=group, async_op=True)
    if buf.is_cuda and _CUDA_WAIT:
        # The blocking form, kept for the GPU check that compares the two
        # (the chained form's earlier failure on 2 x H200 was the check's own:
        # P * out summed over ranks, P^2 * out in all).
        work.wait()
        fut: torch.futures.Future = torch.futures.Future(devices=[dev])
        fut.set_result(finish(None))
        return fut
    return work.get_future().then(finish)
