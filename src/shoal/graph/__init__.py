"""The sampled-subgraph types every layer shares: :class:`Block` and :class:`MiniBatch`."""

from shoal.graph.blocks import Block, MiniBatch, full_graph_block

__all__ = ["Block", "MiniBatch", "full_graph_block"]
