"""``--model-factory`` on a typed graph: a user's heterogeneous model (PyG ``to_hetero``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shoal.data.synth.igbh import IGBHConfig, generate_igbh
from shoal.errors import ShoalInputError
from shoal.training import TrainConfig
from shoal.training.typed import TypedTrainer
from shoal.training.typed_inference import layerwise_logits

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
    r = TypedTrainer(_cfg(model_factory=FACTORY), igbh).fit().to_json()
    # 4 classes: chance 0.25, the papers' own features alone about 0.35 (test_typed.py)
    assert r["test_accuracy"] > 0.55, r["test_accuracy"]
    assert r["history"][-1]["loss"] < r["history"][0]["loss"]


def test_whole_batch_evaluation_equals_the_layerwise_one(igbh):
    """The evaluation of a factory model (every neighbour per relation, L hops, in batches
    halved to the plan's rows) against R-GCN's exact layer-wise inference, on R-GCN."""
    t = TypedTrainer(_cfg(model="rgcn", epochs=1, eval_batch_size=64), igbh)
    t.fit()
    t.model.eval()
    ids = np.sort(np.concatenate([t.splits["val"], t.splits["test"]]))
    t.probed_rows = 300  # most batches of 64 nodes hold more: halved, some many times
    with torch.no_grad():
        got = t._sampled_logits(ids)
        ref = layerwise_logits(
            t.model, ids, one_hop=t.one_hop, features=t.features, max_rows=10**9, chunk=128
        )
    assert torch.allclose(got, ref, atol=1e-4), (got - ref).abs().max()


def test_a_factory_that_returns_no_module_is_refused(igbh):
    with pytest.raises(ShoalInputError, match="not a torch.nn.Module"):
        TypedTrainer(_cfg(model_factory="tests.training.typed_factories:not_a_module"), igbh)
