"""The convergence tasks: data that ships offline, a model, and the recipe
(optimizer, learning rate, batch, steps) that dense training uses.

- ``digits``: a small CNN on scikit-learn's 8x8 digits, SGD + Nesterov momentum;
- ``mnist1d``: a 1-D CNN on MNIST-1D, generated locally by the ``mnist1d``
  package (``make_dataset``: no download), SGD momentum 0.9;
- ``lstm``: a character-level LSTM language model, SGD momentum 0.9 with
  gradient clipping;
- ``gpt``: a GPT-2 (``transformers``' architecture, random weights, 2 layers)
  character-level language model, AdamW.

The text corpus of both language models is the English ``fortunes`` Debian
package (/usr/share/games/fortunes: quotations, jokes, poems; about 2 MB).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

import pg_sparse

SEQ = 32  # characters per language-model sequence
FORTUNES = Path(str(pg_sparse.param("PG_SPARSE_FORTUNES")))


@dataclass
class Recipe:
    """How dense training runs a task; every method uses the same."""

    optimizer: str  # "sgd", "nesterov" or "adamw"
    lr: float
    batch: int  # per rank
    steps: int
    eval_every: int
    momentum: float = 0.9
    weight_decay: float = 0.0
    clip: float = 0.0  # max gradient norm, 0: none
    lr_warmup: int = 0  # linear learning-rate warm-up steps (AdamW)
    # "constant" after the warm-up, or "cosine": down to a tenth of lr at the
    # last step (nanoGPT's and Chinchilla's schedule), so training ends flat.
    lr_decay: str = "constant"
    betas: tuple[float, float] = (0.9, 0.999)  # AdamW's


@dataclass
class Task:
    """A task: model factory, batch sampler, evaluation and recipe."""

    name: str
    metric: str  # "accuracy" (%, higher is better) or "perplexity" (lower)
    recipe: Recipe
    build: Callable[[], nn.Module]
    batch: Callable[[torch.Generator, int], tuple[torch.Tensor, torch.Tensor]]
    loss: Callable[[nn.Module, tuple[torch.Tensor, torch.Tensor]], torch.Tensor]
    evaluate: Callable[[nn.Module], float]

    @property
    def higher_is_better(self) -> bool:
        return self.metric == "accuracy"


# -- classification -------------------------------------------------------
def _classification(name: str, x_train: np.ndarray, y_train: np.ndarray,
                    x_test: np.ndarray, y_test: np.ndarray,
                    build: Callable[[], nn.Module], recipe: Recipe) -> Task:
    xt, yt = torch.tensor(x_train, dtype=torch.float32), torch.tensor(y_train).long()
    xv, yv = torch.tensor(x_test, dtype=torch.float32), torch.tensor(y_test).long()

    def batch(gen: torch.Generator, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.randint(0, len(xt), (size,), generator=gen)
        return xt[idx], yt[idx]

    def loss(model: nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return nn.functional.cross_entropy(model(b[0]), b[1])

    @torch.no_grad()
    def evaluate(model: nn.Module) -> float:
        model.eval()
        acc = float((model(xv).argmax(1) == yv).float().mean()) * 100.0
        model.train()
        return acc

    return Task(name, "accuracy", recipe, build, batch, loss, evaluate)


def digits_task(steps: int | None = None) -> Task:
    """A small CNN on scikit-learn's digits (1437 train, 360 test images)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0 - 0.5).reshape(-1, 1, 8, 8)
    xa, xb, ya, yb = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)

    def build() -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * 16, 128), nn.ReLU(), nn.Linear(128, 10))

    recipe = Recipe("nesterov", lr=0.05, batch=16, steps=steps or 400, eval_every=20)
    return _classification("digits", xa, ya, xb, yb, build, recipe)


def mnist1d_task(steps: int | None = None) -> Task:
    """A 1-D CNN on MNIST-1D (4000 train, 1000 test sequences of 40)."""
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()  # the paper's settings, seed 42; generated here
    data = make_dataset(args)
    mean, std = data["x"].mean(), data["x"].std()
    xa = ((data["x"] - mean) / std)[:, None, :]
    xb = ((data["x_test"] - mean) / std)[:, None, :]

    def build() -> nn.Module:
        return nn.Sequential(
            nn.Conv1d(1, 32, 5, padding=2), nn.ReLU(),
            nn.Conv1d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool1d(2),
            nn.Conv1d(64, 64, 3, padding=1), nn.ReLU(), nn.MaxPool1d(2),
            nn.Flatten(), nn.Linear(64 * 10, 128), nn.ReLU(), nn.Linear(128, 10))

    recipe = Recipe("sgd", lr=0.05, batch=32, steps=steps or 500, eval_every=25)
    return _classification("mnist1d", xa, data["y"], xb, data["y_test"], build, recipe)


# -- language modelling ---------------------------------------------------
@dataclass
class Corpus:
    """A character-level corpus: integer streams and the alphabet."""

    train: torch.Tensor
    valid: torch.Tensor
    vocab: int


def load_fortunes(root: Path = FORTUNES) -> Corpus:
    """The English fortunes, split by cookie (every tenth to validation),
    printable ASCII plus newline; every other byte becomes a space."""
    files = sorted(p for p in root.iterdir()
                   if p.is_file() and not p.is_symlink() and p.suffix == "")
    if not files:
        raise FileNotFoundError(f"no fortune files in {root}: apt-get install fortunes")
    cookies: list[bytes] = []
    for p in files:
        cookies += [c.strip(b"\n") for c in p.read_bytes().split(b"\n%\n") if c.strip()]
    train = b"\n\n".join(c for i, c in enumerate(cookies) if i % 10)
    valid = b"\n\n".join(c for i, c in enumerate(cookies) if i % 10 == 0)
    table = np.full(256, 0, dtype=np.int64)  # 0: the space
    alphabet = [10] + list(range(32, 127))
    table[alphabet] = np.arange(1, len(alphabet) + 1)
    table[32] = 0
    def encode(b: bytes) -> torch.Tensor:
        return torch.from_numpy(table[np.frombuffer(b, dtype=np.uint8)])
    return Corpus(encode(train), encode(valid), len(alphabet) + 1)


def _language_model(name: str, corpus: Corpus, seq: int,
                    build: Callable[[], nn.Module], recipe: Recipe,
                    eval_chars: int = 16384) -> Task:
    data, valid = corpus.train, corpus.valid[:eval_chars + 1]
    n_eval = (len(valid) - 1) // seq
    xv = valid[:n_eval * seq].view(n_eval, seq)
    yv = valid[1:n_eval * seq + 1].view(n_eval, seq)

    def batch(gen: torch.Generator, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = torch.randint(0, len(data) - seq - 1, (size, 1), generator=gen)
        idx = start + torch.arange(seq + 1)
        chunk = data[idx]
        return chunk[:, :-1], chunk[:, 1:]

    def loss(model: nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        logits = model(b[0])
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                           b[1].reshape(-1))

    @torch.no_grad()
    def evaluate(model: nn.Module) -> float:
        model.eval()
        total = 0.0
        for i in range(0, n_eval, 128):
            logits = model(xv[i:i + 128])
            total += float(nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), yv[i:i + 128].reshape(-1),
                reduction="sum"))
        model.train()
        return math.exp(total / yv.numel())  # perplexity per character

    return Task(name, "perplexity", recipe, build, batch, loss, evaluate)


class CharLSTM(nn.Module):
    """Embedding, one LSTM layer, a linear read-out."""

    def __init__(self, vocab: int, embed: int = 32, hidden: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.lstm(self.embed(x))
        return self.out(h)


def lstm_task(steps: int | None = None) -> Task:
    """Character-level LSTM language model on the fortunes corpus."""
    corpus = load_fortunes()
    recipe = Recipe("sgd", lr=2.0, batch=16, steps=steps or 400, eval_every=40, clip=1.0)
    return _language_model("lstm", corpus, SEQ, lambda: CharLSTM(corpus.vocab), recipe)


class CharGPT(nn.Module):
    """transformers' GPT-2 architecture from a configuration (random
    weights), returning the logits."""

    def __init__(self, vocab: int, seq: int, layers: int = 2, width: int = 96,
                 heads: int = 4) -> None:
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = GPT2Config(vocab_size=vocab, n_positions=seq, n_embd=width, n_layer=layers,
                         n_head=heads, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                         bos_token_id=0, eos_token_id=0)
        self.gpt = GPT2LMHeadModel(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gpt(input_ids=x).logits


def gpt_task(steps: int | None = None) -> Task:
    """Character-level GPT-2 (2 layers, width 96) on the fortunes corpus."""
    corpus = load_fortunes()
    recipe = Recipe("adamw", lr=3e-3, batch=12, steps=steps or 240, eval_every=24,
                    weight_decay=0.01, lr_warmup=20, clip=1.0)
    return _language_model("gpt", corpus, SEQ, lambda: CharGPT(corpus.vocab, SEQ), recipe)


def load_python_source(limit: int = 3_000_000) -> Corpus:
    """Python's own standard library source (the running interpreter's
    ``*.py`` files, sorted, at most ``limit`` bytes), every tenth file to
    validation, in the fortunes' alphabet: real text of another kind."""
    import sysconfig

    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if p.is_file())
    if not files:
        raise FileNotFoundError(f"no Python sources in {root}")
    train, valid, size = [], [], 0
    for i, p in enumerate(files):
        b = p.read_bytes()
        (valid if i % 10 == 0 else train).append(b)
        size += len(b)
        if size >= limit:
            break
    table = np.full(256, 0, dtype=np.int64)
    alphabet = [10] + list(range(32, 127))
    table[alphabet] = np.arange(1, len(alphabet) + 1)
    table[32] = 0

    def encode(parts: list[bytes]) -> torch.Tensor:
        return torch.from_numpy(table[np.frombuffer(b"\n".join(parts), dtype=np.uint8)])
    return Corpus(encode(train), encode(valid), len(alphabet) + 1)


def gptcode_task(steps: int | None = None) -> Task:
    """Held out (never used to choose a default): a wider character-level
    GPT-2 (3 layers, width 128) on Python's standard library source, AdamW
    (weight decay 0.1, betas 0.9/0.95) with warm-up and cosine decay,
    gradient clipping at 1."""
    corpus = load_python_source()
    recipe = Recipe("adamw", lr=2e-3, batch=16, steps=steps or 300, eval_every=30,
                    weight_decay=0.1, lr_warmup=30, clip=1.0, lr_decay="cosine",
                    betas=(0.9, 0.95))
    return _language_model("gptcode", corpus, 48,
                           lambda: CharGPT(corpus.vocab, 48, layers=3, width=128), recipe)


def gpt25m_task(steps: int | None = None) -> Task:
    """The time-to-accuracy task (never used to choose a default): a
    character-level GPT-2 of 25.3M parameters (8 layers, width 512, 8 heads,
    64 characters of context) on the fortunes corpus, AdamW (weight decay
    0.1, betas 0.9/0.95) with warm-up and cosine decay, clipping at 1. Its
    dense fp32 gradient is 101 MB, so at 1 Gbit/s a ring allreduce (about
    1.2 s a step) costs more than the step's compute on one core."""
    corpus = load_fortunes()
    recipe = Recipe("adamw", lr=1e-3, batch=4, steps=steps or 150, eval_every=15,
                    weight_decay=0.1, lr_warmup=15, clip=1.0, lr_decay="cosine",
                    betas=(0.9, 0.95))
    return _language_model("gpt25m", corpus, 64,
                           lambda: CharGPT(corpus.vocab, 64, layers=8, width=512, heads=8),
                           recipe, eval_chars=4096)


TASKS: dict[str, Callable[..., Task]] = {
    "digits": digits_task, "mnist1d": mnist1d_task, "lstm": lstm_task, "gpt": gpt_task,
    "gptcode": gptcode_task, "gpt25m": gpt25m_task}


def optimizer(task: Task, params: list[nn.Parameter], plain_sgd: bool = False
              ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """The task's optimizer and schedule. ``plain_sgd``: momentum (or, for
    AdamW, all of Adam) moved into the comm hook, so the optimizer is SGD
    without momentum, with the recipe's weight decay (with Adam in the hook
    that is AdamW's decoupled decay exactly)."""
    r = task.recipe
    if r.optimizer == "adamw" and not plain_sgd:
        opt: torch.optim.Optimizer = torch.optim.AdamW(params, lr=r.lr, betas=r.betas,
                                                       weight_decay=r.weight_decay)
    else:
        momentum = 0.0 if plain_sgd else r.momentum
        opt = torch.optim.SGD(params, lr=r.lr, momentum=momentum,
                              nesterov=r.optimizer == "nesterov" and not plain_sgd,
                              weight_decay=r.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(r, s))
    return opt, sched


def lr_factor(r: Recipe, step: int) -> float:
    """The learning rate of step ``step`` (0-based) as a fraction of ``r.lr``."""
    warm = max(1, r.lr_warmup)
    if step + 1 < warm:
        return (step + 1) / warm
    if r.lr_decay == "constant":
        return 1.0
    span = max(1, r.steps - warm)
    frac = min(1.0, (step + 1 - warm) / span)
    return 0.1 + 0.45 * (1.0 + math.cos(math.pi * frac))
