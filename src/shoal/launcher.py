"""The local process launcher: N workers of one command on this machine, standard library only.

``shoal train --store STORE --nproc N`` (outside torchrun) validates its arguments, then hands
over to this module (``python -m shoal.launcher``), replacing its own process when nothing
follows the run (:func:`shoal.engines.launch.run`): the launcher imports neither torch nor
numpy, so the ~260 MiB a process holds once it has imported them (and the ~150 MiB of
``torch.distributed.run``'s own agent) stay free for the workers, which matters when they share
one memory cgroup (``--memory``'s default is 90% of the group's limit shared by the workers:
the rest is the launcher's and the page cache's).

It does what PyTorch's standalone elastic launcher (``torchrun --standalone``) does for one
machine: each attempt takes a free port on 127.0.0.1 and starts the workers with torchrun's
environment (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``, ``TORCHELASTIC_RUN_ID``, ``TORCHELASTIC_RESTART_COUNT``,
``TORCHELASTIC_MAX_RESTARTS``); rank 0's process group hosts the rendezvous store. When a
worker fails, the others are stopped (SIGTERM, then SIGKILL after :data:`STOP_GRACE_S`) and,
while restarts are left (``--max-restarts``), all are started again; a worker is killed if the
launcher dies (``PR_SET_PDEATHSIG``). A signal to the launcher (Ctrl-C, SIGTERM) stops the
workers and exits with ``128 + signal``.

``python -m shoal.launcher --nproc N [--max-restarts R] [--remove DIR] -- COMMAND...``
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence

__all__ = ["STOP_GRACE_S", "launch", "main"]

#: seconds a stopped worker has to exit after SIGTERM before it is killed
STOP_GRACE_S = 15.0
#: seconds between two looks at the workers
POLL_S = 0.2


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover (runs in the child before exec)
    """The child gets SIGKILL when the launcher dies (Linux; elsewhere nothing)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _start(command: Sequence[str], nproc: int, attempt: int, restarts: int, run_id: str):
    port = _free_port()
    procs = []
    for rank in range(nproc):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "GROUP_RANK": "0",
            "ROLE_RANK": str(rank),
            "WORLD_SIZE": str(nproc),
            "LOCAL_WORLD_SIZE": str(nproc),
            "ROLE_WORLD_SIZE": str(nproc),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "TORCHELASTIC_RUN_ID": run_id,
            "TORCHELASTIC_RESTART_COUNT": str(attempt),
            "TORCHELASTIC_MAX_RESTARTS": str(restarts),
        }
        env.setdefault("OMP_NUM_THREADS", "1")
        preexec = _die_with_parent if sys.platform.startswith("linux") else None
        procs.append(subprocess.Popen(list(command), env=env, preexec_fn=preexec))  # noqa: PLW1509
    return procs


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM to the workers still running, SIGKILL to those left after the grace."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _attempt(procs: list[subprocess.Popen]) -> tuple[int, int] | None:
    """Wait for the workers: None when all exit 0, else ``(rank, exit code)`` of the first to
    fail (the others stopped)."""
    while True:
        codes = [p.poll() for p in procs]
        failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            _stop(procs)
            return failed[0]
        if all(c == 0 for c in codes):
            return None
        time.sleep(POLL_S)


def _describe(rank: int, code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        why = f"was killed by {name}"
        if -code == signal.SIGKILL:
            why += " (out of memory? see `dmesg` or the memory cgroup's events)"
        return f"rank {rank} {why}"
    return f"rank {rank} exited with code {code}"


class _Stopped(Exception):
    def __init__(self, signum: int) -> None:
        self.signum = signum


def launch(command: Sequence[str], nproc: int, *, max_restarts: int = 0) -> int:
    """Run ``command`` as ``nproc`` workers (see the module docstring); returns 0 when every
    worker of an attempt exits 0, else 1 (the failure said on stderr), or ``128 + signal``
    when the launcher is stopped."""
    if nproc < 1:
        raise ValueError(f"nproc must be at least 1, got {nproc}")
    run_id = uuid.uuid4().hex
    procs: list[subprocess.Popen] = []

    def stopped(signum, _frame):
        raise _Stopped(signum)

    old = {s: signal.signal(s, stopped) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for attempt in range(max_restarts + 1):
            procs = _start(command, nproc, attempt, max_restarts, run_id)
            failed = _attempt(procs)
            if failed is None:
                return 0
            left = max_restarts - attempt
            what = _describe(*failed)
            if left:
                print(
                    f"shoal: {what}; restarting the {nproc} workers ({left} restart(s) left)",
                    file=sys.stderr,
                    flush=True,
                )
                continue
            print(f"shoal: distributed training failed: {what}", file=sys.stderr, flush=True)
        return 1
    except _Stopped as e:
        _stop(procs)
        return 128 + e.signum
    except KeyboardInterrupt:  # a SIGINT before the handler was set
        _stop(procs)
        return 128 + signal.SIGINT
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m shoal.launcher --nproc N [--max-restarts R] [--remove DIR] -- COMMAND...``"""
    parser = argparse.ArgumentParser(
        prog="python -m shoal.launcher",
        description="Run COMMAND as N workers with torchrun's environment (started by `shoal "
        "train --store ... --nproc N`).",
    )
    parser.add_argument("--nproc", type=int, required=True, help="workers to start")
    parser.add_argument(
        "--max-restarts", type=int, default=0, help="restart all workers up to N times (0)"
    )
    parser.add_argument("--remove", help="a directory to delete when the run ends")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or args.nproc < 1 or args.max_restarts < 0:
        parser.error("give --nproc >= 1, --max-restarts >= 0 and a command after --")
    try:
        return launch(command, args.nproc, max_restarts=args.max_restarts)
    finally:
        if args.remove:
            shutil.rmtree(args.remove, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
