"""``minibatch`` with ``--task link``: DistDGL's synchronous mini-batch SGD with edges as seeds.

The node task's engine (:mod:`shoal.engines.minibatch.engine`, DistDGL, Zheng et al. IA3 2020,
Section 3) with the link task's batches (:mod:`shoal.training.linkbatches`):

1. every rank takes the positive edges of its own parts (the in-edges of its core nodes,
   :class:`~shoal.engines.minibatch.linkdata.RankPositives`), block-shuffled, in the same number of
   batches as every other rank;
2. negatives per positive (``--num-neg``): ``uniform`` over all nodes (default: the
   single-process distribution), ``in-batch``, or ``owner-local`` (uniform over the rank's own
   core nodes, whose rows need no exchange);
3. the blocks of every end node are sampled where the data lives
   (:class:`~shoal.distributed.DistNeighborSampler`) with the batch's positive edges and their
   reverses excluded at every hop, at their owners too (no leakage);
4. input rows are pulled from their owners: the store's features, or learnable rows
   (``--embedding-dim``) held and updated sparsely by their owners
   (:class:`~shoal.engines.minibatch.linkdata.DistEmbedding`, DistDGL's ``DistEmbedding`` and
   sparse optimizers, Section 3);
5. the encoder and the scorer (:class:`~shoal.nn.linkpred.LinkNet`) get the ranks' averaged
   gradients (one all-reduce per step) and one Adam step.

Evaluation is exact and distributed (:mod:`shoal.engines.minibatch.linkeval`): every rank embeds its
core nodes layer by layer, held-out edges are ranked by the owner of their source against the
single-process trainer's negatives (the same MRR for the same weights). The epoch loop,
best-validation selection (on MRR), checkpoints and the result are the shared ones.

Not yet: the budgeted feature store and windows read ahead of the node task (rows are pulled
through memory maps), and models that are not sums of messages (GAT, ``--model-factory``).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from shoal.distributed import DistFeatureStore, DistNeighborSampler
from shoal.engines.base import Engine
from shoal.engines.minibatch.linkdata import DistEmbedding, RankPositives, owner_local_negatives
from shoal.engines.minibatch.linkeval import dist_link_metrics, dist_node_embeddings
from shoal.errors import ShoalInputError
from shoal.nn.linkpred import LinkNet, build_scorer, link_loss
from shoal.nn.ondevice import on_device
from shoal.training import TrainConfig, batch_seed
from shoal.training.blocked import sum_layers
from shoal.training.embedding import load_tables, save_tables
from shoal.training.inference import BLOCKED_BUDGET, Scratch
from shoal.training.link_config import LinkConfig
from shoal.training.linkbatches import draw_negatives
from shoal.training.loop import eval_work_ratio
from shoal.utils.arrays import unique_sorted

__all__ = ["LinkMinibatchEngine"]


def _positions(nodes: np.ndarray, pos: np.ndarray, neg_dst: np.ndarray):
    """``(2, B)`` positive and ``(2, B * K)`` negative edges as positions in ``nodes``."""
    at = lambda a: torch.from_numpy(np.searchsorted(nodes, a))  # noqa: E731
    src = np.repeat(pos[:, 0], neg_dst.shape[1])
    return (
        torch.stack([at(pos[:, 0]), at(pos[:, 1])]),
        torch.stack([at(src), at(neg_dst.ravel())]),
    )


class LinkMinibatchEngine(Engine):
    """Distributed link prediction (module docstring). ``link``: the task's options."""

    name = "minibatch"
    global_batch = True  # synchronous SGD: the step's batch is every rank's
    task = "link"
    metric = "mrr"
    accepts_factory_models = False

    def __init__(self, store, config: TrainConfig, ctx, *, link: LinkConfig | None = None) -> None:
        super().__init__(store, config, ctx)
        self.link = link or config.link
        cfg, ctx = self.train_config, self.ctx
        self._check_inputs()
        self.positives = RankPositives(
            self.parts, directed=bool(store.meta["directed"]), rank=ctx.rank
        )
        most = torch.tensor([self.positives.count], dtype=torch.int64)
        total = most.clone()
        if ctx.world_size > 1:
            dist.all_reduce(most, op=dist.ReduceOp.MAX)
            dist.all_reduce(total)
        self.num_batches = max(1, math.ceil(int(most) / cfg.sampling.batch_size))
        self.total_positives = int(total)
        self.sampler = DistNeighborSampler(
            parts=self.parts,
            part_offsets=store.part_offsets,
            part_to_rank=self.part_to_rank,
            rank=ctx.rank,
            world_size=ctx.world_size,
            fanouts=cfg.sampling.fanouts,
            degrees=self.tables.degrees,
            stats=self.stats,
        )
        self.embedding: DistEmbedding | None = None
        if self.link.embedding_dim:
            self.embedding = DistEmbedding(
                Path(self.link.embedding_dir or f"{store.path}.emb"),
                parts=self.parts,
                part_offsets=store.part_offsets,
                part_to_rank=self.part_to_rank,
                rank=ctx.rank,
                world_size=ctx.world_size,
                dim=self.link.embedding_dim,
                seed=cfg.run.seed,
                optimizer=self.link.embedding_optimizer,
                lr=self.link.embedding_lr or cfg.optim.lr,
                stats=self.stats,
            )
        else:
            self.features = DistFeatureStore(
                part_offsets=store.part_offsets,
                part_to_rank=self.part_to_rank,
                rank=ctx.rank,
                world_size=ctx.world_size,
                local_parts={p.index: p.features for p in self.parts},
                feature_dim=int(store.feature_dim),
                stats=self.stats,
            )
        in_dim = self.link.embedding_dim or int(store.feature_dim)
        # the encoder, then the scorer, from the run's seed (as the single-process trainer
        # draws them: the same weights on every rank), then the rank's own dropout stream
        encoder = self.build_model(in_dim=in_dim, out_dim=cfg.model.hidden, rank=0)
        if sum_layers(encoder) is None:
            raise ShoalInputError(
                f"--task link on the {self.name} engine evaluates layer by layer and needs a "
                f"model whose layers sum messages; {cfg.model.name} does not",
                fix="use --model sage, gcn, gin or sgc, or train GAT link prediction in one "
                "process (--graph)",
            )
        scorer = build_scorer(self.link.scorer, cfg.model.hidden, dropout=cfg.model.dropout)
        if ctx.rank:
            torch.manual_seed(cfg.run.seed + ctx.rank)
        self.model = LinkNet(encoder, scorer).to(self.device)
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay
        )

    def _check_inputs(self) -> None:
        store, link = self.store, self.link
        if store.link_edges("val") is None or store.link_edges("test") is None:
            raise ShoalInputError(
                "--task link needs held-out edges in the store (link_val.npy, link_test.npy)",
                path=store.path,
                fix="split the edges first (shoal data split-edges G --out G-link), then "
                "partition G-link and build the store from it",
            )
        if not link.embedding_dim and store.feature_dim is None:
            raise ShoalInputError(
                "the store has no features",
                path=store.path,
                fix="learn an embedding per node instead: --embedding-dim 64",
            )
        if (
            link.embedding_dim
            and self.link.embedding_dir is None
            and not self.train_config.checkpoint.resume
        ):
            if Path(f"{store.path}.emb").exists():
                raise ShoalInputError(
                    "an embedding table from another run is there",
                    path=f"{store.path}.emb",
                    fix="remove it, pass --embedding-dir elsewhere, or --resume to continue it",
                )

    # ---------------------------------------------------------------- one step
    def _negatives(self, pos: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        k, how = self.link.num_neg, self.link.negatives
        if how == "owner-local":
            return owner_local_negatives(pos, k, self.parts, rng)
        if how == "in-batch" and len(pos) < 2:  # a rank's last batch may be that small
            how = "uniform"
        return draw_negatives(pos, self.store.num_nodes, k, how, rng)

    def _inputs(self, n_id: np.ndarray) -> torch.Tensor:
        if self.embedding is not None:
            return self.embedding.pull(n_id)
        x = self.features.pull(n_id).clone()  # the pull's buffer is reused by the next one
        if self.train_config.model.normalize_features:
            s = x.sum(1, keepdim=True)
            x = torch.where(s != 0, x / torch.where(s != 0, s, 1.0), x)
        return x

    def train_step(
        self,
        batches: list[tuple[np.ndarray, np.ndarray]],
        seed: int,
        timer: dict[str, float] | None = None,
    ) -> tuple[float, int]:
        """One synchronous step on this rank's ``batches`` (``(B, 2)`` positives, ``(B, K)``
        negative destinations each): the mean of their losses, gradients averaged over ranks,
        one Adam step and the embedding rows' updates at their owners. Collective; returns
        (sum of the batches' losses weighted by positives, positives)."""
        timer = timer if timer is not None else {}
        self.optimizer.zero_grad(set_to_none=True)
        ids, leaves, loss_sum, n = [], [], 0.0, 0
        total = None
        for i, (pos, neg_dst) in enumerate(batches):
            t0 = time.perf_counter()
            nodes = unique_sorted(np.concatenate([pos.ravel(), neg_dst.ravel()]))
            mb = self.sampler.sample(nodes, seed + i, exclude=np.concatenate([pos, pos[:, ::-1]]))
            t1 = time.perf_counter()
            x = self._inputs(mb.n_id)
            t2 = time.perf_counter()
            p, q = _positions(nodes, pos, neg_dst)
            xd, blocks = x, mb.blocks
            if self.device.type != "cpu":  # learned rows: a leaf on the device, its gradient
                xd = x.detach().to(self.device).requires_grad_(x.requires_grad)  # comes back
                blocks = [b.to(self.device) for b in blocks]
                p, q = p.to(self.device), q.to(self.device)
            ps, ns = self.model(xd, blocks, p, q)
            if len(pos):
                loss = link_loss(self.link.loss, ps, ns.view(len(pos), -1), margin=self.link.margin)
                loss_sum, n = loss_sum + float(loss.detach()) * len(pos), n + len(pos)
            else:  # a rank without positives still takes part in the all-reduce
                loss = ps.sum() * 0.0 + ns.sum() * 0.0
            total = loss if total is None else total + loss
            ids.append(mb.n_id)
            leaves.append(xd)
            timer["sampling"] = timer.get("sampling", 0.0) + t1 - t0
            timer["gather"] = timer.get("gather", 0.0) + t2 - t1
        t3 = time.perf_counter()
        (total / max(len(batches), 1)).backward()
        self.all_reduce_gradients(average=True)
        self.optimizer.step()
        if self.embedding is not None:
            grads = [x.grad if x.grad is not None else torch.zeros_like(x) for x in leaves]
            self.last_push = self.embedding.push(np.concatenate(ids), torch.cat(grads).cpu())
        timer["forward_backward"] = timer.get("forward_backward", 0.0) + time.perf_counter() - t3
        return loss_sum, n

    # ---------------------------------------------------------------- Trainable
    def train_epoch(self, epoch: int) -> dict[str, Any]:
        cfg = self.train_config
        meter = self.start_epoch(epoch)
        for step, pos in enumerate(self.positives.epoch(cfg.run.seed, epoch, self.num_batches)):
            seed = batch_seed(cfg.run.seed, epoch, step) + self.ctx.rank
            neg = self._negatives(pos, np.random.default_rng(seed))
            s, n = self.train_step([(pos, neg)], seed, meter.phases)
            meter.step_sums(s, 0, n)
        if self.embedding is not None:
            self.embedding.flush()
        rec = self.epoch_record(**meter.close())
        rec["train_accuracy"] = None
        return rec

    def evaluate(
        self, splits: tuple[str, ...] = ("val", "test"), *, model: torch.nn.Module | None = None
    ) -> dict[str, float]:
        """MRR per split (and ``<split>_hits@K``) from exact distributed embeddings."""
        cfg, net = self.train_config, model if model is not None else self.model
        if self.embedding is not None:
            self.embedding.flush()
        inputs = self.embedding.weights if self.embedding is not None else None
        out: dict[str, float] = {}
        with Scratch(cfg.memory.scratch_dir, beside=self.store.path) as scratch:
            emb = dist_node_embeddings(
                on_device(net.encoder, self.device),
                self.store,
                self.parts,
                self.part_to_rank,
                self.ctx,
                self.tables,
                width=cfg.model.hidden,
                scratch=scratch,
                budget=BLOCKED_BUDGET,
                inputs=inputs,
                normalize=cfg.model.normalize_features and inputs is None,
                threads=cfg.memory.io_threads,
            )
            for s in splits:
                mrr, hits = dist_link_metrics(
                    on_device(net.scorer, self.device),
                    emb,
                    self.store,
                    self.part_to_rank,
                    self.ctx,
                    split=s,
                    seed=cfg.run.seed,
                    num_neg=self.link.eval_negatives,
                    hits_k=self.link.hits_k,
                    width=cfg.model.hidden,
                )
                out[s], out[f"{s}_hits@{self.link.hits_k}"] = mrr, hits
        return out

    def state(self) -> dict[str, Any]:
        """The base state; learned rows and their optimizer state are copied into the
        checkpoint directory (``embedding/part_<i>``), each rank its own parts."""
        st = super().state()
        snap = self.embedding is not None and bool(self.train_config.checkpoint.dir)
        if snap:
            self.embedding.flush()
            root = Path(self.train_config.checkpoint.dir) / "embedding"
            for i, tables in self.embedding.state_tables().items():
                save_tables(tables, root / f"part_{i}")
        return {**st, "embedding_snapshot": snap}

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        if state.get("embedding_snapshot") and self.embedding is not None:
            root = Path(self.train_config.checkpoint.dir) / "embedding"
            for i, tables in self.embedding.state_tables().items():
                load_tables(tables, root / f"part_{i}")

    def eval_work_ratio(self) -> float:
        """As the base's, with an epoch's seeds = every positive's ends and negatives."""
        return eval_work_ratio(
            num_nodes=self.store.num_nodes,
            num_edges=self.store.num_edges,
            num_seeds=self.total_positives * (2 + self.link.num_neg),
            fanouts=self.train_config.sampling.fanouts,
        )

    def settings(self) -> dict[str, Any]:
        return {"task": "link", **{f"link_{k}": v for k, v in vars(self.link).items()}}
