"""Epoch packs: the uncached rows of several future epochs gathered by one sweep.

A window read from the feature file costs about one sweep of it whatever its size
(docs/measurements.md#epoch-packs-and-spooled-samples). DiskGNN (Liu et al., VLDB 2025,
Sec. 3-4: "offline sampling" then "feature packing") samples ahead and writes the features each
batch group needs contiguously; this module does it per *epoch*: the rows of ``K`` future
epochs (their batches depend only on ``(seed, epoch, step)``) are read by **one** sweep, and
each epoch's rows are written to the scratch directory in first-use order, one segment per
window (DiskGNN's batch groups: :meth:`~shoal.rows.prefetch.WindowPrefetcher._windows`), each
sorted by id: a window reads its own segment, one contiguous run. A row two windows need is
written to both (as in DiskGNN); an epoch given as one set of rows is one segment. Deviation
from DiskGNN: packs hold rows, not the sampled blocks (the batches are sampled again: sampling
is cheap next to the I/O). Files are written with ``O_DIRECT`` from page-aligned staging
buffers (buffered where refused) and removed once their epoch is read.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shoal.rows.direct import PAGE, RowFile, _aligned, read_file_into
from shoal.rows.opener import open_file
from shoal.utils.arrays import unique_sorted
from shoal.utils.io import scratch_space

log = logging.getLogger(__name__)

__all__ = [
    "PACK_CHUNK",
    "PACK_EPOCHS",
    "PACK_STAGE",
    "EpochPack",
    "PackStats",
    "Packs",
    "compact_ids",
    "default_pack_epochs",
    "free_bytes",
    "pack_epochs",
    "pack_sizes",
]

#: epochs gathered by one sweep (default 8; ``--pack-epochs``, 0 or 1 = off): each sweep reads
#: the whole feature file, so fewer sweeps read less, and the start's round samples with the
#: most memory free (docs/measurements.md#epoch-packs-and-spooled-samples)
PACK_EPOCHS = 8
#: rows read per step of the sweep (bytes; default 16 MiB) before they are routed to the packs
#: (two such buffers: the next step is read while this one is written).
PACK_CHUNK = 16 << 20
#: free space kept on the scratch file system when packing (bytes; default 1 GiB).
SCRATCH_MARGIN = 1 << 30
#: each pack's staging buffer (bytes; default 1 MiB): rows are written in blocks of this size.
PACK_STAGE = 1 << 20


@dataclass
class PackStats:
    """What the sweeps of a prefetcher did: bytes read and written, seconds, sweeps."""

    bytes_read: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    #: of :attr:`seconds`, those spent writing the packs (the rest reads and routes rows)
    write_seconds: float = 0.0
    sweeps: int = 0

    def snapshot(self) -> dict:
        return dict(self.__dict__)


def default_pack_epochs(
    pack_epochs: int | None, structure_in_memory: bool, spooled: bool = False
) -> int:
    """``pack_epochs`` when given, else :data:`PACK_EPOCHS` when the graph structure is in
    memory or the samples of packed epochs are kept on disk (``spooled``,
    :class:`~shoal.rows.spool.SampleSpool`), and 0 otherwise: packing samples every epoch
    twice (once to learn its rows), which costs little in memory and, with the structure on
    disk and nothing spooled, a second pass of neighbour-block reads, which on a large graph
    costs more than packing saves (docs/measurements.md#epoch-packs-and-spooled-samples)."""
    if pack_epochs is not None:
        return int(pack_epochs)
    return PACK_EPOCHS if structure_in_memory or spooled else 0


def pack_sizes(pool: int, writers: int, share: int = 16) -> tuple[int, int]:
    """``(chunk_bytes, stage_bytes)`` of a sweep writing ``writers`` pack segments at once
    next to a memory pool of ``pool`` bytes: :data:`PACK_CHUNK` and :data:`PACK_STAGE`,
    smaller when they would take more than ``1/share`` of the pool (the sweep's two chunk
    buffers, one read while the other is written, and the staging buffers together; at
    least a page each; default a sixteenth: windows may be alive during the sweep; 2 where
    the pool is idle meanwhile)."""
    share = max(int(share), 2)
    chunk = max(PAGE, min(PACK_CHUNK, pool // (2 * share)))
    stage = max(PAGE, min(PACK_STAGE, pool // (share * max(writers, 1))) // PAGE * PAGE)
    return chunk, stage


class _Writer:
    """Appends rows to a file in blocks of ``stage`` bytes (a multiple of a page), with
    ``O_DIRECT`` when the file system allows it (the last block padded to a whole page)."""

    def __init__(self, path: Path, stage: int = PACK_STAGE) -> None:
        self.path = path
        self.stage = stage
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        direct = getattr(os, "O_DIRECT", 0)
        self.fd = -1
        if direct:
            try:
                self.fd = os.open(path, flags | direct, 0o600)
            except OSError:
                self.fd = -1
        self.direct = self.fd >= 0
        if not self.direct:
            self.fd = os.open(path, flags, 0o600)
        self.buf = _aligned(stage)
        self.used = 0
        self.written = 0
        self.seconds = 0.0  # spent in write calls

    def append(self, rows: np.ndarray) -> None:
        data = rows.reshape(-1).view(np.uint8)
        pos = 0
        while pos < len(data):
            k = min(len(data) - pos, self.stage - self.used)
            self.buf[self.used : self.used + k] = data[pos : pos + k]
            self.used += k
            pos += k
            if self.used == self.stage:
                self._flush(self.stage)

    def _flush(self, nbytes: int) -> None:
        t0 = time.perf_counter()
        view = memoryview(self.buf)[:nbytes]
        done = 0
        while done < nbytes:
            k = os.write(self.fd, view[done:])
            if k <= 0:
                raise OSError(f"{self.path}: short write")
            done += k
        self.written += nbytes
        self.used = 0
        self.seconds += time.perf_counter() - t0

    def finish(self) -> None:
        if self.used:
            pad = -self.used % PAGE
            self.buf[self.used : self.used + pad] = 0
            self._flush(self.used + pad)
        if not self.direct:  # written through the page cache: let it go
            os.fdatasync(self.fd)
            os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(self.fd)
        self.fd = -1

    def abort(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.path.unlink(missing_ok=True)


class _Segment:
    """One window's rows in a pack: row ``j`` of ``path`` is row ``ids[j]`` (sorted, unique)."""

    def __init__(self, path: Path, ids: np.ndarray) -> None:
        self.path = path
        self.ids = ids

    def positions(self, cold: np.ndarray) -> np.ndarray | None:
        """Where ``cold`` (sorted, unique) lies in this segment, or None when it lacks a row."""
        if len(cold) > len(self.ids):
            return None
        pos = np.searchsorted(self.ids, cold)
        if len(pos) and (pos[-1] >= len(self.ids) or not np.array_equal(self.ids[pos], cold)):
            return None
        return pos


class EpochPack:
    """One epoch's uncached rows in a pack: a file per window of the epoch, in the order the
    windows are read (module docstring).

    Args:
        segments: ``(path, ids)`` per window: row ``j`` of the file is row ``ids[j]`` (sorted,
            unique); dim, dtype: of a row; threads: concurrent reads of a segment's
            :class:`RowReader` (default 8).
    """

    def __init__(
        self,
        segments: list[tuple[Path, np.ndarray]],
        *,
        dim: int,
        dtype: np.dtype,
        threads: int = 8,
    ) -> None:
        self.segments = [_Segment(Path(p), np.asarray(i)) for p, i in segments]
        self.dim = dim
        self.dtype = np.dtype(dtype)
        self.threads = threads
        self._next = 0  # the segment the next window is expected to read

    @property
    def ids(self) -> np.ndarray:
        """Every row the pack holds (sorted, unique)."""
        if len(self.segments) == 1:
            return self.segments[0].ids.astype(np.int64, copy=False)
        return unique_sorted(np.concatenate([g.ids for g in self.segments])).astype(np.int64)

    @property
    def nbytes(self) -> int:
        """Bytes of the rows in the pack (a row two windows need counted twice)."""
        return sum(len(g.ids) for g in self.segments) * self.dim * self.dtype.itemsize

    def holds(self, cold: np.ndarray) -> bool:
        """Whether ``cold`` (sorted, unique) lies in one segment (a window's rows)."""
        return any(g.positions(cold) is not None for g in self.segments)

    def read(self, cold: np.ndarray, out: np.ndarray) -> int:
        """Rows ``cold`` (sorted, unique, all in one segment: a window's) into ``out``; returns
        bytes read. The segment expected next (windows are read in order) is tried first."""
        if len(cold) == 0:
            return 0
        n = len(self.segments)
        for k in range(n):
            j = (self._next + k) % n
            g = self.segments[j]
            pos = g.positions(cold)
            if pos is None:
                continue
            self._next = (j + 1) % n
            if len(pos) == len(g.ids):  # the whole segment (a window's rows): no staging copy
                nbytes = read_file_into(g.path, out)
                if nbytes is not None:
                    return nbytes
            rb = self.dim * self.dtype.itemsize
            f = RowFile(str(g.path), 0, rb, rb, len(g.ids), self.dim, self.dtype)
            reader = open_file(f, threads=self.threads)
            try:
                nbytes = reader.read(pos, out)
            finally:
                # a reader's threads keep page-aligned staging buffers (shared anonymous
                # memory, not in RssAnon) until it closes: one left open per window would
                # grow the process window after window (docs/measurements.md#the-memory-plan)
                reader.close()
            return nbytes
        raise KeyError(
            f"{self.segments[0].path.parent}: a window asked for rows its epoch's pack lacks"
        )

    def close(self) -> None:
        """Remove the pack's files."""
        for g in self.segments:
            g.path.unlink(missing_ok=True)


def _segments(sets: np.ndarray | list[np.ndarray]) -> list[np.ndarray]:
    """An epoch's windows' rows (one array: one window), in the integer type given (a
    round's sets are int32 where the rows allow: :func:`compact_ids`)."""
    if isinstance(sets, np.ndarray):
        sets = [sets]
    out = [np.asarray(s) for s in sets]
    for s in out:
        if s.size and not np.issubdtype(s.dtype, np.integer):
            raise TypeError(f"row ids must be integers, got {s.dtype}")
    return [s if s.size else s.astype(np.int64) for s in out]


def compact_ids(ids: np.ndarray, num_rows: int) -> np.ndarray:
    """``ids`` (row positions below ``num_rows``) as int32 when every row id fits, else
    int64: the sets a round keeps until its sweep and its packs keep until their windows are
    read take half the memory (docs/measurements.md#epoch-packs-and-spooled-samples)."""
    kind = np.int32 if int(num_rows) <= np.iinfo(np.int32).max else np.int64
    return np.asarray(ids).astype(kind, copy=False)


#: rows of the marks turned into ids at a time by :func:`_union` (default 4M)
_UNION_SLICE = 1 << 22


def _union(parts: list[np.ndarray], num_rows: int | None) -> np.ndarray:
    """The sorted distinct ids of ``parts``: by marking rows (one byte per row of the
    features; the ids as int32 where they fit, made slice by slice) when that takes less
    than sorting a concatenated copy, else by one sort (int64)."""
    total = sum(len(s) for s in parts)
    if not total:
        return np.empty(0, np.int64)
    if num_rows is not None and int(num_rows) <= 16 * total:
        n = int(num_rows)
        mark = np.zeros(n, np.bool_)
        for s in parts:
            mark[s] = True
        out = [
            compact_ids(np.flatnonzero(mark[a : a + _UNION_SLICE]) + a, n)
            for a in range(0, n, _UNION_SLICE)
        ]
        return np.concatenate(out)
    return unique_sorted(np.concatenate(parts)).astype(np.int64, copy=False)


def pack_epochs(
    features,
    id_sets: dict[int, np.ndarray | list[np.ndarray]],
    directory: Path,
    *,
    stats: PackStats | None = None,
    between: Callable[[], None] | None = None,
    chunk_bytes: int = PACK_CHUNK,
    stage_bytes: int = PACK_STAGE,
) -> dict[int, EpochPack]:
    """Read the rows of every set in ``id_sets`` (epoch -> the sorted unique uncached ids of
    a :class:`~shoal.rows.featstore.DiskFeatures` that each window of the epoch needs, in the
    order the windows are read; one array: one window) with one sweep of its file and write
    each window's rows to a segment file in ``directory``; returns the packs by epoch. When
    the features' cache is not loaded yet, its rows are read by the same sweep. ``between`` is
    called before each chunk (it may wait, or raise to stop; written files are then removed).
    Each segment has a staging buffer of ``stage_bytes``."""
    stats = stats if stats is not None else PackStats()
    t0 = time.perf_counter()
    keys = sorted(id_sets)
    segs = [(e, j, s) for e in keys for j, s in enumerate(_segments(id_sets[e]))]
    parts = [s for _, _, s in segs]
    union = _union(parts, getattr(features, "num_rows", None))
    writers = [_Writer(directory / f"epoch-{e}-{j}.rows", stage_bytes) for e, j, _ in segs]
    at = [0] * len(segs)
    try:

        def sink(ids: np.ndarray, rows: np.ndarray) -> None:
            hi_id = ids[-1]
            for k, s in enumerate(parts):
                # (the bound in the segment's own dtype: a wider one makes numpy cast the
                # whole segment, a copy per chunk and segment, 100x the search)
                hi = int(np.searchsorted(s, s.dtype.type(hi_id), side="right"))
                if hi > at[k]:
                    writers[k].append(rows[np.searchsorted(ids, s[at[k] : hi])])
                    at[k] = hi

        nbytes = features.sweep(
            union, sink, chunk_rows=max(1, chunk_bytes // features.row_bytes), between=between
        )
        for w in writers:
            w.finish()
    except BaseException:
        for w in writers:
            w.abort()
        raise
    stats.bytes_read += nbytes
    stats.bytes_written += sum(w.written for w in writers)
    stats.write_seconds += sum(w.seconds for w in writers)
    stats.seconds += time.perf_counter() - t0
    stats.sweeps += 1
    threads = getattr(features.reader, "threads", 8)
    return {
        e: EpochPack(
            [(writers[k].path, parts[k]) for k, (f, _, _) in enumerate(segs) if f == e],
            dim=features.dim,
            dtype=features.dtype,
            threads=threads,
        )
        for e in keys
    }


def free_bytes(directory: Path) -> int:
    """Free bytes on the file system of ``directory``."""
    return shutil.disk_usage(directory).free


class Packs:
    """The packs of one reader of epochs (a prefetcher): which epochs one sweep packs, the
    packs by epoch, a private scratch directory, and what the sweeps did (:attr:`stats`).

    Args:
        features: the :class:`~shoal.rows.featstore.DiskFeatures` swept.
        epochs: epochs per sweep, ``K`` (0 or 1: off).
        scratch_dir: where the private directory goes (default None: beside the directory
            of the feature file).
        pool: the memory the windows and cache share, which sizes the sweep's buffers
            (:func:`pack_sizes`); share: the part of it they may take (:func:`pack_sizes`'s,
            default 16: a sixteenth).
    """

    def __init__(
        self,
        features,
        *,
        epochs: int,
        scratch_dir: str | None,
        pool: int,
        share: int = 16,
    ) -> None:
        self.features = features
        self.epochs = int(epochs)
        self.scratch_dir = scratch_dir
        self.stats = PackStats()
        self.pool = pool
        self.share = share
        self._id_files: dict[int, list[Path]] = {}
        self._packs: dict[int, EpochPack] = {}
        self._scratch: contextlib.ExitStack | None = None
        self._path: Path | None = None

    def get(self, epoch: int | None) -> EpochPack | None:
        return self._packs.get(epoch)

    def round(self, epoch: int, last_epoch: int | None) -> list[int]:
        """The epochs one sweep packs from ``epoch`` on: none when packing is off, ``epoch``
        is packed already or is the last one (a pack would only add its write)."""
        k = self.epochs
        if k < 2 or epoch in self._packs or self.features.reader is None:
            return []
        last = epoch + k - 1 if last_epoch is None else min(epoch + k - 1, last_epoch)
        return list(range(epoch, last + 1)) if last > epoch else []

    def pack(
        self,
        sets: dict[int, np.ndarray | list[np.ndarray]],
        between: Callable[[], None] | None,
    ) -> bool:
        """Pack ``sets`` (epoch -> sorted uncached rows, or those of each of its windows in
        order) with one sweep: the first epochs whose packs fit the scratch file system
        (with :data:`SCRATCH_MARGIN` free), with a warning when not all do (the others are
        packed by a later round); False, with a warning and packing turned off, when not even
        the first fits."""
        directory = self.directory()
        rb = self.features.row_bytes
        need = {e: sum(len(s) for s in _segments(v)) * rb for e, v in sorted(sets.items())}
        room = free_bytes(directory) - SCRATCH_MARGIN
        fits = list(itertools.accumulate(need.values()))
        k = sum(1 for total in fits if total <= room)  # the epochs in order that fit
        if k == 0:
            log.warning(
                "not packing epochs %d-%d: %s has less than %.1f GiB free; windows are "
                "read from the feature file (--scratch-dir names another disk)",
                min(sets),
                max(sets),
                directory.parent,
                (fits[0] + SCRATCH_MARGIN) / 2**30,
            )
            self.epochs = 0
            return False
        if k < len(need):
            kept = list(need)[:k]
            log.warning(
                "packing epochs %d-%d, not %d-%d: %s has %.1f GiB free, %.1f GiB needed "
                "(the others are packed by the next sweep; --scratch-dir names another disk)",
                kept[0],
                kept[-1],
                min(sets),
                max(sets),
                directory.parent,
                (room + SCRATCH_MARGIN) / 2**30,
                (fits[-1] + SCRATCH_MARGIN) / 2**30,
            )
            for e in set(sets) - set(kept):  # packed by a later round: sampled again
                self._drop_ids(e)
            sets = {e: sets[e] for e in kept}
        segs = [s for v in sets.values() for s in _segments(v)]
        chunk, stage = pack_sizes(self.pool, len(segs), self.share)
        before = self.stats.snapshot()
        self._packs.update(
            pack_epochs(
                self.features,
                sets,
                directory,
                stats=self.stats,
                between=between,
                chunk_bytes=chunk,
                stage_bytes=stage,
            )
        )
        now = self.stats.snapshot()
        log.info(
            "packed epochs %d-%d: read %.2f GB, wrote %.2f GB in %.1f s (%.1f s writing, "
            "%d segments, %d KiB writes)",
            min(sets),
            max(sets),
            (now["bytes_read"] - before["bytes_read"]) / 1e9,
            (now["bytes_written"] - before["bytes_written"]) / 1e9,
            now["seconds"] - before["seconds"],
            now["write_seconds"] - before["write_seconds"],
            len(segs),
            stage >> 10,
        )
        return True

    def directory(self) -> Path:
        """The private scratch directory of the packs (made on first use)."""
        if self._path is None:
            beside = Path(self.features.reader.path).parent  # next to its directory
            self._scratch = contextlib.ExitStack()
            self._path = self._scratch.enter_context(
                scratch_space(self.scratch_dir, beside=beside, prefix="shoal-pack")
            )
        return self._path

    def spill_ids(self, epoch: int, ids: np.ndarray) -> np.ndarray:
        """``ids`` (a window's sorted rows of ``epoch``, :func:`compact_ids`) written to the
        scratch directory and mapped back read-only: a round's sets wait for their sweep,
        and a pack's segments keep them, without memory of their own (the sweep and each
        window read them once, in order). Removed with the epoch's pack (:meth:`drop`)."""
        files = self._id_files.setdefault(epoch, [])
        path = self.directory() / f"ids-{epoch}-{len(files)}.npy"
        ids = np.asarray(ids)
        if not len(ids):
            return ids
        with open(path, "wb") as f:
            np.save(f, ids)
            f.flush()
            os.fdatasync(f.fileno())
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        files.append(path)
        return np.load(path, mmap_mode="r")

    def _drop_ids(self, epoch: int) -> None:
        for path in self._id_files.pop(epoch, []):
            path.unlink(missing_ok=True)

    def drop(self, epoch: int | None = None) -> None:
        """Remove ``epoch``'s pack (None: every pack, and the scratch directory)."""
        for e in list(self._packs) if epoch is None else [epoch]:
            pack = self._packs.pop(e, None)
            if pack is not None:
                pack.close()
        for e in list(self._id_files) if epoch is None else [epoch]:
            self._drop_ids(e)
        if epoch is None and self._scratch is not None:
            self._scratch.close()
            self._scratch = self._path = None
