"""What the engines that train typed stores share: the relational model, per-type rows, and
an exact evaluation (``docs/store.md``, "Typed stores"; issue 34).

:class:`TypedEngine` is an :class:`~shoal.engines.base.Engine` whose model is
:class:`~shoal.training.typed.TypedModel` (per-type inputs, then R-GCN or R-GAT layers) with
the same initial weights on every rank, and whose evaluation samples every neighbour of the
evaluated nodes per relation (fanout -1) through the distributed typed sampler, each rank
evaluating its own parts' nodes in the same number of batches, rows pulled from their owners
(:class:`~shoal.distributed.typed.DistTypedFeatures`). That is exact for these models, as the
single-process :class:`~shoal.training.typed.TypedTrainer`'s evaluation is. The engines'
epochs are their own (``engines/minibatch/typed.py``, ``engines/averaging/typed.py``); the
epoch loop, checkpoints and the result are the shared ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from shoal.distributed.typed import DistTypedFeatures, DistTypedSampler
from shoal.engines.base import Engine
from shoal.errors import ShoalInputError
from shoal.graph.blocks import MiniBatch
from shoal.nn import TYPED_MODELS
from shoal.sample.typed import TypedBatch
from shoal.training.typed import TypedModel

__all__ = ["EVAL_ROWS", "TypedEngine"]

#: the most rows of an evaluation batch before any training batch was seen
EVAL_ROWS = 1 << 16


class TypedEngine(Engine):
    """An engine of typed stores (module docstring); subclasses write the epoch."""

    reads_typed = True

    def check_typed(self) -> None:
        """Refuse what typed training does not do yet, with the reason."""
        cfg, store = self.train_config, self.store
        if cfg.model.name not in TYPED_MODELS and not cfg.model.factory:
            raise ShoalInputError(
                f"a typed store trains a relational model, not {cfg.model.name!r}",
                path=store.path,
                fix=f"use --model {' or '.join(TYPED_MODELS)}",
            )
        if cfg.model.type_embeddings == "disk":
            raise ShoalInputError(
                "--type-embeddings disk trains in one process for now (`shoal train --graph`)",
                fix="drop --type-embeddings (the engines keep the embeddings in the model)",
            )
        if self.device.type != "cpu":
            raise ShoalInputError(
                f"--device {self.device.type}: typed stores train on the CPU for now",
                fix="leave --device at cpu",
            )
        if store.num_classes is None or not store.meta.get("has_labels"):
            raise ShoalInputError(
                "the typed store has no labels",
                path=store.path,
                fix="build it from a typed graph with labels and splits on its target type",
            )

    def build_model(self, **_: Any) -> nn.Module:
        """:class:`TypedModel` with the same weights on every rank (seeded by the run's seed);
        ranks other than 0 then re-seed torch for their own dropout stream."""
        cfg = self.train_config
        torch.manual_seed(cfg.run.seed)
        model = TypedModel(self.store.schema, cfg, int(self.store.num_classes))
        if self.ctx.rank:
            torch.manual_seed(cfg.run.seed + self.ctx.rank)
        return model

    def original(self, tb: TypedBatch) -> TypedBatch:
        """``tb`` (new ids) with the graph's original ids, which the model's per-type
        embeddings are indexed by."""
        mb = tb.batch
        orig = self.store.to_orig(mb.n_id)
        return TypedBatch(MiniBatch(orig, mb.blocks, mb.num_seeds), tb.node_type, tb.edge_types)

    def open_pulls(self) -> DistTypedFeatures:
        return DistTypedFeatures(
            store=self.store,
            parts=self.parts,
            part_to_rank=self.part_to_rank,
            rank=self.ctx.rank,
            world_size=self.ctx.world_size,
            stats=self.stats,
            threads=self.train_config.memory.io_threads,
        )

    def dist_sampler(self, fanouts: list[int]) -> DistTypedSampler:
        """A distributed typed sampler over this rank's parts (collective ``sample``)."""
        return DistTypedSampler(
            store=self.store,
            parts=self.parts,
            part_offsets=self.store.part_offsets,
            part_to_rank=self.part_to_rank,
            rank=self.ctx.rank,
            world_size=self.ctx.world_size,
            fanouts=fanouts,
            degrees=self.tables.degrees,
        )

    def _eval_tools(self) -> tuple[DistTypedSampler, DistTypedFeatures]:
        if getattr(self, "_eval", None) is None:
            sampler = self.dist_sampler([-1] * self.train_config.num_layers)
            self._eval = (sampler, self.open_pulls())
        return self._eval

    #: the rows of the largest training batch seen (an evaluation batch holds at most these,
    #: or :data:`EVAL_ROWS` before any training step)
    seen_rows: int = 0

    def note_rows(self, tb: TypedBatch) -> None:
        """Remember the largest training batch (the bound of evaluation batches)."""
        self.seen_rows = max(self.seen_rows, len(tb.n_id))

    @torch.no_grad()
    def evaluate(
        self, splits: tuple[str, ...] = ("val", "test"), *, model: nn.Module | None = None
    ) -> dict[str, float]:
        """Exact accuracy on ``splits`` (every neighbour per relation). Collective.

        Each rank evaluates its parts' nodes in batches of at most ``--eval-batch-size``
        nodes and at most the rows of the largest training batch: on a power-law graph a
        fixed count of nodes can hold most of the graph two hops out, so a batch that holds
        more is dropped and sampled again at half the size (its rows are not pulled). Every
        step is collective, so the ranks go on until none has nodes left."""
        model = model if model is not None else self.model
        model.eval()
        sampler, pulls = self._eval_tools()
        cfg = self.train_config
        top = int(cfg.eval.batch_size or cfg.sampling.batch_size)
        max_rows = self.seen_rows or EVAL_ROWS
        empty = TypedBatch(
            MiniBatch(np.empty(0, np.int64), [], 0), torch.empty(0, dtype=torch.int64), []
        )
        out = {}
        for name in splits:
            ids = np.concatenate(
                [p.start + np.flatnonzero(np.asarray(p.mask(name))) for p in self.parts]
                or [np.empty(0, np.int64)]
            ).astype(np.int64)
            right, a, k = 0, 0, top
            while True:
                more = torch.tensor([float(a < len(ids))], dtype=torch.float64)
                if self.ctx.world_size > 1:
                    dist.all_reduce(more, op=dist.ReduceOp.MAX)
                if not more.item():
                    break
                seeds = ids[a : a + k]
                tb = sampler.sample(seeds)
                fits = len(tb.n_id) <= max_rows or len(seeds) <= 1
                feats = pulls.pull(tb if fits else empty)
                if not fits:  # sampled again, halved, at the next step
                    k = max(1, len(seeds) // 2)
                    continue
                if len(seeds):
                    pred = model(self.original(tb), feats).argmax(1)
                    y = torch.from_numpy(np.asarray(self.tables.labels[seeds], np.int64))
                    right += int((pred == y).sum())
                a += len(seeds)
                if 2 * len(tb.n_id) < max_rows:
                    k = min(top, 2 * k)
            agg = torch.tensor([right, len(ids)], dtype=torch.float64)
            if self.ctx.world_size > 1:
                dist.all_reduce(agg)
            out[name] = float(agg[0] / agg[1]) if agg[1] else float("nan")
        return out

    def close_io(self) -> None:
        ev = getattr(self, "_eval", None)
        if ev is not None:
            ev[1].close()
            self._eval = None

    def settings(self) -> dict[str, Any]:
        s = self.store.schema
        return {"typed": {"node_types": len(s.node_types), "relations": len(s.edge_types)}}
