"""SparseState: the per-model state of the sparse comm hooks."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from . import _C

ALGORITHMS: tuple[str, ...] = ("dense", "topka", "topkdsa", "gtopk",
                               "gaussiank", "oktopk")
_CONFIG_KEYS = ("algo", "density", "warmup_steps", "tau", "tau_prime",
                "check_finite")


class SparseState:
    """State of a sparse DDP comm hook: settings plus, per DDP bucket, the
    native state (fp32 residual, step counter, thresholds, regions).

    Args:
        algo: one of ``ALGORITHMS``; ``None`` lets the hook choose (the
            per-algorithm hooks set it, ``sparse_hook`` uses "oktopk").
        density: fraction of entries sent, k = max(1, round(density * n)),
            in (0, 1].
        warmup_steps: calls per bucket run as dense allreduce first. Keep it
            >= 1: DDP rebuilds its buckets after the first iteration, and a
            dense first call leaves no residual to misplace.
        tau: Ok-Topk repartitions its regions every ``tau`` sparse steps.
        tau_prime: exact thresholds every ``tau_prime`` sparse steps.
        check_finite: NaN/Inf in any rank's bucket raises on every rank.
        process_group: the group to reduce over (default: the world).

    Buckets are keyed by DDP's bucket index; when DDP rebuilds its buckets
    and a bucket's size changes, that bucket starts afresh (with warm-up).
    """

    def __init__(self, algo: str | None = None, density: float = 0.01,
                 warmup_steps: int = 1, tau: int = 64, tau_prime: int = 32,
                 check_finite: bool = True,
                 process_group: dist.ProcessGroup | None = None) -> None:
        if algo is not None and algo not in ALGORITHMS:
            raise ValueError(f"pg_sparse: unknown algorithm {algo!r}; "
                             f"choose one of {ALGORITHMS}")
        if not isinstance(density, (int, float)) or not 0.0 < density <= 1.0:
            raise ValueError(f"pg_sparse: density must be in (0, 1], got {density!r}")
        for name, value, low in (("warmup_steps", warmup_steps, 0),
                                 ("tau", tau, 1), ("tau_prime", tau_prime, 1)):
            if not isinstance(value, int) or value < low:
                raise ValueError(f"pg_sparse: {name} must be an integer >= {low}, "
                                 f"got {value!r}")
        self.algo = algo
        self.density = float(density)
        self.warmup_steps = warmup_steps
        self.tau = tau
        self.tau_prime = tau_prime
        self.check_finite = bool(check_finite)
        self.process_group = process_group
        self._buckets: dict[int, Any] = {}
        self._saved: dict[int, dict[str, Any]] = {}

    # -- native buckets -------------------------------------------------
    def _config(self) -> Any:
        c = _C.BucketConfig()
        c.algo = self.algo or "oktopk"
        c.density = self.density
        c.warmup_steps = self.warmup_steps
        c.tau = self.tau
        c.tau_prime = self.tau_prime
        c.check_finite = self.check_finite
        return c

    def _backend(self, device: torch.device) -> Any:
        group = self.process_group or dist.group.WORLD
        if group is None:
            raise RuntimeError("pg_sparse: call dist.init_process_group first")
        return group._get_backend(device)

    def native_bucket(self, index: int, tensor: torch.Tensor) -> Any:
        """The native state for DDP bucket ``index`` holding ``tensor``."""
        b = self._buckets.get(index)
        if b is None or b.numel != tensor.numel():
            b = _C.SparseBucket(self._backend(tensor.device), tensor.numel(),
                                self._config())
            saved = self._saved.pop(index, None)
            if saved is not None and saved["numel"] == tensor.numel():
                _restore(b, saved)
            self._buckets[index] = b
        return b

    # -- statistics -----------------------------------------------------
    def stats(self) -> dict[int, dict[str, float]]:
        """Per bucket index, the statistics of its last call: achieved
        ``density``, ``local_selected``, ``global_selected``, ``words_sent``,
        ``words_recv``, ``bytes_sent``, ``time_s``, the ``words_*_bound``s,
        threshold recomputes and more."""
        return {i: dict(b.stats()) for i, b in sorted(self._buckets.items())}

    def summary(self) -> dict[str, float]:
        """Totals of the last call over all buckets."""
        per = self.stats().values()
        total = {k: sum(s[k] for s in per) for k in
                 ("n", "k", "global_selected", "words_sent", "words_recv",
                  "bytes_sent", "bytes_recv", "time_s", "words_upper_bound",
                  "words_lower_bound")}
        total["density"] = total["global_selected"] / total["n"] if total["n"] else 0.0
        return total

    # -- checkpointing --------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Settings and per-bucket residuals, steps, thresholds and regions."""
        buckets = dict(self._saved)
        for i, b in self._buckets.items():
            scalars, bounds = b.get_state()
            buckets[i] = {"numel": b.numel, "residual": b.residual(),
                          "bounds": list(bounds), **scalars}
        return {"config": {k: getattr(self, k) for k in _CONFIG_KEYS},
                "buckets": buckets}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned; buckets not built yet are
        restored when the hook first sees them."""
        for k, v in state["config"].items():
            if k in _CONFIG_KEYS:
                setattr(self, k, v)
        self._saved = {int(i): dict(s) for i, s in state["buckets"].items()}
        for i, b in list(self._buckets.items()):
            saved = self._saved.pop(i, None)
            if saved is not None and saved["numel"] == b.numel:
                _restore(b, saved)
            else:
                del self._buckets[i]

    def __getstate__(self) -> dict[str, Any]:
        # Native handles and process groups do not pickle; the state does.
        return {"state": self.state_dict()}

    def __setstate__(self, d: dict[str, Any]) -> None:
        self.__init__()
        self.load_state_dict(d["state"])


def _restore(bucket: Any, saved: dict[str, Any]) -> None:
    bucket.set_residual(saved["residual"])
    bucket.set_state({k: float(saved[k]) for k in
                      ("step", "local_threshold", "global_threshold")},
                     [int(x) for x in saved["bounds"]])
