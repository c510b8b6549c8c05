"""``disagg``: batch preparation disaggregated from model computation (Armada)."""

from shoal.engines.disagg import costs, options
from shoal.engines.disagg.config import DisaggConfig
from shoal.engines.spec import EngineSpec, ReportField

__all__ = ["SPEC", "DisaggConfig"]

SPEC = EngineSpec(
    name="disagg",
    summary="batch workers sample and load rows for compute workers that cache them (Armada)",
    engine="shoal.engines.disagg.engine:DisaggEngine",
    config=DisaggConfig,
    typed=True,  # draws per relation, typed blocks sent to compute
    tasks=("node", "link"),  # link: batch workers sample the steps' ends, edges excluded
    add_arguments=options.add_arguments,
    estimate=costs.estimate,
    excluded=costs.excluded,
    report_fields=(
        ReportField(
            key="disagg",
            cache="row cache",
            caption="the disaggregated engine's row cache",
            disk_bytes=True,
        ),
    ),
    # batches of 16 seeds (bench/disagg.py's Cora settings): with the default 1024 a Cora
    # epoch is one step, with no batch to prepare ahead
    demo="Armada-style disaggregated batch preparation: process 1 samples and loads features, "
    "process 0 trains (batches of 16 seeds)",
    demo_flags=("--batch-workers", "1", "--batch-size", "16"),
)
