"""torch's own DDP baselines as the benchmarks and examples run them: plain
DDP on a gloo group, torch's bf16/fp16 compression hooks and its PowerSGD
hook (one state and gloo group per bucket), next to the pg_sparse hooks."""

from __future__ import annotations

from typing import Any

TORCH_METHODS = ("gloo", "nccl", "bf16", "fp16", "powersgd")


def powersgd_groups_needed(numel: int, bucket_cap_mb: float) -> int:
    """gloo groups :class:`PowerSGDPerBucket` needs for a model of ``numel``
    fp32 parameters: every bucket but the last holds at least
    ``bucket_cap_mb`` (DDP's first holds 1 MB), so this many always suffice.
    Make them up front: ``new_group`` is collective."""
    return int(4 * numel / (bucket_cap_mb * 2**20)) + 3


def register_hook(ddp: Any, method: str, density: float, gloo: Any,
                   psgd_groups: list[Any] | None = None, state: Any = None) -> Any:
    """Register ``method``'s comm hook on ``ddp`` and return its state:
    ``gloo`` or ``nccl`` (none: plain DDP), ``bf16``/``fp16`` (torch's compression hooks),
    ``powersgd`` (:class:`PowerSGDPerBucket`) or a pg_sparse algorithm (a
    :class:`pg_sparse.SparseState` at ``density``, or ``state`` if given)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    import pg_sparse

    if method in ("gloo", "nccl"):
        return None
    if method == "bf16":
        ddp.register_comm_hook(gloo, bf16_hook)
        return None
    if method == "fp16":
        ddp.register_comm_hook(gloo, default_hooks.fp16_compress_hook)
        return None
    if method == "powersgd":
        state = PowerSGDPerBucket(psgd_groups or [gloo])
        ddp.register_comm_hook(state, powersgd_dispatch)
        return state
    if method == "acpsgd":  # pg_sparse's ACP-SGD, on the sparse backend's allreduce
        state = pg_sparse.lowrank.ACPSGDState(rank=4, start_iter=2)
        ddp.register_comm_hook(state, pg_sparse.hooks.acpsgd_hook)
        return state
    if method == "adtopk":  # every row's largest entry beside the global top-k
        from pg_sparse.adtopk import ADTopkState

        state = ADTopkState(density=density, warmup_steps=2)
        ddp.register_comm_hook(state, pg_sparse.hooks.adtopk_hook)
        return state
    # The sparse hooks as the README registers them: steady calls in C++.
    if method == "auto":  # per bucket dense or the predicted-fastest sparse algorithm
        state = pg_sparse.SparseState(algo="auto", density=density)
        pg_sparse.hooks.register_comm_hook(ddp, state, pg_sparse.hooks.sparse_hook)
        return state
    if state is None:
        state = pg_sparse.SparseState(density=density)
    pg_sparse.hooks.register_comm_hook(ddp, state, pg_sparse.hooks.HOOKS[method])
    return state


class PowerSGDPerBucket:
    """torch's PowerSGD hook (rank 4, from iteration 2) with one PowerSGD
    state and gloo group per DDP bucket.

    With one group, the hook's second allreduce (the Qs, issued from the
    first ones' completion callbacks) races the next buckets' first one
    (issued by the autograd thread): ranks issue them in different orders and
    gloo fails ("Received data size doesn't match expected size"). Separate
    groups keep each bucket's collectives in order and DDP's overlap on."""

    def __init__(self, groups: list[Any], rank: int = 4, start_iter: int = 2) -> None:
        self.groups = groups
        self.rank = rank
        self.start_iter = start_iter
        self.iter = 0
        self.states: dict[int, Any] = {}
        self.process_group = groups[0]

    def hook(self, bucket: Any) -> Any:
        """PowerSGD of one bucket on its group's state."""
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

        i = bucket.index()
        st = self.states.get(i)
        if st is None:
            st = self.states[i] = psgd.PowerSGDState(
                process_group=self.groups[i % len(self.groups)],
                matrix_approximation_rank=self.rank, start_powerSGD_iter=self.start_iter)
        st.iter = self.iter  # one step counter for all buckets
        fut = psgd.powerSGD_hook(st, bucket)
        if bucket.is_last():
            self.iter += 1
        return fut


def powersgd_dispatch(state, bucket):  # type: ignore[no-untyped-def]
    """DDP hook for :class:`PowerSGDPerBucket` (no annotations: see bf16_hook)."""
    return state.hook(bucket)


def bf16_hook(process_group, bucket):  # type: ignore[no-untyped-def]
    """torch's ``bf16_compress_hook``, registered under another name: torch
    2.13's DDP refuses a hook of that name unless CUDA 11+ and NCCL 2.10+ (or
    XPU) are there, yet gloo reduces bf16 on CPU. No annotations: DDP checks
    a hook's annotations against real types, and this module's are strings."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    return default_hooks.bf16_compress_hook(process_group, bucket)


def powersgd_elements(model: Any, rank: int = 4, factors: float = 2.0) -> float:
    """Elements PowerSGD allreduces per step: P and Q of each compressed
    matrix, the rest uncompressed (its ``_should_compress`` rule, min
    compression rate 2). ``factors=1``: ACP-SGD, which sends one of the two
    per step (P and Q alternately: their mean size)."""
    total = 0.0
    for p in model.parameters():
        if not p.requires_grad:
            continue
        if p.dim() <= 1:
            total += p.numel()
            continue
        n, m = p.shape[0], p.numel() // p.shape[0]
        r = min(n, m, rank)
        total += (n + m) * r * factors / 2 if n * m > (n + m) * r * 2 else p.numel()
    return total


def ring_bytes(method: str, model: Any, world: int) -> float:
    """Bytes a rank sends per step in a ring allreduce of what ``method``
    reduces: the fp32 gradient (``dense``, plain DDP), half as many bytes
    (``bf16``), or PowerSGD's factors. pg_sparse's hooks count their own."""
    numel = sum(p.numel() for p in model.parameters())
    elements = {"bf16": numel / 2, "powersgd": powersgd_elements(model)}.get(method, numel)
    return 2.0 * (world - 1) / world * 4 * elements
