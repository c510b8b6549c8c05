"""The pieces both ways of a pulled round share (:mod:`shoal.distributed.pulled`): a
block's in-edges as runs of served indices per owner, a step's rows laid out by offset (or
packed, when the step needs few of its range's rows), and reused buffers."""

from __future__ import annotations

import numpy as np

from shoal.distributed import _served_kernels as SK
from shoal.training import _kernels as BK
from shoal.training.blocked import id_dtype
from shoal.utils.memory import huge_empty

__all__ = ["PACKED_SHARE", "DenseRows", "buffer", "cuts", "packed", "served_edges", "tail_slots"]

#: a step's rows are read packed (row ``i`` of the buffer for its ``i``-th needed id, found
#: through a slot per offset of the step's range) when the step needs fewer than
#: ``1 / PACKED_SHARE`` of its range's rows (default 8): laid out by offset, a sparse step
#: writes a few rows to every page of a buffer of the whole range (a hidden layer's inputs,
#: the first layer's targets only, are ~1-7% of a rank's rows at papers100M's split), so
#: the buffer is faulted in whole for them; packed, the pull looks up a slot an entry (a
#: dependent load, slower per entry: dense steps stay laid out by offset)
PACKED_SHARE = 8


def packed(n: int, R: int, row_bytes: int) -> bool:
    """Whether a step of ``R`` rows of ``row_bytes`` needing ``n`` of them reads them
    packed: few of them, and the slots fit the buffer's tail that the rows leave free."""
    return n * PACKED_SHARE < R and n * row_bytes + 8 * R + 8 <= R * row_bytes


def tail_slots(buf: np.ndarray, R: int) -> np.ndarray:
    """``R`` int64 slots in the tail of the step's read buffer ``buf`` (C-contiguous), past
    the rows a packed step reads (:func:`packed`): no memory beside the buffer."""
    raw = buf.reshape(-1).view(np.uint8)
    start = (raw.nbytes - 8 * R) // 8 * 8
    return raw[start : start + 8 * R].view(np.int64)


def cuts(ids: np.ndarray, steps: int, R: int) -> np.ndarray:
    """Where each step's range of ``R`` rows starts among the sorted ``ids``."""
    return np.searchsorted(ids, np.arange(steps + 1, dtype=np.int64) * R)


def served_edges(p, block, edges, layout, halo_served, me: int, total: int):
    """The block's in-edges renumbered to their sources' served indices, each list sorted
    within each owner's run, and the runs: ``(ptr, ids, cur, end)`` with ``cur[o][i]`` /
    ``end[o][i]`` target ``i``'s entries from owner ``o``."""
    ptr, ids = edges
    if ids.dtype.itemsize < np.dtype(id_dtype(total)).itemsize:
        ids = ids.astype(id_dtype(total))
    SK._to_served(ids, p.num_core, layout.me_base(p, me), halo_served[p.index])
    W = len(layout.rank_offset) - 1
    cur = np.empty((W, len(block)), np.int64)
    end = np.empty((W, len(block)), np.int64)
    if not SK._owner_runs(ptr, ids, layout.rank_offset, cur, end):
        BK._sort_lists(ptr, ids)  # (a rank of several parts: halo ids by global id)
        SK._owner_runs(ptr, ids, layout.rank_offset, cur, end)
    return ptr, ids, cur, end


class DenseRows:
    """This rank's rows of a step's sorted ids, each at its offset in the step's range of
    ``R`` rows (``out[u % R]``: the pull finds a row without a slot lookup, and the rows
    read lie densely), or packed in the ids' order when the step needs few of them
    (:func:`packed`: ``out[i]`` for ``ids[i]``), as stored 16-bit bits (int16, as the sweep
    reads them) or as float32."""

    def __init__(self, sources, stored, R: int) -> None:
        self.sources, self.stored, self.R = sources, stored, R

    def read(self, ids: np.ndarray, out: np.ndarray) -> np.ndarray:
        if self.sources is None or not len(ids):
            return out.view(np.int16) if self.stored is not None else out
        if packed(len(ids), self.R, out.shape[1] * out.itemsize):
            if self.stored is not None:
                return self.sources.read_stored(ids, out).view(np.int16)
            return self.sources.read(ids, out)
        dest = ids - (int(ids[0]) // self.R) * self.R
        if self.stored is not None:
            return self.sources.read_stored(ids, out, dest).view(np.int16)
        out[dest] = self.sources.read(ids)
        return out


def buffer(spare: dict, name: str, rows: int, cols: int, dtype) -> np.ndarray:
    """A reused ``(rows, cols)`` buffer kept in ``spare``, grown when needed."""
    buf = spare.get(name)
    if buf is None or buf.shape[0] < rows or buf.shape[1] != cols or buf.dtype != dtype:
        buf = spare[name] = huge_empty((max(rows, 1), cols), dtype)
    return buf[:rows]
