"""Worker of test_hierarchy.py (torchrun, 4 ranks as 2 nodes x 2 given by
local_size=2, the "sparse" backend): hierarchical sparse allreduce through
DDP against the conservation invariant (residuals placed at each rank's
shard; sums over a gloo group as the oracle), identical outputs, the exact
average on dense warm-up calls, and training. With the argument ``cuda``
(test_cuda_one.py) the same on CUDA tensors, every rank on cuda:0: the
node's dense stages then go through the node group, staged through the host
as the ranks share the GPU."""

from __future__ import annotations

import os
import stat
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import pg_sparse


def gsum(t: torch.Tensor, group) -> torch.Tensor:
    out = t.clone()
    dist.all_reduce(out, group=group)
    return out


def model(hidden: int = 30) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(40, hidden), torch.nn.Tanh(),
                               torch.nn.Linear(hidden, 7))


def wrap(m: torch.nn.Module, dev: torch.device, **kw) -> DDP:
    return DDP(m.to(dev), device_ids=[dev.index] if dev.type == "cuda" else None, **kw)


def check_algo(algo: str, oracle, dev: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    state = pg_sparse.SparseState(algo=algo, density=0.05, warmup_steps=1,
                                  hierarchy="node", local_size=2)
    ddp = wrap(model(), dev)
    records = []

    def probe(st, bucket):
        x = bucket.buffer().detach().cpu().clone()
        old = st._buckets.get(bucket.index())
        before = None if old is None else old.residual().cpu().clone()

        def after(f):
            out = f.value()
            nb = st._buckets[bucket.index()]
            records.append((x, before, out.detach().cpu().clone(), nb.residual().cpu().clone(),
                            int(nb.stats()["dense"])))
            return out
        return pg_sparse.hooks.HOOKS[algo](st, bucket).then(after)

    ddp.register_comm_hook(state, probe)
    gen = torch.Generator().manual_seed(50 + rank)
    for _ in range(5):
        ddp(torch.randn(16, 40, generator=gen).to(dev)).square().sum().backward()
        ddp.zero_grad()
    topo = state._topology
    assert topo is not None and topo.nodes == 2 and topo.local_size == 2
    # The dense stages went through the node's shared rows (the default on
    # CPU tensors), or through the node group (CUDA tensors).
    on_cpu = dev.type == "cpu"
    assert topo._rows and all((r is not None) == on_cpu for r in topo._rows.values()), \
        topo._rows
    sparse_calls = 0
    for x, before, out, resid, dense in records:
        n = x.numel()
        s, padded = topo.shard(n)

        def place(r: torch.Tensor | None, s: int = s, padded: int = padded) -> torch.Tensor:
            full = torch.zeros(padded)
            if r is not None:
                full[topo.local_rank * s:(topo.local_rank + 1) * s] = r
            return full

        xs = torch.zeros(padded)
        xs[:n] = x
        outs = torch.zeros(padded)
        outs[:n] = out
        lhs = gsum(place(resid), oracle) + world * outs
        rhs = gsum(xs + place(before), oracle)
        assert torch.allclose(lhs, rhs, rtol=1e-4, atol=1e-5), (algo, (lhs - rhs).abs().max())
        assert torch.allclose(gsum(out, oracle), world * out, atol=1e-6), algo  # all equal
        if dense:
            assert torch.allclose(out, gsum(x, oracle) / world, atol=1e-6), algo
        else:
            sparse_calls += 1
            assert resid.abs().sum() > 0, algo  # something stayed behind
    assert sparse_calls == (0 if algo == "dense" else 4), (algo, sparse_calls)
    print(f"rank {rank}: {algo} hierarchical ok ({len(records)} calls, "
          f"{sparse_calls} sparse)", flush=True)


def train(hierarchy: str, dev: torch.device) -> float:
    # Several buckets per step (DDP's first bucket holds up to 1 MB), so
    # the stages of different buckets run at once: the pipeline must keep
    # each group's collectives in the same order on every rank.
    ddp = wrap(model(hidden=16384), dev, bucket_cap_mb=0.5)
    state = pg_sparse.SparseState(density=0.05, warmup_steps=2, hierarchy=hierarchy,
                                  local_size=2)
    ddp.register_comm_hook(state, pg_sparse.hooks.oktopk_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    w = torch.randn(40, 7, generator=torch.Generator().manual_seed(9)).to(dev)
    gen = torch.Generator().manual_seed(70 + dist.get_rank())
    loss = torch.tensor(0.0)
    for _ in range(80):
        x = torch.randn(32, 40, generator=gen).to(dev)
        loss = (ddp(x) - torch.tanh(x @ w)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    if hierarchy == "node":
        assert len(state.stats()) >= 2, len(state.stats())
    final = loss.detach().cpu().clone()
    dist.all_reduce(final)
    return final.item() / dist.get_world_size()


def watch_segments() -> list[tuple[str, int]]:
    """Record (path, mode) of every shared-memory segment this rank creates."""
    from pg_sparse import _shm

    made: list[tuple[str, int]] = []
    create = _shm.create

    def recording(path: str, nbytes: int) -> int:
        fd = create(path, nbytes)
        made.append((path, stat.S_IMODE(os.fstat(fd).st_mode)))
        return fd
    _shm.create = recording
    return made


def check_segments(made: list[tuple[str, int]]) -> str:
    """Every segment the leader made was 0600 and is gone from /dev/shm."""
    if dist.get_rank() % 2:  # local rank 1: a follower, it makes none
        assert not made, made
        return ""
    assert made and all(mode == 0o600 for _, mode in made), made
    assert not [p for p, _ in made if os.path.exists(p)], made
    return f"; {len(made)} segments, mode 0600, unlinked"


def planted(prefix: str) -> None:
    """A file planted under the leaders' next segment name: every rank
    refuses it with a clear error, the file is left as it was."""
    from pg_sparse import _shm

    _shm.new_path = lambda index, root=_shm.ROOT: f"{prefix}-{index}"
    ddp = wrap(model(), torch.device("cpu"))
    state = pg_sparse.SparseState(density=0.05, warmup_steps=1, hierarchy="node",
                                  local_size=2)
    ddp.register_comm_hook(state, pg_sparse.hooks.oktopk_hook)
    try:
        ddp(torch.randn(8, 40)).square().sum().backward()
    except Exception as e:  # DDP re-raises the hook's error in backward
        text = str(e)
        assert "refused a shared-memory segment of hierarchy='node'" in text, text
        assert f"{prefix}-0 existed before this job created it" in text or \
            "another local rank found it" in text, text
        print(f"rank {dist.get_rank()}: planted segment refused", flush=True)
    else:
        raise AssertionError("a planted segment was mapped")
    with open(f"{prefix}-0", "rb") as f:
        assert f.read() == b"planted", "the planted file was changed"


def main() -> None:
    dist.init_process_group("sparse")
    oracle = dist.new_group(backend="gloo")
    if sys.argv[1:2] == ["planted"]:
        planted(sys.argv[2])
    elif sys.argv[1:] == ["auto"]:
        # torchrun on one node: LOCAL_WORLD_SIZE is the world, so flat.
        state = pg_sparse.SparseState(hierarchy="auto")
        assert state._hierarchical() is None and state._mode == "flat"
        print(f"rank {dist.get_rank()}: auto is flat on one node", flush=True)
    else:
        cuda = sys.argv[1:] == ["cuda"]
        dev = torch.device("cuda", 0) if cuda else torch.device("cpu")
        if cuda:
            torch.cuda.set_device(dev)
        for algo in ("oktopk", "topka", "gtopk", "dense"):
            check_algo(algo, oracle, dev)
        made = watch_segments()
        flat, node = train("flat", dev), train("node", dev)
        assert node < 1.5 * flat + 0.01, (flat, node)
        paths = ""
        if not cuda:
            # The same through the node groups' collectives instead of shared
            # memory: a sum of two values does not depend on its order, so
            # the two paths must agree exactly.
            os.environ["PG_SPARSE_INTRA_NODE"] = "group"
            group = train("node", dev)
            del os.environ["PG_SPARSE_INTRA_NODE"]
            assert group == node, (group, node)
            paths = " (shared memory and group paths equal)" + check_segments(made)
        print(f"rank {dist.get_rank()}: training loss flat {flat:.4f} node {node:.4f}"
              f"{paths}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
