"""Single-process training of a relational model on a typed graph: :class:`TypedTrainer`.

The typed counterpart of :class:`~shoal.training.trainer.Trainer`, run by the same
:class:`~shoal.training.loop.EpochLoop` (evaluation cadence, best weights, early stopping,
checkpoints, the result): seeds are the target type's training nodes in shuffled batches,
:class:`~shoal.sample.typed.TypedNeighborSampler` draws each hop's fanout per relation, each
node type's rows are read from its own feature file with planned direct reads
(:func:`~shoal.rows.opener.open_rows`: sorted, coalesced, ``O_DIRECT``; never the page cache),
and :class:`~shoal.nn.hetero.TypedInput` maps them (or a featureless type's embedding rows) to
the model's width before the relational layers (:class:`~shoal.nn.hetero.RGCN`,
:class:`~shoal.nn.hetero.RGAT`).

Evaluation is exact and layer-wise (:mod:`shoal.training.typed_inference`): each layer once
for every node from the previous layer's outputs of its one-hop neighbours, every neighbour per
relation, in chunks no larger than a training batch; the same outputs as a full-neighbourhood
forward pass (``tests/training/test_typed.py``), without holding any node's whole L-hop
neighbourhood. Memory (``--memory``, default the machine's or cgroup's limit): a plan measured
on the process with its model (:func:`~shoal.rows.budget.plan_budget`) keeps the neighbour
lists in memory when they fit and gives the rest, beside one batch's rows, to a static cache
of the rows of highest in-degree over all node types; a batch's other rows are read by one
planned direct read per type (:class:`~shoal.sample.typed.TypedFeatures`). Each epoch's record
gives the bytes read against the distinct rows' bytes the epoch needed (``io``). Not yet here
(issue 34): windows read ahead across batches, sparse or on-disk embeddings.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from shoal.data.format import GraphDir
from shoal.errors import ShoalInputError
from shoal.nn import TYPED_MODELS
from shoal.nn.hetero import RGAT, RGCN, TypedInput
from shoal.rows.budget import (
    MIN_WINDOW,
    BudgetPlan,
    activation_bytes,
    memory_limit,
    plan_budget,
    reserve_for,
)
from shoal.sample.typed import TypedBatch, TypedFeatures, TypedNeighborSampler
from shoal.training.batches import batch_seed
from shoal.training.config import TrainConfig
from shoal.training.embedding import NodeEmbedding, SparseAdam, load_tables, save_tables
from shoal.training.footprint import OPTIMIZER_STATES
from shoal.training.loop import EpochLoop
from shoal.training.model import typed_factory_model
from shoal.training.presets import resolve_for_data
from shoal.training.result import RunResult
from shoal.training.typed_inference import layerwise_logits
from shoal.utils.device import get_rng_states, set_rng_states
from shoal.utils.io import scratch_space
from shoal.utils.threads import set_threads

__all__ = ["EmbeddedRows", "TypedModel", "TypedTrainer"]

log = logging.getLogger("shoal.training")


class TypedModel(nn.Module):
    """Per-type inputs, then the relational layers: ``forward(batch, features)`` with
    ``features[t]`` the rows of the batch's nodes of type ``t`` (batch order), returns the
    seeds' logits."""

    def __init__(
        self, schema, config: TrainConfig, num_classes: int, given: list[bool] | None = None
    ) -> None:
        super().__init__()
        m = config.model
        hidden = int(m.hidden)
        self.schema = schema
        self.input = TypedInput(
            [t.feature_dim for t in schema.node_types],
            [t.count for t in schema.node_types],
            hidden,
            given=given,  # types whose rows come in as features (embedding tables on disk)
        )
        layers, rels = config.num_layers, len(schema.edge_types)
        #: whether the layers can run one at a time over the graph (exact layer-wise
        #: inference); a ``--model-factory`` model runs on sampled batches only
        self.layerwise = not m.factory
        if m.factory:
            self.gnn: nn.Module = typed_factory_model(
                m.factory,
                schema,
                hidden=hidden,
                out_dim=num_classes,
                num_layers=layers,
                dropout=float(m.dropout or 0.0),
            )
        elif m.name == "rgcn":
            self.gnn = RGCN(hidden, hidden, num_classes, rels, num_layers=layers, dropout=m.dropout)
        else:
            heads = int(m.heads or 4)
            self.gnn = RGAT(
                hidden,
                hidden,
                num_classes,
                rels,
                num_layers=layers,
                heads=heads,
                dropout=m.dropout,
            )

    def forward(self, tb: TypedBatch, features: list[torch.Tensor | None]) -> torch.Tensor:
        n_id = np.asarray(tb.n_id)
        local = torch.from_numpy(n_id - self.schema.offsets[tb.node_type.numpy()])
        h = self.input(tb.node_type, local, features)
        if not self.layerwise:
            return self.gnn(h, tb.blocks, tb.edge_types, tb.node_type)
        return self.gnn(h, tb.blocks, tb.edge_types)


class EmbeddedRows:
    """A typed batch's rows with the on-disk embedding tables' rows of the featureless types
    in place of their ``None``: ``gather(tb)`` reads each table's rows of the batch as a
    leaf tensor that requires grad, and keeps ``last`` = ``[(type, ids, rows)]`` for the
    sparse step after ``backward()`` (``tables``: ``(type, table, its sparse optimizer or
    None)``); everything else is the wrapped rows' (``io``, ``cache_bytes``, ...)."""

    def __init__(self, rows: Any, schema, tables: list[tuple[int, Any, Any]]) -> None:
        self.rows, self.schema, self.tables = rows, schema, tables
        self.last: list[tuple[int, np.ndarray, torch.Tensor]] = []

    def gather(self, tb: TypedBatch) -> list[torch.Tensor | None]:
        out = self.rows.gather(tb)
        n_id, kind = np.asarray(tb.n_id), tb.node_type.numpy()
        self.last = []
        for t, emb, _ in self.tables:
            ids = n_id[kind == t] - self.schema.node_types[t].offset
            out[t] = emb.gather(ids)
            self.last.append((t, ids, out[t]))
        return out

    def close(self) -> None:
        for _, emb, opt in self.tables:
            emb.flush()
            if opt is not None:
                opt.flush()
        self.rows.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.rows, name)


class TypedTrainer:
    """Train ``config``'s relational model (``rgcn`` or ``rgat``) on the typed graph
    directory ``graph`` in one process (module docstring)."""

    def __init__(self, config: TrainConfig, graph: GraphDir) -> None:
        s = graph.schema
        if s is None:
            raise ShoalInputError(
                f"--model {config.model.name} needs a typed graph (node types, relations)",
                path=graph.path,
                fix="import one (ogbn-mag's layout, PyG HeteroData) or `shoal data synth igbh`",
            )
        if config.model.name not in TYPED_MODELS and not config.model.factory:
            raise ShoalInputError(
                f"a typed graph trains a relational model, not {config.model.name!r}",
                path=graph.path,
                fix=f"use --model {' or '.join(TYPED_MODELS)}",
            )
        y, splits = graph.labels(), {n: graph.split(n) for n in ("train", "val", "test")}
        if y is None or splits["train"] is None or s.target is None:
            raise ShoalInputError(
                "training needs labels and a train split on the target type",
                path=graph.path,
                fix="import the dataset with its labels and splits",
            )
        if config.run.device != "cpu":
            raise ShoalInputError(
                f"--device {config.run.device}: typed graphs train on the CPU for now",
                fix="leave --device at cpu",
            )
        set_threads(config.run.threads)
        torch.manual_seed(config.run.seed)
        self.splits = {k: np.array(v, np.int64) for k, v in splits.items() if v is not None}
        config = resolve_for_data(config, train_nodes=len(self.splits["train"]))
        self.config, self.graph, self.schema = config, graph, s
        self.labels = torch.from_numpy(np.array(y, dtype=np.int64))
        self.num_classes = int(graph.num_classes or int(self.labels.max()) + 1)
        self.tables = self._embedding_tables()
        given = [any(t == k for k, _, _ in self.tables) for t in range(len(s.node_types))]
        self.model = TypedModel(s, config, self.num_classes, given=given)
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=config.optim.lr, weight_decay=config.optim.weight_decay
        )
        csr = graph.csr("in", scratch_dir=config.memory.scratch_dir)
        self.budget = self._plan(csr)
        indptr = np.array(csr.indptr)  # O(V): in memory in any case
        indices = np.array(csr.indices) if self.budget.structure_in_memory else csr.indices
        if not self.budget.structure_in_memory:
            log.warning(
                "typed graph: the neighbour lists (%.0f MiB) do not fit the memory plan and are "
                "read through their memory map",
                csr.indices.nbytes / 2**20,
            )
        fan = config.sampling.fanouts
        self.sampler = TypedNeighborSampler(indptr, indices, s, fan)
        self.one_hop = TypedNeighborSampler(indptr, indices, s, [-1])
        self._csr = (indptr, indices)
        # cache priority: batches of the pre-sampled epoch needing the row, then in-degree
        deg = np.diff(indptr)
        score = self.batch_counts.astype(np.int64) * (int(deg.max(initial=0)) + 1) + deg
        self.features = TypedFeatures(
            graph,
            cache_bytes=self.budget.cache,
            degrees=score,
            threads=config.memory.io_threads,
            show_progress=config.run.progress,
        )
        if self.tables:
            self.features = EmbeddedRows(self.features, s, self.tables)
        log.info("typed graph: %s", self.budget.describe())
        self.num_batches = -(-len(self.splits["train"]) // config.sampling.batch_size)
        self.loop = EpochLoop(
            self,
            config,
            identity={
                "model": config.model.name,
                "hidden": config.model.hidden,
                "num_layers": config.num_layers,
                "num_nodes": graph.num_nodes,
                "relations": len(s.edge_types),
                "num_classes": self.num_classes,
            },
            settings={
                "typed": {"node_types": len(s.node_types), "relations": len(s.edge_types)},
                "memory_plan": {
                    **self.budget.to_dict(),
                    "probed_batch_rows": self.probed_rows,
                    "cache_bytes": self.features.cache_bytes,
                },
            },
        )

    def _embedding_tables(self) -> list[tuple[int, NodeEmbedding, SparseAdam]]:
        """``(type, table, sparse Adam)`` of every featureless type whose embeddings live
        on disk (``--type-embeddings``; ``auto``: when the tables and Adam's two moments
        would take over a quarter of the memory limit)."""
        cfg, s = self.config, self.schema
        bare = [t for t, nt in enumerate(s.node_types) if not nt.feature_dim]
        mode = cfg.model.type_embeddings
        if mode == "auto":
            need = 3 * 4 * int(cfg.model.hidden) * sum(s.node_types[t].count for t in bare)
            limit = cfg.memory.limit_bytes or memory_limit()[0]
            mode = "disk" if need > limit // 4 else "memory"
        if mode == "memory" or not bare:
            return []
        root = Path(cfg.link.embedding_dir or f"{self.graph.path}.emb")
        out = []
        for t in bare:
            nt = s.node_types[t]
            where = root / nt.name
            if (where / "embedding.npy").exists() and not cfg.checkpoint.resume:
                raise ShoalInputError(
                    f"an embedding table of node type {nt.name!r} from another run is there",
                    path=where,
                    fix="remove it, pass --embedding-dir elsewhere, or --resume to continue it",
                )
            emb = NodeEmbedding(
                where, nt.count, int(cfg.model.hidden), seed=cfg.run.seed, stream=t + 1
            )
            out.append((t, emb, SparseAdam(emb, lr=cfg.optim.lr)))
        log.info(
            "typed graph: embeddings of %s on disk in %s (sparse Adam)",
            ", ".join(s.node_types[t].name for t, _, _ in out),
            root,
        )
        return out

    def _plan(self, csr) -> BudgetPlan:
        """The memory plan (:func:`~shoal.rows.budget.plan_budget`): the process measured
        with its model, the activations and rows of the largest batch of the first epoch,
        sampled now (a hop draws each relation's fanout, so worst-case bounds are far off;
        with a margin of 1/4), the neighbour lists, then a cache of the rows most batches
        need (``batch_counts``, ties by in-degree) over all types."""
        cfg, s = self.config, self.schema
        dims = [t.feature_dim or 0 for t in s.node_types]
        features = sum(int(t.count) * d * 4 for t, d in zip(s.node_types, dims, strict=True))
        probe = TypedNeighborSampler(csr.indptr, csr.indices, s, cfg.sampling.fanouts)
        bs = int(cfg.sampling.batch_size)
        train = self.splits["train"]
        order = np.random.default_rng([cfg.run.seed, 0]).permutation(len(train))
        # the first epoch's batches, sampled now (GNNLab's pre-sampling, Yang et al. EuroSys
        # 2022): the largest sizes the plan, and how many batches need each node ranks the
        # cache (a row needed by k batches costs k reads when it is not cached)
        self.batch_counts = np.zeros(s.num_nodes, np.uint16)
        rows = 1
        for k, a in enumerate(range(0, len(train), bs)):
            n_id = probe.sample(train[order[a : a + bs]], batch_seed(cfg.run.seed, 0, k)).n_id
            rows = max(rows, len(n_id))
            c = self.batch_counts[n_id]
            self.batch_counts[n_id] = np.minimum(c.astype(np.int64) + 1, 65535)
        rows = min(s.num_nodes, rows + rows // 4)
        heads = (cfg.model.heads or 4) if cfg.model.name == "rgat" else 1
        params = sum(p.numel() * p.element_size() for p in self.model.parameters())
        # the per-type inputs project the features to the hidden width at once: the layers'
        # activations are hidden-wide; the features once more (the batch's gathered copy)
        act = activation_bytes(rows, int(cfg.model.hidden) * heads) + rows * 4 * max(dims)
        self.probed_rows = rows
        plan = plan_budget(
            cfg.memory.limit_bytes,
            feature_bytes=features,
            structure_bytes=int(csr.indptr.nbytes + csr.indices.nbytes),
            min_window=max(MIN_WINDOW, rows * 4 * max(dims)),
            index_bytes=int(csr.indptr.nbytes),
            structure=cfg.memory.structure,
            reserve=reserve_for(
                params * (1 + OPTIMIZER_STATES) + act, io_threads=cfg.memory.io_threads
            ),
        )
        # no windows read ahead here: each batch reads its uncached rows itself, so two slots
        # of one batch's rows are enough, and the rest of the pool goes to the cache
        if plan.cache < plan.features and plan.window > plan.min_window:
            plan.cache = min(plan.features, plan.pool - 2 * plan.min_window)
            plan.window = plan.min_window
        return plan

    # ---------------------------------------------------------------- Trainable
    def train_epoch(self, epoch: int) -> dict[str, Any]:
        cfg = self.config
        # the shuffling and batch seeds of the Trainer and the engines (one process on a
        # one-part store draws these batches)
        rng = np.random.default_rng([cfg.run.seed, epoch])
        train = self.splits["train"][rng.permutation(len(self.splits["train"]))]
        bs = cfg.sampling.batch_size
        t0 = time.perf_counter()
        split = {"sampling": 0.0, "gather": 0.0, "forward_backward": 0.0}
        loss_sum, correct, seen = 0.0, 0, 0
        self.model.train()
        for b, a in enumerate(range(0, len(train), bs)):
            seeds = train[a : a + bs]
            t = time.perf_counter()
            tb = self.sampler.sample(seeds, seed=batch_seed(cfg.run.seed, epoch, b))
            split["sampling"] += time.perf_counter() - t
            t = time.perf_counter()
            feats = self.features.gather(tb)
            split["gather"] += time.perf_counter() - t
            t = time.perf_counter()
            self.optimizer.zero_grad(set_to_none=True)
            out = self.model(tb, feats)
            y = self.labels[torch.from_numpy(seeds)]
            loss = F.cross_entropy(out, y)
            loss.backward()
            self.optimizer.step()
            for t_, ids, rows in getattr(self.features, "last", ()):  # the on-disk tables
                if rows.grad is not None:
                    self.tables_by_type[t_].step(ids, rows.grad)
            split["forward_backward"] += time.perf_counter() - t
            loss_sum += float(loss.detach()) * len(seeds)
            correct += int((out.detach().argmax(1) == y).sum())
            seen += len(seeds)
        io = self.features.io()
        io["cache_hit_rate"] = io["hits"] / io["requested"] if io["requested"] else None
        return {
            "loss": loss_sum / max(seen, 1),
            "train_accuracy": correct / max(seen, 1),
            "seconds": time.perf_counter() - t0,
            "time_split": split,
            "io": io,
        }

    @torch.no_grad()
    @torch.no_grad()
    def evaluate(self, splits: tuple[str, ...] = ("val",)) -> dict[str, float]:
        """Accuracy on ``splits``, exact: every neighbour per relation, layer by layer over
        the whole graph (:func:`~shoal.training.typed_inference.layerwise_logits`), each
        chunk's one-hop block at most the training batch the memory plan sized. The two
        per-node tables stay in memory when they fit the plan's window pool, else they are
        files in the scratch directory."""
        self.model.eval()
        cfg = self.config
        named = {k: self.splits.get(k) for k in splits}
        todo = [v for v in named.values() if v is not None and len(v)]
        ids = np.unique(np.concatenate(todo)) if todo else np.empty(0, np.int64)
        width = max(int(cfg.model.hidden) * 4, self.num_classes)  # R-GAT: heads concatenated
        tables = 2 * self.schema.num_nodes * width * 4
        with contextlib.ExitStack() as stack:
            scratch = None
            if not self.model.layerwise:  # a --model-factory model: whole L-hop batches
                logits = self._sampled_logits(ids)
            elif len(ids) and tables > self.budget.pool:
                scratch = stack.enter_context(
                    scratch_space(cfg.memory.scratch_dir, beside=self.graph.path, prefix="eval")
                )
            if self.model.layerwise:
                logits = layerwise_logits(
                    self.model,
                    ids,
                    one_hop=self.one_hop,
                    features=self.features,
                    max_rows=self.probed_rows,
                    chunk=int(cfg.eval.batch_size or cfg.sampling.batch_size),
                    scratch=scratch,
                )
        pred = logits.argmax(1).numpy() if len(ids) else np.empty(0, np.int64)
        out = {}
        for name, v in named.items():
            if v is None or not len(v):
                out[name] = float("nan")
                continue
            got = pred[np.searchsorted(ids, v)]
            out[name] = float(np.mean(got == self.labels.numpy()[v]))
        self.features.io()  # evaluation's reads are not the next epoch's
        return out

    def _sampled_logits(self, ids: np.ndarray) -> torch.Tensor:
        """Logits of ``ids`` from batches holding every neighbour per relation ``L`` hops
        out (exact, for a model that cannot run layer by layer); a batch with more rows than
        the memory plan's training batch is sampled again at half its nodes."""
        cfg = self.config
        full = TypedNeighborSampler(*self._csr, self.schema, [-1] * cfg.num_layers)
        out = torch.empty((len(ids), self.num_classes))
        a, top = 0, int(cfg.eval.batch_size or cfg.sampling.batch_size)
        k = top
        while a < len(ids):
            seeds = ids[a : a + k]
            tb = full.sample(seeds)
            if len(tb.n_id) > self.probed_rows and len(seeds) > 1:
                k = max(1, len(seeds) // 2)
                continue
            out[a : a + len(seeds)] = self.model(tb, self.features.gather(tb))
            a += len(seeds)
            if 2 * len(tb.n_id) < self.probed_rows:
                k = min(top, 2 * k)
        return out

    @property
    def tables_by_type(self) -> dict[int, SparseAdam]:
        return {t: opt for t, _, opt in self.tables}

    def state(self) -> dict[str, Any]:
        """Weights, optimizer and RNG; the on-disk embedding tables (and their Adam state)
        are copied into the checkpoint directory (``embedding_<type>/``) beside them."""
        snap = bool(self.tables) and bool(self.config.checkpoint.dir)
        if snap:
            for t, _, opt in self.tables:
                save_tables(opt.tables(), self._snapshot_dir(t))
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "torch_rng": get_rng_states("cpu"),
            "embedding_snapshot": snap,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        set_rng_states(state["torch_rng"], "cpu")
        if state.get("embedding_snapshot"):
            for t, _, opt in self.tables:
                load_tables(opt.tables(), self._snapshot_dir(t))

    def keep_best(self) -> None:
        """At a new best validation score: the on-disk tables copied beside themselves
        (``best/``) and, with checkpoints, into ``embedding_<type>_best/`` (what ``shoal
        embed`` reads with the best weights)."""
        for t, emb, _ in self.tables:
            save_tables({"embedding.npy": emb.weight}, emb.dir / "best")
            if self.config.checkpoint.dir:
                save_tables({"embedding.npy": emb.weight}, f"{self._snapshot_dir(t)}_best")

    def restore_best(self) -> None:
        """The tables as they were at the best validation score (with the best weights)."""
        for _, emb, _ in self.tables:
            if (emb.dir / "best" / "embedding.npy").exists():
                load_tables({"embedding.npy": emb.weight}, emb.dir / "best")

    def _snapshot_dir(self, t: int) -> Path:
        return Path(self.config.checkpoint.dir) / f"embedding_{self.schema.node_types[t].name}"

    def fit(self) -> RunResult:
        """Train until the configured epochs or early stopping; test the best weights."""
        try:
            return self.loop.fit()
        finally:
            self.features.close()
