"""``shoal verify`` / ``shoal inspect`` / ``shoal store build`` CLI, corruption detection, Cora."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from shoal.partition.base import Assignment
from shoal.partition.io import write_assignment
from shoal.store.reader import Store

EDGES = [(0, 1), (1, 0), (1, 2), (2, 3), (3, 1), (0, 3), (3, 0), (5, 2), (2, 5), (4, 4)]


@pytest.fixture
def small_store(make_graph, tmp_path, run_cli):
    rng = np.random.default_rng(0)
    g = make_graph(
        EDGES,
        7,
        x=rng.standard_normal((7, 3)).astype(np.float32),
        y=[0, 1, 2, 0, 1, 2, -1],
        train=[0, 2],
        val=[3],
        test=[5, 6],
    )
    a = tmp_path / "a"
    write_assignment(a, Assignment(np.array([1, 0, 1, 0, 2, 1, 0]), 3, "hash"), g)
    out = tmp_path / "s"
    code, stdout, err = run_cli(
        "store", "build", g.path, a, "--out", out, "--halo-features", "--json", tmp_path / "b.json"
    )
    assert code == 0, err
    assert "3 parts" in stdout
    assert json.loads((tmp_path / "b.json").read_text())["num_edges"] == len(EDGES)
    return out


def test_verify_ok_and_inspect(small_store, run_cli, tmp_path):
    code, out, err = run_cli("verify", small_store)
    assert code == 0, err
    assert "OK" in out and "in-edge multiset" in out and "skip" not in out
    code, out, _ = run_cli("inspect", small_store, "--json", tmp_path / "i.json")
    assert code == 0 and "replication factor" in out
    rep = json.loads((tmp_path / "i.json").read_text())
    assert [p["nodes"] for p in rep["parts"]] == [3, 3, 1]
    assert rep["edge_cut"] == pytest.approx(Store.open(small_store).meta["metrics"]["edge_cut"])


def test_every_corrupted_byte_is_reported(small_store, run_cli):
    files = sorted(p for p in small_store.rglob("*") if p.is_file())
    assert len(files) > 20
    for f in files:
        rel = f.relative_to(small_store).as_posix()
        original = f.read_bytes()
        positions = sorted({0, len(original) // 2, len(original) - 1}) if original else [None]
        for pos in positions:
            if pos is None:  # empty file (an empty bucket): corrupt it by appending a byte
                f.write_bytes(b"\x00")
            else:
                data = bytearray(original)
                data[pos] ^= 0xFF
                f.write_bytes(bytes(data))
            code, _, err = run_cli("verify", small_store)
            f.write_bytes(original)
            assert code == 2, f"flipping byte {pos} of {rel} went unnoticed"
            assert rel in err, f"{rel} not named in: {err}"
    assert run_cli("verify", small_store)[0] == 0


def test_verify_catches_consistent_tampering(small_store, run_cli, tmp_path):
    """A file changed *and* its checksum updated is still caught by the invariants."""
    from shoal.store._io import write_meta
    from shoal.utils.io import file_checksum

    store = Store.open(small_store)
    part = store.part(0)
    idx = np.array(part.indices)
    idx[0] = (idx[0] + 1) % part.num_nodes
    np.save(part.path / "indices.npy", idx)
    meta = dict(store.meta)
    meta["files"]["part_0/indices.npy"]["checksum"] = file_checksum(part.path / "indices.npy")
    write_meta(small_store / "meta.json", meta)
    code, _, err = run_cli("verify", small_store)
    assert code == 2 and "part_0" in err


def test_verify_missing_source_is_skipped(small_store, run_cli, tmp_path):
    meta = Store.open(small_store).meta
    shutil.rmtree(meta["graph"]["path"])
    code, out, _ = run_cli("verify", small_store)
    assert code == 0 and "skip" in out and "not found" in out


def test_verify_not_a_store(tmp_path, run_cli):
    code, _, err = run_cli("verify", tmp_path)
    assert code == 2 and "meta.json" in err


def test_store_module_entry_point(small_store, tmp_path, capsys):
    from shoal.cli import main

    assert main(["inspect", str(small_store)]) == 0
    assert "3 parts" in capsys.readouterr().out


# ------------------------------------------------------------------------------ shared data
def independent_metrics(g, node_part: np.ndarray) -> tuple[float, float]:
    e = np.asarray(g.edge_stream().memmap())
    s, d = e[:, 0].astype(np.int64), e[:, 1].astype(np.int64)
    cross = node_part[s] != node_part[d]
    pairs = np.unique(s[cross] * 1000 + node_part[d][cross])  # (halo node, part) pairs
    return (g.num_nodes + pairs.shape[0]) / g.num_nodes, float(cross.mean())


@pytest.mark.shared
@pytest.mark.parametrize("algorithm", ["hash", "spring"])
def test_cora_store_passes_verify(shared_data, tmp_path, run_cli, algorithm):
    from shoal.data.importers import import_graph
    from shoal.partition.base import available, get_partitioner
    from shoal.partition.metrics import partition_metrics

    if algorithm not in available():
        pytest.skip(f"{algorithm} partitioner not available")
    g = import_graph(shared_data("cora"), tmp_path / "cora")
    tm = g.mask("train")
    a = get_partitioner(algorithm, num_parts=4, seed=0).partition(g, tm)
    metrics = partition_metrics(g, a.node_part, 4, train_mask=tm)
    write_assignment(tmp_path / "a", a, g, metrics=metrics)
    code, _, err = run_cli(
        "store", "build", g.path, tmp_path / "a", "--out", tmp_path / "s", "--halo-features"
    )
    assert code == 0, err
    code, out, err = run_cli("verify", tmp_path / "s")
    assert code == 0, err
    assert "skip" not in out
    rf, cut = independent_metrics(g, np.asarray(a.node_part))
    code, out, _ = run_cli("inspect", tmp_path / "s", "--json", tmp_path / "i.json")
    rep = json.loads((tmp_path / "i.json").read_text())
    assert rep["replication_factor"] == pytest.approx(rf)
    assert rep["edge_cut"] == pytest.approx(cut)
    assert rep["partition"]["metrics"]["replication_factor"] == pytest.approx(rf)
    assert rep["partition"]["metrics"]["edge_cut"] == pytest.approx(cut)
    assert sum(p["nodes"] for p in rep["parts"]) == g.num_nodes == 2708
    assert sum(p["edges"] for p in rep["parts"]) == g.num_edges
    assert sum(p["train"] for p in rep["parts"]) == 140
    # reader: features of every node equal the graph's rows
    store = Store.open(tmp_path / "s")
    new = store.to_new(np.arange(g.num_nodes))
    assert np.array_equal(store.features(new), np.asarray(g.features()))


# ------------------------------------------------------------------------------ scratch space
@pytest.fixture
def no_system_tmp(tmp_path, monkeypatch):
    """Point the system temp dir at a directory that does not exist: a temporary file made
    there fails the run, even one removed before the run ends."""
    import tempfile

    d = tmp_path / "system-tmp"
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


@pytest.fixture
def sort_inputs(monkeypatch):
    """Record the in-edge file each per-part external sort reads (the writer's work files)."""
    import shoal.store._structure as structure

    seen: list = []
    real = structure.build_csr_files

    def spy(stream, *args, **kwargs):
        assert stream.path.is_file()
        seen.append(stream.path)
        return real(stream, *args, **kwargs)

    monkeypatch.setattr(structure, "build_csr_files", spy)
    return seen


def _assignment(make_graph, tmp_path):
    rng = np.random.default_rng(0)
    g = make_graph(rng.integers(0, 50, (400, 2)), 50, x=rng.standard_normal((50, 4)))
    a = tmp_path / "a"
    write_assignment(a, Assignment(rng.integers(0, 3, 50), 3, "random"), g)
    return g, a


def test_store_build_scratch_dir(make_graph, tmp_path, run_cli, no_system_tmp, sort_inputs):
    g, a = _assignment(make_graph, tmp_path)
    scratch = tmp_path / "scratch"
    out = tmp_path / "stores" / "s"
    code, _, err = run_cli("store", "build", g.path, a, "--out", out, "--scratch-dir", scratch)
    assert code == 0, err
    assert len(sort_inputs) == 3
    for f in sort_inputs:
        assert f.parent.parent == scratch and f.parent.name.startswith(".shoal-store-scratch.tmp-")
    assert list(scratch.iterdir()) == []
    assert sorted(p.name for p in out.parent.iterdir()) == ["s"]
    assert not no_system_tmp.exists()
    assert run_cli("verify", out)[0] == 0


def test_store_build_default_scratch_is_beside_the_output(
    make_graph, tmp_path, run_cli, no_system_tmp, sort_inputs
):
    g, a = _assignment(make_graph, tmp_path)
    out = tmp_path / "stores" / "s"
    code, _, err = run_cli("store", "build", g.path, a, "--out", out)
    assert code == 0, err
    assert sort_inputs and all(f.parent.parent == out.parent for f in sort_inputs)
    assert sorted(p.name for p in out.parent.iterdir()) == ["s"]
    assert not no_system_tmp.exists()


def test_store_build_help_names_the_scratch_default():
    import argparse

    from shoal.cli import store as cli_store

    parser = argparse.ArgumentParser()
    cli_store.register(parser.add_subparsers())
    build = parser._subparsers._group_actions[0].choices["store"]
    build = build._subparsers._group_actions[0].choices["build"]
    text = " ".join(build.format_help().split())
    assert "--scratch-dir DIR" in text and "default: the directory that will hold STORE" in text


# ------------------------------------------------------------------------------ killed builds
@pytest.mark.slow
def test_killed_build_leaves_a_stale_sibling_that_the_next_build_removes(
    make_graph, tmp_path, run_cli
):
    import os
    import signal
    import subprocess
    import sys
    import time

    rng = np.random.default_rng(0)
    n, m = 100_000, 500_000
    g = make_graph(rng.integers(0, n, (m, 2)), n)
    a = tmp_path / "a"
    write_assignment(a, Assignment(rng.integers(0, 4, n), 4, "random"), g)
    out = tmp_path / "s"
    # small chunks make pass 1 take seconds: time to kill the writer in the middle
    cmd = [sys.executable, "-m", "shoal", "store", "build", str(g.path), str(a), "--out", str(out)]
    proc = subprocess.Popen([*cmd, "--chunk-edges", "500"], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    stale = None
    while time.monotonic() < deadline and proc.poll() is None:
        owners = list(tmp_path.glob(".s.tmp-*.owner"))
        if owners:
            cand = owners[0].with_name(owners[0].name[: -len(".owner")])
            if (cand / "part_offsets.npy").is_file():  # the writer is past its setup
                stale = cand
                break
        time.sleep(0.01)
    assert proc.poll() is None, f"the build ended before it could be killed: {proc.stderr.read()}"
    assert stale is not None, "no temporary output appeared"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    # left behind: the temporary output, its owner file and the writer's scratch directory
    assert stale.is_dir() and stale.with_name(stale.name + ".owner").is_file()
    assert not out.exists()
    scratch = list(tmp_path.glob(".shoal-store-scratch.tmp-*"))
    assert [p for p in scratch if p.is_dir()]

    again = subprocess.run(cmd, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert not stale.exists() and not stale.with_name(stale.name + ".owner").exists()
    assert not any(p.exists() for p in scratch)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "g1", "s"]
    assert "WARNING" in again.stderr and f"removed {stale}" in again.stderr
    code, stdout, err = run_cli("verify", out)
    assert code == 0, err
    assert "skip" not in stdout
