"""averaging engine: weighted model averaging, optimizer state, halo-feature requirement."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shoal.distributed import DistConfig, DistContext, process_group
from shoal.engines.averaging.average import average_saved_ranks
from shoal.engines.averaging.config import AveragingConfig
from shoal.engines.averaging.engine import (
    AveragingEngine,
    average_optimizer_state_,
    weighted_average_,
)
from shoal.errors import ShoalInputError
from shoal.store import Store
from shoal.training import TrainConfig
from tests.distributed.helpers import run_world

WEIGHTS = [1.0, 3.0, 0.0]  # rank 2 trained on no node: it contributes nothing


def _average(rank: int, world: int) -> tuple[list, list, float]:
    lin = torch.nn.Linear(2, 1)
    opt = torch.optim.Adam(lin.parameters())
    lin(torch.ones(1, 2)).sum().backward()
    opt.step()
    with torch.no_grad():  # rank-specific, known parameters and moments
        lin.weight.fill_(float(rank + 1))  # ranks hold 1, 2, 3
        lin.bias.fill_(10.0 * (rank + 1))
        for st in opt.state.values():
            st["exp_avg"].fill_(float(rank + 1))
    total, nbytes = weighted_average_(lin, WEIGHTS[rank])
    average_optimizer_state_(opt, WEIGHTS[rank])
    moments = [st["exp_avg"].flatten().tolist() for st in opt.state.values()]
    return lin.weight.flatten().tolist() + lin.bias.tolist(), moments, total


def test_models_averaged_weighted_by_training_nodes():
    out = run_world(_average, 3)
    w = np.array(WEIGHTS) / sum(WEIGHTS)
    expect_w = float(w @ np.array([1.0, 2.0, 3.0]))  # 1.75
    expect_b = 10.0 * expect_w
    for params, moments, total in out:
        assert total == sum(WEIGHTS)
        assert params == pytest.approx([expect_w, expect_w, expect_b])
        for m in moments:
            assert m == pytest.approx([expect_w] * len(m))


def _saved_rank(rank: int, weight: float) -> dict:
    """A rank's checkpoint state with known parameters (rank + 1) and moments (10 x it)."""
    lin = torch.nn.Linear(2, 1)
    opt = torch.optim.Adam(lin.parameters())
    lin(torch.ones(1, 2)).sum().backward()
    opt.step()
    with torch.no_grad():
        lin.weight.fill_(float(rank + 1))
        lin.bias.fill_(float(rank + 1))
        for st in opt.state.values():
            st["exp_avg"].fill_(10.0 * (rank + 1))
    return {"model": lin.state_dict(), "optimizer": opt.state_dict(), "weight": weight}


@pytest.mark.parametrize("moments", [True, False])
def test_a_resharded_checkpoint_continues_from_the_weighted_average(moments):
    """Three saved ranks (weights 1, 3, 0) resumed on another world: the model is their
    weighted average, as an averaging round would leave it; the moments too by default."""
    peers = [_saved_rank(r, w) for r, w in enumerate(WEIGHTS)]
    state = {**peers[1], "peers": peers, "resharded_from": 3, "part_models": [["x"]]}
    got = average_saved_ranks(state, moments=moments)
    expect = float(np.array(WEIGHTS) @ [1.0, 2.0, 3.0] / sum(WEIGHTS))  # 1.75
    assert got["model"]["weight"].flatten().tolist() == pytest.approx([expect, expect])
    assert got["model"]["bias"].tolist() == pytest.approx([expect])
    for st in got["optimizer"]["state"].values():
        want = 10.0 * expect if moments else 20.0  # else saved rank 1's own
        assert st["exp_avg"].flatten().tolist() == pytest.approx([want] * st["exp_avg"].numel())
        assert float(st["step"]) == 1.0  # step counters are not averaged
    assert got["part_models"] == []  # part models restart from the average
    assert peers[1]["model"]["bias"].item() == 2.0  # the saved states are not changed


def test_averaging_needs_halo_features(make_store):
    store = make_store(parts=2, halo_features=False)
    with process_group(DistConfig()) as ctx, pytest.raises(ShoalInputError, match="halo"):
        AveragingEngine(Store.open(store), TrainConfig(), ctx)


def test_p_greater_than_n_trains_every_part_in_turn(make_store):
    store = make_store(parts=3)
    with process_group(DistConfig()) as ctx:
        assert isinstance(ctx, DistContext)
        tc = TrainConfig.from_options(
            fanouts=(2,), hidden=4, epochs=2, batch_size=4, progress=False
        )
        eng = AveragingEngine(Store.open(store), tc, ctx)
        assert [p.index for p in eng.parts] == [0, 1, 2]
        assert eng.weight == 16  # every training node of the three parts
        rec = eng.train_epoch(0)
        assert rec["averaged"] and rec["comm"]["bytes_sent"] == 0


def _fit_averaging(rank: int, world: int, store: str):
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    tc = TrainConfig.from_options(
        fanouts=(3, 3), hidden=8, epochs=3, batch_size=4, lr=0.05, seed=2, progress=False
    )
    eng = AveragingEngine(Store.open(store), tc, ctx)
    res = eng.fit().to_json()
    moments = [st["exp_avg"].flatten().tolist() for st in eng.optimizer.state.values()]
    return eng.weight, res, moments


def test_a_rank_without_training_nodes_joins_every_average(make_graph, make_store):
    """Rank 1's parts hold no training node, so its Adam state stays empty; the optimizer
    average must still run its collectives on rank 1 (it used to return before them, pairing
    rank 0's all-reduces with the wrong ones)."""
    from tests.engines.conftest import community_graph

    g = community_graph(make_graph)
    train = set(np.load(g.path / "train_idx.npy").tolist())
    node_part = np.array([0 if v in train or v % 3 == 0 else 1 for v in range(g.num_nodes)])
    store = str(make_store(node_part, graph=g))
    (w0, r0, m0), (w1, r1, m1) = run_world(_fit_averaging, 2, store, timeout=90)
    assert (w0, w1) == (16.0, 0.0)
    assert r0["epochs"] == r1["epochs"] == 3
    keys = ("loss", "train_accuracy", "val_accuracy")
    assert [[h.get(k) for k in keys] for h in r0["history"]] == [
        [h.get(k) for k in keys] for h in r1["history"]
    ]
    assert r0["test_accuracy"] == r1["test_accuracy"]
    assert m1 == m0 and any(x != 0 for m in m1 for x in m)  # rank 1 received rank 0's moments


def _fit_params(rank: int, world: int, store: str, part_models: bool):
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    tc = TrainConfig.from_options(
        fanouts=(3, 3),
        hidden=8,
        epochs=2,
        batch_size=4,
        lr=0.05,
        seed=2,
        dropout=0.0,
        progress=False,
        engine=AveragingConfig(part_models=part_models),
    )
    eng = AveragingEngine(Store.open(store), tc, ctx)
    for e in range(2):
        eng.train_epoch(e)
    flat = torch.cat([p.detach().reshape(-1) for p in eng.model.parameters()])
    same = all(
        torch.equal(flat, torch.cat([p.detach().reshape(-1) for p in m.parameters()]))
        for m in eng.part_models.models
    )
    return flat.tolist(), same, len(eng.part_models.models)


def test_part_models_on_one_rank_equal_one_part_per_rank(make_store):
    """SDT-GNN's one model per part: one process holding both parts with --part-models trains
    and averages exactly what two processes holding one part each do (no dropout, so no RNG
    is shared between the parts); carrying one model through both parts does not."""
    store = str(make_store(parts=2))
    (two, _, _), _ = run_world(_fit_params, 2, store, False, timeout=90)
    one, same, n_models = run_world(_fit_params, 1, store, True, timeout=90)[0]
    carried, _, _ = run_world(_fit_params, 1, store, False, timeout=90)[0]
    assert n_models == 2 and same  # after averaging every part restarts from the mean
    assert np.allclose(one, two, atol=1e-5)
    assert not np.allclose(carried, two, atol=1e-3)


@pytest.mark.parametrize(
    ("flags", "part_models", "moments"),
    [
        ([], AveragingConfig().part_models, AveragingConfig().average_optimizer),
        (["--part-models"], True, True),
        (["--no-part-models"], False, True),
        (["--part-models", "--local-optimizer-state"], True, False),
    ],
)
def test_flags_fill_the_config(flags, part_models, moments):
    """``--part-models`` / ``--no-part-models`` and ``--local-optimizer-state`` reach the
    engine's config; no flag keeps the config's defaults."""
    from shoal.cli import build_parser
    from shoal.cli.train_options import config_from_args

    argv = ["train", "--store", "s", "--engine", "averaging", "--nproc", "2", *flags]
    cfg = config_from_args(build_parser(argv).parse_args(argv))
    assert (cfg.engine.part_models, cfg.engine.average_optimizer) == (part_models, moments)
