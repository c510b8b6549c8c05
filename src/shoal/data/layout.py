"""Names and constants of the graph directory layout (``docs/format.md``).

Kept apart from the reader (:mod:`shoal.data.graphdir`) and the writer
(:mod:`shoal.data.writer`) so both can use them without importing each other.
"""

from __future__ import annotations

import numpy as np

__all__ = ["EDGE_FILE", "FORMAT_NAME", "FORMAT_VERSION", "SPLITS", "edge_dtype_for"]

FORMAT_VERSION = 1
FORMAT_NAME = "shoal-graph"
SPLITS = ("train", "val", "test")
EDGE_FILE = "edges.bin"
INT32_MAX = np.iinfo(np.int32).max


def edge_dtype_for(num_nodes: int) -> np.dtype:
    """int32 when every id fits, else int64."""
    return np.dtype(np.int32 if num_nodes - 1 <= INT32_MAX else np.int64)
