"""Shape the ranks' traffic like a real network (benchmarks only; needs root and ``ip``/``tc``).

On one machine, gloo talks over loopback, which moves several GB/s with microsecond latency, so
communication looks nearly free. ``shaped(n, rate)`` puts each of ``n`` ranks in its own network
namespace ``shoalnet<i>`` (address ``10.77.0.<i+1>``, interface ``eth0``), joins the namespaces
with a bridge, and rate-limits every rank's link in both directions with a token bucket (``tc
tbf``), as if each rank were a machine with a full-duplex NIC of that rate behind a switch. An
optional ``delay`` (``tc netem``) adds one-way latency.

``launch(n, rate, argv, env)`` runs one ``torch.distributed.run`` per rank inside its namespace
(``--nnodes n --node-rank i``, static rendezvous at rank 0's address; gloo bound to ``eth0``)
and fails if any rank fails or the run exceeds its time limit. ``throughput(rate)`` measures the
rate a TCP stream from one namespace to another actually gets, which the results record next to
the nominal rate.

Usage::

    python bench/netshape.py check --rate 1gbit     # set up, measure, tear down
    python bench/netshape.py cleanup                # remove leftovers of a killed run
    python bench/netshape.py --smoke                # ip and tc found; as root, one shaped
                                                    # namespace made and removed
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import common

__all__ = ["launch", "shaped", "throughput", "cleanup"]

BRIDGE = "shoalbr"
PREFIX = "shoalnet"
PORT = 29617


def _ip(i: int) -> str:
    return f"10.77.0.{i + 1}"


def _exec(ns: str) -> list[str]:
    """This Python, run in namespace ``ns``."""
    return ["ip", "netns", "exec", ns, sys.executable]


def _run(*cmd: str) -> None:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {p.stderr.strip()}")


def _burst(rate: str) -> str:
    """Token-bucket depth: at least rate/HZ plus room for a 64 KB GSO segment."""
    bits = _bits(rate)
    return f"{max(bits // 8 // 100, 256 * 1024)}b"


def _bits(rate: str) -> int:
    units = {"kbit": 10**3, "mbit": 10**6, "gbit": 10**9}
    for u, m in units.items():
        if rate.lower().endswith(u):
            return int(float(rate[: -len(u)]) * m)
    raise ValueError(f"rate {rate!r}: expected e.g. 1gbit, 100mbit")


def _shape(dev: str, rate: str, delay: str | None, ns: str | None) -> None:
    pre = ("ip", "netns", "exec", ns) if ns else ()
    tbf = ("tbf", "rate", rate, "burst", _burst(rate), "latency", "50ms")
    if delay:
        _run(
            *pre, "tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem", "delay", delay
        )
        _run(*pre, "tc", "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", *tbf)
    else:
        _run(*pre, "tc", "qdisc", "add", "dev", dev, "root", *tbf)


def cleanup() -> None:
    """Remove every namespace and the bridge this module creates (also after a killed run)."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in names.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(PREFIX):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
    subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)
    # a namespace's removal takes its veth pairs with it asynchronously: remove and wait
    for _ in range(100):
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        left = [w.split("@")[0] for w in links.split() if w.startswith("shv")]
        if not left:
            return
        for name in left:
            subprocess.run(["ip", "link", "del", name.rstrip(":")], capture_output=True)
        time.sleep(0.05)


@contextlib.contextmanager
def shaped(n: int, rate: str, delay: str | None = None) -> Iterator[list[str]]:
    """Create ``n`` shaped namespaces; yield their names; always tear them down."""
    cleanup()
    try:
        _run("ip", "link", "add", BRIDGE, "type", "bridge")
        _run("ip", "link", "set", BRIDGE, "up")
        names = []
        for i in range(n):
            ns, host = f"{PREFIX}{i}", f"shv{i}"
            _run("ip", "netns", "add", ns)
            _run("ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _run("ip", "link", "set", host, "master", BRIDGE, "up")
            _run("ip", "-n", ns, "addr", "add", f"{_ip(i)}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            _shape("eth0", rate, delay, ns)  # what rank i sends
            _shape(host, rate, None, None)  # what rank i receives
            names.append(ns)
        yield names
    finally:
        cleanup()


def launch(
    n: int,
    rate: str,
    argv: list[str],
    env: dict[str, str],
    timeout: float = 1800.0,
    delay: str | None = None,
) -> None:
    """Run ``python -m torch.distributed.run ... argv`` as ``n`` single-process nodes, shaped."""
    env = {**env, "GLOO_SOCKET_IFNAME": "eth0"}
    with shaped(n, rate, delay) as names:
        procs = []
        for i, ns in enumerate(names):
            cmd = [*_exec(ns), "-m", "torch.distributed.run", f"--nnodes={n}"]
            cmd += [f"--node-rank={i}", "--nproc-per-node=1", f"--master-addr={_ip(0)}"]
            cmd += [f"--master-port={PORT}", *argv]
            procs.append(
                subprocess.Popen(
                    cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
                )
            )
        deadline = time.monotonic() + timeout
        outs = []
        try:
            for p in procs:
                outs.append(p.communicate(timeout=max(deadline - time.monotonic(), 1.0))[0])
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise RuntimeError(f"shaped run ({rate}) exceeded {timeout:.0f} s") from None
        bad = [(i, p.returncode) for i, p in enumerate(procs) if p.returncode != 0]
        if bad:
            raise RuntimeError(
                f"shaped run ({rate}): ranks {bad} failed:\n" + "\n".join(o[-3000:] for o in outs)
            )


_SINK = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("{addr}", {port})); s.listen(1); c, _ = s.accept(); n = 0; t0 = None
while True:
    b = c.recv(1 << 20)
    if not b: break
    if t0 is None: t0 = time.perf_counter()
    n += len(b)
print(n * 8 / (time.perf_counter() - t0))
"""

_SOURCE = """
import socket, time
for _ in range(100):
    try:
        c = socket.create_connection(("{addr}", {port})); break
    except OSError:
        time.sleep(0.05)
buf = bytes(1 << 20)
for _ in range({mb}): c.sendall(buf)
c.close()
"""


def throughput(rate: str, delay: str | None = None, mb: int | None = None) -> float:
    """Bits per second a TCP stream from rank 1's namespace to rank 0's gets (about 2 s)."""
    mb = mb or max(_bits(rate) // 8 // 2**20 * 2, 16)
    with shaped(2, rate, delay) as (ns0, ns1):
        cmd = [*_exec(ns0), "-c", _SINK.format(addr=_ip(0), port=PORT)]
        sink = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        _run(*_exec(ns1), "-c", _SOURCE.format(addr=_ip(0), port=PORT, mb=mb))
        out, _ = sink.communicate(timeout=120)
    return float(out.strip())


def smoke() -> None:
    """``ip`` and ``tc`` are there; as root, one namespace is shaped, checked and removed."""
    missing = [t for t in ("ip", "tc") if shutil.which(t) is None]
    if missing:
        sys.exit(f"bench/netshape.py: {', '.join(missing)} not found")
    print(f"plan: {PREFIX}<i> namespaces at {_ip(0)}.. on bridge {BRIDGE}, tbf in both directions")
    if os.geteuid() != 0:
        print("not root: nothing shaped")
        return
    with shaped(1, "100mbit") as (ns,):
        show = ["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", "eth0"]
        qdiscs = subprocess.run(show, capture_output=True, text=True).stdout
        if "tbf" not in qdiscs:
            sys.exit(f"bench/netshape.py: {ns}'s eth0 is not shaped:\n{qdiscs}")
        print(f"{ns}: {' '.join(qdiscs.split())}")
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    if PREFIX in left:
        sys.exit(f"bench/netshape.py: namespaces left after cleanup:\n{left}")


def main() -> None:
    ap = common.bench_args(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]))
    sub = ap.add_subparsers(dest="cmd")
    c = sub.add_parser("check", help="measure the shaped rate between two namespaces")
    c.add_argument("--rate", default="1gbit")
    c.add_argument("--delay", default=None)
    sub.add_parser("cleanup")
    args = ap.parse_args()
    if args.smoke:
        smoke()
        return
    if args.cmd is None:
        ap.error("give check, cleanup or --smoke")
    if os.geteuid() != 0:
        sys.exit("bench/netshape.py needs root (network namespaces, tc)")
    if args.cmd == "cleanup":
        cleanup()
    else:
        bps = throughput(args.rate, args.delay)
        print(f"nominal {args.rate}: measured {bps / 1e9:.3f} Gbit/s")


if __name__ == "__main__":
    main()
