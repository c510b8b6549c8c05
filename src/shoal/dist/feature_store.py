"""Distributed feature store: each rank serves its parts' rows; remote rows are pulled.

As in DistDGL's KVStore (Zheng et al., "DistDGL: Distributed Graph Neural Network Training for
Billion-Scale Graphs", IA3 2020, Section 3.3), node IDs are relabelled so that each part's core
nodes form one contiguous range; the owner of an ID is found by binary search over
``part_offsets`` (no per-node owner table). Each rank holds the memory-mapped core feature
files of the parts the plan gives it and answers requests for them.

:meth:`DistFeatureStore.pull` is collective: IDs owned by this rank are gathered straight from
the memory maps (they never leave the process); the others are grouped per owner rank and
exchanged with :func:`shoal.dist.comm.exchange` (an all-to-all-v of IDs, then an all-to-all-v
of rows) -- one round per call, i.e. one per step and layer.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from shoal.dist.comm import CommStats, exchange

__all__ = ["DistFeatureStore", "owner_of"]


def owner_of(part_offsets: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Part owning each relabelled ID (binary search over ``part_offsets``, length p + 1)."""
    return np.searchsorted(part_offsets, ids, side="right").astype(np.int64) - 1


class DistFeatureStore:
    """Rows of the ``(N, F)`` feature matrix, spread over ranks by part.

    Args:
        part_offsets: ``(p + 1,)`` start of each part's ID range (relabelled IDs).
        part_to_rank: ``(p,)`` rank holding each part (from the plan).
        rank: this process's rank.
        world_size: number of ranks.
        local_parts: part -> ``(n_core_part, F)`` array (usually a read-only memmap) of the
            core rows of every part this rank holds; extra rows after the core rows (halo
            features) are ignored.
        feature_dim: F (needed by ranks that hold no part).
        stats: counters to update (default: a fresh :class:`CommStats`).
    """

    def __init__(
        self,
        *,
        part_offsets: np.ndarray,
        part_to_rank: np.ndarray,
        rank: int,
        world_size: int,
        local_parts: Mapping[int, np.ndarray],
        feature_dim: int,
        stats: CommStats | None = None,
    ) -> None:
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
            if a.ndim != 2 or a.shape[1] != feature_dim:
                raise ValueError(
                    f"part {i} features have shape {a.shape}, expected (*, {feature_dim})"
                )
        for i, a in self.local_parts.items():
            n = self.part_offsets[i + 1] - self.part_offsets[i]
            if a.shape[0] < n:
                raise ValueError(f"part {i} has {a.shape[0]} feature rows, needs {n}")
        self.stats = stats if stats is not None else CommStats()
        self.feature_dim = int(feature_dim)

    @property
    def num_nodes(self) -> int:
        return int(self.part_offsets[-1])

    def owner_rank(self, ids: np.ndarray) -> np.ndarray:
        return self.part_to_rank[owner_of(self.part_offsets, ids)]

    def _gather_local(self, ids: np.ndarray, out: np.ndarray) -> None:
        """out[j] = row of ids[j]; every id belongs to a part of this rank."""
        if ids.size == 0:
            return
        parts = owner_of(self.part_offsets, ids)
        for i in np.unique(parts):
            sel = np.flatnonzero(parts == i)
            rows = ids[sel] - self.part_offsets[i]
            out[sel] = self.local_parts[int(i)][rows]

    def pull(self, ids: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Feature rows of ``ids`` (relabelled global IDs) as a float32 tensor. Collective.

        Every rank must call ``pull`` the same number of times (possibly with no IDs).
        """
        ids = ids.numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
        ids = ids.astype(np.int64, copy=False)
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_nodes):
            raise IndexError(f"node id out of range [0, {self.num_nodes})")
        dim = self.feature_dim
        out = np.empty((ids.shape[0], dim), dtype=np.float32)
        owners = self.owner_rank(ids)
        local = owners == self.rank
        lidx = np.flatnonzero(local)
        self._gather_local(ids[lidx], _View(out, lidx))
        self.stats.feature_rows_local += int(lidx.size)
        if self.world_size == 1:
            return torch.from_numpy(out)
        ridx = np.flatnonzero(~local)
        self.stats.feature_rows_remote += int(ridx.size)
        order = ridx[np.argsort(owners[ridx], kind="stable")]
        counts = np.bincount(owners[order], minlength=self.world_size).astype(np.int64)
        req, req_counts = exchange(ids[order], counts, self.stats)
        req_ids = req.numpy()
        served = np.empty((req_ids.shape[0], dim), dtype=np.float32)
        self._gather_local(req_ids, _View(served, np.arange(req_ids.shape[0])))
        rows, _ = exchange(served, req_counts, self.stats)
        out[order] = rows.numpy()
        return torch.from_numpy(out)


class _View:
    """Write-through index view: ``v[sel] = rows`` stores into ``base[idx[sel]]``."""

    def __init__(self, base: np.ndarray, idx: np.ndarray) -> None:
        self.base = base
        self.idx = idx

    def __setitem__(self, sel: np.ndarray, rows: np.ndarray) -> None:
        self.base[self.idx[sel]] = rows
