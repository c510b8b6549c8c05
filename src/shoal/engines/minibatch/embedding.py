"""Learnable input rows held by their owners (``--embedding-dim`` of the link task on the
``minibatch`` engine), for graphs without features: DistDGL's ``DistEmbedding`` (Zheng et al.
IA3 2020, Section 3), one table per part, its gradients summed at the owners and applied every
step (synchronous, where DistDGL applies them asynchronously; with the gradients divided by
the number of ranks, N ranks update exactly as one process on the same batches with the mean
loss): docs/linkpred.md#across-processes-every-engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from shoal.distributed.comm import exchange
from shoal.distributed.feature_store import DistFeatureStore, owner_of
from shoal.training.embedding import NodeEmbedding, SparseAdagrad, SparseAdam, _unique_grad

__all__ = ["DistEmbedding"]


class DistEmbedding:
    """Learnable input rows held by their owners (module docstring).

    Args:
        directory: where the tables live (``part_<i>/`` per part held here).
        engine: the engine (its parts, their layout, the counters, the run's seed and
            ``--embedding-optimizer`` with ``--embedding-lr``, default ``--lr``); dim: row width.
    """

    def __init__(self, directory: str | Path, engine: Any, *, dim: int) -> None:
        cfg, ctx = engine.train_config, engine.ctx
        self.part_offsets = np.asarray(engine.store.part_offsets, dtype=np.int64)
        self.part_to_rank = np.asarray(engine.part_to_rank, dtype=np.int64)
        self.rank, self.world_size, self.dim = ctx.rank, ctx.world_size, dim
        self.stats = engine.stats
        root, seed = Path(directory), cfg.run.seed
        self.tables = {
            p.index: NodeEmbedding(
                root / f"part_{p.index}", p.num_core, dim, seed=seed, stream=p.index + 1
            )
            for p in engine.parts
        }
        opt = SparseAdam if cfg.link.embedding_optimizer == "adam" else SparseAdagrad
        lr = cfg.link.embedding_lr or cfg.optim.lr
        self.optimizers = {i: opt(t, lr=lr) for i, t in self.tables.items()}
        self.rows = DistFeatureStore(
            part_offsets=self.part_offsets,
            part_to_rank=self.part_to_rank,
            rank=self.rank,
            world_size=self.world_size,
            local_parts={i: t.weight for i, t in self.tables.items()},
            feature_dim=dim,
            stats=self.stats,
        )

    @property
    def weights(self) -> dict[int, np.ndarray]:
        """Part -> its rows (the layer-0 inputs of an exact evaluation)."""
        return {i: t.weight for i, t in self.tables.items()}

    def pull(self, ids: np.ndarray) -> torch.Tensor:
        """The rows of ``ids`` as a leaf tensor that requires grad (collective)."""
        return self.rows.pull(np.asarray(ids, dtype=np.int64)).clone().requires_grad_()

    def push(
        self, ids: np.ndarray, grad: torch.Tensor | None
    ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Send the gradients of rows ``ids`` (divided by the number of ranks) to their owners,
        which apply one sparse update per row (collective). Returns what this rank applied:
        part -> (local rows, their summed gradients)."""
        ids = np.asarray(ids, dtype=np.int64)
        g = (
            np.zeros((len(ids), self.dim), np.float32)
            if grad is None
            else grad.detach().numpy().astype(np.float32, copy=False)
        )
        g = g / self.world_size if self.world_size > 1 else g
        owners = self.part_to_rank[owner_of(self.part_offsets, ids)] if len(ids) else ids
        here = owners == self.rank
        got_ids, got = ids[here], g[here]
        if self.world_size > 1:
            away = np.flatnonzero(~here)
            away = away[np.argsort(owners[away], kind="stable")]
            counts = np.bincount(owners[away], minlength=self.world_size)
            rid, _ = exchange(ids[away], counts, self.stats)
            rg, _ = exchange(np.ascontiguousarray(g[away]), counts, self.stats)
            got_ids = np.concatenate([got_ids, rid.numpy()])
            got = np.concatenate([got, rg.numpy()])
        part_of = owner_of(self.part_offsets, got_ids) if len(got_ids) else got_ids
        applied = {}
        for i, opt in self.optimizers.items():
            sel = part_of == i
            if sel.any():
                rows, g_rows = _unique_grad(got_ids[sel] - self.part_offsets[i], got[sel])
                opt.step(rows, torch.from_numpy(g_rows))
                applied[i] = (rows, g_rows)
        return applied

    def flush(self) -> None:
        for opt in self.optimizers.values():
            opt.flush()

    def state_tables(self) -> dict[int, dict[str, np.ndarray]]:
        """Part -> the table and its optimizer's state arrays (for checkpoints)."""
        return {i: opt.tables() for i, opt in self.optimizers.items()}
