"""Distributed training engines on one Engine interface (``shoal.engines.base``).

``minibatch`` (DistDGL), ``averaging`` (SDT-GNN), ``hec`` (DistGNN-MB), ``fullgraph``
(NeutronStar) and ``disagg`` (Armada), each a folder ``shoal/engines/<name>/`` registered by
one line of :mod:`shoal.engines.registry`. Run them with
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
