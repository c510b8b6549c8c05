"""Data sources: the graph directory format, edge streams, CSR views, importers, generators."""

from shoal.data.format import CSR, FORMAT_VERSION, GraphDir, GraphWriter
from shoal.data.importers import ImportConfig, from_pyg, from_scipy, import_graph
from shoal.data.linksplit import EdgeSplitConfig, split_edges
from shoal.data.stream import DEFAULT_CHUNK_EDGES, EdgeStream
from shoal.data.synth import DCSBMConfig, RMATConfig, generate_dcsbm, generate_rmat

__all__ = [
    "CSR",
    "DEFAULT_CHUNK_EDGES",
    "FORMAT_VERSION",
    "DCSBMConfig",
    "EdgeSplitConfig",
    "EdgeStream",
    "GraphDir",
    "GraphWriter",
    "ImportConfig",
    "RMATConfig",
    "from_pyg",
    "from_scipy",
    "generate_dcsbm",
    "generate_rmat",
    "import_graph",
    "split_edges",
]
