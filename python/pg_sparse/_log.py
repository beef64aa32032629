"""Logging: one sink. The C core's messages and the package's own go to
``logging.getLogger("pg_sparse")`` (subsystems as children, e.g.
``pg_sparse.mpi``); the package adds only a ``NullHandler``.

``PG_SPARSE_LOG=error|warn|info|debug`` sets how much the core produces and
the level of the ``pg_sparse`` logger. When it is set and nothing is
configured to show the messages (no handler on ``pg_sparse`` but the
``NullHandler``, none on the root logger), a stderr handler is added, as a
user who asks for debug output expects to see it.
"""

from __future__ import annotations

import atexit
import logging
import os

from . import _C
from ._params import param

logger = logging.getLogger("pg_sparse")

# PG_SPARSE_LOG's names: the core's level number and Python's level.
LEVELS = {"error": (0, logging.ERROR), "warn": (1, logging.WARNING),
          "info": (2, logging.INFO), "debug": (3, logging.DEBUG)}


def _rank_tag() -> str:
    rank = os.environ.get("RANK") or os.environ.get("OMPI_COMM_WORLD_RANK")
    return f" rank {rank}" if rank is not None else ""


def configure_logging() -> None:
    """Install the NullHandler and route the core's messages to logging."""
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())
    try:
        core_level, py_level = LEVELS[str(param("PG_SPARSE_LOG"))]
    except ValueError:  # init_process_group reports it (check_params)
        core_level, py_level = LEVELS["warn"]
    if "PG_SPARSE_LOG" in os.environ:
        logger.setLevel(py_level)
        shown = [h for h in logger.handlers if not isinstance(h, logging.NullHandler)]
        if not shown and not logging.getLogger().handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter(
                f"[%(name)s{_rank_tag()}] %(levelname)s %(message)s"))
            logger.addHandler(handler)
    _C._log_start(core_level)
    # Registered before the backends' shutdown (atexit runs last first), so
    # what the shutdown logs is still delivered.
    atexit.register(_C._log_stop)
