"""``shoal data synth``: synthetic graphs streamed to disk (R-MAT, degree-corrected SBM, a
road-like lattice, a typed IGBH-shaped academic graph; :mod:`shoal.data.synth`)."""

from __future__ import annotations

import argparse
import time

from shoal.cli.data_options import (
    add_feature_dtype_option,
    add_write_options,
    args_of,
    graph_summary,
    write_options,
)
from shoal.utils.io import write_json_output

__all__ = ["ROAD_DEFAULTS", "register_synth"]

_F = argparse.RawDescriptionHelpFormatter


def _report(args: argparse.Namespace, g, t0: float, what: str, rss: bool = False, **extra) -> int:
    """Print ``GENERATOR -> DIR: N nodes, E edges`` + ``what`` + the seconds (and the peak
    RSS), write the ``--json`` summary (with ``extra``); exit code 0."""
    s = {**graph_summary(g, t0), **extra}
    peak = f", peak RSS {s['peak_rss_bytes'] / 2**20:.0f} MiB" if rss else ""
    print(f"{args.synth_command} -> {g.path}: {what} in {s['seconds']:.1f}s{peak}")
    write_json_output(args.json, s)
    return 0


def _cmd_synth_rmat(args: argparse.Namespace) -> int:
    from shoal.data.synth import RMATConfig, generate_rmat

    t0 = time.perf_counter()
    a, b, c, d = args.abcd
    cfg = RMATConfig(
        **args_of(args, "nodes edges seed features feature_dtype classes undirected"),
        **dict(zip("abcd", args.abcd, strict=True)),
        scramble=not args.no_scramble,
        **write_options(args),
    )
    g = generate_rmat(args.out, cfg)
    what = f"{g.num_nodes:,} nodes, {g.num_edges:,} edges (scale {cfg.scale}, "
    return _report(args, g, t0, f"{what}a,b,c,d = {a},{b},{c},{d}, seed {cfg.seed})", rss=True)


def _cmd_synth_dcsbm(args: argparse.Namespace) -> int:
    from shoal.data.synth import DCSBMConfig, generate_dcsbm

    t0 = time.perf_counter()
    names = "nodes edges classes features homophily feature_signal degree_exponent train_frac"
    cfg = DCSBMConfig(
        **args_of(args, f"{names} val_frac test_frac feature_dtype seed directed"),
        **write_options(args),
    )
    g = generate_dcsbm(args.out, cfg)
    what = f"{g.num_nodes:,} nodes, {g.num_edges:,} edges, {cfg.classes} classes, "
    return _report(
        args, g, t0, f"{what}{cfg.features} features, homophily {cfg.homophily}, seed {cfg.seed}"
    )


def _cmd_synth_road(args: argparse.Namespace) -> int:
    from shoal.data.synth import RoadConfig, generate_road

    t0 = time.perf_counter()
    cfg = RoadConfig(
        **args_of(args, "width height keep shortcuts reach seed"),
        scramble=not args.no_scramble,
        **write_options(args),
    )
    g = generate_road(args.out, cfg)
    what = f"{g.num_nodes:,} nodes, {g.num_edges:,} edges ({cfg.width} x {cfg.height} lattice, "
    return _report(
        args, g, t0, f"{what}keep {cfg.keep}, shortcuts {cfg.shortcuts}, seed {cfg.seed})"
    )


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
    _dtype_option(r)
    r.add_argument(
        "--classes", type=int, default=0, help="random class labels + splits (default 0: none)"
    )
    add_write_options(r)
    r.set_defaults(func=_cmd_synth_rmat)


#: RoadConfig's defaults (keep, shortcuts, reach), repeated so that building the parser does
#: not import the generators; tests/data/test_synth_road.py checks that they agree.
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
    add_write_options(r, undirected=False)
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
    _dtype_option(s)
    s.add_argument(
        "--homophily", type=float, default=0.5, help="P(edge inside its class) (default 0.5)"
    )
    s.add_argument(
        "--feature-signal", type=float, default=1.5, help="class-centroid scale (default 1.5)"
    )
    s.add_argument(
        "--degree-exponent", type=float, default=2.5, help="power-law exponent (default 2.5)"
    )
    _split_options(s, train=0.1, val=0.1)
    s.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    s.add_argument("--directed", action="store_true", help="store each edge once")
    add_write_options(s, undirected=False)
    s.set_defaults(func=_cmd_synth_dcsbm)


def _dtype_option(s: argparse.ArgumentParser) -> None:
    add_feature_dtype_option(s, default="float32", keep="float32")


def _split_options(s: argparse.ArgumentParser, *, train: float, val: float) -> None:
    s.add_argument(
        "--train-frac", type=float, default=train, help=f"train fraction (default {train})"
    )
    s.add_argument("--val-frac", type=float, default=val, help=f"val fraction (default {val})")
    s.add_argument(
        "--test-frac",
        type=float,
        default=None,
        help="test fraction (default: every node in neither train nor val; with a fraction, "
        "the rest are in no split, as most of ogbn-papers100M's nodes)",
    )


def _pairs(values: list[str] | None, what: str, convert=float) -> dict:
    """``NAME=VALUE`` pairs of a repeated option as a dict (exit 2 on a malformed one)."""
    from shoal.errors import ShoalInputError

    out = {}
    for v in values or []:
        name, sep, val = v.partition("=")
        try:
            out[name] = convert(val)
        except ValueError:
            sep = ""
        if not sep or not name:
            raise ShoalInputError(
                f"--{what} {v!r} is not NAME=VALUE", fix=f"e.g. --{what} cites=0.5"
            )
    return out


def _cmd_synth_igbh(args: argparse.Namespace) -> int:
    from shoal.data.synth.igbh import IGBHConfig, generate_igbh

    t0 = time.perf_counter()
    names = "size scale classes features degree_exponent train_frac val_frac test_frac seed name"
    cfg = IGBHConfig(
        **args_of(args, f"{names} feature_dtype overwrite"),
        degree=_pairs(args.degree, "degree"),
        homophily=_pairs(args.homophily, "homophily"),
        signal=_pairs(args.signal, "signal"),
        featureless=tuple(args.featureless or ()),
        add_reverse=not args.no_reverse,
    )
    g = generate_igbh(args.out, cfg)
    nts, ets = g.schema.node_types, g.schema.edge_types
    types = ", ".join(f"{t.count:,} {t.name}" for t in nts)
    what = f"{g.num_nodes:,} nodes ({types}), {g.num_edges:,} edges in {len(ets)} relations, "
    return _report(
        args,
        g,
        t0,
        f"{what}{cfg.classes} classes, {cfg.features} features, seed {cfg.seed}",
        node_types={t.name: t.count for t in nts},
        edge_types={f"{e.src}__{e.relation}__{e.dst}": e.count for e in ets},
    )


def _register_igbh(ssub: argparse._SubParsersAction) -> None:
    s = ssub.add_parser(
        "igbh",
        help="typed academic graph shaped like IGBH (6 node types, 6 relations + reverses)",
        formatter_class=_F,
        description="""A typed graph shaped like IGBH, the MLPerf GNN benchmark's dataset:
node types paper, author, institute, fos, journal, conference with IGBH's counts (--size)
times --scale; relations cites, written_by, affiliated_to, topic, published, venue with
power-law degrees, and their reverses (rev_<relation>; cites made symmetric), as the MLPerf
reference builds them. Papers carry the labels. Every node has a latent class; an edge
keeps its source's class (a fixed permutation of it for topic, published and venue) with
probability --homophily; features are class centroid x --signal + unit noise, weak on the
papers: a relational model beats an MLP and a homogeneous GNN that ignores the types.

example: shoal data synth igbh --size tiny --scale 0.1 --out /tmp/igbh""",
    )
    s.add_argument("--out", required=True, help="graph directory to create")
    s.add_argument(
        "--size",
        default="tiny",
        help="IGBH node counts to scale: tiny, small, medium (default tiny)",
    )
    s.add_argument("--scale", type=float, default=1.0, help="node-count multiplier (default 1)")
    s.add_argument("--classes", type=int, default=19, help="paper classes (default 19)")
    s.add_argument(
        "--features", type=int, default=128, help="feature width of every type (default 128)"
    )
    _dtype_option(s)
    for opt, what in (
        ("degree", "mean edges per source node of a relation, e.g. cites=6"),
        ("homophily", "P(an edge keeps its source's class) per relation, e.g. topic=0.6"),
        ("signal", "class-centroid scale of a node type's features, e.g. paper=1.0"),
    ):
        s.add_argument(
            f"--{opt}",
            action="append",
            metavar="NAME=VALUE",
            help=f"{what} (repeatable; default: see `shoal.data.synth.igbh`)",
        )
    s.add_argument(
        "--featureless",
        action="append",
        metavar="TYPE",
        help="store this node type without features (repeatable; default none)",
    )
    s.add_argument("--no-reverse", action="store_true", help="store the relations one way only")
    s.add_argument(
        "--degree-exponent", type=float, default=2.5, help="power-law exponent (default 2.5)"
    )
    _split_options(s, train=0.6, val=0.2)
    s.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    s.add_argument("--name", help="dataset name stored in meta.json (default: DIR's name)")
    s.add_argument("--overwrite", action="store_true", help="replace an existing DIR")
    s.add_argument("--json", metavar="FILE", help="write a JSON summary to FILE ('-' = stdout)")
    s.set_defaults(func=_cmd_synth_igbh)


def register_synth(sub: argparse._SubParsersAction) -> None:
    """``shoal data synth GENERATOR``: one sub-command per generator."""
    synth = sub.add_parser("synth", help="generate a synthetic graph (rmat, dcsbm, road, igbh)")
    ssub = synth.add_subparsers(dest="synth_command", metavar="GENERATOR")
    synth.set_defaults(func=lambda a: (synth.print_help(), 2)[1])
    _register_rmat(ssub)
    _register_dcsbm(ssub)
    _register_road(ssub)
    _register_igbh(ssub)
