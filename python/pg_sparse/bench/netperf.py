"""A bounded TCP bulk transfer, standard library only, to verify a shaped link.

Run as a script inside a network namespace (``ip netns exec NS python
netperf.py recv|send ...``); :func:`measure` in :mod:`pg_sparse.bench.netns`
drives both ends. Every transfer is bounded in bytes and in time.

``recv --bind A --port P --timeout T``: accept one connection, read until the
peer closes (or T seconds pass), print one JSON line ``{"bytes": n,
"seconds": s}`` timed from the first to the last byte.
``send --to A --port P --seconds S --bytes B``: write zeros for at most S
seconds or B bytes, whichever ends first, then close.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time

CHUNK = 1 << 20


def receive(bind: str, port: int, timeout: float) -> dict[str, float]:
    """Serve one bulk transfer; returns ``{"bytes", "seconds"}``."""
    deadline = time.monotonic() + timeout
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((bind, port))
    srv.listen(1)
    srv.settimeout(timeout)
    print("ready", flush=True)
    conn, _ = srv.accept()
    srv.close()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    total, first, last = 0, 0.0, 0.0
    with conn:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            conn.settimeout(left)
            try:
                n = conn.recv_into(view)
            except (socket.timeout, ConnectionError):
                break
            if n == 0:
                break
            now = time.perf_counter()
            if not total:
                first = now
            total += n
            last = now
    return {"bytes": total, "seconds": max(last - first, 1e-9)}


def send(to: str, port: int, seconds: float, max_bytes: int) -> int:
    """Send zeros for at most ``seconds`` or ``max_bytes``; returns bytes sent."""
    data = memoryview(bytes(CHUNK))
    sent = 0
    with socket.create_connection((to, port), timeout=max(seconds, 1.0) + 5) as s:
        end = time.monotonic() + seconds
        while sent < max_bytes and time.monotonic() < end:
            sent += s.send(data[:min(CHUNK, max_bytes - sent)])
        s.shutdown(socket.SHUT_WR)
    return sent


def _main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    sub = p.add_subparsers(dest="role", required=True)
    r = sub.add_parser("recv")
    r.add_argument("--bind", required=True)
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--timeout", type=float, default=10.0)
    s = sub.add_parser("send")
    s.add_argument("--to", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--seconds", type=float, default=2.0)
    s.add_argument("--bytes", type=int, default=1 << 30)
    a = p.parse_args(argv)
    if a.role == "recv":
        print(json.dumps(receive(a.bind, a.port, a.timeout)), flush=True)
    else:
        print(json.dumps({"sent": send(a.to, a.port, a.seconds, a.bytes)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
