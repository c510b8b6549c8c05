"""The averaging engine on a typed store (node types, relations; issue 53): the same engine
class as on an untyped store, its parts sampled per relation, every type's rows in one source
under the budgeted store, the blocks with their original ids."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shoal.distributed import DistContext
from shoal.engines import get_engine
from shoal.engines.averaging.config import AveragingConfig
from shoal.engines.averaging.engine import AveragingEngine
from shoal.errors import ShoalInputError
from shoal.store import Store
from shoal.training import TrainConfig
from shoal.training.data import TrainData
from shoal.training.trainer import Trainer
from tests.distributed.helpers import run_world


def _cfg(**kw) -> TrainConfig:
    opts = dict(model="rgcn", fanouts=(5, 5), hidden=16, batch_size=256, epochs=3, lr=0.01)
    return TrainConfig.from_options(**{**opts, "threads": 1, "progress": False, "seed": 2, **kw})


def _fit(rank: int, world: int, store: str, kw: dict, hops: int | str = 1) -> dict:
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    cfg = _cfg(engine=AveragingConfig(halo_hops=hops), **kw)
    eng = get_engine("averaging", typed=True)(Store.open(store), cfg, ctx)
    return eng.fit().to_json()


def test_the_typed_engine_is_the_engine():
    assert get_engine("averaging", typed=True) is AveragingEngine
    assert AveragingEngine.spec().typed


def test_one_process_on_one_part_trains_as_the_single_process_trainer(typed):
    """Same shuffling, batch seeds, per-relation draws, initial weights and keyed dropout
    masks: the same losses."""
    g, stores = typed
    ref = Trainer(_cfg(), TrainData.from_graph_dir(g)).fit().to_json()
    (got,) = run_world(_fit, 1, stores[1], {})
    assert [e["loss"] for e in got["history"]] == pytest.approx(
        [e["loss"] for e in ref["history"]], rel=1e-5
    )
    # both exact (layer by layer, the shared evaluation): one node may flip at a tie
    assert got["test_accuracy"] == pytest.approx(ref["test_accuracy"], abs=1.01 / 400)
    assert got["config"]["typed"]["relations"] == len(g.schema.edge_types)


def test_two_processes_on_three_parts_learn_the_relational_signal(typed):
    _, stores = typed
    out = run_world(_fit, 2, stores[3], {"epochs": 8}, timeout=300)
    assert out[0]["test_accuracy"] == out[1]["test_accuracy"]  # one result, every rank
    # 4 classes: chance 0.25, the papers' own features alone about 0.35 (tests/training)
    assert out[0]["test_accuracy"] > 0.6, out[0]["test_accuracy"]
    assert out[0]["engine"] == "averaging" and out[0]["num_parts"] == 3


def _fit_params(rank: int, world: int, store: str, part_models: bool) -> tuple:
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    cfg = _cfg(epochs=2, dropout=0.0, engine=AveragingConfig(halo_hops=1, part_models=part_models))
    eng = AveragingEngine(Store.open(store), cfg, ctx)
    for e in range(2):
        eng.train_epoch(e)
    flat = torch.cat([p.detach().reshape(-1) for p in eng.model.parameters()])
    same = all(
        torch.equal(flat, torch.cat([p.detach().reshape(-1) for p in m.parameters()]))
        for m in eng.part_models.models
    )
    return flat.tolist(), same, len(eng.part_models.models)


def test_part_models_on_one_rank_equal_one_part_per_rank(typed):
    """Three typed parts, one model each: one process training them in turn averages what
    three processes holding one part each do (no dropout). Relations absent from a part's
    batches leave weights without a gradient: the Adam states still line up."""
    _, stores = typed
    (three, _, _), _, _ = run_world(_fit_params, 3, stores[3], False, timeout=300)
    one, same, n_models = run_world(_fit_params, 1, stores[3], True, timeout=300)[0]
    assert n_models == 3 and same  # after averaging every part restarts from the mean
    assert np.allclose(one, three, atol=1e-5)


def _without(batch, rel: int):
    """``batch`` with every edge of relation ``rel`` dropped from its blocks."""
    from dataclasses import replace

    blocks = []
    for b in batch.mb.blocks:
        keep = b.edge_type != rel
        ei = b.edge_index[:, keep]
        rowptr = torch.zeros(b.num_dst + 1, dtype=b.rowptr.dtype)
        rowptr[1:] = torch.cumsum(torch.bincount(ei[1], minlength=b.num_dst), 0)
        blocks.append(replace(b, edge_index=ei, rowptr=rowptr, edge_type=b.edge_type[keep]))
    mb = replace(batch.mb, blocks=blocks)
    return replace(batch, mb=mb)


def test_a_relation_absent_from_one_part_leaves_the_averages_aligned(typed):
    """Part 1's batches lack a relation into the target type (R-GAT's module of it gets no
    gradient there, and Adam no state from its steps); the other parts' have it. Every optimizer
    holds Adam's state of every weight from the start, so the round averages the same
    tensors, and the relation's moments are the other parts' weighted by their nodes."""
    from shoal.distributed import DistConfig, process_group

    _, stores = typed
    st = Store.open(stores[3])
    schema = st.schema
    rel = next(
        r
        for r, e in enumerate(schema.edge_types)
        if e.dst == schema.target and e.src != schema.target
    )
    cfg = _cfg(
        model="rgat",  # one module per relation (R-GCN's one weight tensor always has a grad)
        epochs=1,
        dropout=0.0,
        engine=AveragingConfig(halo_hops=1, part_models=True),
    )
    with process_group(DistConfig()) as ctx:
        eng = AveragingEngine(st, cfg, ctx)
        n = len(list(eng.model.parameters()))
        assert all(len(o.state) == n for o in eng.part_models.optimizers)
        loader = eng.loaders[1]
        epoch = loader.epoch
        loader.epoch = lambda e: (_without(b, rel) for b in epoch(e))
        moments = {}
        real = eng.part_models.average

        def spy(weights, *a, **kw):  # the parts' moments as the round starts
            for i, o in enumerate(eng.part_models.optimizers):
                moments[i] = [st["exp_avg"].clone() for st in o.state.values()]
            return real(weights, *a, **kw)

        eng.part_models.average = spy
        rec = eng.train_epoch(0)
        assert rec["averaged"]
        w = np.asarray(eng.part_weights) / sum(eng.part_weights)
        got = [st["exp_avg"] for st in eng.part_models.optimizers[0].state.values()]
        # some tensors of part 1 never moved (the relation's); the mean is still aligned
        idle = [k for k, t in enumerate(moments[1]) if not t.any()]
        assert idle and any(moments[0][k].any() for k in idle)
        for k, t in enumerate(got):
            want = sum(w[i] * moments[i][k].double() for i in range(3)).float()
            assert torch.allclose(t, want, atol=1e-7), k


def _resume(rank: int, world: int, store: str, ckpt: str, epochs: int, resume: bool) -> dict:
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    cfg = _cfg(
        epochs=epochs,
        checkpoint_dir=ckpt,
        resume=resume,
        engine=AveragingConfig(halo_hops=1),
    )
    return AveragingEngine(Store.open(store), cfg, ctx).fit().to_json()


def test_a_typed_run_resumes_on_another_number_of_processes(typed, tmp_path):
    """Saved by 2 processes after 2 epochs, resumed by 1 from the saved ranks' weighted
    average (average_saved_ranks over the relational models, Adam states of every weight)."""
    _, stores = typed
    ckpt = str(tmp_path / "ckpt")
    run_world(_resume, 2, stores[3], ckpt, 2, False, timeout=300)
    (got,) = run_world(_resume, 1, stores[3], ckpt, 4, True, timeout=300)
    assert got["epochs"] == 4 and len(got["history"]) == 4
    assert got["test_accuracy"] > 0.5, got["test_accuracy"]


def test_disk_type_embeddings_are_refused(typed):
    from shoal.distributed import DistConfig, process_group

    _, stores = typed
    cfg = _cfg(type_embeddings="disk")
    with process_group(DistConfig()) as ctx, pytest.raises(ShoalInputError, match="one process"):
        AveragingEngine(Store.open(stores[1]), cfg, ctx)
