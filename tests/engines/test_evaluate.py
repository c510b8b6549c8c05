"""Distributed exact evaluation: the same weights give the same accuracy at any world size."""

from __future__ import annotations

import torch

from tests.distributed.helpers import run_world


def _accuracy(rank: int, world: int, store: str) -> dict[str, float]:
    from shoal.distributed import DistContext
    from shoal.engines.minibatch.engine import MinibatchEngine
    from shoal.store import Store
    from shoal.training import TrainConfig, model_from_config

    tc = TrainConfig.from_options(model="sage", fanouts=(2, 2), hidden=8, seed=3)
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    engine = MinibatchEngine(Store.open(store), tc, ctx)
    model = model_from_config(tc, in_dim=engine.store.feature_dim, out_dim=engine.store.num_classes)
    gen = torch.Generator().manual_seed(7)  # large random weights: varied predictions
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    model.eval()
    return engine.evaluate(("val", "test"), model=model)


def test_evaluation_does_not_depend_on_world_size(make_store):
    store = str(make_store(parts=4))
    one = run_world(_accuracy, 1, store)[0]
    two = run_world(_accuracy, 2, store)
    assert two[0] == two[1] == one
    assert 0.0 < one["test"] < 1.0  # not a degenerate constant prediction
