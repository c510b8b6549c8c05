"""minibatch with --task link: a synchronous step (the scorer's weights all-reduced, learned
rows updated at their owners), exact distributed MRR = the single-process trainer's, end to
end through the CLI with learned rows and checkpoints."""

from __future__ import annotations

import collections
import json

import numpy as np
import pytest
import torch

from shoal.data.linksplit import EdgeSplitConfig, split_edges
from shoal.distributed import DistContext
from shoal.engines.minibatch.engine import MinibatchEngine
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
        task="link",
    )
    return TrainConfig.from_options(**{**base, **kw})


def _engine(rank, world, store, link=None, **kw) -> MinibatchEngine:
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    return MinibatchEngine(Store.open(store), _cfg(link=LinkConfig(**(link or {})), **kw), ctx)


def _step(rank, world, store, emb_dir, emb):
    """One link step of the engine on 2 ranks: the model after it, and per part the rows of
    the learned table that moved against those the batch pulled."""
    from shoal.training.meter import EpochMeter

    link = dict(embedding_dim=emb, embedding_dir=emb_dir, num_neg=2, scorer="mlp")
    eng = _engine(rank, world, store, link)
    before = {i: np.array(t.weight) for i, t in eng.embedding.tables.items()} if emb else {}
    batch = next(eng._batches(0, collections.defaultdict(float)))  # the epoch's first
    eng._train_steps(0, iter([batch]), EpochMeter(0, 1, enable=False))
    moved = {}
    if emb:
        eng.embedding.flush()
        moved = {
            i: np.flatnonzero((np.asarray(t.weight) != before[i]).any(1))
            for i, t in eng.embedding.tables.items()
        }
    params = {k: v.detach().clone() for k, v in eng.model.state_dict().items()}
    return params, moved, np.asarray(batch.mb.n_id)


@pytest.mark.parametrize("emb", [0, 4])
def test_a_step_keeps_the_ranks_weights_equal_and_updates_rows_at_their_owners(
    link_store, tmp_path, emb
):
    """After one synchronous step every rank holds the same encoder and scorer (the
    scorer's gradients are all-reduced with the encoder's); learned rows move at their owners
    only, and only rows some rank's batch pulled."""
    _, store = link_store
    out = run_world(_step, 2, str(store), str(tmp_path / "e"), emb)
    assert any(k.startswith("link_scorer.") for k in out[0][0])
    for k, v in out[0][0].items():
        torch.testing.assert_close(out[1][0][k], v, rtol=1e-5, atol=1e-7)
    if emb:
        st = Store.open(store)
        pulled = np.unique(np.concatenate([o[2] for o in out]))
        for moved in (out[0][1], out[1][1]):
            for i, rows in moved.items():
                assert len(rows) and np.isin(rows + st.part_offsets[i], pulled).all()


def _evaluate(rank, world, store, state):
    eng = _engine(rank, world, store, dict(scorer="mlp", eval_negatives=30, hits_k=5))
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
        **tr.model.state_dict(),
        **{f"link_scorer.{k}": v for k, v in tr.task.scorer.state_dict().items()},
    }
    for world in (0, 1, 2):  # 0: the trainer itself
        for r in [ref] if world == 0 else run_world(_evaluate, world, str(store), state):
            assert r.keys() == ref.keys()
            for s, (mrr, hits) in bounds.items():
                assert_within(r[s], mrr, (world, s), max_width=0.02)
                assert_within(r[f"{s}_hits@5"], hits, (world, s), max_width=0.05)
    assert 0 < ref["val"] <= 1


def test_refusals(link_store, make_store):
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
