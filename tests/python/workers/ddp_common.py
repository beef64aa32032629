"""Shared pieces of the DDP hook workers (ddp.py, ddp_optim.py): the job's
context, a small MLP, per-rank data, a training loop and a stand-in for
DDP's GradBucket."""

from __future__ import annotations

from collections.abc import Callable

HALF = ("float16", "bfloat16")
EQ_SIZES = (16, 64, 32, 4)      # 3,300 parameters
EQ_BUCKET_MB = 0.004            # about 1,000 floats a bucket: several buckets
EQ_STEPS, EQ_TOL = 20, 1e-5


class Ctx:
    torch = dist = nn = F = DDP = pg_sparse = None
    rank = world_size = 0
    gloo = None
    cache: dict = {}


C = Ctx()


def mlp(sizes, seed: int, dtype=None):
    torch, nn = C.torch, C.nn
    torch.manual_seed(seed)
    layers = []
    for a, b in zip(sizes, sizes[1:]):
        layers += [nn.Linear(a, b), nn.Tanh()]
    model = nn.Sequential(*layers[:-1])
    return model.to(dtype) if dtype is not None else model


def batch(salt: int, step: int, n: int, sizes, dtype=None):
    """Data of this rank at ``step``: identical across runs, different
    across ranks."""
    torch = C.torch
    g = torch.Generator().manual_seed(1_000_003 * salt + 1009 * step + C.rank)
    x = torch.randn(n, sizes[0], generator=g)
    y = torch.randn(n, sizes[-1], generator=g)
    if dtype is not None:
        x, y = x.to(dtype), y.to(dtype)
    return x, y


def train(model, opt, steps, data: Callable, after=None) -> list[float]:
    losses = []
    for s in steps:
        x, y = data(s)
        opt.zero_grad(set_to_none=True)
        loss = C.F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if after is not None:
            after(s)
    return losses


def params(model) -> list:
    return [p.detach().clone() for p in model.parameters()]


def max_diff(a: list, b: list) -> float:
    return max((x.double() - y.double()).abs().max().item() for x, y in zip(a, b))


def sgd(model, lr=0.05, momentum=0.9):
    return C.torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)


def eq_data(s):
    return batch(1, s, 32, EQ_SIZES)

class _Bucket:
    """What the hooks read of a DDP GradBucket."""

    def __init__(self, t) -> None:
        self.t = t

    def buffer(self):
        return self.t

    def index(self) -> int:
        return 0
