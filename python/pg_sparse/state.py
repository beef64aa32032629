"""SparseState: the per-model state of the sparse comm hooks."""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from . import _C, _auto, _hierarchy
from ._buffers import ParamBuffers, _permute, _segments
from ._optim import OptimizerInHook, check_adam

# The core's algorithm table (PGS_ALGO_MAP in bucket.h), in its order.
ALGORITHMS: tuple[str, ...] = tuple(_C._algorithms())
# The threshold estimators (PGS_ESTIMATOR_MAP), name -> what it does.
ESTIMATORS: dict[str, str] = dict(_C._estimators())
# The algorithms whose selection starts from an estimate (the rest are exact).
_ESTIMATED = ("oktopk", "gaussiank", "topkdsa")
_CONFIG_KEYS = ("algo", "density", "warmup_steps", "tau", "tau_prime",
                "check_finite", "momentum", "nesterov", "density_warmup_steps",
                "density_warmup_start", "wire_dtype", "nonfinite", "precondition", "betas",
                "eps", "max_grad_norm", "adam_select", "hierarchy", "local_size", "estimator",
                "global_factor")
# state_dict()'s format: 2 adds "version", "iteration" and each bucket's
# "warmup"; a dict without "version" is format 1 (read as before).
STATE_VERSION = 2
_STATE_KEYS = ("version", "config", "buckets", "iteration")
# Types the values of a sparse message may travel in, by their native names.
_WIRE_TYPES = {torch.float32: "float32", torch.float16: "float16",
               torch.bfloat16: "bfloat16"}


class SparseState(OptimizerInHook):
    """State of a sparse DDP comm hook: settings plus, per DDP bucket, the
    native state (fp32 residual, step counter, thresholds, regions).

    Args:
        algo: one of ``ALGORITHMS``; ``None`` lets the hook choose (the
            per-algorithm hooks set it, ``sparse_hook`` uses "oktopk");
            ``"auto"`` (with ``sparse_hook``) chooses per bucket: the
            group's latency and bandwidth are measured on the first call
            (also per link class, inside a node and across nodes, when the
            world spans several nodes of ``local_size`` ranks) and the
            selection cost on each bucket's first gradient, the
            sparse algorithm of ``auto_algos`` predicted fastest is the
            bucket's, and every ``auto_interval`` calls the bucket runs dense
            or sparse, whichever is predicted faster (measured times
            correct the model; a switch to dense sends the residual along).
            ``stats()`` reports the choice (``auto_dense``), the model's
            times, the prediction error (``auto_error``) and the measured
            links (``auto_alpha_s``, ``auto_beta_bytes_s``, and with link
            classes ``auto_intra_*`` and ``auto_cross_*``).
        auto_algos: the sparse candidates of ``algo="auto"``.
        auto_interval: calls of a bucket between two of its decisions.
        auto_trial_calls: with ``algo="auto"``, calls of each trial: every
            method predicted within 1.5x of the fastest (at most 3, dense
            among them) runs this many calls on the bucket (the first one
            untimed) and the fastest measured is kept; ``stats()`` reports
            ``auto_trial_<method>_s``. 0: the model's choice, no trials.
        auto_link: ``(alpha, beta)``: seconds per message round and bytes per
            second per rank, instead of measuring them.
        auto_density: ``(low, high)``: with ``algo="auto"``, each bucket's
            density is chosen in this range when the bucket is created: the
            densest of 5 geometric points whose fastest sparse algorithm is
            predicted within 10% of the fastest sparse choice at any point
            (more entries per step converge better; a slow link affords
            fewer). ``density`` is then only the measuring point of the
            selection cost; ``stats()`` reports ``auto_density``.
        estimator: the first guess of the local threshold of Ok-Topk,
            GaussianK and TopkDSA, one of ``pg_sparse.estimators()``:
            ``"gaussian"`` (GaussianK's default; TopkDSA's is exact, Ok-Topk's
            its own exact selection from the fused pass's candidate list),
            SIDCo's fits of ``|x|``
            (``"sidco_exp"`` exponential, ``"sidco_gp"`` generalized Pareto,
            ``"sidco_gamma"`` gamma; ``"sidco_exp_ms"``, ``"sidco_gp_ms"``
            and ``"sidco_gamma_gp_ms"`` fit the exceedances again in stages,
            their count adapted every 5 calls, ``stats()["estimate_stages"]``),
            ``"dgc_sample"`` (DGC: select on a fixed random sample,
            0.1% to 1% of the bucket: about 1000 entries above the threshold),
            ``"reuse"`` (Ok-Topk's reuse of the previous call's threshold)
            or ``"exact"`` (radix select, no guess). The guess is
            corrected toward [k/2, 2k] picks, then made exact, so it changes
            time, not volume; ``stats()["estimate_corrections"]`` shows how
            often it missed.
        density: fraction of entries sent, k = max(1, round(density * n)),
            in (0, 1].
        warmup_steps: iterations run as dense allreduce first, counted as
            torch's PowerSGD hook counts ``start_powerSGD_iter``: one per
            backward pass (DDP's last bucket, ``bucket.is_last()``). A
            bucket DDP creates later (it rebuilds its buckets after the first
            iteration) runs dense only for the warm-up iterations left. Keep
            it >= 1: a dense first iteration leaves no residual to misplace
            when DDP repacks its buckets. ``iteration`` says how many
            iterations have passed; checkpoints keep it.
        tau: Ok-Topk repartitions its regions every ``tau`` sparse steps.
        tau_prime: Ok-Topk's exact global threshold every ``tau_prime`` sparse
            steps (the local threshold is exact on every call).
        global_factor: Ok-Topk's global selection targets ``global_factor *
            k`` entries of the reduced sum (each rank still selects its k);
            1 is the paper's global top-k. A step applies that many entries,
            where TopkA applies the union of every rank's k (up to P k), and
            training quality follows the entries a step applies: at 4 ranks
            the paper's Ok-Topk trained worst of the sparse methods at equal
            density, and equal to TopkA at equal applied entries. The
            default 2 costs phase 2's bytes (the bound is 3 (k + factor k)
            (P-1)/P words per rank, about 1.5x the bytes of factor 1) and
            was better than factor 1 at equal bytes on every task measured
            (docs/convergence/optimizer/README.md).
        check_finite: check buckets for NaN/Inf (on any rank, every rank
            learns it from the algorithm's first message); False drops
            non-finite entries of a sparse call unchecked (never added to the
            residual) and reduces them as they are in a dense one.
        nonfinite: what a checked NaN/Inf does: ``"raise"`` (the default)
            raises on every rank, the residual restored up to the rounding of
            r + g - g; ``"skip"`` makes that step a zero gradient on every
            rank, the residual restored bit for bit (a snapshot per sparse
            call: one more pass and one more fp32 copy of the bucket), so a
            training loop with loss-scaling overflows can go on. An optimizer
            with momentum still applies its momentum on a skipped step.
        process_group: the group to reduce over (default: the world).
        momentum: DGC's momentum correction (Lin et al., ICLR'18): each rank
            keeps a velocity ``u = momentum * u + g`` of its own gradient and
            the hook sparsifies ``u`` (with error feedback) instead of ``g``;
            after a sparse step ``u`` is zeroed where the residual was
            (factor masking), so momentum does not push entries that were
            already sent. Use it with plain SGD (no momentum in the
            optimizer): the averaged output is then the momentum update.
            0 (the default) turns it off. Dense (warm-up) calls average ``u``,
            which is exactly momentum SGD on the averaged gradient.
        nesterov: with ``momentum``, send ``g + momentum * u`` (Nesterov).
        precondition: ``"adam"`` runs Adam in the hook, on the sparse
            stream: use it with ``torch.optim.SGD(lr=..., weight_decay=wd)``
            (no momentum) and no gradient clipping after backward (set
            ``max_grad_norm`` instead); dense calls then step exactly as
            ``AdamW(lr, betas, eps, weight_decay=wd)`` after
            ``clip_grad_norm_``. Why: error feedback turns each entry's
            gradient stream into a burst every ``1/density`` steps, and
            Adam, fed those bursts, moves an entry about ``sqrt(density)``
            as far per step as dense Adam (10x slower at 0.01). Here the
            sparse allreduce sends the plain gradient (error feedback in the
            residual), and an entry that arrives after waiting ``a`` calls
            gets the ``a`` Adam steps it missed at once: the moments decay
            by ``beta ** a`` and take the window's mean ``out / a`` (first
            moment) and ``out ** 2 / a`` (second moment: right for a noisy
            entry, whose window sum grows as sqrt(a)); the step is ``a``
            times Adam's. Entries not carried wait, moments untouched.
            Moments and ages are the same on every rank (computed from the
            reduced output) and checkpointed with the state.
        adam_select: with ``precondition="adam"``, what a sparse call ranks
            entries by. ``"gradient"``: the residual's raw size, as without
            Adam. ``"normalized"`` (the default): its size divided by Adam's denominator
            ``sqrt(v_hat) + eps`` (the same on every rank), i.e. the Adam
            step the entry has pending. Adam moves every entry by about
            ``lr`` whatever its gradient's scale, so ranking by raw size
            starves the entries of small-gradient tensors (norms, biases,
            embeddings) for far longer than ``1/density`` calls; ranking by
            the normalized size gives every entry its turn in proportion to
            its pending step. The residual is kept divided by the
            denominator (rescaled, one pass over the bucket, when the
            denominator changes), sums are taken in those units and turned
            back into gradient units before Adam's update, so nothing is
            lost; ``state_dict`` holds the residual as kept and, as
            ``residual_scale``, what it is to be multiplied by (``None``:
            gradient units).
        betas: Adam's (beta1, beta2) for ``precondition="adam"``.
        eps: Adam's epsilon for ``precondition="adam"``.
        hierarchy: ``"flat"`` (the default) reduces over the whole group;
            ``"node"`` reduce-scatters each bucket densely inside a node,
            runs the sparse algorithm across nodes among the ranks of equal
            local rank on that shard (each with its own residual), and
            allgathers the shards inside the node, so only sparse messages
            cross the slow links; ``"auto"`` is ``"node"`` when there are
            several nodes of several ranks. Needs the world group and plain
            error feedback (no momentum or precondition).
        local_size: ranks per node for ``hierarchy`` and for the link
            classes of ``algo="auto"``; default LOCAL_WORLD_SIZE. Ranks
            must be numbered node by node.
        max_grad_norm: with ``precondition="adam"``, clip the gradient Adam
            sees to this L2 norm per bucket (0: off): the averaged gradient
            on a dense call, as ``clip_grad_norm_`` does when the model fits
            one bucket; each rank's own gradient before it enters the
            residual on a sparse call.
        density_warmup_steps: DGC's sparsity warm-up: over the first this many
            sparse calls of a bucket the density falls exponentially from
            ``density_warmup_start`` to ``density`` (0: off, the default), so
            early training, where error feedback delays small entries the
            most, sends more.
        density_warmup_start: the density of the first sparse call of that
            schedule (default 0.25, DGC's first epoch).
        wire_dtype: the type the values travel in: ``torch.float32``,
            ``torch.float16`` or ``torch.bfloat16``; ``None`` (the default)
            uses the bucket's own dtype, so fp16/bf16 models send half the
            value bytes. Indices are int32 and the residual fp32 either way;
            each rank keeps what rounding to the wire type left out in its
            residual, so nothing is lost. A 16-bit type on an fp32 model
            trades precision of each message for bytes the same way.

    Buckets are keyed by DDP's bucket index; when DDP rebuilds its buckets
    and a bucket's size changes, that bucket starts afresh (with warm-up).

    The hooks also track each bucket's layout (which parameters, in which
    order): DDP's first iteration packs a bucket in parameter order, the
    rebuilt buckets in gradient-ready order. A native bucket keeps the layout
    its state (residual, regions) refers to, and a call in another layout of
    the same parameters is permuted into it, so a state restored from a
    checkpoint lines up with the parameters in a fresh DDP's first iteration.
    Parameters are identified by the order the hooks first see them in, the
    same in every run of one model.
    """

    def __init__(self, algo: str | None = None, density: float = 0.01,
                 warmup_steps: int = 1, tau: int = 64, tau_prime: int = 32,
                 check_finite: bool = True,
                 process_group: dist.ProcessGroup | None = None,
                 momentum: float = 0.0, nesterov: bool = False,
                 density_warmup_steps: int = 0, density_warmup_start: float = 0.25,
                 wire_dtype: torch.dtype | None = None, nonfinite: str = "raise",
                 precondition: str | None = None,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 max_grad_norm: float = 0.0, adam_select: str = "normalized",
                 hierarchy: str = "flat",
                 local_size: int | None = None,
                 auto_algos: Sequence[str] = _auto.CANDIDATES,
                 auto_interval: int = _auto.INTERVAL,
                 auto_link: tuple[float, float] | None = None,
                 auto_density: tuple[float, float] | None = None,
                 auto_trial_calls: int = _auto.TRIAL_CALLS,
                 estimator: str | None = None, global_factor: float = 2.0) -> None:
        if algo is not None and algo not in (*ALGORITHMS, "auto"):
            raise ValueError(f"pg_sparse: unknown algorithm {algo!r}; "
                             f"choose one of {(*ALGORITHMS, 'auto')}")
        self._auto = _auto.chooser_for(algo, auto_algos, auto_interval, auto_link,
                                       hierarchy, precondition, auto_density,
                                       bool(density_warmup_steps), local_size,
                                       auto_trial_calls)
        if estimator is not None and estimator not in ESTIMATORS:
            raise ValueError(f"pg_sparse: unknown estimator {estimator!r}; choose one of "
                             f"{tuple(ESTIMATORS)}")
        if estimator is not None and algo not in (None, *_ESTIMATED):
            raise ValueError(f"pg_sparse: estimator applies to {_ESTIMATED}, "
                             f"not to algo {algo!r} (it selects exactly)")
        self.estimator = estimator
        if not isinstance(global_factor, (int, float)) or not 1.0 <= global_factor <= 1e6:
            raise ValueError(f"pg_sparse: global_factor must be in [1, 1e6], "
                             f"got {global_factor!r}")
        self.global_factor = float(global_factor)
        if self._auto is not None:  # its model of Ok-Topk's bytes
            self._auto.global_factor = self.global_factor
        if not isinstance(density, (int, float)) or not 0.0 < density <= 1.0:
            raise ValueError(f"pg_sparse: density must be in (0, 1], got {density!r}")
        for name, value, low in (("warmup_steps", warmup_steps, 0),
                                 ("tau", tau, 1), ("tau_prime", tau_prime, 1),
                                 ("density_warmup_steps", density_warmup_steps, 0)):
            if not isinstance(value, int) or value < low:
                raise ValueError(f"pg_sparse: {name} must be an integer >= {low}, "
                                 f"got {value!r}")
        if not isinstance(momentum, (int, float)) or not 0.0 <= momentum < 1.0:
            raise ValueError(f"pg_sparse: momentum must be in [0, 1), got {momentum!r}")
        if nesterov and not momentum:
            raise ValueError("pg_sparse: nesterov needs a momentum > 0")
        if not isinstance(density_warmup_start, (int, float)) or \
                not 0.0 < density_warmup_start <= 1.0:
            raise ValueError(f"pg_sparse: density_warmup_start must be in (0, 1], "
                             f"got {density_warmup_start!r}")
        if wire_dtype is not None and wire_dtype not in _WIRE_TYPES:
            raise TypeError(f"pg_sparse: wire_dtype must be None, torch.float32, "
                            f"torch.float16 or torch.bfloat16, got {wire_dtype!r}")
        if hierarchy not in _hierarchy.HIERARCHIES:
            raise ValueError(f"pg_sparse: hierarchy must be one of {_hierarchy.HIERARCHIES}, "
                             f"got {hierarchy!r}")
        if hierarchy != "flat" and (momentum or precondition or process_group is not None):
            raise ValueError("pg_sparse: hierarchy='node'/'auto' runs over the world with "
                             "plain error feedback: no momentum, precondition or process_group")
        if local_size is not None and (not isinstance(local_size, int) or local_size < 1):
            raise ValueError(f"pg_sparse: local_size must be an integer >= 1, got {local_size!r}")
        if nonfinite not in ("raise", "skip"):
            raise ValueError(f"pg_sparse: nonfinite must be 'raise' or 'skip', "
                             f"got {nonfinite!r}")
        check_adam(precondition, betas, eps, momentum, max_grad_norm)
        self.precondition = precondition
        self.betas = (float(betas[0]), float(betas[1]))
        self.eps = float(eps)
        self.max_grad_norm = float(max_grad_norm)
        # Adam in the hook: calls per bucket index (Adam's t).
        self._adam_t: dict[int, int] = {}
        self._param_adam: dict[int, int] = {}  # parameter id -> t
        self._second = ParamBuffers()
        self._age = ParamBuffers()  # calls since an entry was last applied
        # adam_select="normalized": the denominator the residual is divided by.
        self._scale = ParamBuffers()
        self._scale_spare: dict[int, torch.Tensor] = {}
        if adam_select not in ("gradient", "normalized"):
            raise ValueError(f"pg_sparse: adam_select must be 'gradient' or 'normalized', "
                             f"got {adam_select!r}")
        self.adam_select = adam_select
        self.nonfinite = nonfinite
        self.wire_dtype = wire_dtype
        self.algo = algo
        self.density = float(density)
        self.momentum = float(momentum)
        self.nesterov = bool(nesterov)
        self.density_warmup_steps = density_warmup_steps
        self.density_warmup_start = float(density_warmup_start)
        self._applied_density: dict[int, float] = {}  # bucket index -> density set
        # Momentum correction's velocity, or Adam's first moment.
        self._velocity = ParamBuffers()
        self.warmup_steps = warmup_steps
        # Iterations the hooks have completed (DDP's last bucket of each),
        # and per bucket index the dense calls its native bucket was given:
        # the warm-up iterations left when it was created.
        self._iteration = 0
        self._warmup_of: dict[int, int] = {}
        # Per bucket index: sparse calls of the native buckets auto's trials
        # replaced (the density schedule counts them).
        self._sparse_before: dict[int, int] = {}
        # Set by hooks.register_comm_hook: the bucket indices DDP's reducer
        # runs in C++ (their iterations are counted there).
        self._native_table: Any = None
        self.tau = tau
        self.tau_prime = tau_prime
        self.check_finite = bool(check_finite)
        self.process_group = process_group
        self.hierarchy = hierarchy
        self.local_size = local_size
        self._topology: _hierarchy.Topology | None = None  # built on first use
        self._mode: str | None = None
        self._buckets: dict[int, Any] = {}
        self._saved: dict[int, dict[str, Any]] = {}
        # Per bucket index, the layout its native state refers to:
        # ((parameter id, numel), ...) or None (not from a DDP bucket).
        self._layouts: dict[int, tuple[tuple[int, int], ...] | None] = {}
        self._param_ids: dict[int, tuple[Any, int]] = {}  # id(p) -> (weakref, id)
        self._next_param_id = 0
        self._pinned: set[int] = set()  # bucket indices that keep their layout
        self._restored: set[int] = set()  # bucket indices from a checkpoint
        # Set by hooks.register_comm_hook(..., optimizer=): the optimizer
        # that steps the model (_optbridge).
        self._bridge: Any = None
        self._watched = False  # _optbridge.watch has seen this state

    # -- native buckets -------------------------------------------------
    def _config(self, tensor: torch.Tensor, warmup: int, algo: str | None = None) -> Any:
        c = _C.BucketConfig()
        c.wire = _WIRE_TYPES.get(self.wire_dtype or tensor.dtype, "float32")
        c.algo = algo or self.algo or "oktopk"
        if self.estimator is not None:
            if c.algo not in _ESTIMATED:
                raise ValueError(f"pg_sparse: estimator applies to {_ESTIMATED}, "
                                 f"not to algo {c.algo!r} (it selects exactly)")
            c.estimator = self.estimator
        c.density = self.density
        c.warmup_steps = warmup
        c.tau = self.tau
        c.tau_prime = self.tau_prime
        c.global_factor = self.global_factor
        c.check_finite = self.check_finite
        c.nonfinite = self.nonfinite
        return c

    def _hierarchical(self) -> _hierarchy.Topology | None:
        """The groups of hierarchy='node' (built on the first call, on every
        rank), or None when the reduction is flat."""
        if self._mode is None:
            self._mode = _hierarchy.resolve(self.hierarchy, self.local_size)
            if self._mode == "node":
                self._topology = _hierarchy.build(self.local_size)
        return self._topology

    def _group(self) -> Any:
        topo = self._hierarchical()
        group = topo.cross_group if topo is not None else self.process_group or dist.group.WORLD
        if group is None:
            raise RuntimeError("pg_sparse: call dist.init_process_group first")
        return group

    def _backend(self, device: torch.device) -> Any:
        return self._group()._get_backend(device)

    def native_bucket(self, index: int, tensor: torch.Tensor) -> Any:
        """The native state for DDP bucket ``index`` holding ``tensor``."""
        return self._bucket_for(index, tensor, None)[0]

    def _layout(self, params: Sequence[torch.Tensor] | None,
                tensor: torch.Tensor) -> tuple[tuple[int, int], ...] | None:
        if not params or sum(p.numel() for p in params) != tensor.numel():
            return None
        layout = []
        for p in params:
            known = self._param_ids.get(id(p))
            if known is None or known[0]() is not p:
                known = (weakref.ref(p), self._next_param_id)
                self._next_param_id += 1
                self._param_ids[id(p)] = known
            layout.append((known[1], p.numel()))
        return tuple(layout)

    def _bucket_for(self, index: int, tensor: torch.Tensor,
                    params: Sequence[torch.Tensor] | None
                    ) -> tuple[Any, list[tuple[int, int]] | None]:
        """The native state for bucket ``index`` and, when the bucket's
        layout differs from the one that state refers to, the (offset,
        numel) segments of ``tensor`` in the state's order."""
        layout = self._layout(params, tensor)
        b = self._buckets.get(index)
        mine = self._layouts.get(index)
        if b is not None and b.numel == tensor.numel() and \
                (layout is None or mine is None or mine == layout
                 or sorted(mine) == sorted(layout)):
            if mine is None:
                self._layouts[index] = mine = layout
            elif layout is not None and mine != layout and index not in self._pinned:
                if _untouched(b) or self._follows_layout(index):
                    # DDP rebuilt its buckets (after its first iteration):
                    # the state follows its parameters into the new layout
                    # once, instead of permuting the bucket both ways on
                    # every later call in Python (which also kept the C++
                    # hook from serving it). Ok-Topk's region bounds stay a
                    # partition of the bucket, planned again on schedule.
                    segs = _segments(layout, mine)
                    b.set_residual(_permute(b.residual(), segs, True))
                    self._layouts[index] = mine = layout
                else:
                    # A restored state keeps the layout it was saved in:
                    # DDP's rebuilt buckets take it again from the second
                    # iteration on, so only the first one is permuted.
                    self._pinned.add(index)  # permute from now on
        else:
            saved = self._take_saved(index, tensor.numel(), layout)
            warmup = self._warmup_for(saved)
            algo = None
            if self._auto is not None:  # measures and predicts (collective)
                algo = self._auto.create(index, tensor, self.density, self._group(),
                                         None if saved is None else saved.get("auto"))
            b = self._new_native(index, tensor, warmup, algo)
            self._warmup_of[index] = warmup
            self._sparse_before.pop(index, None)
            self._applied_density.pop(index, None)
            self._scale.tensors.pop(index, None)  # a new residual is in gradient units
            mine = layout
            self._restored.discard(index)
            if saved is not None:
                _restore(b, saved)
                self._restore_buffers(index, saved, tensor.device)
                self._restored.add(index)
                if saved.get("layout") is not None and layout is not None:
                    mine = tuple((int(i), int(n)) for i, n in saved["layout"])
            self._buckets[index] = b
            self._layouts[index] = mine
            self._pinned.discard(index)
        if layout is None or mine is None or mine == layout:
            return b, None
        return b, _segments(layout, mine)

    def _new_native(self, index: int, tensor: torch.Tensor, warmup: int,
                    algo: str | None) -> Any:
        """A native bucket for bucket ``index`` holding ``tensor`` (at the
        density ``auto_density`` chose for it, if any)."""
        b = _C.SparseBucket(self._backend(tensor.device), tensor.numel(),
                            self._config(tensor, warmup, algo))
        if self._auto is not None and self._auto.density_of(index) != self.density:
            b.set_density(self._auto.density_of(index))  # from auto_density
        return b

    def _rebuild_for(self, index: int, tensor: torch.Tensor, algo: str) -> Any:
        """Bucket ``index``'s native state again, for ``algo`` (a trial of
        ``algo="auto"``): the residual carried over, no warm-up, the
        density schedule continued."""
        old = self._buckets[index]
        b = self._new_native(index, tensor, 0, algo)
        if index in self._applied_density:
            b.set_density(self._applied_density[index])
        b.set_residual(old.residual())
        # The new bucket has no warm-up (a trial follows timed calls, after
        # it); the density schedule goes on from the sparse calls made so
        # far (in memory only: a checkpoint's bucket starts it again).
        step = int(old.get_state()[0]["step"])
        done = step - self._warmup_of.get(index, self.warmup_steps)
        self._sparse_before[index] = max(0, done) + self._sparse_before.get(index, 0)
        self._warmup_of[index] = 0
        self._buckets[index] = b
        return b

    def _follows_layout(self, index: int) -> bool:
        """Whether bucket ``index``'s state, touched already, moves with its
        parameters when DDP repacks them: yes unless it came from a
        checkpoint (that layout is the one DDP returns to) or Python holds
        per-bucket tensors in the old layout (momentum, preconditioning)."""
        return index not in self._restored and not self.momentum \
            and not self._adam_on

    def _warmup_for(self, saved: dict[str, Any] | None) -> int:
        """Dense calls for a new native bucket, counted like its step: the
        warm-up iterations left now, or for a restored bucket what it was
        given (format 1 checkpoints counted calls per bucket)."""
        if saved is not None:
            return int(saved.get("warmup", self.warmup_steps))
        return max(0, self.warmup_steps - self.iteration)

    def _count_iteration(self, bucket: dist.GradBucket) -> None:
        """Called by the hooks after each bucket: DDP's last bucket of a
        backward pass ends an iteration."""
        is_last = getattr(bucket, "is_last", None)
        if is_last is not None and is_last():
            self._iteration += 1

    @property
    def iteration(self) -> int:
        """Iterations (backward passes) the hooks have completed."""
        native = self._native_table
        return self._iteration + (native.iterations if native is not None else 0)

    def _serve_natively(self, index: int, bucket: Any,
                        params: Sequence[torch.Tensor] | None, budget: int = -1) -> None:
        """After a plain call of bucket ``index`` (its layout as the state's,
        no per-call Python option): let the C++ hook, if registered, run its
        next calls (``budget`` of them, -1: no limit) while DDP's bucket
        holds the same ``params``."""
        if self._native_table is None or not params or self.density_warmup_steps \
                or index in self._applied_density or budget == 0:
            return
        self._native_table.set(index, bucket, list(params), budget)

    def _take_saved(self, index: int, numel: int,
                    layout: tuple[tuple[int, int], ...] | None) -> dict[str, Any] | None:
        """The saved state for a new bucket: the one of the same parameters
        (any index) when layouts are known, else the same index and size."""
        if layout is not None:
            want = sorted(layout)
            for i in sorted(self._saved, key=lambda i: i != index):
                saved_layout = self._saved[i].get("layout")
                if saved_layout is not None and \
                        sorted((int(a), int(n)) for a, n in saved_layout) == want:
                    return self._saved.pop(i)
            if any(s.get("layout") is not None for s in self._saved.values()):
                return None
        saved = self._saved.get(index)
        if saved is not None and saved["numel"] == numel:
            return self._saved.pop(index)
        return None

    # -- density warm-up ----------------------------------------------
    def density_at(self, sparse_call: int) -> float:
        """The density of a bucket's ``sparse_call``-th sparse call (0 based)
        under the density warm-up schedule."""
        n = self.density_warmup_steps
        start = max(self.density_warmup_start, self.density)
        if sparse_call >= n or start == self.density:
            return self.density
        return start * (self.density / start) ** (max(0, sparse_call) / n)

    def _schedule_density(self, index: int, bucket: Any) -> None:
        """Set bucket ``index``'s density for its next call."""
        if not self.density_warmup_steps and index not in self._applied_density:
            return
        calls = int(bucket.get_state()[0]["step"])
        d = self.density_at(calls - self._warmup_of.get(index, self.warmup_steps)
                            + self._sparse_before.get(index, 0))
        if self._applied_density.get(index) != d:
            bucket.set_density(d)
            self._applied_density[index] = d

    # -- statistics -----------------------------------------------------
    def stats(self) -> dict[int, dict[str, float]]:
        """Per bucket index, the statistics of its last call: achieved
        ``density``, ``local_selected``, ``global_selected``, ``words_sent``,
        ``words_recv``, ``bytes_sent``, ``time_s``, the bounds ``words_*_bound``,
        threshold recomputes and more."""
        return {i: {**b.stats(), **(self._auto.stats(i) if self._auto else {})}
                for i, b in sorted(self._buckets.items())}

    def summary(self) -> dict[str, float]:
        """Totals of the last call over all buckets."""
        per = self.stats().values()
        total = {k: sum(s[k] for s in per) for k in
                 ("n", "k", "global_selected", "words_sent", "words_recv",
                  "bytes_sent", "bytes_recv", "time_s", "time_select_s",
                  "time_reduce_s", "time_gather_s", "words_upper_bound",
                  "words_lower_bound", "transport_calls", "host_syncs")}
        total["density"] = total["global_selected"] / total["n"] if total["n"] else 0.0
        if self._auto is not None:  # buckets whose current choice is dense
            total["auto_dense"] = sum(s.get("auto_dense", 0.0) for s in per)
        return total

    # -- checkpointing --------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Settings and per-bucket residuals, steps, thresholds and regions."""
        buckets = dict(self._saved)
        for i, b in self._buckets.items():
            scalars, bounds = b.get_state()
            layout = self._layouts.get(i)
            buckets[i] = {"numel": b.numel, "residual": b.residual(),
                          "residual_scale": self._scale.saved(i),
                          "bounds": list(bounds), **scalars,
                          "velocity": self._velocity.saved(i),
                          "second_moment": self._second.saved(i),
                          "adam_t": self._adam_t.get(i, 0),
                          "adam_age": self._age.saved(i),
                          "warmup": self._warmup_of.get(i, self.warmup_steps),
                          **({"auto": self._auto.saved(i)} if self._auto else {}),
                          "layout": None if layout is None else [list(x) for x in layout]}
        return {"version": STATE_VERSION, "iteration": self.iteration,
                "config": {k: getattr(self, k) for k in _CONFIG_KEYS},
                "buckets": buckets}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned; buckets not built yet are
        restored when the hook first sees them.

        Raises:
            ValueError: a newer format than this version reads, or keys it
                does not know (a state of another class, or a typo).
        """
        version = state.get("version", 1)
        if not isinstance(version, int) or not 1 <= version <= STATE_VERSION:
            raise ValueError(f"pg_sparse: SparseState checkpoint format {version!r}; this "
                             f"version reads formats 1 to {STATE_VERSION}")
        unknown = sorted(set(state) - set(_STATE_KEYS)) + \
            sorted(f"config.{k}" for k in set(state.get("config", {})) - set(_CONFIG_KEYS))
        if unknown or "config" not in state or "buckets" not in state:
            raise ValueError("pg_sparse: not a SparseState.state_dict(): "
                             + (f"unknown keys {unknown}" if unknown
                                else "'config' or 'buckets' missing"))
        for k, v in state["config"].items():
            setattr(self, k, v)
        if "adam_select" not in state["config"]:  # saved before adam_select existed
            self.adam_select = "gradient"
        if "global_factor" not in state["config"]:  # saved before it existed
            self.global_factor = 1.0
        if self.algo == "auto" and self._auto is None:  # unpickled: defaults
            self._auto = _auto.chooser_for("auto", hierarchy=self.hierarchy,
                                           precondition=self.precondition,
                                           local_size=self.local_size)  # default trials
        if self._auto is not None:
            self._auto.global_factor = self.global_factor
        self._iteration = int(state.get("iteration", 0))
        if self._native_table is not None:  # Python sees every bucket again
            self._native_table.clear()
        self._saved = {int(i): dict(s) for i, s in state["buckets"].items()}
        for i, b in list(self._buckets.items()):
            saved = self._take_saved(i, b.numel, self._layouts.get(i))
            if saved is not None and self._warmup_for(saved) != self._warmup_of.get(i):
                # Its warm-up is fixed at creation: build it afresh, lazily.
                self._saved[i] = saved
                saved = None
                del self._buckets[i]
                self._layouts.pop(i, None)
                continue
            if saved is not None:
                _restore(b, saved)
                self._restore_buffers(i, saved, None)
                self._restored.add(i)
                if saved.get("layout") is not None and self._layouts.get(i) is not None:
                    self._layouts[i] = tuple((int(a), int(n)) for a, n in saved["layout"])
            else:
                del self._buckets[i]
                self._layouts.pop(i, None)

    def __getstate__(self) -> dict[str, Any]:
        # Native handles and process groups do not pickle; the state does.
        if self.process_group is not None:
            warnings.warn("pg_sparse: SparseState.process_group does not pickle and is "
                          "dropped; set it again after unpickling", stacklevel=2)
        return {"state": self.state_dict()}

    def __setstate__(self, d: dict[str, Any]) -> None:
        self.__init__()
        self.load_state_dict(d["state"])


def _untouched(bucket: Any) -> bool:
    """No residual and no regions yet (only warm-up calls so far)."""
    _, bounds = bucket.get_state()
    return not bounds and not bool(bucket.residual().any())


def _restore(bucket: Any, saved: dict[str, Any]) -> None:
    bucket.set_residual(saved["residual"])
    bucket.set_state({k: float(saved[k]) for k in
                      ("step", "local_threshold", "global_threshold")},
                     [int(x) for x in saved["bounds"]])
