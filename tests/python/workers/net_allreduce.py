"""One sparse-backend all_reduce across network namespaces (test_bench_net.py):
rank r contributes r + 1 everywhere; the sum must be W(W+1)/2. With
``--fail-rank R`` rank R exits with code 3 instead (cleanup-on-error test)."""

from __future__ import annotations

import os
import sys
from datetime import timedelta

from common import Recorder, parse_args


def main() -> None:
    args = parse_args(lambda p: p.add_argument("--fail-rank", type=int, default=-1))
    import torch
    import torch.distributed as dist

    import pg_sparse

    rank = int(os.environ["RANK"])
    if rank == args.fail_rank:
        print(f"rank {rank}: failing on purpose", flush=True)
        sys.exit(3)
    dist.init_process_group("sparse", timeout=timedelta(seconds=30))
    world = dist.get_world_size()
    rec = Recorder(args.out, dist.get_rank(), world)
    rec.info.update({
        "transport": pg_sparse._C._transport_of(dist.group.WORLD._get_backend(torch.device("cpu"))),
        "link": os.environ.get("PG_SPARSE_BENCH_LINK"),
        "gloo_ifname": os.environ.get("GLOO_SOCKET_IFNAME"),
        "master_addr": os.environ.get("MASTER_ADDR"),
    })

    def allreduce() -> str:
        t = torch.full((1000,), float(dist.get_rank() + 1))
        dist.all_reduce(t)
        want = world * (world + 1) / 2
        assert torch.all(t == want), f"got {t[:4].tolist()}, want {want}"
        return f"sum {want} over {world} ranks"

    rec.run("allreduce", allreduce)
    dist.destroy_process_group()
    rec.finish()


if __name__ == "__main__":
    main()
