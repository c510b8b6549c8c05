"""Importer of the raw layout of OGB's heterogeneous node-property datasets (ogbn-mag),
without the ``ogb`` package (:func:`import_ogb_hetero`)."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

from shoal.data.format import SPLITS, GraphDir
from shoal.data.hetero import HeteroSchema
from shoal.data.hetero_writer import HeteroGraphWriter
from shoal.data.importers.common import ImportConfig, check_out_free
from shoal.data.importers.ogb import (
    _ogb_file,
    _ogb_float_blocks,
    _ogb_labels,
    _ogb_read_ids,
    _ogb_split_dir,
)
from shoal.data.importers.text import open_text, text_edge_chunks
from shoal.errors import ShoalInputError

__all__ = ["import_ogb_hetero", "is_ogb_hetero"]

#: ``raw/relations/<src>___<relation>___<dst>/``: OGB's folder of a canonical edge type
SEP = "___"


def is_ogb_hetero(src: str | os.PathLike) -> bool:
    """Whether ``src`` is an OGB dataset folder of the heterogeneous layout."""
    return (Path(src) / "raw" / "relations").is_dir()


def _node_counts(d: Path) -> dict[str, int]:
    """``raw/num-node-dict.csv(.gz)``: a header line of type names, a line of counts."""
    path = _ogb_file(d, "raw/num-node-dict.csv.gz")
    with open_text(path) as f:
        lines = [ln.strip() for ln in f if ln.strip()]
    if len(lines) != 2:
        raise ShoalInputError(
            f"expected 2 lines (type names, node counts), got {len(lines)}",
            path=path,
            fix="the file OGB ships has a header of node types and one line of counts",
        )
    names = [t.strip() for t in lines[0].split(",")]
    try:
        counts = [int(float(c)) for c in lines[1].split(",")]
    except ValueError:
        raise ShoalInputError(
            f"line 2: node counts {lines[1]!r} are not integers", path=path
        ) from None
    if len(names) != len(counts):
        raise ShoalInputError(
            f"{len(names)} node types on line 1 but {len(counts)} counts on line 2", path=path
        )
    return dict(zip(names, counts, strict=True))


def _relations(d: Path, counts: dict[str, int]) -> list[tuple[tuple[str, str, str], Path]]:
    """Every ``raw/relations/<src>___<rel>___<dst>/`` folder, sorted by name."""
    out = []
    for p in sorted((d / "raw" / "relations").iterdir()):
        if not p.is_dir():
            continue
        key = tuple(p.name.split(SEP))
        if len(key) != 3:
            raise ShoalInputError(
                f"relation folder {p.name!r} is not <src>___<relation>___<dst>", path=p
            )
        for end in (key[0], key[2]):
            if end not in counts:
                raise ShoalInputError(
                    f"relation {p.name} names node type {end!r}, which num-node-dict lacks "
                    f"(it has {', '.join(counts)})",
                    path=p,
                    fix="check the relation folder's name and raw/num-node-dict.csv.gz",
                )
        out.append((key, p))
    if not out:
        raise ShoalInputError("raw/relations has no relation folders", path=d / "raw" / "relations")
    return out


def import_ogb_hetero(
    src: str | os.PathLike,
    out: str | os.PathLike,
    config: ImportConfig | None = None,
    *,
    target: str | None = None,
    add_reverse: bool = False,
) -> GraphDir:
    """Import an OGB heterogeneous node-property dataset from its raw files (the layout
    ogbn-mag ships; :mod:`shoal.data.hetero` for the typed graph directory it writes)::

        raw/num-node-dict.csv.gz                        node types, then their counts
        raw/relations/<src>___<rel>___<dst>/edge.csv.gz "src,dst" per line, type-local ids
        raw/relations/<...>/num-edge-list.csv.gz        the relation's edge count (checked)
        raw/node-feat/<type>/node-feat.csv.gz           features of a type (optional)
        raw/node-label/<type>/node-label.csv.gz         labels of the target type (optional)
        split/<scheme>/<type>/{train,valid,test}.csv.gz target-type ids (optional)

    ``target``: the labelled type (default: the one with ``node-label``, else the first
    with a split). ``add_reverse`` (``--undirected``) stores ``rev_<relation>`` relations
    (paper cites paper made symmetric), as PyG's ``ToUndirected`` does for ogbn-mag.
    Everything is parsed in blocks of 256 Ki lines; only O(N) labels and split ids are held.
    Bad input (an id beyond its type's count, a relation naming an unknown type, feature rows
    other than the type's count) exits 2 naming the file and line.
    """
    cfg = config or ImportConfig()
    d = Path(src)
    if not is_ogb_hetero(d):
        raise ShoalInputError(
            "not an OGB heterogeneous dataset: raw/relations/ is missing",
            path=d,
            fix="point at the dataset folder holding raw/ and split/ (e.g. ogbn_mag/)",
        )
    if cfg.dedup:
        raise ShoalInputError("--dedup is not available for typed graphs yet", path=d)
    counts = _node_counts(d)
    rels = _relations(d, counts)
    labelled = [t for t in counts if _ogb_file(d, f"raw/node-label/{t}/node-label.csv.gz", False)]
    split_dir = _ogb_split_dir(d, cfg.split_scheme)
    split_types = sorted(p.name for p in split_dir.iterdir()) if split_dir else []
    target = target or (labelled[0] if labelled else split_types[0] if split_types else None)
    schema = HeteroSchema.of(counts, [k for k, _ in rels], target=target)
    check_out_free(out, cfg)
    options = {k: v for k, v in asdict(cfg).items() if v is not None and k != "scratch_dir"}
    source = {"input": str(d), "importer": "ogb-hetero", "options": options}
    with HeteroGraphWriter(
        out,
        schema,
        add_reverse=add_reverse or cfg.undirected,
        drop_self_loops=cfg.drop_self_loops,
        name=cfg.name,
        source=source,
        overwrite=cfg.overwrite,
        scratch_dir=cfg.scratch_dir,
    ) as w:
        for key, folder in rels:
            edge_path = _ogb_file(folder, "edge.csv.gz")
            got = 0
            for nums, rows in text_edge_chunks(edge_path):
                w.add_relation(key, rows, origin=f"{edge_path} (block from line {nums[0]})")
                got += len(rows)
            _check_count(folder, got)
        w.finish_edges()
        for t, n in counts.items():
            fp = _ogb_file(d, f"raw/node-feat/{t}/node-feat.csv.gz", required=False)
            if fp is not None:
                w.write_node_features(
                    t, _ogb_float_blocks(fp, n), origin=str(fp), dtype=cfg.feature_dtype
                )
        if target is not None:
            lp = _ogb_file(d, f"raw/node-label/{target}/node-label.csv.gz", required=False)
            if lp is not None:
                y = _ogb_labels(lp, counts[target])
                w.write_labels(y, origin=str(lp), num_classes=cfg.num_classes)
            if split_dir is not None and (split_dir / target).is_dir():
                for s, fname in zip(SPLITS, ("train", "valid", "test"), strict=True):
                    p = _ogb_file(split_dir / target, f"{fname}.csv.gz", required=False)
                    if p is not None:
                        w.write_split(s, _ogb_read_ids(p, "node ids"), origin=str(p))
    return GraphDir.open(out)


def _check_count(folder: Path, got: int) -> None:
    """The relation's ``num-edge-list.csv(.gz)``, when present, must match the rows read."""
    p = _ogb_file(folder, "num-edge-list.csv.gz", required=False)
    if p is None:
        return
    want = _ogb_read_ids(p, "edge count")
    if want.size != 1 or int(want[0]) != got:
        raise ShoalInputError(
            f"num-edge-list says {want.tolist()} edges, edge.csv has {got} rows",
            path=p,
            fix="the relation's files are truncated or do not belong together",
        )
