"""PyG-style loaders over shoal's sampler and budgeted feature store: bring your own model."""

from shoal.loader.neighbor import NeighborLoader, to_pyg

__all__ = ["NeighborLoader", "to_pyg"]
