"""Blocked distributed evaluation (halo exchange + local blocked layers) against the
single-process evaluation on the unpartitioned graph, with 2 real processes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shoal.distributed.blocked import PlannedGather
from tests.distributed.helpers import run_world
from tests.tolerance import accuracy_bounds, assert_within


def _graph(make_graph, n: int = 400, dim: int = 5, seed: int = 1):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, 5 * n), rng.integers(0, n, 5 * n)
    keep = (src != 7) & (dst != 7)  # node 7 is isolated
    src, dst = src[keep], dst[keep]
    src[:4], dst[:4] = [3, 3, 9, 9], [3, 3, 9, 9]  # self-loops and duplicates
    y = rng.integers(0, 3, n)
    x = rng.random((n, dim)).astype(np.float32) + y[:, None] * 0.2
    idx = rng.permutation(n)
    return make_graph(
        np.stack([src, dst], 1),
        n,
        x=x,
        y=y,
        train=np.sort(idx[:40]),
        val=np.sort(idx[40:52]),
        test=np.sort(idx[52:]),
    )


def _config(model: str, layers: int = 2):
    from shoal.training import TrainConfig

    return TrainConfig.from_options(
        model=model, fanouts=(2,) * layers, hidden=6, seed=2, normalize_features=True
    )


def _weights(model: torch.nn.Module) -> None:
    gen = torch.Generator().manual_seed(11)  # large random weights: varied predictions
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))


def _dist(
    rank: int,
    world: int,
    store: str,
    model_name: str,
    budget: int,
    splits=("val", "test"),
    layers: int = 2,
) -> dict[str, float]:
    from shoal.distributed import DistContext, dist_evaluate
    from shoal.engines.minibatch.engine import MinibatchEngine
    from shoal.store import Store
    from shoal.training import model_from_config

    tc = _config(model_name, layers)
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    eng = MinibatchEngine(Store.open(store), tc, ctx)
    model = model_from_config(tc, in_dim=eng.store.feature_dim, out_dim=eng.store.num_classes)
    _weights(model)
    return dist_evaluate(
        model,
        eng.store,
        eng.parts,
        eng.part_to_rank,
        ctx,
        eng.tables,
        splits=splits,
        normalize_features=True,
        memory_budget=budget,
    )


@pytest.mark.parametrize(
    ("model", "parts", "halo", "splits", "layers"),
    [
        ("sage", 2, True, ("val", "test"), 2),
        ("gcn", 3, False, ("val", "test"), 2),
        ("gin", 4, True, ("val", "test"), 2),
        ("sgc", 4, False, ("val", "test"), 2),
        # a few targets: earlier layers compute only their neighbourhoods, across ranks
        ("sage", 3, False, ("val",), 3),
        ("gcn", 4, True, ("val",), 2),
    ],
)
def test_blocked_two_ranks_equal_single_process(
    make_graph, make_store, model, parts, halo, splits, layers
):
    from shoal.training import TrainData, model_from_config
    from shoal.training.inference import evaluate

    g = _graph(make_graph)
    node_part = np.random.default_rng(3).integers(0, parts, g.num_nodes)
    store = str(make_store(node_part, graph=g, halo_features=halo))
    ref_model = model_from_config(_config(model, layers), in_dim=5, out_dim=3)
    _weights(ref_model)
    ref = evaluate(ref_model, TrainData.from_graph_dir(g), splits, normalize_features=True)
    # a tiny budget: many blocks, source ranges and halo chunks
    got = run_world(_dist, 2, store, model, 4096, splits, layers)
    assert got[0] == got[1]  # all-reduced counts: the same on every rank
    bounds = accuracy_bounds(ref_model, TrainData.from_graph_dir(g), splits, normalize=True)
    for s in splits:  # the same predictions away from float ties
        assert_within(ref[s], bounds[s], s)
        assert_within(got[0][s], bounds[s], s)
    assert 0.0 < ref[splits[-1]] < 1.0


def test_planned_gather_matches_fancy_indexing(tmp_path):
    x = np.random.default_rng(0).random((5000, 7)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    mm = np.load(tmp_path / "x.npy", mmap_mode="r")
    g = PlannedGather(threads=2)
    ids = np.array([4999, 0, 17, 17, 2500, 0], np.int64)  # unsorted, repeated, both ends
    np.testing.assert_array_equal(g(mm, ids), x[ids])
    out = np.zeros((8, 7), np.float32)
    np.testing.assert_array_equal(g(mm, ids, out)[: len(ids)], x[ids])
    assert g(mm, np.empty(0, np.int64)).shape == (0, 7)
    np.testing.assert_array_equal(g(x, ids), x[ids])  # in memory
    g.close()
