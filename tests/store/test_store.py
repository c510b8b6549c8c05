"""The partitioned store: round trips on hand-built graphs, reader API, bad inputs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.partition.base import Assignment
from shoal.partition.io import write_assignment
from shoal.store.reader import Store
from shoal.store.verify import inspect_store, verify_store
from shoal.store.writer import build_store


def assign(g, node_part, p, tmp_path: Path, name: str = "a") -> Path:
    out = tmp_path / name
    write_assignment(out, Assignment(np.asarray(node_part), p, "hash"), g)
    return out


def store_edges_orig(store: Store) -> Counter:
    """Every (src, dst) in original ids, rebuilt from the parts' local CSRs."""
    c: Counter = Counter()
    for part in store.parts():
        for r in range(part.num_core):
            dst = int(part.orig_ids[r])
            for loc in part.in_neighbors(r):
                c[(int(part.orig_ids[loc]), dst)] += 1
    return c


def check_round_trip(g, node_part, p, store_path: Path) -> Store:
    store = Store.open(store_path)
    n = g.num_nodes
    node_part = np.asarray(node_part)
    edges = np.asarray(g.edge_stream().memmap()).reshape(-1, 2)
    src_edges = Counter((int(s), int(d)) for s, d in edges)
    # every edge accounted for: same multiset of in-edges
    assert store_edges_orig(store) == src_edges
    # relabelling: contiguous ranges per part; inside a part, descending in-degree (ties in
    # original id) or ascending original id
    offs = store.part_offsets
    assert offs.tolist() == [0, *np.cumsum(np.bincount(node_part, minlength=p)).tolist()]
    in_deg = np.bincount(edges[:, 1], minlength=n) if len(edges) else np.zeros(n, np.int64)
    for i in range(p):
        part = store.part(i)
        core_old = np.asarray(part.orig_ids[: part.num_core])
        members = np.flatnonzero(node_part == i)
        if store.meta["node_order"] == "degree":
            members = np.array(sorted(members, key=lambda v: (-in_deg[v], v)), dtype=np.int64)
        assert core_old.tolist() == members.tolist()
        # halo = in-neighbours of core nodes owned elsewhere
        expected_halo = {int(s) for s, d in edges if node_part[d] == i and node_part[s] != i}
        got_halo = set(np.asarray(part.orig_ids[part.num_core :]).tolist())
        assert got_halo == expected_halo
        assert np.all(store.owner(part.halo_ids) != i)
        # local <-> global
        loc = np.arange(part.num_nodes)
        glob = part.local_to_global(loc)
        assert part.global_to_local(glob).tolist() == loc.tolist()
        assert store.to_orig(glob).tolist() == np.asarray(part.orig_ids).tolist()
    # owner lookup by binary search equals the assignment
    new = store.to_new(np.arange(n))
    assert store.owner(new).tolist() == node_part.tolist()
    # edge buckets: counts per (owner(src), owner(dst))
    counts = np.zeros((p, p), dtype=np.int64)
    for s, d in edges:
        counts[node_part[s], node_part[d]] += 1
    assert store.bucket_counts.tolist() == counts.tolist()
    for i in range(p):
        for j in range(p):
            b = np.asarray(store.bucket(i, j))
            want = [(int(s), int(d)) for s, d in edges if node_part[s] == i and node_part[d] == j]
            got = [tuple(int(x) for x in store.to_orig(row)) for row in b]
            assert got == want  # stored sequentially, in the graph's edge order
    return store


EDGES = [(0, 1), (1, 0), (1, 2), (2, 3), (3, 1), (0, 3), (3, 0), (5, 2), (2, 5)]


def test_round_trip_hand_built(make_graph, tmp_path):
    x = np.arange(7 * 3, dtype=np.float32).reshape(7, 3)
    y = np.array([0, 1, 2, 0, 1, 2, -1])
    g = make_graph(EDGES, 7, x=x, y=y, train=[0, 2], val=[3], test=[5, 6])
    node_part = [1, 0, 1, 0, 2, 1, 0]
    a = assign(g, node_part, 3, tmp_path)
    res = build_store(g, a, tmp_path / "s", halo_features=True)
    assert res["num_parts"] == 3
    store = check_round_trip(g, node_part, 3, tmp_path / "s")
    # node data
    for part in store.parts():
        core_old = np.asarray(part.orig_ids[: part.num_core])
        assert np.array_equal(part.features, x[core_old])
        assert np.array_equal(part.labels, y[core_old])
        assert part.train_mask.tolist() == [int(v) in (0, 2) for v in core_old]
        assert part.test_mask.tolist() == [int(v) in (5, 6) for v in core_old]
        halo_old = np.asarray(part.orig_ids[part.num_core :])
        assert np.array_equal(part.halo_features, x[halo_old])
    # features of any core ids, gathered by owner, into a given buffer
    ids = np.array([6, 0, 3, 4, 1])
    buf = np.zeros((8, 3), dtype=np.float32)
    got = store.features(ids, out=buf)
    assert np.array_equal(got, x[store.to_orig(ids)])
    assert np.shares_memory(got, buf)
    assert store.labels(ids).tolist() == y[store.to_orig(ids)].tolist()
    rep = verify_store(tmp_path / "s")
    assert rep["ok"] and not rep["skipped"]


def test_hand_computed_layout(make_graph, tmp_path):
    # 0 -> 1, 2 -> 1, 1 -> 2 ; parts: {1} = part 0, {0, 2} = part 1
    g = make_graph([(0, 1), (2, 1), (1, 2)], 3)
    a = assign(g, [1, 0, 1], 2, tmp_path)
    build_store(g, a, tmp_path / "s")  # node_order="id" by default
    s = Store.open(tmp_path / "s")
    assert s.meta["node_order"] == "id"
    assert s.part_offsets.tolist() == [0, 1, 3]
    assert np.asarray(s.node_map).tolist() == [1, 0, 2]
    assert np.asarray(s.node_map_inv).tolist() == [1, 0, 2]
    p0 = s.part(0)  # core: new 0 (old 1); in-edges from old 0, 2 = new 1, 2, both halo
    assert p0.halo_ids.tolist() == [1, 2]
    assert p0.indptr.tolist() == [0, 2]
    assert p0.indices.tolist() == [1, 2]
    p1 = s.part(1)  # core: new 1 (old 0), new 2 (old 2); old 2 has in-edge from old 1 = new 0
    assert p1.halo_ids.tolist() == [0]
    assert p1.indptr.tolist() == [0, 0, 1]
    assert p1.indices.tolist() == [2]
    assert p1.global_to_local([0, 1, 2]).tolist() == [2, 0, 1]
    assert p0.global_to_local([0, 1, 2]).tolist() == [0, 1, 2]
    assert s.bucket_counts.tolist() == [[0, 1], [2, 0]]
    m = s.meta["metrics"]
    assert m["edge_cut"] == 1.0 and m["replication_factor"] == pytest.approx(6 / 3)


def test_hand_computed_degree_order(make_graph, tmp_path):
    # 0 -> 1, 2 -> 1, 1 -> 2: in-degrees 0, 2, 1; parts: {1} = part 0, {0, 2} = part 1, where
    # old 2 (in-degree 1) comes before old 0 (in-degree 0)
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    g = make_graph([(0, 1), (2, 1), (1, 2)], 3, x=x)
    a = assign(g, [1, 0, 1], 2, tmp_path)
    build_store(
        g, a, tmp_path / "s", halo_features=True, feature_block_bytes=8, node_order="degree"
    )
    s = Store.open(tmp_path / "s")
    assert s.meta["node_order"] == "degree"
    assert np.asarray(s.node_map).tolist() == [2, 0, 1]
    assert np.asarray(s.node_map_inv).tolist() == [1, 2, 0]
    assert np.array_equal(s.part(0).features, x[[1]])
    assert np.array_equal(s.part(1).features, x[[2, 0]])
    p0 = s.part(0)  # core: new 0 (old 1); in-edges from old 0 = new 2, old 2 = new 1
    assert p0.halo_ids.tolist() == [1, 2]
    assert np.array_equal(p0.halo_features, x[[2, 0]])
    assert sorted(p0.indices.tolist()) == [1, 2]
    p1 = s.part(1)  # new 1 (old 2) has the in-edge from old 1 = new 0; new 2 (old 0) none
    assert p1.halo_ids.tolist() == [0]
    assert p1.indptr.tolist() == [0, 1, 1]
    assert p1.indices.tolist() == [2]
    assert verify_store(tmp_path / "s")["ok"]


@pytest.mark.parametrize("order", ["degree", "id"])
def test_feature_rows_follow_node_order_with_tiny_blocks(make_graph, tmp_path, order):
    """Many buckets (one block of a few rows each) and an empty part: every part's feature
    rows are exactly the graph's rows of its nodes, in the store's order."""
    rng = np.random.default_rng(3)
    n = 40
    edges = [tuple(e) for e in rng.integers(0, n, size=(120, 2))]
    x = rng.standard_normal((n, 3)).astype(np.float32)
    g = make_graph(edges, n, x=x)
    node_part = rng.integers(0, 3, size=n) * (rng.random(n) < 0.9)  # part 1 or 2 may be small
    node_part[node_part == 1] = 3  # part 1 empty
    a = assign(g, node_part, 4, tmp_path)
    build_store(g, a, tmp_path / "s", node_order=order, feature_block_bytes=3 * 12)
    store = check_round_trip(g, node_part, 4, tmp_path / "s")
    for part in store.parts():
        assert np.array_equal(part.features, x[np.asarray(part.orig_ids[: part.num_core])])


def test_edge_cases_isolated_empty_parts_self_loops_duplicates(make_graph, tmp_path):
    edges = [(0, 0), (0, 1), (0, 1), (1, 0), (3, 3), (1, 3)]  # self-loops, a duplicate
    g = make_graph(edges, 6, x=np.ones((6, 2), dtype=np.float32))  # 2, 4, 5 isolated
    node_part = [0, 2, 2, 0, 2, 0]  # parts 1 and 3 empty
    a = assign(g, node_part, 4, tmp_path)
    build_store(g, a, tmp_path / "s", halo_features=True)
    s = check_round_trip(g, node_part, 4, tmp_path / "s")
    assert s.part(1).num_core == 0 and s.part(1).num_edges == 0
    assert s.part(1).indptr.tolist() == [0]
    assert s.part(3).features.shape == (0, 2)
    assert s.owner([0, 1, 2, 3, 4, 5]).tolist() == [0, 0, 0, 2, 2, 2]
    assert verify_store(tmp_path / "s")["ok"]


def test_single_part_and_empty_graph(make_graph, tmp_path):
    g = make_graph(EDGES, 7)
    a = assign(g, [0] * 7, 1, tmp_path)
    build_store(g, a, tmp_path / "s")
    s = check_round_trip(g, [0] * 7, 1, tmp_path / "s")
    assert s.part(0).num_halo == 0
    assert s.meta["metrics"] == pytest.approx(
        {
            "replication_factor": 1.0,
            "edge_cut": 0.0,
            "cut_edges": 0,
            "max_part_nodes_over_mean": 1.0,
        }
    )
    g0 = make_graph([], 3, name="empty")
    a0 = assign(g0, [0, 1, 1], 2, tmp_path, "a0")
    build_store(g0, a0, tmp_path / "s0")
    s0 = Store.open(tmp_path / "s0")
    assert s0.num_edges == 0 and s0.part(1).indptr.tolist() == [0, 0, 0]
    assert verify_store(tmp_path / "s0")["ok"]


@pytest.mark.parametrize("order", ["id", "degree"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_graphs_round_trip(make_graph, tmp_path, seed, order):
    rng = np.random.default_rng(seed)
    n, m, p = 40, 150, 3 + seed
    edges = rng.integers(0, n, size=(m, 2))
    g = make_graph(
        edges,
        n,
        x=rng.standard_normal((n, 4)).astype(np.float32),
        y=rng.integers(0, 3, n),
        train=np.arange(0, n, 3),
    )
    node_part = rng.integers(0, p, n)
    a = assign(g, node_part, p, tmp_path)
    # small chunks and sort memory exercise the multi-chunk paths
    build_store(
        g,
        a,
        tmp_path / "s",
        chunk_edges=16,
        halo_features=True,
        node_order=order,
        feature_block_bytes=5 * 16,
    )
    store = check_round_trip(g, node_part, p, tmp_path / "s")
    x = np.asarray(g.features())
    for part in store.parts():  # core and halo rows follow the numbering
        assert np.array_equal(part.features, x[np.asarray(part.orig_ids[: part.num_core])])
        assert np.array_equal(part.halo_features, x[np.asarray(part.orig_ids[part.num_core :])])
    assert verify_store(tmp_path / "s", chunk_edges=7)["ok"]


def test_inspect_counts(make_graph, tmp_path):
    g = make_graph(EDGES, 7, train=[0, 2], val=[3], test=[5, 6])
    node_part = [1, 0, 1, 0, 2, 1, 0]
    build_store(g, assign(g, node_part, 3, tmp_path), tmp_path / "s")
    rep = inspect_store(tmp_path / "s")
    assert [r["nodes"] for r in rep["parts"]] == [3, 3, 1]
    assert [r["train"] for r in rep["parts"]] == [0, 2, 0]
    assert [r["test"] for r in rep["parts"]] == [1, 1, 0]
    assert sum(r["edges"] for r in rep["parts"]) == len(EDGES)
    cut = sum(node_part[s] != node_part[d] for s, d in EDGES)
    assert rep["edge_cut"] == pytest.approx(cut / len(EDGES))


# ------------------------------------------------------------------------------ bad inputs
def _no_leftovers(parent: Path, name: str) -> None:
    assert not (parent / name).exists()
    assert not [p for p in parent.iterdir() if p.name.startswith(f".{name}.tmp")]


def test_bad_assignment_length(make_graph, tmp_path, run_cli):
    g = make_graph(EDGES, 7)
    other = make_graph(EDGES, 8, name="other")
    a = assign(other, [0] * 8, 2, tmp_path)
    code, _, err = run_cli("store", "build", g.path, a, "--out", tmp_path / "s")
    assert code == 2 and "another graph" in err and "num_nodes" in err
    _no_leftovers(tmp_path, "s")
    # node_part.npy itself with the wrong length
    np.save(a / "node_part.npy", np.zeros(5, dtype=np.int32))
    code, _, err = run_cli("store", "build", g.path, a, "--out", tmp_path / "s")
    assert code == 2 and "node_part.npy" in err
    _no_leftovers(tmp_path, "s")


def test_bad_part_ids(make_graph, tmp_path, run_cli):
    g = make_graph(EDGES, 7)
    a = assign(g, [0] * 7, 2, tmp_path)
    np.save(a / "node_part.npy", np.array([0, 1, 2, 0, 1, 0, 0], dtype=np.int32))
    code, _, err = run_cli("store", "build", g.path, a, "--out", tmp_path / "s")
    assert code == 2 and "row 2" in err and "out of range" in err
    _no_leftovers(tmp_path, "s")


def test_store_from_different_graph(make_graph, tmp_path, run_cli):
    g = make_graph(EDGES, 7)
    other = make_graph([(1, 2), (2, 3)], 7, name="other")
    a = assign(other, [0, 1] * 3 + [0], 2, tmp_path)
    code, _, err = run_cli("store", "build", g.path, a, "--out", tmp_path / "s")
    assert code == 2 and "another graph" in err
    _no_leftovers(tmp_path, "s")


def test_existing_output_needs_overwrite(make_graph, tmp_path, run_cli):
    g = make_graph(EDGES, 7)
    a = assign(g, [0, 1] * 3 + [0], 2, tmp_path)
    assert run_cli("store", "build", g.path, a, "--out", tmp_path / "s")[0] == 0
    code, _, err = run_cli("store", "build", g.path, a, "--out", tmp_path / "s")
    assert code == 2 and "already exists" in err
    assert run_cli("store", "build", g.path, a, "--out", tmp_path / "s", "--overwrite")[0] == 0


def test_halo_features_without_features(make_graph, tmp_path, run_cli):
    g = make_graph(EDGES, 7)
    a = assign(g, [0, 1] * 3 + [0], 2, tmp_path)
    code, _, err = run_cli("store", "build", g.path, a, "--out", tmp_path / "s", "--halo-features")
    assert code == 2 and "features" in err
    _no_leftovers(tmp_path, "s")


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 12), p=st.integers(1, 4), data=st.data())
def test_property_round_trip(n, p, data):
    import tempfile

    from shoal.data.format import GraphDir, GraphWriter

    edges = data.draw(
        st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=30)
    )
    node_part = data.draw(st.lists(st.integers(0, p - 1), min_size=n, max_size=n))
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        with GraphWriter(d / "g", num_nodes=n) as w:
            w.add_edges(np.asarray(edges, dtype=np.int64).reshape(-1, 2))
            w.finish_edges()
            w.write_features(np.arange(n * 2, dtype=np.float32).reshape(n, 2))
        g = GraphDir.open(d / "g")
        a = assign(g, node_part, p, d)
        build_store(g, a, d / "s", halo_features=True, chunk_edges=7)
        check_round_trip(g, node_part, p, d / "s")
        assert verify_store(d / "s")["ok"]


def test_meta_format_and_version_are_checked(make_graph, tmp_path):
    import json

    from shoal.errors import ShoalInputError
    from shoal.partition.io import read_assignment
    from shoal.store.format import STORE_FORMAT, STORE_TYPED_FORMAT_VERSION

    g = make_graph([(0, 1), (1, 2)], 3)
    a = assign(g, [0, 1, 1], 2, tmp_path)
    s = tmp_path / "s"
    build_store(g, a, s)
    assert Store.open(s).meta["format"] == STORE_FORMAT
    with pytest.raises(ShoalInputError, match="meta.json is missing"):
        Store.open(tmp_path / "nope")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ShoalInputError, match="meta.json is missing"):
        Store.open(empty)
    with pytest.raises(ShoalInputError, match="expected 'shoal-store'"):
        Store.open(a)
    with pytest.raises(ShoalInputError, match="expected 'shoal-assignment'"):
        read_assignment(s)
    with pytest.raises(ShoalInputError, match="meta.json is missing"):
        read_assignment(empty)
    meta = json.loads((s / "meta.json").read_text())
    meta["format_version"] = STORE_TYPED_FORMAT_VERSION + 1  # newer than any this shoal reads
    (s / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ShoalInputError, match="format_version 3 is not supported"):
        Store.open(s)
