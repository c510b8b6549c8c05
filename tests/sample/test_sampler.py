"""Neighbour sampler: correctness on hand-built graphs, determinism, edge cases."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.sample import NeighborSampler, full_graph_block, parse_fanouts


def csr_from_edges(edges, n):
    """In-neighbour CSR: row v lists the sources of edges (u, v)."""
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    order = np.argsort(e[:, 1], kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(e[:, 1], minlength=n), out=indptr[1:])
    return indptr, e[order, 0].copy()


def random_graph(n=60, m=400, seed=0):
    rng = np.random.default_rng(seed)
    e = np.unique(rng.integers(0, n, (m, 2)), axis=0)
    return csr_from_edges(e, n), {(int(u), int(v)) for u, v in e}


def check_batch(mb, edge_set, fanouts, indptr):
    """Every sampled edge exists, no duplicate edge per target, fanout respected, layout."""
    n_id = mb.n_id
    assert len(np.unique(n_id)) == len(n_id)
    assert len(mb.blocks) == len(fanouts)
    # blocks are input layer first: block[-1] targets are the seeds
    assert mb.blocks[-1].num_dst == mb.num_seeds
    for b_in, b_out in zip(mb.blocks[:-1], mb.blocks[1:], strict=True):
        assert b_in.num_dst == b_out.num_src
    hop_fanouts = list(reversed(fanouts))  # block l uses the fanout of hop L - l
    for block, f in zip(mb.blocks, hop_fanouts, strict=True):
        src, dst = block.edge_index.numpy()
        assert src.max(initial=-1) < block.num_src and dst.max(initial=-1) < block.num_dst
        assert np.all(np.diff(dst) >= 0)
        assert np.array_equal(np.repeat(np.arange(block.num_dst), np.diff(block.rowptr)), dst)
        pairs = set()
        for u, v in zip(n_id[src], n_id[dst], strict=True):
            assert (int(u), int(v)) in edge_set, f"sampled edge {u}->{v} does not exist"
            assert (u, v) not in pairs, "duplicate sampled edge"
            pairs.add((u, v))
        counts = np.diff(block.rowptr.numpy())
        deg = np.diff(indptr)[n_id[: block.num_dst]]
        expect = deg if f == -1 else np.minimum(deg, f)
        assert np.array_equal(counts, expect)
        assert np.array_equal(block.deg_src.numpy(), np.diff(indptr)[n_id[: block.num_src]])


@pytest.mark.parametrize("fanouts", [(3,), (2, 2), (5, 3, 2), (-1, 2), (100, 70)])
def test_sampled_edges_exist_no_duplicates_fanout_respected(fanouts):
    (indptr, indices), edges = random_graph()
    s = NeighborSampler(indptr, indices, fanouts)
    for seed in range(3):
        mb = s.sample(np.array([5, 0, 17, 33]), seed)
        assert list(mb.seeds) == [5, 0, 17, 33]
        check_batch(mb, edges, fanouts, indptr)


def test_large_fanout_uses_selection_sampling_correctly():
    # a star: node 0 has 200 in-neighbours; fanout 100 > the Floyd limit
    n = 201
    edges = [(u, 0) for u in range(1, n)]
    indptr, indices = csr_from_edges(edges, n)
    s = NeighborSampler(indptr, indices, (100,))
    mb = s.sample(np.array([0]), 7)
    src = mb.n_id[mb.blocks[0].edge_index[0].numpy()]
    assert (
        len(src) == 100 and len(set(src.tolist())) == 100 and set(src.tolist()) <= set(range(1, n))
    )


def test_uniformity_of_small_fanout():
    n = 11
    indptr, indices = csr_from_edges([(u, 0) for u in range(1, n)], n)
    s = NeighborSampler(indptr, indices, (3,))
    hits = np.zeros(n)
    for seed in range(800):
        mb = s.sample(np.array([0]), seed)
        hits[mb.n_id[1:]] += 1
    # each of 10 neighbours is drawn with probability 3/10: 240 expected, sd about 13
    assert np.all(np.abs(hits[1:] - 240) < 65), hits


def test_full_neighbour_mode_is_exact():
    (indptr, indices), edges = random_graph(seed=3)
    s = NeighborSampler(indptr, indices, (2, 2))
    nodes = np.array([1, 2, 3, 40])
    mb = s.full(nodes)
    b = mb.blocks[0]
    got = {(int(mb.n_id[u]), int(mb.n_id[v])) for u, v in b.edge_index.numpy().T}
    want = {(u, v) for (u, v) in edges if v in set(nodes.tolist())}
    assert got == want
    # fanout -1 over two hops equals two full hops
    mb2 = s.sample(nodes, 0, fanouts=(-1, -1))
    assert mb2.blocks[-1].num_edges == b.num_edges


def test_deterministic_for_a_seed_and_independent_of_threads():
    import numba

    (indptr, indices), _ = random_graph(n=300, m=3000, seed=1)
    s = NeighborSampler(indptr, indices, (4, 3))
    seeds = np.arange(0, 300, 7)
    a = s.sample(seeds, 42)
    b = s.sample(seeds, 42)
    c = s.sample(seeds, 43)
    assert np.array_equal(a.n_id, b.n_id)
    for x, y in zip(a.blocks, b.blocks, strict=True):
        assert np.array_equal(x.edge_index.numpy(), y.edge_index.numpy())
    assert not all(
        np.array_equal(x.edge_index.numpy(), y.edge_index.numpy())
        for x, y in zip(a.blocks, c.blocks, strict=True)
    )
    old = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        d = NeighborSampler(indptr, indices, (4, 3)).sample(seeds, 42)
    finally:
        numba.set_num_threads(old)
    assert np.array_equal(a.n_id, d.n_id)


def test_isolated_nodes_self_loops_and_empty_seeds():
    # node 3 isolated, node 1 has a self-loop
    indptr, indices = csr_from_edges([(0, 1), (1, 1), (2, 1), (1, 2)], 4)
    s = NeighborSampler(indptr, indices, (5, 5))
    mb = s.sample(np.array([3, 1]), 0)
    assert mb.blocks[-1].count_dst.tolist() == [0, 3]
    assert set(mb.n_id.tolist()) == {3, 1, 0, 2}
    empty = s.sample(np.array([], dtype=np.int64), 0)
    assert empty.num_seeds == 0 and all(b.num_edges == 0 for b in empty.blocks)


def test_store_part_halo_ids_beyond_csr_rows():
    # 3 core rows, ids 3 and 4 are halo nodes (no rows); degrees given for all 5
    indptr = np.array([0, 2, 3, 4])
    indices = np.array([3, 1, 4, 0])
    s = NeighborSampler(indptr, indices, (-1, -1), num_nodes=5, degrees=np.array([2, 1, 1, 7, 9]))
    mb = s.sample(np.array([0]), 0)
    assert set(mb.n_id.tolist()) == {0, 1, 3, 4}
    assert mb.blocks[0].deg_src.tolist()[: len(mb.n_id)] == [2, 7, 1, 9]


def test_bad_input_is_rejected_and_buffers_stay_clean():
    indptr, indices = csr_from_edges([(0, 1), (1, 0)], 2)
    s = NeighborSampler(indptr, indices, (1,))
    with pytest.raises(ValueError, match="unique"):
        s.sample(np.array([1, 1]), 0)
    with pytest.raises(ValueError, match="out of range"):
        s.sample(np.array([2]), 0)
    assert s.sample(np.array([1, 0]), 0).n_id.tolist() == [1, 0]
    with pytest.raises(ValueError, match="indptr"):
        NeighborSampler(np.array([0, 3]), np.array([0]), (1,))
    for bad in ("", "0", "3,-2", "x"):
        with pytest.raises(ValueError):
            parse_fanouts(bad)
    assert parse_fanouts("all,10") == (-1, 10)


def test_works_on_graph_directory(make_graph):
    g = make_graph([(0, 1), (2, 1), (1, 0), (3, 2)], 4)
    csr = g.csr("in")
    s = NeighborSampler(csr.indptr, csr.indices, (-1,))
    mb = s.sample(np.array([1]), 0)
    assert sorted(mb.n_id[1:].tolist()) == [0, 2]


def test_full_graph_block():
    indptr, indices = csr_from_edges([(0, 1), (2, 1), (1, 0)], 3)
    b = full_graph_block(indptr, indices)
    assert b.size == (3, 3)
    assert sorted(map(tuple, b.edge_index.numpy().T.tolist())) == [(0, 1), (1, 0), (2, 1)]


def _on_disk(tmp_path, arr, name="indices.npy"):
    np.save(tmp_path / name, arr)
    return np.load(tmp_path / name, mmap_mode="r")


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("fanouts", [(3, 2), (60, 2), (-1, 4)])
def test_direct_indices_draw_exactly_the_in_memory_samples(tmp_path, dtype, fanouts):
    """Neighbour lists read from disk by planned reads of the drawn positions give the very
    batches of the in-memory CSR: small fanouts (Floyd), large ones (selection sampling),
    whole neighbourhoods, hubs, isolated nodes and self-loops."""
    rng = np.random.default_rng(5)
    n = 500
    hub = np.stack([rng.integers(0, n, 3000), np.zeros(3000, np.int64)], 1)  # node 0: a hub
    e = np.concatenate([rng.integers(0, n - 20, (4000, 2)), hub, [[7, 7], [7, 7]]])
    indptr, indices = csr_from_edges(e, n)  # nodes n-20.. have no in-edges; duplicates kept
    mem = NeighborSampler(indptr, indices.astype(dtype), fanouts)
    disk = NeighborSampler(
        indptr,
        _on_disk(tmp_path, indices.astype(dtype)),
        fanouts,
        direct_indices=True,
        io_threads=3,
    )
    for step, seeds in enumerate(
        [np.array([0, 7, n - 1]), rng.permutation(n)[:64], np.arange(n), np.array([], np.int64)]
    ):
        a, b = mem.sample(seeds, step), disk.sample(seeds, step)
        assert np.array_equal(a.n_id, b.n_id)
        for x, y in zip(a.blocks, b.blocks, strict=True):
            assert np.array_equal(x.edge_index.numpy(), y.edge_index.numpy())
            assert np.array_equal(x.rowptr.numpy(), y.rowptr.numpy())
    assert disk.structure_bytes_read > 0  # read from the file, not the map
    disk.close()


def test_direct_indices_need_a_file(tmp_path):
    indptr, indices = csr_from_edges([(0, 1), (1, 0)], 2)
    with pytest.raises(ValueError, match="memory-mapped"):
        NeighborSampler(indptr, indices, (1,), direct_indices=True)
    s = NeighborSampler(
        np.zeros(3, np.int64), _on_disk(tmp_path, np.empty(0, np.int64)), (2,), direct_indices=True
    )
    assert s.sample(np.array([0, 1]), 0).n_id.tolist() == [0, 1]  # no edges at all


@pytest.mark.parametrize("cache_blocks", [1, 3, 1000])
def test_direct_indices_through_a_block_cache_draw_the_same_samples(tmp_path, cache_blocks):
    """Blocks of 16 entries through a CLOCK cache of 1, 3 or all blocks (evictions within
    one hop included; the tail block lives in memory): the very in-memory batches."""
    from shoal.rows.blockcache import BlockCache

    rng = np.random.default_rng(8)
    n = 300
    e = np.concatenate([rng.integers(0, n, (2500, 2)), [[3, 3]]])
    indptr, indices = csr_from_edges(e, n)
    mem = NeighborSampler(indptr, indices, (4, 3))
    disk = NeighborSampler(
        indptr, _on_disk(tmp_path, indices), (4, 3), direct_indices=True, neighbor_cache_bytes=1
    )
    disk._blocks = BlockCache(
        _on_disk(tmp_path, indices), cache_blocks * 16 * 8, block=16, threads=2
    )
    for step in range(6):
        seeds = rng.permutation(n)[: 10 * (step + 1)]
        a, b = mem.sample(seeds, step), disk.sample(seeds, step)
        assert np.array_equal(a.n_id, b.n_id)
        for x, y in zip(a.blocks, b.blocks, strict=True):
            assert np.array_equal(x.edge_index.numpy(), y.edge_index.numpy())
    bc = disk._blocks
    assert bc.data.shape[0] == min(cache_blocks, len(indices) // 16)
    assert 0 < bc.hits < bc.requests  # some blocks found cached, others read
    assert (bc.slot >= 0).sum() == (bc.owner >= 0).sum() <= bc.data.shape[0]
    live = bc.owner[bc.owner >= 0]
    assert np.array_equal(bc.slot[live], np.flatnonzero(bc.owner >= 0))  # maps agree
    for s, blk in enumerate(bc.owner):  # every cached block holds its entries
        if blk >= 0:
            assert np.array_equal(bc.data[s], indices[blk * 16 : (blk + 1) * 16])
    with pytest.raises(ValueError, match="positions"):
        bc.take(np.array([len(indices)]))


def sampled_edges(mb) -> set[tuple[int, int]]:
    out = set()
    for b in mb.blocks:
        src, dst = b.edge_index.numpy()
        out |= {(int(u), int(v)) for u, v in zip(mb.n_id[src], mb.n_id[dst], strict=True)}
    return out


@pytest.mark.parametrize("fanouts", [(3, 2), (-1, -1), (100, 70)])
def test_excluded_edges_are_never_sampled_and_fanouts_hold(fanouts):
    (indptr, indices), edges = random_graph(n=40, m=500, seed=5)
    s = NeighborSampler(indptr, indices, fanouts)
    rng = np.random.default_rng(0)
    pick = np.array(sorted(edges))[rng.choice(len(edges), 30, replace=False)]
    ex = np.concatenate([pick, pick[:, ::-1]])  # positives and their reverses
    ex_set = {(int(u), int(v)) for u, v in ex}
    seeds = np.unique(pick)
    for seed in range(5):
        mb = s.sample(seeds, seed, exclude=ex)
        got = sampled_edges(mb)
        assert not (got & ex_set)
        assert got <= edges
        # each destination draws min(fanout, its in-degree without the excluded edges)
        for block, f in zip(mb.blocks, reversed(fanouts), strict=True):
            for i, c in enumerate(np.diff(block.rowptr.numpy())):
                v = int(mb.n_id[i])
                d = sum(1 for (u, w) in edges if w == v and (u, v) not in ex_set)
                assert c == (d if f == -1 else min(d, f))


def test_exclusion_changes_nothing_elsewhere_and_is_uniform():
    (indptr, indices), edges = random_graph(seed=2)
    s = NeighborSampler(indptr, indices, (3, 2))
    seeds = np.array([5, 0, 17])
    a = s.sample(seeds, 4)
    b = s.sample(seeds, 4, exclude=np.array([[59, 59]]))  # absent: the same draws
    assert np.array_equal(a.n_id, b.n_id)
    # a star with one excluded spoke: the other 9 are drawn uniformly, never the excluded one
    n = 11
    indptr, indices = csr_from_edges([(u, 0) for u in range(1, n)], n)
    s = NeighborSampler(indptr, indices, (3,))
    hits = np.zeros(n)
    for seed in range(900):
        hits[s.sample(np.array([0]), seed, exclude=np.array([[4, 0]])).n_id[1:]] += 1
    assert hits[4] == 0
    others = np.delete(hits[1:], 3)  # expected 900 * 3 / 9 = 300 each, sd about 14
    assert np.all(np.abs(others - 300) < 70), hits
    with pytest.raises(ValueError, match="excluded edge ids"):
        s.sample(np.array([0]), 0, exclude=np.array([[0, 99]]))


@pytest.mark.parametrize("fanouts", [(4, 3), (-1, 2), (3, 2, 2)])
@pytest.mark.parametrize("cached", [False, True])
@pytest.mark.parametrize("marks", [False, True])
def test_a_group_sampled_from_disk_is_the_same_batches_read_in_one_pass_per_hop(
    tmp_path, monkeypatch, fanouts, cached, marks
):
    """``sample_group`` over a CSR on disk: the very batches of the in-memory CSR, in order
    (a hub, isolated nodes, an empty batch), with or without a block cache beside it; each
    hop of the group is one sorted pass reading at most the file (a counter, not a timing),
    far less in all than the pages that batches sampled one by one read. Each hop's drawn
    positions kept sorted (:class:`DrawnEntries`) or marked (:class:`DrawnMarks`)."""
    from shoal.sample.sampler import DrawnMarks

    monkeypatch.setattr(DrawnMarks, "pays", classmethod(lambda cls, entries, drawn: marks))
    marked = []
    positions = DrawnMarks.positions
    monkeypatch.setattr(DrawnMarks, "positions", lambda m: marked.append(1) or positions(m))
    rng = np.random.default_rng(3)
    n = 2000
    hub = np.stack([rng.integers(0, n, 500), np.zeros(500, np.int64)], 1)
    e = np.concatenate([rng.integers(0, n - 30, (20000, 2)), hub])
    indptr, indices = csr_from_edges(e, n)
    indices = indices.astype(np.int32)
    mem = NeighborSampler(indptr, indices, fanouts)
    on_disk = _on_disk(tmp_path, indices)
    kw = dict(direct_indices=True, io_threads=2, neighbor_cache_bytes=4096 if cached else 0)
    group = NeighborSampler(indptr, on_disk, fanouts, **kw, group_bytes=1 << 30)
    one = NeighborSampler(indptr, on_disk, fanouts, **kw)
    batches = [(rng.permutation(n)[:40], step) for step in range(12)]
    batches.insert(5, (np.array([], np.int64), 99))
    assert group.group_size(40) > len(batches) and one.group_size(40) == 1
    got = list(group.sample_group(batches))
    assert len(got) == len(batches)
    for (seeds, seed), b in zip(batches, got, strict=True):
        a = mem.sample(seeds, seed)
        c = one.sample(seeds, seed)
        assert np.array_equal(a.n_id, b.n_id) and np.array_equal(a.n_id, c.n_id)
        for x, y in zip(a.blocks, b.blocks, strict=True):
            assert np.array_equal(x.edge_index.numpy(), y.edge_index.numpy())
            assert np.array_equal(x.rowptr.numpy(), y.rowptr.numpy())
    r = group.group_reads
    assert r.passes == len(fanouts)  # one pass per hop for the whole group
    assert len(marked) == (len(fanouts) if marks else 0)
    assert 0 < r.largest <= -(-indices.nbytes // 4096) * 4096  # a pass reads the file at most
    assert group.structure_bytes_read == r.bytes
    if not cached:  # a page per drawn list, batch by batch
        assert one.structure_bytes_read > 2 * r.bytes
    # a sampler in memory, or a group of one, samples batch by batch
    assert [m.n_id.tolist() for m in mem.sample_group(batches[:2])] == [
        m.n_id.tolist() for m in got[:2]
    ]
    group.close()
    one.close()


@pytest.mark.parametrize(
    ("grouped", "read_entries", "later_share"),
    [(False, 1 << 20, 0.5), (True, 1 << 20, 0.5), (True, 7, 0.5), (True, 1 << 20, 0.0)],
)
def test_held_lists_of_the_seeds_give_the_same_batches_without_reading_them_again(
    tmp_path, monkeypatch, grouped, read_entries, later_share
):
    """The training seeds' neighbour lists held in memory (a hub, an isolated seed, rows
    past the CSR's): every batch equals the in-memory sampler's, alone or in a group; hop 0
    of seeds that are all held reads nothing from disk, and the lists are read once (in one
    read, or ``read_entries`` at a time: the hub's list alone in a read of its own). A
    group has no hop-0 pass; a batch's rows outside the held ones are read directly. The
    held lists are a sixth of the entries: a group's hop 1 takes their positions from its
    pass (``later_share`` 1/2), or looks them up among the held rows (0)."""
    from shoal.sample import sampler as sampler_module
    from shoal.sample.sampler import HeldLists

    monkeypatch.setattr(HeldLists, "READ_ENTRIES", read_entries)
    monkeypatch.setattr(sampler_module, "HELD_LATER_HOPS", later_share)
    rng = np.random.default_rng(4)
    n = 1500
    hub = np.stack([rng.integers(0, n, 400), np.zeros(400, np.int64)], 1)
    e = np.concatenate([rng.integers(1, n - 20, (12000, 2)), hub])
    indptr, indices = csr_from_edges(e, n)
    indices = indices.astype(np.int32)
    mem = NeighborSampler(indptr, indices, (4, 3))
    kw = dict(direct_indices=True, io_threads=2, group_bytes=(1 << 30) if grouped else 0)
    s = NeighborSampler(indptr, _on_disk(tmp_path, indices), (4, 3), **kw)
    seeds = np.concatenate([[0, n - 1], rng.permutation(np.arange(1, n - 1))[:200]])
    assert not s.hold_rows(seeds, max_bytes=100)  # too small: nothing held
    assert s.hold_rows(seeds, max_bytes=1 << 30)
    held = s.structure_bytes_read
    lens = np.diff(indptr)[seeds]
    assert held >= lens.sum() * 4 and s._held.values.shape == (lens.sum(),)
    assert s._held.serves_later_hops == (later_share == 0.0)
    batches = [(rng.permutation(seeds)[:30], step) for step in range(6)]
    others = np.setdiff1d(np.arange(n), seeds)  # a batch of rows not held: read directly
    batches.insert(3, (np.concatenate([seeds[:5], others[:25]]), 77))
    got = list(s.sample_group(batches)) if grouped else [s.sample(*b) for b in batches]
    if grouped:  # hop 0 has no pass: hop 1's only
        assert s.group_reads.passes == 1
    for (b, seed), mb in zip(batches, got, strict=True):
        a = mem.sample(b, seed)
        assert np.array_equal(a.n_id, mb.n_id)
        for x, y in zip(a.blocks, mb.blocks, strict=True):
            assert np.array_equal(x.edge_index.numpy(), y.edge_index.numpy())
    before = s.structure_bytes_read
    one_hop = s.sample(batches[0][0], 0, fanouts=(4,))  # hop 0 only: from the held lists
    assert s.structure_bytes_read == before
    assert np.array_equal(one_hop.n_id, mem.sample(batches[0][0], 0, fanouts=(4,)).n_id)
    s.close()


@pytest.mark.parametrize("n", [1, 2, 17, 5000])
@pytest.mark.parametrize("marked", [False, True])
def test_drawn_entries_take_the_entry_at_each_position(n, marked):
    """A hop's drawn positions and their entries, sorted (:class:`DrawnEntries`) or marked
    (:class:`DrawnMarks`: bits 0 and 63 of a word, words with one bit or all 64)."""
    from shoal.sample.sampler import DrawnEntries, DrawnMarks

    rng = np.random.default_rng(n)
    pos = np.unique(rng.integers(0, 10 * n + 3, 3 * n))  # dense and sparse runs, any size
    vals = rng.integers(0, 1 << 30, len(pos)).astype(np.int32)
    if marked:
        entries = DrawnMarks(int(pos[-1]) + 1)
        for part in np.array_split(rng.permutation(np.repeat(pos, 2)), 3):  # repeats too
            entries.add(part)
        assert np.array_equal(entries.positions(), pos)
        entries.read(vals)
    else:
        entries = DrawnEntries(pos, vals)
    picked = pos[rng.integers(0, len(pos), 4 * n)]
    want = {int(p): int(v) for p, v in zip(pos, vals)}
    got = entries.take(picked)
    assert got.dtype == np.int32
    assert [int(v) for v in got] == [want[int(p)] for p in picked]
    assert len(entries.take(picked[:0])) == 0
    absent = np.setdiff1d(np.arange(int(pos[-1]) + 1), pos)
    if len(absent):
        with pytest.raises(ValueError, match="not among those the group read"):
            entries.take(absent[:1])
    with pytest.raises(ValueError, match="outside"):
        entries.take(np.array([int(pos[-1]) + 1]))


def test_held_lists_find_the_positions_inside_held_rows():
    """``HeldLists.take``/``resolve`` against a mask of the held rows' positions: rows
    without entries, positions before the first held row and after the last, and the rest
    read by the callback."""
    from shoal.sample.sampler import HeldLists

    rng = np.random.default_rng(1)
    n = 3000
    deg = rng.integers(0, 12, n)
    deg[[0, 5]] = 0  # rows without entries, one of them held
    indptr = np.concatenate([[0], np.cumsum(deg)])
    indices = rng.integers(0, n, int(indptr[-1])).astype(np.int32)
    rows = np.union1d(rng.choice(np.arange(10, n - 10), 400, replace=False), [5])

    def read(pos, out):
        out[:, 0] = indices[pos]
        return pos.size * 4

    held = HeldLists(indptr, rows, read, np.int32)
    picked = rng.integers(0, int(indptr[-1]), 20000)
    mask = np.zeros(int(indptr[-1]), bool)
    for r in rows:
        mask[indptr[r] : indptr[r + 1]] = True
    inside, vals = held.take(picked)
    assert np.array_equal(inside, mask[picked]) and 0 < inside.mean() < 0.5
    assert np.array_equal(vals[inside], indices[picked[inside]]) and not vals[~inside].any()
    asked = []

    def rest(pos):
        asked.append(pos.copy())
        pos[:] = indices[pos]

    got = picked.copy()
    held.resolve(got, rest)
    assert np.array_equal(got, indices[picked])
    assert np.array_equal(asked[0], picked[~mask[picked]])  # only the others read
