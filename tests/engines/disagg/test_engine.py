"""disagg engine (Armada): batch workers feeding compute workers through grouped, cached
batches; real process groups through the shared helper."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shoal.distributed import DistContext
from shoal.engines.config import read_config
from shoal.engines.disagg.config import DisaggConfig
from shoal.engines.disagg.engine import DisaggEngine, cache_rows
from shoal.engines.disagg.msg import group_union, pack_batch, unpack
from shoal.graph.blocks import Block, MiniBatch
from shoal.store import Store
from tests.distributed.helpers import WorldFailed, run_world

CFG = dict(
    model="sage",
    fanouts=(3, 2),
    batch_size=4,
    hidden=8,
    lr=0.05,
    dropout=0.0,
    seed=3,
    progress=False,
)


def _mb(n_id, num_seeds):
    blk = Block(torch.tensor([[1, 2], [0, 0]]), 3, 1, torch.tensor([0, 2]), torch.ones(3))
    return MiniBatch(n_id=np.asarray(n_id), blocks=[blk], num_seeds=num_seeds)


@pytest.mark.parametrize("grouping", [True, False])
def test_a_global_batch_survives_packing(grouping):
    mbs = [_mb([7, 3, 9], 1), _mb([3, 8, 7], 1)]
    ids, pos = group_union(mbs, grouping)
    assert [ids[p].tolist() for p in pos] == [[7, 3, 9], [3, 8, 7]]
    assert len(ids) == (4 if grouping else 6)  # the union is sent once
    sent = np.arange(len(ids))[::2]
    rows = np.random.default_rng(0).random((len(sent), 5)).astype(np.float32)
    gb = unpack(*pack_batch(4, mbs, ids, pos, sent, rows))
    assert gb.ack == 4 and np.array_equal(gb.ids, ids) and np.array_equal(gb.sent, sent)
    assert np.array_equal(gb.rows, rows)
    for k, mb in enumerate(mbs):
        p, blocks = gb.blocks(k, np.arange(20, dtype=np.float32))
        assert np.array_equal(gb.ids[p], mb.n_id) and gb.minibatches[k][0] == 1
        assert torch.equal(blocks[0].edge_index, mb.blocks[0].edge_index)
        assert torch.equal(blocks[0].rowptr, mb.blocks[0].rowptr)
        assert blocks[0].deg_src.tolist() == mb.n_id[:3].astype(np.float32).tolist()


def test_a_link_batch_survives_packing():
    """A link batch's steps (positives, negatives) travel after the blocks; an empty step
    (a worker's padding) too."""
    mbs = [_mb([3, 7, 9], 2), _mb([8], 1)]
    ids, pos = group_union(mbs, True)
    links = [
        (np.array([[3, 7]]), np.array([[9, 8, 3]])),
        (np.zeros((0, 2), np.int64), np.zeros((0, 0), np.int64)),
    ]
    rows = np.zeros((0, 5), np.float32)
    tensors = pack_batch(1, mbs, ids, pos, np.zeros(0, np.int64), rows, None, links)
    gb = unpack(*tensors, link=True)
    assert [(a.tolist(), b.shape) for a, b in gb.links] == [([[3, 7]], (1, 3)), ([], (0, 0))]
    assert np.array_equal(gb.links[0][1], links[0][1])
    assert np.array_equal(gb.ids[gb.minibatches[0][1]], [3, 7, 9])
    assert unpack(*pack_batch(1, mbs, ids, pos, np.zeros(0, np.int64), rows)).links is None


def test_cache_size_spellings():
    assert cache_rows(100, 1000, 16) == 100
    assert cache_rows("5%", 1000, 16) == 50
    assert cache_rows("1KiB", 1000, 16) == 64
    assert cache_rows("0", 1000, 16) == 0
    with pytest.raises(ValueError):
        DisaggConfig(disagg_cache="lots")


def _epochs(rank, world, store, extra, epochs):
    """Train ``epochs`` epochs with tracing: compute workers check every row they use against
    the store and report the seeds they trained; batch workers report the parts they loaded."""
    cfg = read_config({**CFG, "engine": "disagg", **extra})
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    eng = DisaggEngine(Store.open(store), cfg, ctx)
    s = Store.open(store)
    out = {"seeds": [], "loads": [], "records": [], "redundant": 0, "hits": 0}
    if not eng.is_batch:
        consume = eng.cache.consume

        def checked(ids, sent, rows):
            x, u = consume(ids, sent, rows)
            assert np.array_equal(x, s.features(ids)), "a row differs from the store's"
            return x, u

        eng.cache.consume = checked
        step = eng._replica_inputs

        def traced(gb, g, x_all):  # every replica's inputs, in either replica_exec mode
            pos = gb.minibatches[g][1]
            out["seeds"][-1].extend(gb.ids[pos[: gb.minibatches[g][0]]].tolist())
            return step(gb, g, x_all)

        eng._replica_inputs = traced
    for e in range(epochs):
        out["seeds"].append([])
        rec = eng.train_epoch(e)
        out["records"].append(rec)
        if eng.is_batch:
            out["loads"].append(list(eng.last["parts_loaded"]))
        else:
            out["redundant"] += int(eng.last.get("redundant", 0))
    out["acc"] = eng.evaluate(("val", "test"))
    out["weights"] = torch.cat([p.detach().reshape(-1) for p in eng.model.parameters()]).numpy()
    return out


@pytest.mark.parametrize(
    "world, parts, extra",
    [
        (2, 2, {}),
        (3, 3, {"batch_workers": 2}),
        (3, 4, {"batch_workers": 2, "disagg_cache": 0, "resident_parts": 1}),
        (4, 4, {"batch_workers": 2, "replicas": 2, "replicate_top": "25%"}),
        (4, 4, {"batch_workers": 3, "local_sampling": True, "resident_parts": 1}),
        (4, 2, {"batch_workers": 2, "grouping": False, "disagg_cache": 10}),
    ],
)
def test_every_seed_once_every_part_once_rows_equal_the_store(
    make_graph, make_store, world, parts, extra
):
    from tests.engines.conftest import community_graph

    g = community_graph(make_graph)
    store = str(make_store(parts=parts, graph=g))
    res = run_world(_epochs, world, store, extra, 2, timeout=240)
    s = Store.open(store)
    train = np.sort(np.concatenate([p.core_ids[np.asarray(p.train_mask, bool)] for p in s.parts()]))
    b = extra.get("batch_workers", (world + 1) // 2)
    for e in range(2):
        seeds = sorted(x for r in res[: world - b] for x in r["seeds"][e])
        assert seeds == train.tolist()  # every training node exactly once per epoch
        loads = sorted(p for r in res[world - b :] for p in r["loads"][e])
        assert loads == list(range(parts))  # every part read once per epoch
    assert all(r["records"][-1]["loss"] == res[0]["records"][-1]["loss"] for r in res)
    d = res[0]["records"][-1]["disagg"]
    if extra.get("disagg_cache", "5%") == 0:
        assert d["rows_omitted"] == 0
    assert d["unavailable"] == 0  # nothing dropped: swapped-out parts are read from the store
    if extra.get("resident_parts") and not extra.get("local_sampling"):
        assert d["disk_sampled"] > 0
    if extra.get("replicate_top"):  # rows checked against the store above
        assert d["replica_sampled"] > 0 and d["replica_rows"] > 0
        assert d["replica_saved_bytes"] > 0
    if b == world - b:  # one batch worker per compute worker: a cached row is never resent
        assert all(r["redundant"] == 0 for r in res[: world - b])
    assert all(r["acc"] == res[0]["acc"] for r in res)


def test_disagg_learns_the_communities(make_graph, make_store):
    from tests.engines.conftest import community_graph

    store = str(make_store(parts=2, graph=community_graph(make_graph)))
    res = run_world(_epochs, 3, store, {"batch_workers": 2}, 15, timeout=240)
    assert res[0]["records"][-1]["train_accuracy"] > 0.85
    assert res[0]["acc"]["val"] >= 0.75


def test_one_process_is_refused(make_store):
    store = str(make_store(parts=2))
    with pytest.raises(WorldFailed, match="at least 2 processes"):
        run_world(_epochs, 1, store, {}, 1, timeout=60)


def _both_modes(rank, world, store, epochs):
    return [
        _epochs(rank, world, store, {"batch_workers": 2, "replicas": 3, "replica_exec": m}, epochs)
        for m in ("sequential", "threads")
    ]


def test_parallel_replicas_train_as_sequential_ones(make_graph, make_store):
    """G = 3 replicas in threads: the same seeds, losses and weights (within float
    tolerance) as one after the other."""
    from tests.engines.conftest import community_graph

    store = str(make_store(parts=4, graph=community_graph(make_graph)))
    res = run_world(_both_modes, 3, store, 2, timeout=240)
    seq, par = res[0]
    assert [sorted(e) for e in seq["seeds"]] == [sorted(e) for e in par["seeds"]]
    for a, b in zip(seq["records"], par["records"]):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5, abs=1e-6)
    assert np.allclose(seq["weights"], par["weights"], rtol=1e-4, atol=1e-6)
    assert not np.allclose(seq["weights"], res[1][0]["weights"] * 0)  # it trained
    assert all(np.array_equal(r[1]["weights"], par["weights"]) for r in res)


def _link_epochs(rank, world, store, extra, epochs):
    """Train the link task ``epochs`` epochs; compute workers check that no replica's blocks
    use its step's positive edges (or their reverses) and count the positives trained."""
    cfg = read_config({**CFG, "engine": "disagg", "task": "link", "batch_size": 16, **extra})
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    eng = DisaggEngine(Store.open(store), cfg, ctx)
    out = {"positives": [], "edges": 0, "records": []}
    if not eng.is_batch:
        link_of = eng._link_of

        def checked(gb, g):
            st = link_of(gb, g)
            bad = {tuple(e) for e in st.exclude.tolist()}
            n_id = gb.ids[gb.minibatches[g][1]]
            for b in gb.blocks(g, eng.tables.degrees)[1]:
                src, dst = b.edge_index.numpy()
                used = set(zip(n_id[src].tolist(), n_id[dst].tolist()))
                assert not used & bad, "a block uses its batch's positive edge"
                out["edges"] += len(used)
            out["positives"][-1].append(len(st))  # (list.append: safe from replica threads)
            return st

        eng._link_of = checked
    for e in range(epochs):
        out["positives"].append([])
        out["records"].append(eng.train_epoch(e))
    out["total"] = eng.link.total_positives
    out["mrr"] = eng.evaluate(("val", "test"))
    out["weights"] = torch.cat([p.detach().reshape(-1) for p in eng.model.parameters()]).numpy()
    return out


@pytest.mark.parametrize(
    "world, parts, extra",
    [
        (3, 4, {"batch_workers": 2, "resident_parts": 1, "replicate_top": "10%", "replicas": 2}),
        (4, 4, {"batch_workers": 2, "replicas": 2, "replica_exec": "threads"}),
    ],
)
def test_link_batches_exclude_their_positives_and_cover_every_one(
    make_graph, make_store, tmp_path, world, parts, extra
):
    """The link task (``--task link``): every positive trained once per epoch by the compute
    workers, none of them in its own batch's blocks (resident, swapped-out and replicated
    nodes alike); one model and one MRR on every rank."""
    from shoal.data.linksplit import EdgeSplitConfig, split_edges
    from tests.engines.conftest import community_graph

    g = community_graph(make_graph, n=60)
    split = split_edges(g, tmp_path / "split", EdgeSplitConfig(val=0.15, test=0.15, seed=1))
    store = str(make_store(parts=parts, graph=split))
    res = run_world(_link_epochs, world, store, extra, 2, timeout=300)
    compute = res[: world - extra["batch_workers"]]
    for e in range(2):
        assert sum(sum(r["positives"][e]) for r in compute) == res[0]["total"] > 0
    assert all(r["edges"] > 0 for r in compute)
    assert all(np.array_equal(r["weights"], res[0]["weights"]) for r in res)
    assert all(r["mrr"] == res[0]["mrr"] for r in res) and 0 < res[0]["mrr"]["test"] <= 1
    d = res[0]["records"][-1]["disagg"]
    assert d["unavailable"] == 0
    if extra.get("resident_parts"):
        assert d["disk_sampled"] > 0 and d["replica_sampled"] > 0


def test_link_refuses_local_sampling(make_graph, make_store, tmp_path):
    from shoal.data.linksplit import EdgeSplitConfig, split_edges
    from tests.engines.conftest import community_graph

    g = community_graph(make_graph, n=60)
    split = split_edges(g, tmp_path / "split", EdgeSplitConfig(val=0.15, test=0.15, seed=1))
    store = str(make_store(parts=2, graph=split))
    with pytest.raises(WorldFailed, match="local-sampling"):
        run_world(_link_epochs, 2, store, {"local_sampling": True}, 1, timeout=120)
