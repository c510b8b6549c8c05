"""Typed graphs: the schema's id arithmetic, the typed writer and reader, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shoal.data.format import GraphDir
from shoal.data.hetero import EdgeType, HeteroSchema
from shoal.data.hetero_writer import HeteroGraphWriter
from shoal.errors import ShoalInputError

WRITES = ("author", "writes", "paper")
CITES = ("paper", "cites", "paper")


def _schema(**kw) -> HeteroSchema:
    return HeteroSchema.of({"paper": 3, "author": 2, "venue": 0}, [WRITES, CITES], **kw)


def test_types_take_consecutive_id_ranges():
    s = _schema(target="paper")
    assert s.num_nodes == 5 and s.offsets.tolist() == [0, 3, 5, 5]
    assert s.type_of(np.arange(5)).tolist() == [0, 0, 0, 1, 1]
    assert s.to_global("author", [0, 1]).tolist() == [3, 4]
    assert s.relation_index("cites") == 1 and s.relation_index(WRITES) == 0
    with pytest.raises(ShoalInputError, match="not a relation of this graph"):
        s.relation_index("topic")
    back = HeteroSchema.from_meta(json.loads(json.dumps(s.to_meta())))
    assert back == s


def test_reverse_relations_as_pyg_and_dgl_add_them():
    s = _schema()
    merged = s.with_reverse()  # cites made symmetric in place; writes gets rev_writes
    assert [e.key for e in merged.edge_types] == [WRITES, CITES, ("paper", "rev_writes", "author")]
    apart = s.with_reverse(merge_same_type=False)
    assert [e.relation for e in apart.edge_types] == ["writes", "cites", "rev_writes", "rev_cites"]
    assert apart.reverse_index().tolist() == [2, 3, 0, 1]
    assert EdgeType("a", "rev_x", "b").reverse().relation == "x"


@pytest.mark.parametrize(
    "counts, rels, match",
    [
        ({"paper": 2}, [("paper", "cites", "venue")], "node type 'venue', which is not declared"),
        ([("paper", 2), ("paper", 3)], [], "declared twice"),
        ({"pa/per": 2}, [], "not a plain name"),
        ({"paper": -1}, [], "negative"),
        ({"paper": 2}, [CITES, CITES], "declared twice"),
    ],
)
def test_a_bad_schema_is_refused_with_the_reason(counts, rels, match):
    with pytest.raises(ShoalInputError, match=match):
        HeteroSchema.of(counts, rels)


def _write(out, **kw):
    schema = _schema(target="paper")
    with HeteroGraphWriter(out, schema, **kw) as w:
        w.add_relation(WRITES, [[0, 0], [1, 2], [1, 1]])
        w.add_relation("cites", [[0, 1], [2, 2]])
        w.write_node_features("paper", np.arange(6, dtype=np.float32).reshape(3, 2))
        w.write_node_features("author", np.ones((2, 4), np.float32))
        w.write_labels([1, 0, -1], num_classes=2)
        w.write_split("train", [0])
        w.write_split("val", np.array([False, True, False]))
    return GraphDir.open(out, verify=True)


def test_a_typed_graph_round_trips_through_the_writer_and_the_reader(tmp_path):
    g = _write(tmp_path / "g", add_reverse=True)
    assert g.meta["format_version"] == 2 and g.num_nodes == 5 and not g.directed
    s = g.schema
    assert s.target == "paper" and [t.name for t in s.node_types] == ["paper", "author", "venue"]
    assert [(e.relation, e.count) for e in s.edge_types] == [
        ("writes", 3),
        ("cites", 4),
        ("rev_writes", 3),
    ]
    edges = np.concatenate(list(g.edge_stream()))
    rel = np.asarray(g.relations())
    assert len(rel) == len(edges) == g.num_edges == 10
    # author a -> paper p is (3 + a, p); its reverse (p, 3 + a) under rev_writes
    writes = [(3, 0, 0), (4, 2, 0), (4, 1, 0)]
    cites = [(0, 1, 1), (1, 0, 1), (2, 2, 1), (2, 2, 1)]  # a self-loop's reverse is itself
    rev_writes = [(0, 3, 2), (2, 4, 2), (1, 4, 2)]
    got = sorted((int(a), int(b), int(r)) for (a, b), r in zip(edges, rel, strict=True))
    assert got == sorted(writes + cites + rev_writes)
    assert np.array_equal(g.node_features("paper"), np.arange(6).reshape(3, 2))
    assert g.node_features("author").shape == (2, 4) and g.node_features("venue") is None
    assert s.node_type("author").feature_dim == 4 and g.feature_dim == 2  # the target's
    assert np.asarray(g.labels()).tolist() == [1, 0, -1, -1, -1] and g.num_classes == 2
    assert np.asarray(g.split("train")).tolist() == [0]
    assert np.asarray(g.split("val")).tolist() == [1]


def test_without_reverse_the_edges_are_as_given_and_directed(tmp_path):
    g = _write(tmp_path / "g", drop_self_loops=True)
    assert g.directed and [e.count for e in g.schema.edge_types] == [3, 1]
    assert np.asarray(g.relations()).tolist() == [0, 0, 0, 1]


@pytest.mark.parametrize(
    "relation, edges, match",
    [
        (WRITES, [[0, 0], [2, 1]], "row 1: source id 2 is out of range for node type 'author'"),
        (WRITES, [[0, 3]], "row 0: destination id 3 is out of range for node type 'paper'"),
        (("paper", "writes", "author"), [[0, 0]], "is not an edge type of this graph"),
        ("topic", [[0, 0]], "is not a relation of this graph"),
    ],
)
def test_bad_edges_name_the_row_and_nothing_is_left(tmp_path, relation, edges, match):
    out = tmp_path / "g"
    with pytest.raises(ShoalInputError, match=match):
        with HeteroGraphWriter(out, _schema()) as w:
            w.add_relation(relation, edges, origin="rel.csv")
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_bad_node_data_is_refused(tmp_path):
    with pytest.raises(ShoalInputError, match="features have 2 rows but the graph has"):
        with HeteroGraphWriter(tmp_path / "g", _schema()) as w:
            w.add_relation(WRITES, [[0, 0]])
            w.write_node_features("paper", np.zeros((2, 4), np.float32))
    with pytest.raises(ShoalInputError, match=r"labels have shape \(5,\), expected \(3,\)"):
        with HeteroGraphWriter(tmp_path / "g", _schema()) as w:
            w.add_relation(WRITES, [[0, 0]])
            w.write_labels(np.zeros(5, np.int64))
    with pytest.raises(ShoalInputError, match="added per relation"):
        with HeteroGraphWriter(tmp_path / "g", _schema()) as w:
            w.add_edges(np.zeros((1, 2), np.int64))
    with pytest.raises(ShoalInputError, match="dedup is not an option"):
        HeteroGraphWriter(tmp_path / "g", _schema(), dedup=True)
    assert list(tmp_path.iterdir()) == []


def test_an_untyped_graph_has_no_schema(tmp_path):
    from shoal.data.format import GraphWriter

    with GraphWriter(tmp_path / "h", num_nodes=2) as w:
        w.add_edges(np.array([[0, 1]]))
    g = GraphDir.open(tmp_path / "h")
    assert g.schema is None and g.relations() is None and g.meta["format_version"] == 1


def test_partition_metrics_report_each_node_type_s_balance(tmp_path):
    from shoal.partition.metrics import partition_metrics

    g = _write(tmp_path / "g")  # paper 0-2, author 3-4, venue none
    part = np.array([0, 0, 1, 1, 1], np.int32)
    m = partition_metrics(g, part, 2)
    assert m["part_type_sizes"] == {"paper": [2, 1], "author": [0, 2], "venue": [0, 0]}
    # max over mean: paper 2 / 1.5, author 2 / 1; a type without nodes is balanced
    assert m["type_balance"] == pytest.approx({"paper": 4 / 3, "author": 2.0, "venue": 1.0})


def test_flatten_stacks_the_types_into_an_untyped_graph(tmp_path):
    from shoal.cli import main

    g = _write(tmp_path / "g", add_reverse=True)
    assert main(["data", "flatten", str(g.path), "--out", str(tmp_path / "f")]) == 0
    f = GraphDir.open(tmp_path / "f", verify=True)
    assert f.schema is None and f.num_nodes == 5 and f.num_edges == g.num_edges
    assert np.array_equal(
        np.concatenate(list(f.edge_stream())), np.concatenate(list(g.edge_stream()))
    )
    x = np.asarray(f.features())  # paper (2 columns, padded to 4), author (4 columns)
    assert x.shape == (5, 4)
    assert np.array_equal(x[:3], np.pad(np.arange(6).reshape(3, 2), ((0, 0), (0, 2))))
    assert np.array_equal(x[3:], np.ones((2, 4)))
    assert np.asarray(f.labels()).tolist() == [1, 0, -1, -1, -1]
    assert np.asarray(f.split("val")).tolist() == [1]
    with pytest.raises(ShoalInputError, match="not a typed graph"):
        from shoal.data.flatten import flatten

        flatten(f, tmp_path / "again")
