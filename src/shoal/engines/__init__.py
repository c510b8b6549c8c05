"""Distributed training engines on one Engine interface (``shoal.engines.base``).

``minibatch`` (DistDGL: sync SGD, sampling where the data lives, remote feature pulls) and
``averaging`` (SDT-GNN: local training on parts, weighted model averaging). Run them with
``shoal train --store STORE --engine NAME --nproc N`` or under torchrun with
``python -m shoal.engines.launch`` (see docs/distributed.md).
"""

from shoal.engines.base import ENGINES, Engine, EngineConfig, RunResult, get_engine

__all__ = ["ENGINES", "Engine", "EngineConfig", "RunResult", "get_engine"]
