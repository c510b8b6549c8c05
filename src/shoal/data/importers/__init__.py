"""Importers: turn a graph in a foreign layout into a graph directory
(sources, options and memory: docs/format.md#importers).

Every importer streams its edges into a :class:`~shoal.data.format.GraphWriter` in bounded
chunks, so the writer's options behave the same whatever the source, and raises
:class:`~shoal.errors.ShoalInputError` naming the file, the offending row/field and a fix; a
failed import leaves nothing behind (docs/format.md#checksums-atomic-writes-errors).
:func:`import_graph` picks the importer from the path (``format="auto"``). Modules:
:mod:`~shoal.data.importers.common` (:class:`ImportConfig`, shared checks), ``npz``, ``text``,
``npy``, ``ogb``, ``objects`` (:func:`from_pyg`, :func:`from_scipy`); every public name is
importable from here.
"""

from __future__ import annotations

import os
from pathlib import Path

from shoal.data.format import GraphDir
from shoal.data.importers.common import ImportConfig
from shoal.data.importers.npy import import_npy
from shoal.data.importers.npz import import_npz
from shoal.data.importers.objects import from_pyg, from_scipy
from shoal.data.importers.ogb import import_ogb
from shoal.data.importers.ogb_hetero import import_ogb_hetero, is_ogb_hetero
from shoal.data.importers.text import import_text
from shoal.errors import ShoalInputError

__all__ = [
    "FORMATS",
    "ImportConfig",
    "detect_format",
    "from_pyg",
    "from_scipy",
    "import_graph",
    "import_npy",
    "import_npz",
    "import_ogb",
    "import_ogb_hetero",
    "import_text",
]

#: Input formats understood by :func:`import_graph`.
FORMATS = ("auto", "npz", "text", "npy", "ogb")


def detect_format(src: str | os.PathLike) -> str:
    """Guess the input format from the path: ``npz``, ``npy``, ``ogb`` or ``text``."""
    p = Path(src)
    if p.is_dir():
        if (p / "raw" / "edge.csv.gz").exists() or (p / "raw" / "edge.csv").exists():
            return "ogb"
        if is_ogb_hetero(p):
            return "ogb"
        if (p / "graph.npz").exists():
            return "npz"
        raise ShoalInputError(
            "directory is neither an OGB dataset (raw/edge.csv.gz, or raw/relations/ for a "
            "typed one) nor holds a graph.npz",
            path=p,
            fix="pass a file, or --format",
        )
    name = p.name.lower()
    if name.endswith(".npz"):
        return "npz"
    if name.endswith(".npy"):
        return "npy"
    return "text"


def import_graph(
    src: str | os.PathLike,
    out: str | os.PathLike,
    config: ImportConfig | None = None,
    *,
    format: str = "auto",
) -> GraphDir:
    """Import ``src`` into the graph directory ``out`` and return it opened.

    ``format`` is one of :data:`FORMATS`; ``auto`` decides from the path
    (:func:`detect_format`).
    """
    cfg = config or ImportConfig()
    if format not in FORMATS:
        raise ShoalInputError(f"unknown format {format!r}", fix=f"use one of {', '.join(FORMATS)}")
    p = Path(src)
    if not p.exists():
        raise ShoalInputError("input not found", path=p, fix="check the path")
    fmt = detect_format(p) if format == "auto" else format
    if fmt == "npz" and p.is_dir():
        p = p / "graph.npz"
    if fmt == "ogb" and is_ogb_hetero(p):
        return import_ogb_hetero(p, out, cfg)
    return {"npz": import_npz, "text": import_text, "npy": import_npy, "ogb": import_ogb}[fmt](
        p, out, cfg
    )
