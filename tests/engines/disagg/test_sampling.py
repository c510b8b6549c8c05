"""The batch workers' sampler (issue 37): swapped-out parts sampled from the store with the
draws a resident part gives, and the replicated high-degree nodes (Armada Sec. 3 and 5)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch.distributed as dist

from shoal.distributed.comm import CommStats
from shoal.engines.disagg.bucketparts import ResidentParts
from shoal.engines.disagg.config import DisaggConfig
from shoal.engines.disagg.sampling import BatchSampler, Replica, replica_count
from shoal.store import Store
from tests.distributed.helpers import run_world


def _graph(make_graph, n: int = 60, seed: int = 1):
    """A skewed random graph: a few hubs get most in- and out-edges."""
    rng = np.random.default_rng(seed)
    w = 1.0 / np.arange(1, n + 1) ** 1.2
    w /= w.sum()
    src = rng.choice(n, 900, p=w)
    dst = rng.integers(0, n, 900)
    dst2 = rng.choice(n, 300, p=w)
    src2 = rng.integers(0, n, 300)
    e = np.stack([np.concatenate([src, src2]), np.concatenate([dst, dst2])], 1)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    return make_graph(e, n, x=x, y=np.arange(n) % 3, train=np.arange(n) % 2 == 0)


def _sampler(store: Store, parts, part_to_rank, rank, world, *, replica=None, swapped="read"):
    return BatchSampler(
        store=store,
        replica=replica,
        swapped=swapped,
        parts=parts,
        part_offsets=np.asarray(store.part_offsets, np.int64),
        part_to_rank=np.asarray(part_to_rank, np.int64),
        rank=rank,
        world_size=world,
        fanouts=(3, 2, 2),
        degrees=_degrees(store),
        stats=CommStats(),
        group=None,
    )


def _degrees(store: Store) -> np.ndarray:
    return np.concatenate([np.diff(np.asarray(p.indptr)) for p in store.parts()]).astype(np.float32)


def _loaded(store: Store, which) -> list:
    res = ResidentParts(store)
    for j in which:
        res.load(j)
    return list(res.parts.values())


def _nbrs(s: Store) -> dict[int, Counter]:
    """Every node's in-neighbours (global ids, a multiset), from the store parts."""
    out = {}
    for p in s.parts():
        halo = np.asarray(p.halo_ids)
        for r in range(p.num_core):
            loc = np.asarray(p.indices[p.indptr[r] : p.indptr[r + 1]], np.int64)
            g = loc + p.start
            g[loc >= p.num_core] = halo[loc[loc >= p.num_core] - p.num_core]
            out[p.start + r] = Counter(g.tolist())
    return out


def _same(a, b) -> bool:
    return np.array_equal(a.n_id, b.n_id) and all(
        np.array_equal(x.edge_index.numpy(), y.edge_index.numpy())
        for x, y in zip(a.blocks, b.blocks)
    )


def test_a_part_loaded_from_buckets_equals_the_store_part_entry_for_entry(make_graph, make_store):
    s = Store.open(make_store(parts=3, graph=_graph(make_graph)))
    for got in _loaded(s, range(3)):
        ref = s.part(got.index)
        assert np.array_equal(got.indptr, np.asarray(ref.indptr))
        assert np.array_equal(got.indices, np.asarray(ref.indices, np.int64))
        assert np.array_equal(got.halo_ids, np.asarray(ref.halo_ids))


@pytest.mark.parametrize("resident", [[0], [2], []])
def test_swapped_out_parts_are_sampled_as_if_resident(make_graph, make_store, resident):
    """One batch worker owning 3 parts: with only ``resident`` in memory the batches equal
    those with all three resident; skipping (the paper's footnote 1) does not."""
    s = Store.open(make_store(parts=3, graph=_graph(make_graph)))
    full = _sampler(s, _loaded(s, range(3)), np.zeros(3), 0, 1)
    part = _sampler(s, _loaded(s, resident), np.zeros(3), 0, 1)
    skip = _sampler(s, _loaded(s, resident), np.zeros(3), 0, 1, swapped="skip")
    for k, seeds in enumerate([np.arange(0, 60, 7), np.arange(3, 60, 5)]):
        ref = full.sample(seeds, 10 + k)
        assert _same(part.sample(seeds, 10 + k), ref)
        assert not _same(skip.sample(seeds, 10 + k), ref)
    assert part.counters["disk_sampled"] > 0 and part.unavailable == 0
    assert part.disk_bytes > 0 and full.counters["disk_sampled"] == 0
    assert skip.unavailable > 0
    part.close()


def _exclusions(s: Store, seeds: np.ndarray, seed: int) -> np.ndarray:
    """About half the in-edges of ``seeds`` and of their in-neighbours, and the reverses
    (link prediction's exclusions: a batch's positives and their reverses)."""
    nbrs, rng = _nbrs(s), np.random.default_rng(seed)
    ends = np.unique(np.concatenate([seeds, [u for v in seeds for u in nbrs[int(v)]]]))
    e = np.array([(u, int(v)) for v in ends for u in nbrs[int(v)] if rng.random() < 0.5])
    return np.concatenate([e, e[:, ::-1]]).astype(np.int64)


def _uses(mb, excluded: np.ndarray) -> bool:
    """Whether a block of ``mb`` has one of the ``excluded`` edges ``(src, dst)``."""
    bad = {tuple(e) for e in excluded.tolist()}
    n_id = np.asarray(mb.n_id)
    for b in mb.blocks:
        src, dst = b.edge_index.numpy()
        if any((int(u), int(v)) in bad for u, v in zip(n_id[src], n_id[dst])):
            return True
    return False


def _two_workers(rank, world, store, configs, exclude=False):
    """Two batch workers (parts 0, 1 -> worker 0; 2, 3 -> worker 1) sample the same seeds
    under each of ``configs``: (resident parts, nodes replicated); ``exclude``: with a link
    batch's exclusions (then also whether a batch used an excluded edge)."""
    s = Store.open(store)
    p2r = np.array([0, 0, 1, 1])
    part_of = np.searchsorted(s.part_offsets, np.arange(s.num_nodes), "right") - 1
    own = np.flatnonzero(p2r[part_of] == rank)
    res = []
    for resident, replicate in configs:
        rep = Replica.build(s, _degrees(s), replicate) if replicate else None
        mine = [p for p in resident if p2r[p] == rank]
        smp = _sampler(s, _loaded(s, mine), p2r, rank, world, replica=rep)
        smp.group = dist.group.WORLD
        out = []
        for k in range(3):
            ex = _exclusions(s, own[k::3], 7 * k + rank) if exclude else None
            mb = smp.sample(own[k::3], 100 + k, exclude=ex)
            out.append((mb.n_id.tolist(), [b.edge_index.numpy().tolist() for b in mb.blocks]))
            if exclude:
                out[-1] += (_uses(mb, ex),)
        res.append((out, dict(smp.counters), smp.unavailable))
        smp.close()
    return res


def test_two_batch_workers_swapped_out_parts_and_replicated_nodes(make_graph, make_store):
    """A part swapped out at its (remote) worker: the same batches as all resident.
    Replicating every node: no sampling request leaves a batch worker, and every pick is a
    true in-neighbour, as many as the fanout allows; replicating none: requests are made."""
    store = str(make_store(parts=4, graph=_graph(make_graph)))
    every_part = [0, 1, 2, 3]
    configs = [(every_part, 0), ([0, 3], 0), (every_part, 60), (every_part, 6)]
    ranks = run_world(_two_workers, 2, store, configs, timeout=240)
    full, part, every, some = ([r[c] for r in ranks] for c in range(4))
    for r in range(2):
        assert full[r][0] == part[r][0]  # every batch, both workers
        assert part[r][2] == 0
    assert sum(part[r][1]["disk_sampled"] for r in range(2)) > 0
    assert all(r[1]["replica_sampled"] == 0 and r[1]["remote_requests"] > 0 for r in full)
    assert all(r[1]["remote_requests"] == 0 and r[1]["replica_sampled"] > 0 for r in every)
    assert sum(r[1]["remote_requests"] for r in some) < sum(r[1]["remote_requests"] for r in full)
    assert all(r[1]["replica_saved_bytes"] > 0 for r in some)
    nbrs = _nbrs(Store.open(store))
    fan = (3, 2, 2)
    for r in every:
        for n_id, blocks in r[0]:
            for h, ei in enumerate(reversed(blocks)):  # blocks: last hop first
                src, dst = np.asarray(ei)
                for d in np.unique(dst):
                    got = Counter(np.asarray(n_id)[src[dst == d]].tolist())
                    v = n_id[d]
                    assert all(got[u] <= nbrs[v][u] for u in got)
                    assert sum(got.values()) == min(fan[h], sum(nbrs[v].values()))


@pytest.mark.parametrize("resident", [[0], [2], []])
def test_excluded_edges_are_skipped_alike_in_resident_and_swapped_out_parts(
    make_graph, make_store, resident
):
    """Link prediction's exclusions: a swapped-out part's rows drawn from the store skip
    them with the draws of a resident part; no batch uses an excluded edge."""
    s = Store.open(make_store(parts=3, graph=_graph(make_graph)))
    full = _sampler(s, _loaded(s, range(3)), np.zeros(3), 0, 1)
    part = _sampler(s, _loaded(s, resident), np.zeros(3), 0, 1)
    for k, seeds in enumerate([np.arange(0, 60, 7), np.arange(3, 60, 5)]):
        ex = _exclusions(s, seeds, k)
        ref = full.sample(seeds, 10 + k, exclude=ex)
        assert _same(part.sample(seeds, 10 + k, exclude=ex), ref)
        assert not _uses(ref, ex) and _uses(full.sample(seeds, 10 + k), ex)
    assert part.counters["disk_sampled"] > 0
    part.close()


def test_two_batch_workers_exclude_edges_everywhere(make_graph, make_store):
    """Exclusions reach the owners of remote frontier nodes, resident or swapped out, and
    replicated nodes with an excluded in-edge: no batch uses an excluded edge, and a part
    swapped out at its worker gives the batches of a resident one."""
    store = str(make_store(parts=4, graph=_graph(make_graph)))
    every_part = [0, 1, 2, 3]
    configs = [(every_part, 0), ([0, 3], 0), (every_part, 60), ([1, 2], 6)]
    ranks = run_world(_two_workers, 2, store, configs, True, timeout=240)
    for r in ranks:
        assert not any(batch[2] for c in r for batch in c[0])
        assert r[0][0] == r[1][0] and r[1][2] == 0
    assert sum(r[2][1]["replica_sampled"] for r in ranks) > 0
    assert sum(r[1][1]["disk_sampled"] + r[3][1]["disk_sampled"] for r in ranks) > 0


def test_the_replica_holds_the_top_nodes_neighbourhoods_and_rows(make_graph, make_store):
    s = Store.open(make_store(parts=3, graph=_graph(make_graph)))
    deg = _degrees(s)
    rep = Replica.build(s, deg, 8)
    top = np.sort(np.argsort(-deg, kind="stable")[:8])
    assert np.array_equal(rep.ids, top) and deg[top].min() >= np.sort(deg)[-8]
    for r, v in enumerate(rep.ids):
        assert Counter(rep.indices[rep.indptr[r] : rep.indptr[r + 1]].tolist()) == _nbrs(s)[v]
    assert np.array_equal(rep.features, s.features(rep.ids))
    other = int(np.setdiff1d(np.arange(60), top)[0])
    assert rep.positions(np.array([int(top[0]), other])).tolist() == [0, -1]
    assert replica_count("10%", 60) == 6 and replica_count(0, 60) == 0
    with pytest.raises(ValueError):
        DisaggConfig(replicate_top="many")
