"""The link task of the one trainer, end to end on the bundled Cora graph (and a typed
graph's target relation)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from shoal.data.importers import import_graph
from shoal.data.linksplit import EdgeSplitConfig, split_edges
from shoal.errors import ShoalInputError
from shoal.training import TrainConfig
from shoal.training.link_config import LinkConfig
from shoal.training.linkdata import LinkData
from shoal.training.tasks import LinkTask
from shoal.training.trainer import Trainer

CORA = Path(__file__).resolve().parents[2] / "src/shoal/data/datasets/cora/graph.npz"


@pytest.fixture(scope="module")
def cora_link(tmp_path_factory):
    d = tmp_path_factory.mktemp("link")
    g = import_graph(CORA, d / "cora")
    return split_edges(g, d / "cora-link", EdgeSplitConfig(val=0.05, test=0.1, seed=0))


def LinkTrainer(config, link, data):  # noqa: N802 (the one trainer, the link task)
    return Trainer(config, data, task=LinkTask(config, data, link))


def cfg(**kw):
    base = dict(
        model="sage",
        fanouts=(10, 5),
        batch_size=128,
        hidden=64,
        epochs=6,
        lr=0.01,
        dropout=0.0,
        threads=1,
        progress=False,
        seed=0,
    )
    return TrainConfig.from_options(**{**base, **kw})


@pytest.mark.parametrize("scorer", ["dot", "mlp"])
def test_link_prediction_learns_and_reports_mrr(cora_link, scorer):
    data = LinkData.from_graph_dir(cora_link)
    tr = LinkTrainer(cfg(), LinkConfig(scorer=scorer, num_neg=2, eval_negatives=50), data)
    before = tr.evaluate(("val",))["val"]
    r = tr.fit()
    d = r.to_json()
    # a random scorer ranks at about 26 of 51 (MRR near H(51)/51 = 0.09); the untrained
    # encoder already smooths features over neighbourhoods (about 0.15); training adds more
    assert d["val_mrr"] > before + 0.05 and d["test_mrr"] > 0.2
    assert "test_accuracy" not in d and 0.0 <= d["test_hits@50"] <= 1.0
    assert r.metric == "mrr" and r.history[-1]["val_mrr"] <= d["val_mrr"] + 1e-9
    json.dumps(d)  # serialisable


def _adamic_adar(data: LinkData, u: int, v: int) -> float:
    """Adamic & Adar (2003) by the definition: common neighbours w, 1 / log(deg(w))."""
    ip, ix = np.asarray(data.indptr), np.asarray(data.indices)
    nb = lambda a: set(ix[ip[a] : ip[a + 1]].tolist())  # noqa: E731
    return sum(1.0 / np.log(max(ip[w + 1] - ip[w], 2)) for w in nb(u) & nb(v))


def test_baseline_is_adamic_adar_on_the_same_negatives(cora_link):
    from shoal.training.linkdata import eval_negatives
    from shoal.training.linkmetrics import mrr_hits

    data = LinkData.from_graph_dir(cora_link)
    r = LinkTrainer(cfg(epochs=1, seed=3), LinkConfig(eval_negatives=20), data).fit()
    pos = np.asarray(data.test_edges, np.int64)
    neg = eval_negatives(3, "test", len(pos), data.num_nodes, 20)
    sp = [_adamic_adar(data, u, v) for u, v in pos.tolist()]
    sq = [[_adamic_adar(data, u, w) for w in row] for u, row in zip(pos[:, 0], neg.tolist())]
    want = mrr_hits(np.array(sp), np.array(sq), ks=(50,))
    assert r.metrics["baseline_test_mrr"] == pytest.approx(want["mrr"], rel=1e-9)
    assert r.metrics["baseline_test_hits@50"] == pytest.approx(want["hits@50"])
    assert 0.2 < want["mrr"] < 0.9  # Adamic-Adar ranks Cora's edges well above chance
    none = LinkTrainer(cfg(epochs=1), LinkConfig(baseline="none"), data).fit()
    assert "baseline_test_mrr" not in none.metrics
    with pytest.raises(ValueError, match="valid names"):
        LinkConfig(baseline="jaccard")


def test_evaluation_negatives_are_fixed_and_selection_restores_the_scorer(cora_link):
    data = LinkData.from_graph_dir(cora_link)
    tr = LinkTrainer(cfg(epochs=1), LinkConfig(scorer="mlp"), data)
    a, b = tr.evaluate(("val", "test")), tr.evaluate(("val", "test"))
    assert a == b  # the same candidates at every evaluation
    tr.fit()
    assert set(tr.selected_module.state_dict()) >= {
        "scorer.lins.0.weight",
        "encoder.convs.0.lin_l.weight",
    } or len(tr.selected_module.state_dict()) > len(tr.model.state_dict())


def test_needs_a_split_graph(tmp_path):
    g = import_graph(CORA, tmp_path / "cora")
    with pytest.raises(ShoalInputError, match="split-edges"):
        LinkData.from_graph_dir(g)
    with pytest.raises(ValueError, match="valid names"):
        LinkConfig(scorer="cosine")
    assert np.isfinite(LinkConfig().eval_negatives)


def test_cli_task_link_and_toml(cora_link, tmp_path, run_cli):
    out = tmp_path / "r.json"
    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text('task = "link"\nepochs = 2\n[link]\nscorer = "mlp"\neval_negatives = 20\n')
    code, _, err = run_cli(
        "train",
        "--graph",
        cora_link.path,
        "--config",
        cfg_file,
        "--fanouts",
        "5,5",
        "--hidden",
        "16",
        "--batch-size",
        "256",
        "--threads",
        "1",
        "--no-progress",
        "--hits-k",
        "10",
        "--json",
        out,
    )
    assert code == 0, err
    r = json.loads(out.read_text())
    assert r["config"]["task"] == "link" and r["config"]["link_scorer"] == "mlp"
    assert r["config"]["link_eval_negatives"] == 20 and "test_hits@10" in r and "test_mrr" in r
    assert r["epochs"] == 2 and "test_mrr" in err
    assert "baseline adamic-adar: test_mrr=" in err and 0 < r["baseline_test_mrr"] < 1
    bad = tmp_path / "bad.toml"
    bad.write_text('task = "link"\n[link]\nscorr = "dot"\n')
    code, _, err = run_cli("train", "--graph", cora_link.path, "--config", bad)
    assert code == 2 and "scorr" in err


def test_learned_embeddings_without_features(make_graph, tmp_path):
    rng = np.random.default_rng(0)
    n = 200  # two dense communities: links are predictable from the embeddings alone
    e = [(u, v) for u in range(n) for v in rng.choice(n, 6) if (u < 100) == (v < 100) and u != v]
    e = np.unique(np.sort(np.array(e), axis=1), axis=0)
    g = make_graph(np.concatenate([e, e[:, ::-1]]), n, directed=False)
    s = split_edges(g, tmp_path / "s", EdgeSplitConfig(val=0.1, test=0.1))
    data = LinkData.from_graph_dir(s)
    assert data.features is None
    with pytest.raises(ShoalInputError, match="--embedding-dim"):
        LinkTrainer(cfg(), LinkConfig(), data)
    link = LinkConfig(embedding_dim=16, embedding_dir=str(tmp_path / "emb"), eval_negatives=20)
    tr = LinkTrainer(cfg(epochs=8, lr=0.02), link, data)
    w0 = np.array(tr.task.embedding.weight)
    before = tr.evaluate(("val",))["val"]
    r = tr.fit().to_json()
    assert (tmp_path / "emb" / "embedding.npy").exists() and not np.array_equal(
        np.array(tr.task.embedding.weight), w0
    )
    assert r["val_mrr"] > before + 0.05, (before, r["val_mrr"])
    with pytest.raises(ShoalInputError, match="another run"):
        LinkTrainer(cfg(), link, LinkData.from_graph_dir(s))


def test_learned_table_is_checkpointed_and_resumed_exactly(make_graph, tmp_path):
    rng = np.random.default_rng(1)
    n = 120
    e = np.unique(np.sort(rng.integers(0, n, size=(500, 2)), axis=1), axis=0)
    e = e[e[:, 0] != e[:, 1]]
    g = make_graph(np.concatenate([e, e[:, ::-1]]), n, directed=False)
    s = split_edges(g, tmp_path / "s", EdgeSplitConfig(val=0.1, test=0.1))

    def run(name, epochs, resume=False):
        link = LinkConfig(
            embedding_dim=8, embedding_dir=str(tmp_path / f"emb-{name}"), eval_negatives=10
        )
        c = cfg(epochs=epochs, checkpoint_dir=str(tmp_path / f"ck-{name}"), resume=resume)
        tr = LinkTrainer(c, link, LinkData.from_graph_dir(s))
        r = tr.fit()
        return tr, r

    full, r_full = run("a", 3)
    part, _ = run("b", 2)
    part.task.embedding.weight[:] = 0.0  # a crash mid-epoch leaves the working table changed
    part.task.embedding.flush()
    resumed, r_res = run("b", 3, resume=True)
    assert np.allclose(
        np.array(resumed.task.embedding.weight), np.array(full.task.embedding.weight)
    )
    assert r_res.history[-1]["loss"] == pytest.approx(r_full.history[-1]["loss"])
    assert (tmp_path / "ck-b" / "embedding" / "embedding.adam_m.npy").exists()


@pytest.mark.parametrize("scorer", ["dot", "mlp"])
def test_evaluation_scores_in_chunks_equal_the_scores_at_once(cora_link, scorer, monkeypatch):
    """Held-out pairs are scored in chunks bounded by EVAL_SCORE_BYTES (O(chunk x K x hidden)
    memory, not O(E_test x K x hidden)); each pair is scored on its own, so the scores are
    those of one pass over every pair."""
    import shoal.training.linkdata as lt

    data = LinkData.from_graph_dir(cora_link)
    tr = LinkTrainer(cfg(epochs=1), LinkConfig(scorer=scorer, eval_negatives=30), data)
    whole = tr.task.scores(tr, ("val", "test"))
    monkeypatch.setattr(lt, "EVAL_SCORE_BYTES", 64 * 31 * 8 * 7)  # 7 positives per chunk
    chunked = tr.task.scores(tr, ("val", "test"))
    for s in ("val", "test"):
        (wp, wq), (cp, cq) = whole[s], chunked[s]
        assert wq.shape == (len(wp), 30) and cq.shape == wq.shape and len(wp) > 7
        assert np.allclose(cp.numpy(), wp.numpy(), rtol=0, atol=1e-5)
        assert np.allclose(cq.numpy(), wq.numpy(), rtol=0, atol=1e-5)
    empty = lt.score_held_out(
        tr.task.scorer,
        torch.zeros(3, 64),
        np.arange(3),
        np.zeros((0, 2), np.int64),
        np.zeros((0, 5), np.int64),
    )
    assert empty[0].shape == (0,) and empty[1].shape == (0, 5)


@pytest.fixture(scope="module")
def typed_link(tmp_path_factory):
    """An IGBH-shaped graph (a featureless type included) split on ``cites``."""
    from shoal.data.synth.igbh import IGBHConfig, generate_igbh

    d = tmp_path_factory.mktemp("typed_link")
    cfg_ = IGBHConfig(scale=0.02, features=16, classes=4, seed=4, featureless=("conference",))
    g = generate_igbh(d / "g", cfg_, show_progress=False)
    split = EdgeSplitConfig(val=0.05, test=0.1, seed=0, target_relation="cites")
    return split_edges(g, d / "g-link", split)


def test_a_typed_graph_predicts_its_target_relation(typed_link):
    """Positives are the target relation's stored edges only (each pair once), negatives
    the destination type's ids, and the relational encoder learns to rank held-out ``cites``
    pairs above the split's fixed negatives."""
    data = LinkData.from_graph_dir(typed_link)
    s = data.schema
    assert data.target == s.relation_index("cites") and data.feature_dim == 16
    paper = s.node_type("paper")
    assert data.neg_range == (paper.offset, paper.offset + paper.count)
    config = cfg(model="rgcn", epochs=6, hidden=32, fanouts=(5, 5))
    tr = LinkTrainer(config, LinkConfig(num_neg=4, scorer="mlp"), data)
    rel = np.asarray(data.relations)
    stored = {tuple(e) for e in np.asarray(data.edges)[rel == data.target].tolist()}
    seen = set()
    for pos in tr.loader.positives(0):
        assert all(tuple(p) in stored for p in pos.tolist())
        b = tr.loader.make_batch(pos, 7)
        n = b.mb.n_id
        neg_dst = n[b.neg[1].numpy()]
        assert ((neg_dst >= paper.offset) & (neg_dst < paper.offset + paper.count)).all()
        seen |= {(min(u, v), max(u, v)) for u, v in pos.tolist()}
    # cites holds both directions of its pairs: each pair once, oriented at random
    assert seen == {(min(u, v), max(u, v)) for u, v in stored}
    before = tr.evaluate(("val",))["val"]
    d = tr.fit().to_json()
    # 100 fixed negatives each: a random ranking's MRR is near H(101)/101 = 0.051
    assert d["test_mrr"] > 0.12 and d["val_mrr"] > before + 0.05, (before, d["val_mrr"])
