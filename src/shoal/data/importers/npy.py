"""Importer of ``.npy`` edge arrays of shape (2, E) or (E, 2) (:func:`import_npy`)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from shoal.data.format import GraphDir
from shoal.data.importers.common import ImportConfig, check_ids, check_out_free, make_writer
from shoal.data.writer import graph_bytes
from shoal.errors import ShoalInputError

__all__ = ["import_npy"]


def _npy_header(path: Path) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """(shape, fortran_order, dtype, data offset) of a .npy file, checking its size."""
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            offset = f.tell()
    except FileNotFoundError:
        raise ShoalInputError("input not found", path=path) from None
    except (ValueError, OSError, SyntaxError) as e:
        raise ShoalInputError(
            f"not a valid .npy file ({e})", path=path, fix="save the array with numpy.save"
        ) from None
    need = offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    have = path.stat().st_size
    if have < need:
        raise ShoalInputError(
            f"truncated: the header says shape {shape} {dtype} ({need} bytes with the header) "
            f"but the file has {have} bytes",
            path=path,
            fix="the file is truncated; save or download it again",
        )
    return tuple(int(s) for s in shape), bool(fortran), np.dtype(dtype), offset


def import_npy(
    src: str | os.PathLike, out: str | os.PathLike, config: ImportConfig | None = None
) -> GraphDir:
    """Import a ``.npy`` edge array of shape (2, E) (PyG ``edge_index``) or (E, 2).

    The array is read in chunks with positioned reads (no memory map, so the resident set
    stays at one chunk). A (2, 2) array is read as (2, E). Integer dtypes are accepted, and
    float arrays whose values are all integral; anything else is rejected.
    """
    cfg = config or ImportConfig()
    src = Path(src)
    shape, fortran, dtype, offset = _npy_header(src)
    if len(shape) != 2 or 2 not in shape:
        raise ShoalInputError(
            f"array has shape {shape}, expected (2, E) or (E, 2)",
            path=src,
            fix="save the edges as a (2, E) or (E, 2) integer array",
        )
    if not (np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.floating)):
        raise ShoalInputError(
            f"array has dtype {dtype}, expected integer node ids",
            path=src,
            fix="save the edges as an int32/int64 array",
        )
    check_out_free(out, cfg)
    two_by_e = shape[0] == 2  # (2, E): PyG edge_index
    num_edges = shape[1] if two_by_e else shape[0]
    # C-order (2, E) and Fortran-order (E, 2) store the src row then the dst row;
    # C-order (E, 2) and Fortran-order (2, E) store interleaved pairs
    planar = two_by_e != fortran
    isz = dtype.itemsize
    chunk = cfg.chunk_edges
    stored = num_edges * (2 if cfg.undirected else 1)
    if cfg.dedup or cfg.drop_self_loops:
        stored = 0  # how many stay is not known up front
    need = graph_bytes(cfg.num_nodes or 0, stored)
    source = {"input": str(src), "importer": "npy"}
    with make_writer(out, cfg, source, need=need) as w, open(src, "rb") as f:
        for s in range(0, num_edges, chunk):
            k = min(chunk, num_edges - s)
            if planar:
                f.seek(offset + s * isz)
                a = np.fromfile(f, dtype=dtype, count=k)
                f.seek(offset + (num_edges + s) * isz)
                b = np.fromfile(f, dtype=dtype, count=k)
                e = np.stack([a, b], axis=1)
            else:
                f.seek(offset + 2 * s * isz)
                e = np.fromfile(f, dtype=dtype, count=2 * k).reshape(k, 2)
            if np.issubdtype(dtype, np.floating):
                frac = ~np.isfinite(e) | (np.mod(np.nan_to_num(e), 1) != 0)
                if frac.any():
                    r = int(np.flatnonzero(frac.any(axis=1))[0])
                    raise ShoalInputError(
                        f"edge {s + r}: node id {e[r].tolist()} is not an integer (dtype {dtype})",
                        path=src,
                        fix="node ids must be integers; save the array as int64",
                    )
                e = e.astype(np.int64)
            check_ids(e, w.num_nodes, lambda r, s=s: s + r, src, "edge")
            w.add_edges(e, origin=f"{src} (edges from {s})")
    return GraphDir.open(out)
