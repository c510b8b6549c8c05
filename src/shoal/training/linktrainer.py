"""``LinkTrainer``: single-process link prediction on a split graph (``shoal data split-edges``).

The model (any ``model(x, blocks)``, e.g. GraphSAGE with ``out_dim = hidden``) embeds the end
nodes of each :class:`~shoal.training.linkbatches.LinkBatch`; a scorer
(:mod:`shoal.nn.linkpred`) turns pairs of embeddings into logits and a link loss compares
positives with their negatives. Evaluation follows OGB (:mod:`shoal.training.linkmetrics`):
every held-out positive ``(u, v)`` is ranked against ``eval_negatives`` pairs ``(u, w)``
with ``w`` uniform, drawn once per split from the seed (the same candidates at every
evaluation), scored from exact layer-wise embeddings. The loop, best-validation selection
(on MRR), checkpoints and the result are the shared :class:`~shoal.training.loop.EpochLoop`.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from shoal.data.format import GraphDir
from shoal.data.hetero import HeteroSchema
from shoal.errors import ShoalInputError
from shoal.nn.linkpred import build_scorer, link_loss
from shoal.nn.ondevice import on_device
from shoal.rows.gather import source_rows
from shoal.rows.source import RowSource
from shoal.rows.typed import open_typed_rows
from shoal.sample.features import FeatureGatherer
from shoal.sample.sampler import NeighborSampler
from shoal.training.batches import Timer
from shoal.training.config import TrainConfig
from shoal.training.embedding import (
    NodeEmbedding,
    SparseAdagrad,
    SparseAdam,
    load_tables,
    save_tables,
)
from shoal.training.inference import layerwise_inference
from shoal.training.link_config import LinkConfig
from shoal.training.linkbatches import LinkBatchLoader
from shoal.training.linkheuristics import heuristic_ranking_scores
from shoal.training.linkmetrics import mrr_hits
from shoal.training.loop import EpochLoop, eval_work_ratio
from shoal.training.meter import EpochMeter
from shoal.training.model import model_from_config
from shoal.training.presets import resolve_for_data
from shoal.training.result import RunResult
from shoal.utils.arrays import unique_sorted
from shoal.utils.device import get_rng_states, set_rng_states, use_device
from shoal.utils.threads import set_threads

__all__ = [
    "EVAL_CHUNK",
    "EVAL_SCORE_BYTES",
    "LinkConfig",
    "LinkData",
    "LinkTrainer",
    "eval_negative_chunk",
    "eval_negatives",
]

log = logging.getLogger(__name__)


@dataclass
class LinkData:
    """A split graph: the message-passing graph's CSR, edges and features, and the held-out
    positives. Arrays are memory maps; nothing is copied whole.

    A typed graph (``schema``) predicts one target relation (``shoal data split-edges
    --target-relation``): its features are every node type's rows in one padded source
    (:class:`~shoal.rows.typed.TypedRows`), the positives are the stored edges whose
    relation (``relations``, per edge) is ``target``, negatives are drawn among the target's
    destination type (``neg_range``, its id range), and each held-out positive is ranked
    against the split's fixed negatives (``eval_neg``, per split)."""

    indptr: np.ndarray
    indices: np.ndarray
    features: np.ndarray | RowSource | None
    edges: np.ndarray
    directed: bool
    num_nodes: int
    val_edges: np.ndarray
    test_edges: np.ndarray
    degrees: np.ndarray | None = None
    name: str = "graph"
    path: str | None = None
    schema: HeteroSchema | None = None
    relations: np.ndarray | None = None
    target: int | None = None
    neg_range: tuple[int, int] | None = None
    eval_neg: dict[str, np.ndarray] | None = None

    @property
    def feature_dim(self) -> int:
        x = self.features
        if x is None:
            return 0
        return int(x.dim if isinstance(x, RowSource) else x.shape[1])

    @classmethod
    def from_graph_dir(cls, graph: GraphDir | str | os.PathLike) -> LinkData:
        g = graph if isinstance(graph, GraphDir) else GraphDir.open(graph)
        val, test = g.link_edges("val"), g.link_edges("test")
        if val is None or test is None:
            raise ShoalInputError(
                "link prediction needs held-out edges (link_val.npy, link_test.npy)",
                path=g.path,
                fix=f"split the edges first: shoal data split-edges {g.path} --out DIR",
            )
        csr = g.csr("in")
        data = cls(
            indptr=csr.indptr,
            indices=csr.indices,
            features=g.features(),
            edges=g.edge_stream().memmap(),
            directed=g.directed,
            num_nodes=g.num_nodes,
            val_edges=val,
            test_edges=test,
            name=g.name,
            path=str(g.path),
        )
        return data if g.schema is None else data._typed(g)

    def _typed(self, g: GraphDir) -> LinkData:
        """The typed split's target relation, negatives and every type's rows."""
        split = g.meta.get("link_split") or {}
        if "target_relation_index" not in split:
            raise ShoalInputError(
                "the typed graph's link split names no target relation",
                path=g.path,
                fix="split it with shoal data split-edges --target-relation NAME",
            )
        neg = split["negatives"]
        files = {k: Path(g.path) / f for k, f in neg["files"].items()}
        self.schema = g.schema
        self.features = open_typed_rows(g)
        self.relations = g.relations()
        self.target = int(split["target_relation_index"])
        self.neg_range = (int(neg["id_range"][0]), int(neg["id_range"][1]))
        self.eval_neg = {k: np.load(f, mmap_mode="r") for k, f in files.items() if f.exists()}
        # a relation holding both directions of its pairs: each pair once, oriented at random
        self.directed = not str(split.get("pairs", "")).startswith("unordered")
        return self


#: held-out positives per block of evaluation negatives (each block has its own stream)
EVAL_CHUNK = 1 << 14
#: bytes of gathered end-node embeddings one scoring chunk of an evaluation may hold (each
#: held-out positive's K negatives need K source and K destination rows)
EVAL_SCORE_BYTES = 64 << 20


def eval_negative_chunk(
    seed: int, split: str, chunk: int, rows: int, num_nodes: int, k: int
) -> np.ndarray:
    """The ``(rows, k)`` uniform negative destinations of the held-out positives
    ``chunk * EVAL_CHUNK ...`` of ``split``: a function of ``(seed, split, chunk)`` only, so
    a distributed evaluation reading one block at a time ranks the same candidates."""
    rng = np.random.default_rng([seed, 0xE7A1, {"val": 1, "test": 2}[split], chunk])
    return rng.integers(0, num_nodes, size=(rows, k))


def eval_negatives(seed: int, split: str, num_pos: int, num_nodes: int, k: int) -> np.ndarray:
    """The ``(num_pos, k)`` uniform negative destinations of a held-out split: a function of
    ``(seed, split)`` only, so every evaluation and every baseline ranks the same candidates
    (blocks of :func:`eval_negative_chunk`)."""
    blocks = [
        eval_negative_chunk(seed, split, c, min(EVAL_CHUNK, num_pos - s), num_nodes, k)
        for c, s in enumerate(range(0, num_pos, EVAL_CHUNK))
    ]
    return np.concatenate(blocks) if blocks else np.empty((0, k), np.int64)


class LinkTrainer:
    """Single-process link prediction (module docstring); :meth:`fit` returns a
    :class:`RunResult` whose selection metric is the validation MRR."""

    metric = "mrr"

    def __init__(
        self, config: TrainConfig, link: LinkConfig, data: LinkData, model: nn.Module | None = None
    ) -> None:
        config = resolve_for_data(config, train_nodes=len(data.edges), features=data.features)
        self.config, self.link, self.data = config, link, data
        set_threads(config.run.threads)
        torch.manual_seed(config.run.seed)
        self.embedding, self.embedding_opt = self._embedding(config, link, data)
        normalize = config.model.normalize_features
        if self.embedding is not None:
            gatherer = self.embedding
        elif isinstance(data.features, RowSource):  # a typed graph's padded rows
            gatherer = SourceGatherer(data.features, normalize=normalize)
        else:
            gatherer = FeatureGatherer(data.features, normalize=normalize)
        in_dim = link.embedding_dim or data.feature_dim
        self.device = use_device(config.run.device)
        self.model = model or model_from_config(
            config, in_dim=in_dim, out_dim=config.model.hidden, schema=data.schema
        )
        self.scorer = build_scorer(link.scorer, config.model.hidden, dropout=config.model.dropout)
        self.model, self.scorer = self.model.to(self.device), self.scorer.to(self.device)
        #: what best-validation selection keeps and restores: the encoder and the scorer
        self.selected_module = nn.ModuleDict({"encoder": self.model, "scorer": self.scorer})
        params = list(self.model.parameters()) + list(self.scorer.parameters())
        self.optimizer = torch.optim.Adam(
            params, lr=config.optim.lr, weight_decay=config.optim.weight_decay
        )
        self.timer = Timer()
        sampler = NeighborSampler(
            data.indptr,
            data.indices,
            config.sampling.fanouts,
            num_nodes=data.num_nodes,
            schema=data.schema,
        )
        self.loader = LinkBatchLoader(
            sampler,
            gatherer,
            data.edges,
            directed=data.directed,
            num_nodes=data.num_nodes,
            batch_size=config.sampling.batch_size,
            num_neg=link.num_neg,
            negatives=link.negatives,
            seed=config.run.seed,
            timer=self.timer,
            relations=data.relations,
            target=data.target,
            neg_range=data.neg_range,
        )
        self.num_batches = 0
        self._eval_neg: dict[str, np.ndarray] = {}

    @staticmethod
    def _embedding(config: TrainConfig, link: LinkConfig, data: LinkData):
        """The learnable input table and its sparse optimizer (``embedding_dim > 0``); its
        rows become ``data.features`` for evaluation."""
        if link.embedding_dim and data.schema is not None:
            raise ShoalInputError(
                "--embedding-dim on a typed graph: a featureless node type learns its rows "
                "in the model already",
                path=data.path,
                fix="drop --embedding-dim (--type-embeddings disk keeps them on disk)",
            )
        if not link.embedding_dim:
            if data.features is None:
                raise ShoalInputError(
                    "the graph has no features.npy",
                    path=data.path,
                    fix="learn an embedding per node instead: --embedding-dim 64",
                )
            return None, None
        where = Path(link.embedding_dir or f"{data.path}.emb")
        if (where / "embedding.npy").exists() and not config.checkpoint.resume:
            raise ShoalInputError(
                "an embedding table from another run is there",
                path=where,
                fix="remove it, pass --embedding-dir elsewhere, or --resume to continue it",
            )
        emb = NodeEmbedding(where, data.num_nodes, link.embedding_dim, seed=config.run.seed)
        lr = link.embedding_lr or config.optim.lr
        opt = (
            SparseAdam(emb, lr=lr)
            if link.embedding_optimizer == "adam"
            else SparseAdagrad(emb, lr=lr)
        )
        data.features = emb.weight
        return emb, opt

    def train_epoch(self, epoch: int) -> dict[str, Any]:
        self.model.train()
        self.scorer.train()
        meter = EpochMeter(
            epoch, self.num_batches or None, enable=self.config.run.progress, timer=self.timer
        )
        steps = 0
        for b in self.loader.epoch(epoch):
            with meter.time("forward_backward"):
                self.optimizer.zero_grad(set_to_none=True)
                x, blocks, bp, bn = self._on_device(b)
                h = self.model(x, blocks)
                pos = self.scorer(h[bp[0]], h[bp[1]])
                neg = self.scorer(h[bn[0]], h[bn[1]]).view(len(pos), b.num_neg)
                loss = link_loss(self.link.loss, pos, neg, margin=self.link.margin)
                loss.backward()
                self.optimizer.step()
                if self.embedding_opt is not None:
                    self.embedding_opt.step(b.mb.n_id, x.grad.cpu())
            meter.step_sums(float(loss.detach()) * len(pos), 0, len(pos))
            steps += 1
        self.num_batches = steps
        if self.embedding_opt is not None:
            self.embedding_opt.flush()
        return {**meter.record(), "train_accuracy": None}

    def _on_device(self, b):
        """The batch's inputs, blocks and positions on the model's device (the learned
        rows as a leaf there, whose gradient the sparse optimizer reads back)."""
        # a typed graph's blocks carry their sources' ids (a featureless type's rows)
        blocks = b.mb.with_node_ids() if b.mb.typed else b.mb.blocks
        if self.device.type == "cpu":
            return b.x, blocks, b.pos, b.neg
        x = b.x.detach().to(self.device).requires_grad_(b.x.requires_grad)
        return (
            x,
            [blk.to(self.device) for blk in blocks],
            b.pos.to(self.device),
            b.neg.to(self.device),
        )

    def _negatives(self, split: str, pos: np.ndarray) -> np.ndarray:
        if self.data.eval_neg and split in self.data.eval_neg:  # the typed split's, fixed
            return np.asarray(self.data.eval_neg[split], np.int64)
        if split not in self._eval_neg:  # drawn once per split: the same at every evaluation
            self._eval_neg[split] = eval_negatives(
                self.config.run.seed, split, len(pos), self.data.num_nodes, self.link.eval_negatives
            )
        return self._eval_neg[split]

    def evaluate(self, splits: tuple[str, ...]) -> dict[str, float]:
        """MRR per split (and ``<split>_hits@K``) from exact layer-wise embeddings."""
        out: dict[str, float] = {}
        for s, (sp, sq) in self.scores(splits).items():
            m = mrr_hits(sp, sq, ks=(self.link.hits_k,))
            out[s] = m["mrr"]
            out[f"{s}_hits@{self.link.hits_k}"] = m[f"hits@{self.link.hits_k}"]
        return out

    @torch.no_grad()
    def scores(self, splits: tuple[str, ...]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Per split, the scores of its held-out positives ``(n,)`` and of each one's
        negatives ``(n, K)`` from exact layer-wise embeddings (what :meth:`evaluate` ranks)."""
        self.scorer.eval()
        held = {
            s: np.asarray(
                self.data.val_edges if s == "val" else self.data.test_edges, dtype=np.int64
            )
            for s in splits
        }
        negs = {s: self._negatives(s, held[s]) for s in splits}
        nodes = unique_sorted(
            np.concatenate([x.ravel() for s in splits for x in (held[s], negs[s])])
        )
        scorer = on_device(self.scorer, self.device)
        if self.data.schema is not None and not len(nodes):
            return {s: (torch.empty(0), torch.empty((0, negs[s].shape[1]))) for s in splits}
        emb = torch.from_numpy(
            layerwise_inference(
                on_device(self.model, self.device),
                self.data,
                nodes,
                normalize_features=self.config.model.normalize_features and self.embedding is None,
                batch_size=self.config.eval.batch_size,
                scratch_dir=self.config.memory.scratch_dir,
            )
        )
        return {s: _score_held_out(scorer, emb, nodes, held[s], negs[s]) for s in splits}

    def state(self) -> dict[str, Any]:
        """Weights, optimizer and RNG; a learned table is copied into the checkpoint
        directory (``embedding/``) beside them."""
        snap = self.embedding_opt is not None and bool(self.config.checkpoint.dir)
        if snap:
            save_tables(self.embedding_opt.tables(), Path(self.config.checkpoint.dir) / "embedding")
        return {
            "model": self.model.state_dict(),
            "scorer": self.scorer.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "torch_rng": get_rng_states(self.device),
            "embedding_snapshot": snap,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.scorer.load_state_dict(state["scorer"])
        self.optimizer.load_state_dict(state["optimizer"])
        set_rng_states(state["torch_rng"], self.device)
        if state.get("embedding_snapshot") and self.embedding_opt is not None:
            load_tables(self.embedding_opt.tables(), Path(self.config.checkpoint.dir) / "embedding")

    def eval_work_ratio(self) -> float:
        """Estimated work of an exact evaluation over an epoch's (``--eval-every auto``): an
        epoch's seeds are every positive's two ends and its negatives."""
        edges = len(self.data.edges)
        if self.data.relations is not None:  # the target relation's edges only
            edges = int(self.data.schema.edge_types[self.data.target].count or edges)
        pos = edges // (1 if self.data.directed else 2)
        return eval_work_ratio(
            num_nodes=self.data.num_nodes,
            num_edges=len(self.data.edges),
            num_seeds=pos * (2 + self.link.num_neg),
            fanouts=self.config.sampling.fanouts,
        )

    def fit(self) -> RunResult:
        """Train and evaluate (the best validation epoch), then score the ``baseline``
        heuristic on the test edges (``metrics["baseline_test_mrr"]`` and its Hits@K)."""
        settings = {"task": "link", **{f"link_{k}": v for k, v in vars(self.link).items()}}
        result = EpochLoop(
            self, self.config, identity={"task": "link", "name": self.data.name}, settings=settings
        ).fit()
        if self.link.baseline != "none":
            t0 = time.perf_counter()
            pos = np.asarray(self.data.test_edges, np.int64)
            sp, sq = heuristic_ranking_scores(
                self.data.indptr,
                self.data.indices,
                pos,
                self._negatives("test", pos),
                self.link.baseline,
            )
            m = mrr_hits(sp, sq, ks=(self.link.hits_k,))
            result.metrics["baseline_test_mrr"] = m["mrr"]
            result.metrics[f"baseline_test_hits@{self.link.hits_k}"] = m[f"hits@{self.link.hits_k}"]
            log.info(
                "%s on the test edges: MRR %.4f (%.1fs)",
                self.link.baseline,
                m["mrr"],
                time.perf_counter() - t0,
            )
        return result


class SourceGatherer:
    """Rows of a batch's nodes from a row source (a typed graph's padded rows), by one
    planned read of their sorted ids; row-normalised with ``normalize``."""

    def __init__(self, src: RowSource, *, normalize: bool = False) -> None:
        self.src, self.normalize = src, bool(normalize)

    def gather(self, ids: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(source_rows(self.src, np.asarray(ids), normalize=self.normalize))


def _score_held_out(
    scorer: nn.Module, emb: torch.Tensor, nodes: np.ndarray, pos: np.ndarray, neg: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor]:
    """The scores of held-out positives ``pos`` ``(n, 2)`` ``(n,)`` and of each one's negative
    destinations ``neg`` ``(n, K)`` ``(n, K)``, from the embeddings ``emb`` of the sorted
    ``nodes``; in chunks of positives whose gathered rows stay within
    :data:`EVAL_SCORE_BYTES` (the scores are the same: each pair is scored on its own)."""
    k, width = neg.shape[1], int(emb.shape[1]) if emb.ndim == 2 else 1
    rows = max(1, EVAL_SCORE_BYTES // max(1, 2 * 4 * width * (k + 1)))
    sp_parts, sq_parts = [], []
    for a in range(0, max(len(pos), 1), rows):
        p, q = pos[a : a + rows], neg[a : a + rows]
        u = torch.from_numpy(np.searchsorted(nodes, p[:, 0]))
        sp_parts.append(
            scorer(emb[u], emb[torch.from_numpy(np.searchsorted(nodes, p[:, 1]))]).cpu()
        )
        uq = u.repeat_interleave(k)
        sq = scorer(emb[uq], emb[torch.from_numpy(np.searchsorted(nodes, q.ravel()))])
        sq_parts.append(sq.view(len(p), k).cpu())
    return torch.cat(sp_parts), torch.cat(sq_parts)
