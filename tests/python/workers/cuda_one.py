"""The hook path on one GPU (runs wherever any GPU is lent): every rank on
cuda:0, at world size 1 under torchrun or 2-3 ranks sharing the GPU (NCCL
refuses two ranks on one device): under mpirun over the staged Open MPI
transport, and under PG_SPARSE_CUDA_TRANSPORT=auto (the default) staged
through the host transport, gloo under torchrun. Every algorithm's bucket
on a CUDA tensor against the same bucket on a CPU tensor, call by call on
the same data (outputs, residuals and statistics must agree exactly, as
the C-level parity tests find), a NaN failing both alike, and DDP on CUDA with each hook
against its CPU twin."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from workers.common import ALGOS, Recorder, parse_args  # noqa: E402


def main() -> None:
    args = parse_args()
    import torch
    import torch.distributed as dist

    import pg_sparse

    dist.init_process_group("sparse")
    rank, size = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    rec = Recorder(args.out, rank, size)

    def grad(n: int, step: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(1000 + step + 7919 * rank)
        x = torch.randn(n, generator=g)
        if step % 3 == 2:  # ties and zeros, as the C parity tests use
            x = (x * 4).round() / 4
        return x

    def bucket_parity(algo: str) -> Callable[[], str]:
        def check() -> str:
            n, calls = 100_003, 8
            kw = {"algo": algo, "density": 0.01, "warmup_steps": 1, "tau": 4, "tau_prime": 2}
            sc, sg = pg_sparse.SparseState(**kw), pg_sparse.SparseState(**kw)
            for step in range(calls):
                tc = grad(n, step)
                tg = tc.to(dev)
                bc, bg = sc.native_bucket(0, tc), sg.native_bucket(0, tg)
                bc.allreduce(tc).wait()
                bg.allreduce(tg).wait()
                torch.cuda.synchronize()
                assert torch.equal(tg.cpu(), tc), f"output differs at call {step}"
                assert torch.equal(bg.residual().cpu(), bc.residual()), \
                    f"residual differs at call {step}"
                stc, stg = bc.stats(), bg.stats()
                for key in ("local_selected", "global_selected", "local_threshold",
                            "global_threshold", "transport_calls", "candidates"):
                    assert stc[key] == stg[key], (step, key, stc[key], stg[key])
            return f"{calls} calls equal; last call {stg['host_syncs']:.0f} host syncs on the GPU"
        return check

    def nonfinite_both(algo: str) -> Callable[[], str]:
        def check() -> str:
            msgs = []
            for d in ("cpu", dev):
                st = pg_sparse.SparseState(algo=algo, density=0.1, warmup_steps=0)
                t = torch.randn(5000, device=d)
                t[77] = float("nan")
                b = st.native_bucket(0, t)
                try:
                    b.allreduce(t).wait()
                except RuntimeError as e:
                    msgs.append(str(e))
                else:
                    raise AssertionError(f"no error on {d}")
                assert not b.residual().any(), f"residual changed on {d}"
            assert all("NaN or Inf" in m for m in msgs), msgs
            return "both raise"
        return check

    def ddp_twin(algo: str) -> Callable[[], str]:
        """One DDP step per device with the same model and data, density 1.0
        (the sparse path with every entry selected: at a lower density the
        two devices' matmul rounding could move an entry across the
        threshold; bucket_parity checks selection exactly). The averaged
        gradients agree to that rounding."""
        from torch.nn.parallel import DistributedDataParallel as DDP

        def check() -> str:
            grads = {}
            for d in ("cpu", dev):
                torch.manual_seed(0)
                model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                            torch.nn.Linear(64, 8)).to(d)
                ddp = DDP(model, device_ids=[0] if d == dev else None)
                ddp.register_comm_hook(pg_sparse.SparseState(density=1.0, warmup_steps=0),
                                       pg_sparse.hooks.HOOKS[algo])
                x = torch.randn(16, 64, generator=torch.Generator().manual_seed(3 + rank))
                x = x.to(d)
                ddp(x).square().mean().backward()
                grads[str(d)] = torch.cat([p.grad.flatten().cpu() for p in model.parameters()])
            a, b = grads.values()
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), (a - b).abs().max()
            return f"max |cpu - cuda| {(a - b).abs().max().item():.2e}"
        return check

    def native_hook(algo: str) -> Callable[[], str]:
        """DDP on the GPU with the hook registered through
        hooks.register_comm_hook against the same hook registered in Python:
        the same parameters bit for bit after several steps, most calls made
        in C++ (the Work's future handed to DDP's reducer)."""
        from torch.nn.parallel import DistributedDataParallel as DDP

        def check() -> str:
            out, calls = [], 0
            for native in (False, True):
                torch.manual_seed(0)
                model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                            torch.nn.Linear(64, 8)).to(dev)
                ddp = DDP(model, device_ids=[0], bucket_cap_mb=0.01)
                state = pg_sparse.SparseState(density=0.05, warmup_steps=1)
                hook = pg_sparse.hooks.HOOKS[algo]
                if native:
                    pg_sparse.hooks.register_comm_hook(ddp, state, hook)
                else:
                    ddp.register_comm_hook(state, hook)
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                for step in range(6):
                    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(
                        step + 100 * rank)).to(dev)
                    opt.zero_grad()
                    ddp(x).square().mean().backward()
                    opt.step()
                torch.cuda.synchronize()
                out.append(torch.cat([p.detach().flatten().cpu() for p in model.parameters()]))
                if native:
                    calls = state._native_table.calls
            assert torch.equal(out[0], out[1]), (out[0] - out[1]).abs().max()
            assert calls > 0, "no call ran in C++"
            return f"equal; {calls} calls in C++"
        return check

    def cuda_transport() -> str:
        """The transport the CUDA tensors took (auto resolved), as the
        launch configuration expects, and a dense all_reduce over it."""
        backend = dist.group.WORLD._get_backend(dev)
        kind = pg_sparse._C._cuda_transport_of(backend)
        want = os.environ["PGS_EXPECT_CUDA_TRANSPORT"]
        assert kind == want, f"CUDA tensors took {kind!r}, expected {want!r}"
        t = torch.full((1000,), float(rank + 1), device=dev)
        dist.all_reduce(t)
        assert torch.equal(t.cpu(), torch.full((1000,), size * (size + 1) / 2)), t
        return kind

    for a in ALGOS:
        rec.run(f"bucket_parity_{a}", bucket_parity(a))
        rec.run(f"nonfinite_{a}", nonfinite_both(a))
        rec.run(f"ddp_twin_{a}", ddp_twin(a))
        rec.run(f"native_hook_{a}", native_hook(a))
    rec.run("cuda_transport", cuda_transport)
    rec.info["device"] = torch.cuda.get_device_name(dev)
    rec.finish()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
