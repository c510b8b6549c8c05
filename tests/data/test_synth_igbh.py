"""The IGBH-shaped typed generator: its types and relations, its planted signal, its CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shoal.cli import main
from shoal.data.format import GraphDir
from shoal.data.synth.igbh import (
    IGBH_NODE_COUNTS,
    IGBH_RELATIONS,
    IGBHConfig,
    _types,
    generate_igbh,
)
from shoal.errors import ShoalInputError

CFG = dict(size="tiny", scale=0.02, features=8, classes=5, seed=3)


@pytest.fixture(scope="module")
def igbh(tmp_path_factory):
    out = tmp_path_factory.mktemp("igbh") / "g"
    return generate_igbh(out, IGBHConfig(**CFG), show_progress=False)


def test_the_types_and_relations_are_igbh_s(igbh):
    s = igbh.schema
    want = {t: max(1, round(n * 0.02)) for t, n in IGBH_NODE_COUNTS["tiny"].items()}
    assert {t.name: t.count for t in s.node_types} == want
    assert s.target == "paper" and igbh.num_nodes == sum(want.values())
    keys = [e.key for e in s.edge_types]
    assert keys[:6] == list(IGBH_RELATIONS)
    # reverses: rev_<relation> between types; cites is made symmetric in place
    assert keys[6:] == [(d, "rev_" + r, s_) for s_, r, d in IGBH_RELATIONS if s_ != d]
    counts = {e.relation: e.count for e in s.edge_types}
    for _, r, _ in IGBH_RELATIONS[1:]:
        assert counts[r] == counts["rev_" + r] > 0
    rel = np.asarray(igbh.relations())
    assert np.bincount(rel, minlength=len(keys)).tolist() == [e.count for e in s.edge_types]
    edges = np.concatenate(list(igbh.edge_stream()))
    types = s.type_of(edges)
    for i, e in enumerate(s.edge_types):  # every edge joins the types its relation names
        on = rel == i
        assert (types[on, 0] == s.type_index(e.src)).all()
        assert (types[on, 1] == s.type_index(e.dst)).all()
    for t in s.node_types:
        assert igbh.node_features(t.name).shape == (t.count, 8)
    labels = np.asarray(igbh.labels())
    paper = s.node_type("paper")
    assert (labels[paper.count :] == -1).all() and labels[: paper.count].min() >= 0
    splits = [np.asarray(igbh.split(n)) for n in ("train", "val", "test")]
    assert sum(len(x) for x in splits) == paper.count and max(x.max() for x in splits) < 2000


def test_the_planted_signal_follows_each_relation(igbh):
    """The share of edges whose destination has its source's (permuted) class is the
    relation's homophily plus the chance of a random other class, never more."""
    cfg = IGBHConfig(**CFG)
    ty = _types(cfg)
    s = igbh.schema
    edges = np.concatenate(list(igbh.edge_stream()))
    rel = np.asarray(igbh.relations())
    for i, (src, r, dst) in enumerate(IGBH_RELATIONS):
        e = edges[rel == i]
        a = ty.samplers[src].labels[e[:, 0] - s.node_type(src).offset]
        b = ty.samplers[dst].labels[e[:, 1] - s.node_type(dst).offset]
        share = float((ty.perm[r][a] == b).mean())
        assert share == pytest.approx(cfg.homophily[r], abs=0.08), r
    # the papers' features are weaker than the fields' (signal 1 against 2)
    paper_x = np.asarray(igbh.node_features("paper"))
    fos_x = np.asarray(igbh.node_features("fos"))
    pl, fl = ty.samplers["paper"].labels, ty.samplers["fos"].labels

    def spread(x, y):  # between-class over total variance
        means = np.stack([x[y == c].mean(0) for c in range(cfg.classes)])
        return float(means[y].var(0).sum() / x.var(0).sum())

    assert spread(fos_x, fl) > 2 * spread(paper_x, pl)


def test_the_same_seed_writes_the_same_graph(tmp_path, igbh):
    g = generate_igbh(tmp_path / "again", IGBHConfig(**CFG), show_progress=False)
    for name in ("edges.bin", "edge_types.bin", "features/paper.npy", "labels.npy"):
        assert g.meta["files"][name]["checksum"] == igbh.meta["files"][name]["checksum"]


def test_options_are_checked():
    with pytest.raises(ShoalInputError, match="not an IGBH size"):
        IGBHConfig(size="huge")
    with pytest.raises(ShoalInputError, match="--homophily names cite"):
        IGBHConfig(homophily={"cite": 0.5})
    with pytest.raises(ShoalInputError, match="must be in"):
        IGBHConfig(homophily={"cites": 1.5})


def test_the_cli_writes_a_typed_graph(tmp_path, capsys):
    out = tmp_path / "g"
    opts = "--scale 0.005 --features 4 --featureless institute --homophily cites=0.9"
    opts += " --val-frac 0.1 --test-frac 0.05"  # 300 train, 50 val, 25 test of 500 papers
    opts += " --feature-dtype float16"
    rc = main(
        ["data", "synth", "igbh", "--out", str(out), *opts.split(), "--no-reverse"]
        + ["--json", "-"]
    )
    assert rc == 0
    s = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    assert s["node_types"]["paper"] == 500 and len(s["edge_types"]) == 6
    g = GraphDir.open(out)
    assert g.node_features("institute") is None and g.directed
    assert [len(g.split(n)) for n in ("train", "val", "test")] == [300, 50, 25]
    assert g.node_features("paper").dtype == np.float16
    assert g.meta["source"]["config"]["homophily"]["cites"] == 0.9
    assert main(["data", "synth", "igbh", "--out", str(tmp_path / "h"), "--degree", "x"]) == 2
    capsys.readouterr()  # the synth's messages
    assert main(["data", "info", str(out), "--json", "-"]) == 0
    info = json.loads(capsys.readouterr().out)
    ty = info["types"]
    assert ty["target"] == "paper" and len(ty["edge_types"]) == 6
    assert {t["name"]: t["feature_dim"] for t in ty["node_types"]}["institute"] is None
