"""DistNeighborSampler without peers: parts held by one rank draw independent samples, and
one part draws what the single-process sampler draws."""

from __future__ import annotations

import numpy as np

from shoal.distributed.sampler import DistNeighborSampler
from shoal.sample.base import BlockSampler
from shoal.sample.sampler import NeighborSampler
from shoal.store import Store
from tests.distributed.helpers import run_world
from tests.engines.conftest import community_graph


def test_parts_on_one_rank_sample_independently(make_graph, make_store):
    """Two parts on one rank, every node with exactly 10 in-neighbours: the offsets picked in
    row r of part 0 must not repeat those of row r of part 1 (a shared random stream per row
    position would make all 20 rows agree; independent streams agree with probability
    1/C(10,3) = 1/120 per row)."""
    n = 40
    edges = [(u % n, v) for v in range(n) for u in range(v + 1, v + 11)]
    x = np.ones((n, 2), np.float32)
    g = make_graph(edges, n, x=x, y=np.arange(n) % 2, train=np.arange(n))
    store = Store.open(make_store(np.arange(n) % 2, graph=g))
    parts = [store.part(0), store.part(1)]
    sampler = DistNeighborSampler(
        parts=parts,
        part_offsets=store.part_offsets,
        part_to_rank=np.zeros(2, np.int64),
        rank=0,
        world_size=1,
        fanouts=(3,),
        degrees=np.full(n, 10, np.float32),
    )
    seeds = np.arange(n, dtype=np.int64)  # new ids: part 0's 20 rows, then part 1's
    mb = sampler.sample(seeds, 11)
    src, dst = mb.blocks[0].edge_index.numpy()
    offsets: dict[int, list[int]] = {}
    for s, d in zip(mb.n_id[src], dst):
        p = parts[0] if d < 20 else parts[1]
        row = int(d) - p.start
        nb = p.local_to_global(p.in_neighbors(row)).tolist()
        offsets.setdefault(int(d), []).append(nb.index(int(s)))
    assert all(len(v) == 3 for v in offsets.values()) and len(offsets) == n
    same = sum(sorted(offsets[r]) == sorted(offsets[20 + r]) for r in range(20))
    assert same <= 3, f"{same} of 20 rows picked the same offsets in both parts"


def test_one_rank_one_part_equals_the_single_process_sampler(make_store):
    """Both samplers share BlockSampler's hop loop and blocks, and one part keeps the batch's
    random stream: the same seeds give the same batch, field for field (no exclusions; with
    them: test_sampler_exclude.py)."""
    store = Store.open(make_store(np.zeros(48, np.int64)))
    part = store.part(0)
    deg = np.diff(part.indptr).astype(np.float32)
    assert issubclass(DistNeighborSampler, BlockSampler)
    for fanouts in ((3,), (2, 2), (-1, 3), (4, 2, 1)):
        ref = NeighborSampler(part.indptr, part.indices, fanouts, num_nodes=store.num_nodes)
        dist = DistNeighborSampler(
            parts=[part],
            part_offsets=store.part_offsets,
            part_to_rank=np.zeros(1, np.int64),
            rank=0,
            world_size=1,
            fanouts=",".join(map(str, fanouts)),
            degrees=deg,
        )
        assert dist.fanouts == ref.fanouts == fanouts
        for seed in (0, 5):
            seeds = np.random.default_rng(seed).permutation(store.num_nodes)[:7]
            a, b = dist.sample(seeds, seed), ref.sample(seeds, seed)
            assert a.n_id.dtype == b.n_id.dtype and np.array_equal(a.n_id, b.n_id)
            assert a.num_seeds == b.num_seeds == 7 and len(a.blocks) == len(fanouts)
            for x, y in zip(a.blocks, b.blocks, strict=True):
                assert (x.num_src, x.num_dst) == (y.num_src, y.num_dst)
                for t, u in ((x.edge_index, y.edge_index), (x.rowptr, y.rowptr)):
                    assert t.dtype == u.dtype and t.equal(u)
                assert x.deg_src.dtype == y.deg_src.dtype and x.deg_src.equal(y.deg_src)


def _local_vs_global(rank: int, world: int, store: str) -> list:
    from shoal.distributed import DistNeighborSampler, NodeTables, parts_of_rank
    from shoal.store import Store

    st = Store.open(store)
    owner = parts_of_rank(st.num_parts, world)
    parts = [p for p in st.parts() if owner[p.index] == rank]
    out = []
    for scope in ("global", "local"):
        t = NodeTables(st, parts, part_to_rank=owner, scope=scope)
        seeds = np.sort(np.concatenate([np.arange(p.start, p.stop)[::3] for p in parts]))
        s = DistNeighborSampler(
            parts=parts,
            part_offsets=st.part_offsets,
            part_to_rank=owner,
            rank=rank,
            world_size=world,
            fanouts=(3, 2, 2),
            degrees=t.degrees,
        )
        exclude = np.array([[1, 0], [2, 5]], np.int64) if rank == 0 else np.empty((0, 2))
        got = []
        for k in range(3):
            mb = s.sample(seeds, k, exclude=exclude if k == 2 else None)
            got.append(
                (
                    mb.n_id.tolist(),
                    [(b.edge_index.tolist(), b.deg_src.tolist()) for b in mb.blocks],
                )
            )
        out.append(got)
    return out


def test_local_tables_give_the_global_tables_batches(make_graph, make_store):
    """With local node tables each pick carries its degree: the batches (ids, edges and the
    sources' degrees, over three hops) are those sampled
    with the dense tables, with and without excluded edges."""
    g = community_graph(make_graph, n=90)
    store = str(make_store(parts=3, graph=g))
    for glob, loc in run_world(_local_vs_global, 2, store):
        assert glob == loc
        assert len(glob[0][0]) > 20
