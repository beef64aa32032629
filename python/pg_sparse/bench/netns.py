"""Hosts as Linux network namespaces on a bridge, links shaped with ``tc``.

Layout for prefix ``P`` and ``H`` hosts (nothing is created in the root
namespace): namespace ``P-br`` holds bridge ``br0`` and the bridge-side veth
ends ``v0..v{H-1}``; namespace ``P-h<i>`` holds the host end ``eth0`` with
address ``10.231.0.<i+1>/24`` and loopback. Shaping puts a ``tbf`` on both
ends of every host's veth pair (host egress and bridge egress toward the
host), so traffic is shaped both ways; a delay needs ``netem``.

Needs root and iproute2. Every network this process brings up is torn down
at exit, on SIGTERM/SIGHUP and on Ctrl-C (see :func:`down`).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .netlaunch import LaunchResult

SUBNET = "10.231.0"
PERF_PORT = 5201
_PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,9}$")
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(bit|bps)?\s*$", re.I)
_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
UNSHAPED = ("unshaped", "none", "off", "")


class NetError(RuntimeError):
    """A network operation failed (the message says which command and why)."""


def parse_rate(rate: str | None) -> float | None:
    """Bits per second of a tc rate (``100mbit``, ``1gbit``, ``10gbit``,
    ``125mbps`` = bytes); None for ``unshaped``."""
    if rate is None or rate.strip().lower() in UNSHAPED:
        return None
    m = _RATE_RE.match(rate)
    if not m:
        raise ValueError(f"bad rate {rate!r}: use e.g. 100mbit, 1gbit, 10gbit or unshaped")
    bits = float(m.group(1)) * _UNITS[m.group(2).lower()]
    return bits * 8 if (m.group(3) or "").lower() == "bps" else bits


def tbf_params(rate_bits: float) -> tuple[int, int]:
    """(burst, limit) in bytes for a tbf of ``rate_bits``: a burst of 2 ms at
    the rate (at least 64 KiB, one GSO packet, so 10 Gbit/s is reachable) and
    a queue of 20 ms beyond it."""
    per_ms = rate_bits / 8 / 1000
    burst = max(int(per_ms * 2), 64 * 1024)
    return burst, burst + max(int(per_ms * 20), 3 * 1514)


def sh(*cmd: str, check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess:
    """Run a command (no shell); raise :class:`NetError` with its stderr on failure."""
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NetError(f"{' '.join(cmd)}: {e}") from e
    if check and res.returncode != 0:
        raise NetError(f"{' '.join(cmd)}: {(res.stderr or res.stdout).strip()}")
    return res


def namespaces(prefix: str | None = None) -> list[str]:
    """Network namespaces (of ``prefix``, i.e. named ``<prefix>-...``)."""
    res = sh("ip", "netns", "list", check=False)
    names = [line.split()[0] for line in res.stdout.splitlines() if line.strip()]
    return [n for n in names if prefix is None or n.startswith(prefix + "-")]


def kill_namespace_pids(name: str, grace: float = 2.0) -> list[int]:
    """SIGTERM, then SIGKILL, every process left inside namespace ``name``."""
    def pids() -> list[int]:
        out = sh("ip", "netns", "pids", name, check=False).stdout
        return [int(p) for p in out.split() if p.isdigit() and int(p) != os.getpid()]

    found = pids()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in pids():
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        end = time.monotonic() + grace
        while pids() and time.monotonic() < end:
            time.sleep(0.05)
    return found


def down(prefix: str) -> list[str]:
    """Remove every namespace of ``prefix`` (killing what runs inside first);
    idempotent. Returns the names removed."""
    if not _PREFIX_RE.match(prefix):
        raise ValueError(f"bad prefix {prefix!r}")
    gone = []
    for name in namespaces(prefix):
        kill_namespace_pids(name)
        sh("ip", "netns", "del", name, check=False)
        gone.append(name)
    _forget(prefix)
    return gone


def _forget(prefix: str) -> None:
    """No teardown of ``prefix`` at exit; handlers back once none is live."""
    _LIVE.discard(prefix)
    if not _LIVE:
        _restore_handlers()


# -- teardown at exit and on signals -------------------------------------------

_LIVE: set[str] = set()
_HANDLERS: dict[int, Any] = {}
_ATEXIT = False


def _down_all() -> None:
    for prefix in list(_LIVE):
        try:
            down(prefix)
        except Exception as e:  # noqa: BLE001 - best effort at exit
            print(f"pg_sparse.bench.net: teardown of {prefix}: {e}", file=sys.stderr)


def _on_signal(signum: int, frame: Any) -> None:
    _down_all()
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)


def _restore_handlers() -> None:
    if threading.current_thread() is threading.main_thread():
        for sig, old in _HANDLERS.items():
            signal.signal(sig, old)
        _HANDLERS.clear()


def _register(prefix: str) -> None:
    global _ATEXIT
    if not _ATEXIT:
        _ATEXIT = atexit.register(_down_all) is not None
    _LIVE.add(prefix)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if sig not in _HANDLERS:
                _HANDLERS[sig] = signal.signal(sig, _on_signal)


_NETEM: dict[str, bool] = {}


def netem_available(ns: str) -> bool:
    """Whether this kernel has the netem qdisc (tried once on the loopback of
    our own namespace ``ns``)."""
    if "netem" not in _NETEM:
        ok = sh("tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", "netem",
                "delay", "1ms", check=False).returncode == 0
        if ok:
            sh("tc", "-n", ns, "qdisc", "del", "dev", "lo", "root", check=False)
        _NETEM["netem"] = ok
    return _NETEM["netem"]


class Network:
    """``hosts`` namespaces on a bridge, each link shaped to ``rate``.

    Use as a context manager (``with Network(4, "1gbit") as net: ...``):
    the namespaces are removed on leaving, on error, on SIGTERM and at exit.
    """

    def __init__(self, hosts: int, rate: str | None = "1gbit", delay: str | None = None,
                 prefix: str = "pgsb") -> None:
        if not 2 <= hosts <= 250:
            raise ValueError("hosts must be in 2..250")
        if not _PREFIX_RE.match(prefix):
            raise ValueError(f"prefix {prefix!r}: 1-10 lowercase letters/digits, a letter first")
        self.hosts, self.prefix = hosts, prefix
        self.rate, self.delay = rate, delay
        self.measured_mbit: float | None = None
        self.delay_note = ""

    # names and addresses
    @property
    def bridge_ns(self) -> str:
        """The namespace that holds the bridge."""
        return f"{self.prefix}-br"

    def ns(self, host: int) -> str:
        """Namespace of host ``host``."""
        return f"{self.prefix}-h{host}"

    def addr(self, host: int) -> str:
        """IPv4 address of host ``host`` (on its ``eth0``)."""
        return f"{SUBNET}.{host + 1}"

    def host_of(self, addr: str) -> int:
        """The host index of an address of this network."""
        return int(addr.rsplit(".", 1)[1]) - 1

    # lifecycle
    def __enter__(self) -> Network:
        self.up()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.down()

    def up(self) -> None:
        """Create the namespaces, bridge and veth pairs, then shape."""
        if namespaces(self.prefix):
            raise NetError(f"namespaces of prefix {self.prefix!r} exist already: "
                           f"run `python -m pg_sparse.bench net down --prefix {self.prefix}`")
        _register(self.prefix)
        try:
            br = self.bridge_ns
            sh("ip", "netns", "add", br)
            sh("ip", "-n", br, "link", "set", "lo", "up")
            sh("ip", "-n", br, "link", "add", "br0", "type", "bridge")
            sh("ip", "-n", br, "link", "set", "br0", "up")
            for i in range(self.hosts):
                ns = self.ns(i)
                sh("ip", "netns", "add", ns)
                sh("ip", "-n", br, "link", "add", f"v{i}", "type", "veth",
                   "peer", "name", "eth0", "netns", ns)
                sh("ip", "-n", br, "link", "set", f"v{i}", "master", "br0")
                sh("ip", "-n", br, "link", "set", f"v{i}", "up")
                sh("ip", "-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", "eth0")
                sh("ip", "-n", ns, "link", "set", "eth0", "up")
                sh("ip", "-n", ns, "link", "set", "lo", "up")
            self.shape(self.rate, self.delay)
        except BaseException:
            self.down()
            raise

    def down(self) -> list[str]:
        """Kill what runs in the namespaces and remove them (idempotent)."""
        return down(self.prefix)

    def detach(self) -> None:
        """Leave the network up when this process exits (``net up``)."""
        _forget(self.prefix)

    @classmethod
    def attach(cls, prefix: str = "pgsb") -> Network:
        """The network of ``prefix`` that is already up (``net shape/check``);
        its rate is read back from tc. Not torn down at exit."""
        hosts = sum(1 for n in namespaces(prefix) if re.fullmatch(rf"{prefix}-h\d+", n))
        if hosts < 2 or f"{prefix}-br" not in namespaces(prefix):
            raise NetError(f"no network of prefix {prefix!r} is up (`net up` first)")
        net = cls(hosts, None, prefix=prefix)
        qd = sh("tc", "-n", net.ns(0), "qdisc", "show", "dev", "eth0").stdout
        m = re.search(r"\btbf\b.*?\brate (\S+)", qd)
        net.rate = m.group(1).lower() if m else None
        d = re.search(r"\bnetem\b.*?\bdelay (\S+)", qd)
        net.delay = d.group(1) if d else None
        return net

    def shape(self, rate: str | None, delay: str | None = None) -> str:
        """(Re)shape every host link to ``rate`` (None/"unshaped": no qdisc)
        with optional ``delay`` (netem, where the kernel has it). Returns a
        note on the delay ("" or "delay not available (no netem)")."""
        bits = parse_rate(rate)
        has_netem = netem_available(self.bridge_ns) if delay or bits is not None else False
        if delay and not has_netem:
            raise NetError(f"delay {delay} requested but this kernel has no netem qdisc "
                           "(tc: Specified qdisc kind is unknown); drop --delay")
        self.rate, self.delay, self.measured_mbit = rate, delay, None
        self.delay_note = "" if has_netem or bits is None else "delay not available (no netem)"
        for i in range(self.hosts):
            for ns, dev in ((self.ns(i), "eth0"), (self.bridge_ns, f"v{i}")):
                sh("tc", "-n", ns, "qdisc", "del", "dev", dev, "root", check=False)
                parent = ["root"]
                if delay:
                    sh("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:",
                       "netem", "delay", delay, "limit", "100000")
                    parent = ["parent", "1:1"]
                if bits is not None:
                    burst, limit = tbf_params(bits)
                    sh("tc", "-n", ns, "qdisc", "add", "dev", dev, *parent, "handle", "10:",
                       "tbf", "rate", f"{int(bits)}bit", "burst", str(burst),
                       "limit", str(limit))
        return self.delay_note

    # processes inside the namespaces
    def popen(self, host: int, cmd: list[str], **kw: Any) -> subprocess.Popen:
        """Start ``cmd`` inside host ``host``'s namespace (own process group)."""
        kw.setdefault("start_new_session", True)
        return subprocess.Popen(["ip", "netns", "exec", self.ns(host), *cmd], **kw)

    def kill_all(self) -> None:
        """Kill every process left inside this network's namespaces."""
        for name in namespaces(self.prefix):
            kill_namespace_pids(name)

    def measure(self, seconds: float = 2.0, max_bytes: int = 1 << 30, src: int = 0,
                dst: int = 1, port: int = PERF_PORT) -> float:
        """Throughput in Mbit/s of a TCP bulk transfer ``src`` -> ``dst``,
        bounded by ``seconds`` and ``max_bytes``."""
        script = str(Path(__file__).with_name("netperf.py"))
        py = sys.executable
        recv = self.popen(dst, [py, script, "recv", "--bind", self.addr(dst), "--port",
                                str(port), "--timeout", str(seconds + 10)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert recv.stdout is not None
            if recv.stdout.readline().strip() != "ready":
                raise NetError(f"netperf receiver did not start: {recv.communicate()[1]}")
            snd = subprocess.run(["ip", "netns", "exec", self.ns(src), py, script, "send",
                                  "--to", self.addr(dst), "--port", str(port), "--seconds",
                                  str(seconds), "--bytes", str(max_bytes)],
                                 capture_output=True, text=True, timeout=seconds + 20)
            if snd.returncode != 0:
                raise NetError(f"netperf sender failed: {snd.stderr.strip()}")
            out, err = recv.communicate(timeout=seconds + 20)
            res = json.loads(out.strip().splitlines()[-1])
        finally:
            if recv.poll() is None:
                recv.kill()
                recv.wait()
        self.measured_mbit = res["bytes"] * 8 / res["seconds"] / 1e6
        return self.measured_mbit

    def set_link(self, host: int, up: bool) -> None:
        """Host ``host``'s link down (its cable pulled: every connection
        through it stalls) or up again; the shaping stays."""
        sh("ip", "-n", self.ns(host), "link", "set", "eth0", "up" if up else "down")

    def torchrun(self, args: Sequence[str] = (), **kw: Any) -> LaunchResult:
        """One torchrun a host; see :func:`pg_sparse.bench.netlaunch.torchrun`."""
        from .netlaunch import torchrun

        return torchrun(self, args, **kw)

    def mpirun(self, args: Sequence[str] = (), **kw: Any) -> LaunchResult:
        """One mpirun over all hosts; see :func:`pg_sparse.bench.netlaunch.mpirun`."""
        from .netlaunch import mpirun

        return mpirun(self, args, **kw)

    def link(self) -> str:
        """The link as reports print it (PG_SPARSE_BENCH_LINK of launched ranks)."""
        shaped = "unshaped veth" if parse_rate(self.rate) is None else f"{self.rate} tbf"
        if self.delay:
            shaped += f" + {self.delay} netem"
        meas = "" if self.measured_mbit is None else f", measured {self.measured_mbit:.0f} Mbit/s"
        return shaped + meas
