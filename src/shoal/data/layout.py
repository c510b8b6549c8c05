"""Names and constants of the graph directory layout (``docs/format.md``).

Kept apart from the reader (:mod:`shoal.data.graphdir`) and the writer
(:mod:`shoal.data.writer`) so both can use them without importing each other.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "EDGE_FILE",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "FORMAT_VERSIONS",
    "RELATION_FILE",
    "SPLITS",
    "TYPED_FORMAT_VERSION",
    "edge_dtype_for",
    "type_feature_file",
]

FORMAT_VERSION = 1
#: a typed graph (node types, relations: :mod:`shoal.data.hetero`); readers of version 1
#: only refuse it rather than read it as an untyped graph
TYPED_FORMAT_VERSION = 2
FORMAT_VERSIONS = (FORMAT_VERSION, TYPED_FORMAT_VERSION)
#: a typed graph's relation of each row of :data:`EDGE_FILE` (raw uint8 or uint16)
RELATION_FILE = "edge_types.bin"
FORMAT_NAME = "shoal-graph"
SPLITS = ("train", "val", "test")
EDGE_FILE = "edges.bin"
INT32_MAX = np.iinfo(np.int32).max


def type_feature_file(node_type: str) -> str:
    """A typed graph's feature file of ``node_type`` (relative to the graph directory)."""
    return f"features/{node_type}.npy"


def edge_dtype_for(num_nodes: int) -> np.dtype:
    """int32 when every id fits, else int64."""
    return np.dtype(np.int32 if num_nodes - 1 <= INT32_MAX else np.int64)
