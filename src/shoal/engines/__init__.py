"""Distributed training engines on one Engine interface (``shoal.engines.base``).

``minibatch`` (DistDGL: sync SGD, sampling where the data lives, remote feature pulls),
``averaging`` (SDT-GNN: local training on parts, weighted model averaging), ``hec``
(DistGNN-MB: local sampling, historical embedding caches filled by delayed pushes) and
``fullgraph`` (NeutronStar: full-graph training, remote dependencies communicated or
recomputed) and ``disagg`` (Armada: batch workers sample and load features for compute
workers, which cache rows). Each engine is a folder ``shoal/engines/<name>/`` (its step, the distributed pieces only it
uses, its configuration, flags and cost estimate) registered by one line of
:mod:`shoal.engines.registry`. Run them with
``shoal train --store STORE --engine NAME --nproc N`` or under torchrun with
``torchrun ... -m shoal train --store STORE --engine NAME`` (see docs/distributed.md).
"""

from shoal.engines.base import Engine
from shoal.engines.registry import ENGINES, get_engine, get_spec
from shoal.engines.spec import EngineSpec
from shoal.training import RunResult
from shoal.training.engine_config import EngineConfig

__all__ = [
    "ENGINES",
    "Engine",
    "EngineConfig",
    "EngineSpec",
    "RunResult",
    "get_engine",
    "get_spec",
]
