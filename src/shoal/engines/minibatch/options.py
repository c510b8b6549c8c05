"""The ``minibatch`` engine's flags of ``shoal train`` (they fill :class:`MinibatchConfig`)."""

from __future__ import annotations

import argparse

from shoal.engines.minibatch.config import MinibatchConfig

__all__ = ["add_arguments"]


def add_arguments(g: argparse._ArgumentGroup) -> None:
    d = MinibatchConfig()
    g.add_argument(
        "--prefetch-batches",
        type=int,
        metavar="N",
        help="batches (sampled blocks and pulled feature rows) each rank's sampling thread "
        "prepares while the step computes (DistDGL's sampler workers; default "
        f"{d.prefetch_batches}: hides the pulls' network waits behind the step on a real "
        "network, see docs/distributed.md; 0 = inline, faster over loopback when the "
        "processes fill the cores; the same batches either way)",
    )
    g.add_argument(
        "--no-background-sampling",
        dest="prefetch_batches",
        action="store_const",
        const=0,
        help="sample and pull each batch inline in the training step (--prefetch-batches 0; "
        "the ablation of the background sampling thread)",
    )
