"""How a sampled epoch shares the feature pool between the static cache and the windows.

:func:`~shoal.rows.budget.plan_budget` gives the cache and the two window slots a third each
of the feature pool; once an epoch has been sampled, :func:`fit_windows` resizes them so that
an epoch costs as few sweeps of the feature file as possible
(docs/measurements.md#static-cache-and-windows).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from shoal.rows.budget import MIN_WINDOW

__all__ = [
    "PACKED_CACHE_SHARE",
    "RESAMPLE_BATCHES",
    "SPLIT_CACHE_SHARE",
    "WINDOW_MARGIN",
    "WindowFit",
    "fit_windows",
]


#: batches alive when an epoch is sampled again as it is trained (``WindowFit.resample``):
#: those queued by the reading thread (:data:`shoal.rows.readahead.RESAMPLE_QUEUE`), the
#: one being queued and the one trained on.
RESAMPLE_BATCHES = 6

#: headroom on an epoch's uncached rows when a window is sized to hold them all: the distinct
#: rows of consecutive epochs differ very little (docs/measurements.md#static-cache-and-windows).
WINDOW_MARGIN = 1.05


#: the cache's share of the pool when an epoch takes several windows (mode ``"split"``) and
#: each window sweeps the feature file: a third (two window slots share the rest).
SPLIT_CACHE_SHARE = 1 / 3

#: the same share when epochs are packed (:mod:`shoal.rows.packing`): a window then reads
#: its own segment of the pack, so its size only sets how many rows two windows both need
#: (written and read twice), while every cached row is saved in every epoch: a larger share
#: reads less from the packs and shortens the epoch, evaluation unchanged
#: (docs/measurements.md#static-cache-and-windows).
PACKED_CACHE_SHARE = 0.6


@dataclass
class WindowFit:
    """How :func:`fit_windows` shares a pool between the static cache and the windows:
    ``mode`` and ``resample`` as it explains them; sizes in bytes (``window_bytes``: one
    slot's), rows counted on the sampled epoch."""

    mode: str
    cache_bytes: int
    window_bytes: int
    epoch_rows: int
    uncached_rows: int
    sample_bytes: int
    pool: int
    resample: bool = False

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """One line for the log: the cache, the window slots and what an epoch costs."""
        how = {
            "overlap": "one window per epoch, read while the previous epoch trains",
            "one": "one window per epoch (both slots), read before it trains",
            "split": "several windows per epoch",
        }[self.mode]
        again = "; batches sampled again when trained, not held" if self.resample else ""
        return (
            f"cache {self.cache_bytes / 2**20:.0f} MiB, window slots of "
            f"{self.window_bytes / 2**20:.0f} MiB; a sampled epoch needs "
            f"{self.epoch_rows:,} rows, {self.uncached_rows:,} beyond the cache, its batches "
            f"{self.sample_bytes / 2**20:.0f} MiB: {how}{again}"
        )


def fit_windows(
    pool: int,
    *,
    needed: np.ndarray,
    priority: np.ndarray,
    row_bytes: int,
    sample_bytes: int = 0,
    batch_bytes: int = 0,
    min_window: int = MIN_WINDOW,
    margin: float = WINDOW_MARGIN,
    steps: int = 4096,
    split_cache_share: float = SPLIT_CACHE_SHARE,
) -> WindowFit:
    """Share ``pool`` bytes between a static cache (the first rows of ``priority``) and two
    window slots so that an epoch costs as few sweeps of the feature file as possible (every
    window costs about one sweep, whatever its size:
    docs/measurements.md#static-cache-and-windows). From one sampled epoch (``needed``:
    whether each row is used, ``sample_bytes``: what its sampled batches hold), with ``U(k)``
    the rows needed beyond a cache of ``k`` rows, this takes a cache such that

    1. ``margin * U(k)`` rows fit *one* slot (two epochs' windows alive: the next is read
       while this one trains) next to three epochs' samples (the two windows' and the one
       sampled ahead while the reader waits for a slot): mode ``"overlap"``; else
    2. they fit both slots next to two epochs' samples (one window per epoch, read when
       the previous one is done): mode ``"one"``; else
    3. they fit both slots next to :data:`RESAMPLE_BATCHES` batches of ``batch_bytes``
       (the largest sampled batch): mode ``"one"`` with ``resample``: the epoch is sampled
       once to plan its window, its samples are dropped, and the reading thread samples the
       same batches again (seeded per batch) as they are trained: a second sampling pass in
       the background instead of two epochs' samples in memory; else
    4. ``split_cache_share`` of the pool to the cache (default :data:`SPLIT_CACHE_SHARE`, a
       third; :data:`PACKED_CACHE_SHARE` when epochs are packed), the rest to two window
       slots: mode ``"split"``.

    Among the caches that reach the best mode it takes the largest one within a third of the
    pool, else the smallest (a larger cache slows evaluation down more than it saves:
    docs/measurements.md#static-cache-and-windows). ``k`` is searched on ``steps`` evenly
    spaced cache sizes (and 0).
    """
    n = len(needed)
    rb = max(int(row_bytes), 1)
    d = int(np.count_nonzero(needed))
    step = max(1, -(-n // max(steps, 1)))
    starts = np.arange(0, n, step)
    inside = np.add.reduceat(np.asarray(needed)[priority], starts, dtype=np.int64) if n else []
    ks = np.concatenate([[0], np.minimum(starts + step, n)]).astype(np.int64)
    u = d - np.concatenate([[0], np.cumsum(inside)]).astype(np.int64)
    need = np.ceil(margin * u) * rb
    free = pool - ks * rb  # what the two slots share for each cache size
    # samples alive: the epoch trained on, the one read ahead (overlap) and the one sampled
    # while the reader waits for a slot
    held = {
        "overlap": 3 * sample_bytes,
        "one": 2 * sample_bytes,
        "resample": RESAMPLE_BATCHES * batch_bytes,
    }
    overlap = ((free - held["overlap"]) // 2 >= np.maximum(need, min_window)) & (free >= 0)
    one = (free - held["one"] >= np.maximum(need, 2 * min_window)) & (free >= 0)
    again = (free - held["resample"] >= np.maximum(need, 2 * min_window)) & (free >= 0)
    for mode, ok in (("overlap", overlap), ("one", one), ("resample", again)):
        if ok.any():
            fits = np.flatnonzero(ok)
            third = fits[ks[fits] * rb <= pool // 3]  # no larger than the thirds' cache
            i = int(third[-1] if len(third) else fits[0])
            k = int(ks[i])
            w = int((free[i] - held[mode]) // 2)
            return WindowFit(
                "one" if mode == "resample" else mode,
                k * rb,
                w,
                d,
                int(u[i]),
                int(sample_bytes),
                int(pool),
                resample=mode == "resample",
            )
    w = max(min_window, int(pool * (1 - split_cache_share)) // 2)
    k = max(0, pool - 2 * w) // rb
    i = int(np.searchsorted(ks, k, side="right") - 1)
    rows = w - min(w // 4, int(sample_bytes))
    return WindowFit(
        "split", int(k * rb), int(max(rows, 1)), d, int(u[max(i, 0)]), int(sample_bytes), int(pool)
    )
