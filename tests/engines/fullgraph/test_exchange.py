"""fullgraph engine (NeutronStar): the master-mirror exchange pairs every send with a receive.

A rank that pulls no rows at a level (it caches every remote dependency there, or a directed
graph gives it none) still receives the gradients of its rows that its peers mirror; the ring
time slots and the overlap of compute with the exchange do not change the training."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from shoal.distributed import DistContext
from shoal.engines.config import read_config
from shoal.engines.fullgraph.depcomm import ring_peers
from shoal.engines.fullgraph.engine import FullGraphEngine
from shoal.store import Store
from tests.distributed.helpers import run_world
from tests.engines.fullgraph.test_engine import CFG, _whole_graph

EPOCHS = 4


def directed_graph(make_graph, n: int = 60, seed: int = 3, closed: np.ndarray | None = None):
    """``n`` nodes in two communities, directed edges only (an edge ``u -> v`` rarely has its
    reverse); 20 train / 10 val / the rest test. ``closed``: nodes with no in-edge from
    outside that set."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    edges = [
        (u, v)
        for u in range(n)
        for v in range(n)
        if u != v and rng.random() < (0.12 if y[u] == y[v] else 0.02)
    ]
    if closed is not None:
        inside = np.zeros(n, bool)
        inside[closed] = True
        edges = [(u, v) for u, v in edges if not inside[v] or inside[u]]
    x = np.eye(2, dtype=np.float32)[y] + rng.normal(0, 0.8, (n, 2)).astype(np.float32)
    x = np.hstack([x, rng.normal(0, 1, (n, 2)).astype(np.float32)])
    idx = rng.permutation(n)
    return make_graph(
        edges,
        n,
        directed=True,
        x=x,
        y=y,
        train=np.sort(idx[:20]),
        val=np.sort(idx[20:30]),
        test=np.sort(idx[30:]),
    )


def _train(rank: int, world: int, store: str, per_rank: list[dict], epochs: int):
    """``epochs`` engine epochs with this rank's options ``per_rank[rank]``: the losses, the
    final weights, the test accuracy and how many rows this rank pulls per level."""
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    tc = read_config({**CFG, "engine": "fullgraph", "epochs": epochs, **per_rank[rank]})
    eng = FullGraphEngine(Store.open(store), tc, ctx)
    losses = [eng.train_epoch(e)["loss"] for e in range(epochs)]
    acc = eng.evaluate(("test",))["test"]
    return (
        losses,
        [p.detach().clone() for p in eng.model.parameters()],
        acc,
        [ex.num_recv for ex in eng.exchanges],
        [int(sum(len(s) for s in ex.send_idx)) for ex in eng.exchanges],
    )


def _single(store: str, extra: dict, epochs: int):
    """Single-process full-graph training: losses, weights and test accuracy."""
    tc = read_config({**CFG, "engine": "fullgraph", "epochs": epochs, **extra})
    blk, x, train, y, model = _whole_graph(store, tc)
    opt = torch.optim.Adam(model.parameters(), lr=tc.optim.lr, weight_decay=tc.optim.weight_decay)
    losses = []
    for _ in range(epochs):
        opt.zero_grad()
        loss = F.cross_entropy(model(x, [blk] * tc.num_layers)[train], y[train])
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    model.eval()
    s = Store.open(store)
    mask = np.zeros(s.num_nodes, bool)
    for p in s.parts():
        mask[p.start : p.stop] = np.asarray(p.test_mask)
    test = torch.from_numpy(np.flatnonzero(mask))
    with torch.no_grad():
        pred = model(x, [blk] * tc.num_layers).argmax(1)
    acc = float((pred[test] == y[test]).float().mean())
    return losses, [p.detach().clone() for p in model.parameters()], acc


def _check(res, ref) -> None:
    ref_losses, ref_weights, ref_acc = ref
    for losses, weights, acc, _, _ in res:
        assert losses == pytest.approx(ref_losses, rel=1e-4)
        for a, b in zip(weights, ref_weights, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
        assert acc == pytest.approx(ref_acc, abs=1e-6)


# rank 0 caches every remote dependency (Eq. 1-2 with T_v = T_e = 0: caching is free; no
# memory limit to speak of), ranks 1 and 2 cache none (S = 0): rank 0 pulls no rows at any
# level while the others mirror its rows and send their gradients back to it
ASYMMETRIC = [
    {"deps": "hybrid", "dep_costs": (0.0, 0.0, 1.0), "dep_memory": "1GiB"},
    {"deps": "hybrid", "dep_costs": (0.0, 0.0, 1.0), "dep_memory": 0},
    {"deps": "hybrid", "dep_costs": (0.0, 0.0, 1.0), "dep_memory": 0},
]


@pytest.mark.parametrize("model", ["sage", "gcn"])
def test_directed_graph_with_one_rank_caching_everything_trains_exactly(
    make_graph, make_store, model
):
    """3 ranks on a directed graph, the dependency cache limit cutting on ranks 1 and 2 only:
    the run finishes and equals single-process full-graph training (losses of every epoch,
    final weights, test accuracy)."""
    g = directed_graph(make_graph)
    store = str(make_store(parts=3, graph=g, halo_features=False))
    per_rank = [{"model": model, **o} for o in ASYMMETRIC]
    res = run_world(_train, 3, store, per_rank, EPOCHS, timeout=90)
    # the case the test is about: rank 0 pulls nothing, yet its rows are mirrored elsewhere
    assert res[0][3] == [0, 0] and res[0][4][1] > 0
    assert all(r[3][1] > 0 for r in res[1:])
    _check(res, _single(store, {"model": model}, EPOCHS))


def test_directed_graph_comm_only_trains_exactly(make_graph, make_store):
    """DepComm on every rank of a directed graph where rank 0's nodes have no remote
    in-neighbours (so it pulls nothing) but are in-neighbours of the other ranks' nodes."""
    node_part = np.arange(60) % 3
    g = directed_graph(make_graph, closed=np.flatnonzero(node_part == 0))
    store = str(make_store(node_part, graph=g, halo_features=False))
    per_rank = [{"model": "sage", "deps": "comm"}] * 3
    res = run_world(_train, 3, store, per_rank, EPOCHS, timeout=90)
    assert res[0][3] == [0, 0] and res[0][4][1] > 0
    _check(res, _single(store, {"model": "sage"}, EPOCHS))


@pytest.mark.parametrize("world", [2, 3, 4])
def test_ring_slots_pair_every_send_with_a_receive(world):
    """Slot ``s``: rank ``r`` sends to ``(r + s) mod p`` and receives from ``(r - s) mod p``,
    so the peer it sends to receives from it in the same slot; every peer once."""
    for ring in (True, False):
        slots = [ring_peers(r, world, ring) for r in range(world)]
        for r in range(world):
            assert sorted(t for t, _ in slots[r]) == [q for q in range(world) if q != r]
            assert sorted(f for _, f in slots[r]) == [q for q in range(world) if q != r]
        if ring:
            for r in range(world):
                for s, (to, frm) in enumerate(slots[r]):
                    assert to == (r + s + 1) % world and frm == (r - s - 1) % world
                    assert slots[to][s][1] == r


def _train_each(rank: int, world: int, store: str, base: list[dict], variants: list[dict]):
    """:func:`_train` for each of ``variants`` (options over this rank's ``base``), one
    process group; and the stages of each variant's layer-2 groups on this rank."""
    out = []
    for v in variants:
        per_rank = [{**b, **v} for b in base]
        res = _train(rank, world, store, per_rank, EPOCHS)
        out.append(res)
    return out


VARIANTS = [
    {"ring": True, "overlap": True},
    {"ring": False, "overlap": True},
    {"ring": True, "overlap": False},
    {"ring": False, "overlap": False},
]


@pytest.mark.parametrize("world", [2, 3])
def test_ring_and_overlap_do_not_change_training(make_graph, make_store, world):
    """Ring slots on/off and overlap on/off train the same model (losses, weights, test
    accuracy of single-process full-graph training), with the asymmetric cache limits."""
    g = directed_graph(make_graph)
    store = str(make_store(parts=world, graph=g, halo_features=False))
    base = [{"model": "sage", **o} for o in ASYMMETRIC[:world]]
    res = run_world(_train_each, world, store, base, VARIANTS, timeout=120)
    ref = _single(store, {"model": "sage"}, EPOCHS)
    for i in range(len(VARIANTS)):
        _check([r[i] for r in res], ref)


def _stages(rank: int, world: int, store: str, variants: list[dict]):
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    out = []
    for v in variants:
        tc = read_config({**CFG, "engine": "fullgraph", **v})
        eng = FullGraphEngine(Store.open(store), tc, ctx)
        out.append([sorted({grp.stage for grp in groups}) for _, groups in eng.blocks])
    return out


def test_overlap_groups_targets_by_the_slot_that_completes_them(make_graph, make_store):
    """With overlap, DepComm on 3 ranks splits a layer's targets into the ones with every
    in-neighbour here (stage 0, where there are some) and one group per ring slot (1, 2);
    ring off: 0 and 1 (one slot); overlap off: one group after the last slot."""
    g = directed_graph(make_graph)
    store = str(make_store(parts=3, graph=g, halo_features=False))
    base = {"model": "sage", "deps": "comm"}
    variants = [base, {**base, "ring": False}, {**base, "overlap": False}]
    ring, no_ring, no_overlap = zip(*run_world(_stages, 3, store, variants, timeout=90))
    assert all(set(s) in ({1, 2}, {0, 1, 2}) for r in ring for s in r)
    assert any(0 in s for r in ring for s in r)
    assert all(set(s) in ({1}, {0, 1}) for r in no_ring for s in r)
    assert all(s == [2] for r in no_overlap for s in r)
