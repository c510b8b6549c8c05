"""Distributed runtime: process groups under torchrun, collective exchange with counters, the
distributed feature store and neighbour sampler, part/rank tables and exact distributed
evaluation: what every engine shares (what one engine alone uses lives in its folder under
``shoal.engines``)."""

from shoal.distributed.comm import CommStats, all_reduce_stats, exchange
from shoal.distributed.evaluate import dist_evaluate
from shoal.distributed.feature_store import DistFeatureStore, owner_of
from shoal.distributed.runtime import (
    DistConfig,
    DistContext,
    Rank0Filter,
    env_world,
    process_group,
)
from shoal.distributed.sampler import DistNeighborSampler
from shoal.distributed.tables import NodeTables, NodeValues, parts_of_rank

__all__ = [
    "CommStats",
    "DistConfig",
    "DistContext",
    "DistFeatureStore",
    "DistNeighborSampler",
    "NodeTables",
    "NodeValues",
    "Rank0Filter",
    "all_reduce_stats",
    "dist_evaluate",
    "env_world",
    "exchange",
    "owner_of",
    "parts_of_rank",
    "process_group",
]
