"""The user's optimizer given to ``register_comm_hook(..., optimizer=)``,
each check against an independent oracle: dense (warm-up) steps equal plain
DDP with the same torch optimizer; sparse steps hand DDP the reduced
gradient the conservation invariant gives (sum_ranks(g + residual_before -
residual_after) / P) and step the test's own Adam arithmetic on it; the
user's clip_grad_norm_ moves before the residual; the warning without
``optimizer=``; a checkpoint of optimizer and hook state resumes bit for
bit; bad settings raise. Run by ddp.py's job."""

from __future__ import annotations

import io
import math
import warnings
from collections.abc import Callable

from workers.common import expect_error
from workers.ddp_common import (
    EQ_BUCKET_MB,
    EQ_SIZES,
    EQ_STEPS,
    EQ_TOL,
    C,
    eq_data,
    max_diff,
    mlp,
    params,
)
from workers.ddp_optim import _plain_residual

LR, WD, BETAS, EPS = 0.01, 0.1, (0.9, 0.999), 1e-8
ONE_BUCKET_MB = 25  # the MLP in one bucket: the residual is bucket 0's


def _make(kind: str, ps):
    torch = C.torch
    if kind == "adamw":
        return torch.optim.AdamW(ps, lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    if kind == "adam":
        return torch.optim.Adam(ps, lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    return torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=WD)


def _step(net, opt, s: int, clip: float = 0.0) -> float:
    torch = C.torch
    x, y = eq_data(s)
    opt.zero_grad(set_to_none=True)
    C.F.mse_loss(net(x), y).backward()
    norm = torch.nn.utils.clip_grad_norm_(net.parameters(), clip) if clip else 0.0
    opt.step()
    return float(norm)


def dense_matches(kind: str) -> Callable[[], str]:
    """Warm-up (dense) calls with ``optimizer=`` equal DDP without a hook and
    the same optimizer, clip_grad_norm_ after backward in both, over several
    buckets; for Adam types the optimizer's own state stays empty (the
    library stepped those parameters)."""
    def fn() -> str:
        ref = C.DDP(mlp(EQ_SIZES, 0), process_group=C.gloo, bucket_cap_mb=EQ_BUCKET_MB)
        model = C.DDP(mlp(EQ_SIZES, 0), bucket_cap_mb=EQ_BUCKET_MB)
        opt_ref, opt = _make(kind, ref.parameters()), _make(kind, model.parameters())
        state = C.pg_sparse.SparseState(density=0.01, warmup_steps=10_000)
        C.pg_sparse.hooks.register_comm_hook(model, state, C.pg_sparse.hooks.oktopk_hook,
                                             optimizer=opt)
        clipped = 0
        for s in range(EQ_STEPS):
            clipped += int(_step(ref, opt_ref, s, 0.02) > 0.02)
            _step(model, opt, s, 0.02)
        assert clipped > 0, "the reference never clipped: the check is idle"
        assert all(st["dense"] for st in state.stats().values()), state.stats()
        assert len(state.stats()) > 1, "one bucket: the check wants several"
        if kind != "sgd":
            assert not opt.state, "the optimizer stepped parameters the library steps"
        d = max_diff(params(model), params(ref))
        assert d <= EQ_TOL, f"max |param - {kind} param| = {d:.3g} > {EQ_TOL}"
        return f"max diff {d:.3g} after {EQ_STEPS} steps, {clipped} clipped"
    return fn


def _flat(tensors) -> object:
    return C.torch.cat([t.detach().reshape(-1).float() for t in tensors])


def _backward(local, model, opt, s: int) -> object:
    """Step ``s``'s backward on DDP ``model`` (the hook runs) and on
    ``local``, a plain copy of its parameters; returns this rank's own
    gradient, flat in parameter order."""
    local.load_state_dict(model.module.state_dict())
    local.zero_grad()
    x, y = eq_data(s)
    C.F.mse_loss(local(x), y).backward()
    opt.zero_grad(set_to_none=True)
    C.F.mse_loss(model(x), y).backward()
    return _flat(p.grad for p in local.parameters())


def _natural(state, model, flat) -> object:
    """A bucket-0 tensor in the state's layout (the residual's order), put
    in the order of model.parameters()."""
    by_id = state._params_by_id()
    parts, at = {}, 0
    for pid, n in state._layouts[0]:
        parts[id(by_id[pid])] = flat[at:at + n]
        at += n
    return C.torch.cat([parts[id(p)] for p in model.parameters()])


def _moments(state, model) -> tuple[object, object]:
    """The library's Adam moments in the order of model.parameters()."""
    ids = {id(ref()): pid for ref, pid in state._param_ids.values()}
    return tuple(C.torch.cat([buf._params[ids[id(p)]] for p in model.parameters()])
                 for buf in (state._velocity, state._second))


def sparse_oracle(kind: str, algo: str) -> Callable[[], str]:
    """Sparse calls with ``optimizer=``: after backward each parameter's
    grad is the reduced gradient of the conservation oracle (each rank's
    local gradient, plus Adam's L2 term for Adam, joins its residual); the
    step then moves, for Adam types, every entry the call carried after
    waiting ``a`` calls by ``a`` Adam steps (moments decayed by ``beta **
    a``, fed ``out / a`` and ``out ** 2 / a``), the others by AdamW's decay
    alone; for SGD by torch's Nesterov momentum step on that grad."""
    def fn() -> str:
        torch, dist = C.torch, C.dist
        P = C.world_size
        model = C.DDP(mlp(EQ_SIZES, 0), bucket_cap_mb=ONE_BUCKET_MB)
        local = mlp(EQ_SIZES, 0)
        opt = _make(kind, model.parameters())
        state = C.pg_sparse.SparseState(algo=algo, density=0.05, warmup_steps=2, tau=2,
                                        tau_prime=2)
        C.pg_sparse.hooks.register_comm_hook(model, state, C.pg_sparse.hooks.HOOKS[algo],
                                             optimizer=opt)
        n = sum(p.numel() for p in model.parameters())
        m, v, age, buf = torch.zeros(n), torch.zeros(n), torch.zeros(n), None
        carried = late = 0
        for s in range(8):
            t = s + 1
            before = _natural(state, model, _plain_residual(state)) if s >= 2 else 0.0
            g = _backward(local, model, opt, s)
            p0 = _flat(local.parameters())
            got = _flat(p.grad for p in model.parameters())
            if s < 2:  # dense: the average
                out = g.clone()
                dist.all_reduce(out, group=C.gloo)
                out /= P
            else:
                assert not state.stats()[0]["dense"]
                if kind == "adam":
                    g += WD * p0  # L2 rides the sparse stream
                out = g + before - _natural(state, model, _plain_residual(state))
                dist.all_reduce(out, group=C.gloo)
                out /= P
            assert torch.allclose(got, out, rtol=1e-4, atol=1e-6), "grad is not the reduced sum"
            # On from the grad itself: the oracle's entries not carried are
            # rounding residue, not zeros.
            out = got
            opt.step()
            after = _flat(model.parameters())
            if kind == "sgd":
                d_p = out + WD * p0
                buf = d_p.clone() if s == 0 else buf.mul_(0.9).add_(d_p)
                want = p0 - 0.05 * (d_p + 0.9 * buf)
                assert torch.allclose(after, want, rtol=1e-4, atol=1e-6), \
                    f"step {s}: SGD step off by {float((after - want).abs().max()):.3g}"
                continue
            if s < 2 and kind == "adam":
                out = out + WD * p0
            hit = torch.ones(n, dtype=torch.bool) if s < 2 else out != 0
            age += 1
            a = age[hit]
            mean, d1, d2 = out[hit] / a, BETAS[0] ** a, BETAS[1] ** a
            m[hit] = d1 * m[hit] + (1 - d1) * mean
            v[hit] = d2 * v[hit] + (1 - d2) * mean * out[hit]
            age[hit] = 0
            want = p0 * (1 - LR * WD) if kind == "adamw" else p0.clone()
            step = a * m[hit] / (1 - BETAS[0] ** t) / ((v[hit] / (1 - BETAS[1] ** t)).sqrt()
                                                      + EPS)
            want[hit] -= LR * step
            assert torch.allclose(after, want, rtol=1e-4, atol=1e-6), \
                f"step {s}: Adam step off by {float((after - want).abs().max()):.3g}"
            if s >= 2:
                carried += int(hit.sum())
                late += int((a > 1).sum())
            # Go on from the library's moments: the sums' rounding differs from gloo's.
            m, v = _moments(state, model)
        if kind == "sgd":
            return "8 steps: grads the reduced sums, torch's Nesterov step on them"
        assert 0 < carried < 6 * n and late > 0, (carried, late)
        return f"{carried} entries carried, {late} of them after waiting"
    return fn


def clip_moves_before_residual() -> str:
    """With clip_grad_norm_(max_norm) after backward, once two steps were
    clipped to the same norm the library knows max_norm, clips each rank's
    gradient to it before the residual (one bucket: by its own norm), and
    the grad the user's clip saw is the conservation oracle's sum of those."""
    torch, dist = C.torch, C.dist
    P, clip = C.world_size, 0.005
    model = C.DDP(mlp(EQ_SIZES, 0), bucket_cap_mb=ONE_BUCKET_MB)
    local = mlp(EQ_SIZES, 0)
    opt = _make("adamw", model.parameters())
    state = C.pg_sparse.SparseState(algo="topka", density=0.05, warmup_steps=3)
    C.pg_sparse.hooks.register_comm_hook(model, state, C.pg_sparse.hooks.topka_hook,
                                         optimizer=opt)
    bridge, checked = state._bridge, 0
    for s in range(8):
        known = bridge.max_norm
        before = _natural(state, model, _plain_residual(state)) if s >= 3 else None
        g = _backward(local, model, opt, s)
        if s >= 3:
            assert known is not None, "max_norm not learned in the dense steps"
            assert float(g.norm()) > known, "the local gradient is not clipped: idle check"
            g = g * min(1.0, known / (float(g.norm()) + 1e-6))
            out = g + before - _natural(state, model, _plain_residual(state))
            dist.all_reduce(out, group=C.gloo)
            out /= P
            got = _flat(p.grad for p in model.parameters())
            assert torch.allclose(got, out, rtol=1e-4, atol=1e-7), "not clipped before residual"
            checked += 1
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip))
        assert s >= 3 or norm > clip, f"dense step {s}: norm {norm} <= {clip}: idle check"
        opt.step()
    assert bridge.max_norm is not None and math.isclose(bridge.max_norm, clip, rel_tol=1e-4), \
        bridge.max_norm
    assert checked == 5, checked
    return f"max_norm learned {bridge.max_norm:.6f}, {checked} sparse steps checked"


def warns_without_optimizer() -> str:
    """An Adam-type optimizer stepping a model whose hook was registered
    without optimizer= warns once, naming the fix; with optimizer=, or with
    SGD, nothing is said."""
    said = {}
    for case in ("adamw_plain", "adamw_given", "sgd_plain"):
        model = C.DDP(mlp(EQ_SIZES, 0), bucket_cap_mb=ONE_BUCKET_MB)
        opt = _make("adamw" if case.startswith("adamw") else "sgd", model.parameters())
        state = C.pg_sparse.SparseState(density=0.05, warmup_steps=1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if case == "adamw_given":
                C.pg_sparse.hooks.register_comm_hook(model, state, C.pg_sparse.hooks.oktopk_hook,
                                                     optimizer=opt)
            else:
                model.register_comm_hook(state, C.pg_sparse.hooks.oktopk_hook)
            for s in range(3):
                _step(model, opt, s)
        said[case] = [str(w.message) for w in caught if "pg_sparse" in str(w.message)]
        del opt, model, state
    assert len(said["adamw_plain"]) == 1 and "optimizer=" in said["adamw_plain"][0], said
    assert not said["adamw_given"] and not said["sgd_plain"], said
    return f"warned once: {said['adamw_plain'][0][:60]}..."


def checkpoint_resume(kind: str) -> Callable[[], str]:
    """optimizer.state_dict() carries the hook state: saved after 5 steps
    (sparse, clipped, with an LR schedule) and loaded into a fresh model,
    optimizer and state, the next 5 steps give the same parameters bit for
    bit as going on without the checkpoint."""
    def fn() -> str:
        torch = C.torch

        def build():
            model = C.DDP(mlp(EQ_SIZES, 0), bucket_cap_mb=ONE_BUCKET_MB)
            opt = _make(kind, model.parameters())
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + 0.1 * s))
            state = C.pg_sparse.SparseState(density=0.05, warmup_steps=2)
            C.pg_sparse.hooks.register_comm_hook(model, state, C.pg_sparse.hooks.oktopk_hook,
                                                 optimizer=opt)
            return model, opt, sched

        model, opt, sched = build()
        for s in range(5):
            _step(model, opt, s, 0.05)
            sched.step()
        blob = io.BytesIO()
        torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(),
                    "sched": sched.state_dict()}, blob)
        for s in range(5, 10):
            _step(model, opt, s, 0.05)
            sched.step()
        blob.seek(0)
        saved = torch.load(blob, weights_only=False)
        model2, opt2, sched2 = build()
        model2.module.load_state_dict(saved["model"])
        opt2.load_state_dict(saved["opt"])
        sched2.load_state_dict(saved["sched"])
        for s in range(5, 10):
            _step(model2, opt2, s, 0.05)
            sched2.step()
        assert "pg_sparse" in saved["opt"], list(saved["opt"])
        for a, b in zip(model.parameters(), model2.parameters()):
            assert torch.equal(a, b), f"resumed params differ by {max_diff([a], [b]):.3g}"
        return "bit-equal after resume"
    return fn


def bad_settings() -> str:
    """Settings optimizer= cannot honour raise, naming the problem."""
    torch, pg = C.torch, C.pg_sparse
    model = C.DDP(mlp(EQ_SIZES, 0), bucket_cap_mb=ONE_BUCKET_MB)
    hooks, ps = pg.hooks, list(model.parameters())
    cases = [
        (lambda: hooks.register_comm_hook(model, pg.SparseState(precondition="adam"),
                                          hooks.oktopk_hook,
                                          optimizer=torch.optim.AdamW(ps)),
         ValueError, "precondition"),
        (lambda: hooks.register_comm_hook(model, pg.SparseState(momentum=0.9), hooks.oktopk_hook,
                                          optimizer=torch.optim.SGD(ps, lr=0.1)),
         ValueError, "momentum"),
        (lambda: hooks.register_comm_hook(model, pg.SparseState(), hooks.oktopk_hook,
                                          optimizer=torch.optim.AdamW(ps, amsgrad=True)),
         ValueError, "amsgrad"),
        (lambda: hooks.register_comm_hook(model, pg.adtopk.ADTopkState(), hooks.adtopk_hook,
                                          optimizer=torch.optim.AdamW(ps)),
         TypeError, "SparseState"),
        (lambda: hooks.register_comm_hook(model, pg.SparseState(), hooks.oktopk_hook,
                                          optimizer="adamw"),
         TypeError, "Optimizer"),
    ]
    for call, err, needle in cases:
        expect_error(call, (err,), needle)
    # A DDP parameter the optimizer given does not step: raised at its step.
    model = C.DDP(mlp(EQ_SIZES, 0), bucket_cap_mb=ONE_BUCKET_MB)
    opt = torch.optim.AdamW(list(model.parameters())[:2])
    hooks.register_comm_hook(model, pg.SparseState(), hooks.oktopk_hook, optimizer=opt)
    expect_error(lambda: _step(model, opt, 0), (ValueError,), "does not step")
    return f"{len(cases) + 1} bad settings refused"


def plan() -> list[tuple[str, Callable[[], str]]]:
    """The checks of this module, in the order the job runs them."""
    checks: list[tuple[str, Callable[[], str]]] = [
        (f"optimizer_dense_matches_{k}", dense_matches(k)) for k in ("adamw", "adam", "sgd")]
    checks += [(f"optimizer_sparse_{k}_{a}", sparse_oracle(k, a))
               for k, a in (("adamw", "oktopk"), ("adamw", "topka"), ("adam", "oktopk"),
                            ("sgd", "oktopk"))]
    checks += [("optimizer_clip_moves_before_residual", clip_moves_before_residual),
               ("optimizer_warns_without_it", warns_without_optimizer),
               ("optimizer_checkpoint_resume_adamw", checkpoint_resume("adamw")),
               ("optimizer_checkpoint_resume_sgd", checkpoint_resume("sgd")),
               ("optimizer_bad_settings", bad_settings)]
    return checks
