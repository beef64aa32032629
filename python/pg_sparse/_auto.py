"""``SparseState(algo="auto")``: per bucket, dense or the sparse algorithm
predicted fastest, re-decided as measurements come in.

The model (DESIGN.md, "Choosing dense or sparse per bucket"): a bucket of n
values at density d (k = d n) on P ranks costs

    dense:   R_dense(P) alpha + 4 V_dense(P, n) / beta
    sparse:  c_sel n + R_a(P) alpha + 4 W_a(P, k) / beta

with alpha the latency of one message round and beta the bandwidth per rank,
both measured on the group at start-up (one-value and 4 MB allreduces; 64 MB
where the link is too fast for 4 MB to tell), c_sel
the selection cost per value, measured on the bucket's first gradient with
the core's own kernels (accumulate, exact k-th |x|, compaction), and R, V, W
the algorithms' rounds and 4-byte words per rank. Once a method has run a
window of calls, its measured time (the core's own, slowest rank) replaces
the model's by a per-method scale, and the prediction error is kept for the
stats. Every input is the maximum over ranks, so every rank decides alike.

Where the group spans several nodes of several ranks each (local_size or
LOCAL_WORLD_SIZE), alpha and beta are also measured per link class: inside a
node (the node groups) and across nodes (the cross-node groups of every
local rank at once, so they share the node's network as a sparse exchange
does). A sparse method's bytes then split over its peers: the share
(L - 1)/(P - 1) inside the node at that class's beta, the rest across at the
cross-node beta, the two in parallel. The dense ring keeps the whole group's
measurement, which is what a ring over the nodes' boundaries sees.

The model ranks the methods; measurement picks among the close ones. Every
method predicted within 1.5x of the fastest (at most three, dense among
them) runs a trial of ``trial_calls`` calls on the bucket, its first call
untimed (a new bucket's first selection, a switch's flush), and the bucket
keeps the fastest measured. A trial of another sparse algorithm rebuilds the
native bucket with the residual carried over. Later decisions choose between
that algorithm and dense (``pgs_bucket_set_dense``: a dense call sends the
residual with the gradient, so nothing is lost at a switch).

Trials and decisions run in the Python hook; with ``hooks.register_comm_hook``
the calls between them run in DDP's C++ hook (``native_calls``), and the
native bucket records every call's time for the chooser (``_drain``).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from . import _C, _hierarchy

CANDIDATES = ("oktopk", "topka", "gtopk", "gaussiank", "topkdsa")
INTERVAL = 100  # calls of a bucket between two decisions, by default
TRIAL_CALLS = 3  # calls of each close method's trial, by default
_TRIAL_FACTOR = 1.5  # methods predicted within this factor of the fastest are tried
_TRIAL_MAX = 3  # and at most this many (the model's pick first)
_PROBE_VALUES = 1 << 20  # 4 MB: bandwidth-bound on any link slower than memory
_PROBE_GROWTH = 16  # 64 MB where 4 MB is not (a fast link)
_RESOLVED = 0.25  # the probe must take this much of the one-value time longer
_HYSTERESIS = 0.9  # switch only for a predicted gain above 10%
# With a density range: the densest choice predicted within this factor of
# the fastest, and the grid of densities tried (geometric, both ends in).
_DENSITY_SLACK = 1.1
_DENSITY_POINTS = 5


def _log2(p: int) -> float:
    return math.log2(p) if p > 1 else 0.0


def rounds(method: str, p: int) -> float:
    """Sequential message rounds of one call (ring allreduce: 2(P-1))."""
    ring = 2.0 * (p - 1)
    extra = {"oktopk": 3 * _log2(p), "topkdsa": 2 * _log2(p), "gtopk": 2 * _log2(p)}
    return ring + extra.get(method, 0.0)


def words(method: str, p: int, n: int, k: int, global_factor: float = 1.0) -> float:
    """4-byte words one rank sends in one call (a sparse entry is an index
    and a value: 2 words). Ok-Topk: its k picks split over the regions and
    its G of ``global_factor`` k entries gathered, 2 (k + gk)(P-1)/P (4k at
    factor 1: the middle of its 2k..6k (P-1)/P bound);
    TopkA and GaussianK gather every rank's k entries; gTop-k exchanges 2k
    words per recursive-doubling round, then allreduces k values; TopkDSA
    gathers the reduced union (up to P k entries)."""
    f = (p - 1) / p if p > 1 else 0.0
    return {
        "dense": 2.0 * f * n,
        "oktopk": 2.0 * (1.0 + global_factor) * k * f,
        "topka": 2.0 * k * (p - 1),
        "gaussiank": 2.0 * k * (p - 1),
        "gtopk": 2.0 * k * _log2(p) + 2.0 * f * k,
        "topkdsa": 2.0 * k * (p - 1),
    }[method]


@dataclass
class Link:
    """The group's measured link: seconds per message round, bytes per
    second per rank."""

    alpha_s: float
    beta_bytes_s: float


@dataclass
class LinkClasses:
    """The links of a group over several nodes: inside a node and across
    nodes (the per-rank share when every local rank sends at once)."""

    local_size: int  # L: ranks per node
    intra: Link
    cross: Link


def predict(method: str, p: int, n: int, k: int, link: Link, select_s: float,
            classes: LinkClasses | None = None, global_factor: float = 1.0) -> float:
    """Modelled seconds of one call of ``method`` on a bucket of n values
    (a sparse method's bytes split over the link classes where given)."""
    sent = 4.0 * words(method, p, n, k, global_factor)
    if method == "dense" or classes is None or p < 2:
        wire = sent / link.beta_bytes_s
    else:
        across = (p - classes.local_size) / (p - 1)  # the share of peers on other nodes
        wire = max((1.0 - across) * sent / classes.intra.beta_bytes_s,
                   across * sent / classes.cross.beta_bytes_s)
    wire += rounds(method, p) * link.alpha_s
    return wire if method == "dense" else wire + select_s * n


def _agreed(values: list[float], group: Any) -> list[float]:
    """The maximum over ranks of each value (every rank then decides alike)."""
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t.tolist()


def _timed(fn: Any, repeats: int, cuda: bool) -> float:
    out = []
    for _ in range(repeats):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def measure_link(group: Any, device: torch.device) -> Link:
    """alpha and beta of ``group`` on ``device``'s tensors: one-value and
    4 MB allreduces (a warm-up call each first), slowest rank. Where the
    4 MB call is not clearly slower than the one-value call (NVLink, shared
    memory), a 64 MB one is timed instead, and if even that one is not,
    beta comes from its whole time (a lower bound) rather than from noise."""
    p = dist.get_world_size(group)
    cuda = device.type == "cuda"
    small = torch.zeros(1, device=device)
    dist.all_reduce(small, group=group)
    t_small = _timed(lambda: dist.all_reduce(small, group=group), 5, cuda)
    values = _PROBE_VALUES
    for grown in (False, True):
        big = torch.zeros(values, device=device)
        dist.all_reduce(big, group=group)
        t_big = _timed(lambda b=big: dist.all_reduce(b, group=group), 3, cuda)
        ts, tb = _agreed([t_small, t_big], group)  # every rank decides alike
        resolved = tb - ts >= _RESOLVED * ts
        if resolved or grown:
            break
        values *= _PROBE_GROWTH
    r = rounds("dense", p) or 1.0
    sent = 4.0 * words("dense", p, values, 0) or 4.0 * values
    return Link(alpha_s=ts / r, beta_bytes_s=sent / (tb - ts if resolved else tb))


def measure_classes(local_size: int | None, group: Any,
                    device: torch.device) -> LinkClasses | None:
    """alpha and beta inside a node and across nodes (every node's and every
    local rank's group measured at once; the slowest over all ranks), or
    None unless ``group`` is the world over several nodes of several ranks
    each. Collective over the world: it creates the node and cross-node
    groups."""
    world = dist.get_world_size()
    if dist.get_world_size(group) != world or \
            _hierarchy.resolve("auto", local_size) != "node":
        return None
    topo = _hierarchy.build(local_size, gather=False)
    intra = measure_link(topo.node_group, device)
    cross = measure_link(topo.cross_group, device)
    a_in, t_in, a_x, t_x = _agreed([intra.alpha_s, 1.0 / intra.beta_bytes_s,
                                    cross.alpha_s, 1.0 / cross.beta_bytes_s], group)
    return LinkClasses(topo.local_size, Link(a_in, 1.0 / t_in), Link(a_x, 1.0 / t_x))


def measure_select(grad: torch.Tensor, k: int, group: Any) -> float:
    """Seconds per value of the selection the sparse algorithms run: the
    fused accumulate, the exact k-th |x| and the compaction, with the core's
    kernels on a copy of ``grad`` (slowest rank)."""
    g = grad.detach().reshape(-1).float().contiguous()
    r = torch.zeros_like(g)
    cuda = g.is_cuda

    def select() -> None:
        _C._ops_accumulate(r, g, math.inf)
        thr, _ = _C._ops_kth_abs(r, max(1, k))
        _C._ops_compact(r, thr, -1, 2 * max(1, k))

    select()
    per_value = _timed(select, 3, cuda) / max(1, g.numel())
    return _agreed([per_value], group)[0]


@dataclass
class BucketChoice:
    """One bucket's decision and what it rests on."""

    algo: str  # the native bucket's sparse algorithm
    dense: bool  # the current choice
    density: float  # the native bucket's density (chosen from auto_density)
    predicted: dict[str, float]  # model seconds per call, "dense" and each candidate
    scale: dict[str, float] = field(default_factory=dict)  # measured / model, per method
    calls: int = 0  # completed calls, as far as drained from the native bucket
    applied: bool = False  # the choice was given to the native bucket
    native: Any = None  # the native bucket (its recorded call times)
    window: list[float] = field(default_factory=list)  # this choice's call times
    measured_s: float = float("nan")  # last window's median (slowest rank)
    error: float = float("nan")  # measured / predicted - 1 of the last window
    trials: list[str] = field(default_factory=list)  # methods still to try, in order
    trying: bool = False  # the current method is on trial
    measured: dict[str, float] = field(default_factory=dict)  # trials' medians

    def method(self) -> str:
        return "dense" if self.dense else self.algo

    def expected(self, method: str) -> float:
        return self.predicted[method] * self.scale.get(method, 1.0)


class AutoChooser:
    """The per-bucket choices of one ``SparseState(algo="auto")``."""

    def __init__(self, candidates: tuple[str, ...], interval: int,
                 link: tuple[float, float] | None,
                 density_range: tuple[float, float] | None = None,
                 local_size: int | None = None, trial_calls: int = TRIAL_CALLS) -> None:
        self.candidates = candidates
        self.interval = interval
        self.trial_calls = trial_calls
        self.density_range = density_range
        self.local_size = local_size
        self.link = None if link is None else Link(float(link[0]), float(link[1]))
        self.classes: LinkClasses | None = None  # measured with the link
        self.select_s: float | None = None
        self.buckets: dict[int, BucketChoice] = {}
        self.global_factor = 1.0  # Ok-Topk's, set by the SparseState

    def create(self, index: int, grad: torch.Tensor, density: float, group: Any,
               saved: dict[str, Any] | None = None) -> str:
        """The sparse algorithm of bucket ``index``'s native bucket (measuring
        the link and the selection cost on first use; collective)."""
        if saved is not None:
            self.buckets[index] = BucketChoice(
                algo=str(saved["algo"]), dense=bool(saved["dense"]),
                density=float(saved.get("density", density)),
                predicted=dict(saved["predicted"]), scale=dict(saved["scale"]),
                calls=int(saved["calls"]), trials=list(saved.get("trials", [])),
                trying=bool(saved.get("trying", False)),
                measured=dict(saved.get("measured", {})))
            return self.buckets[index].algo
        n = grad.numel()
        if self.link is None:
            self.link = measure_link(group, grad.device)
            self.classes = measure_classes(self.local_size, group, grad.device)
        if self.select_s is None:
            self.select_s = measure_select(grad, max(1, round(density * n)), group)
        p = dist.get_world_size(group)
        d = self._density_for(n, p, density)
        k = max(1, round(d * n))
        pred = {m: predict(m, p, n, k, self.link, self.select_s, self.classes,
                           self.global_factor)
                for m in ("dense", *self.candidates)}
        algo = min(self.candidates, key=lambda m: pred[m])
        ranked = sorted(("dense", *self.candidates), key=lambda m: pred[m])
        close = [m for m in ranked if pred[m] <= _TRIAL_FACTOR * pred[ranked[0]]]
        trials = close[1:_TRIAL_MAX] if self.trial_calls else []
        self.buckets[index] = BucketChoice(algo, ranked[0] == "dense", d, pred,
                                           trials=trials, trying=bool(trials))
        return algo

    def _density_for(self, n: int, p: int, density: float) -> float:
        """The bucket's density: ``density``, or with a range the densest
        point of the range whose fastest sparse method is predicted within
        10% of the fastest sparse choice at any point (more entries per step
        converge better; the link decides how many it affords)."""
        if self.density_range is None:
            return density
        lo, hi = self.density_range
        grid = [lo * (hi / lo) ** (i / (_DENSITY_POINTS - 1)) for i in range(_DENSITY_POINTS)]
        best = {d: min(predict(m, p, n, max(1, round(d * n)), self.link, self.select_s,
                               self.classes, self.global_factor)
                       for m in self.candidates) for d in grid}
        fastest = min(best.values())
        return max(d for d, t in best.items() if t <= _DENSITY_SLACK * fastest)

    def density_of(self, index: int) -> float:
        """The density chosen for bucket ``index``."""
        return self.buckets[index].density

    def before_call(self, index: int, native: Any, group: Any,
                    rebuild: Callable[[str], Any]) -> Any:
        """Apply the choice to the native bucket, move a trial on, and every
        ``interval`` calls decide again from the window's measured time
        (collective); return the native bucket for this call (``rebuild``
        makes one of another sparse algorithm, the residual carried over)."""
        c = self.buckets[index]
        if not c.applied:  # a new (or restored) native bucket
            native.record_times(True)
            native.set_dense(c.dense)
            c.applied, c.native = True, native
            return native
        self._drain(c)
        if c.trying:
            if len(c.window) >= self.trial_calls:  # trying: trial_calls >= 2
                return self._next_trial(c, native, group, rebuild)
        elif c.calls % self.interval == 0 and c.window:
            (c.measured_s,) = _agreed([statistics.median(c.window)], group)
            ran = c.method()
            c.error = c.measured_s / c.expected(ran) - 1.0
            c.scale[ran] = c.measured_s / c.predicted[ran]
            other = c.algo if c.dense else "dense"
            if c.expected(other) < _HYSTERESIS * c.expected(ran):
                c.dense = not c.dense
            c.window.clear()
            native.set_dense(c.dense)
        return native

    def _next_trial(self, c: BucketChoice, native: Any, group: Any,
                    rebuild: Callable[[str], Any]) -> Any:
        """The current trial's median (its first call left out; slowest
        rank) into ``measured``; then the next trial's method, or after the
        last the fastest measured one."""
        ran = c.method()
        (c.measured[ran],) = _agreed([statistics.median(c.window[1:])], group)
        c.scale[ran] = c.measured[ran] / c.predicted[ran]
        c.window.clear()
        if c.trials:
            method = c.trials.pop(0)
        else:
            c.trying = False
            method = min(c.measured, key=lambda m: c.measured[m])
            c.measured_s = c.measured[method]
            c.error = c.measured_s / c.predicted[method] - 1.0
        # The bucket's sparse algorithm: the trial's, or after a dense one
        # the fastest sparse measured (what later decisions weigh dense against).
        sparse = method
        if method == "dense":
            tried = [m for m in c.measured if m != "dense"]
            sparse = c.algo if c.trying or not tried else min(tried, key=lambda m: c.measured[m])
        if sparse != c.algo:
            native = rebuild(sparse)
            native.record_times(True)
            c.algo, c.native = sparse, native
        c.dense = method == "dense"
        native.set_dense(c.dense)
        return native

    def is_dense(self, index: int) -> bool:
        """Whether bucket ``index``'s call (after ``before_call``) is dense."""
        return self.buckets[index].dense

    def native_calls(self, index: int) -> int:
        """After a call of bucket ``index`` (from ``before_call`` on), the
        calls DDP's C++ hook may run before the next decision, which the
        Python hook makes."""
        c = self.buckets[index]
        return 0 if c.trying else -(c.calls + 1) % self.interval

    @staticmethod
    def _drain(c: BucketChoice) -> None:
        """The calls the native bucket recorded (the core's own time, this
        rank, in Python's calls and the C++ hook's alike) into the count and
        the window; warm-up calls of a sparse choice are dense and not
        timed."""
        if c.native is None:
            return
        count, times = c.native.take_times()
        c.calls += int(count)
        c.window.extend(float(t) for t, dense in times if bool(dense) == c.dense)

    def calls_of(self, index: int) -> int:
        """Completed calls of bucket ``index``."""
        c = self.buckets[index]
        self._drain(c)
        return c.calls

    def stats(self, index: int) -> dict[str, float]:
        """The decision and the prediction error of bucket ``index``."""
        c = self.buckets.get(index)
        if c is None:
            return {}
        out = {"auto_dense": float(c.dense), "auto_density": c.density,
               "auto_trying": float(c.trying),
               "auto_predicted_s": c.expected(c.method()),
               "auto_measured_s": c.measured_s, "auto_error": c.error}
        out.update({f"auto_model_{m}_s": v for m, v in c.predicted.items()})
        out.update({f"auto_trial_{m}_s": v for m, v in c.measured.items()})
        links = {"": self.link} if self.link is not None else {}
        if self.classes is not None:
            links.update({"intra_": self.classes.intra, "cross_": self.classes.cross})
        for name, link in links.items():
            out[f"auto_{name}alpha_s"] = link.alpha_s
            out[f"auto_{name}beta_bytes_s"] = link.beta_bytes_s
        return out

    def saved(self, index: int) -> dict[str, Any] | None:
        """What ``create`` restores."""
        c = self.buckets.get(index)
        if c is None:
            return None
        self._drain(c)
        return {"algo": c.algo, "dense": c.dense, "density": c.density,
                "predicted": dict(c.predicted),
                "scale": dict(c.scale), "calls": c.calls, "trials": list(c.trials),
                "trying": c.trying, "measured": dict(c.measured)}


def chooser_for(algo: str | None, candidates: Sequence[str] = CANDIDATES,
                interval: int = INTERVAL, link: tuple[float, float] | None = None,
                hierarchy: str = "flat", precondition: str | None = None,
                density_range: Sequence[float] | None = None,
                density_schedule: bool = False,
                local_size: int | None = None,
                trial_calls: int = TRIAL_CALLS) -> AutoChooser | None:
    """The chooser of ``SparseState(algo="auto")`` (None for another algo),
    its settings checked."""
    if density_range is not None and algo != "auto":
        raise ValueError("pg_sparse: auto_density needs algo='auto'")
    if algo != "auto":
        return None
    if density_range is not None:
        ok = len(density_range) == 2 and all(
            isinstance(v, (int, float)) and 0.0 < v <= 1.0 for v in density_range)
        if not ok or not density_range[0] < density_range[1]:
            raise ValueError(f"pg_sparse: auto_density must be (low, high) with "
                             f"0 < low < high <= 1, got {density_range!r}")
        if density_schedule:
            raise ValueError("pg_sparse: auto_density chooses each bucket's density; "
                             "leave density_warmup_steps at 0")
        density_range = (float(density_range[0]), float(density_range[1]))
    bad = [a for a in candidates if a not in CANDIDATES]
    if not candidates or bad:
        raise ValueError(f"pg_sparse: auto_algos must be some of {CANDIDATES}, "
                         f"got {tuple(candidates)!r}")
    if not isinstance(trial_calls, int) or trial_calls < 0 or trial_calls == 1:
        raise ValueError(f"pg_sparse: auto_trial_calls must be 0 (no trials) or an "
                         f"integer >= 2 (the first call is not timed), got {trial_calls!r}")
    if not isinstance(interval, int) or interval < 1:
        raise ValueError(f"pg_sparse: auto_interval must be an integer >= 1, got {interval!r}")
    if link is not None and (len(link) != 2 or not all(
            isinstance(v, (int, float)) and v > 0 for v in link)):
        raise ValueError(f"pg_sparse: auto_link must be (alpha seconds, beta bytes/s), "
                         f"both > 0, got {link!r}")
    if hierarchy != "flat" or precondition:
        raise ValueError("pg_sparse: algo='auto' runs flat, without precondition")
    return AutoChooser(tuple(candidates), interval, link,
                       None if density_range is None else tuple(density_range), local_size,
                       trial_calls)
