"""Shared test helpers.

- ``shared_data(name)``: path of ``../shared/data/<name>/graph.npz``; skips the test when the
  shared datasets are absent (a user's clone has no ``../shared``; CI has it).
- ``make_graph(edges, num_nodes=None, **node_data)``: a graph directory in ``tmp_path`` from a
  tiny hand-built edge list.
- ``run_cli(*args)``: runs ``shoal`` in-process, returns ``(exit_code, stdout, stderr)``.
- ``small_fs(size)``: a fresh size-limited tmpfs (e.g. ``"64k"``) in ``tmp_path``, unmounted
  after the test; skips the test where mounting needs a root this process is not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from shoal.data.format import GraphDir, GraphWriter
from tests.engines.conftest import make_store  # noqa: F401  (store fixture shared with tests/dist)

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


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
