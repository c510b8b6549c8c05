"""Trivial reference partitioners: ``hash`` and ``random`` (O(V) time and memory, no edge pass).

Both ignore the graph structure; they are the floor every real partitioner must beat (the
expected edge cut is ``1 - 1/p``). Their node balance is only statistical: the shared pipeline
(:func:`shoal.partition.run.run_partition`) applies the balance post-pass.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from shoal.data.format import GraphDir
from shoal.partition.base import Assignment, PartitionConfig, Partitioner

__all__ = ["Hash", "HashConfig", "Random", "RandomConfig", "hash_ids"]

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLD = np.uint64(0x9E3779B97F4A7C15)


def hash_ids(ids: np.ndarray, seed: int = 0) -> np.ndarray:
    """SplitMix64 finaliser of ``ids + seed * golden``: a fixed, well-mixed uint64 per id."""
    with np.errstate(over="ignore"):
        z = ids.astype(np.uint64) + np.uint64(seed + 1) * _GOLD
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


@dataclass(kw_only=True)
class HashConfig(PartitionConfig):
    """Options of :class:`Hash` (only the shared ones: num_parts, seed, chunk_edges, balance,
    refine_passes)."""


@dataclass(kw_only=True)
class RandomConfig(PartitionConfig):
    """Options of :class:`Random` (only the shared ones)."""


class Hash(Partitioner):
    """Owner = SplitMix64 hash of the node id (mixed with the seed) modulo ``p``."""

    name = "hash"
    Config = HashConfig

    def partition(self, graph: GraphDir, train_mask: np.ndarray | None = None) -> Assignment:
        t0 = time.perf_counter()
        n, p = graph.num_nodes, self.config.num_parts
        out = np.empty(n, dtype=np.int32)
        step = 1 << 22
        for s in range(0, n, step):
            ids = np.arange(s, min(n, s + step), dtype=np.uint64)
            out[s : s + step] = (hash_ids(ids, self.config.seed) % np.uint64(p)).astype(np.int32)
        return self.assignment(out, {"assign": time.perf_counter() - t0})


class Random(Partitioner):
    """Owner drawn uniformly at random (numpy PCG64 seeded with ``seed``)."""

    name = "random"
    Config = RandomConfig

    def partition(self, graph: GraphDir, train_mask: np.ndarray | None = None) -> Assignment:
        t0 = time.perf_counter()
        rng = np.random.default_rng(self.config.seed)
        out = rng.integers(0, self.config.num_parts, size=graph.num_nodes, dtype=np.int32)
        return self.assignment(out, {"assign": time.perf_counter() - t0})
