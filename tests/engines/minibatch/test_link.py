"""minibatch with --task link: positives per rank, 2 ranks = 1 rank's updates for the same
batches, exact distributed MRR = the single-process trainer's, end to end through the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from shoal.data.linksplit import EdgeSplitConfig, split_edges
from shoal.distributed import DistContext
from shoal.engines.minibatch.link import LinkMinibatchEngine
from shoal.engines.minibatch.linkdata import RankPositives
from shoal.errors import ShoalInputError
from shoal.store import Store
from shoal.training import TrainConfig
from shoal.training.link_config import LinkConfig
from shoal.training.linkdata import LinkData
from tests.distributed.helpers import run_world
from tests.engines.conftest import community_graph
from tests.tolerance import assert_within, link_metric_bounds
from tests.training.test_linktask import LinkTrainer


@pytest.fixture
def link_store(make_graph, make_store, tmp_path):
    """The community graph split for link prediction, and its 2-part store."""
    g = community_graph(make_graph, n=60)
    s = split_edges(g, tmp_path / "split", EdgeSplitConfig(val=0.15, test=0.15, seed=1))
    return s, make_store(np.arange(60) % 2, graph=s)


def _cfg(**kw) -> TrainConfig:
    base = dict(
        model="sage",
        fanouts=(-1, -1),
        batch_size=8,
        hidden=8,
        epochs=2,
        lr=0.02,
        dropout=0.0,
        seed=5,
        progress=False,
        threads=1,
    )
    return TrainConfig.from_options(**{**base, **kw})


def _engine(rank, world, store, link=None, **kw) -> LinkMinibatchEngine:
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    return LinkMinibatchEngine(Store.open(store), _cfg(**kw), ctx, link=link or LinkConfig())


def test_rank_positives_cover_every_training_pair_once(link_store):
    split, store_path = link_store
    store = Store.open(store_path)
    got = []
    for r in range(2):
        rp = RankPositives([store.part(r)], directed=False, rank=r, chunk_edges=7)
        batches = list(rp.epoch(0, 0, 4))
        assert len(batches) == 4 and sum(len(b) for b in batches) == rp.count
        got += [tuple(e) for b in batches for e in b.tolist()]
    flipped = np.mean([u > v for u, v in got])  # oriented at random: both ends anchor negatives
    assert 0.2 < flipped < 0.8
    e = store.to_orig(np.array(got)).reshape(-1, 2)
    orig = np.asarray(split.edge_stream().memmap())
    want = {(int(u), int(v)) for u, v in orig if u != v}
    want = {(min(u, v), max(u, v)) for u, v in want}
    have = [(min(u, v), max(u, v)) for u, v in e.tolist()]
    assert len(have) == len(set(have)) and set(have) == want


def _step(rank, world, store, emb_dir, batches, emb):
    link = LinkConfig(embedding_dim=emb, embedding_dir=emb_dir, num_neg=2, scorer="mlp")
    eng = _engine(rank, world, store, link)
    before = {i: np.array(t.weight) for i, t in eng.embedding.tables.items()} if emb else {}
    mine = batches if world == 1 else [batches[rank]]
    s, n = eng.train_step(mine, 123)
    grads = {k: p.grad.clone() for k, p in eng.model.named_parameters()}
    pushed, moved = {}, {}
    if emb:
        eng.embedding.flush()
        pushed = dict(eng.last_push)
        moved = {
            i: np.flatnonzero((np.asarray(t.weight) != before[i]).any(1))
            for i, t in eng.embedding.tables.items()
        }
    return grads, pushed, s, n, moved


@pytest.mark.parametrize("emb", [0, 4])
def test_two_ranks_update_as_one_rank_on_the_same_batches(link_store, tmp_path, emb):
    """Synchronous settings (full neighbourhoods, no dropout): rank r steps on batch r; one
    rank steps on both batches with their mean loss: the same gradients, and each owner
    applies the same summed row gradients to exactly those rows."""
    _, store = link_store
    st = Store.open(store)
    rng = np.random.default_rng(0)
    batches = []
    for r in range(2):  # 5 positives of rank r's part, 2 negatives each, anywhere
        rp = RankPositives([st.part(r)], directed=False, rank=r)
        pos = next(rp.epoch(0, 0, 1))[:5]
        batches.append((pos, rng.integers(0, st.num_nodes, (5, 2))))
    two = run_world(_step, 2, str(store), str(tmp_path / "e2"), batches, emb)
    one = run_world(_step, 1, str(store), str(tmp_path / "e1"), batches, emb)[0]
    # the gradients after the all-reduce (Adam's first step is their sign: compare them)
    for k, v in one[0].items():
        for r in range(2):
            torch.testing.assert_close(two[r][0][k], v, rtol=1e-4, atol=1e-7)
    assert two[0][3] + two[1][3] == one[3] == 10
    assert (two[0][2] + two[1][2]) == pytest.approx(one[2], rel=1e-5)
    if emb:
        pushed = {**two[0][1], **two[1][1]}
        moved = {**two[0][4], **two[1][4]}
        assert set(pushed) == set(one[1]) == {0, 1}
        for i, (rows, g) in pushed.items():
            np.testing.assert_array_equal(rows, one[1][i][0])
            np.testing.assert_allclose(g, one[1][i][1], rtol=1e-4, atol=1e-7)
            # a sparse update: exactly the rows with a gradient moved, no other
            assert np.array_equal(moved[i], rows[np.abs(g).sum(1) > 0]) and len(moved[i])
            assert np.array_equal(one[4][i], moved[i])


def _evaluate(rank, world, store, state):
    eng = _engine(rank, world, store, LinkConfig(scorer="mlp", eval_negatives=30, hits_k=5))
    eng.model.load_state_dict(state)
    return eng.evaluate(("val", "test"))


def test_distributed_mrr_equals_the_single_process_trainer(link_store):
    """The distributed MRR and Hits@K lie within the range the single-process scores allow
    when near-ties may flip, and that range is narrow (the ranks away from ties agree)."""
    split, store = link_store
    tc = _cfg()
    tr = LinkTrainer(
        tc, LinkConfig(scorer="mlp", eval_negatives=30, hits_k=5), LinkData.from_graph_dir(split)
    )
    tr.fit()
    ref = tr.evaluate(("val", "test"))
    scores = tr.task.scores(tr, ("val", "test"))
    bounds = {s: link_metric_bounds(*sc, k=5) for s, sc in scores.items()}
    state = {
        **{f"encoder.{k}": v for k, v in tr.model.state_dict().items()},
        **{f"scorer.{k}": v for k, v in tr.task.scorer.state_dict().items()},
    }
    for world in (0, 1, 2):  # 0: the trainer itself
        for r in [ref] if world == 0 else run_world(_evaluate, world, str(store), state):
            assert r.keys() == ref.keys()
            for s, (mrr, hits) in bounds.items():
                assert_within(r[s], mrr, (world, s), max_width=0.02)
                assert_within(r[f"{s}_hits@5"], hits, (world, s), max_width=0.05)
    assert 0 < ref["val"] <= 1


def test_refusals(link_store, make_store):
    _, store = link_store
    with pytest.raises(ShoalInputError, match="sum messages"):
        _engine(0, 1, store, model="gat")
    plain = make_store(np.arange(48) % 2)  # built from an unsplit graph
    with pytest.raises(ShoalInputError, match="split-edges"):
        _engine(0, 1, plain)


def test_cli_two_processes_with_learned_embeddings(link_store, tmp_path, run_cli):
    _, store = link_store
    out = tmp_path / "r.json"
    code, _, err = run_cli(
        "train",
        "--store",
        store,
        "--engine",
        "minibatch",
        "--nproc",
        "2",
        "--task",
        "link",
        "--embedding-dim",
        "8",
        "--embedding-dir",
        tmp_path / "emb",
        "--negatives",
        "owner-local",
        "--fanouts",
        "4,4",
        "--hidden",
        "8",
        "--epochs",
        "2",
        "--batch-size",
        "16",
        "--no-progress",
        "--eval-negatives",
        "20",
        "--checkpoint-dir",
        tmp_path / "ck",
        "--json",
        out,
    )
    assert code == 0, err
    r = json.loads(out.read_text())
    assert r["world_size"] == 2 and r["config"]["task"] == "link" and 0 < r["test_mrr"] <= 1
    assert r["config"]["link_negatives"] == "owner-local" and "test_hits@50" in r
    assert r["epochs"] == 2 and len(r["history"]) == 2
    assert (tmp_path / "ck" / "embedding" / "part_0" / "embedding.npy").exists()
    assert (tmp_path / "ck" / "embedding" / "part_1" / "embedding.adam_m.npy").exists()
