"""Pass 3 of the store writer (private): feature rows of core and halo nodes, in one
sequential pass over the feature matrix (docs/store.md#how-it-is-written-bounded-memory).
Memory: one block of ``block_bytes`` rows, or one bucket, at a time. int8 rows' per-row
scales (``X.scales.npy`` beside ``X.npy``) are scattered and gathered exactly as the rows are;
a store of another dtype than the graph's converts the matrix block by block first, into the
scratch directory (docs/format.md#feature-dtypes).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from shoal.data.format import GraphDir
from shoal.store._io import NpyAppender, gather_rows, npy_info, read_rows
from shoal.utils.featdtype import FeatureDtype, convert_block, feature_dtype, scales_path
from shoal.utils.progress import progress

__all__ = ["write_features"]


def _scatter_core(
    feat_path: Path,
    tmp: Path,
    node_part: np.ndarray,
    offsets: np.ndarray,
    block_rows: int,
    show: bool | None,
    name: str = "features.npy",
) -> None:
    """``part_<i>/<name>``: the core rows of every part, in one pass over the matrix."""
    fdtype, fshape, _ = npy_info(feat_path)
    p, n = offsets.shape[0] - 1, node_part.shape[0]
    writers = [
        NpyAppender(
            tmp / f"part_{i}" / name,
            fdtype,
            (int(offsets[i + 1] - offsets[i]), *fshape[1:]),
        )
        for i in range(p)
    ]
    try:
        bar = progress(total=n, desc="store: features", unit="row", enable=show)
        for s in range(0, n, block_rows):
            x = read_rows(feat_path, s, s + block_rows)
            owner = node_part[s : s + x.shape[0]]
            order = np.argsort(owner, kind="stable")
            ob = np.flatnonzero(np.r_[True, owner[order][1:] != owner[order][:-1], True])
            for a, b in zip(ob[:-1], ob[1:]):
                writers[int(owner[order[a]])].append(x[order[a:b]])
            bar.update(x.shape[0])
        bar.close()
    finally:
        for w in writers:
            w.close()


#: most bucket files of the ordered scatter (they are open at once, whatever the number of
#: parts: a bucket may straddle parts); a bucket is at least one feature block.
MAX_BUCKETS = 256


def _scatter_ordered(
    feat_path: Path,
    tmp: Path,
    work: Path,
    offsets: np.ndarray,
    block_rows: int,
    show: bool | None,
    name: str = "features.npy",
) -> None:
    """``part_<i>/<name>`` in any order inside the parts (``tmp/node_map*.npy``): rows go
    to buckets of consecutive new IDs, each then permuted in memory (module docstring)."""
    fdtype, fshape, _ = npy_info(feat_path)
    n, rest = int(fshape[0]), tuple(int(d) for d in fshape[1:])
    p = offsets.shape[0] - 1
    size = max(block_rows, -(-n // MAX_BUCKETS))
    cuts = np.arange(0, n, size, dtype=np.int64)  # a bucket may straddle parts
    bounds = np.append(cuts, n)
    files = [open(work / f"feat_bucket_{k}.bin", "wb") for k in range(len(cuts))]  # noqa: SIM115
    try:
        bar = progress(total=2 * n, desc="store: features", unit="row", enable=show)
        for s in range(0, n, block_rows):
            x = read_rows(feat_path, s, s + block_rows)
            b = (
                np.searchsorted(
                    cuts, read_rows(tmp / "node_map.npy", s, s + x.shape[0]), side="right"
                )
                - 1
            )
            order = np.argsort(b, kind="stable")
            ob = np.flatnonzero(np.r_[True, b[order][1:] != b[order][:-1], True])
            for a, e in zip(ob[:-1], ob[1:]):
                files[int(b[order[a]])].write(x[order[a:e]].tobytes())
            bar.update(x.shape[0])
    finally:
        for f in files:
            f.close()
    writers = [
        NpyAppender(tmp / f"part_{i}" / name, fdtype, (int(offsets[i + 1] - offsets[i]), *rest))
        for i in range(p)
    ]
    try:
        for k, (a, e) in enumerate(zip(bounds[:-1], bounds[1:])):
            path = work / f"feat_bucket_{k}.bin"
            raw = np.fromfile(path, dtype=fdtype).reshape(-1, *rest)
            path.unlink()
            out = np.empty_like(raw)
            # the bucket holds its rows in ascending original ID: row j is new ID
            # a + argsort(original IDs of a..e)[j]
            out[np.argsort(read_rows(tmp / "node_map_inv.npy", int(a), int(e)))] = raw
            inner = offsets[(offsets > a) & (offsets < e)]
            for lo, hi in zip(np.r_[a, inner], np.r_[inner, e]):  # part by part
                writers[int(np.searchsorted(offsets, lo, side="right") - 1)].append(
                    out[lo - a : hi - a]
                )
            bar.update(raw.shape[0])
        bar.close()
    finally:
        for w in writers:
            w.close()


def _gather_halo(
    tmp: Path,
    i: int,
    halo: np.ndarray,
    offsets: np.ndarray,
    fdtype: np.dtype,
    rest: tuple[int, ...],
    block_rows: int,
    name: str = "features.npy",
) -> None:
    """``part_<i>/halo_<name>``: part ``i``'s halo rows, read from their owners' core
    ``<name>`` files (halo ids are ascending, hence grouped by owner)."""
    out = tmp / f"part_{i}" / f"halo_{name}"
    if halo.size == 0:
        np.save(out, np.empty((0, *rest), dtype=fdtype))
        return
    owners = np.searchsorted(offsets, halo, side="right") - 1
    with NpyAppender(out, fdtype, (halo.shape[0], *rest)) as w:
        hb = np.flatnonzero(np.r_[True, owners[1:] != owners[:-1], True])
        for a, b in zip(hb[:-1], hb[1:]):
            j = int(owners[a])
            rows = halo[a:b] - offsets[j]
            src = tmp / f"part_{j}" / name
            for s in range(0, rows.shape[0], block_rows):
                w.append(gather_rows(src, rows[s : s + block_rows]))


def _converted(
    feat_path: Path, source: FeatureDtype, target: FeatureDtype, scratch: Path, block_rows: int
) -> Path:
    """The matrix ``feat_path`` (stored as ``source``) written as ``target`` into ``scratch``,
    block by block (with its scales for int8); returns the new matrix's path."""
    fdtype, fshape, _ = npy_info(feat_path)
    n, dim = int(fshape[0]), int(fshape[1])
    out = scratch / "features.npy"
    scales_in = scales_path(feat_path) if source.scaled else None
    rows_w = NpyAppender(out, target.stored, (n, dim))
    scale_w = NpyAppender(scales_path(out), np.dtype(np.float32), (n,)) if target.scaled else None
    try:
        for s in range(0, n, block_rows):
            x = read_rows(feat_path, s, s + block_rows)
            sc = read_rows(scales_in, s, s + x.shape[0]) if scales_in is not None else None
            rows, scales = convert_block(x, sc, source, target)
            rows_w.append(rows)
            if scale_w is not None:
                scale_w.append(scales)
    finally:
        rows_w.close()
        if scale_w is not None:
            scale_w.close()
    return out


def write_features(
    g: GraphDir,
    tmp: Path,
    node_part: np.ndarray,
    offsets: np.ndarray,
    halo_lists: list[np.ndarray],
    *,
    halo_features: bool,
    block_bytes: int,
    show: bool | None,
    work: Path | None = None,
    scratch: Path | None = None,
    dtype: str | None = None,
) -> tuple[int | None, str | None]:
    """Pass 3: core feature rows of every part, and halo rows when ``halo_features``, stored
    as ``dtype`` (a feature dtype name; default None: the graph's), converted first into
    ``scratch`` when it differs from the graph's. ``work``: the scratch directory of the
    ordered scatter, needed when core rows are not in ascending original ID inside their part
    (``tmp/node_map_inv.npy``). Returns ``(feature_dim, feature_dtype name)``,
    ``(None, None)`` when the graph has none."""
    feat_path = g.path / "features.npy"
    if not feat_path.exists():
        return None, None
    fdtype, fshape, _ = npy_info(feat_path)
    source = feature_dtype(g.meta.get("feature_dtype") or fdtype.name, path=g.path / "meta.json")
    target = source if dtype is None else feature_dtype(dtype)
    block_rows = max(1, block_bytes // max(1, fshape[1] * fdtype.itemsize))
    if target != source:
        if scratch is None:
            raise ValueError("converting the features needs a scratch directory")
        feat_path = _converted(feat_path, source, target, scratch, block_rows)
    names = [("features.npy", feat_path)]
    if target.scaled:
        names.append((scales_path("features.npy").name, scales_path(feat_path)))
    for name, path in names:
        if work is None:
            _scatter_core(path, tmp, node_part, offsets, block_rows, show, name)
        else:
            _scatter_ordered(path, tmp, work, offsets, block_rows, show, name)
    if halo_features:
        p = offsets.shape[0] - 1
        for i in progress(range(p), total=p, desc="store: halo features", enable=show):
            for name, path in names:
                dt, shape, _ = npy_info(path)
                _gather_halo(tmp, i, halo_lists[i], offsets, dt, tuple(shape[1:]), block_rows, name)
    if target != source:
        for _, path in names:
            path.unlink(missing_ok=True)
    return int(fshape[1]), target.name
