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
