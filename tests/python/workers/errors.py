"""Bad input raises a clear Python exception on every rank instead of
hanging: settings, dtypes, bucket sizes or settings that differ across
ranks, NaN/Inf on one rank, bad collective arguments. After each error the
process group must still work (checked at the end)."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from datetime import timedelta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from workers.common import ALGOS, Recorder, expect_error, parse_args  # noqa: E402


class Ctx:
    torch = dist = pg_sparse = None
    rank = world_size = 0
    gloo = None


C = Ctx()


class FakeBucket:
    """What the hooks use of a dist.GradBucket: buffer() and index()."""

    def __init__(self, tensor, index: int = 0) -> None:
        self._t, self._i = tensor, index

    def buffer(self):
        return self._t

    def index(self) -> int:
        return self._i


def bad_settings() -> str:
    ps = C.pg_sparse
    out = []
    for kwargs in ({"density": 0}, {"density": 0.0}, {"density": 1.5}, {"density": -0.1},
                   {"density": float("nan")}, {"density": "0.1"}):
        out.append(expect_error(lambda kw=kwargs: ps.SparseState(**kw), (ValueError,),
                                "density"))
    expect_error(lambda: ps.SparseState(algo="topz"), (ValueError,), "unknown algorithm", "topz")
    expect_error(lambda: ps.SparseState(tau=0), (ValueError,), "tau")
    expect_error(lambda: ps.SparseState(tau_prime=1.5), (ValueError,), "tau_prime")
    expect_error(lambda: ps.SparseState(warmup_steps=-1), (ValueError,), "warmup_steps")
    expect_error(lambda: ps.SparseState(nonfinite="ignore"), (ValueError,), "nonfinite",
                 "ignore")
    for wire in (C.torch.int8, C.torch.float64, "bfloat16"):
        expect_error(lambda w=wire: ps.SparseState(wire_dtype=w), (TypeError,),
                     "wire_dtype", str(wire))
    ps.SparseState(density=1.0)  # the bounds themselves are fine
    ps.SparseState(density=1e-6)
    return out[0]


def hook_int_bucket(algo: str) -> Callable[[], str]:
    def fn() -> str:
        torch, ps = C.torch, C.pg_sparse
        hook = getattr(ps.hooks, f"{algo}_hook")
        msgs = []
        for dtype in (torch.int64, torch.int32, torch.uint8, torch.bool):
            state = ps.SparseState(density=0.5)
            bucket = FakeBucket(torch.ones(100, dtype=dtype))
            msgs.append(expect_error(lambda s=state, b=bucket: hook(s, b), (TypeError,),
                                     "floating-point", str(dtype).split(".")[-1]))
        return msgs[0]
    return fn


def native_bad_dtype() -> str:
    """The native bucket takes fp32/fp16/bf16 only: int and float64 raise
    TypeError on the caller's thread (nothing queued, nothing to hang)."""
    torch, ps = C.torch, C.pg_sparse
    state = ps.SparseState(algo="oktopk", density=0.5)
    msgs = []
    for dtype in (torch.int64, torch.float64):
        t = torch.ones(64, dtype=dtype)
        msgs.append(expect_error(lambda t=t: state.native_bucket(0, t).allreduce(t),
                                 (TypeError,), "float32, float16 or bfloat16"))
    # float64 through the hook: floating point, so the native check answers.
    bucket = FakeBucket(torch.ones(64, dtype=torch.float64))
    expect_error(lambda: ps.hooks.oktopk_hook(ps.SparseState(), bucket), (TypeError,),
                 "float32, float16 or bfloat16")
    t = torch.ones(64)
    wrong = torch.ones(65)
    expect_error(lambda: state.native_bucket(3, t).allreduce(wrong), (ValueError,), "65", "64")
    return "; ".join(msgs)


def mismatched_sizes(algo: str) -> Callable[[], str]:
    """Every rank calls with a different bucket size: PGS_ERR_MISMATCH on
    every rank, raised from wait()."""
    def fn() -> str:
        torch, ps = C.torch, C.pg_sparse
        state = ps.SparseState(algo=algo, density=0.1, warmup_steps=0)
        t = torch.ones(1000 + 10 * C.rank)
        return expect_error(lambda: state.native_bucket(0, t).allreduce(t).wait(),
                            (RuntimeError,), "differ across ranks")
    return fn


def mismatched_settings() -> str:
    """Same size, different algorithm or density on one rank."""
    torch, ps = C.torch, C.pg_sparse
    msgs = []
    for kwargs in ({"algo": "topka" if C.rank == 0 else "oktopk", "density": 0.1},
                   {"algo": "oktopk", "density": 0.1 if C.rank == 0 else 0.2}):
        state = ps.SparseState(warmup_steps=0, **kwargs)
        t = torch.ones(1000)
        msgs.append(expect_error(lambda s=state, t=t: s.native_bucket(0, t).allreduce(t).wait(),
                                 (RuntimeError,), "differ across ranks"))
    return msgs[0]


def nonfinite(algo: str, warmup: int, bad: str) -> Callable[[], str]:
    """NaN or Inf in rank 0's bucket only: an error on every rank, after
    real calls have filled the residual, which the failed call leaves as it
    was (up to the rounding of r + g - g) on every rank."""
    def fn() -> str:
        torch, ps = C.torch, C.pg_sparse
        n, P = 500, C.world_size
        state = ps.SparseState(algo=algo, density=0.1, warmup_steps=warmup)
        gen = torch.Generator().manual_seed(C.rank)
        for _ in range(3):  # warm-up and sparse calls: a non-zero residual
            g = torch.randn(n, generator=gen)
            state.native_bucket(0, g).allreduce(g).wait()
        b = state.native_bucket(0, g)
        before = b.residual().clone()
        assert algo == "dense" or before.abs().sum() > 0, "no residual to protect"
        t = torch.randn(n, generator=gen)
        grad = t.clone()
        if C.rank == 0:
            t[123] = float(bad)
        msg = expect_error(lambda: b.allreduce(t).wait(), (RuntimeError,), "NaN or Inf")
        after = b.residual()
        tol = 1e-6 * (before.abs() + grad.abs()) + 1e-30
        off = int(((after - before).abs() > tol).sum())
        assert off == 0, f"the failed call changed the residual at {off} entries"
        # Still usable: a clean call keeps error feedback's invariant
        # sum(residual) + P * out == sum(input + residual before), by gloo.
        ok = torch.randn(n, generator=gen)
        rhs = ok + after
        b.allreduce(ok).wait()
        lhs = b.residual()
        for x in (lhs, rhs):
            C.dist.all_reduce(x, group=C.gloo)
        assert torch.isfinite(ok).all(), ok[:5]
        assert torch.allclose(lhs + P * ok, rhs, atol=1e-4), \
            f"out {ok[:5]}, residual sum {lhs[:5]}"
        return msg
    return fn


def nonfinite_skip(algo: str) -> Callable[[], str]:
    """nonfinite="skip": NaN on rank 0 after real calls makes that call a
    zero output on every rank, no error, the residual bit for bit as before;
    the next clean call goes on from it."""
    def fn() -> str:
        torch, ps = C.torch, C.pg_sparse
        n = 500
        state = ps.SparseState(algo=algo, density=0.1, warmup_steps=1, nonfinite="skip")
        gen = torch.Generator().manual_seed(10 + C.rank)
        for _ in range(3):
            g = torch.randn(n, generator=gen)
            state.native_bucket(0, g).allreduce(g).wait()
        b = state.native_bucket(0, g)
        before = b.residual().clone()
        t = torch.randn(n, generator=gen)
        if C.rank == 0:
            t[7] = float("nan")
        b.allreduce(t).wait()  # no exception
        assert torch.equal(t, torch.zeros(n)), f"output {t[:5]}"
        after = b.residual()
        assert torch.equal(after.view(torch.int32), before.view(torch.int32)), \
            f"residual changed at {int((after != before).sum())} entries"
        ok = torch.randn(n, generator=gen)
        b.allreduce(ok).wait()
        assert torch.isfinite(ok).all() and ok.abs().sum() > 0, ok[:5]
        return "skipped, residual bitwise"
    return fn


def nonfinite_ddp(cpp_hook: bool) -> Callable[[], str]:
    """NaN gradient on rank 0 inside DDP with the Ok-Topk hook: backward()
    raises on every rank. With @p cpp_hook, registered through
    hooks.register_comm_hook and bad once the C++ hook serves the bucket (its
    Work is completed by the backend's worker, not a completion thread)."""
    def fn() -> str:
        torch, ps = C.torch, C.pg_sparse
        from torch.nn.parallel import DistributedDataParallel as DDP
        torch.manual_seed(0)
        model = DDP(torch.nn.Linear(64, 32))
        state = ps.SparseState(density=0.5)
        x = torch.randn(3, 64)
        if not cpp_hook:
            model.register_comm_hook(state, ps.hooks.oktopk_hook)
        else:
            ps.hooks.register_comm_hook(model, state, ps.hooks.oktopk_hook)
            for _ in range(4):
                model(x).sum().backward()
            calls = state._native_table.calls
            assert calls >= 1, "no call ran in C++ before the bad step"
        if C.rank == 0:
            x[0, 0] = float("nan")
        msg = expect_error(lambda: model(x).sum().backward(), (RuntimeError,), "NaN or Inf")
        if cpp_hook:
            assert state._native_table.calls > calls, "the bad step did not run in C++"
        return msg
    return fn


def bad_collective_args() -> str:
    torch, dist = C.torch, C.dist
    P = C.world_size
    msgs = [expect_error(lambda: dist.all_reduce(torch.ones(3, dtype=torch.int64),
                                                 op=dist.ReduceOp.AVG),
                         (RuntimeError, ValueError), "AVG"),
            expect_error(lambda: dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BAND),
                         (RuntimeError, ValueError), "integer or bool"),
            expect_error(lambda: dist.broadcast(torch.ones(3), src=P + 5),
                         (RuntimeError, ValueError), ""),
            expect_error(lambda: dist.all_gather_into_tensor(torch.ones(P * 3 + 1),
                                                             torch.ones(3)),
                         (RuntimeError, ValueError), "world_size"),
            expect_error(lambda: dist.all_to_all_single(torch.ones(P * 2), torch.ones(P * 2),
                                                        [1] * P, [3] * P),
                         (RuntimeError, ValueError), "split sizes"),
            expect_error(lambda: dist.send(torch.ones(2), dst=C.rank),
                         (RuntimeError, ValueError), ""),
            # Tags from 2**30 up are the gloo transport's own messages.
            expect_error(lambda: dist.send(torch.ones(2), dst=(C.rank + 1) % P, tag=1 << 30),
                         (RuntimeError, ValueError), "tag"),
            expect_error(lambda: dist.irecv(torch.ones(2), src=(C.rank + 1) % P, tag=-1),
                         (RuntimeError, ValueError), "tag"),
            expect_error(lambda: dist.all_reduce(torch.sparse_coo_tensor(
                torch.tensor([[0]]), torch.tensor([1.0]), (3,)), op=dist.ReduceOp.MAX),
                (RuntimeError, ValueError, TypeError), "SUM only")]
    return msgs[0]


def still_usable() -> str:
    """After all of the above, the group still reduces correctly."""
    torch, dist = C.torch, C.dist
    t = torch.full((7,), float(C.rank + 1))
    dist.all_reduce(t)
    P = C.world_size
    assert torch.equal(t, torch.full((7,), P * (P + 1) / 2)), t
    state = C.pg_sparse.SparseState(algo="oktopk", density=1.0)
    u = torch.full((300,), float(C.rank))
    state.native_bucket(0, u).allreduce(u).wait()
    assert torch.allclose(u, torch.full((300,), (P - 1) / 2)), u[:3]
    return "ok"


def plan(world_size: int) -> list[tuple[str, Callable[[], str]]]:
    checks: list[tuple[str, Callable[[], str]]] = [("bad_settings_raise_value_error",
                                                    bad_settings)]
    checks += [(f"hook_int_bucket_{a}", hook_int_bucket(a)) for a in ALGOS]
    checks += [("native_bad_dtype", native_bad_dtype)]
    checks += [(f"mismatched_bucket_sizes_{a}", mismatched_sizes(a)) for a in ALGOS]
    checks += [("mismatched_settings", mismatched_settings)]
    checks += [(f"nonfinite_nan_{a}_warmup{w}", nonfinite(a, w, "nan"))
               for a in ALGOS for w in (0, 1)]
    checks += [(f"nonfinite_inf_{a}", nonfinite(a, 0, "inf")) for a in ("oktopk", "topka")]
    checks += [(f"nonfinite_skip_{a}", nonfinite_skip(a)) for a in ALGOS]
    checks += [("nonfinite_in_ddp_backward", nonfinite_ddp(False)),
               ("nonfinite_in_ddp_backward_cpp_hook", nonfinite_ddp(True)),
               ("bad_collective_arguments", bad_collective_args),
               ("group_still_usable", still_usable)]
    return checks


def main() -> None:
    args = parse_args()
    warnings.filterwarnings("ignore", category=FutureWarning)
    import torch
    import torch.distributed as dist

    import pg_sparse

    torch.set_num_threads(1)
    # A hang shows as a timeout error within a minute, not a stuck job.
    dist.init_process_group("sparse", timeout=timedelta(seconds=60))
    C.torch, C.dist, C.pg_sparse = torch, dist, pg_sparse
    C.rank, C.world_size = dist.get_rank(), dist.get_world_size()
    C.gloo = dist.new_group(backend="gloo")
    rec = Recorder(args.out, C.rank, C.world_size)
    for name, fn in plan(C.world_size):
        rec.run(name, fn)
    dist.destroy_process_group()
    rec.finish()


if __name__ == "__main__":
    main()
