"""DistNeighborSampler without peers: parts held by one rank draw independent samples, and
one part draws what the single-process sampler draws."""

from __future__ import annotations

import numpy as np
import pytest

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


def _disk_vs_memory(
    rank: int,
    world: int,
    store: str,
    disk_ranks: tuple[int, ...],
    hold_all: bool = False,
    chunk: int = 0,
    marks: bool = True,
) -> dict:
    from shoal.distributed import DistNeighborSampler, NodeTables, parts_of_rank, sampler_chunks
    from shoal.sample.sampler import DrawnMarks

    # a pass's positions marked (DrawnMarks, as these small parts always pay) or sorted
    DrawnMarks.pays = classmethod(lambda cls, entries, drawn: marks)
    from shoal.sample.sampler import group_batches
    from shoal.store import Store

    st = Store.open(store)
    owner = parts_of_rank(st.num_parts, world)
    fanouts, bs = (3, 2), 5
    if chunk:  # a group's batches sampled together `chunk` at a time; each pick its degree
        sampler_chunks.CHUNK_BYTES = sampler_chunks.ENTRY_BYTES * (3 + 6) * bs * chunk
        assert sampler_chunks.chunk_batches(fanouts, bs) == chunk

    def make(on_disk: bool, scope: str = "global") -> DistNeighborSampler:
        parts = [p for p in Store.open(store).parts() if owner[p.index] == rank]  # (cached)
        for p in parts:
            if not on_disk:
                p.indices = np.array(p.indices)  # read into memory
        return DistNeighborSampler(
            parts=parts,
            part_offsets=st.part_offsets,
            part_to_rank=owner,
            rank=rank,
            world_size=world,
            fanouts=fanouts,
            degrees=NodeTables(st, parts, part_to_rank=owner, scope=scope).degrees,
        )

    own = np.concatenate([np.arange(p.start, p.stop) for p in st.parts() if owner[p.index] == rank])
    batches = [(own[i * bs : (i + 1) * bs], 7 + i) for i in range(7)]
    ref = make(False)
    want = [ref.sample(s, k) for s, k in batches]
    s = make(rank in disk_ranks, "local" if chunk else "global")
    # groups of 3 batches (3 groups, the last of one), the same figure on every rank
    # the lists of every other own row held in memory (the engine holds the training seeds')
    # (hold_all: every own row's, hop 0 of every batch: no hop-0 pass, as the engine sets)
    hold = {p.index: np.arange(0, p.num_core, 1 if hold_all else 2) for p in s.parts.values()}
    read = s.read_from_disk(
        io_threads=2, group_bytes=2 * 3 * 24 * (3 + 6) * bs, hold=hold, hold_bytes=1 << 30
    )
    held = {i: len(h.starts) for i, h in s._held.items()}
    assert s.holds_first_hop
    if hold_all:
        s.first_held = True
        s.group_bytes = 2 * 3 * 24 * 6 * bs  # groups of 3 still: no hop-0 entries counted
    assert s.group_size(bs) == 3 == group_batches(fanouts, 3 * 24 * (3 + 6) * bs, bs)
    # a round lends idle memory: groups grow by what it adds (counted twice, as above)
    if not hold_all:
        assert s.group_size(bs, room=2 * 2 * 24 * (3 + 6) * bs) == 5
    got = []
    for a in range(0, len(batches), 3):
        got += list(s.sample_group(batches[a : a + 3]))
    one = s.sample(*batches[0])  # one batch alone: entries read directly
    same = [
        np.array_equal(a.n_id, b.n_id)
        and all(
            x.edge_index.equal(y.edge_index) and x.deg_src.equal(y.deg_src)
            for x, y in zip(a.blocks, b.blocks, strict=True)
        )
        for a, b in zip(want + want[:1], got + [one], strict=True)
    ]
    out = {"same": same, "read": read, "passes": s.group_reads.passes, "bytes": s.group_reads.bytes}
    out["largest"], out["file"] = (
        s.group_reads.largest,
        max((p.indices.nbytes for p in s.parts.values()), default=0),
    )
    out["structure_bytes_read"] = s.structure_bytes_read
    out["held"] = held
    s.close()
    return out


@pytest.mark.parametrize(
    ("disk_ranks", "hold_all", "chunk", "world", "marks"),
    [
        ((0, 1), False, 0, 2, True),
        ((0,), False, 0, 2, True),
        ((0, 1), True, 0, 2, True),
        ((0, 1), False, 2, 2, True),
        ((0, 1), False, 2, 2, False),
        ((0, 2), False, 2, 3, True),
    ],
)
def test_neighbour_lists_on_disk_give_the_same_batches(
    make_graph, make_store, disk_ranks, hold_all, chunk, world, marks
):
    """Positions drawn from ``indptr`` and their entries read from disk, a group of batches
    hop by hop in one sorted pass per part (collective: a rank whose lists are in memory takes
    part in its peers' passes): every batch (ids, edges, the sources' degrees) equals the
    in-memory sampler's one batch at a time, over groups of 3, a group of one and a batch
    sampled alone; with every seed's list held (``hold_all``, ``first_held``) hop 0 takes
    no pass. ``chunk``: a group's batches drawn 2 at a time (one set of exchanges per hop
    for both; else all 3 at once) with local node tables, each pick carrying its degree; on
    3 ranks a chunk's requests come from two peers. A pass's positions marked
    (:class:`~shoal.sample.sampler.DrawnMarks`) or kept sorted (``marks`` False)."""
    g = community_graph(make_graph, n=120)
    store = str(make_store(parts=3, graph=g))
    res = run_world(_disk_vs_memory, world, store, disk_ranks, hold_all, chunk, marks)
    for rank, r in enumerate(res):
        assert all(r["same"]), r["same"]
        on_disk = rank in disk_ranks
        assert bool(r["read"]) == on_disk
        # two groups of 3 read a pass per hop (hop 1 only: hold_all) and per part (a group
        # of one reads directly)
        hops = 1 if hold_all else 2
        assert r["passes"] == (2 * hops * len(r["read"]) if on_disk else 0)
        # (hold_all: every list of every rank's rows is held, so the passes read nothing)
        assert (r["bytes"] > 0) == (on_disk and not hold_all)
        assert r["largest"] <= max(r["file"], 4096)
        assert r["structure_bytes_read"] >= r["bytes"]
        assert (len(r["held"]) > 0 and all(v > 0 for v in r["held"].values())) == on_disk


def test_exclusions_and_typed_stores_need_the_lists_in_memory(make_store):
    """Link prediction's exclusions and a typed store's draws per relation read the entries
    themselves: refused with the lists on disk (the engines keep them in memory)."""
    store = Store.open(make_store(np.zeros(48, np.int64)))
    s = DistNeighborSampler(
        parts=[store.part(0)],
        part_offsets=store.part_offsets,
        part_to_rank=np.zeros(1, np.int64),
        rank=0,
        world_size=1,
        fanouts=(2,),
        degrees=np.ones(store.num_nodes, np.float32),
    )
    assert s.read_from_disk() == [0] and s.reads_from_disk
    with pytest.raises(ValueError, match="in memory"):
        s.sample(np.arange(3), 0, exclude=np.array([[1, 0]], np.int64))
    s.close()
    assert not s.reads_from_disk
    s.relations = object()  # as a typed store's sampler
    with pytest.raises(ValueError, match="typed"):
        s.read_from_disk()
