"""Segments of rows laid out back to back: the samplers' answers (a row's picks follow the
previous row's) moved between the orders the exchanges need."""

from __future__ import annotations

import numpy as np

__all__ = ["gather_segments", "scatter_segments", "segment_sums"]


def segment_sums(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Sum of ``values`` over consecutive segments of lengths ``counts``."""
    c = np.concatenate([[0], np.cumsum(values)])
    ends = np.cumsum(counts)
    starts = ends - counts
    return (c[ends] - c[starts]).astype(np.int64)


def scatter_segments(
    out: np.ndarray, rowptr: np.ndarray, positions: np.ndarray, counts: np.ndarray, data: np.ndarray
) -> None:
    """Copy consecutive segments of ``data`` (lengths ``counts``) to rows ``positions`` of
    ``out`` (row ``r`` spans ``rowptr[r]:rowptr[r + 1]``)."""
    if data.shape[0] == 0:
        return
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    where = np.repeat(rowptr[positions] - starts, counts) + np.arange(data.shape[0])
    out[where] = data


def gather_segments(data: np.ndarray, rowptr: np.ndarray, order: np.ndarray) -> np.ndarray:
    """The segments ``data[rowptr[r]:rowptr[r + 1]]`` of the rows ``order``, back to back."""
    starts = rowptr[order]
    lens = rowptr[order + 1] - starts
    total = int(lens.sum())
    if total == 0:
        return data[:0]
    before = np.zeros(len(lens), np.int64)
    np.cumsum(lens[:-1], out=before[1:])
    return data[np.repeat(starts - before, lens) + np.arange(total)]
