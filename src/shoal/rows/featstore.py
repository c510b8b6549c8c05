"""``DiskFeatures``: feature rows under a memory budget, without the page cache.

Ginex (Park et al., VLDB 2022, Sec. 4-5): the sampler runs a *window* of batches ahead, the
union of the rows they need is read in one planned pass (:class:`~shoal.rows.direct.RowReader`),
and batches are assembled from memory: from a **static cache** of the hottest rows (chosen once
by a priority order, by default the in-degree; loaded by one sequential sweep; never changed
while reader threads use it) and the **window**, the rows of its batches that the cache lacks
(each read once: Belady's policy over known future accesses, as in Ginex). A dynamic policy
such as S3-FIFO (Yang et al., SOSP 2023) hits more often in a small cache, but the hit rate
does not set the I/O: a window costs about one sweep of the file whatever it holds
(docs/measurements.md#static-cache-and-windows; hence :mod:`shoal.rows.packing`). An in-memory
array is served as is, entirely "cached". Cache and windows hold the rows as stored (a
compact dtype holds twice or four times the rows in the same bytes); they are decoded into
float32 as batches are assembled (:mod:`shoal.rows.decode`; int8 scales are kept for every
row, 4 bytes each).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import torch

from shoal.rows import _kernels as K
from shoal.rows.decode import decode_cached, decode_rows, source_scales
from shoal.rows.direct import aligned_empty
from shoal.rows.gather import gather_rows
from shoal.rows.opener import open_rows
from shoal.rows.source import RowSource
from shoal.utils.arrays import unique_sorted
from shoal.utils.featdtype import scales_of
from shoal.utils.memory import huge_empty
from shoal.utils.progress import progress

__all__ = ["CACHE_POLICIES", "DiskFeatures", "FeatureStats", "Window", "presampled_priority"]


@dataclass
class FeatureStats:
    """Counters of a :class:`DiskFeatures` (rows requested and served from the cache, rows and
    bytes read from disk, seconds spent reading)."""

    requested: int = 0
    hits: int = 0
    rows_read: int = 0
    bytes_read: int = 0
    read_seconds: float = 0.0
    windows: int = 0
    extra: dict = field(default_factory=dict)

    def snapshot(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "extra"}


class Window:
    """The rows of one window's batches that the cache lacks (``cold`` sorted ids, ``rows``)."""

    def __init__(
        self,
        store: DiskFeatures,
        cold: np.ndarray,
        rows: np.ndarray,
        bytes_read: int = 0,
        seconds: float = 0.0,
    ) -> None:
        self.store = store
        self.cold = cold
        self.rows = rows
        self.bytes_read = bytes_read
        self.read_seconds = seconds
        self.requested = 0
        self.hits = 0

    @property
    def nbytes(self) -> int:
        return int(self.rows.nbytes + self.cold.nbytes)

    def gather(self, ids: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """float32 rows of ``ids`` (each must be cached or in this window) into ``out``."""
        before = self.store.stats.hits
        x = self.store._assemble(ids, self.cold, self.rows, out)
        self.requested += len(ids)
        self.hits += self.store.stats.hits - before
        return x

    def add_to(self, rec: dict) -> None:
        """Count this window in an epoch's record (the keys of :meth:`FeatureStats.snapshot`)."""
        rec["requested"] += self.requested
        rec["hits"] += self.hits
        rec["rows_read"] += len(self.cold)
        rec["bytes_read"] += self.bytes_read
        rec["read_seconds"] += self.read_seconds
        rec["windows"] += 1


#: cache policies: ``presample`` (rows by how many batches of a sampled epoch need them) and
#: ``degree`` (by in-degree alone)
CACHE_POLICIES = ("presample", "degree")


def presampled_priority(counts: np.ndarray, priority: np.ndarray) -> np.ndarray:
    """Rows ordered by decreasing ``counts`` (how many batches of a sampled epoch need each
    row; uint16), ties in the order of ``priority`` (e.g. by in-degree): GNNLab's pre-sampling
    cache policy (Yang et al., EuroSys 2022, "PreSC": a vertex's hotness is measured by
    sampling epochs ahead, not guessed from its degree). For a static cache beside windows
    that read every uncached row they need, caching the rows needed by the most batches
    minimises the rows read (a row in ``k`` windows costs ``k`` reads uncached)."""
    counts = np.asarray(counts, np.uint16)
    key = np.iinfo(np.uint16).max - counts[priority]  # 16-bit keys: a stable radix sort
    return np.asarray(priority)[np.argsort(key, kind="stable")]


class DiskFeatures:
    """Rows of an ``(N, F)`` feature matrix within a budget (module docstring).

    Args:
        features: the matrix; a memory map (``np.load(..., mmap_mode="r")``) is read with
            planned direct reads, an in-memory array is used as is. A list of matrices is
            stacked row-wise (a store part's core rows, then its halo rows): memory maps are
            read as one (:class:`~shoal.rows.stacked.StackedReader`), arrays concatenated.
            Any :class:`~shoal.rows.source.RowSource` (another backend) is read through its
            ``read`` like a file (:func:`~shoal.rows.opener.open_rows`).
        cache_bytes: bytes of the static cache (default 0; at least the whole matrix caches it
            whole with one sequential read).
        priority: node ids, most valuable first, that fill the cache (default: ``0..N-1``);
            give ids sorted by decreasing degree.
        normalize: row-normalise the gathered rows (default false).
        threads / merge_gap: of the :class:`RowReader` (defaults 8 / 32 KiB).
        show_progress: a bar while the cache loads (default: when stderr is a terminal).
        defer_cache: choose the cached rows now but read them with the first window
            (:meth:`load_cache`), in the same pass (default false: read them now).
    """

    def __init__(
        self,
        features: np.ndarray | list[np.ndarray] | RowSource,
        *,
        cache_bytes: int = 0,
        priority: np.ndarray | None = None,
        normalize: bool = False,
        threads: int = 8,
        merge_gap: int | None = None,
        show_progress: bool | None = None,
        defer_cache: bool = False,
    ) -> None:
        if isinstance(features, RowSource):
            self.reader: RowSource | None = open_rows(features)
            self.features = None  # every row is read through the source
            self.dtype = np.dtype(features.dtype)
            self.num_rows = int(features.num_rows)
            self.dim = int(features.dim)
            self.scales = source_scales(features)
        else:
            self._open_arrays(features, threads, merge_gap)
        self.normalize = normalize
        self.stats = FeatureStats()
        self.row_bytes = self.dim * self.dtype.itemsize
        self._buf = np.empty((0, self.dim), np.float32)
        self.show_progress = show_progress
        self.cache_load_seconds = 0.0
        self._choose_cache(int(cache_bytes), priority)
        if not defer_cache:
            self.load_cache()

    def _open_arrays(self, features, threads: int, merge_gap: int | None) -> None:
        members = [features] if isinstance(features, np.ndarray) else list(features)
        if not members or any(a.ndim != 2 for a in members):
            raise ValueError(f"features must be 2-D, got shapes {[a.shape for a in members]}")
        if len({(a.shape[1], a.dtype) for a in members}) != 1:
            raise ValueError("stacked feature arrays must agree in columns and dtype")
        kw = {} if merge_gap is None else {"merge_gap": merge_gap}
        single = members[0] if len(members) == 1 else None
        self.reader = open_rows(single if single is not None else members, threads=threads, **kw)
        # in memory: used as is (several small arrays become one matrix)
        self.features = single if single is not None else members[0]
        if self.reader is None and single is None:
            self.features = np.concatenate(members)
        self.dtype = members[0].dtype
        self.scales = None
        if self.dtype == np.int8:  # every row's scale, in memory (4 bytes a row)
            self.scales = (
                source_scales(self.reader)
                if self.reader is not None
                else np.concatenate([np.asarray(scales_of(a), np.float32) for a in members])
            )
        self.num_rows = int(sum(a.shape[0] for a in members))
        self.dim = int(members[0].shape[1])

    # --------------------------------------------------------------------- cache
    def _choose_cache(self, cache_bytes: int, priority) -> None:
        n = self.num_rows
        self._hot = None
        self.priority = None
        if self.reader is None:  # in memory: everything is "cached"
            self.slot = None
            self.cache = self.features
            self.cached_rows = n
            return
        k = min(n, max(0, cache_bytes) // max(self.row_bytes, 1))
        if priority is not None and len(priority) != n:
            raise ValueError(f"priority must list all {n} rows, got {len(priority)}")
        # kept (4 B per row) until the cache is read, for choose_cache
        self.priority = (
            None
            if priority is None
            else np.asarray(priority, dtype=np.int32 if n < 2**31 else np.int64)
        )
        if k >= n:
            hot = np.arange(n, dtype=np.int64)
        else:
            order = np.arange(n, dtype=np.int64) if priority is None else self.priority
            hot = np.sort(np.asarray(order[:k], dtype=np.int64))
        self.slot = np.full(n, -1, dtype=np.int32 if k < 2**31 else np.int64)
        self.slot[hot] = np.arange(k, dtype=self.slot.dtype)
        self.cache = huge_empty((k, self.dim), self.dtype)  # read at random rows
        self.cached_rows = k
        self._hot = hot

    @property
    def cache_loaded(self) -> bool:
        return self._hot is None

    def choose_cache(self, cache_bytes: int, priority: np.ndarray | None = None) -> None:
        """Choose the cached rows again, ``cache_bytes`` of them in the priority order given
        at construction or, when given, in ``priority`` (e.g. after
        :func:`~shoal.rows.windowfit.fit_windows` measured an epoch:
        :func:`presampled_priority`); only before the cache is read (``defer_cache=True``)."""
        if self.reader is None:
            return
        if self.cache_loaded:
            raise RuntimeError("the cache is loaded already: choose it before the first window")
        self._choose_cache(int(cache_bytes), self.priority if priority is None else priority)

    def load_cache(self, cold: np.ndarray | None = None) -> Window | None:
        """Read the cached rows, and with them (one pass over the file) the rows ``cold``
        (sorted, unique, none cached) as a window, returned. A no-op once loaded."""
        hot = self._hot
        if hot is None:
            return None if cold is None else self.window([], cold=cold)
        cold = np.empty(0, np.int64) if cold is None else np.asarray(cold, np.int64)
        rows = np.empty((len(cold), self.dim), dtype=self.dtype)
        ids = np.concatenate([hot, cold])
        dest = np.concatenate([np.arange(len(hot)), -1 - np.arange(len(cold))])
        order = np.argsort(ids, kind="stable")
        ids, dest = ids[order], dest[order]
        step = 1 << 20
        bar = progress(
            total=len(ids), desc="loading feature cache", unit="row", enable=self.show_progress
        )
        t0 = time.perf_counter()
        nbytes = 0
        for a in range(0, len(ids), step):
            nbytes += self.reader.read(ids[a : a + step], self.cache, dest[a : a + step], rows)
            bar.update(min(step, len(ids) - a))
        bar.close()
        self.cache_load_seconds = time.perf_counter() - t0
        self._hot = None
        self.priority = None  # chosen for good: its memory goes back
        return Window(self, cold, rows, nbytes, self.cache_load_seconds)

    def sweep(self, ids: np.ndarray, sink, *, chunk_rows: int, between=None) -> int:
        """Read the rows ``ids`` (sorted, unique, none cached) in id order, ``chunk_rows`` at a
        time, handing each chunk to ``sink(chunk_ids, chunk_rows)`` (the rows are valid during
        the call only); when the cache is not loaded yet, its rows are read by the same pass.
        ``between()`` is called before each chunk. The next chunk is read (by another thread,
        into a second buffer) while ``sink`` handles this one: a sink that writes, as
        :mod:`shoal.rows.packing`'s, overlaps its writes with the reads. Returns the bytes
        read (one pass over the file)."""
        ids = np.asarray(ids)  # int32 ids (a round's union) stay so: made int64 by chunk
        if not np.issubdtype(ids.dtype, np.integer):
            ids = ids.astype(np.int64)
        hot = self._hot
        t0 = time.perf_counter()
        if hot is not None and len(hot):
            every = np.concatenate([hot, ids])
            order = np.argsort(every, kind="stable")
            every, is_hot = every[order], order < len(hot)
        else:
            every, is_hot = ids, None
        step = min(max(1, chunk_rows), max(len(every), 1))
        bufs = [np.empty((step, self.dim), self.dtype) for _ in range(2)]
        bar = progress(
            total=len(every), desc="reading ahead", unit="row", enable=self.show_progress
        )

        def read(a: int, buf: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
            """Chunk ``a``'s ids that go to ``sink``, their rows and the bytes read."""
            c = every[a : a + step].astype(np.int64, copy=False)
            if is_hot is None:
                return c, buf[: len(c)], self.reader.read(c, buf)
            h = is_hot[a : a + step]
            dest = np.empty(len(c), np.int64)
            dest[h] = self.slot[c[h]]
            n_cold = len(c) - int(h.sum())
            dest[~h] = -1 - np.arange(n_cold)
            nbytes = self.reader.read(c, self.cache, dest, buf)
            return c[~h], buf[:n_cold], nbytes

        nbytes = 0
        starts = range(0, len(every), step)
        with ThreadPoolExecutor(1, thread_name_prefix="shoal-sweep") as pool:
            pending = None
            for k, a in enumerate(starts):
                if between is not None:
                    between()
                if pending is None:
                    pending = pool.submit(read, a, bufs[k % 2])
                cold, rows, got = pending.result()
                nbytes += got
                nxt = a + step
                # the next chunk is read while this one is handed over (the other buffer)
                pending = pool.submit(read, nxt, bufs[(k + 1) % 2]) if nxt < len(every) else None
                if len(cold):
                    sink(cold, rows)
                bar.update(min(step, len(every) - a))
        bar.close()
        if hot is not None:
            self.cache_load_seconds = time.perf_counter() - t0
            self._hot = None
            self.priority = None
        return nbytes

    def release_cache(self) -> int:
        """Give the cache's memory back, for good: every row is read from the file from now
        on (the end of training lends it to the final evaluation, which reads every needed
        row once per block anyway). Returns the bytes freed (0 for an in-memory matrix)."""
        if self.reader is None or self.slot is None:
            return 0
        freed = int(self.cache.nbytes)
        self.slot.fill(-1)
        self.cache = np.empty((0, self.dim), dtype=self.dtype)
        self.cached_rows = 0
        self._hot = None  # nothing left to load
        self.priority = None
        return freed

    def read_stored(
        self, ids: np.ndarray, out: np.ndarray, dest: np.ndarray | None = None
    ) -> np.ndarray:
        """Rows of ``ids`` (sorted, unique) as stored, read from the file straight into
        ``out`` (at least ``len(ids)`` rows of the stored dtype; with ``dest``, row ``ids[i]``
        into ``out[dest[i]]``), not decoded, not normalised; only while nothing is cached
        (:meth:`release_cache`, or a store that caches nothing). Returns them."""
        if self.reader is None or self.cached_rows:
            raise ValueError("read_stored reads from the file of a store that caches nothing")
        n = len(ids)
        if dest is None:
            out = out[:n]
        t0 = time.perf_counter()
        nbytes = self.reader.read(ids, out, dest) if n else 0
        self._count_read(n, nbytes, time.perf_counter() - t0)
        return out

    def _count_read(self, n: int, nbytes: int, seconds: float) -> None:
        """Count a read of ``n`` rows straight from the file (no cache) in :attr:`stats`."""
        s = self.stats
        s.read_seconds += seconds
        s.requested += n
        s.rows_read += n
        s.bytes_read += nbytes
        s.windows += 1

    def read_rows(self, ids: np.ndarray, out: np.ndarray) -> np.ndarray:
        """float32 rows of ``ids`` (sorted, unique) read from the file straight into ``out``
        (at least ``len(ids)`` rows; normalised when the store normalises), the cache not
        consulted (a store that caches nothing, or whose cache is lent:
        :meth:`release_cache`); returns them."""
        n = len(ids)
        out = out[:n]
        t0 = time.perf_counter()
        if self.dtype == np.float32:
            nbytes = self.reader.read(ids, out) if n else 0
        else:  # read as stored (compact), decoded into out
            raw = np.empty((n, self.dim), self.dtype)
            nbytes = self.reader.read(ids, raw) if n else 0
            scales = None if self.scales is None else self.scales[ids]
            decode_rows(raw, np.arange(n, dtype=np.int64), out, scales=scales)
        self._count_read(n, nbytes, time.perf_counter() - t0)
        if self.normalize:
            K._row_normalize(out, n)
        return out

    @property
    def cache_bytes(self) -> int:
        """Bytes the cache holds (an in-memory matrix counts whole)."""
        return int(self.cached_rows * self.row_bytes)

    # --------------------------------------------------------------------- windows
    def cold_of(self, ids: np.ndarray) -> np.ndarray:
        """Those of ``ids`` the cache lacks (any order, repeats kept)."""
        if self.slot is None:
            return np.empty(0, np.int64)
        ids = np.asarray(ids, dtype=np.int64)
        return ids[self.slot[ids] < 0]

    def window(
        self, id_arrays: list[np.ndarray], cold: np.ndarray | None = None, source=None
    ) -> Window:
        """Read the rows of ``id_arrays`` (the batches of a window) that the cache lacks
        (``cold``: those rows, sorted and unique, when the caller knows them), from the
        feature file or from ``source`` (an :class:`~shoal.rows.packing.EpochPack` that
        holds them)."""
        if not self.cache_loaded:
            self.load_cache()
        if cold is None:
            parts = [self.cold_of(a) for a in id_arrays]
            cold = unique_sorted(np.concatenate(parts)) if parts else np.empty(0, np.int64)
        # page-aligned: a pack's segment is read into it directly (EpochPack.read)
        rows = aligned_empty((len(cold), self.dim), self.dtype)
        t0 = time.perf_counter()
        reader = self.reader if source is None else source
        nbytes = reader.read(cold, rows) if len(cold) else 0
        secs = time.perf_counter() - t0
        s = self.stats
        s.read_seconds += secs
        s.rows_read += len(cold)
        s.bytes_read += nbytes
        s.windows += 1
        return Window(self, cold, rows, nbytes, secs)

    def _assemble(self, ids, cold, rows, out) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        n = len(ids)
        if n and (ids.min() < 0 or ids.max() >= self.num_rows):
            raise ValueError(f"row ids must be in [0, {self.num_rows})")
        if out is None:
            out = np.empty((n, self.dim), np.float32)
        if self.slot is None:
            gather_rows(self.features, ids, out, scales=self.scales)
            hits = n
        else:
            hits = decode_cached(ids, self.slot, self.cache, cold, rows, out, scales=self.scales)
        if hits < 0:
            raise KeyError(f"row {int(ids[-1 - hits])} is neither cached nor in the window")
        self.stats.requested += n
        self.stats.hits += int(hits)
        if self.normalize:
            K._row_normalize(out, n)
        return out[:n]

    def gather(self, ids: np.ndarray) -> torch.Tensor:
        """Rows of ``ids`` as a float32 tensor in a reused buffer (valid until the next call):
        a one-batch window. The ``Gatherer`` interface of the trainer."""
        ids = np.asarray(ids, dtype=np.int64)
        n = len(ids)
        if self._buf.shape[0] < n:
            self._buf = np.empty((max(n, int(self._buf.shape[0] * 1.25)), self.dim), np.float32)
        w = self.window([ids]) if self.reader is not None else None
        cold = w.cold if w is not None else np.empty(0, np.int64)
        rows = w.rows if w is not None else np.empty((0, self.dim), self.dtype)
        return torch.from_numpy(self._assemble(ids, cold, rows, self._buf[:n]))

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
