"""Importer of a ``graph.npz`` in the ``shared/data`` layout (:func:`import_npz`)."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np

from shoal.data.format import SPLITS, GraphDir, GraphWriter
from shoal.data.importers.common import (
    ImportConfig,
    add_edge_index,
    check_out_free,
    has_all_reverse,
    make_writer,
    mask_to_idx,
    with_num_nodes,
)
from shoal.data.writer import graph_bytes
from shoal.errors import ShoalInputError

__all__ = ["import_npz"]


class _Npz:
    """An open ``.npz`` archive whose member reads turn errors into ShoalInputError."""

    def __init__(self, src: Path) -> None:
        self.src = src
        try:
            self.z = np.load(src, allow_pickle=False)
        except FileNotFoundError:
            raise ShoalInputError("input not found", path=src) from None
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
            raise ShoalInputError(
                f"not a readable .npz archive ({e})",
                path=src,
                fix="the file is truncated or corrupt; download or export it again",
            ) from None
        self.files = set(self.z.files)

    def __enter__(self) -> _Npz:
        return self

    def __exit__(self, *exc: object) -> None:
        self.z.close()

    def member_bytes(self, name: str) -> int:
        """The uncompressed size of member ``name`` (0 when absent): what writing it takes."""
        try:
            return int(self.z.zip.getinfo(f"{name}.npy").file_size)
        except (KeyError, AttributeError):
            return 0

    def get(self, name: str) -> np.ndarray:
        try:
            return self.z[name]
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, KeyError) as e:
            raise ShoalInputError(
                f"member {name!r} cannot be read ({e})",
                path=self.src,
                fix="the file is truncated or corrupt; export it again",
            ) from None


def _npz_edge_index(z: _Npz) -> np.ndarray:
    """The (2, E) ``edge_index`` member ((E, 2) is transposed)."""
    if "edge_index" not in z.files:
        raise ShoalInputError(
            f"no 'edge_index' array (members: {sorted(z.files)})",
            path=z.src,
            fix="store the edges as edge_index, an int array of shape (2, E)",
        )
    ei = z.get("edge_index")
    if ei.ndim != 2 or ei.shape[0] != 2:
        if ei.ndim == 2 and ei.shape[1] == 2:
            return ei.T
        raise ShoalInputError(
            f"field 'edge_index' has shape {ei.shape}, expected (2, E)",
            path=z.src,
            fix="store the edges as an int array of shape (2, E)",
        )
    return ei


def _npz_num_nodes(z: _Npz, n: int | None) -> int | None:
    """``n`` when given, else the ``num_nodes`` member when there is one."""
    if n is not None or "num_nodes" not in z.files:
        return n
    nn = z.get("num_nodes")
    if nn.size != 1 or not np.issubdtype(nn.dtype, np.integer) or int(nn) < 0:
        raise ShoalInputError(
            f"field 'num_nodes' must be a non-negative integer scalar, got {nn!r}", path=z.src
        )
    return int(nn)


def _npz_node_data(w: GraphWriter, z: _Npz, n: int, cfg: ImportConfig) -> None:
    """Features (dense or CSR), labels and splits of the archive, as far as present."""
    src = z.src
    if "x" in z.files:
        w.write_features(z.get("x"), origin=f"{src} field 'x'")
    elif "x_data" in z.files:
        w.write_features(_npz_csr(z.get, z.files, src), origin=f"{src} field 'x_data'")
    if "y" in z.files:
        y = z.get("y")
        if y.ndim == 2 and y.shape[1] > 1:
            raise ShoalInputError(
                f"field 'y' has shape {y.shape}: multi-label targets are not supported",
                path=src,
                fix="store one integer class per node (-1 = unlabelled)",
            )
        w.write_labels(y, origin=f"{src} field 'y'", num_classes=cfg.num_classes)
    _npz_splits(w, z.get, z.files, src, n, cfg.split_index)


def import_npz(
    src: str | os.PathLike, out: str | os.PathLike, config: ImportConfig | None = None
) -> GraphDir:
    """Import a ``graph.npz`` in the ``shared/data`` layout.

    Members: ``edge_index`` (2, E) int (required); ``num_nodes`` scalar; features as dense
    ``x`` (N, F) or CSR parts ``x_data``/``x_indices``/``x_indptr``/``x_shape``; ``y`` (N,);
    masks ``train_mask``/``val_mask``/``test_mask`` (N,) bool; optional 10-split arrays
    ``train_masks``/``val_masks``/``test_masks`` (10, N), selected with ``split_index``.

    Memory: numpy loads one npz member at a time, whole (members are compressed, so they
    cannot be memory-mapped): an npz import therefore holds the edge index (and then the
    feature matrix) in memory; it is meant for graphs that fit. Everything is still written
    through the streaming writer in chunks. ``directed`` is set to false in ``meta.json`` when
    every edge's reverse is stored (as in the shared Cora), checked in O(E) memory.
    """
    cfg = config or ImportConfig()
    src = Path(src)
    check_out_free(out, cfg)
    with _Npz(src) as z:
        ei = _npz_edge_index(z)
        n = _npz_num_nodes(z, cfg.num_nodes)
        origin = f"{src} field 'edge_index'"
        source = {"input": str(src), "importer": "npz"}
        stored = ei.shape[1] * (2 if cfg.undirected else 1) if ei.ndim == 2 else 0
        if cfg.dedup or cfg.drop_self_loops:
            stored = 0  # how many stay is not known up front
        need = graph_bytes(n or 0, stored) + z.member_bytes("x")
        with make_writer(out, with_num_nodes(cfg, n), source, need=need) as w:
            add_edge_index(w, ei, origin, cfg.chunk_edges)
            n = w.finish_edges()
            if not cfg.undirected and has_all_reverse(
                ei.astype(np.int64, copy=False) if ei.size else ei, max(n, 1)
            ):
                w.directed = False
            del ei
            _npz_node_data(w, z, n, cfg)
        return GraphDir.open(out)


def _npz_csr(get, files: set[str], src: Path):
    import scipy.sparse as sp

    missing = {"x_data", "x_indices", "x_indptr", "x_shape"} - files
    if missing:
        raise ShoalInputError(
            f"CSR features are incomplete: missing {sorted(missing)}",
            path=src,
            fix="store x_data, x_indices, x_indptr and x_shape together (or a dense x)",
        )
    shape = tuple(int(v) for v in get("x_shape"))
    try:
        return sp.csr_matrix((get("x_data"), get("x_indices"), get("x_indptr")), shape=shape)
    except ValueError as e:
        raise ShoalInputError(
            f"fields x_data/x_indices/x_indptr/x_shape do not form a CSR matrix: {e}",
            path=src,
            fix="x_indptr must have x_shape[0] + 1 entries and x_indices be < x_shape[1]",
        ) from None


def _npz_splits(w: GraphWriter, get, files: set[str], src: Path, n: int, k: int | None) -> None:
    single = all(f"{s}_mask" in files for s in SPLITS)
    multi = all(f"{s}_masks" in files for s in SPLITS)
    if k is None and single:
        for s in SPLITS:
            w.write_split(
                s, mask_to_idx(get(f"{s}_mask"), n, f"{s}_mask", str(src)), origin=f"{src} {s}"
            )
        return
    if multi:
        k = 0 if k is None else k
        for s in SPLITS:
            ms = get(f"{s}_masks")
            if ms.ndim == 2 and ms.shape[1] != n and ms.shape[0] == n:
                ms = ms.T
            if ms.ndim != 2 or k >= ms.shape[0]:
                raise ShoalInputError(
                    f"--split-index {k} is out of range: field '{s}_masks' has shape {ms.shape}",
                    path=src,
                    fix=f"pick a split index in [0, {ms.shape[0] if ms.ndim == 2 else 0})",
                )
            w.write_split(
                s, mask_to_idx(ms[k], n, f"{s}_masks[{k}]", str(src)), origin=f"{src} {s}"
            )
        return
    if k is not None:
        raise ShoalInputError(
            "--split-index given but the file has no train_masks/val_masks/test_masks",
            path=src,
            fix="omit --split-index",
        )
    present = [s for s in SPLITS if f"{s}_mask" in files]
    for s in present:  # partial splits (e.g. only a train mask) are kept as they are
        w.write_split(
            s, mask_to_idx(get(f"{s}_mask"), n, f"{s}_mask", str(src)), origin=f"{src} {s}"
        )
