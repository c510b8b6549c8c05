"""The ``averaging`` engine's flags of ``shoal train`` (they fill :class:`AveragingConfig`)."""

from __future__ import annotations

import argparse

from shoal.engines.averaging.config import AveragingConfig

__all__ = ["add_arguments"]


def add_arguments(g: argparse._ArgumentGroup) -> None:
    d = AveragingConfig()
    g.add_argument(
        "--average-every",
        type=int,
        metavar="K",
        help=f"average the models every K epochs (default {d.average_every})",
    )
    g.add_argument(
        "--halo-hops",
        type=_hops,
        metavar="H",
        help="train each part with its halo nodes' in-edges too, H hops from the core, "
        "fetched once before training (as DGL's num_hops; 1 = the stored part, as SDT-GNN; "
        "default auto: min(2, layers) on a typed store, where the in-edges make local "
        "training see the evaluation's neighbourhoods, 1 on an untyped one)",
    )
    g.add_argument(
        "--part-models",
        action="store_const",
        const=True,
        help="with more parts than processes: train one model per part and average all of "
        "them each round (SDT-GNN Sec. III-C; the default)",
    )
    g.add_argument(
        "--no-part-models",
        dest="part_models",
        action="store_const",
        const=False,
        help="with more parts than processes: one model per rank carried through its parts "
        "in turn (ablation of --part-models)",
    )
    g.add_argument(
        "--local-optimizer-state",
        dest="average_optimizer",
        action="store_const",
        const=False,
        help="keep each model's own Adam moments instead of averaging them with the weights, "
        "as SDT-GNN averages the weights only (default: averaged, which keeps the models' "
        "Adam steps from cancelling in the average; see docs/distributed.md)",
    )


def _hops(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected auto or an integer >= 1, got {text!r}")
    return value
