"""The memory budget of a training process: how much it may use, and how that is shared.

``--memory`` (``TrainConfig.memory``) is the memory one training process may use in all, page
cache of what it reads included; by default what it may use on this machine
(:func:`memory_limit`: the limit of its memory cgroup, v1 ``hierarchical_memory_limit`` or v2
``memory.max`` of its group and every ancestor, or when lower the machine's ``MemAvailable``
when training starts, shared equally by the processes started on one machine).
:func:`plan_budget` splits it into a reserve measured on the process (:func:`reserve_for`), the
graph structure (held in memory, read into the process's own memory, whenever it fits next to
the two smallest feature windows; else only its ``O(V)`` row index), and the feature windows
and cache: two window slots (one trained on, one being read) and the cache get a third each of
what is left until :func:`~shoal.rows.windowfit.fit_windows` resizes them from a sampled epoch
(docs/measurements.md#the-memory-plan and #static-cache-and-windows).

The structure comes before the feature cache: a neighbour list sampled from disk costs a
page read, and epochs sampled ahead (to pack their rows) read many times the CSR that way
(on the 10m graph at an eighth of its features: 31 GB of neighbour lists for four epochs of a
0.48 GB CSR), while each byte the cache gives up costs at most that byte once per epoch in
pack reads (docs/measurements.md#the-memory-plan).
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from shoal.errors import ShoalInputError
from shoal.rows.direct import MAX_RUN
from shoal.utils.memory import return_freed_memory, trim_freed_memory

__all__ = [
    "ACTIVATION_FACTOR",
    "FOOTPRINT_SLACK",
    "STAGING_READERS",
    "EVAL_READERS",
    "PeakFootprint",
    "STRUCTURE_MODES",
    "BudgetPlan",
    "activation_bytes",
    "anonymous_bytes",
    "batch_rows",
    "batch_window",
    "bytes_freed_by",
    "memory_cgroup",
    "mapped_data_bytes",
    "memory_limit",
    "plan_budget",
    "process_footprint",
    "reserve_for",
    "staging_bytes",
]

_UNLIMITED = 1 << 60
#: the reserve when this process's footprint cannot be measured (no ``/proc``): about what the
#: interpreter, torch, numba, the model and one batch's activations take for GraphSAGE at
#: batch 1024 (docs/measurements.md#the-memory-plan).
RESERVE = 1 << 30
#: headroom above the measured footprint and the working memory (allocator fragmentation,
#: thread stacks, numba kernels compiled or loaded after the measurement, library code first
#: run after it, such as the torch code the backward pass and the optimizer fault in):
#: 128 MiB (docs/measurements.md#the-memory-plan).
FOOTPRINT_SLACK = 128 << 20
#: direct readers open at once in a training process, each with a staging buffer per thread:
#: the feature file's (windows, the cache, the packing sweep), the pack segment being read,
#: and the structure's (sampling with the structure on disk).
STAGING_READERS = 3
#: direct readers an evaluation opens besides those training keeps (whose buffers its
#: measured footprint already holds): the layer's rows, and the rows owners read for the
#: others (a stored halo's pulls).
EVAL_READERS = 2
#: bytes of activations (forward, saved for backward, and gradients) per input row byte of a
#: batch, for a message-passing layer over a sampled block: the gathered rows, their dropout
#: copy and mask, the per-edge messages and their gradients (default 4, from the resident
#: memory of a benchmark run beyond its feature pool: docs/measurements.md#the-memory-plan).
ACTIVATION_FACTOR = 4
#: the share of a derived limit (cgroup or available memory) taken by default: the rest is
#: left to the kernel (page cache of small files, dirty pages being written).
DEFAULT_SHARE = 0.9
#: where the graph structure may live while training (``--structure``): in memory when it
#: fits, or forced in memory, or forced on disk.
STRUCTURE_MODES = ("auto", "memory", "disk")
#: the smallest window (rows of at least one batch must fit in it).
MIN_WINDOW = 16 << 20


def _int_or_none(text: str) -> int | None:
    text = text.strip()
    if not text or text == "max":
        return None
    v = int(text)
    return v if v < _UNLIMITED else None


def _cgroup_limit() -> int | None:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    limits: list[int] = []
    for line in lines:
        _, ctrl, path = line.split(":", 2)
        if ctrl == "":  # cgroup v2: this group and its ancestors
            p = Path("/sys/fs/cgroup") / path.lstrip("/")
            while True:
                try:
                    v = _int_or_none((p / "memory.max").read_text())
                except (OSError, ValueError):
                    v = None
                if v is not None:
                    limits.append(v)
                if p == Path("/sys/fs/cgroup") or p == p.parent:
                    break
                p = p.parent
        elif "memory" in ctrl.split(","):  # cgroup v1: the hierarchical limit
            stat = Path("/sys/fs/cgroup/memory") / path.lstrip("/") / "memory.stat"
            try:
                for ln in stat.read_text().splitlines():
                    if ln.startswith("hierarchical_memory_limit "):
                        v = _int_or_none(ln.split()[1])
                        if v is not None:
                            limits.append(v)
            except (OSError, ValueError):
                pass
    return min(limits) if limits else None


def _mem_available() -> int:
    try:
        for ln in Path("/proc/meminfo").read_text().splitlines():
            if ln.startswith("MemAvailable:"):
                return int(ln.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


def memory_cgroup() -> str:
    """This process's memory cgroup (its path in ``/proc/self/cgroup``; "" when unknown):
    processes with the same one share its limit."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return ""
    for line in lines:
        _, ctrl, path = line.split(":", 2)
        if "memory" in ctrl.split(","):
            return path
    return next((ln.split(":", 2)[2] for ln in lines if ln.split(":", 2)[1] == ""), "")


def memory_limit(processes: int = 1, *, cgroup_processes: int | None = None) -> tuple[int, str]:
    """``(bytes, where it came from)`` one process may use: :data:`DEFAULT_SHARE` of its
    memory cgroup's limit shared by the ``cgroup_processes`` processes in that group (default
    ``processes``), or, when lower, of the machine's available memory (``MemAvailable``) shared
    by the ``processes`` training processes on this machine."""
    cg = _cgroup_limit()
    avail = _mem_available()
    in_cg = max(processes if cgroup_processes is None else cgroup_processes, 1)
    if cg is not None and cg / in_cg < avail / max(processes, 1):
        return int(cg * DEFAULT_SHARE) // in_cg, "90% of the memory cgroup limit"
    return int(avail * DEFAULT_SHARE) // max(processes, 1), "90% of MemAvailable"


def batch_rows(fanouts: tuple[int, ...], batch_size: int, num_nodes: int) -> int:
    """The most rows one batch may touch: every seed's sampled L-hop tree (a full
    neighbourhood counted as 64), at most every node."""
    per_seed = 1
    for f in fanouts:
        per_seed *= (f if f > 0 else 64) + 1
    return min(num_nodes, batch_size * per_seed)


def batch_window(fanouts: tuple[int, ...], batch_size: int, num_nodes: int, row_bytes: int) -> int:
    """The smallest window: the rows one batch may touch (:func:`batch_rows`), and at least
    :data:`MIN_WINDOW`."""
    return max(MIN_WINDOW, batch_rows(fanouts, batch_size, num_nodes) * row_bytes)


def activation_bytes(rows: int, width: int, *, factor: int = ACTIVATION_FACTOR) -> int:
    """Working memory of one training step over a batch of ``rows`` input rows of ``width``
    float32 values (the input features plus a layer's hidden width):
    :data:`ACTIVATION_FACTOR` copies of them."""
    return int(factor) * int(rows) * int(width) * 4


def _rss() -> dict[str, int]:
    """``RssAnon`` and ``RssFile`` of ``/proc/self/status`` in bytes (empty where unreadable)."""
    found = {}
    try:
        for ln in Path("/proc/self/status").read_text().splitlines():
            if ln.startswith(("RssAnon:", "RssFile:")):
                found[ln.split(":")[0]] = int(ln.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return {}
    return found


def _file_share() -> int:
    """This process's share of its resident file-backed pages (``Pss_File`` of
    ``/proc/self/smaps_rollup``: a page mapped by ``k`` processes counts ``1/k``), or -1
    where that cannot be read (kernels before 5.7)."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            for ln in f:
                if ln.startswith("Pss_File:"):
                    return int(ln.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return -1


def process_footprint(*, shared: bool = False) -> int:
    """Bytes this process holds now that are charged to its memory cgroup and not the page
    cache of data it reads: its anonymous resident memory (``RssAnon`` of
    ``/proc/self/status``: the interpreter, the model, the arrays it holds) plus its resident
    file-backed mappings (``RssFile``: the code of torch, numba and the other libraries; their
    pages are charged to the cgroup that faults them in), or -1 where that cannot be read.
    Call it before data files are mapped and read.

    With ``shared``, file pages count by this process's share (``Pss_File``: a page that
    ``k`` processes map, a run's ranks and its launcher, counts ``1/k``; it is charged once):
    what the process holds exactly, for a measurement whose footprint will not grow (an
    evaluation's). Without, they count whole: a training plan measured at the start keeps
    the others' shares as a margin for its footprint's growth over the epochs
    (docs/measurements.md#the-memory-plan)."""
    found = _rss()
    if "RssAnon" not in found:
        return -1
    share = _file_share() if shared else -1
    return found["RssAnon"] + (share if share >= 0 else found.get("RssFile", 0))


def anonymous_bytes() -> int:
    """This process's anonymous resident memory (``RssAnon``), or -1 where it cannot be
    read: what a memory cgroup can only make room for by killing the process."""
    return _rss().get("RssAnon", -1)


def mapped_data_bytes(*, shared: bool = False) -> int:
    """Resident bytes of this process's read-only shared file mappings (the store's arrays
    opened with ``np.load(mmap_mode="r")``: ``r--s`` in ``/proc/self/smaps``), 0 where that
    cannot be read. They are counted in :func:`process_footprint` but are clean page cache:
    the kernel takes them back when the process needs the memory, so a plan may hand them
    out (libraries' code is mapped private, never counted here). ``shared``: as
    :func:`process_footprint` counts them, this process's share (``Pss``) where the kernel
    reports file shares."""
    key = "Pss:" if shared and _file_share() >= 0 else "Rss:"
    total, counting = 0, False
    try:
        with open("/proc/self/smaps") as f:
            for ln in f:
                head = ln.split(maxsplit=6)
                if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):
                    counting = head[1] == "r--s" and len(head) > 5
                elif counting and ln.startswith(key):
                    total += int(ln.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0
    return total


class PeakFootprint:
    """The largest :func:`process_footprint` (``peak``) and :func:`anonymous_bytes`
    (``peak_anon``) seen while the ``with`` block runs, sampled by a thread every
    ``interval`` seconds (default 0.05; a peak shorter than that may be missed); -1 where
    they cannot be read. Samples count resident file pages whole (``RssFile``; reading a
    process's file share walks every mapping, some 10 ms, too slow to sample)."""

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = float(interval)
        self.peak = process_footprint()
        self.peak_anon = anonymous_bytes()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        found = _rss()  # one read of /proc/self/status for both
        if "RssAnon" in found:
            self.peak = max(self.peak, sum(found.values()))
            self.peak_anon = max(self.peak_anon, found["RssAnon"])

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> PeakFootprint:
        if self.peak >= 0:
            self._thread = threading.Thread(target=self._run, name="shoal-peak", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._sample()


def bytes_freed_by(release: Callable[[], int]) -> int:
    """Run ``release`` (which drops memory and returns its own estimate of the bytes) and
    return what the process's footprint (:func:`process_footprint`) measured it free, once
    the garbage is collected and freed blocks are given back; the estimate where the
    footprint cannot be read."""
    before = process_footprint()
    estimate = int(release())
    gc.collect()
    return_freed_memory()
    trim_freed_memory()  # blocks freed inside the heap stay resident until trimmed
    after = process_footprint()
    return max(before - after if before >= 0 and after >= 0 else estimate, 0)


def staging_bytes(io_threads: int = 8, readers: int = STAGING_READERS) -> int:
    """The page-aligned staging buffers of the direct readers a training process keeps open
    at once (``readers``, default :data:`STAGING_READERS`, of ``io_threads`` threads with a
    buffer of :data:`~shoal.rows.direct.MAX_RUN` each; made on their first read)."""
    return max(int(readers), 0) * max(int(io_threads), 1) * MAX_RUN


def reserve_for(working: int, *, footprint: int | None = None, io_threads: int = 8) -> int:
    """The reserve of a memory plan measured on this process: its footprint now
    (:func:`process_footprint`, or ``footprint``), the ``working`` memory it will need beside
    its data (model gradients, optimizer state, one batch's activations:
    :func:`activation_bytes`), the direct readers' staging buffers (:func:`staging_bytes`)
    and :data:`FOOTPRINT_SLACK`; :data:`RESERVE` when the footprint is unknown. Call it once
    the libraries are imported and the model is built."""
    fp = process_footprint() if footprint is None else int(footprint)
    if fp < 0:
        return RESERVE
    return fp + int(working) + staging_bytes(io_threads) + FOOTPRINT_SLACK


@dataclass
class BudgetPlan:
    """How a process's memory is shared (bytes)."""

    total: int
    source: str
    reserve: int
    structure: int
    structure_in_memory: bool
    window: int
    cache: int
    features: int
    min_window: int = MIN_WINDOW
    fit: dict | None = None  # how fit_windows resized cache and windows (WindowFit.to_dict)
    index_bytes: int = 0  # the structure's O(V) part, held in memory in any case (indptr)
    neighbor_cache: int = 0  # with the structure on disk: its block cache (BlockCache)
    #: with the structure on disk: the neighbour lists held in memory beside the index (the
    #: training seeds', every batch's hop 0: ``plan_budget``'s ``held_lists``)
    held_lists: int = 0
    #: of the reserve, one training batch's activations (free while evaluating): set by the
    #: trainer, lowered by :meth:`fit_activations` once the batches are sampled
    activations: int = 0
    #: activation bytes per input row of a batch (0: the activations are not refitted)
    activation_row_bytes: int = 0

    @property
    def held_structure(self) -> int:
        """Bytes of the structure held in memory: all of it, or its ``O(V)`` index and the
        cache of its neighbour-list blocks."""
        if self.structure_in_memory:
            return self.structure
        return self.index_bytes + self.held_lists + self.neighbor_cache

    @property
    def pool(self) -> int:
        """What the cache and the windows share: the total less the reserve and the structure
        held in memory."""
        return max(self.total - self.reserve - self.held_structure, 0)

    @property
    def transient(self) -> int:
        """What is left beside the reserve, the structure held in memory and the cache: the
        windows while training, the working memory of inference between epochs."""
        return max(self.total - self.reserve - self.held_structure - self.cache, 2 * self.window)

    @property
    def kept_step_memory(self) -> int:
        """Freed memory the allocator may keep from one training step to the next (bytes;
        :func:`~shoal.utils.memory.keep_freed_memory`): the step's activations, which the
        reserve counts already, when every feature row and neighbour list is held in memory;
        0 when rows or lists are read from disk (windows and block caches are sized on that
        memory being returned). Without it a step's tensors of 8 MiB or more are mapped and
        page-faulted in afresh every step (:func:`~shoal.utils.memory.return_freed_memory`)."""
        if not self.structure_in_memory or self.cache < self.features:
            return 0
        return self.activations

    def fit_activations(self, rows: int, margin: float = 1.25) -> int:
        """Size the activations in the reserve for batches of at most ``rows`` input rows (the
        largest sampled, times ``margin``) instead of the largest shape the fanouts allow;
        only ever lowers the reserve. Returns the pool after the change."""
        if self.activation_row_bytes > 0:
            new = int(rows * margin * self.activation_row_bytes)
            if new < self.activations:
                self.reserve -= self.activations - new
                self.activations = new
        return self.pool

    def to_dict(self) -> dict:
        d = asdict(self)
        d["transient"] = self.transient
        return d

    def describe(self) -> str:
        """One line for the log: where the budget came from and how it is shared."""
        mib = 1 << 20
        where = (
            "in memory"
            if self.structure_in_memory
            else f"on disk (row index {self.index_bytes / mib:.0f} MiB, "
            + (f"held lists {self.held_lists / mib:.0f} MiB, " if self.held_lists else "")
            + f"block cache {self.neighbor_cache / mib:.0f} MiB)"
        )
        return (
            f"memory budget {self.total / mib:.0f} MiB ({self.source}): reserve "
            f"{self.reserve / mib:.0f} MiB, structure {self.structure / mib:.0f} MiB {where}, "
            f"features {self.features / mib:.0f} MiB: cache {self.cache / mib:.0f} MiB and "
            f"window slots of {self.window / mib:.0f} MiB (pool {self.pool / mib:.0f} MiB)"
        )

    def use_fit(self, fits: Any) -> None:
        """Take the cache and window sizes that :func:`~shoal.rows.windowfit.fit_windows`
        chose for the pool, or for shares of it (a ``WindowFit``, or one per share, e.g. a
        rank's parts): ``cache`` is their sum, ``window`` one slot (rows and the samples of its
        batches). Typed loosely: the fit module builds on this one, not the reverse."""
        fits = list(fits) if isinstance(fits, list | tuple) else [fits]
        if not fits:
            return
        self.cache = sum(f.cache_bytes for f in fits)
        self.window = max((self.pool - self.cache) // 2, 1)
        self.fit = fits[0].to_dict() if len(fits) == 1 else {"parts": [f.to_dict() for f in fits]}


def _mib_up(nbytes: int) -> str:
    """``nbytes`` as a ``--memory`` value, rounded up to whole MiB."""
    return f"{-(-int(nbytes) // (1 << 20))}MiB"


def plan_budget(
    memory: int | None,
    *,
    feature_bytes: int,
    structure_bytes: int,
    min_window: int = MIN_WINDOW,
    reserve: int = RESERVE,
    option: str = "--memory",
    processes: tuple[int, int] = (1, 1),
    index_bytes: int = 0,
    structure: str = "auto",
    held_lists: int = 0,
) -> BudgetPlan:
    """Share ``memory`` (None: :func:`memory_limit`) between the ``reserve`` (give
    :func:`reserve_for`, measured on this process; default the fixed :data:`RESERVE`), the graph
    structure (``structure_bytes``: held in memory whenever it fits next to two windows of
    ``min_window``, before any feature cache; else kept on disk except its ``index_bytes``:
    the ``O(V)`` row index, held in any case, and a cache of its neighbour-list blocks of an
    eighth of what is left), two feature windows
    (one in use, one being read) and the cache of hot rows. When the whole feature matrix
    fits next to one window, it is cached whole and windows are not needed.

    ``structure``: ``"auto"`` (as above), ``"memory"`` or ``"disk"`` (forced).

    ``held_lists``: bytes of neighbour lists held in memory when the structure is on disk,
    planned beside its row index (default 0; the training seeds' lists, which hop 0 of
    every batch draws from: :class:`~shoal.sample.sampler.HeldLists`).

    ``processes``: training processes on this machine and in this process's memory cgroup,
    which share the default limit (:func:`memory_limit`).

    Raises ShoalInputError naming ``option`` when ``memory`` cannot hold the reserve and two
    windows of ``min_window`` bytes (the rows of one batch).
    """
    source = "given"
    if memory is None:
        memory, source = memory_limit(processes[0], cgroup_processes=processes[1])
    left = memory - reserve
    need = 2 * min_window
    # the smallest budget that works: the reserve, two windows and the structure it must hold
    # (all of it when forced into memory, else its row index; no block cache at the minimum)
    smallest = reserve + need + (structure_bytes if structure == "memory" else index_bytes)
    if left < need:
        raise ShoalInputError(
            f"a memory budget of {memory / 2**20:.1f} MiB ({source}) is below the minimum "
            f"working set ({(reserve + need) / 2**20:.1f} MiB: {reserve / 2**20:.0f} MiB for "
            f"the process and model, two windows of {min_window / 2**20:.1f} MiB of feature "
            "rows, each the rows one batch may need)",
            fix=f"give {option} {_mib_up(smallest)} or more (the smallest that works), "
            "or lower --batch-size/--fanouts",
        )
    if structure not in STRUCTURE_MODES:
        raise ValueError(f"structure must be one of {STRUCTURE_MODES}, got {structure!r}")
    # auto: held whenever it fits beside the two smallest windows (module docstring)
    in_mem = structure == "memory" or (structure == "auto" and structure_bytes <= left - need)
    left -= structure_bytes if in_mem else index_bytes
    # the held lists when they fit beside the two smallest windows (else none are held)
    held = int(held_lists) if not in_mem and 0 < held_lists <= left - need else 0
    left -= held
    # on disk: an eighth of what is left (at most the lists) caches blocks of neighbour lists
    lists = 0 if in_mem else max(0, min(structure_bytes - index_bytes, (left - need) // 8))
    left -= lists
    if left < need:
        raise ShoalInputError(
            f"a memory budget of {memory / 2**20:.1f} MiB ({source}) cannot hold the graph "
            f"structure ({(structure_bytes if in_mem else index_bytes) / 2**20:.1f} MiB "
            f"{'in all' if in_mem else 'of row index'}) next to two windows of "
            f"{min_window / 2**20:.1f} MiB",
            fix=f"give {option} {_mib_up(smallest)} or more"
            + (" or keep the structure on disk (--structure disk)" if in_mem else ""),
        )
    kw = {
        "min_window": min_window,
        "index_bytes": int(index_bytes),
        "neighbor_cache": lists,
        "held_lists": held,
    }
    if feature_bytes + min_window <= left:
        return BudgetPlan(
            memory,
            source,
            reserve,
            structure_bytes,
            in_mem,
            min_window,
            feature_bytes,
            feature_bytes,
            **kw,
        )
    window = max(min_window, left // 3)
    cache = max(0, left - 2 * window)
    return BudgetPlan(
        memory, source, reserve, structure_bytes, in_mem, window, cache, feature_bytes, **kw
    )
