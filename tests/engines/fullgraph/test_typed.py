"""fullgraph on a typed store (issue 53): the relational models on full-graph blocks that
carry their edges' relations, their sources' types and original ids, in every ``deps`` mode."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shoal.distributed import DistContext
from shoal.engines import get_engine
from shoal.engines.fullgraph.config import FullGraphConfig
from shoal.engines.fullgraph.engine import FullGraphEngine
from shoal.store import Store
from shoal.training import TrainConfig
from shoal.training.data import TrainData
from shoal.training.trainer import Trainer
from tests.distributed.helpers import run_world


def _cfg(**kw) -> TrainConfig:
    opts = dict(model="rgcn", fanouts=(5, 5), hidden=16, batch_size=256, epochs=3, lr=0.01)
    return TrainConfig.from_options(**{**opts, "threads": 1, "progress": False, "seed": 2, **kw})


def _fit(rank: int, world: int, store: str, kw: dict) -> dict:
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    kw = dict(kw)
    opts = {k: kw.pop(k) for k in list(kw) if k in FullGraphConfig.__dataclass_fields__}
    cfg = _cfg(**kw, engine=FullGraphConfig(**opts)) if opts else _cfg(**kw)
    eng = get_engine("fullgraph", typed=True)(Store.open(store), cfg, ctx)
    return eng.fit().to_json()


def test_the_typed_engine_is_the_engine():
    assert get_engine("fullgraph", typed=True) is FullGraphEngine
    assert FullGraphEngine.spec().typed


# every neighbour, one batch holding every training node: the Trainer's full-graph step
FULL = {"fanouts": (-1, -1), "batch_size": 4096, "epochs": 4}


@pytest.mark.parametrize("model", ["rgcn", "rgat"])
def test_one_process_on_one_part_trains_as_the_trainers_full_graph_steps(typed, model):
    """One batch per epoch with every neighbour is a full-graph step: the same losses, with
    dropout keyed by (seed, epoch, layer, original node id) on both sides."""
    g, stores = typed
    kw = {**FULL, "model": model, "dropout": 0.5}
    ref = Trainer(_cfg(**kw), TrainData.from_graph_dir(g)).fit().to_json()
    assert len(ref["history"]) == 4
    (got,) = run_world(_fit, 1, stores[1], {**kw, "deps": "comm"}, timeout=300)
    assert [e["loss"] for e in got["history"]] == pytest.approx(
        [e["loss"] for e in ref["history"]], rel=1e-4
    )
    assert got["test_accuracy"] == pytest.approx(ref["test_accuracy"], abs=1.01 / 400)


def _step(rank: int, world: int, store: str, opts: dict) -> tuple:
    import torch.distributed as dist

    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    cfg = _cfg(fanouts=(-1, -1), dropout=0.0, engine=FullGraphConfig(**opts))
    eng = FullGraphEngine(Store.open(store), cfg, ctx)
    eng.model.train()
    loss = eng.loss(eng.forward())
    eng.backward(loss)
    eng.all_reduce_gradients(average=False)
    total = torch.tensor([float(loss)], dtype=torch.float64)
    if world > 1:
        dist.all_reduce(total)
    grads = [
        torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in eng.model.parameters()
    ]
    s = eng.sets
    return float(total), grads, [len(c) for c in s.cached], [len(c) for c in s.communicated]


def test_every_deps_mode_on_two_processes_gives_the_one_process_step(typed):
    """The loss and the weights' gradients of one full-graph step on 3 parts over 2 processes
    (dependencies communicated, cached, split by the probed costs, or split by given costs
    that mix the second layer's) equal one process's."""
    _, stores = typed
    ref_loss, ref_grads, _, _ = run_world(_step, 1, stores[3], {"deps": "comm"}, timeout=300)[0]
    modes = [
        {"deps": "comm"},
        {"deps": "cache"},
        {"deps": "hybrid"},
        # T_v = T_e = 1, T_c = 6: a halo node of in-degree below 5 is cached at layer 2
        {"deps": "hybrid", "dep_costs": (1.0, 1.0, 6.0)},
    ]
    for opts in modes:
        res = run_world(_step, 2, stores[3], opts, timeout=300)
        for loss, grads, cached, comm in res:
            assert loss == pytest.approx(ref_loss, rel=1e-5), opts
            for a, b in zip(grads, ref_grads, strict=True):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
            if opts["deps"] == "comm":
                assert sum(cached) == 0 and sum(comm) > 0
            if opts["deps"] == "cache":
                assert sum(cached) > 0
        if "dep_costs" in opts:  # replicated dependencies' typed blocks at layer 2
            assert any(c[1] > 0 and m[1] > 0 for _, _, c, m in res)


def test_two_processes_on_three_parts_learn_the_relational_signal(typed):
    _, stores = typed
    out = run_world(_fit, 2, stores[3], {"epochs": 8, "lr": 0.05}, timeout=600)
    assert out[0]["test_accuracy"] == out[1]["test_accuracy"]  # one result, every rank
    # 4 classes: chance 0.25, the papers' own features alone about 0.35 (tests/training)
    assert out[0]["test_accuracy"] > 0.6, out[0]["test_accuracy"]
    assert out[0]["engine"] == "fullgraph" and out[0]["num_parts"] == 3


def test_the_probe_times_typed_blocks(typed):
    """The relational models refuse untyped blocks with edges: the probe gives them types."""
    from shoal.engines.fullgraph.probe import probe_costs
    from shoal.nn.base import layer_widths
    from shoal.training import model_from_config

    _, stores = typed
    s = Store.open(stores[1])
    model = model_from_config(
        _cfg(), in_dim=int(s.feature_dim), out_dim=int(s.num_classes), rank=0, schema=s.schema
    )
    ctx = DistContext(rank=0, world_size=1, local_rank=0, backend="gloo", device=None)
    c = probe_costs(model, layer_widths(model, int(s.feature_dim)), ctx, nodes=64, schema=s.schema)
    assert c.t_v > 0 and c.t_e >= 0 and np.isinf(c.t_c)
