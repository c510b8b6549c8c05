"""The graph directory: shoal's single on-disk input format (files, meta.json, checksums:
docs/format.md#files).

:class:`GraphDir` opens one (everything memory-mapped, nothing loaded), :class:`GraphWriter`
writes one from streamed chunks into a temporary sibling directory and renames it into place
only when it is complete and valid. This module is the format's public face: the names and
constants live in :mod:`shoal.data.layout`, the reader in :mod:`shoal.data.graphdir`, the
writer in :mod:`shoal.data.writer` (node data checks in :mod:`shoal.data.nodedata`); import
them from here.
"""

from __future__ import annotations

import os
import shutil

from shoal.data.graphdir import CSR, GraphDir
from shoal.data.layout import (
    EDGE_FILE,
    FORMAT_NAME,
    FORMAT_VERSION,
    INT32_MAX,
    SPLITS,
    edge_dtype_for,
)
from shoal.data.writer import GraphWriter

__all__ = [
    "CSR",
    "EDGE_FILE",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "INT32_MAX",
    "SPLITS",
    "GraphDir",
    "GraphWriter",
    "edge_dtype_for",
    "remove_graph_dir",
]


def remove_graph_dir(path: str | os.PathLike) -> None:
    """Delete a graph directory (used by tests and ``--overwrite``)."""
    shutil.rmtree(path, ignore_errors=True)
