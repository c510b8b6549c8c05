"""Blocked layer-wise inference equals the full-graph forward pass, whatever the budget."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shoal.graph import full_graph_block
from shoal.nn import build_model
from shoal.rows.featstore import DiskFeatures
from shoal.training import blocked
from shoal.training.blocked import blocked_layers, sum_layers


def _graph(n=300, m=2500, seed=0):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, m)
    dst = rng.integers(0, n - 20, m)  # the last 20 nodes have no in-edges
    src[:30] = dst[:30]  # self loops
    src[30:40], dst[30:40] = 7, 9  # a repeated edge
    order = np.argsort(dst, kind="stable")
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
    return indptr, src[order].astype(np.int32), np.diff(indptr).astype(np.float32)


@pytest.mark.parametrize("name", ["sage", "gcn", "gin", "sgc"])
@pytest.mark.parametrize("budget", [20_000, 10**9])
@pytest.mark.parametrize("source", ["array", "memmap", "store", "store-all"])
@pytest.mark.parametrize("kept", [True, False])
def test_blocked_equals_full_forward(tmp_path, monkeypatch, name, budget, source, kept):
    """Sources in memory (an array, a store caching every row) are pulled, others swept in
    ranges; a hidden layer's output is kept in memory when it fits (then pulled), else
    written to a scratch array (then swept)."""
    indptr, indices, deg = _graph()
    n = len(deg)
    x = np.random.default_rng(1).random((n, 12)).astype(np.float32)
    torch.manual_seed(0)
    model = build_model(name, in_dim=12, hidden=16, out_dim=5, num_layers=3, dropout=0.5).eval()
    fb = full_graph_block(indptr, indices)
    with torch.no_grad():
        ref = model(torch.from_numpy(x), [fb, fb, fb]).numpy()
    monkeypatch.setattr(blocked, "CHUNK_BYTES", 7 * 12 * 4)  # several source ranges per block
    monkeypatch.setattr(blocked, "SLICE_BYTES", 5 * 16 * 4)  # and finishing slices
    monkeypatch.setattr(blocked, "PULL_CHUNK_BYTES", 23 * 2 * 4 * 16)  # chunked pulls: many
    np.save(tmp_path / "x.npy", x)
    mm = np.load(tmp_path / "x.npy", mmap_mode="r")
    src = {
        "array": x,
        "memmap": mm,
        "store": DiskFeatures(mm, cache_bytes=40 * 48, priority=np.arange(n)[::-1]),
        "store-all": DiskFeatures(mm, cache_bytes=n * 48),
    }[source]
    if not kept:
        monkeypatch.setattr(blocked, "KEEP_SHARE", 0.0)
    count = [0]
    pulled = [0]
    pull = blocked.pull_sum

    def counted_pull(*args):
        pulled[0] += 1
        pull(*args)

    monkeypatch.setattr(blocked, "pull_sum", counted_pull)

    def new_array(rows, cols):
        count[0] += 1
        p = tmp_path / f"a{count[0]}.npy"
        return np.lib.format.open_memmap(p, mode="w+", dtype=np.float32, shape=(rows, cols))

    targets = np.array([0, 3, 9, 150, n - 1])
    got = np.full((len(targets), 5), np.nan, np.float32)

    def keep(pos, h):
        got[pos] = h

    layers = sum_layers(model)
    blocked_layers(
        layers,
        src,
        indptr,
        indices,
        deg,
        targets,
        keep,
        new_array=new_array,
        budget=budget,
        threads=2,
    )
    assert np.allclose(got, ref[targets], atol=1e-5)
    # a hidden layer's output (up to 19 KB) is kept when it fits half the budget, unless
    # told not to; else it goes to a scratch array
    if not kept:
        assert count[0] == 2
    elif budget > 10**6:
        assert count[0] == 0
    # the first layer pulls from inputs held in memory (SGC's projects them first: no pull),
    # the later ones from kept outputs
    first = source in ("array", "store-all") and name != "sgc"
    assert (pulled[0] > 0) == (first or count[0] < 2)


@pytest.mark.parametrize(
    ("name", "hidden", "expected"),
    [
        ("gin", 6, [True, True]),  # outputs narrower than the accumulators (12, then 6)
        ("sage", 12, [True, True]),  # as wide (12; then 10: layer 2's projection stored)
        ("gcn", 12, [True, True]),
        # layer 0 projects its inputs first (no pull); layer 1 stores layer 2's projection,
        # wider (10) than its accumulators (6): neither is packed
        ("sage", 6, [False, False]),
    ],
)
def test_a_kept_output_is_packed_into_its_accumulators(monkeypatch, name, hidden, expected):
    """A hidden layer pulled from memory in one block writes its kept output over its own
    accumulators (rows packed from their start, each slice after it was finished, in small
    slices) when the output is no wider: the outputs equal the full forward pass."""
    indptr, indices, deg = _graph()
    n = len(deg)
    x = np.random.default_rng(2).random((n, 12)).astype(np.float32)
    torch.manual_seed(1)
    model = build_model(name, in_dim=12, hidden=hidden, out_dim=5, num_layers=3, dropout=0.0)
    model = model.eval()
    fb = full_graph_block(indptr, indices)
    with torch.no_grad():
        ref = model(torch.from_numpy(x), [fb, fb, fb]).numpy()
    monkeypatch.setattr(blocked, "SLICE_BYTES", 5 * 16 * 4)  # many finishing slices
    accs, kept = [], []
    zeros, layer = blocked.huge_zeros, blocked.blocked_layer

    def recorded_zeros(shape, dtype):
        accs.append(zeros(shape, dtype))
        return accs[-1]

    def recorded_layer(*args, **kwargs):
        out = layer(*args, **kwargs)
        if out is not None:
            kept.append(out)
        return out

    monkeypatch.setattr(blocked, "huge_zeros", recorded_zeros)
    monkeypatch.setattr(blocked, "blocked_layer", recorded_layer)
    targets = np.arange(0, n, 7)
    got = np.full((len(targets), 5), np.nan, np.float32)

    def keep(pos, h):
        got[pos] = h

    blocked_layers(
        sum_layers(model), x, indptr, indices, deg, targets, keep, new_array=None, budget=10**9
    )
    assert np.allclose(got, ref[targets], atol=1e-5)
    assert len(kept) == 2  # both hidden layers kept in memory
    packed = [any(np.shares_memory(k, a) for a in accs) for k in kept]
    assert packed == expected


def test_blocks_respect_the_budget():
    indptr, _, deg = _graph()
    t = np.arange(len(deg))
    for per_edge in (blocked.EDGE_BYTES, 12):
        bl = blocked._blocks(indptr, t, 100, 5_000, per_edge)
        assert bl[0][0] == 0 and bl[-1][1] == len(t)
        for a, b in bl:
            cost = (deg[a:b] * per_edge + 100).sum()
            assert cost <= 5_000 or b == a + 1
            if b < len(t):  # blocks are as long as the budget allows
                assert cost + deg[b] * per_edge + 100 > 5_000
        assert blocked._blocks(indptr, t[:0], 100, 5_000, per_edge) == []


def test_working_bytes_count_the_in_edges_read_from_disk(tmp_path):
    indptr, indices, _ = _graph()
    np.save(tmp_path / "i.npy", indices)
    mm = np.load(tmp_path / "i.npy", mmap_mode="r")
    sl = sum_layers(build_model("sage", in_dim=4, hidden=8, out_dim=2, num_layers=2, dropout=0))[0]
    assert blocked.edge_bytes(indices) == blocked.EDGE_BYTES
    assert blocked.edge_bytes(mm) == blocked.EDGE_BYTES + 4
    assert blocked.target_bytes(sl, indices) == 4 * sl.width
    assert blocked.target_bytes(sl, mm) == 4 * sl.width + 8


def test_gat_is_not_a_sum():
    m = build_model("gat", in_dim=4, hidden=8, out_dim=2, num_layers=2, dropout=0.5)
    assert sum_layers(m) is None


def test_needed_nodes_grow_by_in_neighbours_per_layer():
    # in-neighbour CSR of 6 nodes: 1 <- 0, 2 <- 1, 3 <- 2, 4 <- 3 (a chain), 5 isolated
    indptr = np.array([0, 0, 1, 2, 3, 4, 4])
    indices = np.array([0, 1, 2, 3])
    got = blocked.needed_nodes(indptr, indices, 6, np.array([4]), 3)
    assert [g.tolist() for g in got] == [[2, 3, 4], [3, 4], [4]]
    # rows beyond the CSR (e.g. halo nodes) have no in-neighbours of their own
    got = blocked.needed_nodes(indptr[:3], indices[:1], 6, np.array([1, 5]), 2)
    assert [g.tolist() for g in got] == [[0, 1, 5], [1, 5]]
    assert blocked.needed_nodes(indptr, indices, 6, np.array([4]), 1)[0].tolist() == [4]


def test_row_writer_writes_runs(tmp_path):
    arr = np.lib.format.open_memmap(tmp_path / "a.npy", mode="w+", dtype=np.float32, shape=(10, 3))
    arr[:] = -1
    arr.flush()
    w = blocked.RowWriter(np.load(tmp_path / "a.npy", mmap_mode="r+"))
    ids = np.array([0, 1, 2, 5, 7, 8])
    w.write(ids, np.arange(18, dtype=np.float32).reshape(6, 3))
    w.close()
    got = np.load(tmp_path / "a.npy")
    np.testing.assert_array_equal(got[ids], np.arange(18).reshape(6, 3))
    assert (got[[3, 4, 6, 9]] == -1).all()


def _last_layer(model, x, indptr, indices, deg, targets, budget: int) -> np.ndarray:
    """The model's last-layer rows of ``targets`` by :func:`blocked_layers` (5 columns;
    hidden layers' outputs in memory)."""
    got = np.full((len(targets), 5), np.nan, np.float32)

    def keep(pos, h):
        got[pos] = h

    blocked_layers(
        sum_layers(model),
        x,
        indptr,
        indices,
        deg,
        targets,
        keep,
        new_array=lambda r, c: np.zeros((r, c), np.float32),
        budget=budget,
        threads=2,
    )
    return got


@pytest.mark.parametrize("name", ["sage", "gcn"])
@pytest.mark.parametrize("budget", [20_000, 10**9])
def test_a_structure_on_disk_is_read_span_by_span(tmp_path, monkeypatch, name, budget):
    """Neighbour lists memory-mapped from a file are read in spans (here of 10 entries, so
    every block and every layer needs many) into memory, never through the map: the same
    outputs and the same needed nodes as with the lists in memory."""
    indptr, indices, deg = _graph(seed=3)
    n = len(deg)
    np.save(tmp_path / "indices.npy", indices)
    on_disk = np.load(tmp_path / "indices.npy", mmap_mode="r")
    monkeypatch.setattr(blocked, "SPAN_BYTES", 10 * indices.itemsize)
    targets = np.array([1, 2, 40, 41, 200, n - 25])
    for layers_n in (1, 2, 3):
        want = blocked.needed_nodes(indptr, indices, n, targets, layers_n)
        got = blocked.needed_nodes(indptr, on_disk, n, targets, layers_n)
        assert all(np.array_equal(a, b) for a, b in zip(want, got, strict=True))
    ptr, src = blocked._in_edges(indptr, on_disk, targets)
    for i, t in enumerate(targets):
        assert np.array_equal(src[ptr[i] : ptr[i + 1]], indices[indptr[t] : indptr[t + 1]])
    assert blocked._in_edges(indptr, indices, targets) is None  # in memory: used as is
    x = np.random.default_rng(1).random((n, 12)).astype(np.float32)
    torch.manual_seed(0)
    model = build_model(name, in_dim=12, hidden=16, out_dim=5, num_layers=2, dropout=0.5).eval()
    outs = []
    for ind in (indices, on_disk):
        outs.append(_last_layer(model, x, indptr, ind, deg, targets, budget))
    assert np.allclose(outs[0], outs[1], atol=1e-6) and not np.isnan(outs[1]).any()


@pytest.mark.parametrize("name", ["sage", "gcn"])
@pytest.mark.parametrize("layers_n", [2, 3])
def test_the_last_layers_lists_are_read_once(tmp_path, monkeypatch, name, layers_n):
    """The needed-nodes pass reads the targets' lists from the file; the last layer takes
    them from memory (:class:`blocked.Lists`) instead of reading them again: the same
    outputs, the file's entries read less by exactly one read of those lists."""
    indptr, indices, deg = _graph(seed=4)
    n = len(deg)
    np.save(tmp_path / "indices.npy", indices)
    on_disk = np.load(tmp_path / "indices.npy", mmap_mode="r")
    monkeypatch.setattr(blocked, "SPAN_BYTES", 10 * indices.itemsize)
    targets = np.array([1, 2, 40, 41, 200, n - 25])
    read = [0]
    span = blocked.read_span

    def counted(a, lo, hi):
        read[0] += hi - lo
        return span(a, lo, hi)

    monkeypatch.setattr(blocked, "read_span", counted)
    blocked._in_edges(indptr, on_disk, targets)
    once = read[0]  # entries one read of the targets' lists takes
    x = np.random.default_rng(1).random((n, 12)).astype(np.float32)
    torch.manual_seed(0)
    model = build_model(name, in_dim=12, hidden=16, out_dim=5, num_layers=layers_n, dropout=0.5)
    model = model.eval()
    outs, reads = [], []
    for share, ind in ((blocked.LISTS_SHARE, on_disk), (0.0, on_disk), (0.0, indices)):
        monkeypatch.setattr(blocked, "LISTS_SHARE", share)
        read[0] = 0
        outs.append(_last_layer(model, x, indptr, ind, deg, targets, 10**9))
        reads.append(read[0])
    assert not np.isnan(outs[0]).any()
    np.testing.assert_allclose(outs[0], outs[2], atol=1e-6)
    np.testing.assert_allclose(outs[1], outs[2], atol=1e-6)
    assert once > 0 and reads[0] == reads[1] - once and reads[2] == 0


def test_held_lists_of_a_subset():
    """:meth:`blocked.Lists.of`: the lists of any subset of the held nodes, in order; None
    when a node is not held."""
    indptr, indices, _ = _graph(seed=5)
    nodes = np.array([3, 8, 9, 100, 250])
    ptr, src = blocked._in_edges(indptr, indices, nodes, always=True)
    lists = blocked.Lists(nodes, ptr, src)
    assert lists.of(nodes)[1] is src
    sub = np.array([8, 100, 250])
    p2, s2 = lists.of(sub)
    for i, t in enumerate(sub):
        assert s2[p2[i] : p2[i + 1]].tolist() == indices[indptr[t] : indptr[t + 1]].tolist()
    assert lists.of(np.array([8, 101])) is None and lists.of(np.array([251])) is None


def test_row_writer_counts_the_pages_scattered_rows_dirty(tmp_path, monkeypatch):
    """Rows far apart dirty a page each: the writer flushes by pages, not by row bytes."""
    n = 4096
    arr = np.lib.format.open_memmap(tmp_path / "a.npy", mode="w+", dtype=np.float32, shape=(n, 2))
    arr.flush()
    monkeypatch.setattr(blocked, "FLUSH_BYTES", 10 * 4096)
    w = blocked.RowWriter(np.load(tmp_path / "a.npy", mmap_mode="r+"))
    flushes = []
    real = w.flush
    monkeypatch.setattr(w, "flush", lambda: flushes.append(w.pending) or real())
    ids = np.arange(0, n, 1024)  # 8 KiB apart: 4 rows, 4 pages
    for _ in range(5):
        w.write(ids, np.ones((len(ids), 2), np.float32))
    assert len(flushes) == 2 and all(f >= 10 * 4096 for f in flushes)
    w.close()
    assert blocked._pages(4090, 8) == 8192 and blocked._pages(0, 4096) == 4096
    assert blocked._pages(5, 0) == 0


@pytest.mark.parametrize("budget", [20_000, 10**9])
def test_a_block_reads_its_sources_and_targets_rows_once(tmp_path, monkeypatch, budget):
    """The targets' own rows come from the sweep of the sources (one pass over the file per
    block, not a second one for the targets): with nothing cached and one block, the rows
    read are exactly the union of the targets and their in-neighbours; the outputs are the
    full forward's."""
    indptr, indices, deg = _graph(seed=5)
    n = len(deg)
    x = np.random.default_rng(2).random((n, 12)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    store = DiskFeatures(np.load(tmp_path / "x.npy", mmap_mode="r"), cache_bytes=0)
    torch.manual_seed(0)
    model = build_model("sage", in_dim=12, hidden=16, out_dim=5, num_layers=1, dropout=0.0)
    model.eval()
    monkeypatch.setattr(blocked, "CHUNK_BYTES", 7 * 12 * 4)  # several source ranges
    targets = np.array([2, 3, 9, 150, n - 1])  # n - 1: no in-edges, a range of its own
    got = np.full((len(targets), 5), np.nan, np.float32)

    def keep(pos, h):
        got[pos] = h

    blocked_layers(
        sum_layers(model),
        store,
        indptr,
        indices,
        deg,
        targets,
        keep,
        new_array=lambda r, c: np.zeros((r, c), np.float32),
        budget=budget,
        threads=2,
    )
    with torch.no_grad():
        ref = model(torch.from_numpy(x), [full_graph_block(indptr, indices)]).numpy()
    assert np.allclose(got, ref[targets], atol=1e-5)
    sources = np.concatenate([indices[indptr[t] : indptr[t + 1]] for t in targets])
    if budget > 10**6:  # one block
        assert store.stats.rows_read == len(np.union1d(sources, targets))


def _reference_pull(indptr, indices, targets, rows, weights, width):
    acc = np.zeros((len(targets), width), np.float64)
    for i, t in enumerate(targets):
        for u in indices[indptr[t] : indptr[t + 1]]:
            acc[i] += (1.0 if weights is None else weights[u]) * rows[u, :width]
    return acc


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int8"])
@pytest.mark.parametrize("n_targets", [4, 600])  # one thread; targets in parallel
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("spans", [False, True])
def test_pull_sums_each_targets_stored_rows(monkeypatch, dtype, n_targets, weighted, spans):
    """Hand-made lists: node 0 has no in-edge, node 1 a self-loop, node 2 one edge twice; the
    sum of the decoded rows (first 5 of 6 columns, weighted per source) for any order of
    targets, equal to a float64 reference within float32 rounding. With ``spans``, sorted
    lists over rows larger than two spans are summed span by span of 64 source ids (not
    int8 rows: pulled whole)."""
    rng = np.random.default_rng(3)
    n = 700
    lists = [[], [1, 5], [4, 4, 6]] + [
        list(rng.integers(0, n, rng.integers(0, 9))) for _ in range(n - 3)
    ]
    used = []
    if spans:
        lists = [sorted(a) for a in lists]
        itemsize = 1 if dtype == "int8" else (4 if dtype == "float32" else 2)
        monkeypatch.setattr(blocked, "PULL_SPAN_BYTES", 64 * 6 * itemsize)
        kernel = blocked.BK.pull_chunk_kernel
        monkeypatch.setattr(
            blocked.BK, "pull_chunk_kernel", lambda *a: used.append(a) or kernel(*a)
        )
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum([len(a) for a in lists], out=indptr[1:])
    indices = np.concatenate([np.asarray(a, np.int32) for a in lists])
    values = rng.standard_normal((n, 6)).astype(np.float32)
    scales = None
    if dtype == "float32":
        rows, decoded = values, values
    elif dtype == "float16":
        rows = values.astype(np.float16)
        decoded = rows.astype(np.float32)
    elif dtype == "bfloat16":  # the top half of the float32 bits
        rows = (values.view(np.uint32) >> 16).astype(np.uint16)
        decoded = (rows.astype(np.uint32) << 16).view(np.float32)
    else:
        rows = rng.integers(-127, 128, (n, 6)).astype(np.int8)
        scales = rng.random(n).astype(np.float32)
        decoded = rows.astype(np.float32) * scales[:, None]
    weights = rng.random(n).astype(np.float32) if weighted else None
    targets = np.concatenate([[2, 0, 1], rng.permutation(n)[: n_targets - 3]])
    acc = np.zeros((len(targets), 5), np.float32)
    blocked.pull_sum(indptr, indices, targets, (rows, scales), weights, acc)
    ref = _reference_pull(indptr, indices, targets, decoded.astype(np.float64), weights, 5)
    np.testing.assert_allclose(acc, ref, rtol=1e-5, atol=1e-5)
    assert (acc[1] == 0).all()  # no in-edge
    w = np.ones(n) if weights is None else weights
    np.testing.assert_allclose(acc[0], 2 * w[4] * decoded[4, :5] + w[6] * decoded[6, :5], rtol=1e-5)
    assert bool(used) == (spans and dtype != "int8")


def test_pull_rejects_what_it_cannot_fill():
    indptr, indices = np.array([0, 1]), np.array([0], np.int32)
    rows = np.ones((1, 3), np.float32)
    with pytest.raises(ValueError, match="cannot fill"):
        blocked.pull_sum(
            indptr, indices, np.array([0]), (rows, None), None, np.zeros((1, 4), np.float32)
        )
    with pytest.raises(ValueError, match="int8 rows need their scales"):
        blocked.pull_sum(
            indptr,
            indices,
            np.array([0]),
            (rows.astype(np.int8), None),
            None,
            np.zeros((1, 3), np.float32),
        )


@pytest.mark.parametrize("budget", [6_000, 20_000, 10**6])
def test_a_chunked_plan_stays_within_its_budget(tmp_path, budget):
    """Sources on disk: the largest block (accumulators, own rows, cursors per target), the
    chunk buffers and the finishing slices together fit the budget."""
    indptr, indices, deg = _graph()
    n = len(deg)
    np.save(tmp_path / "x.npy", np.ones((n, 12), np.float16))
    src = np.load(tmp_path / "x.npy", mmap_mode="r")
    torch.manual_seed(0)
    model = build_model("gcn", in_dim=12, hidden=16, out_dim=5, num_layers=2, dropout=0.0).eval()
    sl = sum_layers(model)[0]
    rows = blocked.LayerRows(src)
    graph = (indptr, indices, torch.from_numpy(deg))
    todo = np.arange(n)
    plan = blocked._plan_layer(sl, rows, None, graph, todo, budget, None)
    assert blocked._chunk_code(rows) == 1  # chunks read as stored float16 rows
    rows.close()
    assert plan.chunk_rows > 0 and plan.held is None  # chunked: sources read from disk
    per_target = 4 * sl.width + 2 * 12 + 24  # accumulator, own float16 row, cursors
    largest = max(blocked._block_cost(indptr, todo[a:b], per_target, 0) for a, b in plan.blocks)
    used = largest + plan.chunk_rows * blocked._Chunks.bytes_per_row(12, 1) + plan.read_bytes
    used += plan.weights.nbytes  # GCN's weight per source
    assert used <= budget or max(b - a for a, b in plan.blocks) == 1
    assert [b for _, b in plan.blocks][-1] == n


def test_an_output_is_kept_only_when_the_layer_still_runs_in_one_block(monkeypatch):
    """Keeping a hidden layer's output in memory must not split the layer into blocks (each
    a pass over its input): with room for one block only without the output, it goes to a
    scratch array."""
    indptr, indices, deg = _graph()
    n = len(deg)
    x = np.random.default_rng(1).random((n, 12)).astype(np.float32)
    torch.manual_seed(0)
    model = build_model("gin", in_dim=12, hidden=16, out_dim=5, num_layers=2, dropout=0.0).eval()
    sl = sum_layers(model)[0]
    graph = (indptr, indices, torch.from_numpy(deg))
    todo = np.arange(n)
    nbytes = 4 * n * 16
    one = n * 4 * 12 + 10_000  # every accumulator, and the finishing slices' buffers
    monkeypatch.setattr(blocked, "KEEP_SHARE", 1.0)
    assert blocked.layer_blocks(sl, x, graph, todo, pre=None, budget=one) == 1
    assert not blocked._keeps(sl, x, graph, todo, None, one, 0, nbytes, None, False, None)
    assert blocked._keeps(sl, x, graph, todo, None, one + nbytes, 0, nbytes, None, False, None)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_own_rows_spill_to_scratch_when_that_saves_a_pass(tmp_path, monkeypatch, dtype):
    """A chunked pull whose targets' own rows would cost it blocks (a pass over the input
    each) writes them to a scratch file as the chunks pass and reads them back to finish:
    fewer blocks, the same outputs as the full forward pass, every dtype's own rows."""
    from shoal.utils.featdtype import encode

    indptr, indices, deg = _graph()
    n = len(deg)
    x = np.random.default_rng(1).random((n, 12)).astype(np.float32)
    stored = encode(x, dtype)[0]
    np.save(tmp_path / "x.npy", stored)
    src = np.load(tmp_path / "x.npy", mmap_mode="r")
    exact = blocked.LayerRows(src).read(np.arange(n))  # the rows as stored, decoded
    torch.manual_seed(0)
    model = build_model("sage", in_dim=12, hidden=16, out_dim=5, num_layers=2, dropout=0.0)
    model.eval()
    fb = full_graph_block(indptr, indices)
    with torch.no_grad():
        ref = model(torch.from_numpy(exact), [fb, fb]).numpy()
    sl = sum_layers(model)[0]
    graph = (indptr, indices, torch.from_numpy(deg))
    targets = np.arange(0, n, 7)
    todo = blocked.needed_nodes(indptr, indices, n, targets, 2)[0]  # the first layer's
    rows = blocked.LayerRows(src)
    saved = []
    for budget in (9_000, 12_000, 16_000, 24_000):
        kept = blocked._plan_layer(sl, rows, None, graph, todo, budget, None)
        spilt = blocked._plan_layer(sl, rows, None, graph, todo, budget, None, spill=True)
        assert not kept.spill and len(spilt.blocks) <= len(kept.blocks)
        assert spilt.spill == (len(spilt.blocks) < len(kept.blocks))
        if spilt.spill:
            saved.append(budget)
    rows.close()
    assert saved, "no budget where spilling own rows saves a block"
    made = []

    def spill(r, c, dt):
        made.append(np.dtype(dt))
        p = tmp_path / f"own{len(made)}.npy"
        return np.lib.format.open_memmap(p, mode="w+", dtype=dt, shape=(r, c))

    got = np.full((len(targets), 5), np.nan, np.float32)

    def keep(pos, h):
        got[pos] = h

    monkeypatch.setattr(blocked, "KEEP_SHARE", 0.0)  # the first layer's budget: all of it
    blocked_layers(
        sum_layers(model),
        src,
        indptr,
        indices,
        deg,
        targets,
        keep,
        new_array=lambda r, c: np.zeros((r, c), np.float32),
        budget=saved[0],
        threads=2,
        spill=spill,
    )
    assert made and made[0].itemsize == (4 if dtype == "float32" else 2)
    assert np.allclose(got, ref[targets], atol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("source", ["memmap", "store", "store-released"])
@pytest.mark.parametrize("name", ["sage", "gcn"])
def test_a_chunked_pull_reads_16_bit_rows_as_stored(tmp_path, monkeypatch, dtype, source, name):
    """Chunks of float16 or bfloat16 sources read from disk are read and summed as stored
    (half the bytes, twice the ids a chunk), laid out by id (no slot table): from a
    file-backed array and from a store that caches nothing, or whose cache was released;
    the outputs equal the full forward pass over the decoded rows, GCN's per-source weights
    included."""
    from shoal.utils.featdtype import encode

    indptr, indices, deg = _graph()
    n = len(deg)
    x = np.random.default_rng(2).random((n, 12)).astype(np.float32)
    np.save(tmp_path / "x.npy", encode(x, dtype)[0])
    mm = np.load(tmp_path / "x.npy", mmap_mode="r")
    exact = blocked.LayerRows(mm).read(np.arange(n))  # the rows as stored, decoded
    src = {
        "memmap": mm,
        "store": DiskFeatures(mm, cache_bytes=0),
        "store-released": DiskFeatures(mm, cache_bytes=n * 24),
    }[source]
    if source == "store-released":
        assert src.release_cache() > 0
    torch.manual_seed(0)
    model = build_model(name, in_dim=12, hidden=16, out_dim=5, num_layers=2, dropout=0.0).eval()
    fb = full_graph_block(indptr, indices)
    with torch.no_grad():
        ref = model(torch.from_numpy(exact), [fb, fb]).numpy()
    monkeypatch.setattr(blocked, "PULL_CHUNK_BYTES", 23 * 2 * 2 * 12)  # many chunks
    codes = []
    kernel = blocked.BK.pull_chunk_kernel

    slots = []

    def spied(code):
        codes.append(code)
        pull = kernel(code)

        def counted(*args):
            slots.append(len(args[5]))
            return pull(*args)

        return counted

    monkeypatch.setattr(blocked.BK, "pull_chunk_kernel", spied)
    targets = np.array([0, 3, 9, 150, n - 1])
    got = np.full((len(targets), 5), np.nan, np.float32)

    def keep(pos, h):
        got[pos] = h

    blocked_layers(
        sum_layers(model),
        src,
        indptr,
        indices,
        deg,
        targets,
        keep,
        new_array=lambda r, c: np.zeros((r, c), np.float32),
        budget=16_000,
        threads=2,
    )
    assert np.allclose(got, ref[targets], atol=1e-5)
    if name == "sage":  # GCN's first layer projects its inputs first: swept, not pulled
        assert codes and codes[0] == (1 if dtype == "float16" else 2)
        assert slots and not any(slots)  # dense chunks: rows found by id, no slot table
    if source != "memmap":
        assert src.stats.bytes_read > 0  # the store's reads are counted
