"""``hec``: local mini-batches with a historical embedding cache and delayed pushes
(DistGNN-MB)."""

from shoal.engines.hec import costs, options
from shoal.engines.hec.config import HecConfig
from shoal.engines.spec import EngineSpec, ReportField

__all__ = ["SPEC", "HecConfig"]

SPEC = EngineSpec(
    name="hec",
    summary="local sampling, halo embeddings from caches filled by the owners' delayed "
    "pushes (DistGNN-MB)",
    engine="shoal.engines.hec.engine:HecEngine",
    config=HecConfig,
    typed=True,  # relational layers; caches of their inputs (engine.py's docstring)
    tasks=("node", "link"),  # link: local steps over the positives inside each part
    factory_models=False,  # it caches the embeddings of shoal's own layers
    add_arguments=options.add_arguments,
    estimate=costs.estimate,
    excluded=costs.excluded,
    report_fields=(
        ReportField(
            key="hec",
            cache="halo cache",
            caption="the hec engine's halo embedding cache per layer",
            per_layer=True,
        ),
    ),
    # batches of 16 seeds (bench/hec.py's Cora settings): with the default 1024 a Cora epoch
    # is one step, in which hec never pushes an embedding
    demo="DistGNN-MB-style: halo nodes' embeddings from a historical cache that their owners "
    "push to (batches of 16 seeds)",
    demo_flags=("--batch-size", "16"),
)
