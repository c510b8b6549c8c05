"""What every importer shares: :class:`ImportConfig`, the writer it feeds, and the checks of
node ids, edge indices and split masks that name the offending input position."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shoal.data.extsort import DEFAULT_SORT_MEMORY
from shoal.data.format import GraphWriter
from shoal.data.stream import DEFAULT_CHUNK_EDGES
from shoal.data.writer import WRITE_FIELDS
from shoal.errors import ShoalInputError
from shoal.utils.featdtype import feature_dtype

__all__ = [
    "ImportConfig",
    "add_edge_index",
    "check_ids",
    "check_out_free",
    "has_all_reverse",
    "make_writer",
    "mask_to_idx",
    "with_num_nodes",
]

# ImportConfig fields left out of meta.json's provenance
_UNRECORDED = ("scratch_dir",)


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
        scratch_dir: where the external sort of ``dedup`` puts its run files, in a private
            folder removed afterwards (default: beside the output directory, in its parent;
            never the system temp dir). Not recorded in meta.json.
        extra_columns: what a text edge list's columns beyond ``src dst`` (weights,
            timestamps, as in many SNAP and Matrix Market files) do: ``"error"`` (default:
            refuse, naming the line) or ``"ignore"`` (import the first two columns only).
        feature_dtype: the stored features' dtype, a name of
            :data:`~shoal.utils.featdtype.FEATURE_DTYPES` (default None: a float16 input stays
            float16, anything else becomes float32); converted block by block as written.
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
    scratch_dir: str | os.PathLike | None = None
    extra_columns: str = "error"
    feature_dtype: str | None = None

    def __post_init__(self) -> None:
        if self.feature_dtype is not None:
            feature_dtype(self.feature_dtype)
        if self.extra_columns not in ("error", "ignore"):
            raise ShoalInputError(
                f"extra_columns must be 'error' or 'ignore', got {self.extra_columns!r}"
            )
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


def make_writer(
    out: str | os.PathLike, cfg: ImportConfig, source: dict[str, Any], *, need: int | None = None
) -> GraphWriter:
    """The :class:`GraphWriter` of an import; ``cfg`` is recorded in meta.json's ``source``
    (except where scratch files went, which says nothing about the graph). ``need``: the
    bytes the output takes at least, when the input's size says (refused up front)."""
    options = {k: v for k, v in asdict(cfg).items() if v is not None and k not in _UNRECORDED}
    return GraphWriter(
        out,
        num_nodes=cfg.num_nodes,
        symmetrize=cfg.undirected,
        **{k: getattr(cfg, k) for k in WRITE_FIELDS},
        source={**source, "options": options},
        need=need,
        feature_dtype=cfg.feature_dtype,
    )


def with_num_nodes(cfg: ImportConfig, n: int | None) -> ImportConfig:
    """A copy of ``cfg`` with ``num_nodes`` set (e.g. to the count the source stores)."""
    return ImportConfig(**{**asdict(cfg), "num_nodes": n})


def check_out_free(out: str | os.PathLike, cfg: ImportConfig) -> None:
    # fail before reading a large input when the output exists
    if Path(out).exists() and not cfg.overwrite:
        raise ShoalInputError(
            "output already exists", path=out, fix="choose another --out or pass --overwrite"
        )


def check_ids(
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


def add_edge_index(w: GraphWriter, ei: np.ndarray, origin: str, chunk: int) -> None:
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
        check_ids(e, w.num_nodes, lambda r, s=s: s + r, origin, "column")
        w.add_edges(e, origin=f"{origin} (edges from column {s})")


def has_all_reverse(ei: np.ndarray, n: int) -> bool:
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


def mask_to_idx(m: np.ndarray, n: int, field: str, origin: str) -> np.ndarray:
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
