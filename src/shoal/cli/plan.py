"""Sub-command ``shoal plan``: SDT-GNN workload allocation (see :mod:`shoal.plan`)."""

from __future__ import annotations

import argparse
import json
import sys

from shoal.cli._common import human
from shoal.errors import ShoalInputError
from shoal.utils.io import parse_size, write_json_output

__all__ = ["register"]


def _plan(args: argparse.Namespace) -> int:
    from shoal.plan import Config, make_plan

    cfg = Config(
        workers=args.workers,
        memory_per_worker=parse_size(args.memory_per_worker),
        reserve=parse_size(args.reserve) if args.reserve is not None else None,
    )
    plan = make_plan(cfg, store=args.store, graph=args.graph)
    d = plan.to_dict()
    auto = _engine_plan(args) if args.store and not args.no_engine else None
    if auto is not None:
        d["engine"] = auto.to_dict()
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
        if auto is not None:
            print(
                f"engine: {auto.engine} (estimated training epoch on this machine's probed "
                f"costs, network {auto.costs['network']}):"
            )
            for line in auto.reasons():
                print(f"  {line}")
        if not plan.fits:
            print("  WARNING: the largest part does not fit the budget", file=sys.stderr)
    write_json_output(args.out, d)
    if args.json != "-":
        write_json_output(args.json, d)
    return 0 if plan.fits else 3


def _engine_plan(args: argparse.Namespace):
    """The automatic engine choice for the store (:mod:`shoal.engines.autoplan`), probed with
    the workers' share of this machine's cores."""
    from shoal.engines.autoplan import plan_engine
    from shoal.store import Store
    from shoal.training import TrainConfig
    from shoal.utils.threads import set_threads, threads_per_process

    set_threads(args.threads or threads_per_process(args.workers))
    kw = {k: getattr(args, k) for k in ("model", "hidden", "batch_size") if getattr(args, k)}
    if args.fanouts:
        kw["fanouts"] = args.fanouts
    cands = tuple(args.engines.split(",")) if args.engines else None
    try:
        tc = TrainConfig.from_options(**kw, progress=False)
        return plan_engine(
            Store.open(args.store),
            tc,
            args.workers,
            network=args.network,
            candidates=cands,
            scratch=args.scratch_dir,
            memory_per_worker=parse_size(args.memory_per_worker),
        )
    except ValueError as e:
        raise ShoalInputError(
            str(e), path=args.store, fix="check --model, --fanouts, --engines and --workers"
        ) from None


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
            "With --store it also chooses the engine, as `shoal train --engine auto` does: it\n"
            "probes one mini-batch of the store here (sampling, gather, compute), the model's\n"
            "layers over a part, and the network, and prints each engine's estimated training\n"
            "epoch on Q workers (shoal.engines.autoplan). With --network loopback (default)\n"
            "the Q workers share this machine and probe at once, in Q processes; with a rate\n"
            "(--network 10gbit) one process probes alone.\n\n"
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
    g = pl.add_argument_group("engine choice (with --store)")
    g.add_argument("--model", help="the model to plan for (default sage, the paper preset)")
    g.add_argument("--hidden", type=int, help="hidden width (default: the preset's)")
    g.add_argument("--fanouts", help="neighbours per hop, hop 1 first (default: the preset's)")
    g.add_argument("--batch-size", type=int, help="seeds per batch (default 1024)")
    g.add_argument(
        "--threads",
        type=int,
        help="threads of the one probing process with --network RATE (default: "
        "cores / workers; with loopback each worker takes cores / workers)",
    )
    g.add_argument(
        "--network",
        default="loopback",
        help="loopback (probed; the workers share this machine) or the cluster's "
        "link rate, e.g. 1gbit, 10gbit (default loopback)",
    )
    g.add_argument(
        "--engines",
        metavar="A,B",
        help="candidates (default: every registered engine with a cost estimate, the "
        "engines of `shoal train --engine auto`)",
    )
    g.add_argument("--no-engine", action="store_true", help="skip the engine choice")
    g.add_argument(
        "--scratch-dir",
        metavar="DIR",
        help="where the probing workers leave their result (a few bytes; default "
        "the system's temporary directory)",
    )
    pl.add_argument("--out", metavar="FILE", help="write the plan as JSON (for the engines)")
    pl.add_argument("--json", metavar="FILE", help="same as --out; '-' prints JSON to stdout")
    pl.set_defaults(func=_plan)
