"""Distributed runtime: process groups under torchrun, collective exchange with counters, the
distributed feature store and the distributed neighbour sampler."""

from shoal.dist.comm import CommStats, all_reduce_stats, exchange
from shoal.dist.feature_store import DistFeatureStore, owner_of
from shoal.dist.runtime import (
    DistConfig,
    DistContext,
    Rank0Filter,
    env_world,
    process_group,
    rank0_print,
)

__all__ = [
    "CommStats",
    "DistConfig",
    "DistContext",
    "DistFeatureStore",
    "Rank0Filter",
    "all_reduce_stats",
    "env_world",
    "exchange",
    "owner_of",
    "process_group",
    "rank0_print",
]
