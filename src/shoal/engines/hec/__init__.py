"""``hec``: local mini-batches with a historical embedding cache and delayed pushes
(DistGNN-MB)."""

from shoal.engines.hec import costs, options
from shoal.engines.hec.config import HecConfig
from shoal.engines.spec import EngineSpec

__all__ = ["SPEC", "HecConfig"]

SPEC = EngineSpec(
    name="hec",
    summary="local sampling, halo embeddings from caches filled by the owners' delayed "
    "pushes (DistGNN-MB)",
    engine="shoal.engines.hec.engine:HecEngine",
    typed_engine="shoal.engines.hec.engine:HecEngine",
    config=HecConfig,
    add_arguments=options.add_arguments,
    estimate=costs.estimate,
    excluded=costs.excluded,
)
