"""Distributed feature store: each rank serves its parts' rows; remote rows are pulled.

As in DistDGL's KVStore (Zheng et al., "DistDGL: Distributed Graph Neural Network Training for
Billion-Scale Graphs", IA3 2020, Section 3.3), each part's core nodes form one contiguous id
range, so an id's owner is a binary search over ``part_offsets``. :meth:`DistFeatureStore.pull`
is collective: local ids are gathered from the memory maps, the others pulled from their
owners with :func:`shoal.distributed.comm.exchange`, one round per call (per step and layer).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from shoal.distributed.comm import CommStats, exchange
from shoal.rows.gather import gather_rows, source_rows
from shoal.rows.source import RowSource

__all__ = ["DistFeatureStore", "owner_of", "placement"]


def owner_of(part_offsets: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Part owning each relabelled ID (binary search over ``part_offsets``, length p + 1)."""
    return np.searchsorted(part_offsets, ids, side="right").astype(np.int64) - 1


def placement(store: Any, part_to_rank: np.ndarray, ctx: Any) -> dict[str, Any]:
    """Where the parts of ``store`` lie: the ``part_offsets``, ``part_to_rank``, ``rank`` and
    ``world_size`` keywords of the distributed row stores, samplers and windows."""
    return {
        "part_offsets": store.part_offsets,
        "part_to_rank": part_to_rank,
        "rank": ctx.rank,
        "world_size": ctx.world_size,
    }


class DistFeatureStore:
    """Rows of the ``(N, F)`` feature matrix, spread over ranks by part.

    Args:
        part_offsets: ``(p + 1,)`` start of each part's ID range (relabelled IDs).
        part_to_rank: ``(p,)`` rank holding each part (from the plan).
        rank: this process's rank.
        world_size: number of ranks.
        local_parts: part -> ``(n_core_part, F)`` array (usually a read-only memmap) or
            :class:`~shoal.rows.source.RowSource` (:func:`~shoal.rows.parts.part_rows`, read
            by planned reads) of the core rows of every part this rank holds; extra rows
            after the core rows (halo features) are ignored.
        feature_dim: F (needed by ranks that hold no part).
        stats: counters to update (default: a fresh :class:`CommStats`).
        gather: ``gather(src, ids, out)`` reading local rows (default
            :func:`~shoal.rows.gather.gather_rows`; the exact evaluation passes
            :func:`~shoal.rows.gather.read_rows`, positioned reads of mapped files).
        serve: ``serve(ids, out)`` returning the rows of global ``ids`` owned by this rank
            (default: ``gather`` from ``local_parts``); training under a memory budget serves
            them from the current window (:class:`~shoal.distributed.windows.DistWindows`).
        group: the process group the ranks above belong to (default: the whole world).
    """

    def __init__(
        self,
        *,
        part_offsets: np.ndarray,
        part_to_rank: np.ndarray,
        rank: int,
        world_size: int,
        local_parts: Mapping[int, np.ndarray | RowSource],
        feature_dim: int,
        stats: CommStats | None = None,
        gather: Callable[..., np.ndarray] | None = None,
        serve: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
        group: dist.ProcessGroup | None = None,
    ) -> None:
        self.group = group
        self.part_offsets = np.asarray(part_offsets, dtype=np.int64)
        self.part_to_rank = np.asarray(part_to_rank, dtype=np.int64)
        p = self.part_offsets.shape[0] - 1
        if self.part_to_rank.shape != (p,):
            raise ValueError(f"part_to_rank must have {p} entries, got {self.part_to_rank.shape}")
        if self.part_to_rank.size and (
            self.part_to_rank.min() < 0 or self.part_to_rank.max() >= world_size
        ):
            raise ValueError("part_to_rank names a rank outside [0, world_size)")
        self.rank = rank
        self.world_size = world_size
        mine = {int(i) for i in np.flatnonzero(self.part_to_rank == rank)}
        if set(local_parts) != mine:
            raise ValueError(
                f"rank {rank} must hold exactly parts {sorted(mine)}, got {sorted(local_parts)}"
            )
        self.local_parts = dict(local_parts)
        for i, a in self.local_parts.items():
            rows, dim = (a.num_rows, a.dim) if isinstance(a, RowSource) else (None, None)
            if rows is None and a.ndim != 2:
                raise ValueError(f"part {i} features have shape {a.shape}, expected 2-D")
            rows, dim = (a.shape[0], a.shape[1]) if rows is None else (rows, dim)
            if dim != feature_dim:
                raise ValueError(f"part {i} features have {dim} columns, expected {feature_dim}")
            n = self.part_offsets[i + 1] - self.part_offsets[i]
            if rows < n:
                raise ValueError(f"part {i} has {rows} feature rows, needs {n}")
        self.stats = stats if stats is not None else CommStats()
        gather = gather if gather is not None else gather_rows
        # a row source is read by planned reads (its rows sorted and distinct), any gather
        self._gather = lambda src, ids, out=None: (
            source_rows(src, ids, out) if isinstance(src, RowSource) else gather(src, ids, out)
        )
        self._serve = serve
        self.feature_dim = int(feature_dim)
        self._buf = np.empty((0, self.feature_dim), dtype=np.float32)

    @property
    def num_nodes(self) -> int:
        return int(self.part_offsets[-1])

    def owner_rank(self, ids: np.ndarray) -> np.ndarray:
        return self.part_to_rank[owner_of(self.part_offsets, ids)]

    def _gather_local(self, ids: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``out[:len(ids)] = rows of ids`` (all owned by this rank), by shoal's parallel numba
        gather straight from the memory maps; returns ``out[:len(ids)]``."""
        n = ids.shape[0]
        if n == 0:
            return out[:0]
        if self._serve is not None:
            return self._serve(ids, out[:n])
        parts = owner_of(self.part_offsets, ids)
        first = int(parts[0])
        if len(self.local_parts) == 1 or (parts == first).all():
            return self._gather(self.local_parts[first], ids - self.part_offsets[first], out)[:n]
        for i in np.unique(parts):
            sel = np.flatnonzero(parts == i)
            out[sel] = self._gather(self.local_parts[int(i)], ids[sel] - self.part_offsets[i])
        return out[:n]

    def pull(self, ids: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Feature rows of ``ids`` (relabelled global IDs) as a float32 tensor. Collective.

        Every rank must call ``pull`` the same number of times (possibly with no IDs). The
        tensor shares a buffer reused by the next call.
        """
        ids = ids.numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
        ids = ids.astype(np.int64, copy=False)
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_nodes):
            raise IndexError(f"node id out of range [0, {self.num_nodes})")
        n, dim = ids.shape[0], self.feature_dim
        if self._buf.shape[0] < n:
            self._buf = np.empty((max(n, int(self._buf.shape[0] * 1.25)), dim), np.float32)
        out = self._buf[:n]
        owners = self.owner_rank(ids)
        local = owners == self.rank
        n_local = int(np.count_nonzero(local))
        self.stats.feature_rows_local += n_local
        if n_local == n:
            self._gather_local(ids, out)
            if self.world_size == 1:
                return torch.from_numpy(out)
        elif n_local:
            lidx = np.flatnonzero(local)
            out[lidx] = self._gather_local(ids[lidx], np.empty((n_local, dim), np.float32))
        ridx = np.flatnonzero(~local)
        self.stats.feature_rows_remote += int(ridx.size)
        order = ridx[np.argsort(owners[ridx], kind="stable")]
        counts = np.bincount(owners[order], minlength=self.world_size).astype(np.int64)
        req, req_counts = exchange(ids[order], counts, self.stats, self.group)
        req_ids = req.numpy()
        served = self._gather_local(req_ids, np.empty((req_ids.shape[0], dim), np.float32))
        rows, _ = exchange(served, req_counts, self.stats, self.group, recv_counts=counts)
        if order.size:
            out[order] = rows.numpy()
        return torch.from_numpy(out)
