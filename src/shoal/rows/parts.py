"""The input rows of store parts as one row source, whatever the graph (:func:`part_rows`),
asked by every layer that reads a part's rows. Parts are duck-typed
:class:`~shoal.store.reader.Partition` objects (``rows`` imports nothing of ``store``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from shoal.rows.memory import MemoryRows
from shoal.rows.opener import open_rows
from shoal.rows.source import RowSource
from shoal.rows.typed import open_part_rows
from shoal.utils.featdtype import scales_of

__all__ = ["part_rows"]


def part_rows(
    parts: Any | Sequence[Any], *, halo: bool = False, threads: int = 8
) -> RowSource | None:
    """The rows of one part (or of several, stacked in the order given), each part's core
    rows then, with ``halo``, its halo rows; None when the store has no features. An
    in-memory array is served as it is (:class:`~shoal.rows.memory.MemoryRows`)."""
    parts = list(parts) if isinstance(parts, (list, tuple)) else [parts]
    if not parts:
        return None
    if parts[0].store.schema is not None:
        return open_part_rows(parts, halo=halo, threads=threads)
    arrays = []
    for p in parts:
        if p.features is None:
            return None
        arrays.append(p.features)
        if halo and p.num_halo:
            arrays.append(p.halo_features)
    src = open_rows(arrays, threads=threads)
    if src is None:  # every row in memory already
        scales = [scales_of(a) for a in arrays]
        return MemoryRows(
            np.concatenate([np.asarray(a) for a in arrays]),
            None if scales[0] is None else np.concatenate(scales),
        )
    return src
