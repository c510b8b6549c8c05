"""Sub-command ``shoal plan``: SDT-GNN workload allocation (see :mod:`shoal.plan`)."""

from __future__ import annotations

import argparse
import json
import sys

from shoal.cli._common import human, parse_size_arg, write_json

__all__ = ["register"]


def _plan(args: argparse.Namespace) -> int:
    from shoal.plan import Config, make_plan

    cfg = Config(
        workers=args.workers,
        memory_per_worker=parse_size_arg(args.memory_per_worker),
        reserve=parse_size_arg(args.reserve) if args.reserve is not None else None,
    )
    plan = make_plan(cfg, store=args.store, graph=args.graph)
    d = plan.to_dict()
    if args.json == "-":
        print(json.dumps(d, indent=2))
    else:
        print(
            f"plan: {plan.num_parts} parts on {plan.workers} workers ({plan.device}); "
            f"S = {human(plan.data_bytes)}, M = {human(plan.memory_per_worker)}, "
            f"T = {human(plan.reserve)}, budget M - T = {human(plan.budget)}"
        )
        for w, parts in enumerate(plan.assignment):
            print(f"  worker {w}: parts {parts}")
        for note in plan.notes:
            print(f"  note: {note}")
        if not plan.fits:
            print("  WARNING: the largest part does not fit the budget", file=sys.stderr)
    write_json(args.out, d)
    if args.json != "-":
        write_json(args.json, d)
    return 0 if plan.fits else 3


def register(sub: argparse._SubParsersAction) -> None:
    pl = sub.add_parser(
        "plan",
        help="SDT-GNN workload allocation: number of parts and parts per worker",
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
