"""A store prefix that every rank of one round of a restarted job agrees on.

torchrun shares one TCPStore between the rendezvous rounds of a job (its
agents host it) and gives the workers no per-round prefix, so a restarted
rank can read the keys a dead rank of an earlier round left: a gloo address
or an NCCL id that no process listens on any more. The restart count
(``TORCHELASTIC_RESTART_COUNT``) is no prefix for this: each node's agent
counts only the failures of its own workers, so after a fault on one node
the nodes' counts differ, the ranks look for each other under different
prefixes, and every later round fails (the soak found it: 16 faults in,
five rounds in a row timed out in ``init_process_group`` until the restarts
ran out).

Instead the group's rank 0 draws a fresh token and hands it to each other
rank in answer to that rank's own fresh token: a reply can only come from a
live rank 0 of this round, since no earlier round knew the asker's token.
Keys left by dead processes are answered too, and harmlessly: nobody waits
for those answers.
"""

from __future__ import annotations

import secrets
import time
from datetime import timedelta
from typing import Any

_HELLO, _REPLY, _JOINED = "pg_sparse_round/hello/", "pg_sparse_round/reply/", \
    "pg_sparse_round/joined/"


def round_token(store: Any, rank: int, size: int, timeout: timedelta) -> str:
    """The token of this round of ``store``'s group: the same on every rank,
    new in every round. Raises ``RuntimeError`` naming the ranks missing if
    the group does not gather within ``timeout``."""
    token = secrets.token_hex(16)
    if rank != 0:
        store.set(f"{_HELLO}{rank}", token)
        try:
            store.wait([f"{_REPLY}{token}"], timeout)
        except RuntimeError as e:
            raise RuntimeError(f"pg_sparse: rank {rank} had no answer from rank 0 of its "
                               f"group within {timeout} while the group started") from e
        agreed = store.get(f"{_REPLY}{token}").decode()
        store.add(f"{_JOINED}{agreed}", 1)
        return agreed
    _answer_all(store, size, token, time.monotonic() + timeout.total_seconds())
    return token


def _answer_all(store: Any, size: int, token: str, deadline: float) -> None:
    """Rank 0's part: answer every rank's hello until all ``size - 1`` have
    taken ``token``."""
    answered: dict[int, str] = {}
    while store.add(f"{_JOINED}{token}", 0) < size - 1:
        for r in range(1, size):
            key = f"{_HELLO}{r}"
            if not store.check([key]):
                continue
            hello = store.get(key).decode()
            if answered.get(r) != hello:
                store.set(f"{_REPLY}{hello}", token)
                answered[r] = hello
        if time.monotonic() > deadline:
            missing = [r for r in range(1, size) if r not in answered]
            raise RuntimeError(f"pg_sparse: rank 0 of a group of {size} gave up waiting "
                               f"for its ranks to start; not heard from: {missing or 'none'} "
                               "(the others answered but did not join)")
        time.sleep(0.002)
