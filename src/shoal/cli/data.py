"""``shoal data ...`` sub-commands: import, synth, info, csr, split-edges."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from shoal.cli.data_link import register_split_edges
from shoal.utils.io import parse_size, write_json_atomic
from shoal.utils.memory import peak_rss_bytes

__all__ = ["register"]

_F = argparse.RawDescriptionHelpFormatter


def _emit_json(obj: dict[str, Any], dest: str | None) -> None:
    if dest is None:
        return
    if dest == "-":
        print(json.dumps(obj, indent=2))
    else:
        write_json_atomic(dest, obj)


def _summary(g, t0: float) -> dict[str, Any]:
    return {
        "path": str(g.path),
        "num_nodes": g.num_nodes,
        "num_edges": g.num_edges,
        "directed": g.directed,
        "feature_dim": g.feature_dim,
        "num_classes": g.num_classes,
        "splits": g.meta.get("splits", {}),
        "seconds": round(time.perf_counter() - t0, 3),
        "peak_rss_bytes": peak_rss_bytes(),
    }


def _add_write_options(p: argparse.ArgumentParser, *, undirected: bool = True) -> None:
    if undirected:
        p.add_argument(
            "--undirected",
            action="store_true",
            help="add the reverse of every edge (stored edges double; default: as given)",
        )
    p.add_argument(
        "--dedup", action="store_true", help="drop repeated (src, dst) pairs (external sort)"
    )
    p.add_argument("--drop-self-loops", action="store_true", help="drop (v, v) edges")
    p.add_argument(
        "--sort-memory",
        default="256MiB",
        help="memory cap of the external sort used by --dedup (default 256MiB)",
    )
    _add_scratch_option(p, "the external sort of --dedup", "beside DIR (in its parent folder)")
    p.add_argument("--name", help="dataset name stored in meta.json (default: DIR's name)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing DIR")
    p.add_argument("--json", metavar="FILE", help="write a JSON summary to FILE ('-' = stdout)")


def _add_scratch_option(p: argparse.ArgumentParser, what: str, default: str) -> None:
    p.add_argument(
        "--scratch-dir",
        metavar="DIR",
        help=f"folder for the temporary run files of {what}, in a private subfolder removed "
        f"afterwards (default: {default}; never the system temp dir, often RAM-backed)",
    )


# ---------------------------------------------------------------------- import
def _cmd_import(args: argparse.Namespace) -> int:
    from shoal.data.importers import ImportConfig, import_graph

    t0 = time.perf_counter()
    cfg = ImportConfig(
        num_nodes=args.num_nodes,
        undirected=args.undirected,
        dedup=args.dedup,
        drop_self_loops=args.drop_self_loops,
        num_classes=args.num_classes,
        split_index=args.split_index,
        split_scheme=args.split_scheme,
        name=args.name,
        overwrite=args.overwrite,
        sort_memory=parse_size(args.sort_memory),
        scratch_dir=args.scratch_dir,
        extra_columns="ignore" if args.ignore_extra_columns else "error",
    )
    g = import_graph(args.src, args.out, cfg, format=args.format)
    s = _summary(g, t0)
    print(
        f"imported {args.src} -> {g.path}: {g.num_nodes:,} nodes, {g.num_edges:,} edges "
        f"({'directed' if g.directed else 'undirected'}), features "
        f"{'none' if g.feature_dim is None else g.feature_dim}, classes "
        f"{'none' if g.num_classes is None else g.num_classes}, splits "
        f"{g.meta.get('splits') or 'none'} in {s['seconds']:.1f}s"
    )
    _emit_json(s, args.json)
    return 0


# ---------------------------------------------------------------------- synth
def _cmd_synth_rmat(args: argparse.Namespace) -> int:
    from shoal.data.synth import RMATConfig, generate_rmat

    t0 = time.perf_counter()
    a, b, c, d = args.abcd
    cfg = RMATConfig(
        nodes=args.nodes,
        edges=args.edges,
        a=a,
        b=b,
        c=c,
        d=d,
        seed=args.seed,
        scramble=not args.no_scramble,
        features=args.features,
        classes=args.classes,
        undirected=args.undirected,
        dedup=args.dedup,
        drop_self_loops=args.drop_self_loops,
        sort_memory=parse_size(args.sort_memory),
        scratch_dir=args.scratch_dir,
        name=args.name,
        overwrite=args.overwrite,
    )
    g = generate_rmat(args.out, cfg)
    s = _summary(g, t0)
    print(
        f"rmat -> {g.path}: {g.num_nodes:,} nodes, {g.num_edges:,} edges (scale {cfg.scale}, "
        f"a,b,c,d = {a},{b},{c},{d}, seed {cfg.seed}) in {s['seconds']:.1f}s, "
        f"peak RSS {s['peak_rss_bytes'] / 2**20:.0f} MiB"
    )
    _emit_json(s, args.json)
    return 0


def _cmd_synth_dcsbm(args: argparse.Namespace) -> int:
    from shoal.data.synth import DCSBMConfig, generate_dcsbm

    t0 = time.perf_counter()
    cfg = DCSBMConfig(
        nodes=args.nodes,
        edges=args.edges,
        classes=args.classes,
        features=args.features,
        homophily=args.homophily,
        feature_signal=args.feature_signal,
        degree_exponent=args.degree_exponent,
        train_frac=args.train_frac,
        val_frac=args.val_frac,
        seed=args.seed,
        directed=args.directed,
        dedup=args.dedup,
        drop_self_loops=args.drop_self_loops,
        sort_memory=parse_size(args.sort_memory),
        scratch_dir=args.scratch_dir,
        name=args.name,
        overwrite=args.overwrite,
    )
    g = generate_dcsbm(args.out, cfg)
    s = _summary(g, t0)
    print(
        f"dcsbm -> {g.path}: {g.num_nodes:,} nodes, {g.num_edges:,} edges, {cfg.classes} "
        f"classes, {cfg.features} features, homophily {cfg.homophily}, seed {cfg.seed} "
        f"in {s['seconds']:.1f}s"
    )
    _emit_json(s, args.json)
    return 0


def _cmd_synth_road(args: argparse.Namespace) -> int:
    from shoal.data.synth import RoadConfig, generate_road

    t0 = time.perf_counter()
    cfg = RoadConfig(
        width=args.width,
        height=args.height,
        keep=args.keep,
        shortcuts=args.shortcuts,
        reach=args.reach,
        seed=args.seed,
        scramble=not args.no_scramble,
        dedup=args.dedup,
        drop_self_loops=args.drop_self_loops,
        sort_memory=parse_size(args.sort_memory),
        scratch_dir=args.scratch_dir,
        name=args.name,
        overwrite=args.overwrite,
    )
    g = generate_road(args.out, cfg)
    s = _summary(g, t0)
    print(
        f"road -> {g.path}: {g.num_nodes:,} nodes, {g.num_edges:,} edges ({cfg.width} x "
        f"{cfg.height} lattice, keep {cfg.keep}, shortcuts {cfg.shortcuts}, seed {cfg.seed}) "
        f"in {s['seconds']:.1f}s"
    )
    _emit_json(s, args.json)
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
        _emit_json(info, args.json)
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
    _emit_json(result, args.json)
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

    synth = sub.add_parser("synth", help="generate a synthetic graph (rmat, dcsbm, road)")
    ssub = synth.add_subparsers(dest="synth_command", metavar="GENERATOR")
    synth.set_defaults(func=lambda a: (synth.print_help(), 2)[1])
    _register_rmat(ssub)
    _register_dcsbm(ssub)
    _register_road(ssub)

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
        raw/node-feat.csv.gz, raw/node-label.csv.gz, split/<scheme>/{train,valid,test}.csv.gz

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
    _add_write_options(p)
    p.set_defaults(func=_cmd_import)


def _register_rmat(ssub: argparse._SubParsersAction) -> None:
    r = ssub.add_parser(
        "rmat",
        help="R-MAT / Kronecker power-law graph (Graph500 parameters)",
        formatter_class=_F,
        description="""R-MAT power-law graph (Chakrabarti et al., SDM 2004), Graph500 defaults
a,b,c,d = 0.57,0.19,0.19,0.05, vertex ids scrambled by a seeded permutation. Streams edges
to disk in blocks of 1 Mi edges: memory is O(N) + O(block), whatever --edges.

example: shoal data synth rmat --nodes 1000000 --edges 20000000 --out /tmp/r""",
    )
    r.add_argument("--nodes", type=int, required=True, help="number of nodes N")
    r.add_argument("--edges", type=int, required=True, help="number of generated edges")
    r.add_argument("--out", required=True, help="graph directory to create")
    r.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    r.add_argument(
        "--abcd",
        type=float,
        nargs=4,
        default=(0.57, 0.19, 0.19, 0.05),
        metavar=("A", "B", "C", "D"),
        help="quadrant probabilities (default 0.57 0.19 0.19 0.05)",
    )
    r.add_argument("--no-scramble", action="store_true", help="keep the Kronecker vertex order")
    r.add_argument("--features", type=int, default=0, help="feature dimension (default 0)")
    r.add_argument(
        "--classes", type=int, default=0, help="random class labels + splits (default 0: none)"
    )
    _add_write_options(r)
    r.set_defaults(func=_cmd_synth_rmat)


#: RoadConfig's defaults (keep, shortcuts, reach), repeated so that building the parser does
#: not import the generators; tests/cli checks that they agree.
ROAD_DEFAULTS = (0.75, 0.05, 8)


def _register_road(ssub: argparse._SubParsersAction) -> None:
    keep, shortcuts, reach = ROAD_DEFAULTS
    r = ssub.add_parser(
        "road",
        help="road-like lattice: a 2-D grid with missing streets and short shortcuts",
        formatter_class=_F,
        description="""Road-like graph: the cells of a WIDTH x HEIGHT grid, each lattice edge kept
with probability --keep (mean degree about 4 x keep; road networks 2.5-3), and with
probability --shortcuts a node gets one extra edge to a cell at most --reach rows and
columns away. Nearly planar, large diameter, no hubs: the family where streaming
partitioners differ most from METIS. Undirected: both directions are stored.

example: shoal data synth road --width 1000 --height 1000 --out /tmp/road""",
    )
    r.add_argument("--width", type=int, required=True, help="grid width (columns)")
    r.add_argument("--height", type=int, required=True, help="grid height (rows)")
    r.add_argument("--out", required=True, help="graph directory to create")
    r.add_argument("--keep", type=float, default=keep, help=f"P(lattice edge) (default {keep})")
    r.add_argument(
        "--shortcuts",
        type=float,
        default=shortcuts,
        help=f"P(a node gets a shortcut) (default {shortcuts})",
    )
    r.add_argument(
        "--reach", type=int, default=reach, help=f"shortcut reach in cells (default {reach})"
    )
    r.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    r.add_argument("--no-scramble", action="store_true", help="keep the row-major node order")
    _add_write_options(r, undirected=False)
    r.set_defaults(func=_cmd_synth_road)


def _register_dcsbm(ssub: argparse._SubParsersAction) -> None:
    s = ssub.add_parser(
        "dcsbm",
        help="degree-corrected SBM with class-correlated features, labels and splits",
        formatter_class=_F,
        description="""Degree-corrected stochastic block model (Karrer & Newman 2011): classes
are the blocks, an edge stays in its source's class with probability --homophily, degrees
follow a power law (--degree-exponent), features are class centroid + unit Gaussian noise
(--feature-signal sets the centroid scale). Undirected: both directions are stored (2 x
--edges rows). The defaults make a 2-layer GNN beat an MLP by a wide margin (docs/format.md).

example: shoal data synth dcsbm --nodes 100000 --edges 1000000 --out /tmp/sbm""",
    )
    s.add_argument("--nodes", type=int, required=True, help="number of nodes N")
    s.add_argument("--edges", type=int, required=True, help="number of undirected edges")
    s.add_argument("--out", required=True, help="graph directory to create")
    s.add_argument("--classes", type=int, default=10, help="number of classes (default 10)")
    s.add_argument("--features", type=int, default=64, help="feature dimension (default 64)")
    s.add_argument(
        "--homophily", type=float, default=0.5, help="P(edge inside its class) (default 0.5)"
    )
    s.add_argument(
        "--feature-signal", type=float, default=1.5, help="class-centroid scale (default 1.5)"
    )
    s.add_argument(
        "--degree-exponent", type=float, default=2.5, help="power-law exponent (default 2.5)"
    )
    s.add_argument("--train-frac", type=float, default=0.1, help="train fraction (default 0.1)")
    s.add_argument("--val-frac", type=float, default=0.1, help="val fraction (default 0.1)")
    s.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    s.add_argument("--directed", action="store_true", help="store each edge once")
    _add_write_options(s, undirected=False)
    s.set_defaults(func=_cmd_synth_dcsbm)


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
    _add_scratch_option(c, "the external sort", "inside the graph directory, beside the views")
    c.add_argument("--json", metavar="FILE", help="write a JSON summary to FILE ('-' = stdout)")
    c.set_defaults(func=_cmd_csr)
