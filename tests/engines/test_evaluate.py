"""Distributed exact evaluation: the same weights give the same accuracy at any world size."""

from __future__ import annotations

import numpy as np
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


def _sampled(rank: int, world: int, store: str) -> list[dict[str, float]]:
    """The exact accuracy, the sampled one with every neighbour, and the sampled one with a
    fanout of 1 twice (fixed draws)."""
    from shoal.distributed import DistContext
    from shoal.engines.minibatch.engine import MinibatchEngine
    from shoal.store import Store
    from shoal.training import TrainConfig, model_from_config

    tc = TrainConfig.from_options(model="gat", fanouts=(2, 2), hidden=8, seed=3)
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    engine = MinibatchEngine(Store.open(store), tc, ctx)
    model = model_from_config(tc, in_dim=engine.store.feature_dim, out_dim=engine.store.num_classes)
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    model.eval()
    splits = ("val", "test")
    return [
        engine.evaluate(splits, model=model),
        engine.evaluate(splits, model=model, fanouts=(-1, -1)),
        engine.evaluate(splits, model=model, fanouts=(1, 1)),
        engine.evaluate(splits, model=model, fanouts=(1, 1)),
    ]


def test_a_sampled_evaluation_with_every_neighbour_is_the_exact_one(make_store):
    """--eval-fanouts in an engine: with every neighbour the sampled validation's numbers
    are the exact evaluation's (GAT: the layer loop over the receptive field); with a fanout
    of 1, the same draws at every call, on every rank."""
    from shoal.store import Store

    path = str(make_store(parts=4))
    out = run_world(_sampled, 2, path)
    assert out[0] == out[1]
    exact, every, one, again = out[0]
    st = Store.open(path)
    for s in exact:  # two computations of the same logits: a near-tie may flip one node
        n = sum(int(np.asarray(p.mask(s)).sum()) for p in st.parts())
        assert abs(every[s] - exact[s]) <= 1.0 / n + 1e-12, s
    assert one == again


def test_the_evaluation_books_count_the_evaluated_nodes():
    """The evaluation's per-target books are sized by the nodes in any evaluated split (each
    once), not by every core node."""
    from types import SimpleNamespace

    from shoal.engines.base import Engine

    class Part:
        def __init__(self, val, test):
            self.masks = {"val": np.asarray(val, bool), "test": np.asarray(test, bool)}

        def mask(self, s):
            return self.masks[s]

    parts = [Part([1, 0, 0, 1], [1, 1, 0, 0]), Part([0, 0, 0], [0, 0, 1])]
    eng = SimpleNamespace(parts=parts, _evaluated_counts={})
    assert Engine._evaluated(eng, ("val", "test")) == 4  # node 0 of part 0 counted once
    assert Engine._evaluated(eng, ("val",)) == 2
    assert Engine._evaluated(eng, ()) == 0
