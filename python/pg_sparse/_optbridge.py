"""The user's optimizer behind a sparse hook: what
``hooks.register_comm_hook(ddp, state, hook, optimizer=opt)`` sets up.

Error feedback turns each entry's gradient stream into a burst every
``1/density`` steps. Momentum SGD takes such bursts as they are (its velocity
integrates them), but Adam divides each step by the running mean square, so
an entry fed bursts moves about ``sqrt(density)`` as far per step as under
dense Adam. With an Adam-type optimizer given, the library therefore steps
the DDP model's parameters itself, at the optimizer's ``step()``: the hook
hands DDP the reduced gradient (so clipping, logging and ``GradScaler`` see a
gradient as usual), and at ``step()`` every entry a call carried after
waiting ``a`` calls gets the ``a`` Adam steps it missed, from the optimizer's
own ``lr``, ``betas``, ``eps`` and ``weight_decay`` of its parameter group
(read at every step, so schedulers work); the other entries wait. AdamW's
decay is decoupled (every entry, every step), Adam's is L2: ``wd * p`` joins
each rank's gradient before the sparse stream, so it keeps its error
feedback (on a dense call it is added at the step, after the user's
clipping, as ``torch.optim.Adam`` does). The optimizer skips the parameters
stepped here (their ``grad`` is hidden during its ``step``), and its
``state_dict()`` carries the hook state.

Without ``optimizer=``, a global optimizer step pre-hook
(``torch.optim.optimizer.register_optimizer_step_pre_hook``) watches which
optimizer steps a hook's parameters and warns once when it is Adam-type.
"""

from __future__ import annotations

import math
import warnings
import weakref
from typing import Any

import torch
import torch.distributed as dist
from torch.optim.optimizer import register_optimizer_step_pre_hook

# Optimizers whose step the library takes over, by their weight decay.
_ADAM_TYPES = (torch.optim.Adam, torch.optim.AdamW)
_UNSUPPORTED = ("amsgrad", "maximize")
_KEY = "pg_sparse"  # the hook state's entry in optimizer.state_dict()


def kind_of(optimizer: torch.optim.Optimizer) -> str | None:
    """``"adamw"`` (decoupled decay), ``"adam"`` (L2 decay), ``"sgd"`` or
    None for an optimizer the library does not know."""
    if isinstance(optimizer, torch.optim.AdamW):
        return "adamw"
    if isinstance(optimizer, torch.optim.Adam):
        decoupled = any(g.get("decoupled_weight_decay") for g in optimizer.param_groups)
        return "adamw" if decoupled else "adam"
    if isinstance(optimizer, torch.optim.SGD):
        return "sgd"
    return None


class OptimizerBridge:
    """Ties one :class:`SparseState` to the optimizer that steps its model."""

    def __init__(self, state: Any, optimizer: torch.optim.Optimizer) -> None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"pg_sparse: optimizer= takes a torch.optim.Optimizer, "
                            f"got {type(optimizer).__name__}")
        if state.precondition or state.momentum:
            raise ValueError("pg_sparse: optimizer= handles the optimizer's moments itself; "
                             "leave SparseState's precondition and momentum unset")
        self.kind = kind_of(optimizer)
        self.adam = self.kind in ("adam", "adamw")
        if self.adam:
            _check_adam_groups(optimizer, state)
            group = optimizer.param_groups[0]
            # The hook ranks entries by their pending Adam step with these.
            state.betas = (float(group["betas"][0]), float(group["betas"][1]))
            state.eps = float(group["eps"])
        elif self.kind is None:
            warnings.warn(f"pg_sparse: optimizer= does not know {type(optimizer).__name__}; "
                          "it steps on the sparse gradients unchanged", stacklevel=3)
        self._state = weakref.ref(state)
        self._optimizer = weakref.ref(optimizer)
        self._stash: list[tuple[torch.Tensor, torch.Tensor | None]] = []
        # Per bucket index: whether its call since the last step was dense,
        # the squared norms of its last reduced and local gradients.
        self._pending: dict[int, bool] = {}
        self._out_sq: dict[int, torch.Tensor] = {}
        self._local_sq: dict[int, torch.Tensor] = {}
        self._grad_buf: dict[int, torch.Tensor] = {}  # per bucket, reused every step
        # The user's clip_grad_norm_ max norm, once two steps showed it.
        self.max_norm: float | None = None
        self._seen_norm: float | None = None
        self._handles = [optimizer.register_state_dict_post_hook(self._save),
                         optimizer.register_load_state_dict_pre_hook(self._load)]
        if self.adam:
            self._handles += [optimizer.register_step_pre_hook(self._pre_step),
                              optimizer.register_step_post_hook(self._post_step)]

    def remove(self) -> None:
        """Detach from the optimizer (it steps every parameter again)."""
        for h in self._handles:
            h.remove()
        self._handles = []

    def steps(self, optimizer: torch.optim.Optimizer) -> bool:
        return self._optimizer() is optimizer

    # -- the hook's side --------------------------------------------------
    def l2(self, params: list[torch.Tensor] | None, buf: torch.Tensor) -> torch.Tensor:
        """``buf`` plus Adam's L2 term ``wd * p`` of each parameter (in
        ``buf``'s order), or ``buf`` itself when there is none: for a sparse
        call, so the term travels with error feedback."""
        opt = self._optimizer()
        if self.kind != "adam" or opt is None or not params:
            return buf
        term = _l2_term(params, _groups(opt), buf.dtype)
        return buf if term is None else buf + term

    def clip_local(self, index: int, x: torch.Tensor) -> torch.Tensor:
        """A sparse call's gradient ``x`` of bucket ``index`` clipped on this
        rank before it enters the residual, once the user's clipping has been
        seen: to the learned max norm over the estimated norm of the whole
        model's gradient (this bucket now, the others at their last call), as
        ``clip_grad_norm_`` scales a dense gradient. Clipping the burst a
        sparse call delivers instead holds back every entry it carries."""
        if self.max_norm is None:  # no clipping seen: no pass over x
            return x
        sq = torch.linalg.vector_norm(x.float()).square()
        self._local_sq[index] = sq
        total = sum((v for i, v in self._local_sq.items() if i != index), sq).sqrt()
        # In place: x is the bucket's buffer or a copy of it, which the
        # reduction overwrites anyway; a new bucket-sized tensor every call
        # costs its page faults again.
        return x.mul_(torch.clamp(self.max_norm / (total + 1e-6), max=1.0).to(x.dtype))

    def received(self, index: int, g: torch.Tensor, dense: bool) -> None:
        """Note a call's reduced gradient (fp32, gradient units) for the step."""
        self._out_sq[index] = torch.linalg.vector_norm(g).square()
        self._pending[index] = dense

    # -- the optimizer's side ---------------------------------------------
    def _pre_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """Step every bucket the hook reduced since the last step, then hide
        those parameters' gradients from the optimizer's own step."""
        state = self._state()
        if state is None or not self._pending:
            return
        groups = _groups(optimizer)
        params = state._params_by_id()
        with torch.no_grad():
            todo = []
            for index, dense in sorted(self._pending.items()):
                layout = state._layouts.get(index)
                if layout is not None:
                    live = self._check_bucket(index, [params[pid] for pid, _ in layout],
                                              groups)
                    todo.append((index, dense, live, self._flat_grad(index, live)))
            factor = self._user_clip(todo)
            for index, dense, live, g in todo:
                if not dense and factor < 1.0:
                    g.div_(factor)  # a clipped burst: the hook clips before the residual
                self._step_bucket(state, index, dense, live, g, groups)
        self._pending.clear()

    def _user_clip(self, todo: list[tuple[int, bool, list[torch.Tensor], torch.Tensor]]
                   ) -> float:
        """The factor the user's ``clip_grad_norm_`` scaled this step's
        reduced gradients by (1.0: not clipped); learns its max norm. A
        uniform scaling counts as clipping once two steps scaled to the same
        norm: ``GradScaler.unscale_`` scales too, to a norm that varies."""
        if not todo:
            return 1.0
        # Both totals in one read-back (one host sync on a GPU).
        sums = torch.stack([
            sum((self._out_sq[i] for i, _, _, _ in todo if i in self._out_sq),
                torch.zeros((), device=todo[0][3].device)),
            sum(torch.linalg.vector_norm(g).square() for _, _, _, g in todo)]).tolist()
        out, now = float(sums[0]), float(sums[1])
        if not out or now >= out * (1.0 - 1e-5):
            return 1.0
        norm = math.sqrt(now)  # clip_grad_norm_'s max_norm (to 1e-6)
        if self.max_norm is None:
            seen, self._seen_norm = self._seen_norm, norm
            if seen is None or abs(seen - norm) > 1e-4 * norm:
                return 1.0
        self.max_norm = norm
        return math.sqrt(now / out)

    def _check_bucket(self, index: int, params: list[torch.Tensor | None],
                      groups: dict[int, Any]) -> list[torch.Tensor]:
        live = [p for p in params if p is not None]
        missing = [p for p in live if id(p) not in groups]
        if missing or len(live) != len(params):
            raise ValueError(f"pg_sparse: bucket {index} holds parameters the optimizer given "
                             "to register_comm_hook does not step; give the optimizer of "
                             "every DDP parameter")
        return live

    def _step_bucket(self, state: Any, index: int, dense: bool, live: list[torch.Tensor],
                     g: torch.Tensor, groups: dict[int, Any]) -> None:
        hyper = {(tuple(groups[id(p)]["betas"]), groups[id(p)]["eps"]) for p in live}
        if len(hyper) > 1:
            raise ValueError(f"pg_sparse: bucket {index} mixes parameter groups with different "
                             f"betas or eps {sorted(hyper)}; use one betas and eps per model")
        (betas, eps), = hyper
        if self.kind == "adam" and dense:  # L2 as torch.optim.Adam (a sparse call carried it)
            term = _l2_term([p for p in live if p.grad is not None], groups, g.dtype, live)
            if term is not None:
                g.add_(term)
        b = (float(betas[0]), float(betas[1]))
        if dense:
            upd, hit = state._adam_direction(index, g, True, b, float(eps)), None
        else:
            hit, upd = state._adam_sparse(index, g, b, float(eps))
            # Each parameter's slice of the ascending carried indices.
            ends = torch.tensor([p.numel() for p in live], device=hit.device).cumsum(0)
            cut = [0, *torch.searchsorted(hit, ends).tolist()]
        at = 0
        for i, p in enumerate(live):
            n = p.numel()
            if p.grad is not None:
                group = groups[id(p)]
                lr, wd = float(group["lr"]), float(group["weight_decay"])
                if self.kind == "adamw" and wd:
                    p.mul_(1.0 - lr * wd)  # AdamW's decoupled decay
                if hit is None:
                    p.add_(upd[at:at + n].view_as(p).to(p.dtype), alpha=-lr)
                else:  # only the carried entries move
                    _add_at(p, hit[cut[i]:cut[i + 1]] - at, upd[cut[i]:cut[i + 1]], -lr)
                self._stash.append((p, p.grad))
                p.grad = None  # the optimizer's own step skips p
            at += n

    def _flat_grad(self, index: int, params: list[torch.Tensor]) -> torch.Tensor:
        """The parameters' gradients flat in fp32 (zeros for None), in a
        buffer kept per bucket: a new 100 MB tensor a step costs its page
        faults again."""
        n = sum(p.numel() for p in params)
        buf = self._grad_buf.get(index)
        if buf is None or buf.numel() != n or buf.device != params[0].device:
            buf = torch.empty(n, device=params[0].device)
            self._grad_buf[index] = buf
        at = 0
        for p in params:
            part = buf[at:at + p.numel()]
            if p.grad is None:
                part.zero_()
            else:
                part.copy_(p.grad.detach().reshape(-1))
            at += p.numel()
        return buf

    def _post_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        for p, grad in self._stash:
            p.grad = grad
        self._stash = []

    def _save(self, optimizer: torch.optim.Optimizer, sd: dict[str, Any]) -> dict[str, Any]:
        state = self._state()
        if state is not None:
            rank = dist.get_rank() if dist.is_initialized() else 0
            sd[_KEY] = {"rank": rank, "state": state.state_dict(), "max_norm": self.max_norm,
                        "seen_norm": self._seen_norm,
                        "local_sq": {i: float(v) for i, v in self._local_sq.items()}}
        return sd

    def _load(self, optimizer: torch.optim.Optimizer, sd: dict[str, Any]) -> dict[str, Any]:
        saved = sd.pop(_KEY, None)
        state = self._state()
        if saved is not None and state is not None:
            rank = dist.get_rank() if dist.is_initialized() else 0
            if saved.get("rank", rank) != rank:
                warnings.warn(f"pg_sparse: this optimizer checkpoint holds rank "
                              f"{saved['rank']}'s hook state (residuals), restored on rank "
                              f"{rank}; save every rank's optimizer.state_dict()",
                              stacklevel=3)
            state.load_state_dict(saved["state"])
            self.max_norm, self._seen_norm = saved.get("max_norm"), saved.get("seen_norm")
            self._local_sq = {int(i): torch.tensor(v) for i, v in
                              saved.get("local_sq", {}).items()}
        return sd


def _add_at(p: torch.Tensor, idx: torch.Tensor, vals: torch.Tensor, alpha: float) -> None:
    """``p.flatten()[idx] += alpha * vals`` in place (``idx`` distinct)."""
    # A strided parameter: update a copy, write it back.
    flat = p.view(-1) if p.is_contiguous() else p.reshape(-1).clone()
    flat.index_add_(0, idx, vals.to(p.dtype), alpha=alpha)
    if not p.is_contiguous():
        p.copy_(flat.view_as(p))


def _groups(optimizer: torch.optim.Optimizer) -> dict[int, Any]:
    """id(parameter) -> its parameter group."""
    return {id(p): g for g in optimizer.param_groups for p in g["params"]}


def _l2_term(decayed: list[torch.Tensor], groups: dict[int, Any], dtype: torch.dtype,
             layout: list[torch.Tensor] | None = None) -> torch.Tensor | None:
    """Adam's L2 term ``weight_decay * p`` of the ``decayed`` parameters,
    flat in the order of ``layout`` (default: ``decayed``; zeros for the
    others), or None when no weight decay applies."""
    wd = {id(p): float(groups[id(p)]["weight_decay"]) for p in decayed if id(p) in groups}
    if not any(wd.values()):
        return None
    return torch.cat([p.detach().reshape(-1).to(dtype) * wd.get(id(p), 0.0)
                      for p in (decayed if layout is None else layout)])


def _check_adam_groups(optimizer: torch.optim.Optimizer, state: Any) -> None:
    for g in optimizer.param_groups:
        for opt in _UNSUPPORTED:
            if g.get(opt):
                raise ValueError(f"pg_sparse: optimizer= supports {type(optimizer).__name__} "
                                 f"without {opt}=True")
    if state.hierarchy != "flat":
        raise ValueError("pg_sparse: optimizer= with Adam runs flat, not with "
                         "hierarchy='node'")


# -- the warning without optimizer= ----------------------------------------
_watched: weakref.WeakSet[Any] = weakref.WeakSet()
_handle: Any = None


def watch(state: Any) -> None:
    """Warn once if an Adam-type optimizer steps ``state``'s parameters
    while no ``optimizer=`` was given for it."""
    global _handle
    state._watched = True
    _watched.add(state)
    if _handle is None:
        _handle = register_optimizer_step_pre_hook(_check_step)


def _knows(state: Any, p: torch.Tensor) -> bool:
    """Whether ``state``'s hooks have seen parameter ``p`` (the id of a
    parameter since freed may name another object now)."""
    known = state._param_ids.get(id(p))
    return known is not None and known[0]() is p


def _check_step(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    # Never removes itself: torch iterates its hooks while calling this one.
    if _watched and isinstance(optimizer, _ADAM_TYPES):
        params = [p for g in optimizer.param_groups for p in g["params"]]
        for state in list(_watched):
            bridge = state._bridge
            if bridge is not None and bridge.steps(optimizer):
                _watched.discard(state)
            elif any(_knows(state, p) for p in params):
                _watched.discard(state)
                warnings.warn(
                    f"pg_sparse: {type(optimizer).__name__} steps a model whose gradients a "
                    "sparse hook reduces; fed error feedback's bursts, Adam moves each entry "
                    "about sqrt(density) as far as dense Adam. Register with "
                    "pg_sparse.hooks.register_comm_hook(ddp, state, hook, optimizer=opt)",
                    UserWarning, stacklevel=3)
