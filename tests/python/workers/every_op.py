"""The c10d operations beyond the everyday ones, on "sparse" against a gloo
group in the same job doing the same thing with the same inputs: reduce,
gather, scatter, the list forms of alltoall and reduce_scatter, the
coalesced ops, bitwise reductions, every dtype gloo takes, 0-d, empty and
non-contiguous tensors, sparse COO allreduce (DDP over a sparse embedding),
sequence numbers and the timeout message.

Run by torchrun or mpirun: ``every_op.py --out DIR``.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from datetime import timedelta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from workers.common import Recorder, parse_args  # noqa: E402

# What gloo reduces; bool and the small integers go through the backend's
# gather-and-reduce path, the others through the transport's own reduction.
DTYPES = ("float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32",
          "int64", "bool")
OPS = ("SUM", "MAX", "MIN", "PRODUCT")
BITWISE = ("BAND", "BOR", "BXOR")


class Ctx:
    """What the checks share (filled in by main)."""

    torch = dist = None
    rank = world_size = 0
    gloo = None
    device = "cpu"  # where the "sparse" side's tensors live


C = Ctx()


def make(dtype: str, shape: tuple[int, ...], salt: int, rank: int | None = None):
    """An input whose reductions are exact in every dtype."""
    torch = C.torch
    g = torch.Generator().manual_seed(1000 * salt + (C.rank if rank is None else rank))
    here = torch.get_default_device()  # the device context of both()
    if dtype == "bool":
        x = torch.randint(0, 2, shape, generator=g, device="cpu").bool()
    elif dtype == "uint8":
        x = torch.randint(0, 4, shape, generator=g, device="cpu").to(torch.uint8)
    else:
        x = torch.randint(-3, 4, shape, generator=g, device="cpu").to(getattr(torch, dtype))
    return x.to(here)


def same(a, b, what: str) -> None:
    """Bitwise equal (inputs are chosen so every reduction is exact)."""
    torch = C.torch
    if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
        raise AssertionError(f"{what}: sparse {a} != gloo {b}")


def cpu(x):
    """x with every tensor (in lists and tuples too) on the CPU."""
    if isinstance(x, (list, tuple)):
        return type(x)(cpu(y) for y in x)
    return x.cpu() if x is not None else None


def both(fn: Callable) -> tuple:
    """fn(group) on "sparse" (the default group; its tensors on C.device) and
    on the gloo oracle (CPU tensors), both results on the CPU."""
    with C.torch.device(C.device):
        mine = fn(None)
    return cpu(mine), fn(C.gloo)


def noncontig(t):
    """A non-contiguous view with t's values (a transposed copy)."""
    if t.dim() < 2:
        return t
    return t.t().contiguous().t()


def reduce_check(dtype: str, op: str, root: int) -> Callable[[], str]:
    def run() -> str:
        def one(group):
            t = noncontig(make(dtype, (3, 5), 1))
            C.dist.reduce(t, dst=root, op=getattr(C.dist.ReduceOp, op), group=group)
            return t
        a, b = both(one)
        # Only the root's tensor is defined (gloo leaves partial results in
        # the others'; ours keeps them as they were).
        if C.rank == root:
            same(a, b, f"reduce {op} {dtype} root {root}")
        else:
            same(a, noncontig(make(dtype, (3, 5), 1)), "reduce leaves non-roots alone")
        return "matches gloo"
    return run


def all_reduce_check(dtype: str, op: str, shape: tuple[int, ...]) -> Callable[[], str]:
    def run() -> str:
        def one(group):
            t = make(dtype, shape, 2)
            t = noncontig(t) if t.dim() == 2 else t
            C.dist.all_reduce(t, op=getattr(C.dist.ReduceOp, op), group=group)
            return t
        a, b = both(one)
        same(a, b, f"all_reduce {op} {dtype} {shape}")
        return f"matches gloo, non-contiguous={not a.is_contiguous() or a.dim() == 2}"
    return run


def gather_check(root: int) -> Callable[[], str]:
    def run() -> str:
        def one(group):
            t = noncontig(make("float32", (4, 3), 3))
            out = [C.torch.zeros(4, 3) for _ in range(C.world_size)] if C.rank == root else None
            C.dist.gather(t, out, dst=root, group=group)
            return out
        a, b = both(one)
        if C.rank == root:
            for r, (x, y) in enumerate(zip(a, b)):
                same(x, y, f"gather from {r}")
                same(x, make("float32", (4, 3), 3, rank=r), f"gather from {r} vs input")
        return "matches gloo"
    return run


def scatter_check(root: int) -> Callable[[], str]:
    def run() -> str:
        def one(group):
            ins = ([make("int64", (2, 6), 4, rank=100 + r) for r in range(C.world_size)]
                   if C.rank == root else None)
            out = C.torch.zeros(2, 6, dtype=C.torch.int64)
            C.dist.scatter(out, ins, src=root, group=group)
            return out
        a, b = both(one)
        same(a, b, "scatter")
        same(a, make("int64", (2, 6), 4, rank=100 + C.rank), "scatter vs input")
        return "matches gloo"
    return run


def all_to_all_list() -> str:
    torch = C.torch

    def one(group, uneven=False):
        # Rank r sends r + j + 1 elements to rank j when uneven (gloo wants
        # one size everywhere).
        n = (lambda r, j: r + j + 1) if uneven else (lambda r, j: 3)
        ins = [torch.full((n(C.rank, j),), float(10 * C.rank + j)) for j in range(C.world_size)]
        outs = [torch.zeros(n(j, C.rank)) for j in range(C.world_size)]
        C.dist.all_to_all(outs, ins, group=group)
        return outs
    # Checked against the inputs: torch 2.11's gloo has no list alltoall.
    for uneven in (False, True):
        with torch.device(C.device):
            got = cpu(one(None, uneven))
        for j, x in enumerate(got):
            n = j + C.rank + 1 if uneven else 3
            same(x, torch.full((n,), float(10 * j + C.rank)), f"from {j} (uneven={uneven})")
    return "equal and uneven sizes match what every rank sent"


def reduce_scatter_list() -> str:
    torch = C.torch
    del torch

    def one(group):
        ins = [make("float32", (5,), 5, rank=C.rank * 31 + j) for j in range(C.world_size)]
        out = C.torch.zeros(5)
        C.dist.reduce_scatter(out, ins, group=group)
        return out
    a, b = both(one)
    same(a, b, "reduce_scatter list")
    return "matches gloo"


def all_reduce_coalesced() -> str:
    def one(group):
        ts = [make("float64", (3,), 6), make("float64", (2, 2), 7), make("float64", (), 8)]
        C.dist.all_reduce_coalesced(ts, group=group)
        return ts
    a, b = both(one)
    for i, (x, y) in enumerate(zip(a, b)):
        same(x, y, f"all_reduce_coalesced {i}")
    return "matches gloo"


def all_gather_coalesced() -> str:
    def one(group):
        ins = [make("int32", (3,), 9), make("int32", (2, 2), 10)]
        outs = [[C.torch.zeros_like(t) for t in ins] for _ in range(C.world_size)]
        C.dist.all_gather_coalesced(outs, ins, group=group)
        return outs
    a, b = both(one)
    for r in range(C.world_size):
        for i in range(2):
            same(a[r][i], b[r][i], f"all_gather_coalesced rank {r} tensor {i}")
    return "matches gloo"


def coalescing_manager() -> str:
    """The functional path FSDP2 takes: all_gather_into_tensor and
    reduce_scatter_tensor inside _coalescing_manager."""
    torch, dist = C.torch, C.dist
    from torch.distributed.distributed_c10d import _coalescing_manager

    def one(group):
        ins = [make("float32", (4,), 11), make("float32", (6,), 12)]
        outs = [torch.zeros(4 * C.world_size), torch.zeros(6 * C.world_size)]
        with _coalescing_manager(group=group, async_ops=True) as cm:
            for o, i in zip(outs, ins):
                dist.all_gather_into_tensor(o, i, group=group)
        cm.wait()
        big = [make("float32", (2 * C.world_size,), 13), make("float32", (C.world_size,), 14)]
        small = [torch.zeros(2), torch.zeros(1)]
        with _coalescing_manager(group=group, async_ops=True) as cm:
            for o, i in zip(small, big):
                dist.reduce_scatter_tensor(o, i, group=group)
        cm.wait()
        return outs + small
    a, b = both(one)
    for i, (x, y) in enumerate(zip(a, b)):
        same(x, y, f"coalesced {i}")
    return "matches gloo"


def functional_collectives() -> str:
    import torch.distributed._functional_collectives as funcol
    torch = C.torch
    del torch

    def one(group):
        g = group if group is not None else C.dist.group.WORLD
        x = make("float32", (3, 2), 15)
        gathered = funcol.all_gather_tensor(x, 0, g).wait()
        scattered = funcol.reduce_scatter_tensor(make("float32", (2 * C.world_size,), 16),
                                                 "sum", 0, g).wait()
        reduced = funcol.all_reduce(x, "sum", g).wait()
        return gathered, scattered, reduced
    a, b = both(one)
    for i, (x, y) in enumerate(zip(a, b)):
        same(x, y, f"functional {i}")
    return "matches gloo"


def sparse_all_reduce() -> str:
    torch = C.torch

    def one(group):
        i = torch.tensor([[C.rank, 2, 2], [0, 1, 1]])
        v = torch.tensor([1.0, 2.0, 3.0]) * (C.rank + 1)
        s = torch.sparse_coo_tensor(i, v, (C.world_size + 2, 3))
        C.dist.all_reduce(s, group=group)
        return s.coalesce().to_dense()
    a, b = both(one)
    same(a, b, "sparse all_reduce")
    return "matches gloo"


def ddp_sparse_embedding() -> str:
    torch, dist = C.torch, C.dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    def one(group):
        dev = torch.get_default_device()
        with torch.device("cpu"):  # the same initial weights on every device
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.EmbeddingBag(50, 8, sparse=True),
                                        torch.nn.Linear(8, 2))
        model.to(dev)
        ddp = DDP(model, process_group=group if group is not None else dist.group.WORLD)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(C.rank)
        for _ in range(3):
            idx = torch.randint(0, 50, (6, 4), generator=g, device="cpu").to(
                torch.get_default_device())
            opt.zero_grad()
            ddp(idx).pow(2).sum().backward()
            opt.step()
        return [p.detach().cpu() for p in model.parameters()]
    if os.environ.get("TORCH_DISTRIBUTED_DEBUG") == "DETAIL":
        # torch 2.13's gloo itself dies (SIGSEGV) on this under DETAIL: the
        # replicas must agree with each other instead.
        mine = one(None)
        for i, p in enumerate(mine):
            peers = [torch.zeros_like(p) for _ in range(C.world_size)]
            dist.all_gather(peers, p, group=C.gloo)
            if not all(torch.equal(q, p) for q in peers):
                raise AssertionError(f"parameter {i} differs across replicas")
        return "3 steps, replicas identical (gloo crashes here under DETAIL)"
    a, b = both(one)
    for i, (x, y) in enumerate(zip(a, b)):
        if not C.torch.allclose(x, y, rtol=1e-6, atol=1e-6):
            raise AssertionError(f"parameter {i} differs from gloo DDP")
    return "3 steps, parameters match gloo DDP"


def new_group_all_reduce() -> str:
    """A sub-group of every rank but the last (and, in the DETAIL config,
    under torch's debug wrapper): it reduces over its members only."""
    torch, dist = C.torch, C.dist
    members = list(range(max(1, C.world_size - 1)))
    group = dist.new_group(members)
    if C.rank in members:
        t = torch.full((4,), float(C.rank + 1))
        dist.all_reduce(t, group=group)
        want = float(sum(r + 1 for r in members))
        if not torch.equal(t, torch.full((4,), want)):
            raise AssertionError(f"{t} != {want}")
        return f"sum over {members}"
    return "not a member"


def recv_any_source() -> str:
    """dist.recv without a source: rank 0 takes one message from each other
    rank, in whatever order, and learns who sent it."""
    torch, dist = C.torch, C.dist
    if C.rank == 0:
        seen = []
        for _ in range(C.world_size - 1):
            t = torch.zeros(3)
            src = dist.recv(t, tag=5)
            if not torch.equal(t, torch.full((3,), float(src))):
                raise AssertionError(f"message from {src} carries {t}")
            seen.append(src)
        if sorted(seen) != list(range(1, C.world_size)):
            raise AssertionError(f"senders {seen}")
        return f"senders {seen}"
    dist.send(torch.full((3,), float(C.rank)), dst=0, tag=5)
    return "sent"


def sequence_numbers() -> str:
    # torch's ProcessGroup only forwards these for its own backends; the
    # DETAIL wrapper calls the backend's, as here.
    pg = C.dist.group.WORLD._get_backend(C.torch.device("cpu"))
    pg._set_sequence_number_for_group()
    before = pg._get_sequence_number_for_group()
    C.dist.all_reduce(C.torch.ones(1))
    after = pg._get_sequence_number_for_group()
    if after <= before:
        raise AssertionError(f"sequence number {before} -> {after}")
    seqs = [None] * C.world_size
    C.dist.all_gather_object(seqs, after, group=C.gloo)
    if len(set(seqs)) != 1:
        raise AssertionError(f"ranks disagree on the sequence number: {seqs}")
    return f"{before} -> {after} on every rank"


def timeout_message() -> str:
    """A barrier only rank 0 enters times out once, in the words torch's
    own tests look for (" Timed out "). Runs last: the group is then broken."""
    dist = C.dist
    if os.environ.get("TORCH_DISTRIBUTED_DEBUG") == "DETAIL":
        return "SKIP: under DETAIL torch's wrapper reports a monitoredBarrier failure first"
    group = dist.new_group(backend="sparse", timeout=timedelta(seconds=2))
    dist.barrier(group=group)  # everyone: the group works
    if C.rank != 0:
        # Alive (and quiet on this group) until rank 0's barrier timed out.
        dist.barrier(group=C.gloo)
        return "rank 0 only"
    try:
        dist.barrier(group=group)
    except Exception as e:  # noqa: BLE001 - the message is the check
        text = str(e)
        if " Timed out " not in text or text.count("pg_sparse:") != 1:
            raise AssertionError(f"unexpected timeout message: {text}") from e
        return text.splitlines()[0]
    finally:
        dist.barrier(group=C.gloo)
    raise AssertionError("barrier did not time out")


def plan(world_size: int) -> list[tuple[str, Callable[[], str]]]:
    """The checks, in the order every rank runs them."""
    checks: list[tuple[str, Callable[[], str]]] = []
    for dtype in DTYPES:
        for op in OPS:
            if dtype == "bool" and op == "PRODUCT":
                continue  # gloo has no bool product either way (it is MIN)
            checks.append((f"all_reduce_{op}_{dtype}", all_reduce_check(dtype, op, (4, 3))))
        if dtype in ("int8", "uint8", "int32", "int64", "bool"):
            for op in BITWISE:
                checks.append((f"all_reduce_{op}_{dtype}", all_reduce_check(dtype, op, (4, 3))))
    checks += [
        ("all_reduce_0d", all_reduce_check("float32", "SUM", ())),
        ("all_reduce_empty", all_reduce_check("float32", "SUM", (0, 3))),
    ]
    for root in range(world_size):
        checks.append((f"reduce_root{root}", reduce_check("float32", "SUM", root)))
        checks.append((f"gather_root{root}", gather_check(root)))
        checks.append((f"scatter_root{root}", scatter_check(root)))
    checks += [
        ("reduce_MAX_int8", reduce_check("int8", "MAX", world_size - 1)),
        ("all_to_all_list", all_to_all_list),
        ("reduce_scatter_list", reduce_scatter_list),
        ("all_reduce_coalesced", all_reduce_coalesced),
        ("all_gather_coalesced", all_gather_coalesced),
        ("coalescing_manager", coalescing_manager),
        ("functional_collectives", functional_collectives),
        ("sparse_all_reduce", sparse_all_reduce),
        ("ddp_sparse_embedding", ddp_sparse_embedding),
        ("new_group_all_reduce", new_group_all_reduce),
        ("recv_any_source", recv_any_source),
        ("sequence_numbers", sequence_numbers),
        ("timeout_message", timeout_message),
    ]
    return checks


def main() -> None:
    args = parse_args()
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist

    import pg_sparse  # noqa: F401 - registers "sparse"; under mpirun sets RANK...

    C.device = os.environ.get("PGS_EVERY_OP_DEVICE", "cpu")
    if C.device == "cuda-shared":  # every rank on one GPU: staged (auto)
        C.device = "cuda:0"
        torch.cuda.set_device(C.device)
    elif C.device == "cuda":
        local = (os.environ.get("LOCAL_RANK") or os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK")
                 or os.environ.get("RANK", "0"))
        C.device = f"cuda:{int(local)}"
        torch.cuda.set_device(C.device)
    dist.init_process_group("sparse", timeout=timedelta(seconds=60))
    C.torch, C.dist = torch, dist
    C.rank, C.world_size = dist.get_rank(), dist.get_world_size()
    C.gloo = dist.new_group(backend="gloo")
    rec = Recorder(args.out, C.rank, C.world_size)
    for name, fn in plan(C.world_size):
        rec.run(name, fn)
    rec.finish()
    # The timeout check broke its group: leave without a collective teardown.
    os._exit(0)


if __name__ == "__main__":
    main()
