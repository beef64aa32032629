"""Low-rank gradient compression as DDP comm hooks: ACP-SGD (Zhang et al.,
ICDCS'23), with torch's own PowerSGD beside it for comparison.

ACP-SGD compresses each weight matrix M (a gradient viewed as
``[shape[0], numel / shape[0]]``) to one factor per step and alternates:
on even calls ``P = (M + E) Q`` with Q the last all-reduced Q,
orthogonalised; on odd calls ``Q = (M + E)^T P`` the same way round. Only
the new factor is all-reduced, in one allreduce per bucket together with
the tensors sent raw (1-D ones and matrices too small to gain), where
PowerSGD needs two dependent ones. The output is ``P Q^T / N`` and each rank
keeps ``E = M + E - P_local Q^T`` (error feedback), so with the factors the
same on every rank nothing is lost: ``sum(E_new) + N * out = sum(M + E)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import (  # noqa: F401
    PowerSGDState,
    powerSGD_hook,
)

STATE_VERSION = 1


@dataclass
class _Matrix:
    offset: int  # in the bucket
    n: int
    m: int
    p: torch.Tensor  # n x r: the last all-reduced P (sum over ranks)
    q: torch.Tensor  # m x r: the last all-reduced Q


@dataclass
class _Bucket:
    shapes: tuple[tuple[int, ...], ...]
    matrices: list[_Matrix]
    raw: list[tuple[int, int]]  # (offset, numel) of what is sent raw
    error: torch.Tensor  # fp32, the bucket's size (zero where sent raw)
    calls: int = 0  # compressed calls: even sends P, odd sends Q
    extra: dict[str, Any] = field(default_factory=dict)


class ACPSGDState:
    """State of :func:`acpsgd_hook`: settings, the iteration count and, per
    DDP bucket, the factors P and Q of each compressed matrix and the error.

    Args:
        process_group: the group to reduce over (default: the world).
        rank: the rank r of the factors (``min(r, n, m)`` per matrix).
        start_iter: iterations (backward passes, ``bucket.is_last()``) run as
            plain allreduce first, as torch's ``start_powerSGD_iter``; keep it
            >= 2 so that DDP's bucket rebuild after the first iteration
            happens before the factors exist.
        min_compression_rate: a matrix is compressed only if
            ``(n + m) * r * min_compression_rate < n * m`` (torch's rule);
            the others are sent raw.
        seed: the factors start from ``torch.randn`` of a generator seeded
            with ``seed + bucket index``: the same on every rank, which ACP
            needs (each rank multiplies by the other factor it holds).
        use_error_feedback: keep what the factors miss for the next call.
    """

    def __init__(self, process_group: dist.ProcessGroup | None = None, rank: int = 4,
                 start_iter: int = 2, min_compression_rate: float = 2.0, seed: int = 0,
                 use_error_feedback: bool = True) -> None:
        if rank < 1:
            raise ValueError(f"pg_sparse: ACP-SGD rank must be >= 1, got {rank}")
        if start_iter < 0:
            raise ValueError(f"pg_sparse: start_iter must be >= 0, got {start_iter}")
        self.process_group = process_group
        self.rank = int(rank)
        self.start_iter = int(start_iter)
        self.min_compression_rate = float(min_compression_rate)
        self.seed = int(seed)
        self.use_error_feedback = bool(use_error_feedback)
        self.iteration = 0
        self._buckets: dict[int, _Bucket] = {}
        self._saved: dict[int, dict[str, Any]] = {}  # restored lazily

    def _world(self) -> int:
        return dist.get_world_size(self.process_group)

    def _bucket(self, index: int, buf: torch.Tensor,
                grads: list[torch.Tensor]) -> _Bucket:
        shapes = tuple(tuple(g.shape) for g in grads)
        b = self._buckets.get(index)
        if b is not None and b.shapes == shapes and b.error.numel() == buf.numel():
            return b
        gen = torch.Generator().manual_seed(self.seed + index)
        matrices, raw, offset = [], [], 0
        for g in grads:
            n = g.shape[0] if g.dim() >= 2 else 0
            m = g.numel() // n if n else 0
            r = min(self.rank, n, m)
            if n and (n + m) * r * self.min_compression_rate < n * m:
                p = torch.randn(n, r, generator=gen).to(buf.device)
                q = torch.randn(m, r, generator=gen).to(buf.device)
                matrices.append(_Matrix(offset, n, m, p, q))
            else:
                raw.append((offset, g.numel()))
            offset += g.numel()
        b = _Bucket(shapes, matrices, raw,
                    torch.zeros(buf.numel(), dtype=torch.float32, device=buf.device))
        self._buckets[index] = b
        return b

    def state_dict(self) -> dict[str, Any]:
        """Settings, iteration, and per bucket the factors and the error."""
        return {"version": STATE_VERSION, "iteration": self.iteration,
                "config": {"rank": self.rank, "start_iter": self.start_iter,
                           "min_compression_rate": self.min_compression_rate,
                           "seed": self.seed, "use_error_feedback": self.use_error_feedback},
                "buckets": {i: {"shapes": [list(s) for s in b.shapes], "calls": b.calls,
                                "error": b.error.cpu(),
                                "p": [x.p.cpu() for x in b.matrices],
                                "q": [x.q.cpu() for x in b.matrices]}
                            for i, b in self._buckets.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (buckets are rebuilt with
        their factors when the hook next sees them with the same shapes)."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"pg_sparse: ACPSGDState format {state.get('version')!r}, "
                             f"expected {STATE_VERSION}")
        for k, v in state["config"].items():
            setattr(self, k, v)
        self.iteration = int(state["iteration"])
        self._saved = {int(i): s for i, s in state["buckets"].items()}
        self._buckets = {}

    def _restore(self, index: int, b: _Bucket) -> None:
        saved = self._saved.pop(index, None)
        if saved is None or [list(s) for s in b.shapes] != saved["shapes"]:
            return
        b.calls = int(saved["calls"])
        b.error.copy_(saved["error"])
        for x, p, q in zip(b.matrices, saved["p"], saved["q"]):
            x.p.copy_(p)
            x.q.copy_(q)


def _orthogonal(a: torch.Tensor) -> torch.Tensor:
    """An orthonormal basis of a's columns (reduced QR), the same on every
    rank for the same input."""
    return torch.linalg.qr(a.float(), mode="reduced")[0]


def _acp_step(state: ACPSGDState,
              bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """One call of ACP-SGD on one bucket (pg_sparse.hooks.acpsgd_hook)."""
    group = state.process_group
    buf = bucket.buffer()
    completed = state.iteration  # iterations before this one
    if bucket.is_last():
        state.iteration += 1
    world = state._world()
    if completed < state.start_iter:
        fut = dist.all_reduce(buf, group=group, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0].div_(world))
    index = bucket.index()
    new = index not in state._buckets
    b = state._bucket(index, buf, bucket.gradients())
    if new:
        state._restore(index, b)
    x = buf.float()
    if state.use_error_feedback:
        x = x + b.error
    send_p = b.calls % 2 == 0
    others = [_orthogonal(m.q if send_p else m.p) for m in b.matrices]
    parts = [x[o:o + n] for o, n in b.raw]
    for mat, other in zip(b.matrices, others):
        grad = x[mat.offset:mat.offset + mat.n * mat.m].view(mat.n, mat.m)
        factor = grad @ other if send_p else grad.t() @ other
        if state.use_error_feedback:
            local = factor @ other.t() if send_p else other @ factor.t()
            b.error[mat.offset:mat.offset + mat.n * mat.m].copy_((grad - local).view(-1))
        parts.append(factor.reshape(-1))
    flat = torch.cat(parts) if parts else x.new_zeros(0)

    def done(fut: torch.futures.Future) -> torch.Tensor:
        reduced = fut.value()[0]
        at = 0
        for o, n in b.raw:
            buf[o:o + n].copy_(reduced[at:at + n] / world)
            at += n
        for mat, other in zip(b.matrices, others):
            r = other.shape[1]
            rows = mat.n if send_p else mat.m
            factor = reduced[at:at + rows * r].view(rows, r)
            at += rows * r
            if send_p:
                mat.p = factor.clone()
                out = factor @ other.t()
            else:
                mat.q = factor.clone()
                out = other @ factor.t()
            buf[mat.offset:mat.offset + mat.n * mat.m].copy_((out / world).view(-1))
        b.calls += 1
        return buf

    return dist.all_reduce(flat, group=group, async_op=True).get_future().then(done)
