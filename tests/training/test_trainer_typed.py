"""The one trainer on a typed graph: relational batches, one row source, exact evaluation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shoal.data.synth.igbh import IGBHConfig, generate_igbh
from shoal.sample.sampler import NeighborSampler
from shoal.training import TrainConfig
from shoal.training.data import TrainData
from shoal.training.trainer import Trainer


@pytest.fixture(scope="module")
def igbh(tmp_path_factory):
    out = tmp_path_factory.mktemp("typed_trainer") / "g"
    cfg = IGBHConfig(scale=0.01, features=8, classes=3, seed=3, featureless=("conference",))
    return generate_igbh(out, cfg, show_progress=False)


@pytest.mark.parametrize("model", ["rgcn", "rgat"])
def test_the_trainer_learns_a_typed_graph_and_evaluates_it_exactly(igbh, model):
    cfg = TrainConfig.from_dict(
        {
            "model": model,
            "hidden": 16,
            "heads": 2,
            "fanouts": [5, 5],
            "epochs": 4,
            "lr": 0.01,
            "batch_size": 128,
            "progress": False,
        }
    )
    data = TrainData.from_graph_dir(igbh)
    assert data.schema is not None and data.feature_dim == 8
    tr = Trainer(cfg, data)
    res = tr.fit()
    assert res.test_accuracy > 0.45  # 3 balanced classes: chance is 1/3
    # the exact evaluation equals the model on every neighbour, L hops out, batch by batch
    model_ = tr.model.eval()
    val = np.asarray(data.val_idx)
    full = NeighborSampler(data.indptr, data.indices, [-1, -1], schema=data.schema)
    mb = full.sample(val)
    x = np.zeros((len(mb.n_id), data.feature_dim), np.float32)
    order = np.argsort(mb.n_id)
    data.features.read(np.ascontiguousarray(mb.n_id[order]), x, dest=order)
    with torch.no_grad():
        pred = model_(torch.from_numpy(x), mb.with_node_ids()).argmax(1).numpy()
    labels = np.asarray(data.labels)[val]
    assert tr.evaluate(("val",))["val"] == pytest.approx(float(np.mean(pred == labels)), abs=1e-9)
