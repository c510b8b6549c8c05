"""The store writer's passes on a typed graph (private;
docs/store.md#typed-stores-format_version-2).

Inside each part the core nodes of one type are one range of new ids
(``type_bounds[i, t] .. type_bounds[i, t + 1]``). Pass 1 writes each in-edge as
``(new src, local dst * rin + slot)``, ``slot`` the edge's relation's rank among the relations
into the destination's type, ``rin`` the most relations into any one type; pass 2 sorts by
that key and :func:`build_typed_csr` decodes it into the row pointer, the global sources and
``edge_types.npy``; pass 3 (:func:`write_typed_features`) writes
``part_<i>/features/<type>.npy`` and, for halo rows, ``part_<i>/halo_features/<type>.npy``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shoal.data.extsort import external_sort
from shoal.data.format import GraphDir
from shoal.data.hetero import HeteroSchema
from shoal.data.layout import RELATION_FILE, type_feature_file
from shoal.data.stream import EdgeStream
from shoal.errors import ShoalInputError
from shoal.store._io import NpyAppender, gather_rows, npy_info, read_rows
from shoal.utils.diskspace import open_output_memmap
from shoal.utils.progress import progress

__all__ = ["TypedLayout", "build_typed_csr", "type_bounds", "write_typed_features"]


def type_bounds(schema: HeteroSchema, node_part: np.ndarray, p: int) -> np.ndarray:
    """``(p, T + 1)`` int64: the new-id range of each part's nodes of each type (relabelling
    in original order inside a part)."""
    off = schema.offsets
    t = len(schema.node_types)
    counts = np.zeros((p, t), np.int64)
    for k in range(t):
        counts[:, k] = np.bincount(node_part[off[k] : off[k + 1]], minlength=p)[:p]
    bounds = np.zeros((p, t + 1), np.int64)
    np.cumsum(counts, axis=1, out=bounds[:, 1:])
    starts = np.zeros(p, np.int64)
    np.cumsum(counts.sum(1)[:-1], out=starts[1:])
    return bounds + starts[:, None]


@dataclass
class TypedLayout:
    """How a typed graph's relations are encoded while the store is written.

    ``slot_of[r]``: relation ``r``'s rank among the relations into its destination type;
    ``rel_of_slot[t, s]``: the relation of slot ``s`` into type ``t`` (-1 where none);
    ``rin``: the most relations into one type."""

    schema: HeteroSchema
    relation_path: Path
    relation_dtype: np.dtype
    slot_of: np.ndarray
    rel_of_slot: np.ndarray
    rin: int
    in_dtype: np.dtype | None = None

    @classmethod
    def of(cls, g: GraphDir) -> TypedLayout:
        s = g.schema
        assert s is not None
        names = s.type_names
        dst = np.array([names.index(e.dst) for e in s.edge_types], np.int64)
        rin = max(1, int(np.bincount(dst, minlength=len(names)).max()) if len(dst) else 1)
        slot_of = np.zeros(len(dst), np.int64)
        rel_of_slot = np.full((len(names), rin), -1, np.int64)
        fill = np.zeros(len(names), np.int64)
        for r, t in enumerate(dst):  # slots in relation order: rows sorted by relation id
            slot_of[r] = fill[t]
            rel_of_slot[t, fill[t]] = r
            fill[t] += 1
        g.relations()  # checks the relation file's size
        return cls(
            s,
            g.path / g.meta.get("relation_file", RELATION_FILE),
            np.dtype(g.meta.get("relation_dtype", "uint8")),
            slot_of,
            rel_of_slot,
            rin,
        )

    def relations(self, start: int, count: int) -> np.ndarray:
        """The relations of edge rows ``[start, start + count)`` (a positioned read)."""
        it = self.relation_dtype.itemsize
        return np.fromfile(
            self.relation_path, dtype=self.relation_dtype, count=count, offset=start * it
        ).astype(np.int64)

    def prepare(self, offsets: np.ndarray, edtype: np.dtype) -> None:
        """Fix :attr:`in_dtype`, the dtype of the in-edge files: wide enough for ``local dst *
        rin + slot``; refuses a part whose keys pass the external sort's 2**32 limit."""
        widest = int(np.diff(offsets).max(initial=0)) * self.rin
        if widest > 2**32:
            raise ShoalInputError(
                f"a part of {widest // self.rin} nodes x {self.rin} relations into one type "
                "passes the external sort's 2**32 keys",
                fix="partition into more parts",
            )
        self.in_dtype = np.dtype(np.int64) if widest >= 2**31 else np.dtype(edtype)


def build_typed_csr(
    in_path: Path,
    num_edges: int,
    local_bounds: np.ndarray,
    layout: TypedLayout,
    out_dir: Path,
    *,
    edtype: np.dtype,
    sort_memory: int,
) -> None:
    """Pass 2 of one part: ``indptr.npy``, ``indices.npy`` (global new sources) and
    ``edge_types.npy`` in ``out_dir`` from the part's in-edge file of encoded keys.
    ``local_bounds``: ``(T + 1,)`` the part's type ranges in local row numbers."""
    n_i = int(local_bounds[-1])
    rin = np.int64(layout.rin)
    counts = np.zeros(n_i + 1, np.int64)
    out_dir.mkdir(parents=True, exist_ok=True)
    heads = []
    for name, dt in (("indices.npy", edtype), ("edge_types.npy", layout.relation_dtype)):
        h = open_output_memmap(out_dir / name, dt, (num_edges,))
        heads.append(h.offset)
        del h
    with open(out_dir / "indices.npy", "r+b") as fi, open(out_dir / "edge_types.npy", "r+b") as fr:
        fi.seek(heads[0])
        fr.seek(heads[1])

        def sink(primary: np.ndarray, secondary: np.ndarray) -> None:
            node, slot = np.divmod(primary, rin)
            starts = np.flatnonzero(np.r_[True, node[1:] != node[:-1]])
            counts[node[starts] + 1] += np.diff(np.r_[starts, node.size])
            t = np.searchsorted(local_bounds, node, side="right") - 1
            secondary.astype(edtype, copy=False).tofile(fi)
            layout.rel_of_slot[t, slot].astype(layout.relation_dtype).tofile(fr)

        written = external_sort(
            EdgeStream(in_path, num_edges, layout.in_dtype),
            sink,
            by="dst",
            memory_bytes=sort_memory,
            beside=out_dir,
        )
    if written != num_edges:  # pragma: no cover - defensive
        raise RuntimeError(f"typed CSR build wrote {written} of {num_edges} edges")
    np.cumsum(counts, out=counts)
    np.save(out_dir / "indptr.npy", counts)


def _scatter_type(
    src: Path,
    tmp: Path,
    name: str,
    owner: np.ndarray,
    sizes: np.ndarray,
    block_rows: int,
    bar,
) -> None:
    """``part_<i>/features/<name>.npy`` from the type's file ``src`` (rows in type-local id
    order, owned by ``owner``): appended in order, so each part's rows land in place."""
    fdtype, fshape, _ = npy_info(src)
    writers = [
        NpyAppender(tmp / f"part_{i}" / "features" / f"{name}.npy", fdtype, (int(k), fshape[1]))
        for i, k in enumerate(sizes)
    ]
    try:
        for s in range(0, int(fshape[0]), block_rows):
            x = read_rows(src, s, s + block_rows)
            own = owner[s : s + x.shape[0]]
            order = np.argsort(own, kind="stable")
            ob = np.flatnonzero(np.r_[True, own[order][1:] != own[order][:-1], True])
            for a, b in zip(ob[:-1], ob[1:]):
                writers[int(own[order[a]])].append(x[order[a:b]])
            bar.update(x.shape[0])
    finally:
        for w in writers:
            w.close()


def _gather_type_halo(
    tmp: Path, i: int, name: str, t: int, halo: np.ndarray, bounds: np.ndarray, dim: int, dtype
) -> None:
    """``part_<i>/halo_features/<name>.npy``: the rows of part ``i``'s halo nodes of type
    ``t``, in halo order, read from their owners' ``features/<name>.npy``."""
    owners = np.searchsorted(bounds[:, 0], halo, side="right") - 1
    mine = (halo >= bounds[owners, t]) & (halo < bounds[owners, t + 1])
    ids, own = halo[mine], owners[mine]
    with NpyAppender(
        tmp / f"part_{i}" / "halo_features" / f"{name}.npy", dtype, (len(ids), dim)
    ) as w:
        hb = np.flatnonzero(np.r_[True, own[1:] != own[:-1], True]) if len(ids) else [0]
        for a, b in zip(hb[:-1], hb[1:]):
            j = int(own[a])
            w.append(
                gather_rows(tmp / f"part_{j}" / "features" / f"{name}.npy", ids[a:b] - bounds[j, t])
            )


def write_typed_features(
    g: GraphDir,
    tmp: Path,
    node_part: np.ndarray,
    bounds: np.ndarray,
    halo_lists: list[np.ndarray],
    *,
    halo_features: bool,
    block_bytes: int,
    show: bool | None,
) -> dict[str, int]:
    """Pass 3 of a typed graph: each featured type's core rows per part (and halo rows with
    ``halo_features``). Returns ``{type: feature width}`` of the types with features."""
    s = g.schema
    assert s is not None
    p = bounds.shape[0]
    for i in range(p):
        (tmp / f"part_{i}" / "features").mkdir()
        if halo_features:
            (tmp / f"part_{i}" / "halo_features").mkdir()
    dims: dict[str, int] = {}
    off = s.offsets
    featured = [
        (t, nt)
        for t, nt in enumerate(s.node_types)
        if (g.path / type_feature_file(nt.name)).exists()
    ]
    total = sum(nt.count for _, nt in featured)
    bar = progress(total=total, desc="store: features", unit="row", enable=show)
    for t, nt in featured:
        src = g.path / type_feature_file(nt.name)
        fdtype, fshape, _ = npy_info(src)
        dims[nt.name] = int(fshape[1])
        rows = max(1, block_bytes // max(1, int(fshape[1]) * fdtype.itemsize))
        sizes = bounds[:, t + 1] - bounds[:, t]
        _scatter_type(src, tmp, nt.name, node_part[off[t] : off[t + 1]], sizes, rows, bar)
        if halo_features:
            for i in range(p):
                _gather_type_halo(tmp, i, nt.name, t, halo_lists[i], bounds, int(fshape[1]), fdtype)
    bar.close()
    return dims
