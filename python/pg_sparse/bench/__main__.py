"""``python -m pg_sparse.bench SUITE ...``: one argparse subcommand a suite.

Each suite module defines ``add_arguments(parser)`` and ``main(args) -> int``
and keeps its heavy imports (transformers, matplotlib, the native module)
inside functions, so parsing any suite stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

SUITES: dict[str, str] = {
    # name: one line of help; the module pg_sparse.bench.<name> implements it.
    "kernels": "selection pass and exact k-th |x| vs torch.topk and a streaming floor",
    "collectives": "one call of every algorithm and dense: time and words per rank",
    "estimators": "GaussianK's selection with each threshold estimator vs exact and topk",
    "ddp": "DDP step time of real architectures: every hook and torch's baselines",
    "net": "network namespaces on a bridge, links shaped with tc (root)",
    "sweep": "the ddp suite across link rates, crossover against dense",
    "model": "alpha-beta model fitted to measurements, projected to large P",
}


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser; each suite adds its own arguments."""
    parser = argparse.ArgumentParser(
        prog="python -m pg_sparse.bench",
        description="pg_sparse benchmarks with same-run baselines")
    sub = parser.add_subparsers(dest="suite", required=True, metavar="SUITE")
    for name, help_text in SUITES.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        _module(name).add_arguments(p)
        p.set_defaults(_suite=name)
    return parser


def _module(name: str):  # type: ignore[no-untyped-def]
    return importlib.import_module(f"pg_sparse.bench.{name}")


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m pg_sparse.bench``."""
    args = build_parser().parse_args(argv)
    return int(_module(args._suite).main(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
