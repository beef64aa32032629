"""Real clients of a process group on "sparse", each against the same client
on gloo in the same job: FSDP2 training and ``full_tensor()``, FSDP1, and
``torch.distributed.checkpoint`` save/load of a DDP and an FSDP2 model on
the default group. With ``PGS_CLIENTS_DEVICE=cuda`` (one GPU per rank) the
models and batches live on the GPU and the oracle group is NCCL.

Run by torchrun or mpirun: ``clients.py --out DIR``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable
from datetime import timedelta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from workers.common import Recorder, parse_args  # noqa: E402


class Ctx:
    """What the checks share (filled in by main)."""

    torch = dist = None
    rank = world_size = 0
    oracle = None  # gloo, or NCCL on CUDA
    oracle_name = "gloo"
    device = None
    tmp = ""


C = Ctx()


def model_and_data(seed: int = 0):
    """The same MLP on every rank and this rank's batch."""
    torch = C.torch
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4)).to(C.device)
    g = torch.Generator().manual_seed(100 + C.rank)
    x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
    return model, x.to(C.device), y.to(C.device)


def train(model, x, y, steps: int = 3) -> None:
    opt = C.torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(steps):
        opt.zero_grad()
        C.torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def close(a, b, what: str) -> None:
    if not C.torch.allclose(a, b, rtol=1e-5, atol=1e-6):
        raise AssertionError(f"{what}: max difference {(a - b).abs().max().item()}")


def mesh_of(group):
    from torch.distributed.device_mesh import DeviceMesh
    return DeviceMesh.from_group(group if group is not None else C.dist.group.WORLD,
                                 C.device.type)


def fsdp2_params(group) -> list:
    from torch.distributed.fsdp import fully_shard
    model, x, y = model_and_data()
    mesh = mesh_of(group)
    for layer in model:
        if isinstance(layer, C.torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    train(model, x, y)
    return [p.full_tensor().detach().clone() for p in model.parameters()]


def fsdp2() -> str:
    mine, oracle = fsdp2_params(None), fsdp2_params(C.oracle)
    for i, (a, b) in enumerate(zip(mine, oracle)):
        close(a, b, f"FSDP2 parameter {i}")
    return (f"{len(mine)} parameters after 3 steps match FSDP2 on "
            f"{C.oracle_name} (full_tensor)")


def fsdp1() -> str:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    def run(group):
        model, x, y = model_and_data()
        wrapped = FSDP(model, process_group=group if group is not None else C.dist.group.WORLD,
                       use_orig_params=True, device_id=C.device)
        train(wrapped, x, y)
        with FSDP.summon_full_params(wrapped):
            return [p.detach().clone() for p in wrapped.parameters()]
    mine, oracle = run(None), run(C.oracle)
    for i, (a, b) in enumerate(zip(mine, oracle)):
        close(a, b, f"FSDP1 parameter {i}")
    return f"{len(mine)} parameters after 3 steps match FSDP1 on {C.oracle_name}"


def dcp_roundtrip(make: Callable, name: str) -> str:
    """Save a trained model with DCP on the default group ("sparse"), load it
    into a fresh copy, compare every tensor of the state dict."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
    path = os.path.join(C.tmp, name)
    trained = make(train_it=True)
    state = get_model_state_dict(trained)
    dcp.save(state, checkpoint_id=path)
    fresh = make(train_it=False)
    loaded = get_model_state_dict(fresh)
    dcp.load(loaded, checkpoint_id=path)
    set_model_state_dict(fresh, loaded)
    after = get_model_state_dict(fresh)
    n = 0
    for key, want in state.items():
        got = after[key]
        if hasattr(want, "full_tensor"):
            want, got = want.full_tensor(), got.full_tensor()
        close(got, want, f"{name} {key}")
        n += 1
    return f"{n} tensors saved and loaded"


def dcp_ddp() -> str:
    from torch.nn.parallel import DistributedDataParallel as DDP

    def make(train_it: bool):
        model, x, y = model_and_data(seed=0 if train_it else 1)
        ddp = DDP(model, device_ids=[C.device.index] if C.device.type == "cuda" else None)
        if train_it:
            train(ddp, x, y)
        return ddp
    return dcp_roundtrip(make, "ddp")


def dcp_fsdp2() -> str:
    from torch.distributed.fsdp import fully_shard

    def make(train_it: bool):
        model, x, y = model_and_data(seed=0 if train_it else 1)
        fully_shard(model, mesh=mesh_of(None))
        if train_it:
            train(model, x, y)
        return model
    return dcp_roundtrip(make, "fsdp2")


def plan(world_size: int) -> list[tuple[str, Callable[[], str]]]:
    del world_size
    return [("fsdp2_training_full_tensor", fsdp2), ("fsdp1_training", fsdp1),
            ("dcp_ddp_default_group", dcp_ddp), ("dcp_fsdp2_default_group", dcp_fsdp2)]


def main() -> None:
    args = parse_args()
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist

    import pg_sparse  # noqa: F401 - registers "sparse"; under mpirun sets RANK...

    dist.init_process_group("sparse", timeout=timedelta(seconds=60))
    C.torch, C.dist = torch, dist
    C.rank, C.world_size = dist.get_rank(), dist.get_world_size()
    if os.environ.get("PGS_CLIENTS_DEVICE", "cpu") == "cuda":
        C.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", C.rank)))
        torch.cuda.set_device(C.device)
        C.oracle_name = "nccl"
    else:
        C.device, C.oracle_name = torch.device("cpu"), "gloo"
    C.oracle = dist.new_group(backend=C.oracle_name)
    # One checkpoint folder for the job (DCP writes one file per rank).
    folder = [tempfile.mkdtemp(prefix="pgs_dcp_") if C.rank == 0 else None]
    dist.broadcast_object_list(folder, src=0)
    C.tmp = folder[0]
    rec = Recorder(args.out, C.rank, C.world_size)
    for name, fn in plan(C.world_size):
        rec.run(name, fn)
    dist.barrier()
    dist.destroy_process_group()
    if C.rank == 0:  # every rank is past the barrier: the folder is done with
        shutil.rmtree(C.tmp, ignore_errors=True)
    rec.finish()


if __name__ == "__main__":
    main()
