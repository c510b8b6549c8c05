"""A typed graph's featureless node types with their embeddings on disk (sparse Adam), in the
one trainer: ``--type-embeddings disk|auto|memory``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import shoal.training.embedding as embedding
from shoal.data.synth.igbh import IGBHConfig, generate_igbh
from shoal.errors import ShoalInputError
from shoal.sample.sampler import NeighborSampler
from shoal.training import TrainConfig, TrainData, Trainer
from shoal.training.embedding import TableRows


@pytest.fixture(scope="module")
def igbh(tmp_path_factory):
    out = tmp_path_factory.mktemp("te") / "g"
    cfg = IGBHConfig(
        scale=0.02, features=16, classes=4, seed=4, featureless=("conference", "author")
    )
    return generate_igbh(out, cfg, show_progress=False)


def _cfg(where, **kw) -> TrainConfig:
    opts = dict(model="rgcn", fanouts=(5, 5), hidden=16, batch_size=256, epochs=6, lr=0.01)
    return TrainConfig.from_options(
        **{
            **opts,
            "threads": 1,
            "progress": False,
            "seed": 2,
            "link": {"embedding_dir": str(where)},
            **kw,
        }
    )


def _trainer(igbh, where, **kw) -> Trainer:
    return Trainer(_cfg(where, **kw), TrainData.from_graph_dir(igbh))


def test_disk_tables_learn_and_only_touched_rows_move(igbh, tmp_path):
    t = _trainer(igbh, tmp_path / "emb", type_embeddings="disk")
    assert t.tables.names == ["author", "conference"]
    author = igbh.schema.node_type("author")
    before = np.array(np.load(tmp_path / "emb/author/embedding.npy"))
    assert before.shape == (author.count, 16)
    r = t.fit()
    after = np.load(tmp_path / "emb/author/embedding.npy")
    moved = np.flatnonzero(np.any(after != before, axis=1))
    assert 0 < len(moved) < author.count  # a fanout of 5 never reaches some authors
    assert not any(isinstance(m, torch.nn.Embedding) for m in t.model.input.maps)
    assert r.config["typed"]["embeddings_on_disk"] == ["author", "conference"]
    # 4 classes: chance 0.25, the papers' own features alone about 0.35 (test_trainer_typed)
    assert r.test_accuracy > 0.55, r.test_accuracy


def test_memory_keeps_embeddings_in_the_model_and_auto_chooses_by_the_limit(
    igbh, tmp_path, monkeypatch
):
    for mode in ("memory", "auto"):  # auto: a few KiB of tables against the machine
        t = _trainer(igbh, tmp_path / mode, type_embeddings=mode, epochs=1)
        assert t.tables is None and not (tmp_path / mode).exists()
        assert any(isinstance(m, torch.nn.Embedding) for m in t.model.input.maps)
    # tables and Adam's moments over a quarter of the memory limit: on disk
    s = igbh.schema
    need = 3 * 4 * 16 * (s.node_type("author").count + s.node_type("conference").count)
    monkeypatch.setattr(embedding, "memory_limit", lambda: (4 * need - 4, "test"))
    t = _trainer(igbh, tmp_path / "small", type_embeddings="auto", epochs=1)
    assert t.tables.names == ["author", "conference"]
    assert (tmp_path / "small/author/embedding.npy").exists()
    monkeypatch.setattr(embedding, "memory_limit", lambda: (4 * need + 4, "test"))
    assert _trainer(igbh, tmp_path / "big", type_embeddings="auto", epochs=1).tables is None


def test_a_table_from_another_run_is_not_silently_reused(igbh, tmp_path):
    # a run refused by its memory plan writes no table (its retry is not "another run")
    with pytest.raises(ShoalInputError, match="minimum working set"):
        _trainer(igbh, tmp_path / "emb", type_embeddings="disk", memory=1 << 20)
    assert not (tmp_path / "emb").exists()
    _trainer(igbh, tmp_path / "emb", type_embeddings="disk", epochs=1).fit()
    with pytest.raises(ShoalInputError, match="another run"):
        _trainer(igbh, tmp_path / "emb", type_embeddings="disk")


def test_the_same_seed_gives_the_same_disk_run(igbh, tmp_path):
    a = _trainer(igbh, tmp_path / "a", type_embeddings="disk", epochs=2).fit()
    b = _trainer(igbh, tmp_path / "b", type_embeddings="disk", epochs=2).fit()
    assert [e["loss"] for e in a.history] == [e["loss"] for e in b.history]
    assert np.array_equal(
        np.load(tmp_path / "a/author/embedding.npy"), np.load(tmp_path / "b/author/embedding.npy")
    )


def test_exact_evaluation_reads_the_tables_rows_wider_than_the_features(igbh, tmp_path):
    """hidden 32 > 16 features: x is widened; the exact layer-wise evaluation equals the
    model on every neighbour, L hops out, with the tables' rows as the featureless types'."""
    t = _trainer(igbh, tmp_path / "emb", type_embeddings="disk", hidden=32, epochs=1)
    t.train_epoch(0)
    data = t.data
    rows = TableRows(data.features, t.tables)
    assert rows.dim == 32 and data.feature_dim == 16
    val = np.asarray(data.val_idx)
    mb = NeighborSampler(data.indptr, data.indices, [-1, -1], schema=data.schema).sample(val)
    x = np.zeros((len(mb.n_id), rows.dim), np.float32)
    order = np.argsort(mb.n_id)
    rows.read(np.ascontiguousarray(mb.n_id[order]), x, dest=order)
    author = igbh.schema.node_type("author")
    on = np.flatnonzero(igbh.schema.type_of(mb.n_id) == igbh.schema.type_index("author"))
    table = np.load(tmp_path / "emb/author/embedding.npy")
    assert len(on) and np.array_equal(x[on], table[mb.n_id[on] - author.offset])
    with torch.no_grad():
        pred = t.model.eval()(torch.from_numpy(x), mb.with_node_ids()).argmax(1).numpy()
    want = float(np.mean(pred == np.asarray(data.labels)[val]))
    assert t.evaluate(("val",))["val"] == pytest.approx(want, abs=1e-9)


def test_the_tables_are_restored_at_the_best_epoch_and_resumed(igbh, tmp_path):
    """The checkpoint keeps the tables (last and best); the run ends with the best epoch's
    tables; a resumed run continues from the checkpoint's tables, as if uninterrupted."""
    ck = tmp_path / "ck"
    kw = dict(type_embeddings="disk", eval_every=1)
    whole = _trainer(igbh, tmp_path / "whole", **kw, epochs=4).fit()
    first = _trainer(igbh, tmp_path / "emb", **kw, epochs=2, checkpoint_dir=str(ck)).fit()
    table = np.load(tmp_path / "emb/author/embedding.npy")
    best = np.load(ck / "embedding_author_best/embedding.npy")
    assert np.array_equal(table, best)  # the best epoch's tables, with the best weights
    assert (ck / "embedding_author/embedding.adam_m.npy").exists()
    resumed = _trainer(
        igbh, tmp_path / "emb", **kw, epochs=4, checkpoint_dir=str(ck), resume=True
    ).fit()
    assert len(first.history) == 2
    assert [e["loss"] for e in resumed.history] == pytest.approx(
        [e["loss"] for e in whole.history], rel=1e-6
    )
    assert resumed.best_epoch == whole.best_epoch
    assert np.allclose(
        np.load(tmp_path / "emb/author/embedding.npy"),
        np.load(tmp_path / "whole/author/embedding.npy"),
        atol=1e-6,
    )


def test_restore_best_brings_back_the_tables_kept_at_the_best_score(igbh, tmp_path):
    t = _trainer(igbh, tmp_path / "emb", type_embeddings="disk", epochs=2)
    path = tmp_path / "emb/author/embedding.npy"
    t.train_epoch(0)
    t.keep_best()  # what the loop calls at a new best validation score
    kept = np.array(np.load(path))
    t.train_epoch(1)
    assert not np.array_equal(np.load(path), kept)
    t.restore_best()
    assert np.array_equal(np.load(path), kept)
