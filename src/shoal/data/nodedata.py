"""Checking and writing a graph directory's node data: features, labels and splits.

Used by :class:`~shoal.data.writer.GraphWriter`; every function raises
:class:`~shoal.errors.ShoalInputError` naming ``origin`` (the file or field the data came
from), the offending row and a fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from shoal.data.layout import SPLITS
from shoal.errors import ShoalInputError
from shoal.utils.diskspace import open_output_memmap
from shoal.utils.featdtype import FeatureDtype, encode, feature_dtype, scales_path

__all__ = ["check_labels", "check_split", "check_splits_disjoint", "write_features"]

#: Bytes of float32 rows read at a time from an array given as features.
_FEATURE_BLOCK_BYTES = 64 * 2**20
_ROWS_FIX = "give one feature row per node (or pass --num-nodes to match)"


def _target(dtype: np.dtype | str | None, given: np.dtype | None, origin: str) -> FeatureDtype:
    """The stored dtype: ``dtype`` (a feature dtype name or numpy dtype), else float16 for a
    float16 array, else float32."""
    if dtype is None:
        return feature_dtype("float16" if given == np.float16 else "float32")
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    return feature_dtype(name, path=origin)


def _feature_blocks(
    x: Any, n: int, origin: str, dtype: np.dtype | str | None
) -> tuple[Any, int | None, FeatureDtype]:
    """(iterator of row blocks, column count if known, stored dtype) of a feature source."""
    if not (hasattr(x, "ndim") and hasattr(x, "shape")):
        return iter(x), None, _target(dtype, None, origin)
    if x.ndim != 2:
        raise ShoalInputError(
            f"features must be 2-D (N, F), got shape {x.shape}",
            path=origin,
            fix="store one feature row per node",
        )
    if x.shape[0] != n:
        raise ShoalInputError(
            f"features have {x.shape[0]} rows but the graph has num_nodes={n}",
            path=origin,
            fix=_ROWS_FIX,
        )
    out_dtype = _target(dtype, np.dtype(x.dtype), origin)
    block = max(1, _FEATURE_BLOCK_BYTES // max(1, x.shape[1] * 4))
    return (x[s : min(n, s + block)] for s in range(0, n, block)), int(x.shape[1]), out_dtype


def _check_feature_block(
    rows: Any, written: int, n: int, num_cols: int | None, origin: str
) -> np.ndarray:
    """The block as a 2-D numeric array, checked for shape, row count and finite values."""
    if hasattr(rows, "toarray"):
        rows = rows.toarray()
    rows = np.asarray(rows)
    if rows.ndim == 1 and num_cols is None:
        rows = rows.reshape(-1, 1)
    if rows.ndim != 2 or (num_cols is not None and rows.shape[1] != num_cols):
        raise ShoalInputError(
            f"row {written}: feature block has shape {rows.shape}, expected (k, {num_cols})",
            path=origin,
            fix="every feature row must have the same number of columns",
        )
    if not (np.issubdtype(rows.dtype, np.number) or rows.dtype == bool):
        raise ShoalInputError(
            f"features must be numeric, got {rows.dtype}",
            path=origin,
            fix="store features as a float array",
        )
    if written + rows.shape[0] > n:
        raise ShoalInputError(
            f"features have more than {n} rows but the graph has num_nodes={n}",
            path=origin,
            fix=_ROWS_FIX,
        )
    finite = np.isfinite(rows)
    if not finite.all():
        r, c = np.argwhere(~finite)[0]
        raise ShoalInputError(
            f"row {written + int(r)}, column {int(c)}: feature is {rows[r, c]}",
            path=origin,
            fix="replace NaN/inf features (e.g. with 0) before importing",
        )
    return rows


def write_features(
    path: Path, x: Any, n: int, *, origin: str, dtype: np.dtype | str | None = None
) -> tuple[int, str]:
    """Write the (n, F) feature matrix ``x`` to the ``.npy`` file ``path`` in row blocks.

    ``x`` is an array (dense, scipy sparse or memory map), read in blocks of about 64 MiB, or an
    iterable of consecutive 2-D row blocks, never held whole. ``dtype`` is the stored feature
    dtype (a name of :data:`~shoal.utils.featdtype.FEATURE_DTYPES` or a numpy dtype); by
    default float16 stays float16 (for an array input) and anything else becomes float32.
    Each block is encoded as it is written (int8: its per-row scales go to
    ``X.scales.npy`` beside ``path``). The files are written with plain writes (no memory
    map), so resident memory stays at one block. Returns ``(F, dtype name)``; on error the
    partial files are removed (by the caller's atomic output).
    """
    blocks, num_cols, target = _feature_blocks(x, n, origin, dtype)
    written = 0
    f = fs = None
    try:
        for raw in blocks:
            rows = _check_feature_block(raw, written, n, num_cols, origin)
            if f is None:
                num_cols = int(rows.shape[1])
                f = _open_npy(path, target.stored, (n, num_cols))
                if target.scaled:
                    fs = _open_npy(scales_path(path), np.dtype(np.float32), (n,))
            stored, scales = encode(rows, target)
            stored.tofile(f)
            if fs is not None:
                scales.tofile(fs)
            written += rows.shape[0]
    finally:
        for h in (f, fs):
            if h is not None:
                h.close()
    if written != n:
        path.unlink(missing_ok=True)
        scales_path(path).unlink(missing_ok=True)
        raise ShoalInputError(
            f"features have {written} rows but the graph has num_nodes={n}",
            path=origin,
            fix=_ROWS_FIX,
        )
    return int(num_cols or 0), target.name


def _open_npy(path: Path, dtype: np.dtype, shape: tuple[int, ...]):
    """``path`` created as a ``.npy`` of ``shape`` (its disk space checked), open for writing
    its data from the start."""
    hdr = open_output_memmap(path, dtype, shape)
    offset = hdr.offset
    del hdr
    f = open(path, "r+b")  # noqa: SIM115 - closed by the caller
    f.seek(offset)
    return f


def check_labels(
    y: Any, n: int, *, origin: str, num_classes: int | None = None
) -> tuple[np.ndarray, int]:
    """(n,) int64 labels and the number of classes; -1 marks an unlabelled node.

    ``num_classes`` defaults to max label + 1; labels >= num_classes or < -1 are rejected, and
    float labels must be integral (NaN = unlabelled).
    """
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1 or y.shape[0] != n:
        raise ShoalInputError(
            f"labels have shape {y.shape}, expected ({n},) (one label per node)",
            path=origin,
            fix="give one integer label per node (-1 = unlabelled)",
        )
    if np.issubdtype(y.dtype, np.floating):
        nan = np.isnan(y)
        if (np.mod(y[~nan], 1) != 0).any():
            r = int(np.flatnonzero(~nan & (np.mod(np.nan_to_num(y), 1) != 0))[0])
            raise ShoalInputError(
                f"row {r}: label {y[r]} is not an integer",
                path=origin,
                fix="labels must be integer classes (-1 = unlabelled)",
            )
        y = np.where(nan, -1, y).astype(np.int64)
    elif not np.issubdtype(y.dtype, np.integer):
        raise ShoalInputError(
            f"labels must be integers, got dtype {y.dtype}",
            path=origin,
            fix="labels must be integer classes (-1 = unlabelled)",
        )
    y = y.astype(np.int64)
    labelled = y[y >= 0]
    if num_classes is None:
        num_classes = int(labelled.max()) + 1 if labelled.size else 0
    bad = np.flatnonzero((y < -1) | (y >= num_classes))
    if bad.size:
        r = int(bad[0])
        raise ShoalInputError(
            f"row {r}: label {int(y[r])} is out of range [0, {num_classes})",
            path=origin,
            fix="labels must be 0..num_classes-1, or -1 for unlabelled nodes",
        )
    return y, int(num_classes)


def check_split(name: str, idx: Any, n: int, *, origin: str) -> np.ndarray:
    """Sorted, unique int64 node ids of split ``name`` from ids or a boolean mask of length n."""
    if name not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {name!r}")
    a = np.asarray(idx)
    if a.dtype == bool:
        if a.shape != (n,):
            raise ShoalInputError(
                f"{name} mask has shape {a.shape}, expected ({n},)",
                path=origin,
                fix="give one mask entry per node",
            )
        a = np.flatnonzero(a)
    if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
        raise ShoalInputError(
            f"{name} split must be a 1-D array of node ids, got {a.dtype} {a.shape}",
            path=origin,
            fix="give the split as integer node ids or a boolean mask",
        )
    a = a.astype(np.int64)
    bad = np.flatnonzero((a < 0) | (a >= n))
    if bad.size:
        r = int(bad[0])
        raise ShoalInputError(
            f"row {r}: {name} node id {int(a[r])} is out of range [0, {n})",
            path=origin,
            fix="split node ids must be in [0, num_nodes); check --num-nodes",
        )
    a = np.sort(a)
    dup = np.flatnonzero(a[1:] == a[:-1])
    if dup.size:
        raise ShoalInputError(
            f"{name} split lists node {int(a[dup[0]])} twice",
            path=origin,
            fix="list every split node once",
        )
    return a


def check_splits_disjoint(name: str, a: np.ndarray, directory: Path, *, origin: str) -> None:
    """Reject overlap of split ``name`` (sorted ids ``a``) with splits already in ``directory``."""
    for other in SPLITS:
        p = directory / f"{other}_idx.npy"
        if other != name and p.exists():
            common = np.intersect1d(a, np.load(p), assume_unique=True)
            if common.size:
                raise ShoalInputError(
                    f"{name} and {other} splits overlap ({common.size} nodes, e.g. node "
                    f"{int(common[0])})",
                    path=origin,
                    fix="make the train/val/test splits disjoint",
                )
