"""DDP communication hooks: sparse allreduce with error feedback.

Register one with ``model.register_comm_hook(SparseState(...), hook)``. Each
hook returns a future of the bucket's average (already divided by the world
size), as DDP expects. No ``from __future__ import annotations`` here: DDP
checks the hooks' annotations against the real types.
"""

import torch
import torch.distributed as dist

from .state import ALGORITHMS, SparseState, _permute


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
    params = bucket.parameters() if hasattr(bucket, "parameters") else None
    index = bucket.index()
    native, segments = state._bucket_for(index, buf, params)
    state._schedule_density(index, native)
    if segments is None and not state.momentum and not state.precondition:
        return native.allreduce(buf).get_future().then(_first)
    # The state refers to another packing of these parameters (DDP's
    # first iteration after a restore): run it in that order.
    x = buf if segments is None else _permute(buf, segments)
    dense = state.precondition is not None and state._next_is_dense(native)
    if state.momentum:
        x = state._corrected(index, x)
    elif state.precondition:
        x = state._adam_send(index, x, dense)

    def done(fut: torch.futures.Future) -> torch.Tensor:
        out = fut.value()[0]
        if state.momentum:
            state._mask_velocity(index, native)
        elif state.precondition:
            out = state._adam_update(index, native, out, dense)
        return out if segments is None else _permute(out, segments, inverse=True)

    return native.allreduce(x).get_future().then(done)


def sparse_hook(state: SparseState,
                bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Sparse allreduce with ``state.algo`` (Ok-Topk when unset)."""
    return _run(state, bucket, state.algo or "oktopk")


def _make(algo: str):  # type: ignore[no-untyped-def]
    def hook(state: SparseState,
             bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        return _run(state, bucket, algo)

    hook.__name__ = hook.__qualname__ = f"{algo}_hook"
    hook.__doc__ = f"Sparse allreduce with {algo}, error feedback in the residual."
    return hook


dense_hook = _make("dense")
topka_hook = _make("topka")
topkdsa_hook = _make("topkdsa")
gtopk_hook = _make("gtopk")
gaussiank_hook = _make("gaussiank")
oktopk_hook = _make("oktopk")

HOOKS = {algo: globals()[f"{algo}_hook"] for algo in ALGORITHMS}

__all__ = ["sparse_hook", "HOOKS", *[f"{a}_hook" for a in ALGORITHMS]]
