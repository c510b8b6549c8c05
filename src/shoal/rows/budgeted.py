"""``BudgetedStore``: the one builder of the budgeted feature store.

Given a :class:`~shoal.rows.budget.BudgetPlan` (made by the caller: the trainer,
:func:`shoal.training.data.open_features`, or an engine, ``Engine.plan_memory``), a set of rows
gets (1) a static cache (:class:`~shoal.rows.featstore.DiskFeatures`) of ``plan.cache`` bytes
(times ``share``, the rows' share of the plan) of the rows of highest ``degrees`` first, and
when it lacks rows (2) windows read ahead (:meth:`BudgetedStore.read_ahead`: a
:class:`~shoal.rows.prefetch.WindowPrefetcher` with slots of ``plan.window * share`` bytes; the
first sampled epoch sizes cache and windows on ``plan.pool * share`` bytes,
:func:`~shoal.rows.windowfit.fit_windows`, and the cache is read with the first window) and (3)
epoch packs (:func:`~shoal.rows.packing.default_pack_epochs`; with the structure on disk the
packed epochs' samples are spooled, :class:`~shoal.rows.spool.SampleSpool`). A distributed
engine whose windows also serve its peers builds (2)-(3) itself
(``shoal.distributed.windows.DistWindows``). Options a caller does not pass keep
:class:`~shoal.rows.featstore.DiskFeatures`' defaults.
"""

from __future__ import annotations

import numpy as np

from shoal.rows.budget import BudgetPlan
from shoal.rows.featstore import DiskFeatures
from shoal.rows.packing import default_pack_epochs
from shoal.rows.source import RowSource
from shoal.rows.windowfit import WindowFit
from shoal.utils.arrays import descending_order

__all__ = ["BudgetedStore"]


class BudgetedStore:
    """The budgeted feature store of one set of rows under (a share of) a memory plan
    (module docstring).

    Args:
        rows: an ``(N, F)`` array (memory-mapped: read from its file), a list of them stacked
            row-wise (a part's core rows, then its halo rows), or any
            :class:`~shoal.rows.source.RowSource`.
        plan: the memory plan.
        share: the fraction of ``plan``'s cache, windows and pool these rows get (default 1).
        degrees: per row, the priority of caching it (highest first; ties in row order);
            None: rows in id order. Used only when windows are needed.
        normalize, threads, show_progress, merge_gap: of
            :class:`~shoal.rows.featstore.DiskFeatures` (row normalisation, concurrent reads,
            the cache's progress bar, the read planner's merge gap).
        read_ahead: whether rows the cache lacks will be read in windows ahead of the batches
            (steps 2-3; default true); false for a caller that reads each row it needs when
            it needs it (the ``hec`` and ``fullgraph`` engines): the cache is read now, in
            row order.
    """

    def __init__(
        self,
        rows: np.ndarray | list[np.ndarray] | RowSource,
        plan: BudgetPlan,
        *,
        share: float = 1.0,
        degrees: np.ndarray | None = None,
        normalize: bool = False,
        threads: int = 8,
        show_progress: bool | None = None,
        merge_gap: int | None = None,
        read_ahead: bool = True,
    ) -> None:
        self.plan = plan
        self.share = share
        #: whether the cache lacks rows: windows are read ahead, the cache is read with the first
        self.windows = read_ahead and plan.cache < plan.features
        priority = None
        if self.windows and degrees is not None:
            priority = descending_order(degrees)
        self.features = DiskFeatures(
            rows,
            cache_bytes=self._part(plan.cache),
            priority=priority,
            normalize=normalize,
            threads=threads,
            merge_gap=merge_gap,
            show_progress=show_progress,
            defer_cache=self.windows,
        )
        self.fit: WindowFit | None = None

    def _part(self, nbytes: int) -> int:
        return nbytes if self.share == 1.0 else int(nbytes * self.share)

    @property
    def window_bytes(self) -> int:
        """Bytes of one window slot of these rows (at least 1)."""
        return max(self._part(self.plan.window), 1)

    @property
    def pool(self) -> int:
        """Bytes the cache and the windows of these rows share."""
        return self._part(self.plan.pool)

    def pack_epochs(self, pack_epochs: int | None, *, spooled: bool = False) -> int:
        """Epochs one sweep packs: ``pack_epochs`` (the option; None: the default, off when
        the structure is read from disk and the samples are not spooled)."""
        return default_pack_epochs(pack_epochs, self.plan.structure_in_memory, spooled)

    def read_ahead(
        self,
        loader,
        *,
        last_epoch: int | None = None,
        pack_epochs: int | None = None,
        scratch_dir: str | None = None,
        cache_policy: str = "presample",
    ) -> WindowFit | None:
        """When the cache lacks rows: have ``loader`` (a ``BatchLoader``: its ``use_windows``
        and the ``prefetcher`` it makes) produce its batches from windows read ahead, epochs
        packed (``pack_epochs``, :meth:`pack_epochs`) into ``scratch_dir``, and size the cache
        and the windows from its first sampled epoch (the plan's activations refitted to its
        largest batch first: :meth:`~shoal.rows.budget.BudgetPlan.fit_activations`; the cached
        rows chosen by ``cache_policy``, :meth:`WindowPrefetcher.calibrate`); returns that fit (also :attr:`fit`), or
        None when every row is cached (nothing changes)."""
        if not self.windows:
            return None
        spool = not self.plan.structure_in_memory  # sampling reads the structure from disk
        loader.use_windows(
            self.features,
            window_bytes=self.window_bytes,
            last_epoch=last_epoch,
            pack_epochs=self.pack_epochs(pack_epochs, spooled=spool),
            scratch_dir=scratch_dir,
            spool_samples=spool,
            start_room=self.pool,  # free until the cache is read: sampling ahead may use it
        )
        self.fit = loader.prefetcher.calibrate(
            lambda rows: self._part(self.plan.fit_activations(rows)),
            min_window=self.plan.min_window,
            cache_policy=cache_policy,
        )
        return self.fit
