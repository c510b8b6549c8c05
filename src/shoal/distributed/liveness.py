"""Which peer was lost: heartbeats through the rendezvous store, and one line when a
collective fails.

Every rank of a world of several processes runs a :class:`Heartbeat` (a daemon thread
incrementing the rank's counter in the rendezvous store, keys under
``shoal/alive/<restart>/``, every ``interval`` seconds over a connection of its own); a rank
that has not reached that host for :data:`UNREACHABLE` seconds says so at once. When a
collective fails, :func:`describe_failure` reads every counter twice, ``2.5 x interval``
apart, and names the ranks whose counters stood still, their hosts, the operation and the
fix (the store unreachable: its host, ``MASTER_ADDR``). Why and how:
docs/distributed.md#a-lost-peer.
"""

from __future__ import annotations

import datetime
import os
import re
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass

import torch.distributed as dist

from shoal.errors import ShoalPeerLostError

__all__ = ["Heartbeat", "describe_failure", "is_comm_failure"]

#: seconds between two beats of a rank
INTERVAL = 1.0
#: seconds without reaching the rendezvous host after which a rank says so
UNREACHABLE = 10.0

_COMM = re.compile(
    r"gloo|Connection (closed|reset|refused)|Timed out waiting|Broken pipe|NCCL|"
    r"connection to .* lost|Socket Timeout|recvBytes|sendBytes",
    re.IGNORECASE,
)


def is_comm_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is a failed collective (a lost peer or a timeout), not a bug of its
    own: a ``DistError`` of torch, or a ``RuntimeError`` from the transport."""
    if isinstance(exc, ShoalPeerLostError):
        return False
    kinds = tuple(
        k for k in (getattr(dist, "DistError", None), getattr(dist, "DistBackendError", None)) if k
    )
    if kinds and isinstance(exc, kinds):
        return True
    return isinstance(exc, RuntimeError) and bool(_COMM.search(str(exc)))


@dataclass(frozen=True)
class _Store:
    host: str
    port: int


class Heartbeat:
    """This rank's beats in the rendezvous store, and the peers' hosts (see the module
    docstring). Start with :meth:`start` (collective: gathers the hosts); :meth:`stop` ends
    the thread. A world of one process, or one without ``MASTER_ADDR``, has no beats and
    :meth:`lost` answers None."""

    def __init__(self, rank: int, world_size: int, *, interval: float = INTERVAL) -> None:
        self.rank, self.world_size, self.interval = rank, world_size, interval
        self.hosts: list[str] = [socket.gethostname()] * world_size
        addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
        self.store_at = _Store(addr, int(port)) if addr and port else None
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        run = os.environ.get("TORCHELASTIC_RUN_ID", "")
        self.prefix = f"shoal/alive/{run}/{attempt}/"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Heartbeat:
        if self.world_size <= 1:
            return self
        hosts: list = [None] * self.world_size
        dist.all_gather_object(hosts, socket.gethostname())
        self.hosts = [str(h) for h in hosts]
        if self.store_at is None:
            return self
        self._last_ok = time.monotonic()
        self._thread = threading.Thread(target=self._beat, name="shoal-heartbeat", daemon=True)
        self._thread.start()
        watch = threading.Thread(target=self._watch, name="shoal-heartbeat-watch", daemon=True)
        watch.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _client(self, timeout_s: float):
        return dist.TCPStore(
            self.store_at.host,
            self.store_at.port,
            is_master=False,
            timeout=datetime.timedelta(seconds=timeout_s),
            wait_for_workers=False,
        )

    def _beat(self) -> None:
        """Beat until stopped; a beat that fails (the store unreachable for a while: a cut
        link that comes back) reconnects at the next one instead of ending the thread."""
        key = f"{self.prefix}{self.rank}"
        store = None
        while not self._stop.is_set():
            try:
                if store is None:
                    store = self._client(max(5.0, 5 * self.interval))
                store.add(key, 1)
                self._last_ok = time.monotonic()
            except Exception:  # unreachable now: the failing collective, if any, says so
                store = None
            self._stop.wait(self.interval)

    def _watch(self) -> None:
        """Say at once when this rank has not reached the rendezvous host for
        :data:`UNREACHABLE` seconds (and again when it answers): a launcher that loses the
        same host may stop this process before a collective times out and names it."""
        said = False
        while not self._stop.wait(self.interval):
            silent = time.monotonic() - self._last_ok
            if silent >= UNREACHABLE and not said:
                at, me = self.store_at, self.hosts[self.rank]
                print(
                    f"shoal: rank {self.rank} (host {me}): no answer from the rendezvous host "
                    f"{at.host}:{at.port} (rank 0's machine, {self.hosts[0]}) for "
                    f"{silent:.0f} s: that machine or the network to it is down -> check it; "
                    "with --checkpoint-dir DIR --resume (and --max-restarts N) the run "
                    "continues from its last checkpoint",
                    file=sys.stderr,
                    flush=True,
                )
                said = True
            elif said and silent < UNREACHABLE:
                print(
                    f"shoal: rank {self.rank}: the rendezvous host answers again",
                    file=sys.stderr,
                    flush=True,
                )
                said = False

    def lost(self) -> list[int] | None:
        """The ranks whose beats stopped (every counter read twice, ``2.5 x interval``
        apart) and that did not report a failed collective themselves, or None when the
        store cannot be reached or there are no beats.

        A rank that sees a collective fail first marks itself (``failing/<rank>``): it was
        alive when the failure began, so a peer that looks while it is already exiting does
        not name it."""
        if self.store_at is None or self._thread is None:
            return None
        try:
            store = self._client(max(3.0, 3 * self.interval))
            store.add(f"{self.prefix}failing/{self.rank}", 1)
            keys = [f"{self.prefix}{r}" for r in range(self.world_size)]
            first = [store.add(k, 0) for k in keys]
            time.sleep(2.5 * self.interval)
            second = [store.add(k, 0) for k in keys]
            failing = [store.add(f"{self.prefix}failing/{r}", 0) for r in range(self.world_size)]
        except Exception:
            return None
        return [
            r
            for r in range(self.world_size)
            if r != self.rank and first[r] == second[r] and not failing[r]
        ]


def _operation(exc: BaseException) -> str:
    """The innermost ``torch.distributed`` call in ``exc``'s traceback, and the shoal function
    that made it (``"all_reduce in shoal.engines.base.epoch_record"``)."""
    frames = traceback.extract_tb(exc.__traceback__)
    op = where = None
    for f in frames:  # outermost first: the last match is the innermost
        path = f.filename.replace(os.sep, "/")
        if path.endswith("distributed_c10d.py"):
            if not f.name.startswith("_"):  # the public call, not its helpers
                op = f.name
        elif "/shoal/" in path and "/shoal/distributed/runtime" not in path:
            module = path.rsplit("/shoal/", 1)[1].removesuffix(".py").replace("/", ".")
            where = f"shoal.{module}.{f.name}"
    if op is None:
        op = "a collective"
    return f"{op} in {where}" if where else op


def describe_failure(
    exc: BaseException,
    *,
    rank: int,
    heartbeat: Heartbeat | None,
    timeout_s: float,
    started: float,
) -> ShoalPeerLostError:
    """The one line of a failed collective on ``rank`` (module docstring), as an error."""
    hosts = heartbeat.hosts if heartbeat is not None else []
    me = hosts[rank] if rank < len(hosts) else socket.gethostname()
    lost = heartbeat.lost() if heartbeat is not None else None
    op = _operation(exc)
    waited = time.monotonic() - started
    if lost is None and heartbeat is not None and heartbeat.store_at is not None:
        at = heartbeat.store_at
        who = f"the rendezvous host {at.host}:{at.port} (rank 0's machine, {hosts[0]})"
    elif lost:
        who = ", ".join(f"rank {r} (host {hosts[r]})" for r in lost)
    else:
        who = "no rank (every rank still beats: a peer is stuck or slower than the timeout)"
    message = (
        f"rank {rank} (host {me}) lost {who} during {op}, {waited:.0f} s into the run "
        f"({type(exc).__name__}: {_first_line(exc)})"
    )
    fix = (
        "check that machine and the network to it; if it was only slow, raise --dist-timeout "
        f"(now {timeout_s:g} s); with --checkpoint-dir DIR --resume (and --max-restarts N) "
        "the run continues from its last checkpoint"
    )
    return ShoalPeerLostError(message, fix=fix, lost=lost, rank=rank)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = re.sub(r"^\[[^\]]*\] ", "", text)  # gloo's [file.cc:123] prefix
    return text[:160]
