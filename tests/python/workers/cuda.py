"""CUDA checks, one GPU per rank: every collective on CUDA tensors against an
NCCL group in the same job; send/recv/isend/irecv of CUDA tensors (ring,
exchange with one peer, ordering, streams, timeout); DDP on CUDA (gradient_as_bucket_view=True) with
each hook at density 1.0 against NCCL DDP; Ok-Topk at density 0.01 trains on
the GPU within its volume bound."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from workers.common import ALGOS, Recorder, expect_error, parse_args  # noqa: E402


def main() -> None:
    args = parse_args(lambda p: p.add_argument(
        "--only", default="", help="comma-separated substrings of the check names to run"))
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    import pg_sparse

    dist.init_process_group("sparse")
    rank, size = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    torch.cuda.set_device(dev)
    nccl = dist.new_group(backend="nccl")
    rec = Recorder(args.out, rank, size)

    def same(a: torch.Tensor, b: torch.Tensor, tol: float = 0.0) -> None:
        assert a.device == b.device == dev, (a.device, b.device)
        diff = (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
        assert diff <= tol, f"max difference {diff}"

    def data(shape, dtype, seed: int) -> torch.Tensor:
        g = torch.Generator(device="cpu").manual_seed(seed * 100 + rank)
        if dtype.is_floating_point:
            return torch.randn(shape, generator=g).to(dtype).to(dev)
        return torch.randint(-5, 6, shape, generator=g).to(dtype).to(dev)

    def allreduce(op, dtype) -> Callable[[], str]:
        def check() -> str:
            x = data((1000,), dtype, 1)
            if op == dist.ReduceOp.PRODUCT and dtype.is_floating_point:
                x = 1 + 0.01 * x
            a, b = x.clone(), x.clone()
            dist.all_reduce(a, op=op)
            dist.all_reduce(b, op=op, group=nccl)
            # NCCL rounds after every pairwise add, we after one sum: in
            # half precision they differ by a few units in the last place
            # of the result (bf16: 2^-8 relative), more with more ranks.
            ulp = {torch.float32: 2**-23, torch.float16: 2**-10, torch.bfloat16: 2**-7}
            scale = max(1.0, b.double().abs().max().item())
            tol = size * ulp.get(dtype, 0.0) * scale if dtype.is_floating_point else 0
            same(a, b, tol)
            return ""
        return check

    def broadcast() -> str:
        for root in range(size):
            a = data((333,), torch.float32, 2 + root)
            b = a.clone()
            dist.broadcast(a, root)
            dist.broadcast(b, root, group=nccl)
            same(a, b)
        return ""

    def gathers() -> str:
        x = data((17,), torch.float32, 3)
        outs = [torch.empty_like(x) for _ in range(size)]
        ref = [torch.empty_like(x) for _ in range(size)]
        dist.all_gather(outs, x)
        dist.all_gather(ref, x, group=nccl)
        for o, r in zip(outs, ref):
            same(o, r)
        a = torch.empty(size * 17, device=dev)
        b = torch.empty_like(a)
        dist.all_gather_into_tensor(a, x)
        dist.all_gather_into_tensor(b, x, group=nccl)
        same(a, b)
        return ""

    def reduce_scatter() -> str:
        x = data((size * 9,), torch.float32, 4)
        a, b = torch.empty(9, device=dev), torch.empty(9, device=dev)
        dist.reduce_scatter_tensor(a, x)
        dist.reduce_scatter_tensor(b, x, group=nccl)
        same(a, b, 1e-6)
        return ""

    def alltoall() -> str:
        x = data((size * 5, 3), torch.float32, 5)
        a, b = torch.empty_like(x), torch.empty_like(x)
        dist.all_to_all_single(a, x)
        dist.all_to_all_single(b, x, group=nccl)
        same(a, b)
        return ""

    def barrier_and_async() -> str:
        dist.barrier()
        x = data((64,), torch.float32, 6)
        y = x.clone()
        w = dist.all_reduce(x, async_op=True)
        fut = w.get_future().then(lambda f: f.value()[0] * 2)
        dist.all_reduce(y, group=nccl)
        same(fut.wait(), 2 * y, 1e-6)
        return ""

    def payload(src: int, dst: int, i: int, n: int, dtype) -> torch.Tensor:
        # Small integers: exact in every dtype, different per sender,
        # receiver and message.
        x = torch.arange(n, device=dev) % 13 + src + 2 * dst + 3 * i
        return x.to(dtype)

    def ring() -> str:
        # isend to the next rank, irecv from the previous one, first use of
        # every pair included: blocking pair creation would deadlock here.
        nxt, prv = (rank + 1) % size, (rank - 1) % size
        for i, (n, dtype) in enumerate([(1000, torch.float32),
                                        (3, torch.bfloat16), (777, torch.int64),
                                        (1 << 22, torch.float16)]):
            x = payload(rank, nxt, i, n, dtype)
            y = torch.full((n,), -1, dtype=dtype, device=dev)
            works = [dist.isend(x, nxt), dist.irecv(y, prv)]
            for w in works:
                w.wait()
            same(y, payload(prv, rank, i, n, dtype))
        return ""

    def exchange_same_peer() -> str:
        # Both ranks of a pair isend first, then irecv, 16 MB each way: a
        # send and a receive with one peer must run at once.
        peer = rank ^ 1
        if peer >= size:
            return "no partner"
        n = 1 << 22
        x = payload(rank, peer, 0, n, torch.float32)
        y = torch.zeros(n, device=dev)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, x, peer),
                                       dist.P2POp(dist.irecv, y, peer)])
        for r in reqs:
            r.wait()
        same(y, payload(peer, rank, 0, n, torch.float32))
        return ""

    def ordered_and_streams() -> str:
        # Several messages to one peer arrive in order; the sender fills its
        # tensors on a side stream and the receiver uses the data on its own
        # current stream right after wait(), with no device synchronisation.
        side = torch.cuda.Stream(device=dev)
        sizes = [5, 100_000, 1, 4096]
        if rank == 0:
            with torch.cuda.stream(side):
                xs = [payload(0, 1, i, n, torch.float32) * 2 for i, n in enumerate(sizes)]
                for x in xs:
                    dist.send(x, 1)
            torch.cuda.current_stream().wait_stream(side)
            back = torch.empty(4, device=dev)
            dist.recv(back, 1)
            same(back, torch.tensor([float(sum(sizes))] * 4, device=dev))
        elif rank == 1:
            with torch.cuda.stream(side):
                ys = [torch.empty(n, device=dev) for n in sizes]
                works = [dist.irecv(y, 0) for y in ys]
                for w in works:
                    w.wait()
                counts = [(y == payload(0, 1, i, n, torch.float32) * 2).sum()
                          for i, (y, n) in enumerate(zip(ys, sizes))]
                total = torch.stack(counts).sum().float().expand(4).contiguous()
                dist.send(total, 0)
        dist.barrier()
        return ""

    def recv_timeout() -> str:
        # A receive nobody answers fails after the group's timeout, on this
        # rank only, and leaves the main group usable.
        g = dist.new_group(backend="sparse", timeout=timedelta(seconds=2))
        msg = "not run"
        if rank == 0:
            y = torch.empty(10, device=dev)
            w = dist.irecv(y, 1, group=g)
            msg = expect_error(w.wait, (RuntimeError,), "timed out")
        dist.barrier()
        x = torch.ones(8, device=dev)
        dist.all_reduce(x)
        same(x, torch.full((8,), float(size), device=dev))
        return msg

    def model() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(dev)

    def train(m: nn.Module, steps: int, seed: int = 7) -> list[float]:
        opt = torch.optim.SGD(m.parameters(), lr=0.05)
        g = torch.Generator(device="cpu").manual_seed(seed + rank)
        losses = []
        w = torch.randn(32, 4, generator=torch.Generator().manual_seed(1)).to(dev)
        for _ in range(steps):
            x = torch.randn(16, 32, generator=g).to(dev)
            loss = (m(x) - x @ w).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    def hook_matches_nccl(algo: str, hierarchy: str = "flat") -> Callable[[], str]:
        # hierarchy="node": "nodes" of size / 2 GPUs (1 at P = 2), so the
        # stage threads, the streams and the CUDA future run on the GPU path.
        def check() -> str:
            ref = DDP(model(), device_ids=[dev.index], process_group=nccl,
                      gradient_as_bucket_view=True)
            train(ref, 20)
            m = DDP(model(), device_ids=[dev.index], gradient_as_bucket_view=True,
                    bucket_cap_mb=0.01)
            m.register_comm_hook(pg_sparse.SparseState(
                density=1.0, hierarchy=hierarchy, local_size=max(1, size // 2)),
                pg_sparse.hooks.HOOKS[algo])
            train(m, 20)
            worst = max((p - q).abs().max().item()
                        for p, q in zip(m.parameters(), ref.parameters()))
            assert worst <= 1e-5, f"max parameter difference {worst}"
            return f"max diff {worst:.1e}"
        return check

    def oktopk_trains() -> str:
        torch.manual_seed(0)
        m = DDP(nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 4)).to(dev),
                device_ids=[dev.index], gradient_as_bucket_view=True)
        st = pg_sparse.SparseState(density=0.01)
        m.register_comm_hook(st, pg_sparse.hooks.oktopk_hook)
        # Plain SGD: heavy momentum on top of error feedback diverges here,
        # on the CPU path exactly as on the GPU (same losses to the digit).
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(11 + rank)
        w = torch.randn(32, 4, generator=torch.Generator().manual_seed(1)).to(dev)
        losses, worst = [], 0.0
        for _ in range(80):
            x = torch.randn(32, 32, generator=g).to(dev)
            loss = (m(x) - x @ w).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            for s in st.stats().values():
                if s["dense"] == 0:
                    worst = max(worst, s["words_sent"] / s["words_upper_bound"],
                                s["words_recv"] / s["words_upper_bound"])
        first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
        assert last < 0.5 * first, f"loss {first:.3f} -> {last:.3f}"
        assert worst < 1.0, f"words / bound reached {worst:.3f}"
        return f"loss {first:.3f} -> {last:.3f}, worst words/bound {worst:.3f}"

    class Bucket:
        """What the hooks read of a DDP GradBucket."""

        def __init__(self, t: torch.Tensor) -> None:
            self.t = t

        def buffer(self) -> torch.Tensor:
            return self.t

        def index(self) -> int:
            return 0

        def is_last(self) -> bool:
            return True

    def adam_matches_cpu(select: str) -> Callable[[], str]:
        """Adam in the hook on CUDA buckets against the same state on CPU
        buckets (the host path as oracle): two dense calls, then sparse
        calls whose ranking, residual rescaling and Adam update must give
        the CPU's updates to rounding."""
        def check() -> str:
            states = {d: pg_sparse.SparseState(algo="oktopk", density=0.05, warmup_steps=2,
                                               precondition="adam", max_grad_norm=5.0,
                                               adam_select=select)
                      for d in ("cpu", "cuda")}
            worst, carried = 0.0, 0
            for call in range(6):
                g = data((4000,), torch.float32, 30 + call)
                up = {d: pg_sparse.hooks._run(st, Bucket(g.clone() if d == "cuda"
                                                         else g.cpu()), "oktopk").wait()
                      for d, st in states.items()}
                assert up["cuda"].device == dev, up["cuda"].device
                diff = (up["cuda"].cpu() - up["cpu"]).abs()
                off = int((diff > 1e-4 * (1 + up["cpu"].abs())).sum())
                assert off <= 2, f"call {call}: {off} entries differ, max {diff.max():.3g}"
                worst = max(worst, float(diff.max()))
                carried += int((up["cpu"] != 0).sum()) if call >= 2 else 0
            assert carried > 0, "no sparse call carried anything"
            return f"{carried} entries carried over 4 sparse calls, max difference {worst:.3g}"
        return check

    def then_sees_gathered() -> str:
        """A callback chained on a CUDA all_gather_into_tensor's future sees
        the gathered data (what DDP hooks rely on), against NCCL's gather;
        int32 and float32, several rounds into reused buffers."""
        for dtype in (torch.int32, torch.float32):
            out = torch.empty(size * 4096, dtype=dtype, device=dev)
            for round_ in range(4):
                x = data((4096,), dtype, 80 + round_)
                work = dist.all_gather_into_tensor(out, x, async_op=True)
                got = work.get_future().then(lambda _f, o=out: o.clone()).wait()
                want = torch.empty_like(out)
                dist.all_gather_into_tensor(want, x, group=nccl)
                assert torch.equal(got, want), f"{dtype} round {round_}"
        return "chained callbacks saw the gathered int32 and float32 data"

    def adtopk_conserves(chained: bool = False) -> Callable[[], str]:
        """ADTopk on CUDA buckets: every call's output and residuals keep
        the gradient mass (sum over ranks of the residuals, plus P times the
        output once: the output is the same on every rank), the output
        equals the average of every rank's picks made on CPU copies, every
        row keeps a pick, and the selection equals the one made on a CPU
        copy of the residual. ``chained``: the exchange's future chained as
        on host buckets instead of ``work.wait()`` (adtopk._CUDA_WAIT)."""
        def check() -> str:
            from pg_sparse import adtopk

            st = adtopk.ADTopkState(density=0.02, warmup_steps=0)

            class Shaped(Bucket):
                def parameters(self):
                    return [torch.empty(30, 40), torch.empty(30), torch.empty(7, 30)]

            def gsum(t: torch.Tensor) -> torch.Tensor:
                t = t.clone()
                dist.all_reduce(t, group=nccl)
                return t

            n = 30 * 40 + 30 + 7 * 30
            k = max(1, round(0.02 * n))
            applied, worst, old_excess = 0, 0.0, 0.0
            saved = adtopk._CUDA_WAIT
            adtopk._CUDA_WAIT = not chained
            try:
                for call in range(5):
                    g = data((n,), torch.float32, 60 + call)
                    b = st.buckets.get(0)
                    before = torch.zeros(n, device=dev) if b is None else b.residual.clone()
                    acc = g + before
                    out = adtopk.step(st, Shaped(g.clone())).wait()
                    b = st.buckets[0]
                    assert out.device == dev and b.residual.device == dev
                    # The CPU oracle: every rank's picks of its acc, averaged.
                    accs = torch.empty(size * n, device=dev)
                    dist.all_gather_into_tensor(accs, acc, group=nccl)
                    want_out = torch.zeros(n, dtype=torch.float64)
                    for a in accs.cpu().view(size, n):
                        i = adtopk.select(a, b.segments, k, True)
                        want_out.index_add_(0, i, a[i].double())
                    want_out /= size
                    diff = (out.cpu().double() - want_out).abs().max().item()
                    assert diff <= 1e-6 * (1 + want_out.abs().max().item()), \
                        f"call {call}: output differs from the CPU oracle by {diff}"
                    lhs, rhs = gsum(b.residual) + size * out, gsum(acc)
                    gap = (lhs - rhs).abs().max().item()
                    worst = max(worst, gap)
                    assert torch.allclose(lhs, rhs, rtol=1e-5, atol=1e-5), \
                        f"call {call}: conservation off by {gap}"
                    # The formula this check used before (P * out added on
                    # every rank): off by P (P - 1) |out| exactly.
                    old = (gsum(b.residual + size * out) - rhs).abs().max().item()
                    old_excess = max(old_excess, abs(
                        old - size * (size - 1) * out.abs().max().item()))
                    want = adtopk.select(acc.cpu(), b.segments, k, True)
                    assert torch.equal(b.last["idx"].cpu(), want), \
                        "selection differs from the CPU's"
                    applied += int(b.last["applied"])
            finally:
                adtopk._CUDA_WAIT = saved
            return (f"5 calls conserve mass (max gap {worst:.1e}), outputs and selections "
                    f"equal the CPU's, {applied} entries applied; old formula minus "
                    f"P(P-1)max|out|: {old_excess:.1e}")
        return check

    checks: list[tuple[str, Callable[[], str]]] = [("broadcast", broadcast)]
    for op in ("SUM", "AVG", "MAX", "MIN", "PRODUCT"):
        for dt in (torch.float32, torch.float16, torch.bfloat16, torch.int64):
            if op == "AVG" and not dt.is_floating_point:
                continue
            checks.append((f"all_reduce_{op}_{str(dt)[6:]}",
                           allreduce(getattr(dist.ReduceOp, op), dt)))
    checks += [("all_gather", gathers), ("reduce_scatter", reduce_scatter),
               ("all_to_all", alltoall), ("barrier_and_async", barrier_and_async),
               ("p2p_ring", ring), ("p2p_exchange_same_peer", exchange_same_peer),
               ("p2p_ordered_and_streams", ordered_and_streams),
               ("p2p_recv_timeout", recv_timeout)]
    checks += [(f"ddp_hook_density1_{a}", hook_matches_nccl(a)) for a in ALGOS]
    checks += [(f"ddp_hook_density1_{a}_node", hook_matches_nccl(a, "node"))
               for a in ("dense", "oktopk", "gtopk")]
    checks += [("oktopk_density001_trains", oktopk_trains)]
    checks += [(f"adam_{s}_matches_cpu", adam_matches_cpu(s)) for s in ("gradient", "normalized")]
    checks += [("then_sees_gathered", then_sees_gathered),
               ("adtopk_conserves", adtopk_conserves()),
               ("adtopk_conserves_chained", adtopk_conserves(chained=True))]
    # --only a,b: the checks whose names contain a or b (default: all).
    only = [w for w in args.only.split(",") if w]
    for name, fn in checks:
        if not only or any(w in name for w in only):
            rec.run(name, fn)
    rec.info["device"] = torch.cuda.get_device_name(dev)
    rec.finish()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
