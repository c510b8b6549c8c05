"""A typed graph's featureless node types with their embeddings on disk (sparse Adam)."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.data.synth.igbh import IGBHConfig, generate_igbh
from shoal.errors import ShoalInputError
from shoal.training import TrainConfig
from shoal.training.typed import TypedTrainer


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


def test_disk_tables_learn_and_only_touched_rows_move(igbh, tmp_path):
    t = TypedTrainer(_cfg(tmp_path / "emb", type_embeddings="disk"), igbh)
    assert [igbh.schema.node_types[k].name for k, _, _ in t.tables] == ["author", "conference"]
    author = igbh.schema.node_type("author")
    before = np.array(np.load(tmp_path / "emb/author/embedding.npy"))
    assert before.shape == (author.count, 16)
    r = t.fit()
    after = np.load(tmp_path / "emb/author/embedding.npy")
    moved = np.flatnonzero(np.any(after != before, axis=1))
    assert 0 < len(moved) < author.count  # a fanout of 5 never reaches some authors
    assert not any(isinstance(m, __import__("torch").nn.Embedding) for m in t.model.input.maps)
    # 4 classes: chance 0.25, the papers' own features alone about 0.35 (test_typed.py)
    assert r.test_accuracy > 0.55, r.test_accuracy


def test_memory_and_auto_keep_embeddings_in_the_model(igbh, tmp_path):
    for mode in ("memory", "auto"):  # auto: a few KiB of tables against the machine
        t = TypedTrainer(_cfg(tmp_path / mode, type_embeddings=mode, epochs=1), igbh)
        assert t.tables == [] and not (tmp_path / mode).exists()


def test_a_table_from_another_run_is_not_silently_reused(igbh, tmp_path):
    TypedTrainer(_cfg(tmp_path / "emb", type_embeddings="disk", epochs=1), igbh).fit()
    with pytest.raises(ShoalInputError, match="another run"):
        TypedTrainer(_cfg(tmp_path / "emb", type_embeddings="disk"), igbh)


def test_the_same_seed_gives_the_same_disk_run(igbh, tmp_path):
    a = TypedTrainer(_cfg(tmp_path / "a", type_embeddings="disk", epochs=2), igbh).fit()
    b = TypedTrainer(_cfg(tmp_path / "b", type_embeddings="disk", epochs=2), igbh).fit()
    assert [e["loss"] for e in a.history] == [e["loss"] for e in b.history]
    assert np.array_equal(
        np.load(tmp_path / "a/author/embedding.npy"), np.load(tmp_path / "b/author/embedding.npy")
    )
