"""Neighbour sampling (numba) producing PyG-style bipartite blocks, and feature gathers."""

from shoal.graph.blocks import Block, MiniBatch, full_graph_block
from shoal.rows.gather import gather_rows
from shoal.sample.features import FeatureGatherer
from shoal.sample.sampler import NeighborSampler, parse_fanouts

__all__ = [
    "Block",
    "FeatureGatherer",
    "MiniBatch",
    "NeighborSampler",
    "full_graph_block",
    "gather_rows",
    "parse_fanouts",
]
