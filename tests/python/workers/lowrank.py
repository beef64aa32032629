"""Worker of test_lowrank.py (torchrun, 2 ranks, the "sparse" backend):
ACP-SGD against the dense math of one step and the conservation invariant
(oracle sums over a gloo group), ACP-SGD training, and torch's PowerSGD hook
on the sparse backend against the same hook on gloo."""

from __future__ import annotations

import torch
import torch.distributed as dist
from pg_sparse.hooks import acpsgd_hook
from pg_sparse.lowrank import ACPSGDState
from torch.nn.parallel import DistributedDataParallel as DDP

import pg_sparse


def gsum(t: torch.Tensor, group) -> torch.Tensor:
    out = t.clone()
    dist.all_reduce(out, group=group)  # gloo: an independent oracle
    return out


def check_acp_math(oracle) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 12)
    ddp = DDP(model)
    state = ACPSGDState(rank=2, start_iter=1, seed=7)
    records = []

    def probe(st, bucket):
        x = bucket.buffer().detach().float().clone()
        old = st._buckets.get(bucket.index())
        err = old.error.clone() if old is not None else torch.zeros_like(x)
        calls = old.calls if old is not None else 0
        shapes = [tuple(g.shape) for g in bucket.gradients()]

        def after(f):
            out = f.value()
            b = st._buckets.get(bucket.index())
            records.append((x, err, out.detach().float().clone(),
                            None if b is None else b.error.clone(), calls, shapes,
                            bucket.index()))
            return out
        return acpsgd_hook(st, bucket).then(after)

    ddp.register_comm_hook(state, probe)
    gen = torch.Generator().manual_seed(100 + rank)  # different data per rank
    for _ in range(4):
        ddp(torch.randn(8, 16, generator=gen)).square().sum().backward()
        ddp.zero_grad()
    compressed = [r for r in records if r[3] is not None]
    assert len(records) == 4 and len(compressed) == 3, (len(records), len(compressed))
    for x, err, out, err_new, _calls, _shapes, _index in compressed:
        # Conservation: nothing lost, whatever the factors.
        lhs = gsum(err_new, oracle) + world * out
        rhs = gsum(x + err, oracle)
        assert torch.allclose(lhs, rhs, rtol=1e-4, atol=1e-4), (lhs - rhs).abs().max()
        assert torch.equal(gsum(out, oracle), world * out) or \
            torch.allclose(gsum(out, oracle), world * out, atol=1e-6)  # same on every rank
    # The first compressed call, by hand: P = (M + E) orth(Q0), out = P Q0^T / N
    # with Q0 from the shared seed; the bias goes raw.
    x, err, out, _, calls, shapes, index = compressed[0]
    assert calls == 0
    g = torch.Generator().manual_seed(7 + index)
    offset = 0
    for shape in shapes:
        numel = int(torch.tensor(shape).prod())
        seg = slice(offset, offset + numel)
        total = gsum(x[seg] + err[seg], oracle)
        if len(shape) == 2:
            torch.randn(shape[0], 2, generator=g)  # P0, unused on an even call
            q0 = torch.linalg.qr(torch.randn(shape[1], 2, generator=g), mode="reduced")[0]
            want = (total.view(shape) @ q0 @ q0.t() / world).view(-1)
        else:
            want = total / world
        assert torch.allclose(out[seg], want, rtol=1e-4, atol=1e-5), (shape, out[seg] - want)
        offset += numel
    print(f"rank {rank}: acp math ok ({len(compressed)} compressed calls)", flush=True)


def train(hook, state, steps: int = 60) -> tuple[float, float]:
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    ddp = DDP(model)
    if hook is not None:
        ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    w = torch.randn(32, 1, generator=torch.Generator().manual_seed(3))
    gen = torch.Generator().manual_seed(10 + dist.get_rank())
    losses = []
    for _ in range(steps):
        x = torch.randn(64, 32, generator=gen)
        loss = (ddp(x) - torch.tanh(x @ w)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return sum(losses[:5]) / 5, sum(losses[-5:]) / 5


def check_training() -> None:
    first, last = train(acpsgd_hook, ACPSGDState(rank=2, start_iter=2))
    _, dense_last = train(None, None)
    assert last < 0.3 * first, (first, last)
    assert last < 3 * dense_last + 0.02, (last, dense_last)
    print(f"rank {dist.get_rank()}: acp training {first:.4f} -> {last:.4f} "
          f"(dense {dense_last:.4f})", flush=True)


def check_powersgd_on_sparse(oracle) -> None:
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps

    params = []
    for group in (None, oracle):
        torch.manual_seed(2)
        model = torch.nn.Sequential(torch.nn.Linear(20, 30), torch.nn.ReLU(),
                                    torch.nn.Linear(30, 5))
        ddp = DDP(model, process_group=group)
        state = ps.PowerSGDState(process_group=group, matrix_approximation_rank=1,
                                 start_powerSGD_iter=2, random_seed=0)
        ddp.register_comm_hook(state, pg_sparse.hooks.powersgd_hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(20 + dist.get_rank())
        for _ in range(6):
            opt.zero_grad()
            ddp(torch.randn(16, 20, generator=gen)).square().mean().backward()
            opt.step()
        params.append([p.detach().clone() for p in model.parameters()])
    for a, b in zip(*params):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), (a - b).abs().max()
    print(f"rank {dist.get_rank()}: powersgd on sparse == on gloo", flush=True)


def main() -> None:
    dist.init_process_group("sparse")
    oracle = dist.new_group(backend="gloo")
    check_acp_math(oracle)
    check_training()
    check_powersgd_on_sparse(oracle)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
