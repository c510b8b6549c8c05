"""DistNeighborSampler without peers: parts held by one rank draw independent samples."""

from __future__ import annotations

import numpy as np

from shoal.distributed.sampler import DistNeighborSampler
from shoal.store import Store


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
