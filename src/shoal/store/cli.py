"""Sub-commands ``shoal store build``, ``shoal inspect``, ``shoal verify`` and ``shoal plan``."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

__all__ = ["register"]

_FMT = argparse.RawDescriptionHelpFormatter


def _write_json(path: str | None, obj: Any) -> None:
    if path:
        from shoal.utils.io import write_json_atomic

        write_json_atomic(Path(path), obj)


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


# ---------------------------------------------------------------------------- handlers
def _build(args: argparse.Namespace) -> int:
    from shoal.store.writer import Config, build_store

    cfg = Config(
        halo_features=args.halo_features,
        overwrite=args.overwrite,
        chunk_edges=args.chunk_edges,
        sort_memory=_size(args.sort_memory),
        command="shoal " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
    )
    res = build_store(args.graph, args.assignment, args.out, config=cfg)
    print(
        f"store {res['store']}: {res['num_parts']} parts, {res['num_nodes']} nodes, "
        f"{res['num_edges']} edges, {_human(res['bytes'])}; RF "
        f"{res['metrics']['replication_factor']:.3f}, edge cut {res['metrics']['edge_cut']:.3f}"
    )
    _write_json(args.json, res)
    return 0


def _size(text: str) -> int:
    from shoal.utils.io import parse_size

    return parse_size(text)


def _inspect(args: argparse.Namespace) -> int:
    from shoal.store.verify import inspect_store

    rep = inspect_store(args.store)
    if args.json == "-":
        print(json.dumps(rep, indent=2))
        return 0
    print(
        f"{rep['store']}: {rep['num_parts']} parts, {rep['num_nodes']} nodes, "
        f"{rep['num_edges']} edges, {_human(rep['bytes'])}, partitioned by "
        f"{rep['partition']['algorithm']}"
    )
    print(f"replication factor {rep['replication_factor']:.4f}, edge cut {rep['edge_cut']:.4f}")
    cols = ("part", "nodes", "halo", "edges", "train", "val", "test", "bytes")
    print("  ".join(f"{c:>10}" for c in cols))
    for row in rep["parts"]:
        vals = [str(row[c]) if c != "bytes" else _human(row[c]) for c in cols]
        print("  ".join(f"{v:>10}" for v in vals))
    _write_json(args.json, rep)
    return 0


def _verify(args: argparse.Namespace) -> int:
    from shoal.store.verify import verify_store

    rep = verify_store(args.store, source=not args.no_source)
    print(f"OK: {rep['store']}")
    for c in rep["checks"]:
        print(f"  ok    {c}")
    for s in rep["skipped"]:
        print(f"  skip  {s}")
    _write_json(args.json, rep)
    return 0


def _plan(args: argparse.Namespace) -> int:
    from shoal.plan import Config, make_plan

    cfg = Config(
        workers=args.workers,
        memory_per_worker=_size(args.memory_per_worker),
        reserve=_size(args.reserve) if args.reserve is not None else None,
    )
    plan = make_plan(cfg, store=args.store, graph=args.graph)
    d = plan.to_dict()
    if args.json == "-":
        print(json.dumps(d, indent=2))
    else:
        print(
            f"plan: {plan.num_parts} parts on {plan.workers} workers ({plan.device}); "
            f"S = {_human(plan.data_bytes)}, M = {_human(plan.memory_per_worker)}, "
            f"T = {_human(plan.reserve)}, budget M - T = {_human(plan.budget)}"
        )
        for w, parts in enumerate(plan.assignment):
            print(f"  worker {w}: parts {parts}")
        for note in plan.notes:
            print(f"  note: {note}")
        if not plan.fits:
            print("  WARNING: the largest part does not fit the budget", file=sys.stderr)
    _write_json(args.out, d)
    if args.json != "-":
        _write_json(args.json, d)
    return 0 if plan.fits else 3


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
    b.add_argument("--overwrite", action="store_true", help="replace an existing STORE")
    b.add_argument(
        "--chunk-edges", type=int, default=1 << 18, help="edges per streamed chunk (default 2**18)"
    )
    b.add_argument(
        "--sort-memory", default="32MiB", help="memory cap of the external sort (default 32MiB)"
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

    pl = sub.add_parser(
        "plan",
        help="SDT-GNN workload allocation: number of parts and parts per worker",
        formatter_class=_FMT,
        description=(
            "SDT-GNN workload allocation. S = data size (features + structure), M = memory per\n"
            "worker, T = reserve. p = Q when S / Q fits in M - T, else p = ceil(S / (M - T));\n"
            "part j goes to worker j mod Q. T defaults to 2/3 of M on accelerators and to\n"
            "max(512MiB, M/4) on CPU (runtime + model + sampler/batch buffers; see shoal.plan).\n"
            "With --store the store's p is used (error if p < Q; exit 3 if a part does not fit);\n"
            "with --graph the plan recommends p for `shoal partition --parts`.\n\n"
            "examples:\n  shoal plan --graph data/products --workers 4 --memory-per-worker 4GB\n"
            "  shoal plan --store stores/cora4 --workers 2 --memory-per-worker 2GB --out plan.json"
        ),
    )
    src = pl.add_mutually_exclusive_group(required=True)
    src.add_argument("--store", metavar="STORE", help="plan for an existing store")
    src.add_argument("--graph", metavar="DIR", help="plan for a graph directory (recommend p)")
    pl.add_argument("--workers", type=int, required=True, metavar="Q", help="number of workers")
    pl.add_argument(
        "--memory-per-worker", required=True, metavar="M", help="memory per worker, e.g. 4GB"
    )
    pl.add_argument(
        "--reserve", metavar="T", help="reserved memory per worker (default: see above)"
    )
    pl.add_argument("--out", metavar="FILE", help="write the plan as JSON (for the engines)")
    pl.add_argument("--json", metavar="FILE", help="same as --out; '-' prints JSON to stdout")
    pl.set_defaults(func=_plan)
