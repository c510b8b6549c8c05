"""Row backends by name: a backend written in a test serves whole runs (training and
evaluation) in one process and in the engines, with the file backend's results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shoal.cli.demo import bundled_dataset
from shoal.data.importers import import_graph
from shoal.errors import ShoalInputError
from shoal.rows.backends import get_row_backend, row_backend_names, use_row_backend
from shoal.rows.direct import RowFile
from shoal.rows.memory import MappedRows
from shoal.rows.opener import open_rows
from tests.rows.counting_backend import read_log

REPO = Path(__file__).resolve().parents[2]
CORA = bundled_dataset("cora")

PLUGIN = "counting=tests.rows.counting_backend:CountingRows"


def test_an_unknown_backend_is_refused_with_the_valid_names(monkeypatch):
    monkeypatch.setenv("SHOAL_ROW_BACKENDS", PLUGIN)
    assert {"file", "mmap", "counting"} <= set(row_backend_names())
    with pytest.raises(ShoalInputError, match="counting or file or mmap"):
        get_row_backend("nfs")


def test_the_mmap_backend_reads_what_the_file_holds(tmp_path):
    x = np.random.default_rng(0).standard_normal((50, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    arr = np.load(tmp_path / "x.npy", mmap_mode="r")
    try:
        use_row_backend("mmap")
        src = open_rows(arr)
    finally:
        use_row_backend("file")
    assert isinstance(src, MappedRows)
    ids = np.array([1, 7, 30, 49])
    out = np.zeros((4, 3), np.float32)
    assert src.read(ids, out, dest=np.array([3, 2, 1, 0])) == 4 * 12
    assert np.array_equal(out, x[ids[::-1]])
    assert src.stats.bytes == 48 and RowFile.of(arr).num_rows == 50


@pytest.fixture(scope="module")
def cora(tmp_path_factory):
    """Bundled Cora and a 2-part store of it (with halo features)."""
    root = tmp_path_factory.mktemp("backends")
    g = import_graph(CORA, root / "cora")
    for args in (
        ["partition", str(g.path), "--algo", "ldg", "--parts", "2", "--out", str(root / "a")],
        ["store", "build", str(g.path), str(root / "a"), "--out", str(root / "s")],
    ):
        subprocess.run([sys.executable, "-m", "shoal", *args], check=True, capture_output=True)
    return g.path, root / "s"


def _run(args: list[str], tmp_path, name: str, backend: str | None, env) -> dict:
    out = tmp_path / f"{name}.json"
    extra = ["--rows-backend", backend] if backend else []
    r = subprocess.run(
        [sys.executable, "-m", "shoal", *args, *extra, "--json", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        cwd=REPO,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize(
    "where",
    [["--graph"], ["--engine", "minibatch"], ["--engine", "hec"]],
    ids=["one-process", "minibatch", "hec"],
)
def test_a_backend_from_a_test_serves_a_whole_run(where, tmp_path, cora):
    """The counting backend, chosen by name, reads every row of the run (shoal's own reads
    raise in every process: ``SHOAL_TEST_ROWS_STRICT``), training and evaluation give the
    file backend's numbers, and the log holds reads of the feature files."""
    base = ["train", "--epochs", "1", "--seed", "0", "--threads", "1"]
    graph, store = cora
    if where[0] == "--graph":
        base += ["--graph", str(graph)]
    else:
        base += ["--store", str(store), *where, "--nproc", "2"]
    ref = _run(base, tmp_path, "file", None, {})
    log = tmp_path / "log"
    log.mkdir()
    env = {
        "SHOAL_ROW_BACKENDS": PLUGIN,
        "SHOAL_TEST_ROWS_LOG": str(log),
        "SHOAL_TEST_ROWS_STRICT": "1",
    }
    got = _run(base, tmp_path, "counting", "counting", env)
    for k in ("test_accuracy", "val_accuracy", "best_epoch"):
        assert got[k] == ref[k], k
    assert [e["loss"] for e in got["history"]] == pytest.approx(
        [e["loss"] for e in ref["history"]], rel=1e-6
    )
    reads = read_log(log)
    assert sum(r for r, _, _ in reads) > 0
    assert any("features" in p for _, _, p in reads)
