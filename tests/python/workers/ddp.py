"""DDP with the sparse hooks: equivalence to dense DDP at density 1.0,
fp16/bf16 buckets, error feedback, Ok-Topk training at density 0.01 with its
volume bounds, the state_dict / pickle round trip, and (ddp_optim.py) the
hooks' optimizer options.

Oracles: DDP over a gloo group (no hook) in the same job; gloo all_reduce of
the same gradients; a continued run for the resumed one.
"""

from __future__ import annotations

import copy
import io
import math
import os
import pickle
import sys
import warnings
from collections.abc import Callable
from datetime import timedelta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from workers import ddp_optim, ddp_optimizer  # noqa: E402
from workers.common import (  # noqa: E402
    ALGOS,
    HALF_TOL,
    Recorder,
    assert_close,
    expect_error,
    parse_args,
)
from workers.ddp_common import (  # noqa: E402
    EQ_BUCKET_MB,
    EQ_SIZES,
    EQ_STEPS,
    EQ_TOL,
    HALF,
    C,
    batch,
    eq_data,
    max_diff,
    mlp,
    params,
    sgd,
    train,
)

# --- DDP at density 1.0 equals dense DDP ---------------------------------

def dense_reference() -> list:
    """Plain DDP over gloo, no hook: the oracle of the hooks."""
    if "ref" not in C.cache:
        model = C.DDP(mlp(EQ_SIZES, 0), process_group=C.gloo, bucket_cap_mb=EQ_BUCKET_MB)
        train(model, sgd(model), range(EQ_STEPS), eq_data)
        C.cache["ref"] = params(model)
    return C.cache["ref"]


def ddp_sparse_no_hook() -> str:
    model = C.DDP(mlp(EQ_SIZES, 0), bucket_cap_mb=EQ_BUCKET_MB)  # default group: sparse
    train(model, sgd(model), range(EQ_STEPS), eq_data)
    d = max_diff(params(model), dense_reference())
    assert d <= EQ_TOL, f"max |param - gloo DDP param| = {d:.3g} > {EQ_TOL}"
    return f"max diff {d:.3g}"


def hook_matches_dense(algo: str) -> Callable[[], str]:
    def fn() -> str:
        ps = C.pg_sparse
        model = C.DDP(mlp(EQ_SIZES, 0), bucket_cap_mb=EQ_BUCKET_MB)
        state = ps.SparseState(density=1.0)
        model.register_comm_hook(state, getattr(ps.hooks, f"{algo}_hook"))
        seen = set()

        def after(step):
            for i, s in state.stats().items():
                if not s["dense"]:
                    seen.add(i)
                    assert s["k"] == s["n"], f"density 1.0 but k={s['k']} n={s['n']}"

        train(model, sgd(model), range(EQ_STEPS), eq_data, after)
        assert state.algo == algo, state.algo
        buckets = state.stats()
        assert len(buckets) >= 2, f"expected several DDP buckets, got {len(buckets)}"
        if algo != "dense":
            assert seen == set(buckets), f"buckets {sorted(buckets)} ran sparse: {sorted(seen)}"
        d = max_diff(params(model), dense_reference())
        assert d <= EQ_TOL, f"{algo}: max |param - dense DDP param| = {d:.3g} > {EQ_TOL}"
        return f"{len(buckets)} buckets, max diff {d:.3g}"
    return fn


def bucket_view_matches_copy() -> str:
    """DDP's gradient_as_bucket_view=True (grads are views of the buckets the
    hook reduces in place) gives bit for bit the parameters of the default
    copying DDP, with Ok-Topk sparse at density 0.05: the same algorithm on
    the same gradients, only DDP's buffer handling differs."""
    def run(view: bool) -> list:
        model = C.DDP(mlp(EQ_SIZES, 0), bucket_cap_mb=EQ_BUCKET_MB,
                      gradient_as_bucket_view=view)
        state = C.pg_sparse.SparseState(density=0.05, warmup_steps=1)
        model.register_comm_hook(state, C.pg_sparse.hooks.oktopk_hook)
        train(model, sgd(model), range(EQ_STEPS), eq_data)
        sparse = [i for i, s in state.stats().items() if not s["dense"]]
        assert sparse, f"no bucket ran sparse: {state.stats()}"
        return params(model)

    copied, viewed = run(False), run(True)
    d = max_diff(viewed, copied)
    assert d == 0.0, f"bucket view vs copy: max |param diff| = {d:.3g}"
    moved = max_diff(copied, params(mlp(EQ_SIZES, 0)))
    assert moved > 0.0, "the parameters did not move"
    return f"identical after {EQ_STEPS} steps (moved {moved:.3g})"


# --- fp16 / bf16 buckets -------------------------------------------------

def half_bucket(algo: str, dtype: str) -> Callable[[], str]:
    """native_bucket().allreduce on a half tensor at density 1.0: close to
    the fp32 average (gloo) of the same half inputs; residual stays fp32."""
    def fn() -> str:
        torch, dist = C.torch, C.dist
        dt = getattr(torch, dtype)
        state = C.pg_sparse.SparseState(algo=algo, density=1.0, warmup_steps=1)
        for call in range(3):  # warm-up (dense), then sparse calls
            g = torch.Generator().manual_seed(100 * C.rank + call)
            x = torch.randn(3000, generator=g).to(dt)
            t = x.clone()
            state.native_bucket(0, t).allreduce(t).wait()
            assert t.dtype == dt, t.dtype
            ref = x.float()
            dist.all_reduce(ref, group=C.gloo)
            ref /= C.world_size
            assert_close(t.float(), ref, f"{algo} {dtype} call {call} vs fp32 average",
                         **HALF_TOL[dtype])
        s = state.stats()[0]
        assert s["step"] == 2 and (algo == "dense" or not s["dense"]), s
        res = state.state_dict()["buckets"][0]["residual"]
        assert res.dtype == torch.float32, res.dtype
        return "3 calls"
    return fn


def narrow_wire(algo: str, bucket: str) -> Callable[[], str]:
    """Values on a 16-bit wire: a bf16 bucket (by default) or an fp32 bucket
    with wire_dtype=bfloat16 sends about 3/4 of the words of the same call
    on an fp32 wire (a pair is 6 bytes instead of 8), and nothing is lost:
    sum_ranks(residual) + P * output == sum_ranks(grad) up to the rounding of
    the output to the bucket's dtype."""
    def fn() -> str:
        torch, dist = C.torch, C.dist
        P = C.world_size
        dt = getattr(torch, bucket)
        wire = None if dt != torch.float32 else torch.bfloat16
        n = 6000
        g = torch.randn(n, generator=torch.Generator().manual_seed(7 * C.rank + 1)).to(dt)
        words = {}
        for name, wd in (("fp32", torch.float32), ("narrow", wire)):
            state = C.pg_sparse.SparseState(algo=algo, density=0.05, warmup_steps=0,
                                            wire_dtype=wd)
            t = g.clone()
            state.native_bucket(0, t).allreduce(t).wait()
            s = state.stats()[0]
            words[name] = s["words_sent"]
            if name == "fp32":
                continue
            assert not s["dense"] or algo == "dense", s
            res = state.state_dict()["buckets"][0]["residual"]
            lhs, rhs, mag = res + P * t.float(), g.float(), g.float().abs()
            for x in (lhs, rhs, mag):
                dist.all_reduce(x, group=C.gloo)
            lhs -= (P - 1) * P * t.float()  # the output is the same on every rank
            out_ulp = 0.0 if dt == torch.float32 else 2.0 ** -8
            # Dense and gTop-k sums form in the wire type, one rounding per
            # combine, each within the unit roundoff of the terms' magnitudes.
            sum_ulp = 2.0 ** -8 if algo in ("dense", "gtopk") else 0.0
            tol = P * out_ulp * t.float().abs() + (P * sum_ulp + 1e-5) * mag + 1e-6
            bad = int(((lhs - rhs).abs() > tol).sum())
            assert bad == 0, f"{algo} {bucket}: invariant off at {bad} entries"
        if P > 1:
            ratio = words["narrow"] / words["fp32"]
            limit = 0.55 if algo == "dense" else 0.8
            assert ratio < limit, f"{algo} {bucket}: words {words} ratio {ratio:.3f}"
        return f"words {words}"
    return fn


def half_ddp_model(dtype: str) -> Callable[[], str]:
    """A DDP model in half precision with the Ok-Topk hook at density 1.0:
    gradients close to the fp32 average of every rank's local gradients."""
    def fn() -> str:
        torch, dist = C.torch, C.dist
        dt = getattr(torch, dtype)
        model = mlp(EQ_SIZES, 3, dt)
        local = copy.deepcopy(model)
        ddp = C.DDP(model, bucket_cap_mb=EQ_BUCKET_MB)
        state = C.pg_sparse.SparseState(density=1.0)
        ddp.register_comm_hook(state, C.pg_sparse.hooks.oktopk_hook)
        for step in range(3):  # bucket rebuild after the first, then sparse
            x, y = batch(2, step, 16, EQ_SIZES, dt)
            ddp.zero_grad(set_to_none=True)
            C.F.mse_loss(ddp(x), y).backward()
            local.zero_grad(set_to_none=True)
            C.F.mse_loss(local(x), y).backward()
            for (name, p), q in zip(ddp.module.named_parameters(), local.parameters()):
                assert p.grad.dtype == dt, p.grad.dtype
                ref = q.grad.float()
                dist.all_reduce(ref, group=C.gloo)
                ref /= C.world_size
                assert_close(p.grad.float(), ref, f"{dtype} step {step} grad of {name}",
                             **HALF_TOL[dtype])
        sparse = [i for i, s in state.stats().items() if not s["dense"]]
        assert sparse, f"no bucket ran sparse: {state.stats()}"
        return f"{len(state.stats())} buckets"
    return fn


def error_feedback(algo: str) -> Callable[[], str]:
    """At density 0.05 nothing is lost: sum_ranks(residual_after) + P*output
    == sum_ranks(grad + residual_before), over several calls."""
    def fn() -> str:
        torch, dist = C.torch, C.dist
        P = C.world_size
        state = C.pg_sparse.SparseState(algo=algo, density=0.05, warmup_steps=1,
                                        tau=2, tau_prime=2)
        n = 4000
        worst = 0.0
        for call in range(6):
            b = state.native_bucket(0, torch.empty(n))
            before = b.residual()
            g = torch.randn(n, generator=torch.Generator().manual_seed(31 * C.rank + call))
            t = g.clone()
            b.allreduce(t).wait()
            res = b.residual()
            rhs = g + before
            dist.all_reduce(res, group=C.gloo)
            dist.all_reduce(rhs, group=C.gloo)
            lhs = res + P * t  # the output is the same on every rank
            err = (lhs - rhs).abs().max().item()
            worst = max(worst, err)
            assert err < 1e-3, f"call {call}: invariant off by {err}"
            s = state.stats()[0]
            if call > 0 and algo != "dense":
                assert not s["dense"] and 0 < s["global_selected"] < n, s
        return f"worst {worst:.2g}"
    return fn


# --- the C++ hook (hooks.register_comm_hook) --------------------------------

def native_hook_same_bits(algo: str) -> Callable[[], str]:
    """The hook registered through hooks.register_comm_hook against the same
    hook registered in Python, same model, data and settings, several buckets
    and DDP's bucket rebuild: the same parameters, statistics, residuals and
    iteration count, bit for bit, with most calls made in C++."""
    def fn() -> str:
        torch, ps = C.torch, C.pg_sparse
        hook = getattr(ps.hooks, f"{algo}_hook")
        runs = []
        for native in (False, True):
            model = C.DDP(mlp(EQ_SIZES, 0), bucket_cap_mb=EQ_BUCKET_MB)
            state = ps.SparseState(density=0.05, warmup_steps=2, tau=3, tau_prime=2)
            if native:
                ps.hooks.register_comm_hook(model, state, hook)
            else:
                model.register_comm_hook(state, hook)
            train(model, sgd(model), range(EQ_STEPS), eq_data)
            runs.append((params(model), state))
        (p_py, s_py), (p_nat, s_nat) = runs
        d = max_diff(p_nat, p_py)
        assert d == 0.0, f"{algo}: native hook's params differ from the Python hook's by {d:.3g}"
        calls = s_nat._native_table.calls
        buckets = len(s_nat.stats())
        assert buckets >= 2, f"expected several DDP buckets, got {buckets}"
        assert calls >= (EQ_STEPS - 4) * buckets, f"only {calls} calls ran in C++"
        assert s_nat.iteration == s_py.iteration == EQ_STEPS, \
            (s_nat.iteration, s_py.iteration)
        a, b = s_py.state_dict(), s_nat.state_dict()
        assert a["iteration"] == b["iteration"], (a["iteration"], b["iteration"])
        for i, bp in a["buckets"].items():
            bn = b["buckets"][i]
            assert torch.equal(bp["residual"], bn["residual"]), f"bucket {i} residual"
            assert bp["step"] == bn["step"], (i, bp["step"], bn["step"])
        for i, st in s_py.stats().items():
            nat = s_nat.stats()[i]
            for key in ("global_selected", "local_selected", "dense"):
                assert st[key] == nat[key], (i, key, st[key], nat[key])
        return f"{calls} of {EQ_STEPS * buckets} calls in C++, {buckets} buckets"
    return fn


def native_hook_follows_rebuild(wire: str, warmup: int) -> Callable[[], str]:
    """One DDP bucket whose state is touched by its first call (a 16-bit wire
    keeps its rounding error in the residual even in a dense warm-up call;
    with no warm-up the first call is sparse) when DDP repacks it after the
    first iteration: the state follows its parameters into the new layout
    (each parameter's residual the same, entry for entry), so no later call
    is permuted and the C++ hook serves them. Against the same run whose
    state keeps the first layout (every later call permuted in Python, the
    behaviour before): both train alike (Ok-Topk's regions then cover other
    entries, so volume caps may trim others: not bit for bit)."""
    def fn() -> str:
        torch, ps = C.torch, C.pg_sparse
        runs = []
        for follow in (False, True):
            model = C.DDP(mlp(EQ_SIZES, 0), bucket_cap_mb=1.0)  # one bucket
            state = ps.SparseState(
                density=0.05, warmup_steps=warmup, tau=3, tau_prime=2,
                wire_dtype=None if wire == "float32" else getattr(torch, wire))
            if not follow:
                state._follows_layout = lambda index: False
            permuted, moved = [], []
            bucket_for = state._bucket_for

            def spy(index, tensor, params_, bucket_for=bucket_for, state=state,
                    permuted=permuted, moved=moved):
                old = state._buckets.get(index)
                before = None if old is None else \
                    (state._layouts.get(index), old.residual().clone())
                native, segments = bucket_for(index, tensor, params_)
                permuted.append(segments is not None)
                after = state._layouts.get(index)
                if before is not None and before[0] is not None and after is not None \
                        and before[0] != after:
                    moved.append(_same_per_param(before[0], before[1], after,
                                                 native.residual()))
                return native, segments

            state._bucket_for = spy
            ps.hooks.register_comm_hook(model, state, ps.hooks.oktopk_hook)
            train(model, sgd(model), range(EQ_STEPS), eq_data)
            assert len(state.stats()) == 1, f"{len(state.stats())} buckets"
            runs.append((params(model), permuted, moved, state._native_table.calls))
        (p_old, perm_old, _, calls_old), (p_new, perm_new, moved, calls_new) = runs
        # The case arises: DDP's rebuilt bucket has another layout, and a
        # state that keeps the first one permutes every call after it.
        assert sum(perm_old) >= EQ_STEPS - 2 and calls_old == 0, (perm_old, calls_old)
        assert moved == [True], f"layout changes, residual kept per parameter: {moved}"
        assert not any(perm_new), f"calls permuted: {perm_new}"
        assert calls_new >= EQ_STEPS - 2, f"only {calls_new} calls ran in C++"
        d = max_diff(p_new, p_old)
        assert d < 0.05, f"params differ from the permuting run's by {d:.3g}"
        return f"{calls_new} of {EQ_STEPS} calls in C++ (0 before), max diff {d:.3g}"
    return fn


def _same_per_param(layout_a, res_a, layout_b, res_b) -> bool:
    """Whether every parameter's slice of residual ``res_a`` (packed as
    ``layout_a``: (parameter id, numel) in order) equals its slice of
    ``res_b`` (packed as ``layout_b``), and the residual is not all zero."""
    def slices(layout):
        out, at = {}, 0
        for pid, n in layout:
            out[pid] = (at, n)
            at += n
        return out
    a, b = slices(layout_a), slices(layout_b)
    if a.keys() != b.keys() or not bool(res_a.any()):
        return False
    return all(C.torch.equal(res_a[a[k][0]:a[k][0] + a[k][1]],
                             res_b[b[k][0]:b[k][0] + b[k][1]]) for k in a)


def native_hook_fallbacks() -> str:
    """What the C++ hook leaves to Python: a state restored mid-run (its
    buckets run in Python again, then in C++), a hook outside HOOKS (plain
    DDP registration), and a model wrapped again in a new DDP with the same
    state (the new one in C++, the iterations counted on)."""
    torch, ps = C.torch, C.pg_sparse
    model = C.DDP(mlp(EQ_SIZES, 0), bucket_cap_mb=EQ_BUCKET_MB)
    state = ps.SparseState(density=0.05, warmup_steps=1)
    ps.hooks.register_comm_hook(model, state, ps.hooks.oktopk_hook)
    opt = sgd(model)
    train(model, opt, range(6), eq_data)
    before = state._native_table.calls
    assert before > 0, "no call ran in C++"
    state.load_state_dict(state.state_dict())
    assert state.iteration == 6, state.iteration
    train(model, opt, range(6, 8), eq_data)
    assert state.iteration == 8, state.iteration
    after = state._native_table.calls
    buckets = len(state.stats())
    # The first iteration after the restore runs in Python, the next in C++.
    assert before < after < before + 2 * buckets, (before, after, buckets)
    # The same module in a new DDP, the same state: it goes on where it was.
    inner = model.module
    del model
    again = C.DDP(inner, bucket_cap_mb=EQ_BUCKET_MB)
    old_table = state._native_table
    ps.hooks.register_comm_hook(again, state, ps.hooks.oktopk_hook)
    assert state._native_table is not old_table and old_table.calls == after
    train(again, opt, range(8, 12), eq_data)
    assert state.iteration == 12, state.iteration
    assert state._native_table.calls > 0, "the new model ran no call in C++"
    third = C.DDP(mlp(EQ_SIZES, 2), bucket_cap_mb=EQ_BUCKET_MB)
    ps.hooks.register_comm_hook(third, ps.adtopk.ADTopkState(density=0.5),
                               ps.hooks.adtopk_hook)
    train(third, sgd(third), range(2), eq_data)
    assert torch.isfinite(params(third)[0]).all()
    return f"{after} calls in C++, then {state._native_table.calls} in the new DDP"


def native_hook_nonfinite() -> str:
    """A NaN gradient on rank 0 in a call made in C++: backward() raises the
    Python path's error on every rank."""
    ps = C.pg_sparse
    model = C.DDP(mlp(EQ_SIZES, 0), bucket_cap_mb=EQ_BUCKET_MB)
    state = ps.SparseState(density=0.5, warmup_steps=1)
    ps.hooks.register_comm_hook(model, state, ps.hooks.oktopk_hook)
    train(model, sgd(model), range(4), eq_data)
    calls = state._native_table.calls
    assert calls > 0, "no call ran in C++"
    x, _ = eq_data(4)
    if C.rank == 0:
        x[0, 0] = float("nan")
    msg = expect_error(lambda: model(x).sum().backward(), (RuntimeError,), "NaN or Inf")
    assert state._native_table.calls > calls, "the failing call did not run in C++"
    return msg


# --- Ok-Topk at density 0.01 trains --------------------------------------

TRAIN_SIZES = (32, 128, 64, 1)  # 12,545 parameters
TRAIN_STEPS, TRAIN_DENSITY = 60, 0.01


def oktopk_trains() -> str:
    torch, dist = C.torch, C.dist
    teacher = mlp((32, 16, 1), 1234)

    def data(step):
        g = torch.Generator().manual_seed(77 * step + 100_003 * C.rank)
        x = torch.randn(64, 32, generator=g)
        with torch.no_grad():
            return x, teacher(x)

    g = torch.Generator().manual_seed(4242)  # one eval set for all ranks
    xe = torch.randn(512, 32, generator=g)
    with torch.no_grad():
        ye = teacher(xe)

    model = C.DDP(mlp(TRAIN_SIZES, 5), bucket_cap_mb=0.02)
    nparams = sum(p.numel() for p in model.parameters())
    state = C.pg_sparse.SparseState(algo="oktopk", density=TRAIN_DENSITY)
    model.register_comm_hook(state, C.pg_sparse.hooks.oktopk_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    problems: list[str] = []
    densities: list[float] = []
    worst = [0.0]
    sparse_calls = [0]
    last_step: dict[tuple, float] = {}

    def after(step):
        for i, s in state.stats().items():
            key = (i, s["n"])  # DDP's bucket rebuild makes new buckets
            if last_step.get(key) == s["step"]:
                problems.append(f"step {step} bucket {i}: stats not updated")
            last_step[key] = s["step"]
            if s["dense"]:
                continue
            sparse_calls[0] += 1
            up = s["words_upper_bound"]
            if not (0 < s["words_sent"] <= up and 0 < s["words_recv"] <= up):
                problems.append(f"step {step} bucket {i}: sent {s['words_sent']} recv "
                                f"{s['words_recv']} bound {up}")
            worst[0] = max(worst[0], s["words_sent"] / up, s["words_recv"] / up)
            kg = math.floor(state.global_factor * s["k"] + 0.5)  # G's target
            if abs(up - 3 * (s["k"] + kg) * (C.world_size - 1) / C.world_size) > 1e-6:
                problems.append(f"bucket {i}: bound {up} is not 3(k+kg)(P-1)/P, k={s['k']}")
            d = s["density"]
            densities.append(d)
            if not 0 < d <= 2 * kg / s["n"] + 1e-12:
                problems.append(f"step {step} bucket {i}: density {d:.4g} (k/n "
                                f"{s['k'] / s['n']:.4g})")
            if not 0 < s["local_selected"] <= 2 * s["k"]:
                problems.append(f"step {step} bucket {i}: local_selected {s['local_selected']}")
            if s["time_s"] <= 0 or s["bytes_sent"] <= 0:
                problems.append(f"step {step} bucket {i}: time {s['time_s']} bytes "
                                f"{s['bytes_sent']}")

    def eval_loss() -> float:
        with torch.no_grad():
            v = torch.tensor([C.F.mse_loss(model.module(xe), ye).item()], dtype=torch.float64)
        dist.all_reduce(v, group=C.gloo)  # the same on every rank
        return v.item() / C.world_size

    before = eval_loss()
    losses = train(model, opt, range(TRAIN_STEPS), data, after)
    after_loss = eval_loss()
    buckets = len(state.stats())
    summary = state.summary()
    detail = (f"{nparams} params, {buckets} buckets, eval loss {before:.4f} -> "
              f"{after_loss:.4f}, train loss {losses[0]:.4f} -> {sum(losses[-5:]) / 5:.4f}, "
              f"{sparse_calls[0]} sparse calls, density {min(densities):.4f}.."
              f"{max(densities):.4f}, worst volume {worst[0]:.2f} of the bound, "
              f"last bytes sent {summary['bytes_sent']:.0f}")
    assert nparams > 5000
    assert not problems, "; ".join(problems[:10]) + " | " + detail
    assert buckets >= 2 and sparse_calls[0] >= (TRAIN_STEPS - 2) * buckets, detail
    assert after_loss < 0.5 * before, "loss did not fall: " + detail
    assert sum(losses[-5:]) / 5 < 0.6 * sum(losses[:5]) / 5, "train loss did not fall: " + detail
    return detail


# --- state_dict round trip -----------------------------------------------

RS_SIZES = (16, 64, 64, 4)  # 5,508 parameters
RS_N, RS_M = 8, 8
# Several DDP buckets after the rebuild, one (the 1 MB first bucket) before.
RS_MULTI_BUCKET_MB = 0.004


def rs_data(s):
    return batch(3, s, 32, RS_SIZES)


def rs_make(seed: int, state, bucket_mb):
    kw = {} if bucket_mb is None else {"bucket_cap_mb": bucket_mb}
    model = C.DDP(mlp(RS_SIZES, seed), **kw)
    model.register_comm_hook(state, C.pg_sparse.hooks.oktopk_hook)
    return model, sgd(model)


def resume_reference(bucket_mb=None):
    """Train N steps, checkpoint (torch.save of model, optimizer and
    SparseState.state_dict(), plus pickle.dumps of the SparseState), train M
    more: the parameters the resumed runs must reproduce."""
    key = ("resume", bucket_mb)
    if key in C.cache:
        return C.cache[key]
    torch = C.torch
    state = C.pg_sparse.SparseState(algo="oktopk", density=0.05, tau=4, tau_prime=3)
    model, opt = rs_make(0, state, bucket_mb)
    train(model, opt, range(RS_N), rs_data)
    sd = state.state_dict()
    residual = sum(b["residual"].abs().sum().item() for b in sd["buckets"].values())
    assert residual > 0, "no residual at the checkpoint: the round trip would prove nothing"
    buf = io.BytesIO()
    torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "sparse": sd}, buf)
    pickled = pickle.dumps(state)
    at_ckpt = params(model)
    losses = train(model, opt, range(RS_N, RS_N + RS_M), rs_data)
    final = params(model)
    assert max_diff(final, at_ckpt) > 1e-4, "parameters did not move after the checkpoint"
    C.cache[key] = (buf.getvalue(), pickled, final, losses, sd)
    return C.cache[key]


def resumed_run(via: str, bucket_mb=None):
    """A fresh model, DDP, optimizer and SparseState from the checkpoint,
    trained the same M steps. Returns (max diff to the continued run,
    losses of both, the state, whether each hook call was permuted)."""
    torch, ps = C.torch, C.pg_sparse
    blob, pickled, final, losses, sd = resume_reference(bucket_mb)
    ckpt = torch.load(io.BytesIO(blob), weights_only=False)
    if via == "load_state_dict":
        state = ps.SparseState()
        state.load_state_dict(ckpt["sparse"])
    else:
        state = pickle.loads(pickled)
        assert isinstance(state, ps.SparseState)
    assert (state.algo, state.density, state.tau, state.tau_prime) == \
        ("oktopk", 0.05, 4, 3), vars(state)
    model, opt = rs_make(99, state, bucket_mb)  # other init: the checkpoint must win
    model.module.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["opt"])
    permuted = []  # DDP's first iteration packs a bucket in another order
    bucket_for = state._bucket_for

    def spy(index, tensor, params):
        native, segments = bucket_for(index, tensor, params)
        permuted.append(segments is not None)
        return native, segments

    state._bucket_for = spy
    losses2 = train(model, opt, range(RS_N, RS_N + RS_M), rs_data)
    del state._bucket_for
    return max_diff(params(model), final), losses2, losses, state, permuted


def resume(via: str) -> Callable[[], str]:
    def fn() -> str:
        d, losses2, losses, state, permuted = resumed_run(via)
        assert permuted[0] and not permuted[-1], f"layout permuted at calls: {permuted}"
        assert d <= 1e-6, (f"resumed via {via}: max |param - continued param| = {d:.3g}; "
                           f"losses {losses2} vs {losses}")
        return f"max diff {d:.3g}, {len(state.stats())} bucket(s)"
    return fn


def resume_multi_bucket() -> str:
    """Several buckets: the fresh DDP's first iteration packs all parameters
    in one bucket, which no checkpointed bucket matches. The saved state must
    then be applied once DDP rebuilds (never to the wrong parameters), and
    the run stays close to the continued one."""
    d, losses2, losses, state, _ = resumed_run("load_state_dict", RS_MULTI_BUCKET_MB)
    *_, sd = resume_reference(RS_MULTI_BUCKET_MB)
    assert len(sd["buckets"]) >= 2, sd["buckets"].keys()
    assert not state._saved, f"checkpointed buckets never restored: {list(state._saved)}"
    steps = {i: s["step"] for i, s in state.stats().items()}
    assert all(v >= RS_N for v in steps.values()), f"restored steps {steps}"
    assert d < 0.05, f"max |param - continued param| = {d:.3g}"
    return f"max diff {d:.3g} ({len(sd['buckets'])} buckets, steps {steps})"


def resume_multi_bucket_exact() -> str:
    d, *_ = resumed_run("pickle", RS_MULTI_BUCKET_MB)
    assert d <= 1e-6, f"max |param - continued param| = {d:.3g}"
    return f"max diff {d:.3g}"


def state_dict_contents() -> str:
    """What state_dict() holds, and load_state_dict() into a live state."""
    torch, ps = C.torch, C.pg_sparse
    *_, sd = resume_reference()
    assert len(sd["buckets"]) == 1, sd["buckets"].keys()
    assert sd["config"]["algo"] == "oktopk" and sd["config"]["density"] == 0.05, sd["config"]
    for i, b in sd["buckets"].items():
        assert b["residual"].dtype == torch.float32 and b["residual"].numel() == b["numel"]
        assert b["step"] == RS_N, f"bucket {i} step {b['step']}"
        assert len(b["bounds"]) in (0, C.world_size + 1), b["bounds"]
    # Loading into a state whose buckets exist restores them in place.
    st = ps.SparseState(algo="oktopk", density=0.05, tau=4, tau_prime=3)
    for i, b in sd["buckets"].items():
        st.native_bucket(i, torch.empty(b["numel"]))
    st.load_state_dict(sd)
    again = st.state_dict()
    for i, b in sd["buckets"].items():
        assert torch.equal(again["buckets"][i]["residual"], b["residual"])
        assert again["buckets"][i]["step"] == b["step"]
        assert list(again["buckets"][i]["bounds"]) == list(b["bounds"])
    copy2 = pickle.loads(pickle.dumps(st))
    assert torch.equal(copy2.state_dict()["buckets"][0]["residual"], sd["buckets"][0]["residual"])
    return f"{len(sd['buckets'])} bucket(s)"


def plan(world_size: int) -> list[tuple[str, Callable[[], str]]]:
    checks: list[tuple[str, Callable[[], str]]] = [
        ("ddp_sparse_backend_no_hook", ddp_sparse_no_hook)]
    checks += [(f"hook_density1_matches_dense_{a}", hook_matches_dense(a)) for a in ALGOS]
    checks += [("bucket_view_matches_copy", bucket_view_matches_copy)]
    checks += [(f"half_bucket_{d}_{a}", half_bucket(a, d)) for d in HALF for a in ALGOS]
    checks += [(f"half_ddp_model_{d}", half_ddp_model(d)) for d in HALF]
    checks += [(f"narrow_wire_{b}_{a}", narrow_wire(a, b))
               for b in ("bfloat16", "float32") for a in ALGOS]
    checks += [(f"error_feedback_{a}", error_feedback(a)) for a in ALGOS]
    checks += [(f"native_hook_same_bits_{a}", native_hook_same_bits(a)) for a in ALGOS]
    checks += [(f"native_hook_follows_rebuild_{w}_warmup{n}", native_hook_follows_rebuild(w, n))
               for w, n in (("bfloat16", 1), ("float32", 0))]
    checks += [("native_hook_fallbacks", native_hook_fallbacks),
               ("native_hook_nonfinite", native_hook_nonfinite)]
    checks += ddp_optim.plan()
    checks += ddp_optimizer.plan()
    checks += [("oktopk_density001_trains", oktopk_trains),
               ("state_dict_resume_load_state_dict", resume("load_state_dict")),
               ("state_dict_resume_pickle", resume("pickle")),
               ("state_dict_resume_multi_bucket", resume_multi_bucket),
               ("state_dict_resume_multi_bucket_exact", resume_multi_bucket_exact),
               ("state_dict_contents", state_dict_contents)]
    return checks


def main() -> None:
    args = parse_args()
    warnings.filterwarnings("ignore", category=FutureWarning)
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    import pg_sparse

    torch.set_num_threads(1)
    dist.init_process_group("sparse", timeout=timedelta(seconds=60))
    C.torch, C.dist, C.nn, C.F, C.DDP, C.pg_sparse = torch, dist, nn, F, DDP, pg_sparse
    C.rank, C.world_size = dist.get_rank(), dist.get_world_size()
    C.gloo = dist.new_group(backend="gloo")
    rec = Recorder(args.out, C.rank, C.world_size)
    rec.info["transport"] = pg_sparse._C._transport_of(
        dist.group.WORLD._get_backend(torch.device("cpu")))
    for name, fn in plan(C.world_size):
        rec.run(name, fn)
    dist.destroy_process_group()
    rec.finish()


if __name__ == "__main__":
    main()
