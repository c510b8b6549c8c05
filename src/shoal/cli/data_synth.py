"""``shoal data synth``: synthetic graphs streamed to disk (R-MAT, degree-corrected SBM, a
road-like lattice; :mod:`shoal.data.synth`)."""

from __future__ import annotations

import argparse
import time

from shoal.cli.data_options import add_write_options, graph_summary
from shoal.utils.io import parse_size, write_json_output

__all__ = ["ROAD_DEFAULTS", "register_synth"]

_F = argparse.RawDescriptionHelpFormatter


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
    s = graph_summary(g, t0)
    print(
        f"rmat -> {g.path}: {g.num_nodes:,} nodes, {g.num_edges:,} edges (scale {cfg.scale}, "
        f"a,b,c,d = {a},{b},{c},{d}, seed {cfg.seed}) in {s['seconds']:.1f}s, "
        f"peak RSS {s['peak_rss_bytes'] / 2**20:.0f} MiB"
    )
    write_json_output(args.json, s)
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
    s = graph_summary(g, t0)
    print(
        f"dcsbm -> {g.path}: {g.num_nodes:,} nodes, {g.num_edges:,} edges, {cfg.classes} "
        f"classes, {cfg.features} features, homophily {cfg.homophily}, seed {cfg.seed} "
        f"in {s['seconds']:.1f}s"
    )
    write_json_output(args.json, s)
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
    s = graph_summary(g, t0)
    print(
        f"road -> {g.path}: {g.num_nodes:,} nodes, {g.num_edges:,} edges ({cfg.width} x "
        f"{cfg.height} lattice, keep {cfg.keep}, shortcuts {cfg.shortcuts}, seed {cfg.seed}) "
        f"in {s['seconds']:.1f}s"
    )
    write_json_output(args.json, s)
    return 0


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
    add_write_options(s, undirected=False)
    s.set_defaults(func=_cmd_synth_dcsbm)


def register_synth(sub: argparse._SubParsersAction) -> None:
    """``shoal data synth GENERATOR``: one sub-command per generator."""
    synth = sub.add_parser("synth", help="generate a synthetic graph (rmat, dcsbm, road)")
    ssub = synth.add_subparsers(dest="synth_command", metavar="GENERATOR")
    synth.set_defaults(func=lambda a: (synth.print_help(), 2)[1])
    _register_rmat(ssub)
    _register_dcsbm(ssub)
    _register_road(ssub)
