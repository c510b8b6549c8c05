"""The ``fullgraph`` engine's flags of ``shoal train`` (they fill :class:`FullGraphConfig`)."""

from __future__ import annotations

import argparse

from shoal.engines.fullgraph.config import DEP_MODES, FullGraphConfig

__all__ = ["add_arguments"]


def _dep_costs(value: str) -> tuple[float, float, float]:
    try:
        costs = tuple(float(x) for x in value.split(","))
    except ValueError:
        costs = ()
    if len(costs) != 3:
        raise argparse.ArgumentTypeError(f"expected T_v,T_e,T_c (three numbers), got {value!r}")
    return costs  # type: ignore[return-value]


def add_arguments(g: argparse._ArgumentGroup) -> None:
    d = FullGraphConfig()
    g.add_argument(
        "--deps",
        choices=DEP_MODES,
        help="remote dependencies communicated every layer (comm, DepComm), recomputed from "
        "replicated subtrees (cache, DepCache), or split per dependency by NeutronStar's cost "
        f"model (hybrid) (default {d.deps})",
    )
    g.add_argument(
        "--dep-memory",
        metavar="SIZE",
        help="memory limit S of the replicated dependencies (default: what the rank's memory "
        "budget leaves for features after its own part)",
    )
    g.add_argument(
        "--dep-costs",
        type=_dep_costs,
        metavar="TV,TE,TC",
        help="seconds per dimension of a vertex operation, an edge aggregation and a row "
        "exchange, instead of probing them (default: probe)",
    )
    g.add_argument(
        "--no-ring",
        dest="ring",
        action="store_const",
        const=False,
        help="post every chunk of a level's exchange at once in rank order instead of the "
        "ring's time slots (slot s: send to rank r+s, receive from r-s, one slot after the "
        "other) (ablation; default: ring)",
    )
    g.add_argument(
        "--no-overlap",
        dest="overlap",
        action="store_const",
        const=False,
        help="wait for every chunk before computing a layer, and for the gradient push "
        "before going on, instead of computing the replicas and the targets each slot "
        "completes while chunks are in flight (ablation; default: overlap)",
    )
