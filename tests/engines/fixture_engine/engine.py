"""The trivial engine: local synchronous SGD, written from the ``Engine`` interface alone.

Each rank samples its batches inside its own parts (halo nodes are leaves: nothing is sampled
or pulled from another rank), reads the rows of the part's core and halo nodes from the
store, and all-reduces the gradients every step; the learning rate is scaled by
``--trivial-lr-scale``. It trains both tasks on both kinds of store through the seams every
engine shares: the node task's training nodes and cross entropy, or the link task's steps
(:mod:`shoal.engines.linktask`, ``link_scope = "part"``: the edges inside each part) and loss;
evaluation, the epoch loop and checkpoints are inherited.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn import functional as F

from shoal.engines.averaging.engine import stored_rows
from shoal.engines.base import Engine
from shoal.rows.gather import source_rows
from shoal.sample.sampler import NeighborSampler
from shoal.training import batch_seed


class TrivialEngine(Engine):
    name = "trivial"
    tables_scope = "local"  # its own and halo nodes: it samples inside its parts
    link_scope = "part"

    def __init__(self, store, config, ctx) -> None:
        super().__init__(store, config, ctx)
        cfg, typed = self.train_config, store.schema is not None
        self.samplers, self.rows, self.local = {}, {}, {}
        for p in self.parts:
            ids = np.concatenate([p.core_ids, np.asarray(p.halo_ids, dtype=np.int64)])
            self.local[p.index] = ids  # local index -> global id
            self.rows[p.index] = stored_rows(p)
            self.samplers[p.index] = NeighborSampler(
                p.indptr,
                p.indices,
                cfg.sampling.fanouts,
                num_nodes=p.num_nodes,
                degrees=self.tables.degrees[ids],
                schema=store.schema,
                node_type=store.type_of(ids) if typed else None,
                edge_types=np.asarray(p.edge_types) if typed else None,
            )
        if self.link is None:
            self.seeds = np.concatenate(
                [p.core_ids[np.asarray(p.train_mask)] for p in self.parts] or [[]]
            ).astype(np.int64)
            steps = torch.tensor([math.ceil(len(self.seeds) / cfg.sampling.batch_size)])
            if ctx.world_size > 1:
                dist.all_reduce(steps, op=dist.ReduceOp.MAX)
            self.num_batches = max(int(steps), 1)
        else:
            self.num_batches = self.link.num_batches
        in_dim = int(store.feature_dim) if store.feature_dim is not None else None
        self.model = self.build_model(in_dim=in_dim)
        lr = cfg.optim.lr * self.options.trivial_lr_scale
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=lr, weight_decay=cfg.optim.weight_decay
        )

    def _outputs(self, nodes: np.ndarray, seed: int, exclude: np.ndarray | None) -> torch.Tensor:
        """The model's outputs for the global ``nodes`` (each a core node of one of the
        rank's parts), in their order: one sampled batch per part."""
        h = None
        owner = self.store.owner(nodes) if len(nodes) else nodes
        for p in self.parts:
            at = np.flatnonzero(owner == p.index)
            if not len(at):
                continue
            ex = None
            if exclude is not None:  # the edges whose destination is in this part
                e = exclude[self.store.owner(exclude[:, 1]) == p.index]
                ex = e - p.start  # both ends inside the part (link_scope "part")
            mb = self.samplers[p.index].sample(nodes[at] - p.start, seed, exclude=ex)
            x = torch.from_numpy(_gather(self.rows[p.index], np.asarray(mb.n_id), p.num_core))
            blocks = mb.blocks
            if self.store.schema is not None:  # a featureless type's rows by original id
                blocks = mb.with_node_ids(self.store.to_orig(self.local[p.index][mb.n_id]))
            out = self.model(x, blocks)
            if h is None:
                h = out.new_zeros((len(nodes), out.shape[1]))
            h = h.index_put((torch.from_numpy(at),), out)
        return h

    def _loss(self, epoch: int, step: int, item: Any) -> tuple[torch.Tensor | None, float, int]:
        """A step's loss (None: nothing to train here), its sum over seeds, its seeds."""
        if self.link is not None:
            h = self._outputs(item.nodes, item.seed, item.exclude)
            if h is None:
                return None, 0.0, 0
            loss = self.link.loss(self.model, h, item)
            return loss, float(loss.detach()) * len(item), len(item)
        if not len(item):
            return None, 0.0, 0
        seed = batch_seed(self.train_config.run.seed, epoch, step) + self.ctx.rank
        h = self._outputs(item, seed, None)
        y = torch.from_numpy(self.tables.labels[item].astype(np.int64))
        loss = F.cross_entropy(h, y)
        return loss, float(loss.detach()) * len(item), len(item)

    def train_epoch(self, epoch: int) -> dict[str, Any]:
        meter = self.start_epoch(epoch)
        if self.link is not None:
            items = self.link.steps(epoch)
        else:
            items = self.epoch_batches(epoch)
        for step, item in enumerate(items):
            with meter.time("forward_backward"):
                self.optimizer.zero_grad(set_to_none=True)
                loss, total, n = self._loss(epoch, step, item)
                if loss is not None:
                    loss.backward()
                self.all_reduce_gradients(average=True)  # every rank, every step
                self.optimizer.step()
            meter.step_sums(total, 0, n)
        return self.epoch_record(**meter.close())

    def settings(self) -> dict[str, Any]:
        return {"trivial_lr_scale": self.options.trivial_lr_scale}


def _gather(rows: Any, ids: np.ndarray, num_core: int) -> np.ndarray:
    """Rows ``ids`` (local indices) of a part: a typed part's row source, or an untyped part's
    core rows then halo rows."""
    if not isinstance(rows, list):
        return source_rows(rows, ids)
    out = np.empty((len(ids), rows[0].shape[1]), np.float32)
    core = ids < num_core
    out[core] = rows[0][ids[core]]
    if (~core).any():
        out[~core] = rows[1][ids[~core] - num_core]
    return out
