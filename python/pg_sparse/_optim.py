"""The optimizer options of the sparse hooks, as methods of SparseState:
DGC's momentum correction (a velocity per rank, sparsified, masked where
sent) and Adam in the hook (moments and ages from the reduced output, with
the ranking by the pending Adam step). The state they use (``_velocity``,
``_second``, ``_age``, ``_scale`` and the Adam counts) is SparseState's, so
checkpoints and bucket rebuilds treat it as the rest."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch


class OptimizerInHook:
    """Momentum correction and Adam in the hook (mixed into SparseState)."""

    # Declared here, set by SparseState.__init__.
    _velocity: Any
    _second: Any
    _age: Any
    _scale: Any
    _scale_spare: dict[int, torch.Tensor]
    _adam_t: dict[int, int]
    _param_adam: dict[int, int]
    _layouts: dict[int, Any]
    _warmup_of: dict[int, int]
    _param_ids: dict[int, Any]
    _bridge: Any
    precondition: str | None

    @property
    def _adam_on(self) -> bool:
        """Adam's moments kept by this state: in the hook
        (``precondition="adam"``) or at an Adam optimizer's step."""
        return bool(self.precondition) or \
            (self._bridge is not None and self._bridge.adam)

    def _params_by_id(self) -> dict[int, torch.Tensor | None]:
        """Parameter id (as in the layouts) -> the parameter, None if gone."""
        return {pid: ref() for ref, pid in self._param_ids.values()}

    # -- momentum correction ------------------------------------------
    def _corrected(self, index: int, x: torch.Tensor) -> torch.Tensor:
        """The tensor to reduce for gradient ``x`` (in the native bucket's
        order): ``u = m u + x`` and ``u`` (or ``x + m u``, Nesterov), in
        ``x``'s dtype. A new tensor: the reduction overwrites its input."""
        g = x.float()
        u = self._velocity.get(index, g, self._layouts.get(index))
        u.mul_(self.momentum).add_(g)
        send = g.add_(u, alpha=self.momentum) if self.nesterov else u.clone()
        return send.to(x.dtype)

    def _mask_velocity(self, index: int, bucket: Any) -> None:
        """Factor masking after a sparse call: zero ``u`` where the call
        zeroed the residual (what was sent), as DGC does."""
        u = self._velocity.tensors.get(index)
        if u is None or bucket.stats()["dense"]:
            return
        u.masked_fill_(bucket.residual().to(u.device) == 0, 0.0)

    # -- Adam in the hook -----------------------------------------------
    def _next_is_dense(self, index: int, bucket: Any) -> bool:
        """Whether the bucket's next call is a dense (warm-up) one."""
        return self.algo == "dense" or \
            int(bucket.get_state()[0]["step"]) < self._warmup_of.get(index, self.warmup_steps)

    def _adam_send(self, index: int, bucket: Any, x: torch.Tensor,
                   dense: bool) -> torch.Tensor:
        """Count the call (Adam's t) and return the tensor to reduce: the
        gradient, on a sparse call clipped to ``max_grad_norm`` on this
        rank (a dense call clips the average instead), and with
        ``adam_select="normalized"`` divided by Adam's denominator."""
        t = self._adam_counts(index)
        if dense:
            self._rescale_residual(index, bucket, None)
            return x
        x = _clipped(x, self.max_grad_norm)
        if self.adam_select != "normalized":
            return x
        xf = x.float()  # x itself when fp32: divided in place below
        b2, layout = self.betas[1], self._layouts.get(index)
        v = self._second.get(index, xf, layout)
        bc = 1.0 - b2 ** (t - 1) if t > 1 else 1.0
        spare = self._scale_spare.pop(index, None)
        if spare is None or spare.shape != v.shape or spare.device != v.device:
            spare = torch.empty_like(v)
        # Into a kept buffer: fresh bucket-sized tensors cost page faults.
        s = torch.div(v, bc, out=spare).sqrt_().add_(self.eps)
        self._rescale_residual(index, bucket, s)
        return xf.div_(s).to(x.dtype)

    def _rescale_residual(self, index: int, bucket: Any, s: torch.Tensor | None) -> None:
        """Keep the residual in the units of this call's values: it holds
        ``r / s_prev`` after a normalized call and ``r`` otherwise, so it is
        multiplied by ``s_prev / s`` (``s`` None: plain units)."""
        prev = self._scale.tensors.get(index)
        if prev is not None and s is not None and prev.numel() != s.numel():
            prev = None  # a rebuilt bucket: its residual was restored in plain units
        if prev is None and s is None:
            return
        if prev is None:
            bucket.scale_residual(torch.reciprocal(s))
        else:  # prev becomes the factor, then the next call's buffer
            bucket.scale_residual(prev.div_(s) if s is not None else prev)
            self._scale_spare[index] = prev
        if s is None:
            self._scale.tensors.pop(index, None)
        else:
            self._scale.bind(index, s, self._layouts.get(index))

    def _adam_counts(self, index: int) -> int:
        """Advance bucket ``index``'s Adam step t and return it. Kept per
        parameter as well: DDP's first iteration packs the parameters into
        other buckets than later ones, and a rebuilt bucket continues its
        parameters' counts."""
        layout = self._layouts.get(index)
        t = self._adam_t.get(index, 0)
        if layout:
            t = max(self._param_adam.get(pid, 0) for pid, _ in layout)
        t += 1
        self._adam_t[index] = t
        for pid, _ in layout or ():
            self._param_adam[pid] = t
        return t

    def _adam_update(self, index: int, bucket: Any, out: torch.Tensor,
                     dense: bool) -> torch.Tensor:
        """Adam's update from the reduced gradient ``out`` (the same on every
        rank, so are the moments): :meth:`_adam_direction` of it in gradient
        units, clipped on a dense call."""
        g = self._adam_received(index, bucket, out, dense)
        if dense:
            g = _clipped(g, self.max_grad_norm)
        return self._adam_direction(index, g, dense).to(out.dtype)

    def _adam_received(self, index: int, bucket: Any, out: torch.Tensor,
                       dense: bool) -> torch.Tensor:
        """The reduced gradient ``out`` of a call in fp32 gradient units (a
        normalized sparse call's sums scaled back): ``out`` itself when it is
        fp32."""
        if bool(bucket.stats()["dense"]) != dense:
            raise RuntimeError("pg_sparse: the bucket's call was not the kind "
                               "(dense or sparse) the Adam hook prepared for")
        g = out.float()
        scale = self._scale.tensors.get(index)
        if not dense and scale is not None:
            g.mul_(scale)
        return g

    def _adam_direction(self, index: int, g: torch.Tensor, dense: bool,
                        betas: tuple[float, float] | None = None,
                        eps: float | None = None) -> torch.Tensor:
        """Adam's step direction for bucket ``index`` from its reduced fp32
        gradient ``g`` (overwritten). A dense call is one Adam step. A sparse
        call applies, to each entry it carries, the ``a`` Adam steps that
        entry missed while it waited in the residuals (``a``: calls since it
        was last applied), from the window's mean ``g / a`` and mean square
        ``g ** 2 / a``; the other entries wait, moments untouched."""
        t = self._adam_t[index]
        b1, b2 = betas or self.betas
        eps = self.eps if eps is None else eps
        if not dense:
            hit, vals = self._adam_sparse(index, g, (b1, b2), eps)
            upd = g.zero_()  # no longer needed
            upd[hit] = vals
            return upd
        layout = self._layouts.get(index)
        m = self._velocity.get(index, g, layout)
        v = self._second.get(index, g, layout)
        self._age.get(index, g, layout).zero_()
        m.mul_(b1).add_(g, alpha=1.0 - b1)
        v.mul_(b2).addcmul_(g, g, value=1.0 - b2)
        denom = (v.sqrt() / math.sqrt(1.0 - b2 ** t)).add_(eps)
        return torch.div(m, denom).div_(1.0 - b1 ** t)

    def _adam_sparse(self, index: int, g: torch.Tensor, betas: tuple[float, float],
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        """A sparse call's Adam step as :meth:`_adam_direction` takes it,
        returned as the carried entries' indices (ascending) and step
        directions, so the caller updates O(k) entries instead of adding a
        dense vector of zeros to every parameter."""
        t, (b1, b2) = self._adam_t[index], betas
        layout = self._layouts.get(index)
        m = self._velocity.get(index, g, layout)
        v = self._second.get(index, g, layout)
        age = self._age.get(index, g, layout)
        age.add_(1.0)
        # The carried entries by index: O(k) work after one scan of g,
        # where boolean masks would scan n per use.
        hit = torch.nonzero(g).squeeze(1)
        gh, a = g[hit], age[hit]
        mean = gh / a
        d1, d2 = torch.pow(b1, a), torch.pow(b2, a)
        mh = m[hit].mul_(d1).add_(mean * (1.0 - d1))
        vh = v[hit].mul_(d2).add_(mean * gh * (1.0 - d2))  # out ** 2 / a
        m[hit], v[hit], age[hit] = mh, vh, 0.0
        denom = (vh.sqrt() / math.sqrt(1.0 - b2 ** t)).add_(eps)
        return hit, mh.div_(denom).mul_(a / (1.0 - b1 ** t))

    def _restore_buffers(self, index: int, saved: dict[str, Any],
                         device: torch.device | None) -> None:
        layout = saved.get("layout")
        self._scale.restore(index, saved.get("residual_scale"), layout, device)
        self._velocity.restore(index, saved.get("velocity"), layout, device)
        self._second.restore(index, saved.get("second_moment"), layout, device)
        self._age.restore(index, saved.get("adam_age"), layout, device)
        t = int(saved.get("adam_t", 0))
        self._adam_t[index] = t
        for pid, _ in layout or ():
            self._param_adam[int(pid)] = t



def _clipped(g: torch.Tensor, max_norm: float) -> torch.Tensor:
    """``g`` scaled to L2 norm ``max_norm`` if longer (0: unchanged), as
    ``torch.nn.utils.clip_grad_norm_`` does."""
    if not max_norm:
        return g
    # On the device, like torch's: no host round trip for the norm.
    norm = torch.linalg.vector_norm(g.float())
    return g * torch.clamp(max_norm / (norm + 1e-6), max=1.0).to(g.dtype)


def check_adam(precondition: str | None, betas: Sequence[float], eps: float,
                momentum: float, max_grad_norm: float) -> None:
    if not isinstance(max_grad_norm, (int, float)) or not max_grad_norm >= 0.0:
        raise ValueError(f"pg_sparse: max_grad_norm must be >= 0, got {max_grad_norm!r}")
    if precondition is None:
        if max_grad_norm:
            raise ValueError("pg_sparse: max_grad_norm clips inside the hook's Adam; "
                             "set precondition='adam' or clip after backward")
        return
    if precondition != "adam":
        raise ValueError(f"pg_sparse: precondition must be None or 'adam', "
                         f"got {precondition!r}")
    if momentum:
        raise ValueError("pg_sparse: precondition='adam' keeps its own momentum; "
                         "leave momentum at 0")
    if len(betas) != 2 or not all(isinstance(b, (int, float)) and 0.0 <= b < 1.0
                                  for b in betas):
        raise ValueError(f"pg_sparse: betas must be two numbers in [0, 1), got {betas!r}")
    if not isinstance(eps, (int, float)) or not eps > 0.0:
        raise ValueError(f"pg_sparse: eps must be > 0, got {eps!r}")
