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
        type=int,
        metavar="H",
        help="train each part with its halo nodes' in-edges too, H hops from the core, "
        "fetched once before training (as DGL's num_hops; typed stores; H >= the model's "
        f"layers samples the graph's neighbourhoods; default {d.halo_hops}: the stored part, "
        "as SDT-GNN)",
    )
    g.add_argument(
        "--part-models",
        action="store_const",
        const=True,
        help="with more parts than processes: train one model per part and average all of "
        "them each round (SDT-GNN); default: one model per rank carried through its parts "
        "in turn",
    )
    g.add_argument(
        "--local-optimizer-state",
        dest="average_optimizer",
        action="store_const",
        const=False,
        help="keep each rank's own Adam moments instead of averaging them with the weights "
        "(default: averaged)",
    )
