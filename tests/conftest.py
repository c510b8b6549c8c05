"""Shared test helpers.

- ``shared_data(name)``: path of ``../shared/data/<name>/graph.npz``; skips the test when the
  shared datasets are absent (a user's clone has no ``../shared``; CI has it).
- ``make_graph(edges, num_nodes=None, **node_data)``: a graph directory in ``tmp_path`` from a
  tiny hand-built edge list.
- ``run_cli(*args)``: runs ``shoal`` in-process, returns ``(exit_code, stdout, stderr)``.
- ``small_fs(size)``: a fresh size-limited tmpfs (e.g. ``"64k"``) in ``tmp_path``, unmounted
  after the test; skips the test where mounting needs a root this process is not.

Every test runs under a watchdog (``SHOAL_TEST_TIMEOUT`` seconds, default 600): a test still
running then has every thread's traceback written to the worker's stderr and its process ended,
so a hang fails that one test (xdist names it and starts a new worker) instead of stalling the
suite until CI's own limit kills it with nothing to show. faulthandler's timer is a C thread:
it fires even while a compiled kernel holds the GIL.
"""

from __future__ import annotations

import faulthandler
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shoal.data.format import GraphDir, GraphWriter
from tests.engines.conftest import make_store  # noqa: F401  (store fixture shared with tests/dist)

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
TEST_TIMEOUT_S = float(os.environ.get("SHOAL_TEST_TIMEOUT", "600"))
#: where a timed-out test's tracebacks go (an xdist worker's stderr reaches no terminal); the
#: controlling process prints them in its summary
WATCHDOG_DIR = REPO / ".pytest_cache" / "watchdog"


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):  # the controlling process (or no xdist)
        shutil.rmtree(WATCHDOG_DIR, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Arms the watchdog for one test (setup, call and teardown); see the module docstring."""
    if TEST_TIMEOUT_S <= 0:
        yield
        return
    worker = hasattr(item.config, "workerinput")  # else one process: stderr is the terminal's
    log = sys.__stderr__
    if worker:
        WATCHDOG_DIR.mkdir(parents=True, exist_ok=True)
        name = "".join(c if c.isalnum() or c in "._-" else "_" for c in item.nodeid)
        log = open(WATCHDOG_DIR / f"{name[-150:]}.{os.getpid()}.txt", "w")  # noqa: SIM115
        log.write(f"{item.nodeid} still running after {TEST_TIMEOUT_S:.0f} s ")
        log.write("(SHOAL_TEST_TIMEOUT); every thread's stack:\n")
        log.flush()
    faulthandler.dump_traceback_later(TEST_TIMEOUT_S, exit=True, file=log)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        if worker:
            log.close()
            os.unlink(log.name)


def pytest_terminal_summary(terminalreporter):
    for path in sorted(WATCHDOG_DIR.glob("*.txt")) if WATCHDOG_DIR.is_dir() else []:
        terminalreporter.write_sep("=", f"watchdog: {path.name}")
        terminalreporter.write(path.read_text(errors="replace"))


@pytest.fixture
def shared_data():
    def get(name: str) -> Path:
        p = SHARED_DATA / name / "graph.npz"
        if not p.exists():
            pytest.skip(f"shared dataset {name} not found at {p} (../shared/data is absent)")
        return p

    return get


@pytest.fixture
def make_graph(tmp_path):
    counter = [0]

    def make(
        edges,
        num_nodes: int | None = None,
        *,
        directed: bool = True,
        x=None,
        y=None,
        train=None,
        val=None,
        test=None,
        name: str | None = None,
    ) -> GraphDir:
        counter[0] += 1
        out = tmp_path / (name or f"g{counter[0]}")
        e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
        with GraphWriter(out, num_nodes=num_nodes, directed=directed) as w:
            w.add_edges(e)
            w.finish_edges()
            if x is not None:
                w.write_features(np.asarray(x, dtype=np.float32))
            if y is not None:
                w.write_labels(np.asarray(y))
            for s, v in (("train", train), ("val", val), ("test", test)):
                if v is not None:
                    w.write_split(s, np.asarray(v))
        return GraphDir.open(out)

    return make


@pytest.fixture
def run_cli(capsys, monkeypatch):
    """``main(args)`` in-process. What ``-q``/``-v`` leave behind for a run's worker
    processes (``SHOAL_QUIET``, ``SHOAL_LOG_LEVEL``, the root logger's level) is undone after
    the test, so later tests' subprocesses log as they would alone."""
    import logging

    from shoal.cli import main

    for name in ("SHOAL_QUIET", "SHOAL_LOG_LEVEL"):
        # set first: monkeypatch records (and so undoes) only what existed when it deleted
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    root = logging.getLogger()
    monkeypatch.setattr(root, "level", root.level)

    def run(*args: str) -> tuple[int, str, str]:
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def small_fs(tmp_path):
    mounts: list[Path] = []

    def make(size: str) -> Path:
        if os.geteuid() != 0 or shutil.which("mount") is None:
            pytest.skip("a small filesystem (tmpfs) needs root and mount(8)")
        d = tmp_path / f"fs{len(mounts)}"
        d.mkdir()
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)],
            capture_output=True,
            text=True,
        )
        if r.returncode:
            pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
        mounts.append(d)
        return d

    yield make
    for d in mounts:
        subprocess.run(["umount", "-l", str(d)], check=False)
