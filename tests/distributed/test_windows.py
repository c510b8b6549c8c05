"""DistWindows on one rank: windows serve the rows their batches need, and with packing each
window reads its own segment of the epoch's pack, nothing else."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from shoal.distributed.windows import DistWindows
from shoal.rows.featstore import DiskFeatures

N, DIM = 4000, 64  # rows of 256 bytes: 16 to a page


def _sample(epoch: int) -> list[SimpleNamespace]:
    """An epoch's batches (the same for the same epoch, as a seeded sampler gives): each a
    random set of 60 nodes, duck-typed as mini-batches (ids and bytes held)."""
    rng = np.random.default_rng(100 + epoch)
    out = []
    for _ in range(25):
        ids = np.unique(rng.integers(0, N, 60))
        out.append(SimpleNamespace(n_id=ids, nbytes=ids.nbytes))
    return out


@pytest.fixture
def features(tmp_path):
    x = np.random.default_rng(0).normal(size=(N, DIM)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    return x, np.load(tmp_path / "x.npy", mmap_mode="r")


def _one_rank(fs: DiskFeatures, **kw) -> DistWindows:
    """``fs``'s windows of 150 rows on one rank holding one part."""
    return DistWindows(
        fs,
        part_offsets=np.array([0, N]),
        part_to_rank=np.array([0]),
        rank=0,
        world_size=1,
        window_rows=150,
        **kw,
    )


def _windows(mm, tmp_path, pack_epochs: int) -> DistWindows:
    fs = DiskFeatures(mm, cache_bytes=0, threads=2)
    return _one_rank(fs, pack_epochs=pack_epochs, last_epoch=2, scratch_dir=str(tmp_path))


@pytest.mark.parametrize("pack_epochs", [0, 3])
def test_windows_serve_their_batches_rows_and_read_only_their_segment(
    features, tmp_path, pack_epochs
):
    x, mm = features
    dw = _windows(mm, tmp_path, pack_epochs)
    try:
        for epoch in range(3):
            seen = []
            for batches, _ in dw.windows(iter(_sample(epoch)), epoch=epoch, sample=_sample):
                if pack_epochs:  # a round's row sets wait on the scratch disk, not in memory
                    segs = [g for g in dw.packs.get(epoch).segments if len(g.ids)]
                    assert segs and all(g.ids.dtype == np.int32 for g in segs)
                    assert not any(g.ids.flags.owndata for g in segs)  # mapped from a file
                    spilled = list(tmp_path.glob(f".shoal-pack*/ids-{epoch}-*.npy"))
                    assert len(spilled) == len(segs)
                for mb in batches:
                    out = np.empty((len(mb.n_id), DIM), np.float32)
                    np.testing.assert_array_equal(dw.serve(mb.n_id, out), x[mb.n_id])
                    seen.append(mb.n_id)
            assert len(seen) == 25
            assert not list(tmp_path.glob(f".shoal-pack*/ids-{epoch}-*"))  # gone with the pack
            io = dw.io
            assert io["windows"] >= 4  # window_rows keeps each window to a few batches
            if pack_epochs and epoch > 0:  # packed by the first epoch's sweep
                assert io["pack_bytes_read"] == 0 and io["bytes_written"] == 0
                # each window reads its segment: its rows, and the rest of its last page
                assert io["bytes_read"] <= io["rows_read"] * DIM * 4 + io["windows"] * 4096, io
    finally:
        dw.close()
    assert not list(tmp_path.glob(".shoal-pack*/*"))  # the packs and their row sets removed


def test_a_lone_last_epoch_is_packed_when_its_samples_are_spooled(features, tmp_path):
    """The run's last epoch alone makes a round only when its samples are spooled (the
    neighbour lists on disk: its sampling then takes the windows' memory), and rounds lend
    the window slots to sampling only when they pack."""
    _, mm = features
    dw = _windows(mm, tmp_path, 2)  # epochs 0-2
    try:
        assert dw._round(0) == [0, 1] and dw._round(2) == []
        assert dw.round_room == int(dw.window_rows.min()) * DIM * 4 > 0
        dw.spool = object()  # (spooling: only its presence matters to the round)
        assert dw._round(2) == [2]
    finally:
        dw.spool = None
        dw.close()
    dw = _windows(mm, tmp_path, 0)
    assert dw.round_room == 0 and dw._round(0) == []
    dw.close()


def test_the_first_round_also_takes_the_start_room(features, tmp_path):
    """Before the run's first round the cache is not read and no step has run: that round
    lends their memory (``start_room``) to its sampling besides the window slots; later
    rounds lend the slots only."""
    _, mm = features
    fs = DiskFeatures(mm, cache_bytes=0, threads=2)
    dw = _one_rank(fs, pack_epochs=2, last_epoch=3, scratch_dir=str(tmp_path), start_room=1000)
    slots = int(dw.window_rows.min()) * DIM * 4
    try:
        assert dw.start_room == 1000 and dw.round_room == slots + 1000
        for _ in dw.windows(iter(_sample(0)), epoch=0, sample=_sample):
            assert dw.round_room == slots  # planned: the next rounds lend the slots only
        assert dw.round_room == slots
    finally:
        dw.close()


def test_the_degree_rule_classifies_rows_as_the_cache_does(features):
    """A cache of the rows of highest in-degree (ties by position, many ties here) is
    described by its last row's (degree, position): the rule classifies every row as the
    cache's own slots do; a cache chosen otherwise is not described by a rule."""
    _, mm = features
    deg = np.random.default_rng(1).integers(0, 6, N).astype(np.float32)
    fs = DiskFeatures(mm, cache_bytes=700 * DIM * 4, priority=np.argsort(-deg, kind="stable"))
    dw = _one_rank(fs, degrees=deg)
    assert dw._rules is not None and dw._rules[0, 0] == 2
    ids = np.arange(N)
    np.testing.assert_array_equal(dw._uncached_by_rule(ids, deg[ids]), dw._uncached(ids))
    assert 0 < len(dw._uncached(ids)) < N
    dw.close()
    other = DiskFeatures(mm, cache_bytes=700 * DIM * 4)  # the first rows, whatever their degree
    dw = _one_rank(other, degrees=deg)
    assert dw._rules is None
    dw.close()


def test_a_round_sampled_together_packs_the_same_rows(features, tmp_path):
    """``rounds(epochs)`` samples a round's epochs in one sequence (groups spanning their
    boundaries): called once for the round, never ``sample`` for its epochs, and every
    window serves the same rows as packing epoch by epoch."""
    x, mm = features
    calls = []

    def rounds(epochs):
        calls.append(list(epochs))
        return ((e, mb) for e in epochs for mb in _sample(e))

    def sample(epoch):
        raise AssertionError("a round sampled together samples no epoch alone")

    dw = _windows(mm, tmp_path, 3)
    try:
        for epoch in range(3):
            seen = 0
            for batches, _ in dw.windows(
                iter(_sample(epoch)), epoch=epoch, sample=sample, rounds=rounds
            ):
                for mb in batches:
                    out = np.empty((len(mb.n_id), DIM), np.float32)
                    np.testing.assert_array_equal(dw.serve(mb.n_id, out), x[mb.n_id])
                    seen += 1
            assert seen == 25
            if epoch > 0:  # read from the round's packs: each window its own segment
                assert dw.io["pack_bytes_read"] == 0 and dw.io["bytes_written"] == 0
        assert calls == [[0, 1, 2]]
    finally:
        dw.close()
