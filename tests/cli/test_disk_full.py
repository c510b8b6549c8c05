"""Every command that writes reports a full disk in one line and leaves nothing behind.

Each test writes onto a size-limited tmpfs (``small_fs``, root only; skipped without it): the
command exits 1, its standard error is one line naming the output, the filesystem (mount and
type) and its free bytes (and the bytes needed where the command knows them up front), and the
filesystem holds nothing afterwards.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest

NODES, EDGES, FEATURES = 2000, 10_000, 16


def _one_line(err: str, fs: Path, *, need: bool | None = False) -> str:
    """The one line of ``err``; ``need``: whether it names the bytes needed (None: either)."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert (
        line.startswith("shoal: error: ") and f"{fs} (tmpfs) has " in line and " free of " in line
    )
    assert need is None or ("needs at least" in line) == need, line
    return line


def _empty(fs: Path) -> bool:
    return [p.name for p in fs.iterdir()] == []


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """A small graph, its assignment and a finished run with a checkpoint, on a roomy disk."""
    import logging
    import os

    from shoal.cli import main

    saved = {k: os.environ.get(k) for k in ("SHOAL_QUIET", "SHOAL_LOG_LEVEL")}
    level = logging.getLogger().level
    d = tmp_path_factory.mktemp("disk_full")
    g, p, ck = d / "g", d / "p", d / "ck"
    synth = ["data", "synth", "dcsbm", "--nodes", NODES, "--edges", EDGES]
    assert main([str(a) for a in [*synth, "--features", FEATURES, "--out", g, "-q"]]) == 0
    assert main(["partition", str(g), "--parts", "2", "--out", str(p), "-q"]) == 0
    train = ["train", "--graph", g, "--epochs", 1, "--hidden", 16, "--fanouts", "5,5"]
    run = [*train, "--checkpoint-dir", ck, "--json", d / "run.json", "--no-progress", "-q"]
    assert main([str(a) for a in run]) == 0
    yield {"graph": g, "assignment": p, "checkpoint": ck, "run": d / "run.json", "dir": d}
    for k, v in saved.items():  # what -q set for worker processes must not reach later tests
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    logging.getLogger().setLevel(level)


def test_synth_is_refused_up_front(small_fs, run_cli):
    fs = small_fs("64k")
    synth = f"data synth dcsbm --nodes {NODES} --edges {EDGES} --features {FEATURES}".split()
    code, _, err = run_cli(*synth, "--out", fs / "g", "-q")
    assert code == 1
    line = _one_line(err, fs, need=True)
    assert line.startswith(f"shoal: error: {fs / 'g'}: not enough space, nothing written")
    assert _empty(fs)


def test_import_of_a_text_edge_list_fails_cleanly(small_fs, run_cli, tmp_path):
    src = tmp_path / "edges.txt"
    rng = np.random.default_rng(0)
    np.savetxt(src, rng.integers(0, NODES, (50_000, 2)), fmt="%d")  # size unknown up front
    fs = small_fs("64k")
    code, _, err = run_cli("data", "import", src, "--out", fs / "g", "-q")
    assert code == 1
    assert "no space left on device, the partial output removed" in _one_line(err, fs)
    assert _empty(fs)


def test_import_of_a_npy_is_refused_up_front(small_fs, run_cli, tmp_path):
    src = tmp_path / "edges.npy"
    np.save(src, np.random.default_rng(0).integers(0, NODES, (2, 50_000)))
    fs = small_fs("64k")
    code, _, err = run_cli("data", "import", src, "--out", fs / "g", "-q")
    assert code == 1
    line = _one_line(err, fs, need=True)
    assert "needs at least 400.0 kB" in line  # 50,000 edges x two int32 ids
    assert _empty(fs)


def test_store_build_is_refused_up_front(small_fs, run_cli, pipeline):
    fs = small_fs("64k")
    g, p = pipeline["graph"], pipeline["assignment"]
    code, _, err = run_cli("store", "build", g, p, "--out", fs / "s", "--halo-features", "-q")
    assert code == 1
    _one_line(err, fs, need=True)
    assert _empty(fs)


def test_store_build_with_a_full_scratch_directory(small_fs, run_cli, pipeline, tmp_path):
    fs = small_fs("16k")
    g, p = pipeline["graph"], pipeline["assignment"]
    out = tmp_path / "s"
    code, _, err = run_cli("store", "build", g, p, "--out", out, "--scratch-dir", fs, "-q")
    assert code == 1
    line = _one_line(err, fs)
    assert "scratch files removed" in line and "--scratch-dir" in line
    assert _empty(fs) and list(tmp_path.iterdir()) == [fs]  # no partial store either


def test_partition(small_fs, run_cli, pipeline):
    fs = small_fs("4k")
    code, _, err = run_cli("partition", pipeline["graph"], "--parts", "2", "--out", fs / "p", "-q")
    assert code == 1
    _one_line(err, fs)
    assert _empty(fs)


def test_csr_into_a_graph_on_a_full_disk(small_fs, run_cli, pipeline):
    src = pipeline["graph"]
    files = [f for f in src.rglob("*") if f.is_file() and "csr_in" not in f.parts]
    pages = sum(-(-f.stat().st_size // 4096) * 4096 for f in files)
    fs = small_fs(f"{pages // 1024 + 16}k")  # the graph, and 16 kB: no room for csr_in
    g = fs / "g"
    shutil.copytree(src, g, ignore=shutil.ignore_patterns("csr_in"))
    before = sorted(p.relative_to(g) for p in g.rglob("*"))
    code, _, err = run_cli("data", "csr", g, "--kind", "in", "-q")
    assert code == 1
    _one_line(err, fs, need=None)
    assert sorted(p.relative_to(g) for p in g.rglob("*")) == before  # the graph as it was


def test_split_edges(small_fs, run_cli, pipeline):
    fs = small_fs("16k")
    code, _, err = run_cli("data", "split-edges", pipeline["graph"], "--out", fs / "sp", "-q")
    assert code == 1
    _one_line(err, fs)
    assert _empty(fs)


def test_train_checkpoint(small_fs, run_cli, pipeline):
    fs = small_fs("4k")
    train = ["train", "--graph", pipeline["graph"], *"--epochs 1 --hidden 16 --fanouts 5,5".split()]
    code, _, err = run_cli(*train, "--checkpoint-dir", fs / "ck", "--no-progress", "-q")
    assert code == 1
    assert "--checkpoint-dir" in _one_line(err, fs)
    assert [p.name for p in (fs / "ck").iterdir()] == []  # no partial checkpoint


def test_embed(small_fs, run_cli, pipeline):
    fs = small_fs("16k")
    g, ck, out = pipeline["graph"], pipeline["checkpoint"], fs / "e.npy"
    code, _, err = run_cli("embed", "--graph", g, "--checkpoint-dir", ck, "--out", out, "-q")
    assert code == 1
    _one_line(err, fs, need=True)  # every node's logits: known when the output is created
    assert _empty(fs)


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs matplotlib")
def test_report(small_fs, run_cli, pipeline):
    fs = small_fs("16k")
    code, _, err = run_cli("report", pipeline["run"], "--out", fs / "rep", "-q")
    assert code == 1
    _one_line(err, fs, need=True)
    assert _empty(fs)
