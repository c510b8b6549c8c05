"""The ``hec`` engine's flags of ``shoal train`` (they fill :class:`HecConfig`)."""

from __future__ import annotations

import argparse

from shoal.engines.hec.config import HecConfig

__all__ = ["add_arguments"]


def add_arguments(g: argparse._ArgumentGroup) -> None:
    d = HecConfig()
    g.add_argument(
        "--hec-size",
        type=int,
        metavar="CS",
        help="lines of each layer's historical embedding cache (DistGNN-MB's cs; "
        f"default {d.hec_size:,}; at most the rank's halo nodes are allocated)",
    )
    g.add_argument(
        "--hec-push",
        type=int,
        metavar="NC",
        help="most embeddings pushed per step, layer and peer, drawn by degree "
        f"(DistGNN-MB's nc; default {d.hec_push}; -1 = all)",
    )
    g.add_argument(
        "--hec-lifespan",
        type=int,
        metavar="LS",
        help="mini-batch steps a cached embedding stays valid (DistGNN-MB's ls; "
        f"default {d.hec_lifespan})",
    )
    g.add_argument(
        "--hec-delay",
        type=int,
        metavar="D",
        help="steps between pushing an embedding and using it, overlapping the exchange with "
        f"compute (DistGNN-MB's d; default {d.hec_delay})",
    )
    g.add_argument(
        "--no-hec-cache",
        dest="hec_cache",
        action="store_const",
        const=False,
        help="turn the historical embedding caches off (the ablation): sample the same batches "
        "over the whole graph and pull every remote input row from its owner, as the "
        "minibatch engine does; nothing is pushed or cached (default: caches on)",
    )
