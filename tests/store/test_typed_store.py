"""Typed stores: node types per part, the relation of every in-edge, features per type."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.data.format import GraphDir
from shoal.data.hetero import HeteroSchema
from shoal.data.hetero_writer import HeteroGraphWriter
from shoal.errors import ShoalInputError
from shoal.partition.base import Assignment
from shoal.partition.io import write_assignment
from shoal.store import Store, build_store
from shoal.store.verify import inspect_store, verify_store

WRITES = ("author", "writes", "paper")
REVIEWS = ("author", "reviews", "paper")  # a second relation between the same two types
CITES = ("paper", "cites", "paper")


def _graph(path) -> GraphDir:
    """papers 0-3, authors 4-6 (author 6 isolated), venue type without nodes; a cited
    self-loop and a duplicated citation; two relations from authors to papers."""
    schema = HeteroSchema.of(
        {"paper": 4, "author": 3, "venue": 0}, [WRITES, REVIEWS, CITES], target="paper"
    )
    with HeteroGraphWriter(path, schema, add_reverse=False) as w:
        w.add_relation(WRITES, [[0, 0], [0, 1], [1, 1], [1, 3]])
        w.add_relation(REVIEWS, [[0, 1], [1, 0], [0, 2]])
        w.add_relation("cites", [[0, 1], [2, 1], [2, 1], [3, 3], [1, 0]])
        w.write_node_features("paper", np.arange(12, dtype=np.float32).reshape(4, 3))
        w.write_node_features("author", 10 + np.arange(6, dtype=np.float32).reshape(3, 2))
        w.write_labels([0, 1, 1, 0], num_classes=2)
        w.write_split("train", [0, 2])
        w.write_split("test", [1, 3])
    return GraphDir.open(path)


def _store(tmp_path, g, node_part, **kw) -> Store:
    node_part = np.asarray(node_part)
    a = tmp_path / f"a{node_part.max() + 1}"
    write_assignment(a, Assignment(node_part, int(node_part.max()) + 1, "hash"), g)
    out = tmp_path / f"s{node_part.max() + 1}"
    build_store(g, a, out, show_progress=False, **kw)
    return Store.open(out)


def _typed_in_edges(store: Store) -> list[tuple[int, int, int]]:
    """(original dst, relation, original src) of every in-edge in the store's parts, with each
    row's relations checked to be grouped in ascending order."""
    out = []
    for p in store.parts():
        ip = np.asarray(p.indptr)
        src = store.to_orig(p.local_to_global(np.asarray(p.indices, np.int64)))
        et = np.asarray(p.edge_types, np.int64)
        for r in range(p.num_core):
            seg = et[ip[r] : ip[r + 1]]
            assert np.all(np.diff(seg) >= 0)
            dst = int(store.to_orig([p.start + r])[0])
            out += [(dst, int(a), int(b)) for a, b in zip(seg, src[ip[r] : ip[r + 1]])]
    return sorted(out)


def _graph_in_edges(g: GraphDir) -> list[tuple[int, int, int]]:
    e = np.concatenate(list(g.edge_stream()))
    rel = np.asarray(g.relations())
    return sorted((int(d), int(r), int(s)) for (s, d), r in zip(e, rel, strict=True))


@pytest.mark.parametrize(
    "node_part",
    [[0] * 7, [0, 1, 0, 1, 1, 0, 1], [2, 0, 1, 0, 2, 1, 0]],
    ids=["one-part", "two-parts", "three-parts"],
)
def test_a_typed_store_keeps_every_edge_with_its_relation_and_types_per_part(tmp_path, node_part):
    g = _graph(tmp_path / "g")
    store = _store(tmp_path, g, node_part, halo_features=True)
    assert store.meta["format_version"] == 2 and store.schema == g.schema
    assert _typed_in_edges(store) == _graph_in_edges(g)
    schema = g.schema
    for p in store.parts():
        tb = p.type_bounds
        assert tb[0] == 0 and tb[-1] == p.num_core
        for t, nt in enumerate(schema.node_types):
            ids = np.arange(tb[t], tb[t + 1]) + p.start
            orig = store.to_orig(ids)
            # each type is one range of the part, in original order
            assert np.all(schema.type_of(orig) == t) and np.all(np.diff(orig) > 0)
            assert np.all(store.type_of(ids) == t)
            x = g.node_features(nt.name)
            if x is None:
                assert p.type_features(nt.name) is None
                continue
            assert np.array_equal(p.type_features(nt.name), np.asarray(x)[orig - nt.offset])
            h = np.asarray(p.halo_ids)
            h = h[store.type_of(h) == t]
            hf = np.asarray(p.halo_type_features(nt.name))
            assert np.array_equal(hf, np.asarray(x)[store.to_orig(h) - nt.offset])
    rep = verify_store(store.path, show_progress=False)
    assert any("with their relations" in c for c in rep["checks"])
    info = inspect_store(store.path)
    assert [t["count"] for t in info["node_types"]] == [4, 3, 0]
    assert [sum(t["per_part"]) for t in info["node_types"]] == [4, 3, 0]


def test_one_part_rows_equal_the_graph_csr_grouped_by_relation(tmp_path):
    """With one part the store numbers nodes as the graph does; each row lists the relation
    runs in relation order, each run's sources ascending (the typed sampler's runs)."""
    g = _graph(tmp_path / "g")
    p = _store(tmp_path, g, [0] * 7).part(0)
    ip, ix, et = (np.asarray(a, np.int64) for a in (p.indptr, p.indices, p.edge_types))
    # paper 1: written by author 0 (global 4) and 1 (5); reviewed by author 0 (4); cited by 0, 2, 2
    row = slice(ip[1], ip[2])
    assert list(zip(et[row].tolist(), ix[row].tolist())) == [
        (0, 4),
        (0, 5),
        (1, 4),
        (2, 0),
        (2, 2),
        (2, 2),
    ]


def test_verify_names_a_relation_that_was_changed(tmp_path):
    from shoal.store._io import write_meta
    from shoal.utils.io import file_checksum

    g = _graph(tmp_path / "g")
    store = _store(tmp_path, g, [0, 1, 0, 1, 1, 0, 1])
    f = store.path / "part_1" / "edge_types.npy"
    et = np.load(f)
    et[0] = 2 if et[0] != 2 else 0
    np.save(f, et)
    with pytest.raises(ShoalInputError, match="edge_types|checksum"):
        verify_store(store.path, show_progress=False)
    # the checksum made consistent: the relation checks of the CSR pass still name it
    meta = dict(store.meta)
    meta["files"]["part_1/edge_types.npy"]["checksum"] = file_checksum(f)
    write_meta(store.path / "meta.json", meta)
    with pytest.raises(ShoalInputError, match="relation") as e:
        verify_store(store.path, show_progress=False, chunk_edges=4)
    assert "edge_types.npy" in str(e.value.path)


def _rewrite(store: Store, rel: str, change) -> None:
    """Change the array at ``rel`` with ``change`` and make its checksum consistent."""
    from shoal.store._io import write_meta
    from shoal.utils.io import file_checksum

    a = np.load(store.path / rel)
    change(a)
    np.save(store.path / rel, a)
    meta = dict(store.meta)
    meta["files"][rel]["checksum"] = file_checksum(store.path / rel)
    write_meta(store.path / "meta.json", meta)


def _last_of_relation_0(a: np.ndarray) -> None:
    """Relabel an in-edge of relation 0 (writes) whose successor in the array has a larger
    relation, as relation 1 (reviews: the same types): order and types stay valid."""
    k = int(np.flatnonzero((a[:-1] == 0) & (a[1:] > 0))[0])
    a[k] = 1


@pytest.mark.parametrize(
    "rel, change, match",
    [
        ("part_0/features/paper.npy", lambda a: a.__setitem__(0, a[0] + 1), "paper feature rows"),
        ("part_1/halo_features/author.npy", lambda a: a.__iadd__(1), "author halo feature rows"),
        ("part_0/edge_types.npy", _last_of_relation_0, "relations differ from the source"),
    ],
    ids=["type-features", "halo-type-features", "relation-swapped"],
)
def test_verify_names_consistent_typed_tampering(tmp_path, rel, change, match):
    """A typed file changed and its checksum updated: the feature and source passes name it."""
    g = _graph(tmp_path / "g")
    store = _store(tmp_path, g, [0, 1, 0, 1, 1, 0, 1], halo_features=True)
    _rewrite(store, rel, change)
    with pytest.raises(ShoalInputError, match=match) as e:
        verify_store(store.path, show_progress=False)
    assert str(e.value.path).endswith(rel)


def test_degree_order_is_refused_for_a_typed_graph(tmp_path):
    g = _graph(tmp_path / "g")
    with pytest.raises(ShoalInputError, match="typed graph"):
        _store(tmp_path, g, [0] * 7, node_order="degree")


def test_an_untyped_store_has_no_types(tmp_path, make_graph):
    g = make_graph([[0, 1], [1, 2]], 3, x=np.ones((3, 2)))
    store = _store(tmp_path, g, np.zeros(3, np.int64))
    assert store.schema is None and store.meta["format_version"] == 1
    assert store.part(0).edge_types is None
    with pytest.raises(ShoalInputError, match="untyped"):
        store.part(0).type_features("paper")
