"""Feature gathers of the sampler's batches: rows of a (memory-mapped) ``(N, F)`` matrix, or
of a store part's core and halo rows, into a reused float32 buffer.

Only the requested rows are read (the operating system pages them in); the matrix is never
loaded whole. Rows are gathered in parallel by a numba kernel
(:func:`~shoal.rows.gather.gather_rows`) straight into a float32 buffer that is kept between
calls and grown when a batch needs more rows.
"""

from __future__ import annotations

import numpy as np
import torch

from shoal.errors import ShoalInputError
from shoal.rows.gather import gather_rows
from shoal.store.reader import Partition

__all__ = ["FeatureGatherer", "PartGatherer"]


class FeatureGatherer:
    """Gathers feature rows for a batch into one reused float32 buffer, returned as a tensor.

    Args:
        features: the ``(N, F)`` feature matrix (memory map or array).
        normalize: row-normalise gathered rows (default false).

    The returned tensor shares the buffer: it is valid until the next :meth:`gather` call
    (keep two gatherers for double buffering).
    """

    def __init__(self, features: np.ndarray, *, normalize: bool = False) -> None:
        if features.ndim != 2:
            raise ValueError(f"features must be 2-D, got shape {features.shape}")
        self.features = features
        self.normalize = normalize
        self._buf = np.empty((0, features.shape[1]), dtype=np.float32)

    @property
    def dim(self) -> int:
        return int(self.features.shape[1])

    def _rows(self, n: int) -> np.ndarray:
        """The buffer's first ``n`` rows (grown by a quarter or more when too small)."""
        if self._buf.shape[0] < n:
            self._buf = np.empty((max(n, int(self._buf.shape[0] * 1.25)), self.dim), np.float32)
        return self._buf[:n]

    def gather(self, ids: np.ndarray) -> torch.Tensor:
        out = self._rows(int(len(ids)))
        gather_rows(self.features, ids, out, normalize=self.normalize)
        return torch.from_numpy(out)


class PartGatherer(FeatureGatherer):
    """Gathers rows of a part's local index space (core rows, then halo rows, ``features``
    and ``halo``) into a reused float32 buffer, as :class:`FeatureGatherer` does."""

    def __init__(self, part: Partition, *, normalize: bool = False) -> None:
        if part.features is None or (part.num_halo and part.halo_features is None):
            raise ShoalInputError(
                "the averaging engine needs every part's halo features",
                path=part.path,
                fix="rebuild the store with `shoal store build ... --halo-features`",
            )
        super().__init__(part.features, normalize=normalize)
        self.halo = part.halo_features
        self.num_core = part.num_core

    def gather(self, ids: np.ndarray) -> torch.Tensor:
        ids = np.asarray(ids, dtype=np.int64)
        h = ids >= self.num_core
        if not h.any():
            return super().gather(ids)
        out = self._rows(ids.shape[0])
        ci, hi = np.flatnonzero(~h), np.flatnonzero(h)
        out[ci] = gather_rows(self.features, ids[ci], normalize=self.normalize)
        out[hi] = gather_rows(self.halo, ids[hi] - self.num_core, normalize=self.normalize)
        return torch.from_numpy(out)
