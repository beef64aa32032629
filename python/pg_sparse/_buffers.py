"""Bucket layouts: per-bucket hook buffers (momentum, Adam's moments) that
survive DDP's bucket rebuilds (one fp32 tensor per bucket in the native
bucket's order, with a view of it per parameter, so a bucket packed
differently starts from its parameters' values instead of zeros), and the
permutation between two packings of the same parameters."""

from __future__ import annotations

from collections.abc import Sequence

import torch

Layout = tuple[tuple[int, int], ...]  # ((parameter id, numel), ...)


class ParamBuffers:
    """One named buffer of every bucket (e.g. the velocity)."""

    def __init__(self) -> None:
        self.tensors: dict[int, torch.Tensor] = {}
        self._layouts: dict[int, Layout | None] = {}
        self._params: dict[int, torch.Tensor] = {}

    def get(self, index: int, like: torch.Tensor, layout: Layout | None) -> torch.Tensor:
        """Bucket ``index``'s buffer, (re)built from the parameters' views
        when the bucket is new or packs its parameters differently."""
        t = self.tensors.get(index)
        if t is not None and t.numel() == like.numel() and t.device == like.device \
                and self._layouts.get(index) == layout:
            return t
        if layout is None:
            t = torch.zeros_like(like, dtype=torch.float32)
        else:
            parts = []
            for pid, n in layout:
                v = self._params.get(pid)
                ok = v is not None and v.numel() == n and v.device == like.device
                parts.append(v if ok else torch.zeros(n, device=like.device))
            t = torch.cat(parts) if parts else torch.zeros_like(like, dtype=torch.float32)
        self.bind(index, t, layout)
        return t

    def bind(self, index: int, t: torch.Tensor, layout: Layout | None) -> None:
        self.tensors[index], self._layouts[index] = t, layout
        at = 0
        for pid, n in layout or ():
            self._params[pid] = t[at:at + n]
            at += n

    def restore(self, index: int, saved: torch.Tensor | None,
                layout: Sequence[Sequence[int]] | None, device: torch.device | None) -> None:
        """Put a checkpointed buffer back (``None``: the bucket had none)."""
        if saved is None:
            self.tensors.pop(index, None)
            return
        old = self.tensors.get(index)
        to = device or (old.device if old is not None else saved.device)
        lay = None if layout is None else tuple((int(a), int(b)) for a, b in layout)
        self.bind(index, saved.detach().float().clone().to(to), lay)

    def saved(self, index: int) -> torch.Tensor | None:
        """A CPU copy for a checkpoint, ``None`` when the bucket has none."""
        t = self.tensors.get(index)
        return None if t is None else t.cpu().clone()


def _segments(layout: Sequence[tuple[int, int]],
              target: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """(offset, numel) in a bucket packed as ``layout`` of each parameter of
    ``target``, in target's order (adjacent runs merged)."""
    offsets, at = {}, 0
    for pid, n in layout:
        offsets[pid] = at
        at += n
    segs: list[tuple[int, int]] = []
    for pid, n in target:
        o = offsets[pid]
        if segs and segs[-1][0] + segs[-1][1] == o:
            segs[-1] = (segs[-1][0], segs[-1][1] + n)
        else:
            segs.append((o, n))
    return segs


def _permute(t: torch.Tensor, segs: list[tuple[int, int]], inverse: bool = False
             ) -> torch.Tensor:
    """Gather ``t``'s segments in order (or, inverse, scatter them back)."""
    if not inverse:
        return torch.cat([t[o:o + n] for o, n in segs])
    out = torch.empty_like(t)
    at = 0
    for o, n in segs:
        out[o:o + n] = t[at:at + n]
        at += n
    return out
