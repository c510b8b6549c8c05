"""Engine-specific flags of ``shoal train`` (hec, fullgraph, disagg): they only fill
:class:`~shoal.training.TrainConfig` fields (see :mod:`shoal.cli.train`)."""

from __future__ import annotations

import argparse
from typing import Any

from shoal.training import TrainConfig
from shoal.training.config import DEP_MODES

__all__ = ["ENGINE_FLAGS", "add_engine_arguments", "engine_overrides"]

#: Flag destinations that map one-to-one onto TrainConfig fields.
ENGINE_FLAGS = (
    "hec_size",
    "hec_push",
    "hec_lifespan",
    "hec_delay",
    "deps",
    "dep_memory",
    "dep_costs",
    "batch_workers",
    "replicas",
    "disagg_cache",
    "batch_queue",
    "resident_parts",
)


def add_engine_arguments(g: argparse._ArgumentGroup, d: TrainConfig) -> None:
    """Add the hec, fullgraph and disagg flags to ``g``."""
    _add_hec_arguments(g, d)
    _add_fullgraph_arguments(g, d)
    _add_disagg_arguments(g, d)


def engine_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """TrainConfig fields set by switches (``--no-ring`` ...)."""
    out: dict[str, Any] = {}
    for flag, field, value in (
        ("no_ring", "ring", False),
        ("no_overlap", "overlap", False),
        ("local_sampling", "local_sampling", True),
        ("no_grouping", "grouping", False),
    ):
        if getattr(args, flag, None):
            out[field] = value
    return out


def _add_hec_arguments(g: argparse._ArgumentGroup, d: TrainConfig) -> None:
    g.add_argument(
        "--hec-size",
        type=int,
        metavar="CS",
        help="hec engine: lines of each layer's historical embedding cache (DistGNN-MB's cs; "
        f"default {d.hec_size:,}; at most the rank's halo nodes are allocated)",
    )
    g.add_argument(
        "--hec-push",
        type=int,
        metavar="NC",
        help="hec engine: most embeddings pushed per step, layer and peer, drawn by degree "
        f"(DistGNN-MB's nc; default {d.hec_push}; -1 = all)",
    )
    g.add_argument(
        "--hec-lifespan",
        type=int,
        metavar="LS",
        help="hec engine: mini-batch steps a cached embedding stays valid (DistGNN-MB's ls; "
        f"default {d.hec_lifespan})",
    )
    g.add_argument(
        "--hec-delay",
        type=int,
        metavar="D",
        help="hec engine: steps between pushing an embedding and using it, overlapping the "
        f"exchange with compute (DistGNN-MB's d; default {d.hec_delay})",
    )


def _dep_costs(value: str) -> tuple[float, float, float]:
    try:
        costs = tuple(float(x) for x in value.split(","))
    except ValueError:
        costs = ()
    if len(costs) != 3:
        raise argparse.ArgumentTypeError(f"expected T_v,T_e,T_c (three numbers), got {value!r}")
    return costs  # type: ignore[return-value]


def _add_fullgraph_arguments(g: argparse._ArgumentGroup, d: TrainConfig) -> None:
    g.add_argument(
        "--deps",
        choices=DEP_MODES,
        help="fullgraph engine: remote dependencies communicated every layer (comm, DepComm), "
        "recomputed from replicated subtrees (cache, DepCache), or split per dependency by "
        f"NeutronStar's cost model (hybrid) (default {d.deps})",
    )
    g.add_argument(
        "--dep-memory",
        metavar="SIZE",
        help="fullgraph engine: memory limit S of the replicated dependencies (default: what "
        "the rank's memory budget leaves for features after its own part)",
    )
    g.add_argument(
        "--dep-costs",
        type=_dep_costs,
        metavar="TV,TE,TC",
        help="fullgraph engine: seconds per dimension of a vertex operation, an edge "
        "aggregation and a row exchange, instead of probing them (default: probe)",
    )
    g.add_argument(
        "--no-ring",
        action="store_true",
        help="fullgraph engine: send chunks in rank order instead of the ring order (ablation)",
    )
    g.add_argument(
        "--no-overlap",
        action="store_true",
        help="fullgraph engine: wait for the chunks before computing cached dependencies "
        "(ablation)",
    )


def _add_disagg_arguments(g: argparse._ArgumentGroup, d: TrainConfig) -> None:
    g.add_argument(
        "--batch-workers",
        type=int,
        metavar="B",
        help="disagg engine: ranks that sample and load features (the last B); the others "
        "compute; C <= B < world (default: half the ranks, rounded up)",
    )
    g.add_argument(
        "--replicas",
        type=int,
        metavar="G",
        help="disagg engine: model replicas per compute worker (one per GPU; on CPU run one "
        f"after the other); their G mini-batches travel as one global batch (default {d.replicas})",
    )
    g.add_argument(
        "--disagg-cache",
        metavar="ROWS|PCT|SIZE",
        help="disagg engine: LRU feature cache of each compute worker: rows, a share of the "
        f"nodes (5%%) or a size (64MiB); 0 = off (default {d.disagg_cache.replace('%', '%%')})",
    )
    g.add_argument(
        "--batch-queue",
        type=int,
        metavar="N",
        help=f"disagg engine: global batches a batch worker keeps in flight (default {d.batch_queue})",
    )
    g.add_argument(
        "--local-sampling",
        action="store_true",
        default=None,
        help="disagg engine: sample only edges among a batch worker's own parts (no traffic "
        "between batch workers; default: remote sampling, minibatch's distribution)",
    )
    g.add_argument(
        "--no-grouping",
        action="store_true",
        help="disagg engine: send every mini-batch's rows instead of the global batch's union "
        "once (ablation)",
    )
    g.add_argument(
        "--resident-parts",
        type=int,
        metavar="K",
        help="disagg engine: most parts a batch worker holds together, the rest swapped in one "
        "at a time (default: as many as half its memory budget holds)",
    )
