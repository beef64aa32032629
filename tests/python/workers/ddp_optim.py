"""Optimizer options of the sparse hooks, each against an independent
oracle: DGC's momentum correction (dense calls equal momentum SGD, factor
masking, conservation), the density warm-up, and Adam in the hook (dense
calls equal AdamW, sparse calls against the test's own arithmetic on the
output that the conservation invariant gives). Run by ddp.py's job."""

from __future__ import annotations

from collections.abc import Callable

from workers.common import ALGOS, expect_error
from workers.ddp_common import (
    EQ_BUCKET_MB,
    EQ_SIZES,
    EQ_STEPS,
    EQ_TOL,
    C,
    _Bucket,
    eq_data,
    max_diff,
    mlp,
    params,
    train,
)

# --- momentum correction (DGC) in the hook -------------------------------

def momentum_dense_matches_sgd(nesterov: bool) -> Callable[[], str]:
    """Dense (warm-up) calls with momentum correction and plain SGD equal
    DDP without hook and SGD with momentum (Nesterov): averaging each rank's
    velocity is momentum on the averaged gradient."""
    def fn() -> str:
        torch = C.torch
        ref = C.DDP(mlp(EQ_SIZES, 0), process_group=C.gloo, bucket_cap_mb=EQ_BUCKET_MB)
        opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9, nesterov=nesterov)
        train(ref, opt, range(EQ_STEPS), eq_data)
        model = C.DDP(mlp(EQ_SIZES, 0), bucket_cap_mb=EQ_BUCKET_MB)
        state = C.pg_sparse.SparseState(algo="oktopk", density=0.01, warmup_steps=10_000,
                                        momentum=0.9, nesterov=nesterov)
        model.register_comm_hook(state, C.pg_sparse.hooks.oktopk_hook)
        train(model, torch.optim.SGD(model.parameters(), lr=0.05), range(EQ_STEPS), eq_data)
        assert all(s["dense"] for s in state.stats().values()), state.stats()
        d = max_diff(params(model), params(ref))
        assert d <= EQ_TOL, f"max |param - SGD momentum param| = {d:.3g} > {EQ_TOL}"
        return f"max diff {d:.3g}"
    return fn




def momentum_masking(algo: str) -> Callable[[], str]:
    """Sparse calls with momentum correction: each rank sends u = m u + g;
    nothing is lost (sum_ranks(residual_after) + P*output == sum_ranks(u +
    residual_before)); afterwards u is zero exactly where the residual is
    (factor masking) and m u + g elsewhere."""
    def fn() -> str:
        torch, dist = C.torch, C.dist
        P, n, m = C.world_size, 4000, 0.9
        state = C.pg_sparse.SparseState(algo=algo, density=0.05, warmup_steps=1,
                                        tau=2, tau_prime=2, momentum=m)
        worst, masked = 0.0, 0
        for call in range(6):
            b = state.native_bucket(0, torch.empty(n))
            before = b.residual()
            u0 = state._velocity.tensors.get(0, torch.zeros(n)).clone()
            g = torch.randn(n, generator=torch.Generator().manual_seed(37 * C.rank + call))
            out = C.pg_sparse.hooks._run(state, _Bucket(g.clone()), algo).wait()
            u_sent = m * u0 + g
            res = b.residual()
            lhs, rhs = res.clone(), u_sent + before
            dist.all_reduce(lhs, group=C.gloo)
            dist.all_reduce(rhs, group=C.gloo)
            err = (lhs + P * out - rhs).abs().max().item()
            worst = max(worst, err)
            assert err < 1e-3, f"call {call}: invariant off by {err}"
            u = state._velocity.tensors[0]
            if call == 0:  # warm-up: dense, no masking
                assert torch.equal(u, u_sent), "dense call changed the velocity"
                continue
            assert not state.stats()[0]["dense"]
            sent = res == 0
            masked += int(sent.sum())
            assert torch.equal(u[sent], torch.zeros_like(u[sent])), "u not masked where sent"
            assert torch.allclose(u[~sent], u_sent[~sent]), "u changed where not sent"
        assert masked > 0
        return f"worst {worst:.2g}, {masked} entries masked"
    return fn


def density_warmup() -> str:
    """SparseState's density warm-up: each sparse call selects the k of the
    exponential schedule from density_warmup_start down to density, nothing
    is lost on the way, and the native setter rejects a bad density."""
    torch, dist = C.torch, C.dist
    P, n = C.world_size, 4000
    state = C.pg_sparse.SparseState(algo="oktopk", density=0.01, warmup_steps=1,
                                    density_warmup_steps=4, density_warmup_start=0.2)
    ks = []
    for call in range(7):
        b = state.native_bucket(0, torch.empty(n))
        before = b.residual()
        g = torch.randn(n, generator=torch.Generator().manual_seed(41 * C.rank + call))
        out = C.pg_sparse.hooks._run(state, _Bucket(g.clone()), "oktopk").wait()
        s = state.stats()[0]
        want = 0.2 * (0.01 / 0.2) ** ((call - 1) / 4) if call < 5 else 0.01
        if call >= 1:  # call 0 is the dense warm-up
            assert not s["dense"] and s["k"] == max(1, round(want * n)), (call, s, want * n)
        res, rhs = b.residual(), g + before
        dist.all_reduce(res, group=C.gloo)
        dist.all_reduce(rhs, group=C.gloo)
        err = (res + P * out - rhs).abs().max().item()
        assert err < 1e-3, f"call {call}: invariant off by {err}"
        ks.append(int(s["k"]))
    for bad in (0.0, 1.5, float("nan")):
        expect_error(lambda bad=bad: b.set_density(bad), (ValueError,), "density")
    assert C.pg_sparse.SparseState(density=0.01, density_warmup_steps=4).density_at(0) == 0.25
    return f"k per call {ks}"


def momentum_state_dict() -> str:
    """The velocity travels with state_dict and comes back on load."""
    torch = C.torch
    state = C.pg_sparse.SparseState(algo="topka", density=0.05, momentum=0.5)
    g = torch.randn(500, generator=torch.Generator().manual_seed(C.rank))
    for _ in range(3):
        C.pg_sparse.hooks._run(state, _Bucket(g.clone()), "topka").wait()
    sd = state.state_dict()
    assert sd["config"]["momentum"] == 0.5 and sd["buckets"][0]["velocity"] is not None
    fresh = C.pg_sparse.SparseState()
    fresh.load_state_dict(sd)
    C.pg_sparse.hooks._run(fresh, _Bucket(g.clone()), "topka").wait()
    C.pg_sparse.hooks._run(state, _Bucket(g.clone()), "topka").wait()
    assert fresh.momentum == 0.5
    assert torch.equal(fresh._velocity.tensors[0], state._velocity.tensors[0]), \
        "velocity not restored"
    assert torch.equal(fresh.native_bucket(0, g).residual(),
                       state.native_bucket(0, g).residual())
    return "velocity and residual continue identically"


# --- Adam in the hook ---------------------------------------------------

ADAM_LR, ADAM_WD, ADAM_BETAS, ADAM_EPS = 0.01, 0.01, (0.9, 0.999), 1e-8


def adam_dense_matches_adamw(clip: float) -> Callable[[], str]:
    """Dense calls with precondition='adam' and plain SGD (weight decay)
    equal DDP without hook and torch's AdamW with the same settings; with
    max_grad_norm, AdamW after clip_grad_norm_ (one bucket: the model is
    smaller than DDP's bucket size)."""
    def fn() -> str:
        torch = C.torch
        cap = 25 if clip else EQ_BUCKET_MB
        ref = C.DDP(mlp(EQ_SIZES, 0), process_group=C.gloo, bucket_cap_mb=cap)
        model = C.DDP(mlp(EQ_SIZES, 0), bucket_cap_mb=cap)
        opt_ref = torch.optim.AdamW(ref.parameters(), lr=ADAM_LR, betas=ADAM_BETAS,
                                    eps=ADAM_EPS, weight_decay=ADAM_WD)
        state = C.pg_sparse.SparseState(algo="oktopk", density=0.01, warmup_steps=10_000,
                                        precondition="adam", betas=ADAM_BETAS, eps=ADAM_EPS,
                                        max_grad_norm=clip)
        model.register_comm_hook(state, C.pg_sparse.hooks.oktopk_hook)
        opt = torch.optim.SGD(model.parameters(), lr=ADAM_LR, weight_decay=ADAM_WD)
        clipped = 0
        for s in range(EQ_STEPS):
            x, y = eq_data(s)
            for net, o in ((ref, opt_ref), (model, opt)):
                o.zero_grad(set_to_none=True)
                C.F.mse_loss(net(x), y).backward()
                if clip and net is ref:
                    clipped += int(torch.nn.utils.clip_grad_norm_(net.parameters(), clip) > clip)
                o.step()
        assert all(s["dense"] for s in state.stats().values()), state.stats()
        assert not clip or clipped > 0, "the reference never clipped: the check is idle"
        d = max_diff(params(model), params(ref))
        assert d <= EQ_TOL, f"max |param - AdamW param| = {d:.3g} > {EQ_TOL}"
        return f"max diff {d:.3g} after {EQ_STEPS} steps, {clipped} clipped"
    return fn


def _plain_residual(state: object) -> object:
    """Bucket 0's residual in gradient units, from its checkpoint."""
    saved = state.state_dict()["buckets"][0]  # type: ignore[attr-defined]
    scale = saved["residual_scale"]
    return saved["residual"] if scale is None else saved["residual"] * scale


def adam_sparse_calls(algo: str, clip: float = 0.0,
                      select: str = "gradient") -> Callable[[], str]:
    """Sparse calls with precondition='adam', against the test's own
    arithmetic: two dense calls are Adam steps on the averaged gradient;
    then the reduced gradient ``out`` is what the residuals lost
    (sum_ranks(g + residual_before - residual_after) / P, the conservation
    oracle, g clipped to ``clip`` on each rank), an entry the call does not
    carry has out == 0 and no update, and an entry carried after waiting
    ``a`` calls gets a * Adam's step with moments decayed by beta ** a and
    fed out / a and out ** 2 / a. With ``select="normalized"`` the
    residuals are read in gradient units from ``state_dict`` (the bucket
    holds them divided by Adam's denominator, saved as ``residual_scale``)
    and the same oracle holds."""
    def fn() -> str:
        torch, dist = C.torch, C.dist
        P, n, (b1, b2), eps = C.world_size, 4000, ADAM_BETAS, ADAM_EPS
        state = C.pg_sparse.SparseState(algo=algo, density=0.05, warmup_steps=2, tau=2,
                                        tau_prime=2, precondition="adam", max_grad_norm=clip,
                                        adam_select=select)
        m, v, age = torch.zeros(n), torch.zeros(n), torch.zeros(n)
        carried, late = 0, 0
        for call in range(7):
            t = call + 1
            b = state.native_bucket(0, torch.empty(n))
            before = _plain_residual(state) if call else b.residual()
            g = torch.randn(n, generator=torch.Generator().manual_seed(43 * C.rank + call))
            upd = C.pg_sparse.hooks._run(state, _Bucket(g.clone()), algo).wait()
            if call < 2:  # dense: Adam on the (clipped) averaged gradient
                out = g.clone()
                dist.all_reduce(out, group=C.gloo)
                out /= P
                if clip and out.norm() > clip:
                    out *= clip / (out.norm() + 1e-6)
                m, v = b1 * m + (1 - b1) * out, b2 * v + (1 - b2) * out * out
                want = m / (1 - b1 ** t) / ((v / (1 - b2 ** t)).sqrt() + eps)
                assert torch.allclose(upd, want, rtol=1e-4, atol=1e-5), "dense Adam step"
            else:
                assert not state.stats()[0]["dense"]
                if clip and g.norm() > clip:
                    g *= clip / (g.norm() + 1e-6)
                out = g + before - _plain_residual(state)
                dist.all_reduce(out, group=C.gloo)
                out /= P
                hit = upd != 0
                assert (out[~hit].abs() < 1e-5).all(), "mass applied without an update"
                age += 1
                a = age[hit]
                mean, d1, d2 = out[hit] / a, b1 ** a, b2 ** a
                m[hit] = d1 * m[hit] + (1 - d1) * mean
                v[hit] = d2 * v[hit] + (1 - d2) * mean * out[hit]
                want = a * m[hit] / (1 - b1 ** t) / ((v[hit] / (1 - b2 ** t)).sqrt() + eps)
                assert torch.allclose(upd[hit], want, rtol=1e-3, atol=1e-4), "sparse Adam step"
                carried += int(hit.sum())
                late += int((a > 1).sum())
                age[hit] = 0
            for mine, ours, what in ((state._velocity.tensors[0], m, "m"),
                                     (state._second.tensors[0], v, "v"),
                                     (state._age.tensors[0], age, "age")):
                assert torch.allclose(mine, ours, rtol=1e-3, atol=1e-6), f"{what} differs"
            # Go on from the hook's moments: the sums' rounding differs from gloo's.
            m, v = state._velocity.tensors[0].clone(), state._second.tensors[0].clone()
        assert 0 < carried < 5 * n and late > 0, (carried, late)
        return f"{carried} entries carried, {late} of them after waiting"
    return fn


def adam_normalized_selection() -> str:
    """adam_select='normalized' picks entries by their size relative to
    Adam's denominator, not by raw size: with half the entries 100x larger
    on every call (so their second moment is 10^4x larger), selection by
    gradient carries almost only the large half, the normalized one picks
    from both halves; either way nothing is lost (the residuals in gradient
    units plus what was applied equal the gradients summed)."""
    torch, dist = C.torch, C.dist
    n, calls = 2000, 8
    scale = torch.ones(n)
    scale[: n // 2] = 100.0
    small = {}
    for select in ("gradient", "normalized"):
        state = C.pg_sparse.SparseState(algo="topka", density=0.05, warmup_steps=2,
                                        precondition="adam", adam_select=select)
        total, picked = torch.zeros(n), torch.zeros(n)
        for call in range(calls):
            g = scale * torch.randn(n, generator=torch.Generator().manual_seed(7 * C.rank + call))
            C.pg_sparse.hooks._run(state, _Bucket(g.clone()), "topka").wait()
            total += g
            if call >= 2:
                hit = state._age.tensors[0] == 0  # entries applied by this call
                picked += hit.float()
        left = _plain_residual(state)
        sums = torch.stack([total, left])
        dist.all_reduce(sums, group=C.gloo)
        # What was applied: the gradient sum minus what every residual holds.
        applied = sums[0] - sums[1]
        dense_part = torch.zeros(n)  # the two dense calls carried everything
        for call in range(2):
            g = scale * torch.randn(n, generator=torch.Generator().manual_seed(7 * C.rank + call))
            dense_part += g
        dist.all_reduce(dense_part, group=C.gloo)
        cold = (applied - dense_part)[picked == 0]
        assert cold.abs().max() < 1e-3 * scale.max(), \
            f"{select}: mass applied at entries no call picked"
        small[select] = float(picked[n // 2:].sum() / picked.sum())
    assert small["gradient"] < 0.05 and small["normalized"] > 0.25, small
    return (f"share of picks among the small half: gradient {small['gradient']:.3f}, "
            f"normalized {small['normalized']:.3f}")


def adam_state_dict() -> str:
    """Adam's moments, ages and step count travel with state_dict, and bad
    settings are refused with a message naming them."""
    torch = C.torch
    state = C.pg_sparse.SparseState(algo="topka", density=0.05, warmup_steps=2,
                                    precondition="adam", betas=(0.8, 0.99), max_grad_norm=3.0)
    g = torch.randn(500, generator=torch.Generator().manual_seed(C.rank))
    for _ in range(4):
        C.pg_sparse.hooks._run(state, _Bucket(g.clone()), "topka").wait()
    sd = state.state_dict()
    saved = sd["buckets"][0]
    assert sd["config"]["precondition"] == "adam" and sd["config"]["max_grad_norm"] == 3.0
    assert saved["second_moment"] is not None and saved["adam_t"] == 4, saved
    assert bool((saved["adam_age"] > 0).any()), "no entry waiting after two sparse calls"
    fresh = C.pg_sparse.SparseState()
    fresh.load_state_dict(sd)
    a = C.pg_sparse.hooks._run(fresh, _Bucket(g.clone()), "topka").wait()
    b = C.pg_sparse.hooks._run(state, _Bucket(g.clone()), "topka").wait()
    assert fresh.betas == (0.8, 0.99) and torch.equal(a, b), "update differs after load"
    for name in ("_velocity", "_second", "_age", "_scale"):
        assert torch.equal(getattr(fresh, name).tensors[0], getattr(state, name).tensors[0]), name
    SS = C.pg_sparse.SparseState
    for kwargs, needle in (({"precondition": "lamb"}, "precondition"),
                           ({"precondition": "adam", "momentum": 0.9}, "momentum"),
                           ({"max_grad_norm": 1.0}, "max_grad_norm"),
                           ({"precondition": "adam", "max_grad_norm": -1.0}, "max_grad_norm"),
                           ({"precondition": "adam", "betas": (0.9, 1.0)}, "betas"),
                           ({"precondition": "adam", "eps": 0.0}, "eps")):
        expect_error(lambda kw=kwargs: SS(**kw), (ValueError,), needle)
    return "moments, ages restored, update identical; 6 bad settings refused"


def plan() -> list[tuple[str, Callable[[], str]]]:
    """The checks of this module, in the order the job runs them."""
    checks: list[tuple[str, Callable[[], str]]] = [
        ("momentum_dense_matches_sgd", momentum_dense_matches_sgd(False)),
        ("momentum_dense_matches_sgd_nesterov", momentum_dense_matches_sgd(True))]
    checks += [(f"momentum_masking_{a}", momentum_masking(a)) for a in ALGOS if a != "dense"]
    checks += [("momentum_state_dict", momentum_state_dict),
               ("density_warmup", density_warmup)]
    checks += [("adam_dense_matches_adamw", adam_dense_matches_adamw(0.0)),
               ("adam_dense_matches_adamw_clipped", adam_dense_matches_adamw(0.1)),
               ("adam_state_dict", adam_state_dict),
               ("adam_sparse_calls_oktopk_clipped", adam_sparse_calls("oktopk", 5.0))]
    checks += [(f"adam_sparse_calls_{a}", adam_sparse_calls(a)) for a in ALGOS if a != "dense"]
    checks += [(f"adam_sparse_calls_{a}_normalized", adam_sparse_calls(a, 5.0, "normalized"))
               for a in ALGOS if a != "dense"]
    checks += [("adam_normalized_selection", adam_normalized_selection)]
    return checks
