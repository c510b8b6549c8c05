"""Partitioners: streaming O(V)-memory algorithms and in-memory references (METIS, KaMinPar)."""

from shoal.partition.base import (
    REGISTRY,
    Assignment,
    PartitionConfig,
    Partitioner,
    available,
    get_partitioner,
)

__all__ = [
    "REGISTRY",
    "Assignment",
    "PartitionConfig",
    "Partitioner",
    "available",
    "get_partitioner",
]
