"""``shoal data ...`` sub-commands: import, synth, info, csr, split-edges."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from shoal.cli.data_link import register_split_edges
from shoal.cli.data_options import (
    add_feature_dtype_option,
    add_scratch_option,
    add_write_options,
    args_of,
    graph_summary,
    write_options,
)
from shoal.cli.data_synth import register_synth
from shoal.utils.io import parse_size, write_json_output
from shoal.utils.memory import peak_rss_bytes

__all__ = ["register"]

_F = argparse.RawDescriptionHelpFormatter


# ---------------------------------------------------------------------- import
def _cmd_import(args: argparse.Namespace) -> int:
    from shoal.data.importers import ImportConfig, import_graph

    t0 = time.perf_counter()
    cfg = ImportConfig(
        **args_of(args, "num_nodes undirected num_classes split_index split_scheme feature_dtype"),
        **write_options(args),
        extra_columns="ignore" if args.ignore_extra_columns else "error",
    )
    g = import_graph(args.src, args.out, cfg, format=args.format)
    s = graph_summary(g, t0)
    print(
        f"imported {args.src} -> {g.path}: {g.num_nodes:,} nodes, {g.num_edges:,} edges "
        f"({'directed' if g.directed else 'undirected'}), features "
        f"{'none' if g.feature_dim is None else g.feature_dim}, classes "
        f"{'none' if g.num_classes is None else g.num_classes}, splits "
        f"{g.meta.get('splits') or 'none'} in {s['seconds']:.1f}s"
    )
    write_json_output(args.json, s)
    return 0


# ---------------------------------------------------------------------- info / csr
def _cmd_info(args: argparse.Namespace) -> int:
    from shoal.data.format import GraphDir
    from shoal.data.info import format_info, graph_info

    g = GraphDir.open(args.dir, verify=args.verify)
    info = graph_info(g)
    if args.json == "-":
        print(json.dumps(info, indent=2))
    else:
        print(format_info(info))
        write_json_output(args.json, info)
    return 0


def _cmd_csr(args: argparse.Namespace) -> int:
    from shoal.data.format import GraphDir

    g = GraphDir.open(args.dir)
    mem = parse_size(args.memory)
    kinds = ("in", "out") if args.kind == "both" else (args.kind,)
    result: dict[str, Any] = {"path": str(g.path), "memory_cap_bytes": mem, "views": {}}
    for k in kinds:
        t0 = time.perf_counter()
        g.build_csr(k, memory_bytes=mem, scratch_dir=args.scratch_dir)
        dt = time.perf_counter() - t0
        result["views"][k] = {"seconds": round(dt, 3)}
        print(f"csr_{k}: {g.num_nodes:,} rows, {g.num_edges:,} entries in {dt:.1f}s")
    result["peak_rss_bytes"] = peak_rss_bytes()
    print(f"peak RSS {result['peak_rss_bytes'] / 2**20:.0f} MiB (cap {mem / 2**20:.0f} MiB)")
    write_json_output(args.json, result)
    return 0


def _cmd_flatten(args: argparse.Namespace) -> int:
    from shoal.cli.data_options import graph_summary
    from shoal.data.flatten import flatten

    t0 = time.perf_counter()
    g = flatten(args.dir, args.out, overwrite=args.overwrite, name=args.name)
    s = graph_summary(g, t0)
    print(
        f"flatten -> {g.path}: {g.num_nodes:,} nodes, {g.num_edges:,} edges, "
        f"{g.feature_dim or 0} features (types and relations dropped) in {s['seconds']:.1f}s"
    )
    write_json_output(args.json, s)
    return 0


# ---------------------------------------------------------------------- registration
def register(subparsers: argparse._SubParsersAction) -> None:
    data = subparsers.add_parser(
        "data",
        help="import, generate and inspect graph directories",
        description="Graph directories (docs/format.md): the pipeline's single input format.",
    )
    sub = data.add_subparsers(dest="data_command", metavar="SUBCOMMAND")
    data.set_defaults(func=lambda a: (data.print_help(), 2)[1])

    _register_import(sub)

    register_synth(sub)

    _register_info(sub)
    _register_csr(sub)
    register_split_edges(sub)


def _register_import(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "import",
        help="import a graph (graph.npz, text/CSV edge list, .npy, OGB raw layout)",
        formatter_class=_F,
        description="""Import SRC into the graph directory --out, streaming.

Formats (--format auto decides from the path):
  npz   graph.npz in the shared/data layout: edge_index (2, E), num_nodes, x or CSR
        x_data/x_indices/x_indptr/x_shape, y, train/val/test_mask (N,), optional
        train/val/test_masks (10, N) (pick one with --split-index)
  text  one "src dst" per line; whitespace, comma or semicolon separated; # and % comments;
        a third column (weight, timestamp) is refused with the line named, unless
        --ignore-extra-columns; .gz decompressed on the fly
  npy   an integer array (2, E) or (E, 2)
  ogb   an OGB node-property dataset folder: raw/edge.csv.gz, raw/num-node-list.csv.gz,
        raw/node-feat.csv.gz, raw/node-label.csv.gz, split/<scheme>/{train,valid,test}.csv.gz;
        or the typed layout of ogbn-mag (a typed graph, docs/format.md): raw/num-node-dict,
        raw/relations/<src>___<rel>___<dst>/edge.csv.gz, raw/node-feat/<type>/,
        raw/node-label/<type>/, split/<scheme>/<type>/ (--undirected adds rev_ relations)

Bad input (ids out of range, non-integer ids, truncated files, NaN features, wrong row
counts, overlapping splits, empty graphs) exits with code 2 and a message naming the file,
the row or field and a fix; nothing is left behind.

example: shoal data import ../shared/data/cora/graph.npz --out /tmp/cora""",
    )
    p.add_argument("src", help="input file or folder")
    p.add_argument("--out", required=True, help="graph directory to create")
    p.add_argument("--format", default="auto", choices=["auto", "npz", "text", "npy", "ogb"])
    p.add_argument("--num-nodes", type=int, help="number of nodes (default: max id + 1)")
    p.add_argument(
        "--num-classes", type=int, help="number of classes; labels are checked against it"
    )
    p.add_argument(
        "--split-index",
        type=int,
        help="which of the 10 official splits of a graph.npz (default: the single masks, else 0)",
    )
    p.add_argument("--split-scheme", help="OGB split folder under split/ (default: the only one)")
    p.add_argument(
        "--ignore-extra-columns",
        action="store_true",
        help="text edge lists: read only src and dst of lines with more columns (weights, "
        "timestamps) instead of refusing them (default: refuse with exit 2, naming the line)",
    )
    add_feature_dtype_option(p, default=None, keep="float16 input stays float16, else float32")
    add_write_options(p)
    p.set_defaults(func=_cmd_import)


def _register_info(sub: argparse._SubParsersAction) -> None:
    i = sub.add_parser(
        "info",
        help="summary: N, E, degrees (power-law indicators), features, labels, splits",
        description="Print a summary of a graph directory (one streaming pass over the edges).",
    )
    i.add_argument("dir", help="graph directory")
    i.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="FILE",
        help="JSON output: to stdout with no FILE, else written to FILE",
    )
    i.add_argument("--verify", action="store_true", help="also check every file's checksum")
    i.set_defaults(func=_cmd_info)


def _register_csr(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser(
        "csr",
        help="build the CSR views (in-edges by destination / out-edges by source)",
        description="Build csr_in/ and/or csr_out/ with a bounded-memory external sort.",
    )
    c.add_argument("dir", help="graph directory")
    c.add_argument("--kind", choices=["in", "out", "both"], default="both", help="default both")
    c.add_argument("--memory", default="256MB", help="external sort memory cap (default 256MB)")
    add_scratch_option(c, "the external sort", "inside the graph directory, beside the views")
    c.add_argument("--json", metavar="FILE", help="write a JSON summary to FILE ('-' = stdout)")
    c.set_defaults(func=_cmd_csr)
    f = sub.add_parser(
        "flatten",
        help="a typed graph as an untyped one (types and relations dropped)",
        description="""Write a typed graph directory as an untyped one: the same ids and
edges, every node type's features stacked into one features.npy (zero-padded to the widest
type; zero rows for a type without features), the target type's labels and splits. The
homogeneous baseline of a relational model, or the untyped pipeline on a typed graph.

example: shoal data flatten data/igbh --out data/igbh-flat""",
    )
    f.add_argument("dir", help="typed graph directory")
    f.add_argument("--out", required=True, help="untyped graph directory to create")
    f.add_argument("--name", help="dataset name (default: DIR's name + '-flat')")
    f.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    f.add_argument("--json", metavar="FILE", help="write a JSON summary to FILE ('-' = stdout)")
    f.set_defaults(func=_cmd_flatten)
