"""Spawn real process groups for distributed tests (used by every test under tests/dist and
tests/engines).

:func:`run_world` starts ``world_size`` processes (multiprocessing, spawn context), each with
the environment torchrun would give it (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``). The parent hosts the rendezvous TCP store on a free port
chosen by the OS (port 0, so there is no race for a port) and sets
``TORCHELASTIC_USE_AGENT_STORE=True``, exactly as torchrun's agent does, so every rank joins as
a client through ``init_method="env://"``.

The children are forked from a *forkserver* that imported torch, numba and shoal once for the
whole test session (:data:`PRELOAD`), so a world starts in a fraction of a second instead of
paying an interpreter, torch's import and shoal's import per rank (the spawn context's cost,
most of a small distributed test's time). Each child is still a fresh process with its own
process group, exactly as under torchrun; it takes the caller's current environment and
working directory (the forkserver's were fixed when it started). ``SHOAL_TEST_START=spawn``
starts the ranks with the spawn context instead (to rule the forkserver out when a test
misbehaves).

Each child runs ``fn(rank, world_size, *args)`` inside :func:`shoal.distributed.process_group` and
sends back its return value (pickled) or its formatted traceback. The first child that fails
makes :func:`run_world` kill the others and raise :class:`WorldFailed` carrying that rank's
traceback; a run that does not finish within ``timeout`` is killed and fails too.
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp

__all__ = ["PRELOAD", "WorldFailed", "run_world", "torchrun_env"]

#: modules the forkserver imports once, so every rank forked from it starts with them loaded
#: (importing them is free of side effects: no threads, no compiled kernels, no files)
PRELOAD = [
    "numpy",
    "torch",
    "torch.distributed",
    "numba",
    "shoal.distributed",
    "shoal.engines",
    "shoal.store",
    "shoal.training",
    "tests.distributed.helpers",
]


def _context() -> mp.context.BaseContext:
    """The multiprocessing context the ranks start from: the preloaded forkserver (default)
    or spawn (``SHOAL_TEST_START=spawn``)."""
    method = os.environ.get("SHOAL_TEST_START", "forkserver")
    if method not in ("forkserver", "spawn"):
        raise ValueError(f"SHOAL_TEST_START={method!r}: use forkserver or spawn")
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(PRELOAD)
    return ctx


class WorldFailed(AssertionError):
    """A child process failed (or the world timed out); ``rank`` and ``error`` say which/why."""

    def __init__(self, message: str, *, rank: int | None, error: str) -> None:
        super().__init__(message)
        self.rank = rank
        self.error = error


def torchrun_env(rank: int, world_size: int, port: int) -> dict[str, str]:
    """The variables torchrun gives a worker on this machine, the rendezvous store (hosted
    by the caller, as torchrun's agent hosts it) at ``127.0.0.1:port``."""
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(world_size),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "OMP_NUM_THREADS": "1",
    }


def _child(
    fn: Callable[..., Any],
    rank: int,
    world_size: int,
    port: int,
    args: tuple,
    out_dir: str,
    timeout_s: float,
    environ: dict[str, str],
    cwd: str,
) -> None:
    # the caller's environment and folder as they are now (a forkserver's child inherits
    # the server's, fixed when it started), then what torchrun would add
    os.environ.clear()
    os.environ.update(environ)
    os.environ.update(torchrun_env(rank, world_size, port))
    os.chdir(cwd)
    # numba was imported (with the default pool size) while this function was unpickled;
    # changing NUMBA_NUM_THREADS now would make its next compile raise "Cannot set
    # NUMBA_NUM_THREADS to a different value once the threads have been launched", so
    # limit the threads in use through the runtime API instead
    import numba

    numba.set_num_threads(1)
    # a crash in native code (exit -11) leaves no traceback: have faulthandler write every
    # thread's Python stack to a file the parent reads back into the failure's message
    crash_log = open(Path(out_dir) / f"rank{rank}.crash", "w")  # noqa: SIM115 (lives as long as the process)
    faulthandler.enable(crash_log, all_threads=True)
    path = Path(out_dir) / f"rank{rank}.pkl"
    failure: tuple[str, float] | None = None
    try:
        import torch

        torch.set_num_threads(1)
        from shoal.distributed import DistConfig, process_group

        with process_group(DistConfig(timeout_s=timeout_s)):
            try:
                result = fn(rank, world_size, *args)
            except BaseException:
                # stamp the failure before teardown: destroying the group makes peers fail too
                failure = (traceback.format_exc(), time.time())
                raise
        payload = ("ok", result, time.time())
    except BaseException:
        tb, stamp = failure or (traceback.format_exc(), time.time())
        payload = ("error", tb, stamp)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        pickle.dump(payload, f)
    os.replace(tmp, path)
    if payload[0] == "error":
        os._exit(1)


def _root_cause(bad: list[int], out_dir: Path) -> int:
    """The failed rank that wrote its traceback first (later ones are usually knock-ons)."""
    time.sleep(0.3)
    stamped = []
    for path in out_dir.glob("rank*.pkl"):
        try:
            payload = pickle.loads(path.read_bytes())
        except Exception:  # still being written
            continue
        if payload[0] == "error":
            stamped.append((payload[2], int(path.stem[4:])))
    return min(stamped)[1] if stamped else bad[0]


def _crash(code: int | None, out_dir: Path, rank: int) -> str:
    """What a rank that wrote no result left: its exit code and faulthandler's stacks."""
    log = out_dir / f"rank{rank}.crash"
    stacks = log.read_text(errors="replace").strip() if log.exists() else ""
    return f"exit code {code}, no output" + (f"; faulthandler:\n{stacks}" if stacks else "")


def run_world(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    timeout: float = 120.0,
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` processes; return their results.

    ``fn`` must be importable (a module-level function) and its arguments picklable.
    Raises :class:`WorldFailed` with the failing rank's traceback if any rank fails or the
    world runs past ``timeout`` seconds.
    """
    ctx = _context()
    store = dist.TCPStore("127.0.0.1", 0, world_size, True, wait_for_workers=False)
    port = store.port
    with tempfile.TemporaryDirectory(prefix="shoal-world-") as out_dir:
        procs = [
            ctx.Process(
                target=_child,
                args=(
                    fn,
                    r,
                    world_size,
                    port,
                    args,
                    out_dir,
                    max(timeout / 2, 5.0),
                    dict(os.environ),
                    os.getcwd(),
                ),
                daemon=True,
            )
            for r in range(world_size)
        ]
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout
        failed: int | None = None
        try:
            while True:
                codes = [p.exitcode for p in procs]
                bad = [r for r, c in enumerate(codes) if c not in (None, 0)]
                if bad:
                    failed = _root_cause(bad, Path(out_dir))
                    break
                if all(c == 0 for c in codes):
                    break
                if time.monotonic() > deadline:
                    raise WorldFailed(
                        f"world of {world_size} timed out after {timeout:.0f} s "
                        f"(ranks still running: {[r for r, c in enumerate(codes) if c is None]})",
                        rank=None,
                        error="timeout",
                    )
                time.sleep(0.05)
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
            for p in procs:
                p.join(10)
            del store
        results: list[Any] = []
        for r in range(world_size):
            path = Path(out_dir) / f"rank{r}.pkl"
            payload = pickle.loads(path.read_bytes()) if path.exists() else None
            if failed is not None:
                if r == failed:
                    err = payload[1] if payload else _crash(procs[r].exitcode, Path(out_dir), r)
                    raise WorldFailed(
                        f"rank {r} of {world_size} failed:\n{err}", rank=r, error=str(err)
                    )
                continue
            results.append(payload[1])
        return results
