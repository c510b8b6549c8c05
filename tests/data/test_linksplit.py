"""Edge splits for link prediction: disjoint, covering, pair-consistent, deterministic; on a
typed graph, one target relation split, the others and every type's features kept (issue 53)."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from shoal.data.format import GraphDir, GraphWriter
from shoal.data.hetero import HeteroSchema
from shoal.data.hetero_writer import HeteroGraphWriter
from shoal.data.linksplit import EdgeSplitConfig, edge_split_of, split_edges
from shoal.errors import ShoalInputError
from shoal.training.linkdata import eval_negatives


def random_undirected(n: int, m: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    e = rng.integers(0, n, size=(m, 2))
    e = e[e[:, 0] != e[:, 1]]
    return np.concatenate([e, e[:, ::-1]])


def as_counter(a: np.ndarray) -> Counter:
    return Counter(map(tuple, np.asarray(a).tolist()))


def test_split_of_is_a_function_of_the_unordered_pair():
    e = np.array([[3, 7], [7, 3], [3, 7], [5, 5], [0, 9]])
    s = edge_split_of(e, 0.3, 0.3, seed=1)
    assert s[0] == s[1] == s[2] and s[3] == 0
    many = np.random.default_rng(0).integers(0, 10**6, size=(20000, 2))
    a, b = edge_split_of(many, 0.3, 0.3, 1), edge_split_of(many[:, ::-1], 0.3, 0.3, 1)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, edge_split_of(many, 0.3, 0.3, 2))  # the seed matters


def test_undirected_split_covers_every_edge_once(make_graph, tmp_path):
    e = random_undirected(300, 3000)
    n = 300
    x = np.random.default_rng(1).normal(size=(n, 4))
    g = make_graph(e, n, directed=False, x=x, y=np.arange(n) % 3, train=[0, 1], val=[2], test=[3])
    out = split_edges(g, tmp_path / "s", EdgeSplitConfig(val=0.1, test=0.2, seed=3))
    train = out.edge_stream().memmap()
    val, test = out.link_edges("val"), out.link_edges("test")
    assert (val[:, 0] < val[:, 1]).all() and (test[:, 0] < test[:, 1]).all()
    # every stored edge exactly once: training edges + both directions of each held-out pair
    both = lambda p: np.concatenate([p, p[:, ::-1]])  # noqa: E731
    assert as_counter(np.concatenate([train, both(val), both(test)])) == as_counter(e)
    # disjoint by pair, and a training edge's reverse is a training edge
    key = lambda p: {(min(a, b), max(a, b)) for a, b in np.asarray(p).tolist()}  # noqa: E731
    assert not (key(train) & key(val)) and not (key(train) & key(test))
    assert not (key(val) & key(test))
    assert as_counter(train) == as_counter(train[:, ::-1])
    # node data carried over; counts in meta; the fractions drawn are near the asked ones
    assert np.allclose(out.features(), x.astype(np.float32))
    assert out.split("train").tolist() == [0, 1] and out.num_classes == 3
    ls = out.meta["link_split"]
    assert (ls["val_edges"], ls["test_edges"]) == (len(val), len(test))
    assert abs(len(val) / (len(e) / 2) - 0.1) < 0.03 and abs(len(test) / (len(e) / 2) - 0.2) < 0.03
    GraphDir.open(tmp_path / "s", verify=True)  # checksums cover the held-out files


def test_directed_reverse_pairs_share_a_split_and_self_loops_stay(make_graph, tmp_path):
    e = np.array([[0, 1], [1, 0], [1, 2], [2, 3], [3, 3], [4, 0], [0, 4], [2, 4]] * 1)
    g = make_graph(e, 5, directed=True)
    for seed in range(20):
        out = split_edges(g, tmp_path / f"s{seed}", EdgeSplitConfig(val=0.3, test=0.3, seed=seed))
        train = as_counter(out.edge_stream().memmap())
        val, test = as_counter(out.link_edges("val")), as_counter(out.link_edges("test"))
        assert train + val + test == as_counter(e)  # directed: held out as given
        assert train[(3, 3)] == 1
        for part in (train, val, test):
            for u, v in part:
                if (v, u) in as_counter(e):
                    assert (v, u) in part  # a reciprocal pair is never split


def test_same_seed_same_split_and_nothing_held_out(make_graph, tmp_path):
    e = random_undirected(50, 200, seed=2)
    g = make_graph(e, 50, directed=False)
    a = split_edges(g, tmp_path / "a", EdgeSplitConfig(seed=7))
    b = split_edges(g, tmp_path / "b", EdgeSplitConfig(seed=7))
    assert np.array_equal(a.link_edges("test"), b.link_edges("test"))
    assert np.array_equal(a.edge_stream().memmap(), b.edge_stream().memmap())
    z = split_edges(g, tmp_path / "z", EdgeSplitConfig(val=0.0, test=0.0))
    assert np.array_equal(z.edge_stream().memmap(), g.edge_stream().memmap())
    assert z.link_edges("val").shape == (0, 2)


@pytest.mark.parametrize("kw", [dict(val=0.6, test=0.5), dict(val=-0.1), dict(test=1.0)])
def test_bad_fractions(kw):
    with pytest.raises(ShoalInputError):
        EdgeSplitConfig(**kw)


def test_cli(make_graph, tmp_path, run_cli):
    g = make_graph(random_undirected(40, 100), 40, directed=False)
    code, out, err = run_cli("data", "split-edges", g.path, "--out", tmp_path / "s", "--seed", "1")
    assert code == 0, err
    assert "val" in out and (tmp_path / "s" / "link_test.npy").exists()
    code, _, err = run_cli("data", "split-edges", g.path, "--out", tmp_path / "s")
    assert code == 2 and "exists" in err
    code, _, err = run_cli(
        "data", "split-edges", g.path, "--out", tmp_path / "t", "--val", "0.9", "--test", "0.2"
    )
    assert code == 2 and "no training edges" in err and not (tmp_path / "t").exists()


# ---------------------------------------------------------------------- untyped: unchanged


def _frozen_graph(out, directed: bool) -> GraphDir:
    """A graph from closed-form arithmetic only (no random stream), so its split's bytes are
    fixed: the hashes below were computed by the split before typed graphs (issue 53)."""
    n = 97
    i = np.arange(600, dtype=np.int64)
    e = np.stack([(i * 37 + 11) % n, (i * i * 13 + 5 * i + 3) % n], axis=1)
    if not directed:
        e = e[e[:, 0] != e[:, 1]]
        e = np.concatenate([e, e[:, ::-1]])
    x = ((np.arange(n * 3).reshape(n, 3) * 7) % 11).astype(np.float32) / 4
    with GraphWriter(out, num_nodes=n, directed=directed) as w:
        w.add_edges(e)
        w.finish_edges()
        w.write_features(x)
        w.write_labels(np.arange(n) % 4)
        w.write_split("train", np.arange(0, 30))
        w.write_split("val", np.arange(30, 40))
    return GraphDir.open(out)


def _digest(d: Path) -> dict[str, str]:
    """sha256 (16 hex) of every file; meta.json's without its time and input path."""
    out = {}
    for p in sorted(d.rglob("*")):
        if p.is_file() and p.name != "meta.json":
            out[p.relative_to(d).as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()[:16]
    m = json.loads((d / "meta.json").read_text())
    m.pop("created")
    m["source"].pop("input")
    out["meta.json"] = hashlib.sha256(json.dumps(m, sort_keys=True).encode()).hexdigest()[:16]
    return out


_SAME = {
    "features.npy": "44803711a1334ddc",
    "labels.npy": "830435c6414789f1",
    "train_idx.npy": "6108122e4bb7b189",
    "val_idx.npy": "f0da8b83a9ab3848",
}
_BEFORE = {  # directed -> the files' hashes
    False: {
        **_SAME,
        "edges.bin": "b8c80d5f6d072c6e",
        "link_test.npy": "51bef8e70523c064",
        "link_val.npy": "67fa06d07c276e0b",
        "meta.json": "b52d9d9390034176",
    },
    True: {
        **_SAME,
        "edges.bin": "78322219485fbfeb",
        "link_test.npy": "35dd95f9f24ffae4",
        "link_val.npy": "ad9eaa0a6ce67247",
        "meta.json": "4c301fbd36503be1",
    },
}


@pytest.mark.parametrize("directed", [False, True])
def test_untyped_split_is_byte_identical_to_before_typed_graphs(tmp_path, directed):
    g = _frozen_graph(tmp_path / f"g{directed}", directed)  # names as when hashed
    cfg = EdgeSplitConfig(val=0.1, test=0.2, seed=5, chunk_edges=128)
    got = _digest(split_edges(g, tmp_path / f"s{directed}", cfg).path)
    assert got == _BEFORE[directed]


def test_typed_options_are_refused_on_an_untyped_graph(make_graph, tmp_path):
    g = make_graph(random_undirected(20, 40), 20, directed=False)
    for kw, opt in (
        (dict(target_relation="x"), "--target-relation"),
        (dict(eval_negatives=5), "--eval-negatives"),
    ):
        with pytest.raises(ShoalInputError, match=f"{opt} is for typed graphs"):
            split_edges(g, tmp_path / "s", EdgeSplitConfig(**kw))
    assert not (tmp_path / "s").exists()


# ---------------------------------------------------------------------- typed graphs

WRITES = ("author", "writes", "paper")
CITES = ("paper", "cites", "paper")
IN_VENUE = ("paper", "in_venue", "venue")
COUNTS = {"paper": 10, "author": 8, "venue": 3}


def _local_edges() -> dict[tuple[str, str, str], np.ndarray]:
    a, p = np.meshgrid(np.arange(8), np.arange(10), indexing="ij")
    writes = np.stack([a.ravel(), p.ravel()], 1)
    writes = writes[(writes[:, 0] * 3 + writes[:, 1]) % 3 == 0]
    cites = np.array([[i, (i * 3 + 1) % 10] for i in range(10)] + [[2, 2], [0, 5], [5, 9]])
    cites = cites[(cites[:, 0] < cites[:, 1]) | (cites[:, 0] == cites[:, 1])]
    venue = np.stack([np.arange(10), np.arange(10) % 3], 1)
    return {WRITES: writes, CITES: cites, IN_VENUE: venue}


def _typed_graph(
    out: Path, *, add_reverse: bool = True, rels=(WRITES, CITES, IN_VENUE)
) -> GraphDir:
    """paper (10, 3 features), author (8, 2 features), venue (3, none); stored with reverses."""
    schema = HeteroSchema.of(COUNTS, rels, target="paper")
    rng = np.random.default_rng(0)
    with HeteroGraphWriter(out, schema, add_reverse=add_reverse) as w:
        for key, e in _local_edges().items():
            if key in rels:
                w.add_relation(key, e)
        w.write_node_features("paper", rng.normal(size=(10, 3)))
        w.write_node_features("author", rng.normal(size=(8, 2)))
        w.write_labels(np.arange(10) % 3)
        w.write_split("train", [0, 1, 2, 3])
        w.write_split("test", [8, 9])
    return GraphDir.open(out)


def _by_relation(g: GraphDir) -> dict[str, Counter]:
    e, r = g.edge_stream().memmap(), np.asarray(g.relations())
    return {str(et): as_counter(e[r == i]) for i, et in enumerate(g.schema.edge_types)}


def test_typed_split_of_one_relation(tmp_path):
    g = _typed_graph(tmp_path / "g")
    cfg = EdgeSplitConfig(val=0.25, test=0.25, seed=1, target_relation="writes", eval_negatives=7)
    out = split_edges(g, tmp_path / "s", cfg)
    before, after = _by_relation(g), _by_relation(out)
    w, rw = "author__writes__paper", "paper__rev_writes__author"
    # the schema kept: types, counts, offsets, feature widths, relations, target
    assert out.schema.node_types == g.schema.node_types
    assert [e.key for e in out.schema.edge_types] == [e.key for e in g.schema.edge_types]
    assert out.schema.target == "paper" and not out.directed
    # every other relation whole, in the same order
    e_in, r_in, e_out, r_out = (
        g.edge_stream().memmap(),
        np.asarray(g.relations()),
        out.edge_stream().memmap(),
        np.asarray(out.relations()),
    )
    for name in before:
        if name not in (w, rw):
            assert after[name] == before[name], name
            i = [str(e) for e in g.schema.edge_types].index(name)
            assert np.array_equal(e_out[r_out == i], e_in[r_in == i])
    # the target relation: train + val + test = its edges (held-out in global ids, as given)
    val, test = out.link_edges("val"), out.link_edges("test")
    assert len(val) and len(test)
    assert after[w] + as_counter(val) + as_counter(test) == before[w]
    ls = out.meta["link_split"]
    assert ls["target_relation"] == w and ls["reverse_relation"] == rw
    assert ls["target_relation_index"] == 0 and (ls["val_edges"], ls["test_edges"]) == (
        len(val),
        len(test),
    )
    # held-out pairs gone from message passing in both directions; the rest of rev_writes kept
    held = {tuple(p) for p in np.concatenate([val, test]).tolist()}
    train_pairs = set(after[w]) | {(v, u) for u, v in after[rw]}
    assert not held & train_pairs and not held & {(u, v) for u, v in as_counter(e_out)}
    assert not held & {(v, u) for u, v in as_counter(e_out)}
    assert after[rw] == Counter({(v, u): c for (u, v), c in after[w].items()})
    assert ls["stored_edges"]["reverse_removed"] == len(held)
    # negatives: (k, K) inside paper's global ids, the trainer's stream shifted by the offset
    paper = out.schema.node_type("paper")
    assert ls["negatives"]["node_type"] == "paper"
    assert ls["negatives"]["id_range"] == [paper.offset, paper.offset + paper.count]
    for name, pos in (("val", val), ("test", test)):
        neg = np.load(out.path / f"link_{name}_neg.npy")
        assert neg.shape == (len(pos), 7) and neg.dtype == np.int64
        assert (neg >= paper.offset).all() and (neg < paper.offset + paper.count).all()
        assert np.array_equal(neg, paper.offset + eval_negatives(1, name, len(pos), paper.count, 7))
    # every type's features identical (the featureless type stays featureless), node data kept
    for t in ("paper", "author"):
        assert np.array_equal(out.node_features(t), g.node_features(t))
    assert out.node_features("venue") is None and out.schema.node_type("venue").feature_dim is None
    assert np.array_equal(out.labels(), g.labels()) and out.num_classes == 3
    assert out.split("train").tolist() == [0, 1, 2, 3] and out.split("test").tolist() == [8, 9]
    GraphDir.open(out.path, verify=True)


def test_typed_split_of_a_same_type_relation_stores_each_pair_once(tmp_path):
    g = _typed_graph(tmp_path / "g")
    cfg = EdgeSplitConfig(val=0.3, test=0.3, seed=2, target_relation="paper__cites__paper")
    out = split_edges(g, tmp_path / "s", cfg)
    before, after = _by_relation(g), _by_relation(out)
    c = "paper__cites__paper"
    val, test = out.link_edges("val"), out.link_edges("test")
    assert (
        len(val) + len(test) and (val[:, 0] < val[:, 1]).all() and (test[:, 0] < test[:, 1]).all()
    )
    both = lambda p: as_counter(np.concatenate([p, p[:, ::-1]]))  # noqa: E731
    assert after[c] + both(val) + both(test) == before[c]
    assert after[c][(2, 2)] == before[c][(2, 2)] == 2  # a self-loop (and its copy) stays
    assert all(after[k] == before[k] for k in before if k != c)
    assert out.meta["link_split"]["reverse_relation"] is None
    assert out.meta["link_split"]["held_out_layout"] == "src < dst, each pair once"


def test_one_relation_is_the_default_target(tmp_path):
    g = _typed_graph(tmp_path / "g", add_reverse=False, rels=(WRITES,))
    out = split_edges(g, tmp_path / "s", EdgeSplitConfig(val=0.2, test=0.2))
    ls = out.meta["link_split"]
    assert ls["target_relation"] == "author__writes__paper" and ls["reverse_relation"] is None
    assert out.directed and ls["negatives"]["per_positive"] == 100
    assert as_counter(out.edge_stream().memmap()) + as_counter(out.link_edges("val")) + as_counter(
        out.link_edges("test")
    ) == as_counter(g.edge_stream().memmap())


def test_several_relations_need_a_target_relation(tmp_path):
    g = _typed_graph(tmp_path / "g")
    with pytest.raises(ShoalInputError, match="--target-relation") as err:
        split_edges(g, tmp_path / "s")
    msg = str(err.value)
    for et in g.schema.edge_types:
        assert f"{et} ({et.count:,} edges)" in msg
    with pytest.raises(ShoalInputError, match="'topic': .*is not a relation of this graph"):
        split_edges(g, tmp_path / "s", EdgeSplitConfig(target_relation="topic"))
    assert not (tmp_path / "s").exists()


def test_typed_cli(tmp_path, run_cli):
    g = _typed_graph(tmp_path / "g")
    code, _, err = run_cli("data", "split-edges", g.path, "--out", tmp_path / "s")
    assert code == 2 and "author__writes__paper (" in err and "--target-relation" in err
    cmd = ["data", "split-edges", g.path, "--target-relation"]
    opts = "author__writes__paper --eval-negatives 5 --val 0.2".split()
    code, out, err = run_cli(*cmd, *opts, "--out", tmp_path / "s", "--json", tmp_path / "s.json")
    assert code == 0, err
    assert "author__writes__paper" in out and "node type paper" in out
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["target_relation"] == "author__writes__paper" and s["negative_type"] == "paper"
    split = GraphDir.open(tmp_path / "s", verify=True)
    assert np.load(split.path / "link_test_neg.npy").shape == (s["test_edges"], 5)
    assert np.array_equal(split.node_features("author"), g.node_features("author"))
    code, _, err = run_cli(*cmd, "writes", "--eval-negatives", "0", "--out", tmp_path / "t")
    assert code == 2 and "--eval-negatives must be >= 1" in err


def test_a_corrupt_relation_file_is_named(tmp_path):
    g = _typed_graph(tmp_path / "g")
    rel = g.path / "edge_types.bin"
    r = np.fromfile(rel, np.uint8)
    r[5] = 9
    r.tofile(rel)
    cfg = EdgeSplitConfig(target_relation="writes")
    with pytest.raises(ShoalInputError, match=r"edge_types.bin: row 5: relation index 9, but"):
        split_edges(GraphDir.open(g.path), tmp_path / "s", cfg)
    assert not (tmp_path / "s").exists()
