"""The model a run trains, built from its :class:`~shoal.training.config.TrainConfig`."""

from __future__ import annotations

import torch
from torch import nn

from shoal.nn import build_model
from shoal.training.config import TrainConfig

__all__ = ["model_from_config"]


def model_from_config(cfg: TrainConfig, *, in_dim: int, out_dim: int, rank: int = 0) -> nn.Module:
    """The model named by ``cfg.model``, initialised from ``cfg.seed`` (the same weights in
    every process). Ranks other than 0 then re-seed torch with ``seed + rank`` so their dropout
    masks are independent of rank 0's (rank 0 keeps the single-process trainer's stream)."""
    torch.manual_seed(cfg.seed)
    extra = {"heads": cfg.heads} if cfg.model == "gat" else {}
    model = build_model(
        cfg.model,
        in_dim=int(in_dim),
        hidden=cfg.hidden,
        out_dim=int(out_dim),
        num_layers=cfg.num_layers,
        dropout=cfg.dropout,
        **extra,
    )
    if rank:
        torch.manual_seed(cfg.seed + rank)
    return model
