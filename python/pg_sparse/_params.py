"""The parameter table: every ``PG_SPARSE_*`` environment variable, defined
once in the C core (``pg_sparse/include/pg_sparse/param.h``) and read here
through the native module."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Union

from . import _C

logger = logging.getLogger("pg_sparse")

Value = Union[int, float, str]
_logged: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class Param:
    """One row of the table and the value in effect.

    Attributes:
        name: the environment variable, ``PG_SPARSE_...``.
        type: ``"int"``, ``"float"`` or ``"str"``.
        default: the default, as text.
        choices: the allowed strings (``("auto", "mpi", "gloo")``), or None.
        min, max: the bounds of a number (inclusive).
        doc: one line.
        set: whether the variable is set in the environment.
        text: its text in effect (the environment's, else the default).
        value: the parsed value in effect; None when ``text`` is invalid.
    """

    name: str
    type: str
    default: str
    choices: tuple[str, ...] | None
    min: float
    max: float
    doc: str
    set: bool
    text: str
    value: Value | None


def _row(r: dict) -> Param:
    choices = tuple(r["choices"].split("|")) if r["choices"] else None
    return Param(r["name"], r["type"], r["default"], choices, r["min"], r["max"],
                 r["doc"], r["set"], r["text"], r["value"])


def params() -> list[Param]:
    """Every ``PG_SPARSE_*`` parameter with its default and current value."""
    return [_row(r) for r in _C._params()]


def _problem(p: Param) -> str:
    if p.choices is not None:
        return f"choose one of {', '.join(p.choices)}"
    if p.type in ("int", "float"):
        kind = "an integer" if p.type == "int" else "a number"
        return f"expected {kind} in [{p.min:g}, {p.max:g}]"
    return "invalid"


def param(name: str) -> Value:
    """The value in effect of parameter ``name`` (``"PG_SPARSE_LOG"``).

    Raises:
        ValueError: the name is not in the table, or its value is invalid.
    """
    r = _C._param(name)
    if r is None:
        raise ValueError(f"pg_sparse: no parameter {name!r}; see `python -m pg_sparse params`")
    p = _row(r)
    if p.value is None:
        raise ValueError(f"pg_sparse: {name}={p.text!r} is invalid: {_problem(p)}")
    return p.value


def check_params() -> None:
    """Validate every ``PG_SPARSE_*`` variable set and log each once (info).

    Raises:
        ValueError: naming every invalid or unknown ``PG_SPARSE_*`` variable.
    """
    table = params()
    known = {p.name for p in table}
    errors = [f"{p.name}={p.text!r}: {_problem(p)}" for p in table if p.value is None]
    errors += [f"{name}: not a pg_sparse parameter (a typo?)"
               for name in sorted(os.environ) if name.startswith("PG_SPARSE_")
               and name not in known]
    if errors:
        raise ValueError("pg_sparse: bad environment: " + "; ".join(errors)
                         + " (see `python -m pg_sparse params`)")
    for p in table:
        if p.set and (p.name, p.text) not in _logged:
            _logged.add((p.name, p.text))
            logger.info("%s=%s (default %s)", p.name, p.text, p.default)


def format_params(rows: list[Param] | None = None) -> str:
    """The table as text: name, value in effect, default, and doc line."""
    rows = params() if rows is None else rows
    width = max(len(p.name) for p in rows)
    lines = []
    for p in rows:
        value = p.text if p.value is not None else f"{p.text!r} (INVALID)"
        mark = "*" if p.set else " "
        lines.append(f"{mark} {p.name:<{width}}  {value}  [{p.type}, default {p.default}]")
        lines.append(f"  {'':<{width}}  {p.doc}")
    return "\n".join(lines)
