"""Worker of test_adtopk.py (torchrun, 2 ranks, the "sparse" backend):
ADTopk through DDP, every call checked against oracles: the exact average on
warm-up calls and the conservation invariant on sparse ones (sums over a
gloo group), each rank's picks against a brute-force selection (every row's
largest |acc| plus the global top-k), no row left without a pick, the
interleaved global-only calls, and training."""

from __future__ import annotations

import torch
import torch.distributed as dist
from pg_sparse.adtopk import ADTopkState, row_ids
from torch.nn.parallel import DistributedDataParallel as DDP

import pg_sparse


def gsum(t: torch.Tensor, group) -> torch.Tensor:
    out = t.clone()
    dist.all_reduce(out, group=group)
    return out


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(40, 30)
        self.b = torch.nn.Linear(30, 7)
        self.tiny = torch.nn.Linear(40, 5)  # gradients 1e4 times smaller

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.tanh(self.a(x))).sum(1) + 1e-4 * self.tiny(x).sum(1)


def brute_force(acc: torch.Tensor, rows: torch.Tensor, k: int, all_dims: bool) -> set[int]:
    # The k largest |acc| by a full sort, ties in index order (a bias whose
    # entries all get the same gradient ties here).
    order = sorted(range(acc.numel()), key=lambda i: (-abs(float(acc[i])), i))
    picks = set(order[:k])
    if all_dims:
        for r in rows.unique().tolist():
            where = (rows == r).nonzero().flatten()
            picks.add(int(where[acc[where].abs().argmax()]))
    return {i for i in picks if acc[i] != 0}


def run(interleave: int, oracle) -> tuple[int, float, float]:
    world = dist.get_world_size()
    state = ADTopkState(density=0.02, warmup_steps=1, interleave=interleave)
    ddp = DDP(Net())
    calls = {"dense": 0, "sparse": 0, "global_only": 0}

    def probe(st, bucket):
        x = bucket.buffer().detach().clone()
        old = st.buckets.get(bucket.index())
        before = torch.zeros_like(x) if old is None else old.residual.clone()
        dense = st.iteration < st.warmup_steps

        def after(f):
            out = f.value()
            if dense:
                assert torch.allclose(out, gsum(x, oracle) / world, atol=1e-6)
                calls["dense"] += 1
                return out
            b = st.buckets[bucket.index()]
            acc = x + before
            lhs = gsum(b.residual, oracle) + world * out
            assert torch.allclose(lhs, gsum(acc, oracle), rtol=1e-5, atol=1e-6), \
                (lhs - gsum(acc, oracle)).abs().max()
            k = max(1, round(st.density * x.numel()))
            all_dims = b.last["all_dims"]
            got = set(b.last["idx"].tolist())
            rows = row_ids(b.segments, x.numel())
            assert got == brute_force(acc, rows, k, all_dims), (len(got), all_dims)
            if all_dims:  # every row with a nonzero entry has a pick
                live = set(rows[acc != 0].unique().tolist())
                assert live == set(rows[b.last["idx"]].unique().tolist())
                calls["sparse"] += 1
            else:
                assert len(got) == min(k, int((acc != 0).sum())), len(got)
                calls["global_only"] += 1
            return out
        return pg_sparse.hooks.adtopk_hook(st, bucket).then(after)

    ddp.register_comm_hook(state, probe)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    w = torch.randn(40, generator=torch.Generator().manual_seed(3))
    gen = torch.Generator().manual_seed(60 + dist.get_rank())
    losses = []
    for _ in range(40):
        x = torch.randn(16, 40, generator=gen)
        loss = (ddp(x) - x @ w).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    nrows = next(iter(state.buckets.values())).nrows
    assert nrows == 30 + 1 + 7 + 1 + 5 + 1, nrows  # the rows of weights and biases
    if interleave:
        total = calls["sparse"] + calls["global_only"]
        assert calls["global_only"] == total // interleave, calls
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.7 * first, (first, last)
    return calls["sparse"], first, last


def main() -> None:
    dist.init_process_group("sparse")
    oracle = dist.new_group(backend="gloo")
    rank = dist.get_rank()
    for interleave in (0, 2):
        n, first, last = run(interleave, oracle)
        print(f"rank {rank}: adtopk interleave={interleave} ok ({n} all-dimension calls, "
              f"loss {first:.3f} -> {last:.3f})", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
