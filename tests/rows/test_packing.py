"""Epoch packs hold exactly the rows of the feature file, and a sweep also loads the cache."""

from __future__ import annotations

import numpy as np
import pytest

import shoal.rows.packing as packing_mod
from shoal.rows.direct import PAGE
from shoal.rows.featstore import DiskFeatures
from shoal.rows.packing import (
    PACK_EPOCHS,
    SCRATCH_MARGIN,
    Packs,
    PackStats,
    compact_ids,
    default_pack_epochs,
    pack_epochs,
    pack_sizes,
)
from shoal.training import TrainConfig


@pytest.fixture
def stacked(tmp_path):
    """A part's core rows and its halo rows, stacked (two files), 24 float32 columns."""
    rng = np.random.default_rng(0)
    core = rng.standard_normal((3000, 24)).astype(np.float32)
    halo = rng.standard_normal((1100, 24)).astype(np.float32)
    np.save(tmp_path / "core.npy", core)
    np.save(tmp_path / "halo.npy", halo)
    mms = [np.load(tmp_path / f"{n}.npy", mmap_mode="r") for n in ("core", "halo")]
    return np.concatenate([core, halo]), mms


@pytest.mark.parametrize("cache_rows", [0, 500])
@pytest.mark.parametrize("chunk_rows", [3, 1000, 10_000])
def test_packs_hold_exactly_the_rows_and_the_sweep_loads_the_cache(
    tmp_path, stacked, cache_rows, chunk_rows
):
    x, mms = stacked
    n = len(x)
    rng = np.random.default_rng(cache_rows + chunk_rows)
    prio = rng.permutation(n)
    fs = DiskFeatures(mms, cache_bytes=cache_rows * 96, priority=prio, threads=2, defer_cache=True)
    border = np.array([0, 2999, 3000, n - 1])  # first and last core row, first and last halo
    sets = {
        4: np.unique(np.concatenate([rng.integers(0, n, 900), border])),
        5: np.unique(rng.integers(0, n, 2000)),  # overlaps epoch 4's rows
        6: np.empty(0, np.int64),  # an epoch needing nothing beyond the cache
        7: np.arange(n),
    }
    sets = {e: fs.cold_of(s) for e, s in sets.items()}
    stats = PackStats()
    out = tmp_path / "packs"
    out.mkdir()
    packs = pack_epochs(fs, sets, out, stats=stats, chunk_bytes=chunk_rows * 96, stage_bytes=PAGE)
    assert fs.cache_loaded and np.array_equal(fs.cache, x[np.flatnonzero(fs.slot >= 0)])
    assert stats.sweeps == 1 and stats.bytes_read >= len(np.unique(prio[:cache_rows])) * 96
    assert stats.bytes_written >= sum(len(s) for s in sets.values()) * 96
    for e, s in sets.items():
        p = packs[e]
        assert np.array_equal(p.ids, s)
        got = np.empty((len(s), 24), np.float32)
        p.read(s, got)
        assert np.array_equal(got, x[s])
        sub = s[::3]  # a window of some of the epoch's rows
        got = np.empty((len(sub), 24), np.float32)
        p.read(sub, got)
        assert np.array_equal(got, x[sub])
        # a window served from the pack is the window read from the feature file
        w = fs.window([], cold=s, source=p)
        assert np.array_equal(w.gather(s), x[s])
    with pytest.raises(KeyError, match="lacks"):
        packs[6].read(sets[7][:1], np.empty((1, 24), np.float32))
    for p in packs.values():
        p.close()
    assert list(out.iterdir()) == []


def test_an_epoch_of_windows_is_packed_window_by_window(tmp_path, stacked):
    """Each window of an epoch gets its own segment, in order (a row two windows need is in
    both): reading a window reads exactly its segment, one contiguous run."""
    x, mms = stacked
    n = len(x)
    fs = DiskFeatures(mms, threads=2)
    windows = [np.arange(0, n, 7), np.arange(3, n, 5), np.array([0, 3, n - 1])]  # 0, 3: shared
    stats = PackStats()
    packs = pack_epochs(fs, {0: windows, 1: np.arange(10)}, tmp_path, stats=stats, stage_bytes=PAGE)
    pack = packs[0]
    assert [len(g.ids) for g in pack.segments] == [len(w) for w in windows]
    assert pack.nbytes == sum(len(w) for w in windows) * 96
    assert np.array_equal(pack.ids, np.unique(np.concatenate(windows)))
    assert stats.bytes_written >= pack.nbytes + 10 * 96
    for w in windows:
        got = np.empty((len(w), 24), np.float32)
        nbytes = pack.read(w, got)
        assert np.array_equal(got, x[w])
        assert len(w) * 96 <= nbytes < len(w) * 96 + PAGE  # its segment, nothing more
    # out of order, and a subset of one window: still served
    got = np.empty((2, 24), np.float32)
    pack.read(windows[0][[1, 4]], got)
    assert np.array_equal(got, x[windows[0][[1, 4]]])
    with pytest.raises(KeyError, match="lacks"):  # rows of two windows: no window asked that
        pack.read(np.array([7, 8]), np.empty((2, 24), np.float32))
    for p in packs.values():
        p.close()
    assert list(tmp_path.glob("*.rows")) == []


def test_compact_sets_pack_the_same_rows(tmp_path, stacked):
    """A round's sets kept as int32 (:func:`compact_ids`) pack exactly the rows of the int64
    sets, and the pack keeps them compact."""
    x, mms = stacked
    n = len(x)
    assert compact_ids(np.arange(5), n).dtype == np.int32
    assert compact_ids(np.arange(5), 2**31).dtype == np.int64  # row ids past int32
    rng = np.random.default_rng(3)
    wide = {0: [np.unique(rng.integers(0, n, 700)) for _ in range(3)], 1: np.array([0, n - 1])}
    narrow = {0: [compact_ids(w, n) for w in wide[0]], 1: compact_ids(wide[1], n)}
    packs = pack_epochs(DiskFeatures(mms, threads=2), narrow, tmp_path, stage_bytes=PAGE)
    assert packs[0].segments[0].ids.dtype == np.int32
    for e, v in wide.items():
        for w in v if isinstance(v, list) else [v]:
            got = np.empty((len(w), 24), np.float32)
            packs[e].read(w, got)  # asked with int64 ids, as windows ask
            assert np.array_equal(got, x[w])
    assert np.array_equal(packs[0].ids, np.unique(np.concatenate(wide[0])))
    assert packs[0].ids.dtype == np.int64
    for p in packs.values():
        p.close()


@pytest.mark.parametrize("num_rows", [None, 50, 10_000])
def test_the_union_of_sets_by_marks_or_by_sort(num_rows, monkeypatch):
    """The sweep's union is the sorted distinct ids, marked per row when the rows are few
    beside the sets, sorted otherwise, whatever the sets' integer types."""
    monkeypatch.setattr(packing_mod, "_UNION_SLICE", 7)  # marks turned into ids in slices
    rng = np.random.default_rng(4)
    parts = [rng.integers(0, 50, 40).astype(np.int32), np.array([], np.int64), np.array([49, 0])]
    parts = [np.unique(p) for p in parts]
    got = packing_mod._union(parts, num_rows)
    assert np.array_equal(got, np.unique(np.concatenate(parts)))
    assert got.dtype == (np.int32 if num_rows == 50 else np.int64)  # marks: compact ids
    assert len(packing_mod._union([], num_rows)) == 0


def test_a_stopped_sweep_leaves_no_file(tmp_path, stacked):
    x, mms = stacked
    fs = DiskFeatures(mms, threads=2)
    calls = []

    def between():
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        pack_epochs(
            fs,
            {0: np.arange(2000), 1: np.arange(0, 4000, 2)},
            tmp_path,
            between=between,
            chunk_bytes=100 * 96,
        )
    assert len(calls) == 3 and not list(tmp_path.glob("*.rows"))


def test_a_sweep_counts_its_writing_time(tmp_path, stacked):
    x, mms = stacked
    stats = PackStats()
    fs = DiskFeatures(mms, threads=2)
    pack_epochs(fs, {0: np.arange(len(x))}, tmp_path, stats=stats, stage_bytes=PAGE)
    assert stats.bytes_written >= x.nbytes and 0 < stats.write_seconds <= stats.seconds


def test_pack_sizes_stay_within_a_share_of_the_pool():
    assert pack_sizes(10 << 30, 4) == (16 << 20, 1 << 20)
    chunk, stage = pack_sizes(1 << 20, 4)  # four segments written at once
    assert chunk == 32 << 10 and stage == 16 << 10 and stage % PAGE == 0  # two chunks
    assert pack_sizes(0, 4) == (PAGE, PAGE)


def test_packing_is_on_by_default_only_with_the_structure_in_memory():
    assert default_pack_epochs(None, True) == PACK_EPOCHS == 8
    assert default_pack_epochs(None, False) == 0  # sampling twice would read the CSR twice
    assert default_pack_epochs(2, False) == 2 and default_pack_epochs(0, True) == 0
    assert TrainConfig.from_options(pack_epochs=None).memory.pack_epochs is None
    with pytest.raises(ValueError, match="pack_epochs must be >= 0"):
        TrainConfig.from_options(pack_epochs=-1)


def test_a_round_packs_the_epochs_the_scratch_disk_holds(tmp_path, stacked, monkeypatch, caplog):
    """Room for two of three epochs' packs: the first two are packed (a warning names what
    was left out and why), packing stays on for a later round; room for none: off."""
    x, mms = stacked
    fs = DiskFeatures(mms, threads=2)
    sets = {3: np.arange(0, 1000), 4: np.arange(500, 1500), 5: np.arange(1000, 2000)}
    room = [SCRATCH_MARGIN + 2000 * 96 + 50]  # two epochs of 1000 rows of 96 B
    monkeypatch.setattr(packing_mod, "free_bytes", lambda d: room[0])
    (tmp_path / "scratch").mkdir()
    packs = Packs(fs, epochs=3, scratch_dir=str(tmp_path / "scratch"), pool=1 << 20)
    with caplog.at_level("WARNING", logger="shoal.rows.packing"):
        assert packs.pack(sets, None)
    assert "packing epochs 3-4, not 3-5" in caplog.text and "--scratch-dir" in caplog.text
    assert packs.get(5) is None and packs.epochs == 3 and packs.stats.sweeps == 1
    for e in (3, 4):
        got = np.empty((1000, 24), np.float32)
        packs.get(e).read(sets[e], got)
        assert np.array_equal(got, x[sets[e]])
    assert packs.round(5, 5) == [] and packs.round(5, None) == [5, 6, 7]
    room[0] = SCRATCH_MARGIN + 999 * 96
    assert not packs.pack({5: sets[5]}, None) and packs.epochs == 0
    packs.drop()
    assert list((tmp_path / "scratch").iterdir()) == []


def test_a_window_reads_its_whole_segment_without_staging(tmp_path, stacked, monkeypatch):
    """A window asking for its whole segment reads the file straight into the window's
    (page-aligned) rows; a part of a segment goes through the row reader: the same rows."""
    x, mms = stacked
    fs = DiskFeatures(mms, threads=2)
    sets = {0: [np.arange(0, 700), np.arange(650, 4100, 3)]}
    packs = pack_epochs(fs, sets, tmp_path, stage_bytes=PAGE)
    direct = []
    real = packing_mod.read_file_into

    def spy(path, out, **kw):
        got = real(path, out, **kw)
        direct.append(got)
        return got

    monkeypatch.setattr(packing_mod, "read_file_into", spy)
    for seg in sets[0]:
        w = fs.window([], cold=seg, source=packs[0])
        assert np.array_equal(w.rows, x[seg]) and w.rows.ctypes.data % PAGE == 0
    assert len(direct) == 2
    part = sets[0][1][5:50]
    w = fs.window([], cold=part, source=packs[0])
    assert np.array_equal(w.rows, x[part]) and len(direct) == 2
    packs[0].close()
