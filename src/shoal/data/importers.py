"""Importers: turn a graph in a foreign layout into a graph directory (``docs/format.md``).

Every importer streams its edges into a :class:`~shoal.data.format.GraphWriter` in bounded
chunks, so the writer's options (``--num-nodes``, ``--undirected``, ``--dedup``,
``--drop-self-loops``; the last three done by the writer with an external sort) behave the same
whatever the source. Every importer validates its input and raises
:class:`~shoal.errors.ShoalInputError` naming the file, the offending row/field and a fix; the
output is written to a temporary sibling directory and renamed into place only when complete,
so a failed import leaves nothing behind.

Sources:

- ``graph.npz`` in the ``shared/data`` layout (:func:`import_npz`);
- plain edge lists: whitespace / CSV text, optionally gzipped (:func:`import_text`), and
  ``.npy`` arrays of shape (2, E) or (E, 2) (:func:`import_npy`);
- the raw layout of OGB node-property datasets (:func:`import_ogb`), without the ``ogb``
  package;
- Python objects: a PyG ``Data`` (:func:`from_pyg`) or a scipy sparse matrix
  (:func:`from_scipy`), for small graphs.

:func:`import_graph` picks the importer from the path (``format="auto"``).
"""

from __future__ import annotations

import gzip
import itertools
import os
import zipfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shoal.data.extsort import DEFAULT_SORT_MEMORY
from shoal.data.format import SPLITS, GraphDir, GraphWriter
from shoal.data.stream import DEFAULT_CHUNK_EDGES
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
    "import_text",
]

#: Input formats understood by :func:`import_graph`.
FORMATS = ("auto", "npz", "text", "npy", "ogb")
_COMMENTS = ("#", "%")
_TEXT_CHUNK_LINES = 1 << 18


@dataclass(kw_only=True)
class ImportConfig:
    """Options shared by every importer.

    Attributes:
        num_nodes: number of nodes; default: the source's own count (``num_nodes`` in a
            ``graph.npz``, ``num-node-list.csv.gz`` in OGB), else max id + 1.
        undirected: add the reverse of every edge (default false).
        dedup: drop repeated (src, dst) pairs with an external sort (default false).
        drop_self_loops: drop (v, v) edges (default false).
        num_classes: number of classes; labels must lie in ``[0, num_classes)`` (or be -1 for
            unlabelled). Default: max label + 1.
        split_index: which of the 10 official splits of a ``graph.npz`` that has
            ``train_masks``/``val_masks``/``test_masks`` (10, N) to use. Default None: the
            single ``train_mask``/``val_mask``/``test_mask`` when present, else split 0.
        split_scheme: OGB split folder under ``split/`` (default: the only one there).
        name: dataset name stored in meta.json (default: the output directory's name).
        overwrite: replace an existing output directory (default false).
        chunk_edges: edges per chunk handed to the writer (default 1 Mi).
        sort_memory: memory cap of the external sort used by ``dedup`` (default 256 MiB).
    """

    num_nodes: int | None = None
    undirected: bool = False
    dedup: bool = False
    drop_self_loops: bool = False
    num_classes: int | None = None
    split_index: int | None = None
    split_scheme: str | None = None
    name: str | None = None
    overwrite: bool = False
    chunk_edges: int = DEFAULT_CHUNK_EDGES
    sort_memory: int = DEFAULT_SORT_MEMORY

    def __post_init__(self) -> None:
        if self.num_nodes is not None and self.num_nodes < 0:
            raise ShoalInputError(
                f"num_nodes must be >= 0, got {self.num_nodes}", fix="pass --num-nodes N >= 0"
            )
        if self.num_classes is not None and self.num_classes < 1:
            raise ShoalInputError(f"num_classes must be >= 1, got {self.num_classes}")
        if self.split_index is not None and self.split_index < 0:
            raise ShoalInputError(f"split_index must be >= 0, got {self.split_index}")
        if self.chunk_edges < 1:
            raise ShoalInputError(f"chunk_edges must be >= 1, got {self.chunk_edges}")
        if self.sort_memory < 2**20:
            raise ShoalInputError(f"sort_memory must be >= 1 MiB, got {self.sort_memory}")


def _writer(out: str | os.PathLike, cfg: ImportConfig, source: dict[str, Any]) -> GraphWriter:
    return GraphWriter(
        out,
        num_nodes=cfg.num_nodes,
        symmetrize=cfg.undirected,
        dedup=cfg.dedup,
        drop_self_loops=cfg.drop_self_loops,
        sort_memory=cfg.sort_memory,
        name=cfg.name,
        source={**source, "options": {k: v for k, v in asdict(cfg).items() if v not in (None,)}},
        overwrite=cfg.overwrite,
    )


def _check_out_free(out: str | os.PathLike, cfg: ImportConfig) -> None:
    # fail before reading a large input when the output exists
    if Path(out).exists() and not cfg.overwrite:
        raise ShoalInputError(
            "output already exists", path=out, fix="choose another --out or pass --overwrite"
        )


# ---------------------------------------------------------------------- detection
def detect_format(src: str | os.PathLike) -> str:
    """Guess the input format from the path: ``npz``, ``npy``, ``ogb`` or ``text``."""
    p = Path(src)
    if p.is_dir():
        if (p / "raw" / "edge.csv.gz").exists() or (p / "raw" / "edge.csv").exists():
            return "ogb"
        if (p / "graph.npz").exists():
            return "npz"
        raise ShoalInputError(
            "directory is neither an OGB dataset (raw/edge.csv.gz) nor holds a graph.npz",
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
    return {"npz": import_npz, "text": import_text, "npy": import_npy, "ogb": import_ogb}[fmt](
        p, out, cfg
    )


# ---------------------------------------------------------------------- shared pieces
def _check_ids(
    e: np.ndarray, num_nodes: int | None, where: Any, path: Any, what: str = "line"
) -> None:
    """Reject negative ids (and ids >= num_nodes when known) naming the input position.

    ``where`` maps a row of ``e`` to its position in the input (e.g. file line numbers).
    """
    bad = (e < 0).any(axis=1)
    if num_nodes is not None:
        bad |= (e >= num_nodes).any(axis=1)
    if not bad.any():
        return
    r = int(np.flatnonzero(bad)[0])
    pos = int(where[r]) if not callable(where) else int(where(r))
    pair = [int(v) for v in e[r]]
    if min(pair) < 0:
        raise ShoalInputError(
            f"{what} {pos}: negative node id in edge {pair}",
            path=path,
            fix="node ids must be integers in [0, num_nodes)",
        )
    raise ShoalInputError(
        f"{what} {pos}: node id {max(pair)} in edge {pair} is out of range for "
        f"num_nodes={num_nodes}",
        path=path,
        fix="pass a larger --num-nodes, or omit it to use max id + 1",
    )


def _add_edge_index(w: GraphWriter, ei: np.ndarray, origin: str, chunk: int) -> None:
    """Add a (2, E) array in chunks; errors name the column of the offending edge."""
    if ei.size and not np.issubdtype(ei.dtype, np.integer):
        if not np.issubdtype(ei.dtype, np.number):
            raise ShoalInputError(
                f"node ids must be integers, got dtype {ei.dtype}",
                path=origin,
                fix="store edge_index as an int64 array",
            )
        frac = ~np.isfinite(ei) | (np.mod(np.nan_to_num(ei), 1) != 0)
        if frac.any():
            col = int(np.flatnonzero(frac.any(axis=0))[0])
            raise ShoalInputError(
                f"column {col}: node id {ei[:, col].tolist()} is not an integer",
                path=origin,
                fix="store edge_index as an int64 array",
            )
    for s in range(0, ei.shape[1], chunk):
        e = ei[:, s : s + chunk].T.astype(np.int64)
        _check_ids(e, w.num_nodes, lambda r, s=s: s + r, origin, "column")
        w.add_edges(e, origin=f"{origin} (edges from column {s})")


def _has_all_reverse(ei: np.ndarray, n: int) -> bool:
    """True when every (u, v) of a (2, E) edge index also appears as (v, u). O(E) memory."""
    if ei.shape[1] == 0:
        return False
    src = ei[0].astype(np.int64)
    dst = ei[1].astype(np.int64)
    keys = np.sort(src * n + dst)
    rev = dst * n + src
    pos = np.searchsorted(keys, rev)
    pos[pos == keys.size] = 0
    return bool(np.all(keys[pos] == rev))


def _mask_to_idx(m: np.ndarray, n: int, field: str, origin: str) -> np.ndarray:
    m = np.asarray(m)
    if m.dtype != bool:
        if np.issubdtype(m.dtype, np.integer) and m.shape == (n,) and np.isin(m, (0, 1)).all():
            m = m.astype(bool)
        else:
            raise ShoalInputError(
                f"field {field!r}: expected a boolean mask of shape ({n},), got {m.dtype} "
                f"{m.shape}",
                path=origin,
                fix="store split masks as bool arrays with one entry per node",
            )
    if m.shape != (n,):
        raise ShoalInputError(
            f"field {field!r}: mask has shape {m.shape}, expected ({n},) (one entry per node)",
            path=origin,
            fix="store split masks as bool arrays with one entry per node",
        )
    return np.flatnonzero(m)


# ---------------------------------------------------------------------- graph.npz
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
    _check_out_free(out, cfg)
    try:
        z = np.load(src, allow_pickle=False)
    except FileNotFoundError:
        raise ShoalInputError("input not found", path=src) from None
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
        raise ShoalInputError(
            f"not a readable .npz archive ({e})",
            path=src,
            fix="the file is truncated or corrupt; download or export it again",
        ) from None
    with z:
        files = set(z.files)

        def get(name: str) -> np.ndarray:
            try:
                return z[name]
            except (zipfile.BadZipFile, OSError, ValueError, EOFError, KeyError) as e:
                raise ShoalInputError(
                    f"member {name!r} cannot be read ({e})",
                    path=src,
                    fix="the file is truncated or corrupt; export it again",
                ) from None

        if "edge_index" not in files:
            raise ShoalInputError(
                f"no 'edge_index' array (members: {sorted(files)})",
                path=src,
                fix="store the edges as edge_index, an int array of shape (2, E)",
            )
        ei = get("edge_index")
        if ei.ndim != 2 or ei.shape[0] != 2:
            if ei.ndim == 2 and ei.shape[1] == 2:
                ei = ei.T
            else:
                raise ShoalInputError(
                    f"field 'edge_index' has shape {ei.shape}, expected (2, E)",
                    path=src,
                    fix="store the edges as an int array of shape (2, E)",
                )
        n = cfg.num_nodes
        if n is None and "num_nodes" in files:
            nn = get("num_nodes")
            if nn.size != 1 or not np.issubdtype(nn.dtype, np.integer) or int(nn) < 0:
                raise ShoalInputError(
                    f"field 'num_nodes' must be a non-negative integer scalar, got {nn!r}",
                    path=src,
                )
            n = int(nn)
        origin = f"{src} field 'edge_index'"
        wcfg = ImportConfig(**{**asdict(cfg), "num_nodes": n})
        with _writer(out, wcfg, {"input": str(src), "importer": "npz"}) as w:
            _add_edge_index(w, ei, origin, cfg.chunk_edges)
            n = w.finish_edges()
            if not cfg.undirected and _has_all_reverse(
                ei.astype(np.int64, copy=False) if ei.size else ei, max(n, 1)
            ):
                w.directed = False
            del ei
            # features
            if "x" in files:
                w.write_features(get("x"), origin=f"{src} field 'x'")
            elif "x_data" in files:
                w.write_features(_npz_csr(get, files, src), origin=f"{src} field 'x_data'")
            if "y" in files:
                y = get("y")
                if y.ndim == 2 and y.shape[1] > 1:
                    raise ShoalInputError(
                        f"field 'y' has shape {y.shape}: multi-label targets are not supported",
                        path=src,
                        fix="store one integer class per node (-1 = unlabelled)",
                    )
                w.write_labels(y, origin=f"{src} field 'y'", num_classes=cfg.num_classes)
            _npz_splits(w, get, files, src, n, cfg.split_index)
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
                s, _mask_to_idx(get(f"{s}_mask"), n, f"{s}_mask", str(src)), origin=f"{src} {s}"
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
                s, _mask_to_idx(ms[k], n, f"{s}_masks[{k}]", str(src)), origin=f"{src} {s}"
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
            s, _mask_to_idx(get(f"{s}_mask"), n, f"{s}_mask", str(src)), origin=f"{src} {s}"
        )


# ---------------------------------------------------------------------- text
def _open_text(path: Path):
    try:
        if path.name.endswith(".gz"):
            return gzip.open(path, "rt", encoding="utf-8", errors="replace", newline="")
        return open(path, encoding="utf-8", errors="replace", newline="")
    except FileNotFoundError:
        raise ShoalInputError("input not found", path=path) from None


def _numbered_data_lines(f, path: Path) -> Iterator[tuple[list[int], list[str]]]:
    """Chunks of (file line numbers, data lines) with comments and blank lines removed."""
    lineno = 0
    try:
        while True:
            block = list(itertools.islice(f, _TEXT_CHUNK_LINES))
            if not block:
                return
            nums: list[int] = []
            lines: list[str] = []
            for line in block:
                lineno += 1
                t = line.strip()
                if not t or t[0] in _COMMENTS:
                    continue
                nums.append(lineno)
                lines.append(t)
            if lines:
                yield nums, lines
    except (EOFError, OSError, zipfile.BadZipFile) as e:  # gzip truncated / corrupt
        raise ShoalInputError(
            f"cannot read past line {lineno}: {e}",
            path=path,
            fix="the file is truncated or corrupt; download or export it again",
        ) from None


def _delimiter(line: str) -> str | None:
    if "," in line:
        return ","
    if ";" in line:
        return ";"
    return None  # any whitespace


def _parse_int_rows(
    lines: list[str], nums: list[int], delim: str | None, ncols: int, path: Path, what: str
) -> np.ndarray:
    """Parse ``lines`` into an (k, ncols) int64 array; on bad input name the line."""
    try:
        arr = np.loadtxt(
            lines, dtype=np.int64, delimiter=delim, usecols=range(ncols), ndmin=2, comments=None
        )
        if arr.shape == (len(lines), ncols):
            return arr
    except ValueError:
        pass
    # slow path: find the exact offending line (floats with integral values are accepted)
    rows = np.empty((len(lines), ncols), dtype=np.int64)
    for i, (ln, line) in enumerate(zip(nums, lines)):
        toks = line.split(delim) if delim else line.split()
        toks = [t.strip() for t in toks]
        if len(toks) < ncols:
            raise ShoalInputError(
                f"line {ln}: expected {ncols} {what} per line, got {len(toks)} ({line!r})",
                path=path,
                fix="each data line needs src and dst ids; comment other lines out with #",
            )
        for j in range(ncols):
            t = toks[j]
            try:
                rows[i, j] = int(t)
                continue
            except ValueError:
                pass
            try:
                v = float(t)
            except ValueError:
                v = None
            if v is None or not np.isfinite(v) or not float(v).is_integer():
                raise ShoalInputError(
                    f"line {ln}, column {j + 1}: {t!r} is not an integer {what[:-1]}",
                    path=path,
                    fix="node ids must be integers in [0, num_nodes); comment header lines "
                    "out with # (or %)",
                )
            rows[i, j] = int(v)
    return rows


def _text_edge_chunks(path: Path, ncols: int = 2, what: str = "node ids") -> Iterator:
    """Yield (file line numbers, (k, ncols) int64 array) blocks from a text file."""
    with _open_text(path) as f:
        delim: str | None = None
        first = True
        for nums, lines in _numbered_data_lines(f, path):
            if first:
                delim = _delimiter(lines[0])
                first = False
            yield np.asarray(nums), _parse_int_rows(lines, nums, delim, ncols, path, what)


def import_text(
    src: str | os.PathLike, out: str | os.PathLike, config: ImportConfig | None = None
) -> GraphDir:
    """Import a text edge list: one ``src dst`` pair per line.

    Columns are separated by whitespace, commas or semicolons (decided from the first data
    line); further columns (weights, timestamps) are ignored; lines starting with ``#`` or
    ``%`` and blank lines are skipped; ``.gz`` files are decompressed on the fly. The file is
    read in blocks of 256 Ki lines, so memory does not depend on its size. A bad line is
    reported with its line number in the file.
    """
    cfg = config or ImportConfig()
    src = Path(src)
    if not src.exists():
        raise ShoalInputError("input not found", path=src)
    _check_out_free(out, cfg)
    with _writer(out, cfg, {"input": str(src), "importer": "text"}) as w:
        for nums, rows in _text_edge_chunks(src):
            _check_ids(rows, w.num_nodes, nums, src)
            for s in range(0, rows.shape[0], cfg.chunk_edges):
                w.add_edges(
                    rows[s : s + cfg.chunk_edges], origin=f"{src} (block from line {nums[s]})"
                )
    return GraphDir.open(out)


# ---------------------------------------------------------------------- .npy
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
    _check_out_free(out, cfg)
    two_by_e = shape[0] == 2  # (2, E): PyG edge_index
    num_edges = shape[1] if two_by_e else shape[0]
    # C-order (2, E) and Fortran-order (E, 2) store the src row then the dst row;
    # C-order (E, 2) and Fortran-order (2, E) store interleaved pairs
    planar = two_by_e != fortran
    isz = dtype.itemsize
    chunk = cfg.chunk_edges
    with _writer(out, cfg, {"input": str(src), "importer": "npy"}) as w, open(src, "rb") as f:
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
            _check_ids(e, w.num_nodes, lambda r, s=s: s + r, src, "edge")
            w.add_edges(e, origin=f"{src} (edges from {s})")
    return GraphDir.open(out)


# ---------------------------------------------------------------------- OGB raw layout
def _ogb_file(d: Path, rel: str, required: bool = True) -> Path | None:
    for cand in (d / rel, d / rel.removesuffix(".gz")):
        if cand.exists():
            return cand
    if required:
        raise ShoalInputError(
            f"OGB layout: {rel} is missing",
            path=d,
            fix="point at the dataset folder holding raw/ and split/ (e.g. ogbn_arxiv/)",
        )
    return None


def _ogb_float_blocks(path: Path, n: int) -> Iterator[np.ndarray]:
    with _open_text(path) as f:
        ncols = None
        for nums, lines in _numbered_data_lines(f, path):
            try:
                a = np.loadtxt(lines, dtype=np.float32, delimiter=",", ndmin=2, comments=None)
            except ValueError as e:
                # find the line for the message
                for ln, line in zip(nums, lines):
                    try:
                        np.loadtxt([line], dtype=np.float32, delimiter=",", ndmin=2)
                    except ValueError:
                        raise ShoalInputError(
                            f"line {ln}: cannot parse feature row ({e})",
                            path=path,
                            fix="each line must hold F comma-separated numbers",
                        ) from None
                raise ShoalInputError(f"cannot parse features: {e}", path=path) from None
            if ncols is None:
                ncols = a.shape[1]
            elif a.shape[1] != ncols:
                raise ShoalInputError(
                    f"line {nums[0]}: feature rows have {a.shape[1]} columns, earlier rows {ncols}",
                    path=path,
                    fix="every feature row must have the same number of columns",
                )
            yield a


def _ogb_read_ids(path: Path, what: str) -> np.ndarray:
    parts = [rows[:, 0] for _, rows in _text_edge_chunks(path, ncols=1, what=what)]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def _ogb_labels(path: Path, n: int) -> np.ndarray:
    y = np.full(n, -1, dtype=np.int64)
    pos = 0
    with _open_text(path) as f:
        for nums, lines in _numbered_data_lines(f, path):
            vals = np.empty(len(lines), dtype=np.float64)
            for i, (ln, t) in enumerate(zip(nums, lines)):
                t = t.split(",")[0].strip()
                try:
                    v = float(t)
                except ValueError:
                    v = None
                if v is None or (np.isfinite(v) and not v.is_integer()) or np.isinf(v):
                    raise ShoalInputError(
                        f"line {ln}: label {t!r} is not an integer",
                        path=path,
                        fix="labels must be integer classes (nan or -1 = unlabelled)",
                    )
                vals[i] = v
            if pos + len(lines) > n:
                raise ShoalInputError(
                    f"line {nums[-1]}: more label rows than num_nodes={n}",
                    path=path,
                    fix="give one label per node",
                )
            y[pos : pos + len(lines)] = np.where(np.isnan(vals), -1, vals).astype(np.int64)
            pos += len(lines)
    if pos != n:
        raise ShoalInputError(
            f"{pos} label rows but num_nodes={n}", path=path, fix="give one label per node"
        )
    return y


def import_ogb(
    src: str | os.PathLike, out: str | os.PathLike, config: ImportConfig | None = None
) -> GraphDir:
    """Import an OGB node-property dataset from its raw files, without the ``ogb`` package.

    Layout (as unpacked from the OGB zip, e.g. ``ogbn_arxiv/``)::

        raw/edge.csv.gz            one "src,dst" per line (required)
        raw/num-node-list.csv.gz   number of nodes (optional; else max id + 1)
        raw/node-feat.csv.gz       N lines of F comma-separated floats (optional)
        raw/node-label.csv.gz      N lines, one class each (nan = unlabelled) (optional)
        split/<scheme>/{train,valid,test}.csv.gz   node ids, one per line (optional)

    Everything is parsed in blocks of 256 Ki lines; only O(N) arrays (labels, split ids) are
    held. OGB stores ogbn-products' undirected edges once and ogbn-arxiv as a directed citation
    graph: pass ``undirected=True`` (``--undirected``) to add reverse edges, as OGB's own
    loaders do for products. Datasets shipped as ``.npz`` raw files (ogbn-papers100M's
    ``data.npz``) are not read by this importer: convert their ``edge_index`` to ``.npy``.
    """
    cfg = config or ImportConfig()
    d = Path(src)
    if not d.is_dir():
        raise ShoalInputError("OGB import needs the dataset folder", path=d)
    edge_path = _ogb_file(d, "raw/edge.csv.gz")
    assert edge_path is not None
    n = cfg.num_nodes
    nn_path = _ogb_file(d, "raw/num-node-list.csv.gz", required=False)
    if n is None and nn_path is not None:
        counts = _ogb_read_ids(nn_path, "node counts")
        if counts.size != 1:
            raise ShoalInputError(
                f"expected one node count (one graph), got {counts.size}",
                path=nn_path,
                fix="only single-graph (node-property) OGB datasets are supported",
            )
        n = int(counts[0])
    feat_path = _ogb_file(d, "raw/node-feat.csv.gz", required=False)
    label_path = _ogb_file(d, "raw/node-label.csv.gz", required=False)
    split_dir = None
    if (d / "split").is_dir():
        schemes = sorted(p.name for p in (d / "split").iterdir() if p.is_dir())
        if cfg.split_scheme is not None:
            if cfg.split_scheme not in schemes:
                raise ShoalInputError(
                    f"split scheme {cfg.split_scheme!r} not found (have {schemes})",
                    path=d / "split",
                    fix="pass one of the folders under split/",
                )
            split_dir = d / "split" / cfg.split_scheme
        elif len(schemes) == 1:
            split_dir = d / "split" / schemes[0]
        elif len(schemes) > 1:
            raise ShoalInputError(
                f"several split schemes {schemes}",
                path=d / "split",
                fix="choose one with --split-scheme",
            )
    _check_out_free(out, cfg)
    wcfg = ImportConfig(**{**asdict(cfg), "num_nodes": n})
    with _writer(out, wcfg, {"input": str(d), "importer": "ogb"}) as w:
        for nums, rows in _text_edge_chunks(edge_path):
            _check_ids(rows, w.num_nodes, nums, edge_path)
            w.add_edges(rows, origin=f"{edge_path} (block from line {nums[0]})")
        n = w.finish_edges()
        if feat_path is not None:
            w.write_features(_ogb_float_blocks(feat_path, n), origin=str(feat_path))
        if label_path is not None:
            w.write_labels(
                _ogb_labels(label_path, n), origin=str(label_path), num_classes=cfg.num_classes
            )
        if split_dir is not None:
            for s, fname in zip(SPLITS, ("train", "valid", "test")):
                p = _ogb_file(split_dir, f"{fname}.csv.gz", required=False)
                if p is not None:
                    w.write_split(s, _ogb_read_ids(p, "node ids"), origin=str(p))
    return GraphDir.open(out)


# ---------------------------------------------------------------------- Python objects
def _to_numpy(t: Any) -> np.ndarray:
    if t is None:
        return None  # type: ignore[return-value]
    if hasattr(t, "detach"):
        return t.detach().cpu().numpy()
    return np.asarray(t)


def from_pyg(
    data: Any, out: str | os.PathLike, config: ImportConfig | None = None, **options: Any
) -> GraphDir:
    """Write a PyG ``Data`` object (``edge_index``, optional ``x``, ``y``, ``train_mask``,
    ``val_mask``, ``test_mask``, ``num_nodes``) as a graph directory.

    The object is in memory already, so this is meant for small graphs; edges are still written
    in chunks. ``options`` are :class:`ImportConfig` fields (used when ``config`` is None).
    """
    cfg = config or ImportConfig(**options)
    ei = _to_numpy(getattr(data, "edge_index", None))
    if ei is None:
        raise ShoalInputError("the Data object has no edge_index", path="from_pyg")
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise ShoalInputError(f"edge_index has shape {ei.shape}, expected (2, E)", path="from_pyg")
    n = cfg.num_nodes
    if n is None and getattr(data, "num_nodes", None) is not None:
        n = int(data.num_nodes)
    wcfg = ImportConfig(**{**asdict(cfg), "num_nodes": n})
    with _writer(out, wcfg, {"input": "torch_geometric.data.Data", "importer": "pyg"}) as w:
        _add_edge_index(w, ei, "Data.edge_index", cfg.chunk_edges)
        w.finish_edges()
        x = _to_numpy(getattr(data, "x", None))
        if x is not None:
            w.write_features(x, origin="Data.x")
        y = _to_numpy(getattr(data, "y", None))
        if y is not None:
            w.write_labels(y, origin="Data.y", num_classes=cfg.num_classes)
        for s in SPLITS:
            m = _to_numpy(getattr(data, f"{s}_mask", None))
            if m is not None:
                w.write_split(s, m, origin=f"Data.{s}_mask")
    return GraphDir.open(out)


def from_scipy(
    matrix: Any, out: str | os.PathLike, config: ImportConfig | None = None, **options: Any
) -> GraphDir:
    """Write a square scipy sparse adjacency matrix as a graph directory.

    Entry ``(i, j)`` becomes the edge ``i -> j`` (values are ignored; explicit zeros count as
    edges). ``num_nodes`` is the matrix size. For small graphs (the matrix is in memory).
    """
    import scipy.sparse as sp

    if not sp.issparse(matrix):
        raise ShoalInputError(
            f"expected a scipy sparse matrix, got {type(matrix).__name__}", path="from_scipy"
        )
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ShoalInputError(
            f"adjacency matrix must be square, got shape {matrix.shape}", path="from_scipy"
        )
    cfg = config or ImportConfig(**options)
    coo = matrix.tocoo()
    n = cfg.num_nodes if cfg.num_nodes is not None else int(matrix.shape[0])
    wcfg = ImportConfig(**{**asdict(cfg), "num_nodes": n})
    with _writer(out, wcfg, {"input": "scipy.sparse", "importer": "scipy"}) as w:
        _add_edge_index(w, np.vstack([coo.row, coo.col]), "matrix", cfg.chunk_edges)
    return GraphDir.open(out)
