"""DistNeighborSampler's edge exclusion (link prediction): a rank's excluded edges never appear
in its blocks, another rank's exclusions do not touch them, and one rank with one part draws
exactly what the single-process sampler draws."""

from __future__ import annotations

import numpy as np

from shoal.distributed.sampler import DistNeighborSampler
from shoal.sample.sampler import NeighborSampler
from shoal.store import Store
from tests.distributed.helpers import run_world


def _sampler(store: Store, rank: int, world: int, fanouts) -> DistNeighborSampler:
    p2r = np.arange(store.num_parts) % world
    parts = [store.part(i) for i in range(store.num_parts) if p2r[i] == rank]
    deg = np.zeros(store.num_nodes, np.float32)
    return DistNeighborSampler(
        parts=parts,
        part_offsets=store.part_offsets,
        part_to_rank=p2r,
        rank=rank,
        world_size=world,
        fanouts=fanouts,
        degrees=deg,
    )


def _in_edges(store: Store) -> set[tuple[int, int]]:
    out = set()
    for i in range(store.num_parts):
        p = store.part(i)
        for row in range(p.num_core):
            for u in p.local_to_global(p.in_neighbors(row)).tolist():
                out.add((int(u), p.start + row))
    return out


def _pairs(store: Store, rank: int) -> np.ndarray:
    """Four undirected edges per rank (both directions), different for the two ranks."""
    e = np.array(sorted((u, v) for u, v in _in_edges(store) if u < v), np.int64)
    mine = e[rank * 4 : rank * 4 + 4]
    return np.concatenate([mine, mine[:, ::-1]])


def _blocks(rank: int, world: int, path: str) -> dict:
    store = Store.open(path)
    ex = _pairs(store, rank)
    other = _pairs(store, 1 - rank) if world == 2 else np.empty((0, 2), np.int64)
    seeds = np.unique(np.concatenate([ex.ravel(), other.ravel()]))
    mb = _sampler(store, rank, world, (-1, -1)).sample(seeds, 3, exclude=ex)
    hops = []
    for b in mb.blocks:
        s, d = b.edge_index.numpy()
        hops.append(sorted(zip(mb.n_id[s].tolist(), mb.n_id[d].tolist())))
    return {"n_id": mb.n_id, "hops": hops, "ex": ex, "other": other}


def _check(path, results) -> None:
    store = Store.open(path)
    edges = _in_edges(store)
    for r in results:
        ex = {tuple(map(int, e)) for e in r["ex"]}
        n_id = r["n_id"]
        for hop in r["hops"]:
            got = set(map(tuple, hop))
            assert len(got) == len(hop)  # full fanouts: each in-edge once
            dsts = {d for _, d in hop} | set()
            # every destination row of this block gets all its in-edges but the excluded ones
            want = {(u, v) for (u, v) in edges if v in dsts and (u, v) not in ex}
            assert got == want
            assert not got & ex
        assert set(n_id[: len(np.unique(r["n_id"]))].tolist()) == set(n_id.tolist())
        other = {tuple(map(int, e)) for e in r["other"]}
        # the other rank's excluded edges are still used by this rank's batch
        assert other and other <= set(map(tuple, r["hops"][-1]))


def test_two_ranks_each_exclude_only_their_own_edges(make_store):
    path = str(make_store(np.arange(48) % 2))
    results = run_world(_blocks, 2, path)
    _check(path, results)


def test_one_rank_two_parts_full_fanout(make_store):
    path = str(make_store(np.arange(48) % 2))
    store = Store.open(path)
    ex = _pairs(store, 0)
    seeds = np.unique(ex.ravel())
    mb = _sampler(store, 0, 1, (-1,)).sample(seeds, 3, exclude=ex)
    s, d = mb.blocks[0].edge_index.numpy()
    got = set(zip(mb.n_id[s].tolist(), mb.n_id[d].tolist()))
    excluded = {tuple(map(int, e)) for e in ex}
    want = {(u, v) for (u, v) in _in_edges(store) if v in set(seeds.tolist())} - excluded
    assert got == want and excluded


def test_one_part_equals_the_single_process_sampler(make_store):
    """Sampled fanouts (random): the same blocks as NeighborSampler with the same exclusions."""
    path = str(make_store(np.zeros(48, np.int64)))
    store = Store.open(path)
    part = store.part(0)
    ex = _pairs(store, 0)
    seeds = np.unique(ex.ravel())
    ref = NeighborSampler(part.indptr, part.indices, (2, 2), num_nodes=store.num_nodes)
    for seed in (0, 7):
        a = _sampler(store, 0, 1, (2, 2)).sample(seeds, seed, exclude=ex)
        b = ref.sample(seeds, seed, exclude=ex)
        assert np.array_equal(a.n_id, b.n_id)
        for x, y in zip(a.blocks, b.blocks, strict=True):
            assert np.array_equal(x.edge_index.numpy(), y.edge_index.numpy())
