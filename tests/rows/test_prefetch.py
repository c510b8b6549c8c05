"""Windows read ahead change when rows are read, never what is trained."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

import shoal.rows.budget as budget_mod
import shoal.training.trainer as trainer_mod
from shoal.errors import ShoalInputError
from shoal.rows.budget import RESERVE
from shoal.rows.featstore import DiskFeatures
from shoal.rows.readahead import RESAMPLE_QUEUE
from shoal.sample.features import FeatureGatherer
from shoal.sample.sampler import NeighborSampler
from shoal.training import TrainConfig, TrainData, Trainer
from shoal.training.batches import BatchLoader
from shoal.utils.mapped import mapping_of


@pytest.fixture(autouse=True)
def _fixed_reserve(monkeypatch):
    """The budgets below are sized around the fixed :data:`RESERVE`, not this process's
    measured footprint (which depends on what the test run imported)."""
    monkeypatch.setattr(trainer_mod, "training_reserve", lambda *a, **k: RESERVE)
    monkeypatch.setattr(trainer_mod, "step_activations", lambda *a, **k: (0, 0))


def _graph(make_graph, dim: int = 64, edges: int = 30000):
    rng = np.random.default_rng(3)
    n = 3000
    src = rng.zipf(1.8, edges) % n  # skewed degrees, some isolated nodes
    dst = rng.integers(0, n, edges)
    e = np.stack([src, dst], 1)
    y = rng.integers(0, 4, n)
    x = rng.normal(size=(n, dim)).astype(np.float32) + y[:, None]
    perm = rng.permutation(n)
    return make_graph(e, n, x=x, y=y, train=perm[:900], val=perm[900:1200], test=perm[1200:])


@pytest.fixture
def graph(make_graph):
    return _graph(make_graph)


def _features(data, cache_rows: int = 0, order=None, **kw) -> DiskFeatures:
    """``data``'s rows in a store caching ``cache_rows`` rows of ``order`` (default: a random
    order) first."""
    if order is None:
        order = np.random.default_rng(0).permutation(data.num_nodes)
    return DiskFeatures(
        data.features, cache_bytes=cache_rows * 256, threads=2, priority=order, **kw
    )


def _loader(data, gatherer):
    s = NeighborSampler(data.indptr, data.indices, (5, 5), num_nodes=data.num_nodes)
    return BatchLoader(s, gatherer, data.labels, data.train_idx, batch_size=64, seed=7)


@pytest.mark.parametrize("background", [True, False])
@pytest.mark.parametrize("cache_rows", [0, 500])
def test_windowed_batches_equal_plain_batches(graph, background, cache_rows):
    data = TrainData.from_graph_dir(graph)
    plain = _loader(data, FeatureGatherer(data.features))
    fs = _features(data, cache_rows)
    win = _loader(data, None)
    win.use_windows(fs, window_bytes=60_000, background=background)  # several windows
    for epoch in (0, 1):
        ids = []
        # batch tensors share reused buffers: compare each pair before the next one
        for a, b in zip(plain.epoch(epoch), win.epoch(epoch), strict=True):
            assert np.array_equal(a.mb.n_id, b.mb.n_id)
            assert np.array_equal(a.x.numpy(), b.x.numpy())
            assert np.array_equal(a.y.numpy(), b.y.numpy())
            ids.append(a.mb.n_id)
        assert len(ids) == len(plain)
        assert win.prefetcher.last_epoch_io["windows"] > 2
        uniq = len(np.unique(np.concatenate(ids)))
        assert win.prefetcher.last_epoch_io["unique_bytes"] == uniq * 256
        if background and epoch == 0:  # the next epoch's first window is read meanwhile
            deadline = time.time() + 20
            while (held := win.prefetcher.pause()) == 0 and time.time() < deadline:
                win.prefetcher.resume()
                time.sleep(0.01)
            assert 0 < held <= 2 * (60_000 + 60_000 // 256 * 8)
            win.prefetcher.resume()
    # stopping in the middle of an epoch ends the background thread
    it = win.epoch(2)
    next(it)
    it.close()


@pytest.mark.parametrize(
    "dim, extra, windows, mode, resample",
    [
        (64, 250_000, 2, "split", False),
        (512, 2_700_000, 1, "one", True),
        (512, 3_300_000, 1, "one", False),
        (512, 5_600_000, 1, "overlap", False),
    ],
)
def test_trainer_with_a_small_budget_trains_the_same_model(
    make_graph, monkeypatch, dim, extra, windows, mode, resample
):
    """A budget below the features: the cache (read with the first window) and windows
    (several per epoch when an epoch's rows and samples exceed two slots, one per epoch when
    they fit both, with the batches sampled again when two epochs' samples do not fit beside,
    one read while the previous epoch trains when they fit one) give the same batches, so
    the same losses and the same model as the whole matrix in memory."""
    graph = _graph(make_graph, dim)
    data = TrainData.from_graph_dir(graph)
    rb = dim * 4
    cfg = dict(
        model="sage", fanouts=(5, 5), batch_size=8, hidden=8, epochs=2, threads=1, progress=False
    )
    big = Trainer(TrainConfig.from_options(**cfg, memory="8GiB"), data)
    assert big.loader.prefetcher is None and big.features.cached_rows == data.num_nodes
    ref = [big.train_epoch(e) for e in range(2)]  # torch's RNG is global: one run at a time
    monkeypatch.setattr(budget_mod, "MIN_WINDOW", 4096)
    small = Trainer(
        TrainConfig.from_options(**cfg, memory=RESERVE + extra), TrainData.from_graph_dir(graph)
    )
    assert small.loader.prefetcher is not None and not small.features.cache_loaded
    assert 0 < small.features.cached_rows < data.num_nodes
    fit = small.budget.fit
    assert fit["mode"] == mode and fit["sample_bytes"] > 0
    assert fit["resample"] == resample == small.loader.prefetcher.resample
    assert fit["cache_bytes"] == small.features.cached_rows * rb
    # the cache and the two slots stay within the pool
    assert fit["cache_bytes"] + 2 * fit["window_bytes"] <= small.budget.pool
    for e in range(2):
        a, b = ref[e], small.train_epoch(e)
        assert a["loss"] == b["loss"] and a["train_accuracy"] == b["train_accuracy"]
        assert b["io"]["bytes_read"] > 0 and 0 < b["io"]["cache_hit_rate"] < 1
        assert (b["io"]["windows"] >= 2) == (windows == 2)
    for p, q in zip(big.model.parameters(), small.model.parameters(), strict=True):
        assert np.array_equal(p.detach().numpy(), q.detach().numpy())
    assert small.evaluate(("val", "test")) == big.evaluate(("val", "test"))
    # the end of training lends the cache to the evaluation: the same accuracies, read whole
    pf = small.loader.prefetcher
    small.end_training()
    assert pf._stream is None and small.loader is None and small.sampler is None
    assert small._lent > 0 and small.features.cache_bytes == 0
    with pytest.raises(RuntimeError, match="only evaluates"):
        small.train_epoch(2)
    hits = small.features.stats.hits
    got, want = small.evaluate(("val", "test")), big.evaluate(("val", "test"))
    assert got == pytest.approx(want, abs=1.5 / len(data.val_idx))
    assert small.features.stats.hits == hits


@pytest.mark.parametrize("window_bytes", [60_000, 3000 * 256 // 2])  # split / one window
def test_batches_sampled_again_equal_plain_batches(graph, window_bytes):
    """With ``resample`` the reading thread keeps only the windows' rows and batch steps
    while it plans, and samples the batches again as they are trained: the same batches."""
    data = TrainData.from_graph_dir(graph)
    plain = _loader(data, FeatureGatherer(data.features))
    fs = DiskFeatures(data.features, threads=2)
    win = _loader(data, None)
    win.use_windows(fs, window_bytes=window_bytes)
    win.prefetcher.resample = True
    for epoch in (0, 1):
        n = 0
        for a, b in zip(plain.epoch(epoch), win.epoch(epoch), strict=True):
            assert np.array_equal(a.mb.n_id, b.mb.n_id)
            for ba, bb in zip(a.mb.blocks, b.mb.blocks, strict=True):
                assert np.array_equal(ba.edge_index.numpy(), bb.edge_index.numpy())
            assert np.array_equal(a.x.numpy(), b.x.numpy())
            assert np.array_equal(a.y.numpy(), b.y.numpy())
            st = win.prefetcher._stream
            # planned windows hold steps, not samples; few batches wait in the queue
            lazy = [it[1] for it in list(st.q.queue) if hasattr(it[1], "steps")]
            assert all(isinstance(x, int) for z in lazy for x in z.steps)
            assert all(z.q.qsize() <= RESAMPLE_QUEUE for z in lazy)
            n += 1
        assert n == len(plain)
        windows = win.prefetcher.last_epoch_io["windows"]
        assert windows == 1 if window_bytes > 60_000 else windows > 2
    win.prefetcher.close()


@pytest.mark.parametrize("resample", [False, True])
@pytest.mark.parametrize("one", [False, True])
def test_windows_are_freed_before_the_next_is_read(graph, monkeypatch, resample, one):
    """A window is freed when trained, before the next is read into its slot: while a
    window is read, only the one trained on is alive (several windows per epoch), or none
    (one window per epoch in both slots). The reading thread kept a reference to the last
    window it read, so an epoch's window was alive while the next epoch's was read."""
    import weakref

    data = TrainData.from_graph_dir(graph)
    fs = DiskFeatures(data.features, threads=2)
    alive: list = []
    most = [0]
    make = fs.window

    def window(*a, **k):
        most[0] = max(most[0], sum(r() is not None for r in alive))
        w = make(*a, **k)
        alive.append(weakref.ref(w))
        return w

    monkeypatch.setattr(fs, "window", window)
    win = _loader(data, None)
    u = len(np.unique(np.concatenate([mb.n_id for mb in win.samples(0)])))
    # one window per epoch that needs both slots, or several of one slot
    win.use_windows(fs, window_bytes=(u * 11 // 20 if one else u // 8) * 256)
    win.prefetcher.resample = resample
    for epoch in range(3):
        for _ in win.epoch(epoch):
            time.sleep(0.001)  # the reader runs ahead and waits for a slot
        assert (win.prefetcher.last_epoch_io["windows"] == 1) == one
    win.prefetcher.close()
    assert most[0] == (0 if one else 1)


def test_an_error_while_sampling_again_reaches_the_training_thread(graph, monkeypatch):
    data = TrainData.from_graph_dir(graph)
    win = _loader(data, None)
    win.use_windows(DiskFeatures(data.features, threads=2), window_bytes=60_000)
    win.prefetcher.resample = True
    sample = win.sampler.sample
    calls = [0]

    def flaky(*a, **k):
        calls[0] += 1
        if calls[0] > 2 * len(win):  # epoch 0 planned and trained, epoch 1 planned
            raise RuntimeError("disk gone")
        return sample(*a, **k)

    monkeypatch.setattr(win.sampler, "sample", flaky)
    assert sum(1 for _ in win.epoch(0)) == len(win)
    with pytest.raises(RuntimeError, match="disk gone"):
        for _ in win.epoch(1):
            pass


def test_budget_below_the_working_set_names_the_option(graph):
    data = TrainData.from_graph_dir(graph)
    with pytest.raises(ShoalInputError, match="--memory"):
        Trainer(
            TrainConfig.from_options(model="sage", fanouts=(5, 5), memory="100MB", progress=False),
            data,
        )


def test_an_epoch_within_two_windows_is_read_as_one(graph):
    data = TrainData.from_graph_dir(graph)
    fs = DiskFeatures(data.features, threads=2)
    win = _loader(data, None)
    win.use_windows(fs, window_bytes=data.num_nodes * 256 // 2)  # two windows hold it all
    n = sum(1 for _ in win.epoch(0))
    assert n == len(win) and win.prefetcher.last_epoch_io["windows"] == 1
    win.prefetcher.close()


def test_an_epoch_within_one_window_is_read_while_the_previous_trains(graph):
    data = TrainData.from_graph_dir(graph)
    fs = DiskFeatures(data.features, threads=2)
    win = _loader(data, None)
    win.use_windows(fs, window_bytes=data.num_nodes * 256)  # one slot holds an epoch
    it = win.epoch(0)
    next(it)
    deadline = time.time() + 20  # epoch 1's window is read while epoch 0 is trained on
    while win.prefetcher.pause() == 0 or win.prefetcher._stream.q.qsize() < 2:
        win.prefetcher.resume()
        assert time.time() < deadline, "the next epoch's window was not read ahead"
        time.sleep(0.01)
    win.prefetcher.resume()
    rest = sum(1 for _ in it)
    assert rest + 1 == len(win) and win.prefetcher.last_epoch_io["windows"] == 1
    assert sum(1 for _ in win.epoch(1)) == len(win)
    win.prefetcher.close()


def test_a_stream_that_queued_its_last_epoch_is_not_restarted(graph):
    """The thread reads the last epoch's window while the one before trains, then ends: the
    last epoch takes its queued window instead of reading it again."""
    data = TrainData.from_graph_dir(graph)
    fs = DiskFeatures(data.features, threads=2)
    win = _loader(data, None)
    win.use_windows(fs, window_bytes=data.num_nodes * 256, last_epoch=1)
    assert sum(1 for _ in win.epoch(0)) == len(win)
    win.prefetcher._stream.thread.join(timeout=20)
    assert win.prefetcher._stream.finished
    assert sum(1 for _ in win.epoch(1)) == len(win)
    assert fs.stats.windows == 2  # one per epoch, none read twice
    win.prefetcher.close()


def test_cli_memory_too_small_exits_2_naming_the_option(graph, run_cli):
    code, _, err = run_cli(
        "train", "--graph", graph.path, "--memory", "100MB", "--epochs", "1", "--no-progress"
    )
    assert code == 2 and "--memory" in err and "minimum working set" in err
    code, _, err = run_cli("train", "--graph", graph.path, "--memory", "lots")
    assert code == 2 and "size" in err


@pytest.mark.parametrize("memory", ["8GiB", RESERVE + 900_000])
def test_trainer_with_the_structure_on_disk_trains_the_same_model(graph, monkeypatch, memory):
    """The CSR left on disk (its row index in memory, sampled neighbour entries read with
    planned direct reads), with all features in memory or windows of them: same batches, so
    the same losses, model and accuracy as everything in memory."""
    data = TrainData.from_graph_dir(graph)
    cfg = dict(
        model="sage", fanouts=(5, 5), batch_size=8, hidden=8, epochs=2, threads=1, progress=False
    )
    big = Trainer(TrainConfig.from_options(**cfg, memory="8GiB"), data)
    assert big.budget.structure_in_memory and big.sampler._reader is None
    # held in the process's own memory (counted in the plan), not a map of the page cache
    assert mapping_of(big.data.indices) is None and mapping_of(big.sampler.indices) is None
    ref = [big.train_epoch(e) for e in range(2)]
    monkeypatch.setattr(budget_mod, "MIN_WINDOW", 4096)
    disk = Trainer(
        TrainConfig.from_options(**cfg, memory=memory, structure="disk"),
        TrainData.from_graph_dir(graph),
    )
    # (the reader and block cache: until the start's sampling ahead ends they may be
    # swapped out for the lists read whole)
    reader, blocks = disk.sampler._on_disk
    assert not disk.budget.structure_in_memory and reader is not None
    plan = disk.budget  # the row index and a cache of neighbour-list blocks are held
    assert plan.held_structure == plan.index_bytes + plan.neighbor_cache <= plan.structure
    assert plan.neighbor_cache > 0 and blocks is not None
    assert isinstance(disk.data.indices, np.memmap) and not isinstance(disk.data.indptr, np.memmap)
    read = []
    for e in range(2):
        a, b = ref[e], disk.train_epoch(e)
        assert a["loss"] == b["loss"] and a["train_accuracy"] == b["train_accuracy"]
        read.append(b["io"]["structure_bytes_read"])
    assert read[0] > 0  # the first epoch reads neighbour lists (the run's start included)
    assert sum(read) == disk.sampler.structure_bytes_read  # every read is in an epoch's record
    r = disk.sampler.group_reads
    assert disk.sampler._blocks is blocks and disk.sampler._reader is reader
    if disk._prefetcher is None:
        # training's batches are sampled in groups, one sorted pass per hop of a group, each
        # at most the file; the block cache (half the plan's neighbour memory) serves the rest
        assert r.passes > 0 and 0 < r.largest <= -(-disk.data.indices.nbytes // 4096) * 4096
        assert disk.sampler.loaded_bytes == 0
    else:
        # windows: both epochs are sampled ahead at the start, before the cache is read, in
        # the pool's memory, which holds the lists: they are read whole, once
        assert disk.sampler.loaded_bytes == disk.data.indices.nbytes and r.passes == 0
        assert sum(read) == disk.data.indices.nbytes + blocks.bytes_read
    assert blocks.data.nbytes <= plan.neighbor_cache // 2
    assert disk.sampler.reads_from_disk and mapping_of(disk.sampler.indices) is not None
    assert disk.evaluate(("val", "test")) == big.evaluate(("val", "test"))


def _compare_epoch(plain, win, epoch):
    n = 0
    for a, b in zip(plain.epoch(epoch), win.epoch(epoch), strict=True):
        assert np.array_equal(a.mb.n_id, b.mb.n_id)
        assert np.array_equal(a.x.numpy(), b.x.numpy())
        n += 1
    assert n == len(plain)


@pytest.mark.parametrize("last_epoch", [None, 2])
@pytest.mark.parametrize("background", [True, False])
def test_packed_epochs_give_the_same_batches(graph, tmp_path, last_epoch, background):
    """Two epochs' rows packed by one sweep (which also loads the cache): the same batches;
    the last epoch alone is not packed; the packs and their directory go on close."""
    data = TrainData.from_graph_dir(graph)
    plain = _loader(data, FeatureGatherer(data.features))
    fs = _features(data, 500, defer_cache=True)
    win = _loader(data, None)
    win.use_windows(
        fs,
        window_bytes=60_000,
        last_epoch=last_epoch,
        background=background,
        pack_epochs=2,
        scratch_dir=str(tmp_path / "scratch"),
    )
    pf = win.prefetcher
    for epoch in range(3):
        _compare_epoch(plain, win, epoch)
        io = pf.last_epoch_io
        assert io["windows"] > 2 and io["bytes_read"] >= io["pack_bytes_read"]
        if epoch < 2 or last_epoch is None:  # packed: each window reads its own segment,
            # exactly its rows (a page at most beyond them), not a pass over the epoch's pack
            windows_read = io["bytes_read"] - io["pack_bytes_read"]
            assert (
                io["rows_read"] * 256
                <= windows_read
                <= io["rows_read"] * 256 + 4096 * io["windows"]
            )
        if epoch == 0:  # the sweep of epochs 0-1, with the cache
            assert io["bytes_written"] >= io["rows_read"] * 256 > 0 and fs.cache_loaded
            assert io["pack_bytes_read"] >= 500 * 256
    # epoch 2 was packed with epoch 3 unless it is the last one
    assert pf.packs.stats.sweeps == (1 if last_epoch == 2 else 2)
    pf.close()
    assert list((tmp_path / "scratch").iterdir()) == []


def test_packing_without_room_reads_the_feature_file(graph, tmp_path, monkeypatch, caplog):
    import shoal.rows.packing as packing_mod

    monkeypatch.setattr(packing_mod, "free_bytes", lambda d: 0)
    data = TrainData.from_graph_dir(graph)
    plain = _loader(data, FeatureGatherer(data.features))
    fs = _features(data, 500, np.arange(data.num_nodes), defer_cache=True)
    win = _loader(data, None)
    win.use_windows(fs, window_bytes=60_000, pack_epochs=4, scratch_dir=str(tmp_path))
    with caplog.at_level("WARNING", logger="shoal.rows.packing"):
        for epoch in range(2):
            _compare_epoch(plain, win, epoch)
    assert "not packing epochs 0-3" in caplog.text and "--scratch-dir" in caplog.text
    assert win.prefetcher.packs.stats.sweeps == 0 and win.prefetcher.packs.epochs == 0
    assert win.prefetcher.last_epoch_io["bytes_written"] == 0
    win.prefetcher.close()


@pytest.mark.parametrize("resample", [False, True])
def test_spooled_samples_sample_each_epoch_once(graph, tmp_path, resample):
    """With the samples spooled (the structure on disk), the batches are the same and each
    epoch is sampled once: epoch 0 when the windows are sized, epoch 1 when packed; training
    reads both back from the spool (by step when batches are fetched again). Without the
    spool epoch 0 is sampled three times, epoch 1 twice (and each once more when batches are
    fetched again). The spool's files go with the epochs."""
    data = TrainData.from_graph_dir(graph)
    plain = _loader(data, FeatureGatherer(data.features))
    calls = {}
    for spool in (False, True):
        fs = _features(data, defer_cache=True)
        win = _loader(data, None)
        real = win.sampler.sample
        count = []

        def sample(seeds, seed, real=real, count=count):
            count.append(1)
            return real(seeds, seed)

        win.sampler.sample = sample
        win.use_windows(
            fs,
            window_bytes=60_000,
            last_epoch=1,
            pack_epochs=2,
            scratch_dir=str(tmp_path / f"s{spool}"),
            spool_samples=spool,
        )
        pf = win.prefetcher
        pf.calibrate(300 * 256, min_window=4096)
        pf.resample = resample
        for epoch in range(2):
            _compare_epoch(plain, win, epoch)
        calls[spool] = len(count)
        if spool:
            assert pf.spool.bytes_written > 0 and pf.spool.bytes_read >= pf.spool.bytes_written
        pf.close()
        assert list((tmp_path / f"s{spool}").iterdir()) == []
    n = len(plain)
    assert calls[True] == 2 * n
    # without: epoch 0 when sizing, both when packing, both when planned (and fetched again)
    assert calls[False] == 5 * n + (2 * n if resample else 0)


def test_sizing_the_windows_counts_in_the_start(graph):
    """The epoch :meth:`calibrate` samples before the first is part of the run's start: its
    seconds are in the first epoch record's ``start_seconds`` (with prime's), not lost."""
    data = TrainData.from_graph_dir(graph)
    win = _loader(data, None)
    real, calls = win.sampler.sample, []

    def sample(seeds, seed):
        calls.append(1)
        if len(calls) == 1:
            time.sleep(0.5)  # only while calibrating
        return real(seeds, seed)

    win.sampler.sample = sample
    win.use_windows(_features(data, defer_cache=True), window_bytes=60_000, last_epoch=1)
    pf = win.prefetcher
    pf.calibrate(300 * 256, min_window=4096)
    assert len(calls) == len(win)
    for _ in win.epoch(0):
        pass
    first = pf.last_epoch_io["start_seconds"]
    for _ in win.epoch(1):
        pass
    assert first >= 0.5 and pf.last_epoch_io["start_seconds"] == 0.0
    pf.close()


def _disk_sampled(make_graph, tmp_path, group_bytes: int, start_room: int = 0):
    """A graph whose 400 KB of neighbour lists are on disk, its windowed loader (samples
    spooled, 2 epochs a sweep, 4 epochs) and the plain loader, and the sampler's groups as
    ``(batches, group memory)`` as they are sampled."""
    graph = _graph(make_graph, edges=100_000)
    data = TrainData.from_graph_dir(graph)
    plain = _loader(data, FeatureGatherer(data.features))
    s = NeighborSampler(
        data.indptr,
        data.indices,
        (5, 5),
        num_nodes=data.num_nodes,
        direct_indices=True,
        io_threads=2,
        group_bytes=group_bytes,
    )
    assert s.reads_from_disk and data.indices.nbytes == 400_000
    win = BatchLoader(s, None, data.labels, data.train_idx, batch_size=64, seed=7)
    groups = []
    real = s.sample_group

    def sample_group(batches):
        groups.append((len(batches), s.group_bytes))
        return real(batches)

    s.sample_group = sample_group
    win.use_windows(
        _features(data, defer_cache=True),
        window_bytes=60_000,
        last_epoch=3,
        pack_epochs=2,
        scratch_dir=str(tmp_path / "s"),
        spool_samples=True,
        start_room=start_room,
    )
    win.prefetcher.calibrate(300 * 256, min_window=4096)
    return plain, win, s, groups


def test_epochs_sampled_ahead_from_disk_take_the_windows_memory(make_graph, tmp_path):
    """Neighbour lists on disk, samples spooled: every epoch sampled ahead (epoch 0 when the
    windows are sized, epoch 1 in the start's round, epochs 2-3 in the reading thread's round
    once no window is alive) is sampled in groups within the sampler's group memory plus the
    two window slots: groups larger than that memory alone allows (fewer passes over the
    lists), each epoch once, the same batches; the sampler's memory is restored after."""
    alone = 100_000  # two batches of 64 seeds at fanouts 5,5 (46 KB each)
    plain, win, s, groups = _disk_sampled(make_graph, tmp_path, alone)
    assert s.group_size(64) == 2
    for epoch in range(4):
        _compare_epoch(plain, win, epoch)
    win.prefetcher.close()
    assert s.group_bytes == alone and s.loaded_bytes == 0  # (the room is under the lists')
    assert sum(n for n, _ in groups) == 4 * len(plain)  # each epoch sampled once
    assert all(room > alone for _, room in groups), (groups, win.prefetcher.resample)
    assert max(n for n, _ in groups) > 2


def test_the_start_reads_the_lists_whole_when_its_room_holds_them(make_graph, tmp_path):
    """Before the cache is read, the pool it will share with the windows is free: when it
    holds the neighbour lists (400 KB), the start's sampling ahead (epoch 0 sizing the
    windows, epoch 1 in the first round) reads them whole, once, and draws from memory;
    the reading thread's round (epochs 2-3: the cache read, two window slots of room) samples
    in groups from disk again. The same batches; the lists read whole are freed."""
    plain, win, s, groups = _disk_sampled(make_graph, tmp_path, 100_000, start_room=1 << 20)
    assert s.loaded_bytes == 400_000 and not s.reads_from_disk  # held since calibrate
    for epoch in range(4):
        _compare_epoch(plain, win, epoch)
    win.prefetcher.close()
    assert s.reads_from_disk and s.loaded_bytes == 400_000  # read whole once
    assert sum(n for n, _ in groups) == 2 * len(plain)  # epochs 2-3 only
    assert s.group_bytes == 100_000
    assert s.structure_bytes_read >= 400_000 + s.group_reads.bytes  # (+ batches alone)


def test_a_spooled_minibatch_reads_back_equal(graph, tmp_path):
    from shoal.rows.spool import SampleSpool, decode, encode

    data = TrainData.from_graph_dir(graph)
    ld = _loader(data, FeatureGatherer(data.features))
    mbs = list(ld.samples(0))
    for mb in mbs[:2]:
        back = decode(encode(mb))
        assert np.array_equal(back.n_id, mb.n_id) and back.num_seeds == mb.num_seeds
        for a, b in zip(mb.blocks, back.blocks, strict=True):
            assert (a.num_src, a.num_dst) == (b.num_src, b.num_dst)
            for t in ("edge_index", "rowptr", "deg_src"):
                assert torch.equal(getattr(a, t), getattr(b, t))
    sp = SampleSpool(str(tmp_path / "spool"), beside=tmp_path)
    stopped = sp.record(3, iter(mbs))
    next(stopped)
    stopped.close()  # an epoch not written whole is not spooled, and leaves no file
    assert not sp.has(3) and not list((tmp_path / "spool").rglob("*.bin"))
    assert len(list(sp.record(3, iter(mbs)))) == len(mbs) and sp.has(3)
    again = list(sp.read(3, [2, 0]))
    assert np.array_equal(again[0].n_id, mbs[2].n_id) and np.array_equal(again[1].n_id, mbs[0].n_id)
    sp.drop()
    assert list((tmp_path / "spool").iterdir()) == []


def test_the_presampled_cache_holds_the_rows_most_batches_need(make_graph, monkeypatch):
    """``cache_policy="presample"``: no uncached row is needed by more batches of the first
    epoch than a cached one; the batches and the model are those of the degree policy, and
    an epoch reads no more rows."""
    graph = _graph(make_graph, 512)
    monkeypatch.setattr(budget_mod, "MIN_WINDOW", 4096)
    cfg = dict(
        model="sage", fanouts=(5, 5), batch_size=8, hidden=8, epochs=1, threads=1, progress=False
    )
    runs = {}
    for policy in ("degree", "presample"):
        t = Trainer(
            TrainConfig.from_options(**cfg, memory=RESERVE + 2_700_000, cache_policy=policy),
            TrainData.from_graph_dir(graph),
        )
        cached = t.features.slot >= 0
        assert 0 < cached.sum() < t.data.num_nodes
        counts = np.zeros(t.data.num_nodes, np.int64)
        for mb in t.loader.samples(0):
            counts[mb.n_id] += 1
        runs[policy] = (t.train_epoch(0), cached, counts, t)
    (a, _, _, ta), (b, cached, counts, tb) = runs["degree"], runs["presample"]
    assert counts[cached].min() >= counts[~cached].max()
    assert a["loss"] == b["loss"]
    assert b["io"]["rows_read"] <= a["io"]["rows_read"]
    for p, q in zip(ta.model.parameters(), tb.model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_the_start_samples_its_round_in_groups_across_epochs(
    make_graph, tmp_path, monkeypatch, caplog
):
    """When the start's room holds a group larger than an epoch but not the lists whole,
    the first round's epochs (0-1) are sampled together before the windows are sized: one
    group spanning both, so each hop's lists are read once for the round instead of once
    per epoch; the same batches, each epoch sampled once. The log says so."""
    import logging

    import shoal.sample.sampler as sampler_mod

    caplog.set_level(logging.INFO, logger="shoal.rows.prefetch")

    # (a drawn entry's memory made small: a group of this tiny graph's batches larger than an
    # epoch, as at scale, within a room smaller than its lists)
    monkeypatch.setattr(sampler_mod, "GROUP_ENTRY_BYTES", 4)
    plain, win, s, groups = _disk_sampled(make_graph, tmp_path, 100_000, start_room=200_000)
    n = len(plain)
    assert s.group_bytes + 200_000 < 400_000  # (the room is under the lists')
    assert 2 * n <= groups[0][0] and s.loaded_bytes == 0, (groups, n)  # epochs 0-1 in one
    passes = s.group_reads.passes
    assert passes == 2  # one per hop, for both epochs
    said = [r.getMessage() for r in caplog.records if "ahead:" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(
        f"sampled epoch(s) 1,2 ahead: {2 * n} batches in groups of {groups[0][0]}, "
        "2 pass(es) reading "
    ), said
    for epoch in range(4):
        _compare_epoch(plain, win, epoch)
    win.prefetcher.close()
    assert sum(k for k, _ in groups) == 4 * n  # each epoch sampled once
