"""A rank's own rows as a sweep reads them (:mod:`shoal.distributed.served`,
:mod:`shoal.distributed.pulled`)."""

from __future__ import annotations

import numpy as np

__all__ = ["OwnRows"]


class OwnRows:
    """A :class:`LayerRows` that may be absent (a rank without parts is never asked); with
    ``stored``, rows are read as stored and handed over as int16 bits (torch has no uint16
    arithmetic; the kernels view them as uint16)."""

    def __init__(self, rows, stored=None) -> None:
        self.rows = rows
        self.stored = stored

    def read(self, ids, out):
        if self.rows is None or not len(ids):
            return out[:0].view(np.int16) if self.stored is not None else out[:0]
        if self.stored is not None:
            return self.rows.read_stored(ids, out).view(np.int16)
        return self.rows.read(ids, out)
