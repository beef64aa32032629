"""DDP communication hooks: sparse allreduce with error feedback.

Register one with ``model.register_comm_hook(SparseState(...), hook)``. Each
hook returns a future of the bucket's average (already divided by the world
size), as DDP expects. No ``from __future__ import annotations`` here: DDP
checks the hooks' annotations against the real types.
"""

from typing import Any

import torch
import torch.distributed as dist

from . import _hierarchy, _optbridge, adtopk
from ._buffers import _permute
from .adtopk import ADTopkState
from .lowrank import ACPSGDState, _acp_step, powerSGD_hook
from .state import SparseState

# torch's PowerSGD hook, under this module's naming, for comparisons in the
# same runs: it reduces through whatever backend its state's group uses.
powersgd_hook = powerSGD_hook

__all__ = ["HOOKS", "acpsgd_hook", "adtopk_hook", "dense_hook", "gaussiank_hook", "gtopk_hook",
           "oktopk_hook", "powersgd_hook", "register_comm_hook", "sparse_hook", "topka_hook",
           "topkdsa_hook"]


def _first(fut: torch.futures.Future) -> torch.Tensor:
    return fut.value()[0]


def _run(state: SparseState, bucket: dist.GradBucket,
         algo: str) -> torch.futures.Future[torch.Tensor]:
    if state.algo is None:
        state.algo = algo
    elif state.algo != algo:
        raise ValueError(f"pg_sparse: SparseState is set up for {state.algo!r} "
                         f"but the {algo!r} hook was registered")
    buf = bucket.buffer()
    if not buf.is_floating_point():
        raise TypeError(f"pg_sparse: sparse allreduce needs a floating-point "
                        f"bucket, got {buf.dtype}")
    topo = state._hierarchical()
    if topo is not None:
        return _run_hierarchical(state, bucket, topo)
    params = bucket.parameters() if hasattr(bucket, "parameters") else None
    index = bucket.index()
    bridge = state._bridge
    if bridge is None and not state._watched:
        _optbridge.watch(state)
    native, segments = state._bucket_for(index, buf, params)
    state._schedule_density(index, native)
    auto = state._auto
    if auto is not None:  # may rebuild the bucket for a trial of another algorithm
        native = auto.before_call(index, native, state._group(),
                                  lambda algo: state._rebuild_for(index, buf, algo))
    adam = state._adam_on
    if segments is None and not state.momentum and not adam:
        fut = native.allreduce(buf).get_future().then(_first)
        state._count_iteration(bucket)
        state._serve_natively(index, native, params,
                              -1 if auto is None else auto.native_calls(index))
        return fut
    dense = adam and (state._next_is_dense(index, native) or
                      (auto is not None and auto.is_dense(index)))
    if bridge is not None and not dense:
        buf = bridge.l2(params, buf)  # Adam's L2 decay joins the sparse stream
    # The state refers to another packing of these parameters (DDP's
    # first iteration after a restore): run it in that order.
    x = buf if segments is None else _permute(buf, segments)
    if state.momentum:
        x = state._corrected(index, x)
    elif adam:
        if bridge is not None and not dense:
            x = bridge.clip_local(index, x)
        x = state._adam_send(index, native, x, dense)

    def done(fut: torch.futures.Future) -> torch.Tensor:
        out = fut.value()[0]
        if state.momentum:
            state._mask_velocity(index, native)
        elif adam and bridge is not None:
            # The optimizer's step applies Adam (after the user's clipping).
            g = state._adam_received(index, native, out, dense)
            bridge.received(index, g, dense)
            out = g.to(out.dtype)
        elif adam:
            out = state._adam_update(index, native, out, dense)
        return out if segments is None else _permute(out, segments, inverse=True)

    fut = native.allreduce(x).get_future().then(done)
    state._count_iteration(bucket)
    return fut


def _run_hierarchical(state: SparseState, bucket: dist.GradBucket,
                      topo: _hierarchy.Topology) -> torch.futures.Future[torch.Tensor]:
    """hierarchy='node': dense reduce-scatter in the node, the sparse
    algorithm across nodes on this rank's shard, dense allgather in the node."""
    buf = bucket.buffer()
    n, index = buf.numel(), bucket.index()
    full, shard = topo.scratch(index, buf)
    # The native bucket (of the shard's size) is found here, in call order,
    # so its warm-up sees the iteration this call belongs to.
    native, _ = state._bucket_for(index, shard, None)
    state._schedule_density(index, native)

    def sparse(shard: torch.Tensor) -> torch.Tensor:
        # The sparse average over nodes of node sums (this rank's shard of
        # them), over L: the average over every rank.
        return native.allreduce(shard).get_future().wait()[0].div_(topo.local_size)

    stages = [lambda _: _hierarchy.reduce_scatter(topo, buf, full, shard, index), sparse,
              lambda out: _hierarchy.all_gather(topo, out, full, n, index).view_as(buf)]
    if buf.is_cuda:
        # One thread, in bucket order: every rank then queues its NCCL
        # kernels of the three groups in the same order. Pipelined, a rank's
        # GPU could hold bucket i's allgather behind bucket i+1's sparse
        # kernels while a peer's holds them the other way round (kernels of
        # different communicators wait for peers in launch order). The DDP
        # suite's ResNet-50 at P = 4 hung pipelined.
        rs, sp, ag = stages
        stages = [lambda _: ag(sp(rs(None)))]
    fut = topo.submit(stages, buf.device)
    state._count_iteration(bucket)
    return fut


_COMMON = """
    Args:
        state: settings (density, warm-up, momentum correction, Adam in the
            hook, wire type) and per-bucket state (residual, thresholds,
            regions) of the whole model; one ``SparseState`` per algorithm.
        bucket: the gradients DDP hands the hook (fp32, fp16 or bf16).

    Returns:
        A future of the bucket's average over the ranks (sum / world size),
        as DDP expects. What is not sent stays in this rank's residual for
        the next step (error feedback): nothing is lost.
"""


def _documented(hook):  # type: ignore[no-untyped-def]
    """Appends the Args and Returns every hook shares to its own docstring
    (summary, method and example stay written in the hook)."""
    hook.__doc__ = hook.__doc__.rstrip() + "\n" + _COMMON
    return hook


@_documented
def sparse_hook(state: SparseState,
                bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Sparse allreduce with ``state.algo`` (Ok-Topk when unset).

    The hook to register when the algorithm is a setting of the state.

    Example::
        >>> ddp.register_comm_hook(pg_sparse.SparseState(algo="topka", density=0.01),
        ...                        pg_sparse.hooks.sparse_hook)
    """
    return _run(state, bucket, state.algo or "oktopk")


@_documented
def oktopk_hook(state: SparseState,
                bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Ok-Topk (Li and Hoefler, PPoPP'22): sparse allreduce of the top-k.

    Each rank selects its top-k of gradient + residual by a threshold; the
    ranks reduce the selections in regions balanced by their quantiles, select
    the ``state.global_factor`` k largest of the sum (2 by default; 1 is the
    paper's global top-k) and gather them. At most 3(k + factor k)(P-1)/P
    words per rank (6k(P-1)/P at factor 1).

    Example::
        >>> ddp.register_comm_hook(pg_sparse.SparseState(density=0.01, warmup_steps=10),
        ...                        pg_sparse.hooks.oktopk_hook)
    """
    return _run(state, bucket, "oktopk")


@_documented
def topka_hook(state: SparseState,
               bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """TopkA: allgather of every rank's top-k, summed everywhere.

    Each rank's exact top-k of gradient + residual (indices and values) is
    allgathered and summed; about 2k(P-1) words per rank.

    Example::
        >>> ddp.register_comm_hook(pg_sparse.SparseState(density=0.001),
        ...                        pg_sparse.hooks.topka_hook)
    """
    return _run(state, bucket, "topka")


@_documented
def topkdsa_hook(state: SparseState,
                 bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """TopkDSA (SparCML's dynamic sparse allreduce).

    Each rank's top-k is reduced on equal static regions, then every reduced
    nonzero is allgathered, or the dense regions when the union of picks
    exceeds n/3 (then dense is cheaper).

    Example::
        >>> ddp.register_comm_hook(pg_sparse.SparseState(density=0.01, wire_dtype=torch.bfloat16),
        ...                        pg_sparse.hooks.topkdsa_hook)
    """
    return _run(state, bucket, "topkdsa")


@_documented
def gtopk_hook(state: SparseState,
               bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """gTop-k (Shi et al.): the global top-k by recursive doubling.

    Ranks merge their top-k pairwise, keeping k after every merge; the set
    found chooses the coordinates, and every rank's exact values there are
    allreduced, so the output is the exact average on that set.

    Example::
        >>> ddp.register_comm_hook(pg_sparse.SparseState(density=0.01, momentum=0.9),
        ...                        pg_sparse.hooks.gtopk_hook)
    """
    return _run(state, bucket, "gtopk")


@_documented
def gaussiank_hook(state: SparseState,
                   bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """GaussianK: a threshold from a Gaussian fit of the gradient.

    The threshold is mu + z sigma of gradient + residual (z from the
    density), corrected toward [k/2, 2k] picks; every rank's picks are
    allgathered and summed, as TopkA.

    Example::
        >>> ddp.register_comm_hook(pg_sparse.SparseState(density=0.01, nonfinite="skip"),
        ...                        pg_sparse.hooks.gaussiank_hook)
    """
    return _run(state, bucket, "gaussiank")


@_documented
def dense_hook(state: SparseState,
               bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Dense allreduce through the sparse hooks' state (the baseline).

    Every entry is sent; warm-up, momentum correction and Adam in the hook
    apply as for the sparse hooks, so a run compares only the compression.

    Example::
        >>> ddp.register_comm_hook(pg_sparse.SparseState(precondition="adam"),
        ...                        pg_sparse.hooks.dense_hook)
    """
    return _run(state, bucket, "dense")


def adtopk_hook(state: ADTopkState,
                bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """ADTopk: all-dimension top-k, so that no row of any parameter starves.

    Each sparse call picks every row's largest entry of ``|g + residual|``
    (a row: one index of a parameter's dimension 0) and the bucket's global
    top-k beside them (every ``interleave``-th call the global top-k alone),
    gathers every rank's picks in one exchange and sums them by scatter-add;
    what a rank did not send stays in its residual (error feedback).

    Args:
        state: a :class:`pg_sparse.adtopk.ADTopkState` (density, warm-up
            iterations, interleave; per bucket the residual and row layout).
        bucket: the gradients DDP hands the hook (its parameters give the rows).

    Returns:
        A future of the bucket's average over the ranks of what was sent.

    Example::
        >>> state = pg_sparse.adtopk.ADTopkState(density=0.01, warmup_steps=2)
        >>> ddp.register_comm_hook(state, pg_sparse.hooks.adtopk_hook)
    """
    return adtopk.step(state, bucket)


def acpsgd_hook(state: ACPSGDState,
                bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """ACP-SGD (Zhang et al., ICDCS'23): alternating low-rank compression.

    Each weight gradient M (viewed as ``[shape[0], -1]``) is sent as one
    factor per step: even calls of a bucket ``P = (M + E) orth(Q)``, odd
    calls ``Q = (M + E)^T orth(P)``, the other factor being the last
    all-reduced one (the same on every rank, from a shared seed at first).
    One allreduce per step carries the factors and the tensors sent raw
    (1-D ones, matrices too small to gain); PowerSGD needs two dependent
    ones. The output is the product over the world size; each rank keeps
    what its own product misses in its error (error feedback).

    Args:
        state: a :class:`pg_sparse.lowrank.ACPSGDState` (rank, warm-up
            iterations, seed; per bucket the factors and the error).
        bucket: the gradients DDP hands the hook.

    Returns:
        A future of the bucket's approximate average over the ranks.

    Example::
        >>> state = pg_sparse.lowrank.ACPSGDState(rank=4, start_iter=10)
        >>> ddp.register_comm_hook(state, pg_sparse.hooks.acpsgd_hook)
    """
    return _acp_step(state, bucket)


# Hooks by algorithm name (``pg_sparse.algorithms()``).
HOOKS = {"dense": dense_hook, "topka": topka_hook, "topkdsa": topkdsa_hook,
         "gtopk": gtopk_hook, "gaussiank": gaussiank_hook, "oktopk": oktopk_hook}


def register_comm_hook(ddp: Any, state: Any, hook: Any,
                       optimizer: torch.optim.Optimizer | None = None) -> None:
    """``ddp.register_comm_hook(state, hook)``, with the steady calls in C++,
    and the user's optimizer adapted to the sparse stream.

    With ``optimizer=`` (the optimizer that steps ``ddp``'s parameters, as
    it is): for ``torch.optim.Adam`` and ``AdamW`` the library keeps Adam's
    moments and steps the DDP parameters at the optimizer's ``step()``:
    the hook hands DDP the reduced gradient (clip it, log it, scale it as
    usual: a ``clip_grad_norm_`` after backward is recognised, and its max
    norm applied to each rank's gradient before the residual instead of to
    the bursts a sparse call delivers), and each entry a sparse call
    carried after waiting ``a`` calls gets the ``a`` Adam steps it missed at
    once, with the ``lr``, ``betas``,
    ``eps`` and ``weight_decay`` of its parameter group read at every step
    (so LR schedulers work; AdamW's decay decoupled, Adam's as L2 on the
    sparse stream). Dense (warm-up) calls are exactly Adam's step. The
    optimizer's own step skips those parameters, and
    ``optimizer.state_dict()`` / ``load_state_dict()`` carry the hook state
    (per rank: save every rank's). ``SGD`` (with or without momentum) steps
    the error-feedback stream as it is (its velocity integrates the bursts
    at the right average rate; DGC's momentum correction,
    ``SparseState(momentum=...)`` with plain SGD, is the option that helped
    a character LSTM and hurt the CNNs), and its state dict carries the
    hook state too. Without ``optimizer=``, an Adam-type optimizer stepping the
    model warns once.

    A Python comm hook costs DDP a Python call for every bucket and a Python
    callback when its future completes. Registered here, the same hook runs
    every call that needs Python (a bucket's first calls, a bucket DDP
    rebuilt, hierarchical reduction, momentum correction, Adam,
    a density warm-up, ``algo="auto"``'s decision every ``auto_interval``
    calls); once a bucket's call is plain, its next calls go from DDP's
    reducer straight to the native allreduce, while the bucket holds the
    same parameters. Results are the same bits either
    way. For a hook that is not one of ``HOOKS`` (or ``sparse_hook``) with a
    :class:`SparseState`, this is ``ddp.register_comm_hook`` itself. A state
    registered again (a model wrapped in a new DDP) serves the new model in
    C++; the model it served before runs its calls in Python.

    Args:
        ddp: a ``DistributedDataParallel`` model with no hook registered yet.
        state: the hook's state.
        hook: the hook, as for ``ddp.register_comm_hook``.
        optimizer: the optimizer that steps ``ddp``'s parameters (needs a
            :class:`SparseState`).

    Raises:
        ValueError: ``optimizer=`` with ``precondition`` or ``momentum`` set
            in the state, or with an Adam option the library does not
            implement (``amsgrad``, ``maximize``).

    Example::
        >>> opt = torch.optim.AdamW(ddp.parameters(), lr=3e-4, weight_decay=0.1)
        >>> state = pg_sparse.SparseState(density=0.01)
        >>> pg_sparse.hooks.register_comm_hook(ddp, state, pg_sparse.hooks.oktopk_hook,
        ...                                    optimizer=opt)
    """
    if optimizer is not None:
        if not isinstance(state, SparseState):
            raise TypeError(f"pg_sparse: optimizer= needs a SparseState, "
                            f"got {type(state).__name__}")
        if state._bridge is not None:
            state._bridge.remove()
        state._bridge = _optbridge.OptimizerBridge(state, optimizer)
    if not isinstance(state, SparseState) or \
            (hook not in HOOKS.values() and hook is not sparse_hook):
        ddp.register_comm_hook(state, hook)
        return
    if state._native_table is not None:
        # The state served another DDP model (one wrapped again, say): that
        # model's hook runs every call in Python from now on, where the
        # state's buckets are found as before.
        state._iteration = state.iteration  # what that table counted
        state._native_table.clear()
    # What DDP.register_comm_hook does before it registers a Python hook.
    ddp._check_comm_hook(hook)
    if ddp.logger is not None:
        ddp.logger._set_comm_hook_name(hook.__qualname__)
    ddp._comm_hooks.append((hook, state))
    from . import _C
    state._native_table = _C._register_native_hook(ddp.reducer, state, hook)
