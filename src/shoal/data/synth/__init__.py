"""Synthetic graph generators, streamed to disk in chunks (``shoal data synth``).

Both generators produce edges in fixed blocks of :data:`GEN_BLOCK` edges, each from its own
random stream (``numpy.random.default_rng([seed, stream, block])``), and hand them to a
:class:`~shoal.data.format.GraphWriter`: edge memory is O(block) whatever the number of edges,
per-node state is a few O(N) arrays, and the output depends only on the configuration and the
seed (not on chunk sizes or the machine).

Generators: R-MAT / Kronecker (:mod:`shoal.data.synth.rmat`), the degree-corrected SBM
(:mod:`shoal.data.synth.dcsbm`, whose defaults make a GNN beat an MLP by a wide margin) and a
road-like lattice (:mod:`shoal.data.synth.road`: a benchmark family for the
partitioners); what they share is in :mod:`shoal.data.synth.common`. See ``docs/format.md``
("Synthetic graphs").
"""

from shoal.data.synth.common import FEAT_BLOCK, GEN_BLOCK
from shoal.data.synth.dcsbm import DCSBMConfig, dcsbm_edge_blocks, generate_dcsbm
from shoal.data.synth.rmat import RMATConfig, generate_rmat, rmat_edge_blocks
from shoal.data.synth.road import RoadConfig, generate_road, road_edge_blocks

__all__ = [
    "FEAT_BLOCK",
    "GEN_BLOCK",
    "DCSBMConfig",
    "RMATConfig",
    "RoadConfig",
    "dcsbm_edge_blocks",
    "generate_dcsbm",
    "generate_rmat",
    "generate_road",
    "rmat_edge_blocks",
    "road_edge_blocks",
]
