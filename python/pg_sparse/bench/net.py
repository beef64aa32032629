"""``python -m pg_sparse.bench net up|shape|check|down|run``: hosts as network
namespaces on a bridge, links shaped with tc (needs root).

Other suites use the Python API::

    from pg_sparse.bench.net import Network
    with Network(hosts=4, rate="1gbit", prefix="pgsb") as net:
        mbit = net.measure()
        res = net.torchrun(["ddp", "--steps", "20"])   # or script="x.py"
        res = net.mpirun(["ddp"], timeout=300)
        net.shape("100mbit")

Layout, shaping and cleanup: :mod:`pg_sparse.bench.netns`; launches:
:mod:`pg_sparse.bench.netlaunch`.
"""

from __future__ import annotations

import argparse
import sys

from .netlaunch import LaunchResult, launch, mpirun, torchrun
from .netns import NetError, Network, down, namespaces, parse_rate

__all__ = ["LaunchResult", "NetError", "Network", "down", "launch", "mpirun", "namespaces",
           "parse_rate", "torchrun"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``net`` subcommands."""
    sub = parser.add_subparsers(dest="net_cmd", required=True, metavar="CMD")

    def common(p: argparse.ArgumentParser, hosts: bool, rate: bool) -> None:
        p.add_argument("--prefix", default="pgsb",
                       help="name prefix of every namespace (default pgsb: pgsb-br, pgsb-h0, ...)")
        if hosts:
            p.add_argument("--hosts", type=int, default=2, help="number of hosts (namespaces)")
        if rate:
            p.add_argument("--rate", default="1gbit",
                           help="tc rate of every host link, e.g. 100mbit, 1gbit, 10gbit, unshaped")
            p.add_argument("--delay", default=None,
                           help="one-way delay a link end (needs the netem qdisc), e.g. 1ms")

    def check_opts(p: argparse.ArgumentParser) -> None:
        p.add_argument("--seconds", type=float, default=2.0,
                       help="length bound of the throughput check (s)")
        p.add_argument("--max-mb", type=int, default=1024,
                       help="size bound of the throughput check (MB)")
        p.add_argument("--out", default=None,
                       help="also write the check (with the context) to OUT/net.json")

    p = sub.add_parser("up", help="create, shape and check the network; leave it up")
    common(p, True, True)
    check_opts(p)
    p = sub.add_parser("shape", help="reshape the links of a network that is up")
    common(p, False, True)
    check_opts(p)
    p = sub.add_parser("check", help="measure host0 -> host1 TCP throughput")
    common(p, False, False)
    check_opts(p)
    p = sub.add_parser("down", help="remove every namespace of the prefix (idempotent)")
    common(p, False, False)
    p = sub.add_parser("run", help="up + shape + check, launch one rank a host, always down",
                       description="Everything after -- is passed to `python -m pg_sparse.bench` "
                       "(or to --script) on every rank.")
    common(p, True, True)
    check_opts(p)
    p.add_argument("--launcher", choices=("torchrun", "mpirun"), default="torchrun")
    p.add_argument("--nproc-per-host", type=int, default=1)
    p.add_argument("--script", default=None, help="run this Python file instead of the CLI")
    p.add_argument("--timeout", type=float, default=1800.0,
                   help="kill the job after this many seconds")
    p.add_argument("--log-dir", default=None, help="keep launcher logs here (default: a temp dir)")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="-- ARGS for the ranks")


def _check(net: Network, args: argparse.Namespace) -> float:
    mbit = net.measure(seconds=args.seconds, max_bytes=args.max_mb << 20)
    note = f"; {net.delay_note}" if net.delay_note else ""
    print(f"requested {net.rate or 'unshaped'}, measured {mbit:.0f} Mbit/s{note}", flush=True)
    if args.out:
        from .common import context, out_dir, write_json

        ctx = context(world_size=net.hosts, transport=getattr(args, "launcher", "-"),
                      link=net.link(), note=net.delay_note)
        row = {"hosts": net.hosts, "rate": net.rate or "unshaped", "delay": net.delay,
               "measured_mbit_s": mbit, "seconds_bound": args.seconds,
               "bytes_bound": args.max_mb << 20}
        path = write_json(out_dir(args.out) / "net.json", ctx, [row])
        print(f"wrote {path}", flush=True)
    return mbit


def main(args: argparse.Namespace) -> int:
    """Run one ``net`` subcommand; 0 on success."""
    try:
        return _main(args)
    except (NetError, ValueError) as e:
        print(f"pg_sparse.bench net: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("pg_sparse.bench net: interrupted; the network is removed", file=sys.stderr)
        return 130


def _main(args: argparse.Namespace) -> int:
    cmd = args.net_cmd
    if cmd == "down":
        gone = down(args.prefix)
        print(f"removed {len(gone)} namespaces of prefix {args.prefix}: {' '.join(gone)}")
        return 0
    if cmd in ("shape", "check"):
        net = Network.attach(args.prefix)
        if cmd == "shape":
            parse_rate(args.rate)
            net.shape(args.rate, args.delay)
        _check(net, args)
        return 0
    parse_rate(args.rate)
    net = Network(args.hosts, args.rate, args.delay, prefix=args.prefix)
    if cmd == "up":
        net.up()
        try:
            _check(net, args)
        except BaseException:
            net.down()
            raise
        net.detach()
        print(f"up: {args.hosts} hosts {net.ns(0)}..{net.ns(args.hosts - 1)} "
              f"({net.addr(0)}..{net.addr(args.hosts - 1)}, dev eth0), bridge in {net.bridge_ns}; "
              f"`python -m pg_sparse.bench net down --prefix {args.prefix}` removes them")
        return 0
    rest = list(args.rest)
    if rest[:1] == ["--"]:
        rest = rest[1:]
    if not rest and not args.script:
        print("pg_sparse.bench net run: give the suite arguments after --", file=sys.stderr)
        return 2
    with net:
        _check(net, args)
        res = launch(net, args.launcher, args=rest, script=args.script,
                     nproc_per_host=args.nproc_per_host, timeout=args.timeout,
                     log_dir=args.log_dir, stream=True)
    print(res.summary(), flush=True)
    if not res.ok:
        for i, rc in enumerate(res.returncodes):
            if rc != 0:
                print(f"--- {res.logs[i]} (exit {rc}):\n{res.tail(i)}", file=sys.stderr)
        return 1
    return 0
