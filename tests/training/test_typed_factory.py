"""``--model-factory`` on a typed graph: a user's heterogeneous model (PyG ``to_hetero``),
trained and evaluated by the one trainer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shoal.data.synth.igbh import IGBHConfig, generate_igbh
from shoal.errors import ShoalInputError
from shoal.sample.sampler import NeighborSampler
from shoal.training import TrainConfig, TrainData, Trainer

FACTORY = "tests.training.typed_factories:sage_hetero"


@pytest.fixture(scope="module")
def igbh(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf") / "g"
    cfg = IGBHConfig(scale=0.02, features=16, classes=4, seed=4, featureless=("conference",))
    return generate_igbh(out, cfg, show_progress=False)


def _cfg(**kw) -> TrainConfig:
    opts = dict(fanouts=(5, 5), hidden=16, batch_size=256, epochs=6, lr=0.01, seed=2)
    return TrainConfig.from_options(**{**opts, "threads": 1, "progress": False, **kw})


def test_a_to_hetero_model_learns_the_relational_signal(igbh):
    r = Trainer(_cfg(model_factory=FACTORY), TrainData.from_graph_dir(igbh)).fit().to_json()
    # 4 classes: chance 0.25, the papers' own features alone about 0.35 (test_trainer_typed)
    assert r["test_accuracy"] > 0.55, r["test_accuracy"]
    assert r["history"][-1]["loss"] < r["history"][0]["loss"]


def test_a_factory_model_with_its_featureless_types_on_disk(igbh, tmp_path):
    cfg = _cfg(
        model_factory=FACTORY,
        epochs=1,
        type_embeddings="disk",
        link={"embedding_dir": str(tmp_path / "emb")},
    )
    t = Trainer(cfg, TrainData.from_graph_dir(igbh))
    assert t.tables.names == ["conference"] and t.model.input.given == [
        nt.name == "conference" for nt in igbh.schema.node_types
    ]
    assert 0 <= t.fit().test_accuracy <= 1


def test_whole_batch_evaluation_equals_the_layerwise_one(igbh, monkeypatch):
    """The evaluation of a model that cannot run layer by layer (every neighbour per
    relation, L hops, in batches halved to the rows the budget holds) against R-GCN's exact
    layer-wise evaluation, on R-GCN."""
    from shoal.training.inference import _sampled_inference

    t = Trainer(_cfg(model="rgcn", epochs=1, eval_batch_size=64), TrainData.from_graph_dir(igbh))
    t.fit()
    ref = t.evaluate(("val", "test"))
    nodes = np.concatenate([t.data.val_idx, t.data.test_idx])
    full = NeighborSampler(t.data.indptr, t.data.indices, [-1], schema=t.data.schema)
    row = 16 * t.data.feature_dim * 2  # a row's bytes, as the inference counts them
    # batches of at most 2000 rows: those of 64 nodes halved, some many times
    with torch.no_grad():
        out = _sampled_inference(t.model.eval(), t.data, nodes, full, False, 64, 2000 * row)
    pred = out.argmax(1)
    labels = np.asarray(t.data.labels)
    nv = len(t.data.val_idx)
    got = {
        "val": float(np.mean(pred[:nv] == labels[t.data.val_idx])),
        "test": float(np.mean(pred[nv:] == labels[t.data.test_idx])),
    }
    assert got == pytest.approx(ref, abs=1e-9)
    assert np.isfinite(list(got.values())).all()


def test_a_factory_that_returns_no_module_is_refused(igbh):
    with pytest.raises(ShoalInputError, match="not a torch.nn.Module"):
        Trainer(
            _cfg(model_factory="tests.training.typed_factories:not_a_module"),
            TrainData.from_graph_dir(igbh),
        )
