"""Hierarchical reduction: dense inside a node, sparse across nodes.

A bucket is reduce-scattered (dense, sum) among the L ranks of a node, each
rank then reduces its shard with the sparse algorithm among the ranks of the
same local rank on the other nodes (its own residual, on the node's sum), and
the node allgathers the shards. The slow links between nodes carry only the
sparse messages; the fast ones inside a node carry the dense ones. Ranks are
numbered node by node (as torchrun, Slurm and mpirun's default by-slot
mapping number them), so rank r is local rank r % L of node r // L.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from . import _shm
from ._params import param

HIERARCHIES = ("flat", "node", "auto")
# torch 2.13 renames the flat collectives (the old names warn); 2.11 has
# only the old ones.
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


@dataclass
class Topology:
    """The groups of a hierarchical reduction, from this rank's view."""

    local_size: int  # L: ranks per node
    nodes: int  # world size / L
    local_rank: int
    node_group: Any  # the L ranks of this node: the reduce-scatters
    gather_group: Any  # the same ranks: the allgathers
    cross_group: Any  # the ranks of this local rank, one per node
    _stages: list[queue.Queue] = field(default_factory=list, repr=False)
    # Per bucket index: the padded bucket (reduce-scatter input, allgather
    # output) and this rank's shard, kept so a step allocates nothing.
    _scratch: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict,
                                                                   repr=False)
    # Per bucket index: the node's L rows in shared memory (CPU tensors), or
    # None where the node could not map them (the stages then use the groups).
    _rows: dict[int, torch.Tensor | None] = field(default_factory=dict, repr=False)

    def scratch(self, index: int, buf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(padded bucket, shard) buffers of bucket ``index`` shaped like ``buf``."""
        s, padded = self.shard(buf.numel())
        kept = self._scratch.get(index)
        if kept is None or kept[0].numel() != padded or kept[0].dtype != buf.dtype \
                or kept[0].device != buf.device:
            kept = (buf.new_zeros(padded), buf.new_empty(s))
            self._scratch[index] = kept
        return kept

    def submit(self, stages: Sequence[Callable[[Any], Any]],
               device: torch.device | None = None) -> torch.futures.Future:
        """Run ``stages`` (each takes the previous one's result, the first
        None) as a pipeline: stage k of every job on thread k, in submission
        order; return a future of the last result. Each group's collectives
        come from one thread in bucket order, so in the same order on every
        rank (threads sharing a group would interleave differently on
        different ranks and deadlock), while bucket i's allgather, bucket
        i+1's sparse stage and bucket i+2's reduce-scatter overlap.

        On a CUDA ``device`` every stage runs on the caller's device and
        current stream (a new thread would start on GPU 0's default stream,
        unordered with the bucket's producer), and the future is a CUDA
        future of that device, so its consumer's stream waits for the result."""
        while len(self._stages) < len(stages):
            q: queue.Queue = queue.Queue()
            self._stages.append(q)
            threading.Thread(target=_serve, args=(q, self._stages), daemon=True,
                             name=f"pg_sparse-hierarchy-{len(self._stages)}").start()
        cuda = device is not None and device.type == "cuda"
        fut: torch.futures.Future = torch.futures.Future(devices=[device] if cuda else None)
        self._stages[0].put((list(stages), 0, None, fut, _on_stream(device) if cuda else None))
        return fut

    def shard(self, n: int) -> tuple[int, int]:
        """(shard size, padded bucket size) of a bucket of n entries."""
        s = -(-n // self.local_size)
        return s, s * self.local_size


def _on_stream(device: torch.device) -> Callable[[], contextlib.ExitStack]:
    """A context factory: ``device`` and the caller's current stream on it."""
    stream = torch.cuda.current_stream(device)

    def enter() -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        stack.enter_context(torch.cuda.device(device))
        stack.enter_context(torch.cuda.stream(stream))
        return stack

    return enter


def _serve(jobs: queue.Queue, stages: list[queue.Queue]) -> None:
    """One stage's thread: run the job's stage, pass the result on (or
    complete the future). Any failure, the future's own included, reaches
    the caller through the future: a thread that died would leave it pending."""
    while True:
        job, k, value, fut, on_stream = jobs.get()
        try:
            with on_stream() if on_stream else contextlib.nullcontext():
                value = job[k](value)
                if k + 1 == len(job):
                    fut.set_result(value)  # records the CUDA future's events here
        except BaseException as e:
            if not fut.done():
                fut.set_exception(e)
            continue
        if k + 1 < len(job):
            stages[k + 1].put((job, k + 1, value, fut, on_stream))


def local_size_of(given: int | None) -> int:
    """Ranks per node: ``given``, else LOCAL_WORLD_SIZE (torchrun, and the
    package's launcher mapping for mpirun and srun)."""
    if given is not None:
        return int(given)
    env = os.environ.get("LOCAL_WORLD_SIZE")
    if env is None:
        raise ValueError("pg_sparse: hierarchy='node' needs local_size= or LOCAL_WORLD_SIZE "
                         "(set by torchrun, mpirun and srun)")
    return int(env)


def resolve(hierarchy: str, local_size: int | None) -> str:
    """The mode to run: ``auto`` is ``node`` when there are several nodes of
    several ranks each, else ``flat``."""
    if hierarchy != "auto":
        return hierarchy
    world = dist.get_world_size()
    try:
        size = local_size_of(local_size)
    except ValueError:
        return "flat"
    return "node" if 1 < size < world and world % size == 0 else "flat"


def build(local_size: int | None, gather: bool = True) -> Topology:
    """Create the node and cross-node groups (collective over the world:
    every rank creates every group, in the same order); without ``gather``
    the allgathers' group is the node group itself (no group of its own)."""
    world, rank = dist.get_world_size(), dist.get_rank()
    size = local_size_of(local_size)
    if size < 1 or world % size:
        raise ValueError(f"pg_sparse: local_size {size} does not divide the world size {world}")
    nodes = world // size
    node_group = gather_group = cross_group = None
    for node in range(nodes):
        members = list(range(node * size, (node + 1) * size))
        g = dist.new_group(members)
        h = dist.new_group(members) if gather else g
        if rank // size == node:
            node_group, gather_group = g, h
    for local in range(size):
        g = dist.new_group(list(range(local, world, size)))
        if rank % size == local:
            cross_group = g
    return Topology(size, nodes, rank % size, node_group, gather_group, cross_group)


def reduce_scatter(topo: Topology, x: torch.Tensor, full: torch.Tensor,
                   shard: torch.Tensor, index: int = -1) -> torch.Tensor:
    """``shard`` := this rank's shard of the node's sum of ``x``, through
    ``full`` (``x`` padded with zeros to L shards), or through the node's
    shared rows of bucket ``index`` (CPU tensors, PG_SPARSE_INTRA_NODE=shm)."""
    n = x.numel()
    rows = _shared_rows(topo, index, full) if index >= 0 else None
    if rows is not None:
        # Barrier 1: every local rank has read the last call's result out of
        # row 0 (stage 3), so the rows may be written again.
        dist.barrier(group=topo.node_group)
        mine = rows[topo.local_rank]
        mine[:n].copy_(x.view(-1))
        mine[n:].zero_()
        dist.barrier(group=topo.node_group)  # barrier 2: every row written
        s = shard.numel()
        lo = topo.local_rank * s
        torch.sum(rows[:, lo:lo + s], dim=0, out=shard)
        return shard
    full[:n].copy_(x.view(-1))
    full[n:].zero_()  # the allgather left shard values in the padding
    _REDUCE_SCATTER(shard, full, group=topo.node_group)
    return shard


def all_gather(topo: Topology, shard: torch.Tensor, full: torch.Tensor,
               n: int, index: int = -1) -> torch.Tensor:
    """The node's shards put together in ``full``, the padding cut off."""
    rows = topo._rows.get(index) if index >= 0 else None
    if rows is not None:
        # Row 0's slice of this rank is read by this rank alone in stage 1,
        # so it takes the result without a barrier before; one after.
        s = shard.numel()
        lo = topo.local_rank * s
        rows[0, lo:lo + s].copy_(shard)
        dist.barrier(group=topo.gather_group)
        full.copy_(rows[0])
        return full[:n]
    _ALL_GATHER(full, shard, group=topo.gather_group)
    return full[:n]


def _shared_rows(topo: Topology, index: int, full: torch.Tensor) -> torch.Tensor | None:
    """Bucket ``index``'s L rows of ``full``'s size in an owner-only segment
    under /dev/shm (:mod:`pg_sparse._shm`), mapped by every local rank (made
    on the first call, collective over the node group, on the
    reduce-scatter stage's thread); None on CUDA tensors, with
    PG_SPARSE_INTRA_NODE=group, or where /dev/shm could not hold it on some
    local rank (then every rank of the node uses the group). A segment that
    is not the job's own (planted under its name, another owner or mode)
    raises :class:`~pg_sparse._shm.SegmentError` on every local rank."""
    if index in topo._rows:
        rows = topo._rows[index]
        if rows is None or (rows.shape[1] == full.numel() and rows.dtype == full.dtype):
            return rows
    if full.device.type != "cpu" or str(param("PG_SPARSE_INTRA_NODE")) != "shm":
        topo._rows[index] = None
        return None
    nbytes = topo.local_size * full.numel() * full.element_size()
    # The leader's path and status (last byte), then every rank's status.
    msg = torch.zeros(_NAME_BYTES + 1, dtype=torch.uint8)
    fd, status, problem = -1, _SHM_OK, ""
    if topo.local_rank == 0:
        path = _shm.new_path(index)
        fd, status, problem = _try(lambda: _shm.create(path, nbytes))
        msg[:len(path)] = torch.tensor(list(path.encode()), dtype=torch.uint8)
        msg[-1] = status
    dist.broadcast(msg, src=dist.get_rank() - topo.local_rank, group=topo.node_group)
    name = msg[:-1]
    path = bytes(name[name != 0].tolist()).decode()
    if topo.local_rank != 0:
        status = int(msg[-1])
        if status == _SHM_OK:
            fd, status, problem = _try(lambda: _shm.open_checked(path, nbytes))
    rows = None
    if status == _SHM_OK:
        rows = _shm.map_rows(fd, topo.local_size, full.numel(), full.dtype)
    elif fd >= 0:
        os.close(fd)
    agreed = torch.tensor([status], dtype=torch.int32)
    dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=topo.node_group)
    if topo.local_rank == 0 and msg[-1] != _SHM_UNSAFE:  # every rank holds it: unlink
        with contextlib.suppress(OSError):
            os.unlink(path)
    if agreed.item() == _SHM_UNSAFE:
        detail = problem or (f"{path}: another local rank found it is not this job's own "
                             "(planted under the job's name, another owner, or a mode other "
                             "than 0600)")
        raise _shm.SegmentError(
            f"pg_sparse: refused a shared-memory segment of hierarchy='node': {detail}; "
            "PG_SPARSE_INTRA_NODE=group reduces through the process group instead")
    topo._rows[index] = rows if agreed.item() == _SHM_OK else None
    return topo._rows[index]


_NAME_BYTES = 96
_SHM_OK, _SHM_UNAVAILABLE, _SHM_UNSAFE = 0, 1, 2


def _try(make: Callable[[], int]) -> tuple[int, int, str]:
    """``make()``'s descriptor and status: unsafe for a segment that is not
    the job's own, unavailable where /dev/shm cannot hold it."""
    try:
        return make(), _SHM_OK, ""
    except _shm.SegmentError as e:
        return -1, _SHM_UNSAFE, str(e)
    except OSError:
        return -1, _SHM_UNAVAILABLE, ""
