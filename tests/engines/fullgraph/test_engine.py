"""fullgraph engine (NeutronStar): exact full-graph loss and gradients in every mode."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch.nn import functional as F

from shoal.distributed import DistContext, NodeTables
from shoal.engines.config import read_config
from shoal.engines.fullgraph.engine import FullGraphEngine
from shoal.graph.blocks import full_graph_block
from shoal.store import Store
from shoal.training import TrainConfig, model_from_config
from tests.distributed.helpers import run_world
from tests.engines.conftest import community_graph

# features as stored (the reference reads them raw; GCN's paper preset would row-normalise)
CFG = dict(
    fanouts=(-1, -1),
    hidden=8,
    lr=0.05,
    dropout=0.0,
    seed=5,
    progress=False,
    normalize_features=False,
)


def _whole_graph(store: str, tc: TrainConfig):
    """The store's whole graph for single-process full-graph training (its numbering): one
    full block, the features, the training nodes, the labels and a freshly built model."""
    s = Store.open(store)
    parts = list(s.parts())
    n = s.num_nodes
    nbrs = [[] for _ in range(n)]
    for p in parts:
        for r in range(p.num_core):
            nbrs[p.start + r] = p.local_to_global(p.in_neighbors(r)).tolist()
    blk = full_graph_block(
        np.concatenate([[0], np.cumsum([len(x) for x in nbrs])]),
        np.array([u for x in nbrs for u in x], np.int64),
    )
    x = torch.from_numpy(np.asarray(s.features(np.arange(n)), np.float32))
    t = NodeTables(s, parts)
    train = torch.from_numpy(np.flatnonzero(t.train))
    y = torch.from_numpy(t.labels.astype(np.int64))
    model = model_from_config(tc, in_dim=int(s.feature_dim), out_dim=int(s.num_classes), rank=0)
    return blk, x, train, y, model


def _reference(store: str, tc: TrainConfig):
    """Single-process full-graph training on the whole graph: the loss and the weights'
    gradients of one step."""
    blk, x, train, y, model = _whole_graph(store, tc)
    loss = F.cross_entropy(model(x, [blk] * tc.num_layers)[train], y[train])
    loss.backward()
    return float(loss.detach()), [p.grad.clone() for p in model.parameters()]


def _step(rank: int, world: int, store: str, extra: dict):
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    tc = read_config({**CFG, "engine": "fullgraph", **extra})
    eng = FullGraphEngine(Store.open(store), tc, ctx)
    eng.model.train()
    loss = eng.loss(eng.forward())
    eng.backward(loss)
    eng.all_reduce_gradients(average=False)
    total = torch.tensor([float(loss)], dtype=torch.float64)
    if world > 1:
        dist.all_reduce(total)
    s = eng.sets
    return (
        float(total),
        [p.grad.clone() for p in eng.model.parameters()],
        [len(c) for c in s.cached],
        [len(c) for c in s.communicated],
    )


MODES = [
    {"deps": "comm"},
    {"deps": "cache"},
    # T_v = T_e = 1 and T_c = 6: a halo node whose in-degree is below 5 is cached at layer 2
    {"deps": "hybrid", "dep_costs": (1.0, 1.0, 6.0)},
]


CASES = [
    ("sage", 1, 1),
    ("sage", 2, 2),
    ("sage", 4, 2),
    ("sage", 4, 4),
    ("gcn", 2, 2),
    ("gin", 4, 4),
]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m["deps"])
@pytest.mark.parametrize("model, parts, world", CASES)
def test_one_step_equals_single_process_full_graph(
    make_graph, make_store, model, mode, parts, world
):
    g = community_graph(make_graph)
    store = str(make_store(parts=parts, graph=g, halo_features=False))
    extra = {"model": model, **mode}
    ref_loss, ref_grads = _reference(store, read_config({**CFG, "engine": "fullgraph", **extra}))
    res = run_world(_step, world, store, extra, timeout=120)
    for loss, grads, _, _ in res:
        assert loss == pytest.approx(ref_loss, rel=1e-5)
        for a, b in zip(grads, ref_grads, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    if world > 1 and mode["deps"] == "hybrid":
        # the split is mixed at layer 2 on some rank (layer 1 caches every halo node: Eq. 1
        # gives t_r = 0 there)
        assert any(c[1] > 0 and m[1] > 0 for _, _, c, m in res)
    if world > 1 and mode["deps"] == "comm":
        assert all(c == [0, 0] for _, _, c, _ in res)


def test_node_order_of_the_store_does_not_change_the_step(make_graph, make_store):
    """A store numbered by descending in-degree and one in original ID order (the default)
    give the same full-graph loss and weight gradients on 2 ranks."""
    g = community_graph(make_graph)
    got = {}
    for order in ("degree", "id"):
        store = str(make_store(parts=2, graph=g, halo_features=False, node_order=order))
        assert Store.open(store).meta["node_order"] == order
        got[order] = run_world(_step, 2, store, {"deps": "hybrid"}, timeout=120)[0]
    assert got["degree"][0] == pytest.approx(got["id"][0], rel=1e-5)
    for a, b in zip(got["degree"][1], got["id"][1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_cora_one_step_is_exact_with_a_mixed_split(tmp_path, make_store):
    from shoal.data.graphdir import GraphDir
    from shoal.data.importers import import_graph

    cora = Path(__file__).resolve().parents[3] / "src/shoal/data/datasets/cora/graph.npz"
    import_graph(cora, tmp_path / "cora")
    g = GraphDir.open(tmp_path / "cora")
    n = g.num_nodes
    store = str(make_store(np.arange(n) * 2 // n, graph=g, halo_features=False))  # two id halves
    extra = {"model": "gcn", "deps": "hybrid", "dep_costs": (1.0, 1.0, 4.0)}
    ref_loss, ref_grads = _reference(store, read_config({**CFG, "engine": "fullgraph", **extra}))
    res = run_world(_step, 2, store, extra, timeout=180)
    for loss, grads, _, _ in res:
        assert loss == pytest.approx(ref_loss, rel=1e-5)
        for a, b in zip(grads, ref_grads, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    assert any(c[1] > 0 and m[1] > 0 for _, _, c, m in res)


def _fit(rank: int, world: int, store: str, epochs: int, extra: dict):
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    tc = read_config({**CFG, "engine": "fullgraph", "epochs": epochs, **extra})
    return FullGraphEngine(Store.open(store), tc, ctx).fit().to_json()


@pytest.mark.parametrize("world, mode", [(2, "hybrid"), (3, "cache")])
def test_epochs_follow_single_process_full_graph_training(make_graph, make_store, world, mode):
    """Five epochs (Adam steps) give the single-process losses; with 3 ranks every training
    node is on rank 0 (ranks 1 and 2 have no loss of their own, only dependencies)."""
    g = community_graph(make_graph)
    node_part = np.arange(g.num_nodes) % world
    if world == 3:
        train_ids = np.load(g.path / "train_idx.npy")
        node_part[train_ids] = 0
    store = str(make_store(node_part, graph=g, halo_features=False))
    extra = {"model": "sage", "deps": mode, "dep_costs": (1.0, 1.0, 6.0)}
    tc = read_config({**CFG, "engine": "fullgraph", "epochs": 5, **extra})
    blk, x, train, y, model = _whole_graph(store, tc)
    opt = torch.optim.Adam(model.parameters(), lr=tc.optim.lr, weight_decay=tc.optim.weight_decay)
    ref = []
    for _ in range(5):
        opt.zero_grad()
        loss = F.cross_entropy(model(x, [blk, blk])[train], y[train])
        loss.backward()
        opt.step()
        ref.append(float(loss.detach()))
    res = run_world(_fit, world, store, 5, extra, timeout=180)
    for r in res:
        assert [h["loss"] for h in r["history"]] == pytest.approx(ref, rel=1e-4)
    assert len({r["test_accuracy"] for r in res}) == 1


def test_dropout_does_not_depend_on_mode_or_processes(make_graph, make_store, tmp_path):
    """With dropout on, every ``deps`` mode on 1, 2 and 3 processes and the single-process
    trainer (one full-neighbourhood batch per epoch) train the same model for a seed: the
    masks are keyed by (seed, epoch, layer, original node id), so a replica draws its owner's
    mask. The stores number nodes differently (parts in turn); the key uses original ids."""
    from shoal.training import TrainData, Trainer

    g = community_graph(make_graph)
    drop = {"model": "sage", "dropout": 0.5, "epochs": 4}
    tc = read_config({**CFG, "engine": "fullgraph", **drop, "batch_size": 64, "threads": 1})
    ref = [h["loss"] for h in Trainer(tc, TrainData.from_graph_dir(g.path)).fit().history]
    no_drop = read_config(
        {**CFG, "engine": "fullgraph", **drop, "dropout": 0.0, "batch_size": 64, "threads": 1}
    )
    plain = [h["loss"] for h in Trainer(no_drop, TrainData.from_graph_dir(g.path)).fit().history]
    assert abs(plain[-1] - ref[-1]) > 1e-3  # dropout changes the run: the check can fail
    runs = [(1, "comm"), (2, "comm"), (2, "cache"), (2, "hybrid"), (3, "hybrid")]
    for world, mode in runs:
        store = str(make_store(parts=world, graph=g, halo_features=False))
        extra = {**drop, "deps": mode, "dep_costs": (1.0, 1.0, 6.0)}
        res = run_world(_fit, world, store, drop["epochs"], extra, timeout=180)
        for r in res:
            got = [h["loss"] for h in r["history"]]
            assert got == pytest.approx(ref, rel=1e-4), (world, mode)
