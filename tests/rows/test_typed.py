"""A typed graph's rows as one row source (``shoal.rows.typed``, issue 53): each type's rows
padded with zeros to the widest type, featureless types all zeros at no I/O, read through the
same interface (``dest``/``out2``, counters) as every other source, so the budgeted store
serves them unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.data.format import GraphDir
from shoal.data.hetero import HeteroSchema
from shoal.data.hetero_writer import HeteroGraphWriter
from shoal.partition.base import Assignment
from shoal.partition.io import write_assignment
from shoal.rows.budget import RESERVE, BudgetPlan
from shoal.rows.budgeted import BudgetedStore
from shoal.rows.direct import RowFile, RowReader
from shoal.rows.featstore import DiskFeatures
from shoal.rows.memory import MemoryRows
from shoal.rows.source import ReadStats, RowSource
from shoal.rows.typed import Segment, TypedRows, open_part_rows, open_typed_rows
from shoal.store import Store, build_store

# types: 0 (50 rows, 6 wide), 1 (30 rows, featureless), 2 (no rows, 4 wide), 3 (40 rows, 3 wide)
COUNTS = [50, 30, 0, 40]
WIDTHS = [6, 0, 4, 3]


def _arrays(seed: int = 0, dtype=np.float32) -> list[np.ndarray | None]:
    rng = np.random.default_rng(seed)
    return [
        None if w == 0 else rng.normal(size=(c, w)).astype(dtype)
        for c, w in zip(COUNTS, WIDTHS, strict=True)
    ]


def _padded(arrays, types_in_order: np.ndarray, member_rows: np.ndarray, dim: int) -> np.ndarray:
    """The reference: row ``k`` is row ``member_rows[k]`` of type ``types_in_order[k]``'s
    array, zero-padded to ``dim``."""
    ref = np.zeros((len(types_in_order), dim), np.float32)
    for k, (t, r) in enumerate(zip(types_in_order, member_rows, strict=True)):
        if arrays[t] is not None:
            ref[k, : arrays[t].shape[1]] = arrays[t][r]
    return ref


def _contiguous_ref(arrays) -> np.ndarray:
    types = np.repeat(np.arange(len(COUNTS)), COUNTS)
    rows = np.concatenate([np.arange(c) for c in COUNTS])
    return _padded(arrays, types, rows, max(WIDTHS))


@pytest.fixture
def files(tmp_path):
    """The per-type arrays and their memory maps (featureless types None)."""
    arrays = _arrays()
    maps = []
    for t, a in enumerate(arrays):
        if a is None:
            maps.append(None)
            continue
        np.save(tmp_path / f"t{t}.npy", a)
        maps.append(np.load(tmp_path / f"t{t}.npy", mmap_mode="r") if len(a) else a)
    return arrays, maps


def _contiguous(maps) -> TypedRows:
    members = [
        None if m is None else RowReader(RowFile.of(m), threads=2) if len(m) else MemoryRows(m)
        for m in maps
    ]
    return TypedRows(members, [Segment.contiguous(COUNTS)], widths=WIDTHS)


# ------------------------------------------------------------------ the source


def test_a_typed_source_reads_padded_rows_and_counts_real_bytes(files):
    arrays, maps = files
    src = _contiguous(maps)
    ref = _contiguous_ref(arrays)
    assert isinstance(src, RowSource)
    assert (src.num_rows, src.dim, src.row_bytes, src.dtype) == (120, 6, 24, np.float32)
    assert src.path.endswith("t0.npy") and src.widths.tolist() == WIDTHS
    rng = np.random.default_rng(1)
    read = rows = 0
    for size in (1, 7, 60, 120):
        ids = np.sort(rng.choice(120, size, replace=False))
        out = np.full((size + 3, 6), np.nan, np.float32)  # padding must be written, not kept
        got = src.read(ids, out)
        assert np.array_equal(out[:size], ref[ids])
        types = np.repeat(np.arange(4), COUNTS)[ids]
        real = int(sum(WIDTHS[t] * 4 for t in types))
        assert src.bytes_of(ids) == real and src.bytes_for(ids) == size * 24
        assert src.type_of(ids).tolist() == types.tolist()
        assert got >= real  # whole pages of the rows' own bytes
        read += got
        rows += int(sum(WIDTHS[t] > 0 for t in types))
    # what the files' reads counted: the rows read (never a featureless one), their pages
    assert src.stats.rows == rows and src.stats.bytes == read
    src.close()
    src.close()  # idempotent


def test_stats_count_only_the_rows_really_read():
    arrays = _arrays()
    members = [None if a is None else MemoryRows(a) for a in arrays]
    # a counting member: bytes are its own rows' exactly (no pages)
    counted = _Counting(arrays[3])
    members[3] = counted
    src = TypedRows(members, [Segment.contiguous(COUNTS)], widths=WIDTHS)
    ids = np.array([0, 55, 60, 80, 81, 119])  # type 0, 1, 1, 3, 3, 3
    out = np.empty((6, 6), np.float32)
    assert src.read(ids, out) == 3 * 3 * 4  # type 0 is in memory: nothing read
    assert np.array_equal(out, _contiguous_ref(arrays)[ids])
    assert src.stats.bytes == 36 and src.stats.rows == 3 and src.stats.calls == 1
    assert counted.asked[-1].tolist() == [0, 1, 39]  # one sorted call, member rows
    only_featureless = np.array([50, 51, 79])
    assert src.read(only_featureless, out) == 0 and not out[:3].any()
    assert src.stats.calls == 1  # a featureless row costs no read
    assert src.bytes_of(only_featureless) == 0


@pytest.mark.parametrize("with_out2", [False, True])
def test_dest_and_out2_as_every_source(files, with_out2):
    arrays, maps = files
    src = _contiguous(maps)
    ref = _contiguous_ref(arrays)
    rng = np.random.default_rng(5)
    ids = np.sort(rng.choice(120, 70, replace=False))
    out = np.full((90, 6), np.nan, np.float32)
    out2 = np.full((40, 6), np.nan, np.float32)
    if with_out2:
        to2 = rng.random(70) < 0.4
        dest = np.empty(70, np.int64)
        dest[~to2] = rng.permutation(90)[: int((~to2).sum())]
        dest[to2] = -1 - rng.permutation(40)[: int(to2.sum())]
        src.read(ids, out, dest, out2)
        assert np.array_equal(out[dest[~to2]], ref[ids[~to2]])
        assert np.array_equal(out2[-1 - dest[to2]], ref[ids[to2]])
        untouched = np.setdiff1d(np.arange(40), -1 - dest[to2])
        assert np.isnan(out2[untouched]).all()
    else:
        dest = rng.permutation(90)[:70]
        src.read(ids, out, dest)
        assert np.array_equal(out[dest], ref[ids])
        assert np.isnan(out[np.setdiff1d(np.arange(90), dest)]).all()
    with pytest.raises(ValueError, match="sorted, unique"):
        src.read(ids[::-1], out)
    with pytest.raises(ValueError, match="out must be"):
        src.read(ids, np.empty((70, 5), np.float32))
    with pytest.raises(ValueError, match="dest must"):
        src.read(ids, out, -np.ones(70, np.int64))
    assert src.read(np.empty(0, np.int64), out) == 0
    src.close()


def test_one_type_reads_exactly_as_its_member(files):
    arrays, maps = files
    member = RowReader(RowFile.of(maps[0]), threads=2)
    alone = RowReader(RowFile.of(maps[0]), threads=2)
    src = TypedRows([member], [Segment.contiguous([50])])
    assert (src.num_rows, src.dim, src.row_bytes, src.path) == (50, 6, 24, alone.path)
    rng = np.random.default_rng(2)
    for _ in range(5):
        ids = np.sort(rng.choice(50, int(rng.integers(1, 50)), replace=False))
        dest = rng.permutation(len(ids))
        a, b = np.empty((len(ids), 6), np.float32), np.empty((len(ids), 6), np.float32)
        assert src.read(ids, a, dest) == alone.read(ids, b, dest)
        assert np.array_equal(a, b) and np.array_equal(a[dest], arrays[0][ids])
    assert src.stats == alone.stats
    src.close()
    alone.close()


def test_a_mixed_segment_after_a_contiguous_one():
    """A part's layout: core rows type-contiguous, then halo rows of mixed types; each type's
    member is its core rows then its halo rows."""
    rng = np.random.default_rng(3)
    core = [rng.normal(size=(c, w)).astype(np.float32) for c, w in ((4, 5), (3, 2))]
    htypes = np.array([1, 0, 0, 2, 1, 0, 2, 1])
    halo = [
        rng.normal(size=(int((htypes == t).sum()), w)).astype(np.float32)
        for t, w in ((0, 5), (1, 2))
    ]
    members = [MemoryRows(np.concatenate([core[t], halo[t]])) for t in range(2)] + [None]
    segs = [Segment.contiguous([4, 3, 0]), Segment.mixed(htypes, 3)]
    src = TypedRows(members, segs)
    assert src.num_rows == 15 and src.dim == 5 and src.widths.tolist() == [5, 2, 0]
    # the reference, row by row: halo node k of type t is row j of t's halo rows
    ref = np.zeros((15, 5), np.float32)
    ref[:4] = core[0]
    ref[4:7, :2] = core[1]
    seen = [0, 0, 0]
    for k, t in enumerate(htypes):
        if t < 2:
            ref[7 + k, : halo[t].shape[1]] = halo[t][seen[t]]
        seen[t] += 1
    for ids in (np.arange(15), np.array([0, 6, 7, 8, 11, 14]), np.arange(7, 15), np.array([10])):
        out = np.full((len(ids), 5), np.nan, np.float32)
        src.read(ids, out)
        assert np.array_equal(out, ref[ids])
    assert src.type_of(np.arange(15)).tolist() == [0] * 4 + [1] * 3 + htypes.tolist()
    assert src.bytes_of(np.arange(15)) == 4 * (4 * 5 + 3 * 2 + 3 * 5 + 3 * 2)


def test_bad_members_are_refused():
    a = np.zeros((3, 2), np.float32)
    with pytest.raises(ValueError, match="differ in dtype"):
        TypedRows([MemoryRows(a), MemoryRows(a.astype(np.float64))], [Segment.contiguous([3, 3])])
    with pytest.raises(ValueError, match="holds 3 rows, its segments 4"):
        TypedRows([MemoryRows(a)], [Segment.contiguous([4])])
    with pytest.raises(ValueError, match="no node type has features"):
        TypedRows([None], [Segment.contiguous([4])])
    with pytest.raises(ValueError, match="type 1 has 2 rows of width 3"):
        TypedRows([MemoryRows(a), None], [Segment.contiguous([3, 2])], widths=[2, 3])
    with pytest.raises(ValueError, match=r"types must be in \[0, 2\)"):
        Segment.mixed([0, 2], 2)


# ------------------------------------------------------------------ the budgeted store


class _Counting:
    """An in-memory member that records the rows it is asked for."""

    def __init__(self, arr: np.ndarray) -> None:
        self.arr, self.asked, self.stats = arr, [], ReadStats()
        self.num_rows, self.dim, self.dtype = arr.shape[0], arr.shape[1], arr.dtype
        self.row_bytes, self.path = arr.shape[1] * arr.itemsize, "<counting>"

    def bytes_for(self, ids):
        return len(ids) * self.row_bytes

    def read(self, ids, out, dest=None, out2=None):
        assert len(ids) < 2 or (np.diff(ids) > 0).all()
        out[np.arange(len(ids)) if dest is None else dest] = self.arr[ids]
        self.asked.append(np.asarray(ids).copy())
        self.stats.add(len(ids), self.bytes_for(ids), 1)
        return self.bytes_for(ids)

    def close(self):
        pass


@pytest.mark.parametrize("cache_rows", [0, 40, 120])
def test_the_feature_store_serves_typed_rows(files, cache_rows):
    arrays, maps = files
    ref = _contiguous_ref(arrays)
    rng = np.random.default_rng(cache_rows)
    fs = DiskFeatures(
        _contiguous(maps), cache_bytes=cache_rows * 24, priority=rng.permutation(120), threads=2
    )
    assert fs.dim == 6 and fs.cached_rows == cache_rows
    batches = [rng.integers(0, 120, 50), np.array([0, 119, 50, 79, 0]), np.arange(120)]
    w = fs.window(batches)
    for b in batches:
        assert np.array_equal(w.gather(b), ref[b])
        assert np.array_equal(fs.gather(b).numpy(), ref[b])
    fs.close()


def test_the_budgeted_store_takes_typed_rows(files):
    arrays, maps = files
    plan = BudgetPlan(RESERVE + 10**9, "test", RESERVE, 0, True, 16_384, 0, 120 * 24)
    store = BudgetedStore(_contiguous(maps), plan, threads=2)
    ids = np.array([5, 119, 3, 5, 70, 60])
    assert np.array_equal(store.features.gather(ids).numpy(), _contiguous_ref(arrays)[ids])
    store.features.close()


# ------------------------------------------------------------------ openers


def _typed_graph(path) -> GraphDir:
    """papers 0-3 (3 wide), authors 4-6 (2 wide), topics 7-8 (featureless), venues (none)."""
    schema = HeteroSchema.of(
        {"paper": 4, "author": 3, "topic": 2, "venue": 0},
        [("author", "writes", "paper"), ("paper", "cites", "paper"), ("topic", "of", "paper")],
        target="paper",
    )
    with HeteroGraphWriter(path, schema, add_reverse=False) as w:
        w.add_relation(("author", "writes", "paper"), [[0, 0], [0, 1], [1, 1], [2, 3]])
        w.add_relation("cites", [[0, 1], [2, 1], [3, 3], [1, 0], [3, 2]])
        w.add_relation(("topic", "of", "paper"), [[0, 0], [1, 2], [1, 3]])
        w.write_node_features("paper", np.arange(12, dtype=np.float32).reshape(4, 3))
        w.write_node_features("author", 10 + np.arange(6, dtype=np.float32).reshape(3, 2))
        w.write_labels([0, 1, 1, 0], num_classes=2)
        w.write_split("train", [0, 2])
        w.write_split("test", [1, 3])
    return GraphDir.open(path)


def _graph_ref() -> np.ndarray:
    ref = np.zeros((9, 3), np.float32)
    ref[:4] = np.arange(12).reshape(4, 3)
    ref[4:7, :2] = 10 + np.arange(6).reshape(3, 2)
    return ref


def test_the_graph_opener_reads_in_original_id_order(tmp_path):
    g = _typed_graph(tmp_path / "g")
    src = open_typed_rows(g, threads=2)
    assert isinstance(src, TypedRows) and src.num_rows == 9 and src.dim == 3
    assert isinstance(src.members[0], RowReader) and src.members[2] is None
    out = np.empty((9, 3), np.float32)
    src.read(np.arange(9), out)
    assert np.array_equal(out, _graph_ref())
    assert src.stats.bytes > 0 and src.bytes_of(np.arange(9)) == (12 + 6) * 4
    src.close()


@pytest.mark.parametrize(
    "node_part", [[0] * 9, [0, 1, 0, 1, 1, 0, 1, 0, 1], [2, 0, 1, 0, 2, 1, 0, 2, 1]]
)
def test_the_part_opener_reads_core_then_halo_rows_in_local_order(tmp_path, node_part):
    g = _typed_graph(tmp_path / "g")
    node_part = np.asarray(node_part)
    p = int(node_part.max()) + 1
    write_assignment(tmp_path / "a", Assignment(node_part, p, "hash"), g)
    build_store(g, tmp_path / "a", tmp_path / "s", halo_features=True, show_progress=False)
    store = Store.open(tmp_path / "s")
    ref = _graph_ref()
    for part in store.parts():
        src = open_part_rows(part, threads=2)
        assert src.num_rows == part.num_nodes and src.dim == 3
        orig = np.asarray(part.orig_ids, np.int64)  # core then halo, local order
        out = np.full((part.num_nodes, 3), np.nan, np.float32)
        src.read(np.arange(part.num_nodes), out)
        assert np.array_equal(out, ref[orig])
        core = open_part_rows(part, halo=False, threads=2)
        assert core.num_rows == part.num_core
        src.close()
        core.close()
    # a rank's parts stacked: each part's core rows, then the next part's
    both = open_part_rows(store.parts(), halo=False, threads=2)
    out = np.empty((both.num_rows, 3), np.float32)
    both.read(np.arange(both.num_rows), out)
    assert np.array_equal(out, ref[store.to_orig(np.arange(store.num_nodes))])
    both.close()
