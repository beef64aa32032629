"""The DDP suite's model zoo: real architectures built from their
configurations with random weights and synthetic inputs (nothing is
downloaded; the transformers models need only the ``transformers`` package).

Each entry is a :class:`ModelSpec`: how to build the module, how to make one
rank's batch, and the loss of a batch. Default sizes keep a CPU step in
seconds, not minutes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass
class ModelSpec:
    """One model of the zoo.

    ``make_batch(generator, batch, seq)`` returns one rank's inputs;
    ``loss(model, batch)`` runs the forward pass and returns a scalar loss.
    ``seq`` is the sequence length (transformers) or the image side
    (ResNet); unused by the MLPs.
    """

    name: str
    build: Callable[[], nn.Module]
    make_batch: Callable[[torch.Generator, int, int], Any]
    loss: Callable[[nn.Module, Any], torch.Tensor]
    batch: int
    seq: int
    describe: Callable[[int, int], str]


def _mlp(width: int, depth: int, out: int | None = None) -> nn.Module:
    layers: list[nn.Module] = []
    for i in range(depth):
        last = i == depth - 1
        layers.append(nn.Linear(width, out if (last and out) else width))
        if not last:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _mse(model: nn.Module, batch: Any) -> torch.Tensor:
    x, y = batch
    return nn.functional.mse_loss(model(x), y)


def _ce(model: nn.Module, batch: Any) -> torch.Tensor:
    x, y = batch
    return nn.functional.cross_entropy(model(x), y)


def _tiny() -> ModelSpec:
    # For tests: 3 layers, ~7k parameters, no dropout (deterministic).
    def build() -> nn.Module:
        return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                             nn.Linear(64, 10))

    def batch(g: torch.Generator, b: int, _seq: int) -> Any:
        return torch.randn(b, 32, generator=g), torch.randint(0, 10, (b,), generator=g)

    return ModelSpec("tiny", build, batch, _ce, batch=8, seq=0,
                     describe=lambda b, _s: f"MLP 32-64-64-10, batch {b}, CE loss")


def _mlp25m() -> ModelSpec:
    # The reference model: 6 x Linear(2048, 2048), ReLU between,
    # 25,178,112 parameters.
    def batch(g: torch.Generator, b: int, _seq: int) -> Any:
        return torch.randn(b, 2048, generator=g), torch.randn(b, 2048, generator=g)

    return ModelSpec("mlp25m", lambda: _mlp(2048, 6), batch, _mse, batch=32, seq=0,
                     describe=lambda b, _s: f"6 x Linear(2048, 2048) + ReLU, batch {b}, "
                                            "MSE loss")


def _resnet50() -> ModelSpec:
    def build() -> nn.Module:
        import transformers

        # ResNetConfig()'s defaults are ResNet-50 (bottleneck, 3-4-6-3).
        return transformers.ResNetForImageClassification(
            transformers.ResNetConfig(num_labels=1000))

    def batch(g: torch.Generator, b: int, side: int) -> Any:
        return (torch.randn(b, 3, side, side, generator=g),
                torch.randint(0, 1000, (b,), generator=g))

    def loss(model: nn.Module, b: Any) -> torch.Tensor:
        x, y = b
        return model(pixel_values=x, labels=y).loss

    return ModelSpec("resnet50", build, batch, loss, batch=4, seq=64,
                     describe=lambda b, s: f"ResNet-50 (transformers, 1000 classes), "
                                           f"batch {b} x 3 x {s} x {s}, CE loss")


def _tokens(vocab: int) -> Callable[[torch.Generator, int, int], Any]:
    def batch(g: torch.Generator, b: int, seq: int) -> Any:
        return torch.randint(0, vocab, (b, seq), generator=g)

    return batch


def _lm_loss(model: nn.Module, ids: Any) -> torch.Tensor:
    return model(input_ids=ids, labels=ids).loss


def _bert() -> ModelSpec:
    def build() -> nn.Module:
        import transformers

        return transformers.BertForMaskedLM(transformers.BertConfig())

    return ModelSpec("bert-base", build, _tokens(30522), _lm_loss, batch=2, seq=32,
                     describe=lambda b, s: f"BERT-base masked LM (transformers BertConfig()), "
                                           f"batch {b} x {s} tokens")


def _gpt2() -> ModelSpec:
    def build() -> nn.Module:
        import transformers

        return transformers.GPT2LMHeadModel(transformers.GPT2Config())

    return ModelSpec("gpt2", build, _tokens(50257), _lm_loss, batch=2, seq=32,
                     describe=lambda b, s: f"GPT-2 small LM head (transformers GPT2Config()), "
                                           f"batch {b} x {s} tokens")


MODELS: dict[str, Callable[[], ModelSpec]] = {
    "tiny": _tiny, "mlp25m": _mlp25m, "resnet50": _resnet50,
    "bert-base": _bert, "gpt2": _gpt2,
}


def get_model(name: str) -> ModelSpec:
    """The zoo entry ``name`` (one of :data:`MODELS`)."""
    try:
        return MODELS[name]()
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(MODELS)}") from None
