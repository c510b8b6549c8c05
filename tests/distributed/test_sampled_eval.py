"""The full-neighbourhood distributed evaluation (models without layer access) gives the
layer-wise evaluation's numbers, 2 real processes."""

from __future__ import annotations

import pytest
import torch

from shoal.training import TrainData, model_from_config
from tests.distributed.helpers import run_world
from tests.distributed.test_blocked import _config, _graph, _weights
from tests.tolerance import accuracy_bounds, assert_within


class Opaque(torch.nn.Module):
    """A model the evaluation can only call as model(x, blocks)."""

    def __init__(self, inner: torch.nn.Module, num_layers: int) -> None:
        super().__init__()
        self.inner, self.num_layers = inner, num_layers

    def forward(self, x, blocks):
        return self.inner(x, blocks)


def _both(rank: int, world: int, store: str, model_name: str):
    from shoal.distributed import DistContext, dist_evaluate
    from shoal.engines.minibatch.engine import MinibatchEngine
    from shoal.store import Store
    from shoal.training import model_from_config

    tc = _config(model_name)
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    eng = MinibatchEngine(Store.open(store), tc, ctx)
    model = model_from_config(tc, in_dim=eng.store.feature_dim, out_dim=eng.store.num_classes)
    _weights(model)
    args = (eng.store, eng.parts, eng.part_to_rank, ctx, eng.tables)
    layered = dist_evaluate(model, *args, normalize_features=True)
    sampled = dist_evaluate(Opaque(model, 2), *args, normalize_features=True, batch_size=7)
    return layered, sampled


@pytest.mark.parametrize(("model", "parts"), [("sage", 2), ("gcn", 3)])
def test_full_neighbourhood_evaluation_equals_layerwise(make_graph, make_store, model, parts):
    g = _graph(make_graph)
    store = str(make_store(parts=parts, graph=g))
    out = run_world(_both, 2, store, model, timeout=120)
    ref_model = model_from_config(_config(model), in_dim=5, out_dim=3)
    _weights(ref_model)
    bounds = accuracy_bounds(
        ref_model, TrainData.from_graph_dir(g), ("val", "test"), normalize=True
    )
    for layered, sampled in out:
        for s in ("val", "test"):  # the same predictions away from float ties
            assert_within(layered[s], bounds[s], s)
            assert_within(sampled[s], bounds[s], s)
        assert 0.0 < layered["test"] < 1.0  # varied predictions: the comparison means something
