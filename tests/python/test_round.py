"""The round token of a restarted job's group (``pg_sparse._round``): every
rank of a round gets the same token, a new round a new one, whatever keys
the dead ranks of earlier rounds left in the shared store."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import torch.distributed as dist
from pg_sparse._round import round_token

TIMEOUT = timedelta(seconds=10)


def _round(server: dist.TCPStore, size: int, delays: dict[int, float] | None = None,
           ranks: range | None = None) -> dict[int, str]:
    """One round: a thread per rank, each on its own client (a process of
    its own in a real job)."""
    out: dict[int, str] = {}
    errors: list[BaseException] = []

    def rank_main(rank: int) -> None:
        try:
            if delays and rank in delays:
                threading.Event().wait(delays[rank])
            client = dist.TCPStore("127.0.0.1", server.port, is_master=False,
                                   timeout=TIMEOUT)
            out[rank] = round_token(dist.PrefixStore("group/", client), rank, size, TIMEOUT)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in (ranks or range(size))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    if errors:
        raise errors[0]
    return out


@pytest.fixture
def server():
    return dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=TIMEOUT, wait_for_workers=False)


def test_every_rank_of_a_round_agrees_and_each_round_differs(server):
    first = _round(server, 4)
    assert len(first) == 4 and len(set(first.values())) == 1, first
    # The next round finds the first round's hellos and replies in the store
    # (its processes are dead), and rank 2 starts late.
    second = _round(server, 4, delays={2: 0.5})
    assert len(second) == 4 and len(set(second.values())) == 1, second
    assert set(second.values()) != set(first.values())


def test_a_stale_hello_is_answered_without_harm(server):
    # A dead rank 1 of an earlier round left its hello; nobody waits for the
    # answer. The live ranks still agree.
    dist.PrefixStore("group/", server).set("pg_sparse_round/hello/1", "dead-rank-token")
    got = _round(server, 3, delays={1: 0.3})
    assert len(set(got.values())) == 1, got


def test_a_rank_that_never_comes_fails_rank_0_with_a_message(server):
    with pytest.raises(RuntimeError, match="not heard from: \\[2\\]"):
        _round_short(server)


def _round_short(server: dist.TCPStore) -> None:
    client = dist.TCPStore("127.0.0.1", server.port, is_master=False, timeout=TIMEOUT)
    store = dist.PrefixStore("group/", client)
    other = threading.Thread(target=lambda: _round(server, 3, ranks=range(1, 2)))
    other.daemon = True
    other.start()
    round_token(store, 0, 3, timedelta(seconds=2))
