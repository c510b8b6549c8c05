"""Data sources: the graph directory format, edge streams, CSR views, importers, generators."""

from shoal.data.format import CSR, FORMAT_VERSION, GraphDir, GraphWriter
from shoal.data.stream import DEFAULT_CHUNK_EDGES, EdgeStream

__all__ = ["CSR", "DEFAULT_CHUNK_EDGES", "FORMAT_VERSION", "EdgeStream", "GraphDir", "GraphWriter"]
