"""The OGB heterogeneous raw layout (as ogbn-mag ships it), imported into a typed graph."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from shoal.cli import main
from shoal.data.format import GraphDir
from shoal.data.importers import import_graph
from shoal.data.importers.common import ImportConfig
from shoal.data.importers.ogb_hetero import import_ogb_hetero
from shoal.errors import ShoalInputError

COUNTS = {"author": 4, "field_of_study": 2, "institution": 1, "paper": 5}
RELS = {
    ("author", "affiliated_with", "institution"): [[0, 0], [2, 0], [3, 0]],
    ("author", "writes", "paper"): [[0, 0], [0, 1], [1, 2], [2, 3], [3, 4], [3, 0]],
    ("paper", "cites", "paper"): [[0, 1], [1, 2], [4, 0]],
    ("paper", "has_topic", "field_of_study"): [[0, 0], [1, 1], [2, 1], [3, 0], [4, 1]],
}


def _gz(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write("".join(ln + "\n" for ln in lines))


def make_mag(root: Path, rels=RELS, counts=COUNTS, feat_rows: int = 5) -> Path:
    """A tiny folder with ogbn-mag's raw layout."""
    d = root / "ogbn_mag"
    _gz(d / "raw/num-node-dict.csv.gz", [",".join(counts), ",".join(map(str, counts.values()))])
    for (s, r, t), e in rels.items():
        rd = d / f"raw/relations/{s}___{r}___{t}"
        _gz(rd / "edge.csv.gz", [f"{a},{b}" for a, b in e])
        _gz(rd / "num-edge-list.csv.gz", [str(len(e))])
        _gz(rd / "edge_reltype.csv.gz", ["0"] * len(e))
    x = np.arange(feat_rows * 3, dtype=np.float32).reshape(feat_rows, 3) / 10
    _gz(d / "raw/node-feat/paper/node-feat.csv.gz", [",".join(map(str, r)) for r in x])
    _gz(d / "raw/node-label/paper/node-label.csv.gz", ["1", "0", "2", "1", "0"])
    for name, ids in (("train", [0, 1, 2]), ("valid", [3]), ("test", [4])):
        _gz(d / f"split/time/paper/{name}.csv.gz", [str(i) for i in ids])
    return d


def test_ogbn_mag_s_layout_imports_every_type_relation_and_feature(tmp_path):
    d = make_mag(tmp_path)
    g = import_graph(d, tmp_path / "g", format="ogb")  # detected as the typed layout
    s = g.schema
    assert s.target == "paper" and [(t.name, t.count) for t in s.node_types] == list(COUNTS.items())
    assert [e.key for e in s.edge_types] == list(RELS)  # folders in sorted order
    assert [e.count for e in s.edge_types] == [len(e) for e in RELS.values()]
    edges = np.concatenate(list(g.edge_stream()))
    rel = np.asarray(g.relations())
    off = dict(zip(COUNTS, s.offsets.tolist(), strict=False))
    for i, ((a, _, b), e) in enumerate(RELS.items()):
        want = np.asarray(e) + [off[a], off[b]]
        assert np.array_equal(edges[rel == i], want)
    x = np.asarray(g.node_features("paper"))
    assert np.allclose(x, np.arange(15).reshape(5, 3) / 10)
    assert g.node_features("author") is None
    p0 = off["paper"]
    assert np.asarray(g.labels())[p0:].tolist() == [1, 0, 2, 1, 0]
    assert (np.asarray(g.labels())[:p0] == -1).all()
    assert np.asarray(g.split("val")).tolist() == [p0 + 3]
    assert np.asarray(g.split("train")).tolist() == [p0, p0 + 1, p0 + 2]


def test_the_cli_adds_reverse_relations_with_undirected(tmp_path):
    d = make_mag(tmp_path)
    assert main(["data", "import", str(d), "--out", str(tmp_path / "g"), "--undirected"]) == 0
    g = GraphDir.open(tmp_path / "g", verify=True)
    rels = [e.relation for e in g.schema.edge_types]
    want = "affiliated_with writes cites has_topic rev_affiliated_with rev_writes rev_has_topic"
    assert rels == want.split()
    assert g.num_edges == 2 * sum(len(e) for e in RELS.values()) and not g.directed


def test_an_imported_ogbn_mag_layout_trains_in_one_process_and_on_two(tmp_path):
    """Import, train (R-GCN; authors, fields and institutions have no features: learned
    embeddings), then partition, build a typed store and train it on two processes."""
    import json

    d = make_mag(tmp_path)
    g = str(tmp_path / "g")
    assert main(["data", "import", str(d), "--out", g, "--undirected"]) == 0
    out = tmp_path / "r.json"
    opts = ["--model", "rgcn", "--fanouts", "3,3", "--epochs", "2", "--hidden", "8"]
    assert main(["train", "--graph", g, *opts, "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["epochs"] == 2 and 0 <= r["test_accuracy"] <= 1
    a, st = str(tmp_path / "a"), str(tmp_path / "s")
    assert main(["partition", g, "--algo", "ldg", "--parts", "2", "--out", a]) == 0
    assert main(["store", "build", g, a, "--out", st, "--halo-features"]) == 0
    assert main(["verify", st]) == 0
    engine = ["--engine", "minibatch", "--nproc", "2"]
    assert main(["train", "--store", st, *engine, *opts, "--json", str(out)]) == 0
    assert json.loads(out.read_text())["world_size"] == 2


@pytest.mark.parametrize(
    "change, match",
    [
        (
            {"rels": {**RELS, ("author", "writes", "paper"): [[0, 0], [4, 1]]}},
            r"edge.csv.gz \(block from line 1\): row 1: source id 4 is out of range for "
            r"node type 'author' \(4 nodes\)",
        ),
        (
            {"rels": {("author", "writes", "venue"): [[0, 0]]}},
            "names node type 'venue', which num-node-dict lacks",
        ),
        ({"feat_rows": 4}, "node-feat.csv.gz: features have 4 rows but the graph has"),
    ],
)
def test_bad_input_names_the_file_and_row(tmp_path, change, match):
    d = make_mag(tmp_path, **change)
    with pytest.raises(ShoalInputError, match=match):
        import_ogb_hetero(d, tmp_path / "g", ImportConfig())
    assert not (tmp_path / "g").exists()


def test_a_wrong_edge_count_is_refused(tmp_path):
    d = make_mag(tmp_path)
    _gz(d / "raw/relations/paper___cites___paper/num-edge-list.csv.gz", ["4"])
    with pytest.raises(ShoalInputError, match=r"num-edge-list says \[4\] edges, edge.csv has 3"):
        import_ogb_hetero(d, tmp_path / "g")
