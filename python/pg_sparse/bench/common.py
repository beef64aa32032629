"""What every suite shares: the run's context, timing statistics, and the
three outputs (JSON, a markdown table, PNG plots)."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Context:
    """Where a measurement was taken; printed above and stored beside every
    figure so no number travels without its machine."""

    machine: str
    cpus: int
    card: str
    torch: str
    world_size: int = 1
    transport: str = "-"
    link: str = "unshaped"
    date: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M:%S %Z"))
    note: str = ""

    def line(self) -> str:
        """One line for the console and the report."""
        extra = f"; {self.note}" if self.note else ""
        return (f"machine: {self.machine} ({self.cpus} cpus); card: {self.card}; "
                f"torch {self.torch}; P={self.world_size}; transport: {self.transport}; "
                f"link: {self.link}{extra}")


def cpu_name() -> str:
    """The CPU model as /proc/cpuinfo names it (platform's answer elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def card_name(device: str = "cpu") -> str:
    """The accelerator that ran the figures: a CUDA device's name, or "none"."""
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return "none (CPU)"


def ranks_on_machine(world_size: int) -> int:
    """Ranks sharing this machine's cores: PG_SPARSE_BENCH_MACHINE_RANKS (the
    network harness sets it: its namespaces share one machine, each with a
    LOCAL_WORLD_SIZE of its own), else LOCAL_WORLD_SIZE, else the world."""
    from .._params import param

    return int(param("PG_SPARSE_BENCH_MACHINE_RANKS") or os.environ.get("LOCAL_WORLD_SIZE")
               or world_size)


def context(world_size: int = 1, transport: str = "-", link: str | None = None,
            device: str = "cpu", note: str = "") -> Context:
    """The context of this process. ``link`` defaults to PG_SPARSE_BENCH_LINK,
    which the network harness sets for the ranks it launches. When ranks
    outnumber the cores, the note says so first."""
    import torch

    if link is None:
        from .._params import param

        link = str(param("PG_SPARSE_BENCH_LINK"))
    ranks, cpus = ranks_on_machine(world_size), os.cpu_count() or 1
    if ranks > cpus:
        note = f"{ranks} ranks on {cpus} cores" + (f"; {note}" if note else "")
    return Context(machine=f"{platform.node()}: {cpu_name()}", cpus=os.cpu_count() or 1,
                   card=card_name(device), torch=torch.__version__,
                   world_size=world_size, transport=transport, link=link, note=note)


# -- arguments and data -----------------------------------------------------

def parse_size(text: str) -> int:
    """``"4M"`` -> 4194304 (K, M, G are powers of 1024; plain integers too)."""
    import argparse

    t = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    if mult > 1:
        t = t[:-1]
    try:
        value = int(float(t) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"size must be >= 1, got {text!r}")
    return value


def parse_sizes(text: str) -> list[int]:
    """A comma-separated list of sizes (see :func:`parse_size`)."""
    return [parse_size(s) for s in text.split(",") if s.strip()]


def parse_floats(text: str) -> list[float]:
    """A comma-separated list of floats."""
    return [float(s) for s in text.split(",") if s.strip()]


def size_label(n: int) -> str:
    """4194304 -> "4M": the inverse of :func:`parse_size` where exact."""
    for unit, mult in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{unit}"
    return str(n)


def heavy_tailed(n: int, seed: int, scale: float = 1.0) -> Any:
    """``n`` gradient-like float32 values on the CPU, deterministic in
    ``seed``: normals times a log-normal scale (a normal variance mixture,
    heavier-tailed than a normal, as real gradients are)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=gen)
    x.mul_(torch.randn(n, generator=gen).mul_(0.75).exp_())
    return x.mul_(scale)


# -- timing -----------------------------------------------------------------

@dataclass
class Timing:
    """Repeated measurements of one thing, in seconds."""

    samples: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def spread(self) -> tuple[float, float]:
        """(min, max): the spread a noisy machine owes its reader."""
        return min(self.samples), max(self.samples)

    def as_dict(self) -> dict[str, Any]:
        lo, hi = self.spread
        return {"median_s": self.median, "min_s": lo, "max_s": hi, "samples_s": self.samples}


def time_calls(fn: Callable[[], Any], repeats: int, warmup: int = 1,
               sync: Callable[[], None] | None = None) -> Timing:
    """Wall time of ``fn`` over ``repeats`` calls after ``warmup`` calls;
    ``sync`` (e.g. torch.cuda.synchronize) runs after each call inside the
    timed region."""
    for _ in range(warmup):
        fn()
        if sync:
            sync()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        samples.append(time.perf_counter() - t0)
    return Timing(samples)


# -- outputs ----------------------------------------------------------------

def out_dir(path: str | os.PathLike[str]) -> Path:
    """The output folder, created."""
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    return p


def write_json(path: Path, ctx: Context, rows: Sequence[dict[str, Any]],
               **extra: Any) -> Path:
    """``{"context": ..., "rows": [...], **extra}`` as indented JSON."""
    path.write_text(json.dumps({"context": asdict(ctx), "rows": list(rows), **extra},
                               indent=1, default=float) + "\n")
    return path


def read_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A suite's JSON file as written by :func:`write_json`."""
    return json.loads(Path(path).read_text())


def fmt(v: Any) -> str:
    """A cell: floats to 4 significant digits, big ints with separators."""
    if isinstance(v, bool) or v is None:
        return "" if v is None else str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str],
                   headers: Sequence[str] | None = None) -> str:
    """A markdown table of ``rows`` restricted to ``columns``."""
    heads = list(headers or columns)
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for r in rows:
        lines.append("| " + " | ".join(fmt(r.get(c)) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def write_markdown(path: Path, title: str, ctx: Context, body: Iterable[str]) -> Path:
    """A markdown file: title, the context line, then the given blocks."""
    path.write_text(f"# {title}\n\n{ctx.line()}\n\n" + "\n".join(body) + "\n")
    return path


def pyplot():  # type: ignore[no-untyped-def]
    """matplotlib's pyplot on the Agg backend (no display here or in CI)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def log_axes(ax: Any, xlabel: str, ylabel: str, title: str) -> None:
    """Log-log axes with labels, title and a small legend."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2)


def save_figure(fig: Any, path: Path, ctx: Context) -> Path:
    """Save a figure with the context as a footnote, then close it."""
    # Below the axes (the tight bounding box grows to hold it), clear of
    # the x label.
    fig.text(0.01, -0.01, ctx.line(), fontsize=6, color="0.35", wrap=True, va="top")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    pyplot().close(fig)
    return path
