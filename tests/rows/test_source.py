"""The row-source interface: the three implementations conform, a memory-mapped array is
recognised through public attributes (``file_of``), and another source defined here, with no
change elsewhere, plugs into the budgeted store and gives the file's batches."""

from __future__ import annotations

import mmap
import threading

import numpy as np
import pytest

from shoal.rows.budget import RESERVE, BudgetPlan
from shoal.rows.budgeted import BudgetedStore
from shoal.rows.direct import RowFile, RowReader
from shoal.rows.memory import MemoryRows
from shoal.rows.opener import open_rows
from shoal.rows.source import ReadStats, RowSource
from shoal.rows.stacked import StackedReader
from shoal.sample.sampler import NeighborSampler
from shoal.training import TrainData
from shoal.training.batches import BatchLoader
from shoal.utils.mapped import file_of, mapping_of


class CountingRows:
    """A row source of an in-memory array that counts what it is asked for: a second backend
    written against the protocol alone."""

    def __init__(self, arr: np.ndarray) -> None:
        self.arr = np.ascontiguousarray(arr)
        self.stats = ReadStats()
        self.asked: list[np.ndarray] = []
        self.closed = False
        self._lock = threading.Lock()

    @property
    def num_rows(self) -> int:
        return int(self.arr.shape[0])

    @property
    def dim(self) -> int:
        return int(self.arr.shape[1])

    @property
    def dtype(self) -> np.dtype:
        return self.arr.dtype

    @property
    def row_bytes(self) -> int:
        return self.dim * self.arr.itemsize

    @property
    def path(self) -> str:
        return "<counting>"

    def bytes_for(self, ids: np.ndarray) -> int:
        return len(ids) * self.row_bytes

    def read(self, ids, out, dest=None, out2=None) -> int:
        ids = np.asarray(ids, np.int64)
        assert len(ids) < 2 or (np.diff(ids) > 0).all(), "ids must come sorted and unique"
        dest = np.arange(len(ids)) if dest is None else np.asarray(dest, np.int64)
        mine = dest >= 0
        out[dest[mine]] = self.arr[ids[mine]]
        if out2 is not None and not mine.all():
            out2[-1 - dest[~mine]] = self.arr[ids[~mine]]
        with self._lock:
            self.stats.add(len(ids), self.bytes_for(ids), 1)
            self.asked.append(ids.copy())
        return self.bytes_for(ids)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def mapped(tmp_path):
    x = np.random.default_rng(0).normal(size=(300, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    return x, np.load(tmp_path / "x.npy", mmap_mode="r")


# ------------------------------------------------------------------ file_of


def test_file_of_a_memmap_with_an_offset(tmp_path):
    path = tmp_path / "raw.bin"
    off = mmap.ALLOCATIONGRANULARITY + 40  # the map starts at an aligned place before it
    mm = np.memmap(path, dtype=np.float32, mode="w+", shape=(10, 4), offset=off)
    mm[:] = np.arange(40, dtype=np.float32).reshape(10, 4)
    mm.flush()
    assert file_of(mm) == (str(path), off, 16)
    view = mm[3:]
    assert file_of(view) == (str(path), off + 3 * 16, 16)
    place = file_of(view)
    with open(path, "rb") as f:
        f.seek(place.offset)
        assert np.array_equal(np.frombuffer(f.read(16), np.float32), [12, 13, 14, 15])
    assert isinstance(mapping_of(view), mmap.mmap)


def test_file_of_np_load_mmap(mapped, tmp_path):
    x, mm = mapped
    place = file_of(mm)
    assert place is not None and place.path == str(tmp_path / "x.npy")
    assert place.stride == 8 * 4
    raw = (tmp_path / "x.npy").read_bytes()
    assert raw[place.offset :] == x.tobytes()  # the header ends where the rows begin
    assert file_of(mm.reshape(-1, 1)).offset == place.offset


def test_file_of_an_in_memory_array_is_none(mapped):
    x, mm = mapped
    assert file_of(x) is None
    assert mapping_of(x) is None
    assert file_of(np.asarray(mm)) is None  # a plain ndarray view: not recognised
    assert file_of(np.array(mm)) is None  # a copy
    assert RowFile.of(x) is None and RowFile.of(mm) is not None


# ------------------------------------------------------------------ the protocol


def test_the_three_readers_are_row_sources(mapped):
    x, mm = mapped
    direct = RowReader(RowFile.of(mm), threads=2)
    memory = MemoryRows(x[:10])
    stacked = StackedReader([direct, memory])
    try:
        for src in (direct, memory, stacked, CountingRows(x)):
            assert isinstance(src, RowSource)
        assert not isinstance(x, RowSource) and not isinstance(mm, RowSource)
        assert stacked.num_rows == 310 and stacked.dim == 8 and stacked.row_bytes == 32
        assert stacked.dtype == np.float32 and stacked.path == str(mm.filename)
        ids = np.array([0, 5, 299, 300, 309])
        out = np.empty((5, 8), np.float32)
        stacked.read(ids, out)
        assert np.array_equal(out, np.concatenate([x, x[:10]])[ids])
        assert stacked.bytes_for(ids) == 5 * 32 and stacked.stats.rows == 3
    finally:
        stacked.close()


def test_open_rows_takes_a_source_as_it_is_and_stacks_it(mapped):
    x, mm = mapped
    counting = CountingRows(x[:50])
    assert open_rows(counting) is counting
    assert open_rows(x) is None  # in memory: nothing to plan
    assert open_rows([counting]) is counting
    direct = open_rows(mm, threads=2)
    assert isinstance(direct, RowReader)
    direct.close()
    stack = open_rows([counting, mm], threads=2)
    assert isinstance(stack, StackedReader)
    ids = np.array([1, 49, 50, 120])
    out = np.empty((4, 8), np.float32)
    stack.read(ids, out)
    assert np.array_equal(out, np.concatenate([x[:50], x])[ids])
    assert counting.stats.rows == 2 and stack.stats.rows == 4
    stack.close()
    assert counting.closed


# ------------------------------------------------------------------ a second backend


def _graph(make_graph):
    rng = np.random.default_rng(3)
    n = 2000
    src = rng.zipf(1.8, 20000) % n
    dst = rng.integers(0, n, 20000)
    y = rng.integers(0, 4, n)
    x = rng.normal(size=(n, 64)).astype(np.float32)
    perm = rng.permutation(n)
    return make_graph(
        np.stack([src, dst], 1), n, x=x, y=y, train=perm[:700], val=perm[700:900], test=perm[900:]
    )


def _store_and_loader(data, rows, tmp_path):
    n = data.num_nodes
    # a plan whose cache lacks rows: windows read ahead, sized from the first epoch, packed
    plan = BudgetPlan(
        total=RESERVE + 240_000,
        source="test",
        reserve=RESERVE,
        structure=0,
        structure_in_memory=True,
        window=80_000,
        cache=80_000,
        features=n * 256,
        min_window=16_384,
    )
    deg = np.diff(np.asarray(data.indptr, np.int64))
    store = BudgetedStore(rows, plan, degrees=deg, threads=2, show_progress=False)
    sampler = NeighborSampler(data.indptr, data.indices, (5, 5), num_nodes=n)
    loader = BatchLoader(sampler, None, data.labels, data.train_idx, batch_size=64, seed=7)
    fit = store.read_ahead(loader, last_epoch=3, pack_epochs=2, scratch_dir=str(tmp_path))
    assert fit is not None and store.features.cache_bytes == fit.cache_bytes
    return store, loader


def test_another_row_source_plugs_into_the_budgeted_store(make_graph, tmp_path):
    data = TrainData.from_graph_dir(_graph(make_graph))
    counting = CountingRows(np.asarray(data.features))
    file_store, file_loader = _store_and_loader(data, data.features, tmp_path / "a")
    ours, our_loader = _store_and_loader(data, counting, tmp_path / "b")
    assert isinstance(file_store.features.reader, RowReader)
    assert ours.features.reader is counting
    for epoch in range(4):
        # batch tensors share reused buffers: compare each pair before the next one
        for a, b in zip(file_loader.epoch(epoch), our_loader.epoch(epoch), strict=True):
            assert np.array_equal(a.mb.n_id, b.mb.n_id)
            assert np.array_equal(a.x.numpy(), b.x.numpy())
            assert np.array_equal(a.y.numpy(), b.y.numpy())
        mine, theirs = our_loader.prefetcher.last_epoch_io, file_loader.prefetcher.last_epoch_io
        for key in ("requested", "hits", "rows_read", "windows", "unique_rows"):
            assert mine[key] == theirs[key], key
    assert our_loader.prefetcher.packs.stats.sweeps == 2  # epochs 0-1, then 2-3
    assert file_loader.prefetcher.packs.stats.sweeps == 2
    for ld in (file_loader, our_loader):
        ld.prefetcher.close()
    # the same rows were asked of both sources: the cache and the sweeps packing the epochs
    assert counting.stats.rows == file_store.features.reader.stats.rows > 0
    assert counting.stats.calls == file_store.features.reader.stats.calls
    assert all(len(ids) for ids in counting.asked)
    file_store.features.close()
    ours.features.close()
    assert counting.closed


def test_a_source_serves_one_batch_gathers(make_graph):
    data = TrainData.from_graph_dir(_graph(make_graph))
    plan = BudgetPlan(RESERVE + 10**9, "test", RESERVE, 0, True, 16_384, 0, 2000 * 256)
    counting = CountingRows(np.asarray(data.features))
    ours = BudgetedStore(counting, plan, threads=2).features
    theirs = BudgetedStore(data.features, plan, threads=2).features
    ids = np.array([5, 1999, 3, 5, 700])
    assert np.array_equal(ours.gather(ids).numpy(), np.asarray(data.features)[ids])
    assert np.array_equal(ours.gather(ids).numpy(), theirs.gather(ids).numpy())
    assert counting.stats.rows == 2 * 4  # each gather reads its 4 distinct rows once
    theirs.close()
