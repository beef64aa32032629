"""``python -m pg_sparse params``: the parameter table with current values."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m pg_sparse")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("params", help="print every PG_SPARSE_* parameter, its value "
                   "in effect (* = set in the environment), default and meaning")
    sub.add_parser("algorithms", help="print the sparse allreduce algorithms")
    args = parser.parse_args(argv)
    from . import ALGORITHMS, format_params, params
    if args.command == "params":
        print(format_params())
        return 1 if any(p.value is None for p in params()) else 0
    print("\n".join(ALGORITHMS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
