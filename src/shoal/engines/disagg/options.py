"""The ``disagg`` engine's flags of ``shoal train`` (they fill :class:`DisaggConfig`)."""

from __future__ import annotations

import argparse

from shoal.engines.disagg.config import REPLICA_EXECS, SWAPPED, DisaggConfig

__all__ = ["add_arguments"]


def add_arguments(g: argparse._ArgumentGroup) -> None:
    d = DisaggConfig()
    g.add_argument(
        "--batch-workers",
        type=int,
        metavar="B",
        help="ranks that sample and load features (the last B); the others compute; "
        "C <= B < world (default: half the ranks, rounded up)",
    )
    g.add_argument(
        "--replicas",
        type=int,
        metavar="G",
        help="model replicas per compute worker (one per GPU; on CPU run one after the "
        f"other); their G mini-batches travel as one global batch (default {d.replicas})",
    )
    g.add_argument(
        "--disagg-cache",
        metavar="ROWS|PCT|SIZE",
        help="LRU feature cache of each compute worker: rows, a share of the nodes (5%%) or a "
        f"size (64MiB); 0 = off (default {str(d.disagg_cache).replace('%', '%%')})",
    )
    g.add_argument(
        "--batch-queue",
        type=int,
        metavar="N",
        help=f"global batches a batch worker keeps in flight (default {d.batch_queue})",
    )
    g.add_argument(
        "--local-sampling",
        action="store_const",
        const=True,
        help="sample only edges among a batch worker's own parts (no traffic between batch "
        "workers; default: remote sampling, minibatch's distribution)",
    )
    g.add_argument(
        "--no-grouping",
        dest="grouping",
        action="store_const",
        const=False,
        help="send every mini-batch's rows instead of the global batch's union once (ablation)",
    )
    g.add_argument(
        "--resident-parts",
        type=int,
        metavar="K",
        help="most parts a batch worker holds together, the rest swapped in one at a time "
        "(default: as many as half its memory budget holds)",
    )
    g.add_argument(
        "--replicate-top",
        metavar="N|PCT",
        help="nodes of highest in-degree whose neighbour lists and rows every batch worker "
        "keeps (Armada Sec. 5), so sampling them needs no remote request: nodes or a share "
        f"of the nodes (1%%); 0 = off (default {str(d.replicate_top).replace('%', '%%')})",
    )
    g.add_argument(
        "--swapped-neighbours",
        choices=SWAPPED,
        help="nodes of a part swapped out at its batch worker: read sample them from the "
        "store's files (the same draws as resident), skip gives them no neighbours "
        f"(the paper's footnote 1; warns) (default {d.swapped_neighbours})",
    )
    g.add_argument(
        "--replica-exec",
        choices=REPLICA_EXECS,
        help="a compute worker's G replicas: threads (in parallel, intra-op threads split) "
        f"or sequential (default {d.replica_exec})",
    )
