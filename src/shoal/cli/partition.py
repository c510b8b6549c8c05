"""``shoal partition``: partition a graph directory into an assignment directory."""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

from shoal.cli.data_options import add_scratch_option
from shoal.errors import ShoalInputError
from shoal.utils.io import parse_size, write_json_output

__all__ = ["parse_options", "register"]

_EPILOG = """\
algorithms (--algo):
  streaming, O(V) memory:  spring, hdrf, dbh, greedy, 2ps-l, ldg, fennel, hash, random
  streaming, one window:   grem (holds one window of edges: 10% of |E| by default,
                           --option window=0.01 for 1%, window_per_node=1 for |V| edges)
  in-memory references:    metis, kaminpar (load the whole graph)

The default configuration (no --algo) is the best streaming one measured on the shared
graphs: grem with windows of |V| edges (--option window_per_node=1, O(V) memory) followed by
{passes} restreaming refinement passes, the closest of them to METIS's edge cut (figures:
docs/measurements.md#partitioning). With an explicit --algo, --refine-passes defaults to 0
and the algorithm's own defaults apply (grem: the paper's 10% windows).

Every result is made balanced: max/mean nodes and training nodes per part <= --balance, by a
streaming post-pass. Vertex-cut algorithms (hdrf, dbh, greedy, 2ps-l) also write edge_part.npy
and give each node the part holding most of its edges.

examples:
  shoal partition data/cora --parts 4 --out parts/cora4
  shoal partition data/cora --algo spring --parts 8 --out parts/cora8 --json -
  shoal partition data/big --algo grem --parts 16 --option window=0.01 --out parts/big16
"""


def _convert(text: str) -> Any:
    low = text.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def parse_options(items: list[str] | None, config_cls: type) -> dict[str, Any]:
    """Parse ``KEY=VALUE`` items against the fields of an algorithm's Config dataclass."""
    shared = {"num_parts", "seed", "chunk_edges", "balance", "refine_passes", "scratch_dir"}
    valid = [f.name for f in fields(config_cls) if f.name not in shared]
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise ShoalInputError(
                f"--option {item!r}: expected KEY=VALUE",
                fix=f"valid keys for this algorithm: {', '.join(valid) or '(none)'}",
            )
        key, value = item.split("=", 1)
        key = key.strip().replace("-", "_")
        if key not in valid:
            raise ShoalInputError(
                f"--option {key!r} is not an option of this algorithm",
                fix=f"valid keys: {', '.join(valid) or '(none)'}",
            )
        out[key] = _convert(value.strip())
    return out


def _table(m: dict[str, Any]) -> str:
    rows = [
        ("algorithm", m["algorithm"]),
        ("parts", m["num_parts"]),
        ("nodes / edges", f"{m['num_nodes']} / {m['num_edges']}"),
        ("edge cut", f"{m.get('edge_cut', float('nan')):.4f}"),
        ("replication factor", f"{m.get('replication_factor', float('nan')):.3f}"),
    ]
    if "vertex_cut_rf" in m:
        rows.append(("vertex-cut RF (raw)", f"{m['vertex_cut_rf']:.3f}"))
    rows += [
        ("node balance", f"{m.get('node_balance', float('nan')):.3f}"),
        ("edge balance", f"{m.get('edge_balance', float('nan')):.3f}"),
        ("train balance", f"{m.get('train_balance', float('nan')):.3f}"),
        *((f"  type {t}", f"{b:.3f}") for t, b in (m.get("type_balance") or {}).items()),
        ("refine moves", ", ".join(map(str, m.get("moved_by_refine", []))) or "-"),
        ("seconds", f"{m['seconds']:.2f}"),
    ]
    rows += [(f"  {k}", f"{v:.2f}") for k, v in m.get("seconds_per_phase", {}).items()]
    rows.append(("peak RSS", f"{m['peak_rss_bytes'] / 2**20:.1f} MiB"))
    w = max(len(r[0]) for r in rows)
    return "\n".join(f"{k:<{w}}  {v}" for k, v in rows)


def _scratch_dir(args: argparse.Namespace) -> str | None:
    """--scratch-dir, else the directory that will hold --out (None without --out: the
    partitioner then uses the directory holding GRAPH_DIR)."""
    if args.scratch_dir is not None:
        return args.scratch_dir
    if args.out is not None:
        return str(Path(args.out).resolve().parent)
    return None


def _cmd_partition(args: argparse.Namespace) -> int:
    from shoal.data.format import GraphDir
    from shoal.partition.base import REGISTRY, get_partitioner
    from shoal.partition.io import write_assignment
    from shoal.partition.run import (
        DEFAULT_ALGORITHM,
        DEFAULT_OPTIONS,
        DEFAULT_REFINE_PASSES,
        run_partition,
    )

    algo = (args.algo or DEFAULT_ALGORITHM).lower()
    if algo not in REGISTRY:
        raise ShoalInputError(
            f"unknown partitioning algorithm {args.algo!r}; valid names: {', '.join(REGISTRY)}"
        )
    passes = args.refine_passes
    if passes is None:
        passes = DEFAULT_REFINE_PASSES if args.algo is None else 0
    graph = GraphDir.open(args.graph)
    # validate --option keys against the algorithm's config before any work
    probe = get_partitioner(algo, num_parts=1)
    opts = parse_options(args.option, type(probe).Config)
    if args.algo is None:
        opts = {**DEFAULT_OPTIONS, **opts}
    cfg_kwargs: dict[str, Any] = dict(
        num_parts=args.parts, seed=args.seed, balance=args.balance, refine_passes=passes, **opts
    )
    if args.chunk is not None:
        cfg_kwargs["chunk_edges"] = parse_size(args.chunk)
    cfg_kwargs["scratch_dir"] = _scratch_dir(args)
    try:
        config = type(probe).Config(**cfg_kwargs)
    except TypeError as e:
        raise ShoalInputError(f"bad option: {e}") from None
    if args.out is not None and not args.overwrite:
        if Path(args.out).exists():
            raise ShoalInputError(
                "output already exists", path=args.out, fix="choose another --out or --overwrite"
            )
    result = run_partition(graph, algo, config)
    m = result.metrics
    if args.out is not None:
        write_assignment(
            args.out,
            result.assignment,
            graph,
            metrics=m,
            command=shlex.join(["shoal", *sys.argv[1:]]),
            overwrite=args.overwrite,
        )
        m["out"] = str(args.out)
    if args.json != "-":
        print(_table(m))
    write_json_output(args.json, m)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    from shoal.partition.run import DEFAULT_REFINE_PASSES

    p = subparsers.add_parser(
        "partition",
        help="partition a graph directory into parts (assignment directory)",
        description=(
            "Assign every node of GRAPH_DIR to one of --parts parts with a streaming "
            "partitioner (O(V) memory) or an in-memory reference, make the result balanced, "
            "optionally refine it by restreaming, write the assignment directory (node_part.npy, "
            "edge_part.npy for vertex-cut algorithms, meta.json with the metrics) and print the "
            "metrics: edge cut, replication factor after full-neighbourhood expansion, balance, "
            "seconds per phase and peak memory."
        ),
        epilog=_EPILOG.format(passes=DEFAULT_REFINE_PASSES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("graph", metavar="GRAPH_DIR", help="graph directory (shoal data import)")
    p.add_argument(
        "--algo",
        metavar="NAME",
        default=None,
        help="algorithm (default: grem with |V|-edge windows + restreaming refinement)",
    )
    p.add_argument("--parts", "-p", type=int, required=True, help="number of parts (>= 1)")
    p.add_argument("--out", "-o", help="assignment directory to write (default: metrics only)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument(
        "--chunk",
        metavar="EDGES",
        default=None,
        help="edges read per chunk, e.g. 1M or 1048576 (default 2**20)",
    )
    p.add_argument(
        "--refine-passes",
        type=int,
        default=None,
        metavar="K",
        help=f"restreaming refinement passes (default {DEFAULT_REFINE_PASSES} without --algo, "
        "else 0)",
    )
    p.add_argument(
        "--balance",
        type=float,
        default=1.10,
        help="bound on max/mean nodes and training nodes per part (default 1.10)",
    )
    p.add_argument(
        "--option",
        action="append",
        metavar="KEY=VALUE",
        help="algorithm option, repeatable (e.g. window=0.01 refine=false for grem; "
        "tau_factor=0.1 beta=1.05 for spring)",
    )
    add_scratch_option(
        p,
        "the edge->part file of vertex-cut algorithms and KaMinPar's graph file",
        "the directory that will hold --out, else the one holding GRAPH_DIR",
    )
    p.add_argument("--json", metavar="FILE", help="write the metrics as JSON ('-' = stdout)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.set_defaults(func=_cmd_partition)
