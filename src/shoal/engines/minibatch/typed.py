"""``minibatch`` on a typed store: DistDGL's synchronous mini-batch SGD with a fanout per relation.

The untyped engine's steps (:mod:`shoal.engines.minibatch.engine`; Zheng et al., IA3 2020,
Section 3), with types:

1. the two-level split of the target type's training nodes (every rank the same number of
   batches);
2. each batch sampled where the data lives, a fanout per relation per hop
   (:class:`~shoal.distributed.typed.DistTypedSampler`; DGL's distributed
   ``sample_neighbors`` on a heterogeneous graph);
3. each node type's input rows pulled from their owners
   (:class:`~shoal.distributed.typed.DistTypedFeatures`, one exchange per type with features);
4. the relational model (:class:`~shoal.training.typed.TypedModel`: R-GCN or R-GAT) forward
   and backward, the gradients averaged over ranks in one flattened all-reduce (a relation
   absent from a batch leaves some weights without a gradient, which
   ``DistributedDataParallel`` would refuse), then Adam.

With one process and a one-part store the batches equal the single-process
:class:`~shoal.training.typed.TypedTrainer`'s (same shuffling, batch seeds and draws), so the
accuracy is the single-process one. Not yet here: the memory budget (rows are read as each
batch needs them, by planned direct reads, without a cache or windows).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from shoal.distributed.typed import DistTypedSampler
from shoal.engines.minibatch.engine import rank_share
from shoal.engines.typed import TypedEngine
from shoal.training import batch_seed

__all__ = ["TypedMinibatchEngine"]


class TypedMinibatchEngine(TypedEngine):
    """DistDGL-style synchronous mini-batch training of a typed store (module docstring)."""

    name = "minibatch"
    global_batch = True  # synchronous SGD: the step's batch is every rank's
    tables_scope = "local"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.check_typed()
        cfg, store, ctx = self.train_config, self.store, self.ctx
        self.seeds, self.num_batches = rank_share(self)
        self.sampler = DistTypedSampler(
            store=store,
            parts=self.parts,
            part_offsets=store.part_offsets,
            part_to_rank=self.part_to_rank,
            rank=ctx.rank,
            world_size=ctx.world_size,
            fanouts=cfg.sampling.fanouts,
            degrees=self.tables.degrees,
            stats=self.stats,
        )
        self.pulls = self.open_pulls()
        self.model = self.build_model()
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay
        )

    def train_epoch(self, epoch: int) -> dict[str, Any]:
        cfg = self.train_config
        meter = self.start_epoch(epoch)
        for step, seeds in enumerate(self.epoch_batches(epoch)):
            with meter.time("sampling"):
                # the batch seed depends on the rank too, so ranks draw different samples
                tb = self.sampler.sample(
                    seeds, batch_seed(cfg.run.seed, epoch, step) + self.ctx.rank
                )
                self.note_rows(tb)
            with meter.time("gather"):
                feats = self.pulls.pull(tb)
                y = torch.from_numpy(np.asarray(self.tables.labels[seeds], np.int64))
            with meter.time("forward_backward"):
                self.optimizer.zero_grad(set_to_none=True)
                out = self.model(self.original(tb), feats)
                loss = F.cross_entropy(out, y) if len(y) else out.sum() * 0.0
                loss.backward()
                self.all_reduce_gradients(average=True)
                self.optimizer.step()
            n = len(y)
            ok = int((out.detach().argmax(1) == y).sum()) if n else 0
            meter.step(float(loss.detach()), ok, n)
        return self.epoch_record(**meter.close())

    def close_io(self) -> None:
        super().close_io()
        if getattr(self, "pulls", None) is not None:
            self.pulls.close()
            self.pulls = None
