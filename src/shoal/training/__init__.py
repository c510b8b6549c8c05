"""The training core shared by the single-process trainer and every engine: the run's
configuration tree (:class:`TrainConfig` and its sections), mini-batches (:class:`BatchLoader`), the one epoch loop
(:class:`EpochLoop`), exact layer-wise inference, checkpoints and the result type."""

from shoal.training.batches import Batch, BatchLoader, Timer, batch_seed, train_step
from shoal.training.checkpoint import Checkpointer, load_checkpoint, save_checkpoint
from shoal.training.config import TrainConfig
from shoal.training.data import TrainData
from shoal.training.engine_config import EngineConfig
from shoal.training.inference import evaluate, layerwise_inference
from shoal.training.link_config import LinkConfig
from shoal.training.loop import EpochLoop, LoopState, Trainable
from shoal.training.meter import EpochMeter
from shoal.training.model import model_from_config
from shoal.training.result import RunResult
from shoal.training.sections import (
    CheckpointConfig,
    EvalConfig,
    MemoryConfig,
    ModelConfig,
    OptimConfig,
    RunConfig,
    SamplingConfig,
)
from shoal.training.trainer import Trainer

__all__ = [
    "Batch",
    "BatchLoader",
    "CheckpointConfig",
    "Checkpointer",
    "EngineConfig",
    "EpochLoop",
    "EpochMeter",
    "EvalConfig",
    "LinkConfig",
    "LoopState",
    "MemoryConfig",
    "ModelConfig",
    "OptimConfig",
    "RunConfig",
    "SamplingConfig",
    "RunResult",
    "Timer",
    "TrainConfig",
    "TrainData",
    "Trainable",
    "Trainer",
    "batch_seed",
    "evaluate",
    "layerwise_inference",
    "load_checkpoint",
    "model_from_config",
    "save_checkpoint",
    "train_step",
]
