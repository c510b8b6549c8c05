"""Sub-commands ``shoal store build``, ``shoal inspect`` and ``shoal verify``."""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from shoal.cli._common import human
from shoal.cli.data_options import add_feature_dtype_option, add_scratch_option, args_of
from shoal.utils.io import parse_size, write_json_output

__all__ = ["register"]

_FMT = argparse.RawDescriptionHelpFormatter


# ---------------------------------------------------------------------------- handlers
def _build(args: argparse.Namespace) -> int:
    from shoal.store.writer import Config, build_store

    cfg = Config(
        **args_of(args, "halo_features overwrite chunk_edges scratch_dir node_order feature_dtype"),
        sort_memory=parse_size(args.sort_memory),
        command="shoal " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
    )
    res = build_store(args.graph, args.assignment, args.out, config=cfg)
    print(
        f"store {res['store']}: {res['num_parts']} parts, {res['num_nodes']} nodes, "
        f"{res['num_edges']} edges, {human(res['bytes'])}; RF "
        f"{res['metrics']['replication_factor']:.3f}, edge cut {res['metrics']['edge_cut']:.3f}"
    )
    write_json_output(args.json, res)
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from shoal.store.verify import inspect_store

    rep = inspect_store(args.store)
    if args.json == "-":
        print(json.dumps(rep, indent=2))
        return 0
    print(
        f"{rep['store']}: {rep['num_parts']} parts, {rep['num_nodes']} nodes, "
        f"{rep['num_edges']} edges, {human(rep['bytes'])}, partitioned by "
        f"{rep['partition']['algorithm']}"
    )
    print(f"replication factor {rep['replication_factor']:.4f}, edge cut {rep['edge_cut']:.4f}")
    cols = ("part", "nodes", "halo", "edges", "train", "val", "test", "bytes")
    print("  ".join(f"{c:>10}" for c in cols))
    for row in rep["parts"]:
        vals = [str(row[c]) if c != "bytes" else human(row[c]) for c in cols]
        print("  ".join(f"{v:>10}" for v in vals))
    if rep.get("node_types"):
        print(f"{len(rep['node_types'])} node types (nodes per part), target {rep['target_type']}:")
        for t in rep["node_types"]:
            dim = f"{t['feature_dim']} features" if t["feature_dim"] else "no features"
            print(f"  {t['name']:>14}  {t['count']:>10}  {dim:>13}  {t['per_part']}")
        print(f"{len(rep['relations'])} relations: {', '.join(rep['relations'])}")
    write_json_output(args.json, rep)
    return 0


def _verify(args: argparse.Namespace) -> int:
    from shoal.store.verify import verify_store

    rep = verify_store(args.store, source=not args.no_source)
    print(f"OK: {rep['store']}")
    for c in rep["checks"]:
        print(f"  ok    {c}")
    for s in rep["skipped"]:
        print(f"  skip  {s}")
    write_json_output(args.json, rep)
    return 0


# ---------------------------------------------------------------------------- register
def register(sub: argparse._SubParsersAction) -> None:
    st = sub.add_parser(
        "store",
        help="build the partitioned store",
        description="Partitioned store: one folder per part (core nodes, full in-neighbourhood "
        "CSR, halo nodes, features, labels, splits) plus edge buckets. See docs/store.md.",
    )
    stsub = st.add_subparsers(dest="store_command", metavar="SUBCOMMAND")
    b = stsub.add_parser(
        "build",
        help="write a store from a graph directory and an assignment",
        formatter_class=_FMT,
        description=(
            "Write the partitioned store of GRAPH_DIR under the assignment ASSIGNMENT_DIR\n"
            "(from `shoal partition`). Streaming: O(V) node state plus bounded buffers.\n"
            "Node ids are relabelled so each part's core nodes are one contiguous range.\n\n"
            "example:\n  shoal store build data/cora parts/cora-spring4 --out stores/cora4 "
            "--halo-features"
        ),
    )
    b.add_argument("graph", metavar="GRAPH_DIR", help="graph directory (shoal data import)")
    b.add_argument("assignment", metavar="ASSIGNMENT_DIR", help="assignment (shoal partition)")
    b.add_argument("--out", required=True, metavar="STORE", help="store directory to create")
    b.add_argument(
        "--halo-features",
        action="store_true",
        help="also store halo nodes' feature rows in each part (needed by the averaging "
        "engine; default off, as in DistDGL)",
    )
    b.add_argument(
        "--node-order",
        choices=("id", "degree"),  # store.writer.NODE_ORDERS (not imported: startup time)
        default="id",
        help="nodes inside each part: 'id' (ascending original ID, as DistDGL) or 'degree' "
        "(descending in-degree: hot feature rows together on disk; one more pass over edges and "
        "features; out of core not faster on the benchmark, see docs/measurements.md) "
        "(default id)",
    )
    add_feature_dtype_option(b, default=None, keep="the graph's")
    b.add_argument("--overwrite", action="store_true", help="replace an existing STORE")
    b.add_argument(
        "--chunk-edges", type=int, default=1 << 18, help="edges per streamed chunk (default 2**18)"
    )
    b.add_argument(
        "--sort-memory", default="32MiB", help="memory cap of the external sort (default 32MiB)"
    )
    add_scratch_option(
        b,
        "the build (per-part in-edge files and sort runs, about the size of the edge file; "
        "feature buckets with --node-order degree, the size of the features)",
        "the directory that will hold STORE",
    )
    b.add_argument("--json", metavar="FILE", help="write a JSON summary to FILE")
    b.set_defaults(func=_build)
    st.set_defaults(func=lambda a: (st.print_help(), 2)[1])

    i = sub.add_parser(
        "inspect",
        help="summarise a store: per-part nodes, halo, edges, splits, bytes, RF, edge cut",
        description="Summarise a store from its metadata (nothing large is read).",
    )
    i.add_argument("store", metavar="STORE")
    i.add_argument("--json", metavar="FILE", help="write the summary as JSON to FILE ('-': stdout)")
    i.set_defaults(func=_inspect)

    v = sub.add_parser(
        "verify",
        help="check a store's checksums and invariants against its source graph",
        description=(
            "Check meta.json and every file's checksum, the id maps, each part's CSR and halo, "
            "the edge buckets, and (when the source graph is still at the path recorded in the "
            "metadata) that each core node's in-edges, labels, masks and features equal the "
            "source's. Exit code 2 names the first corrupt file."
        ),
    )
    v.add_argument("store", metavar="STORE")
    v.add_argument("--no-source", action="store_true", help="skip the source-graph comparison")
    v.add_argument("--json", metavar="FILE", help="write the report as JSON to FILE")
    v.set_defaults(func=_verify)
