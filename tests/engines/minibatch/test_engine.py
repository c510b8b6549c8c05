"""minibatch engine: two-level split, equal batch counts, distributed sampling, end to end."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.distributed import DistContext
from shoal.engines.minibatch.engine import MinibatchEngine, split_training_nodes
from shoal.sample import NeighborSampler
from shoal.store import Store
from shoal.training import TrainConfig, TrainData, Trainer, model_from_config
from tests.distributed.helpers import run_world
from tests.engines.conftest import community_graph
from tests.tolerance import accuracy_bounds, assert_within


def test_two_level_split_keeps_own_nodes_and_equalises():
    owned = [np.arange(0, 10), np.arange(10, 11), np.arange(11, 15)]
    out = split_training_nodes(owned)
    assert [len(a) for a in out] == [5, 5, 5]
    assert set(out[0]) <= set(owned[0])  # the richest rank keeps only its own
    assert set(owned[1]) <= set(out[1]) and set(owned[2]) <= set(out[2])
    assert sorted(np.concatenate(out).tolist()) == list(range(15))  # each node exactly once
    # uneven totals: shares differ by at most one; empty input
    out = split_training_nodes([np.arange(7), np.empty(0, np.int64)])
    assert [len(a) for a in out] == [4, 3]
    assert [len(a) for a in split_training_nodes([np.empty(0, np.int64)] * 2)] == [0, 0]


def _batch_counts(rank: int, world: int, store: str) -> tuple[int, list[int], list[int]]:
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    cfg = TrainConfig.from_options(batch_size=3, fanouts=(2, 2), hidden=4, epochs=1)
    eng = MinibatchEngine(Store.open(store), cfg, ctx)
    sizes = [len(b) for b in eng.epoch_batches(0)]
    return eng.num_batches, sizes, sorted(eng.seeds.tolist())


def test_equal_batch_counts_per_rank(make_graph, make_store):
    world = 2
    # (almost) every training node in part 0: the split must still give every rank the same
    # number of batches and each training node to exactly one rank
    g = community_graph(make_graph)
    node_part = np.zeros(g.num_nodes, dtype=np.int32)
    node_part[-world + 1 :] = np.arange(1, world)  # parts 1.. hold one node each
    store = make_store(node_part, graph=g)
    out = run_world(_batch_counts, world, str(store))
    num_batches = out[0][0]
    assert num_batches == int(np.ceil(np.ceil(16 / world) / 3))
    for count, sizes, _ in out:
        assert count == num_batches and len(sizes) == num_batches
    all_seeds = sorted(x for _, _, seeds in out for x in seeds)
    assert len(all_seeds) == len(set(all_seeds)) == 16
    shares = [len(seeds) for _, _, seeds in out]
    assert max(shares) - min(shares) <= 1


def _fit(rank: int, world: int, store: str, engine: str, epochs: int, dropout: float = 0.0):
    from shoal.distributed import process_group  # noqa: F401  (the helper already opened the group)
    from shoal.engines import get_engine

    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    tc = TrainConfig.from_options(
        model="sage",
        fanouts=(3, 3),
        batch_size=4,
        hidden=8,
        epochs=epochs,
        lr=0.05,
        dropout=dropout,
        seed=3,
        progress=False,
    )
    r = get_engine(engine)(Store.open(store), tc, ctx).fit()
    return r.to_json()


@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_one_process_one_part_equals_single_process_trainer(make_graph, make_store, dropout):
    """Batch for batch, dropout masks included (keyed by seed, epoch, step and node)."""
    g = community_graph(make_graph)
    store = make_store(np.zeros(g.num_nodes, np.int32), graph=g)
    got = run_world(_fit, 1, str(store), "minibatch", 6, dropout)[0]
    tc = TrainConfig.from_options(
        model="sage",
        fanouts=(3, 3),
        batch_size=4,
        hidden=8,
        epochs=6,
        lr=0.05,
        dropout=dropout,
        seed=3,
        progress=False,
    )
    s = Store.open(store)
    assert (np.asarray(s.node_map) == np.arange(g.num_nodes)).all()
    data = TrainData.from_graph_dir(g)
    tr = Trainer(tc, data)
    ref = tr.fit()
    # distributed and single-process evaluation sum in other orders: the same predictions
    # away from float ties
    bounds = accuracy_bounds(tr.model, data, ("val", "test"), normalize=tc.model.normalize_features)
    assert_within(got["test_accuracy"], bounds["test"], "test")
    assert_within(got["val_accuracy"], bounds["val"], "val", max_width=0.15)
    assert [h["loss"] for h in got["history"]] == pytest.approx(
        [h["loss"] for h in ref.history], rel=1e-5
    )


def _sample_and_fit(rank: int, world: int, store: str, seeds: list[int]):
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    cfg = TrainConfig.from_options(batch_size=4, fanouts=(-1, -1), hidden=4, epochs=1)
    eng = MinibatchEngine(Store.open(store), cfg, ctx)
    mb = eng.sampler.sample(np.asarray(seeds[rank::world]), 7)
    edges = []
    for blk in mb.blocks:
        src, dst = blk.edge_index.numpy()
        edges.append(sorted(zip(mb.n_id[src].tolist(), mb.n_id[dst].tolist())))
    return mb.n_id.tolist(), edges, eng.stats.as_dict(), _fit(rank, world, store, "minibatch", 15)


def test_two_processes_sample_like_one_and_learn(make_store):
    """World of 2 on 4 parts: distributed full-neighbourhood sampling returns exactly the
    single-process sampler's blocks; training reaches a good accuracy; comm is counted."""
    store = make_store(parts=4)
    s = Store.open(store)
    seeds = list(range(0, 48, 5))
    res = run_world(_sample_and_fit, 2, str(store), seeds)
    # reference: the single-process sampler on the whole graph in new ids
    indptr, indices = [0], []
    for p in s.parts():
        for r in range(p.num_core):
            indices += p.local_to_global(p.in_neighbors(r)).tolist()
            indptr.append(len(indices))
    ref = NeighborSampler(np.array(indptr), np.array(indices), (-1, -1))
    messages = 0
    for rank, (n_id, edges, stats, _) in enumerate(res):
        mb = ref.sample(np.asarray(seeds[rank::2]), 7)
        assert n_id == mb.n_id.tolist()
        for blk, got in zip(mb.blocks, edges):
            src, dst = blk.edge_index.numpy()
            assert got == sorted(zip(mb.n_id[src].tolist(), mb.n_id[dst].tolist()))
        messages += stats["messages_sent"]
    assert messages > 0  # some frontier nodes were sampled by their owner
    out = [r[3] for r in res]
    assert out[0]["test_accuracy"] == out[1]["test_accuracy"]
    assert out[0]["test_accuracy"] >= 0.75  # two separable communities
    comm = out[0]["comm_per_epoch"]
    assert comm["bytes_sent"] > 0 and comm["messages_sent"] > 0
    assert 0 < comm["remote_feature_fraction"] < 1
    assert comm["allreduce_bytes"] > 0


def _full_batch_config() -> TrainConfig:
    return TrainConfig.from_options(
        model="sage",
        fanouts=(-1, -1),
        batch_size=64,  # every rank's share in one batch
        hidden=8,
        epochs=8,
        lr=0.05,
        dropout=0.0,
        seed=5,
        eval_every=2,
        progress=False,
    )


def _full_batch_fit(rank: int, world: int, store: str):
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    eng = MinibatchEngine(Store.open(store), _full_batch_config(), ctx)
    return eng.fit().to_json(), eng.model.state_dict()


def test_sync_sgd_equals_one_process_large_batch(make_graph, make_store):
    """Without dropout and with full neighbourhoods, 2 ranks with equal halves of the training
    nodes all-reduce exactly the gradient 1 rank computes on all of them: the loss curve and
    the accuracy must not depend on the world size (this catches any wrong remote sample,
    feature row or label)."""
    g = community_graph(make_graph)
    store = str(make_store(parts=2, graph=g))
    one, weights = run_world(_full_batch_fit, 1, store)[0]
    two = [r for r, _ in run_world(_full_batch_fit, 2, store)]
    assert two[0]["test_accuracy"] == two[1]["test_accuracy"]  # all-reduced counts
    assert [h["loss"] for h in two[0]["history"]] == pytest.approx(
        [h["loss"] for h in one["history"]], rel=1e-4
    )
    # the gradients are summed in another order: the same predictions away from float ties
    model = model_from_config(_full_batch_config(), in_dim=4, out_dim=2)
    model.load_state_dict(weights)
    data = TrainData.from_graph_dir(g)
    bounds = accuracy_bounds(model, data, ("val", "test"))
    assert two[0]["best_epoch"] == one["best_epoch"]
    assert_within(two[0]["test_accuracy"], bounds["test"], "test")
    assert_within(two[0]["val_accuracy"], bounds["val"], "val", max_width=0.15)


def _sampled_edges(rank: int, world: int, store: str, fanouts: tuple[int, ...]):
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    cfg = TrainConfig.from_options(batch_size=4, fanouts=fanouts, hidden=4, epochs=1)
    eng = MinibatchEngine(Store.open(store), cfg, ctx)
    seeds = np.arange(rank, 48, 3 * world)
    out = []
    for bseed in range(5):
        mb = eng.sampler.sample(seeds, bseed)
        for blk in mb.blocks:
            src, dst = blk.edge_index.numpy()
            out.append((mb.n_id[src].tolist(), mb.n_id[dst].tolist(), mb.n_id[: blk.num_dst]))
    return out


@pytest.mark.parametrize("world", [2, 4])
def test_distributed_sampled_edges_exist_and_respect_fanouts(make_store, world):
    """Sampled (not full) neighbourhoods across ranks: every picked edge is a real in-edge
    of its destination, no neighbour is picked twice, and each destination gets
    min(fanout, in-degree) neighbours."""
    store = make_store(parts=4)
    s = Store.open(store)
    nbrs = {}
    for p in s.parts():
        for r in range(p.num_core):
            nbrs[p.start + r] = p.local_to_global(p.in_neighbors(r)).tolist()
    fanouts = (3, 2)
    for blocks in run_world(_sampled_edges, world, str(store), fanouts):
        for i, (src, dst, dst_ids) in enumerate(blocks):
            fanout = fanouts[::-1][i % 2]  # blocks are ordered outermost hop first
            per_dst: dict[int, list[int]] = {}
            for u, v in zip(src, dst):
                per_dst.setdefault(v, []).append(u)
            for v, us in per_dst.items():
                assert set(us) <= set(nbrs[v]), (v, us)
                assert len(us) == len(set(us))
            assert set(per_dst) <= set(dst_ids.tolist())
            for v in dst_ids.tolist():
                assert len(per_dst.get(v, [])) == min(fanout, len(nbrs[v]))
