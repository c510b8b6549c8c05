"""The Engine interface: what a distributed training strategy supplies (its step, its state)
and what it inherits (its parts, per-node tables, model, exact evaluation, the shared epoch
loop): docs/architecture.md#adding-an-engine.
"""

from __future__ import annotations

import dataclasses
import logging
from abc import ABC, abstractmethod
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from shoal.distributed import (
    CommStats,
    DistContext,
    NodeTables,
    all_reduce_stats,
    dist_evaluate,
    parts_of_rank,
)
from shoal.distributed.runtime import local_peers
from shoal.engines.linktask import DistLinkTask, attach_scorer
from shoal.engines.registry import get_engine, get_spec
from shoal.engines.spec import EngineSpec
from shoal.errors import ShoalInputError
from shoal.nn.ondevice import on_device
from shoal.rows.backends import use_row_backend
from shoal.rows.budget import (
    BudgetPlan,
    PeakFootprint,
    batch_window,
    bytes_freed_by,
    plan_budget,
)
from shoal.rows.budgeted import BudgetedStore
from shoal.rows.direct import load_array
from shoal.rows.parts import part_rows
from shoal.store.reader import Store
from shoal.training import EpochLoop, RunResult, TrainConfig, model_from_config
from shoal.training.blocked import id_dtype
from shoal.training.checkpoint import committed_run
from shoal.training.device import DeviceFeed
from shoal.training.engine_config import EngineConfig
from shoal.training.footprint import (
    StepShape,
    eval_working_memory,
    measured_eval_budget,
    step_activations,
    training_reserve,
)
from shoal.training.loop import eval_work_ratio
from shoal.training.meter import EpochMeter
from shoal.training.presets import resolve_for_data
from shoal.utils.device import get_rng_states, set_rng_states
from shoal.utils.memory import return_freed_memory, trim_freed_memory

__all__ = ["ENGINE_RESERVE", "Engine"]

log = logging.getLogger(__name__)

#: memory a rank needs beside its measured footprint and one batch's working memory
#: (:meth:`Engine.reserve_bytes`): gloo's and DDP's buffers and the rows pulled from peers
#: for a batch (default 128 MiB, docs/measurements.md#the-memory-plan).
ENGINE_RESERVE = 128 << 20


def _first_rows(store: Store) -> Any:
    """Part 0's rows (what ``normalize_features="auto"`` samples; the same on every rank):
    its feature array, or a typed store's padded row source."""
    if not store.num_parts:
        return None
    return part_rows(store.part(0)) if store.schema is not None else store.part(0).features


class Engine(ABC):
    """A distributed training strategy over a store (one instance per rank).

    Args:
        store: the opened store; config: the run's :class:`~shoal.training.TrainConfig`
        (its ``engine`` holds this engine's options: :attr:`options`); ctx: the process group.

    Subclasses set ``name`` (the name its :class:`~shoal.engines.spec.EngineSpec` is
    registered under: its configuration class and what it supports are read there),
    ``model`` and ``optimizer`` (checkpointed) and ``num_batches`` (reported), and implement
    :meth:`train_epoch`; they may override the hooks below (docs/architecture.md, "Adding an
    engine").
    """

    name: str = "engine"
    #: the run's task (``config.task``): "node" (classification) or "link" (prediction,
    #: :attr:`link`); the tasks the engine supports are its spec's
    task: str = "node"
    #: the link task's seeds, loss and evaluation (``--task link``; None for the node task)
    link: DistLinkTask | None = None
    #: whether the engine trains learned input rows (the link task's ``--embedding-dim``,
    #: held and updated at their owners); the others refuse the option
    learned_rows: bool = False
    #: which positives and negatives the link task draws (:mod:`shoal.engines.linktask`):
    #: ``"graph"`` (any; the engine computes any node's output) or ``"part"`` (the edges
    #: inside one part, negatives from it: an engine computing its own parts' nodes only)
    link_scope: str = "graph"
    model: nn.Module
    optimizer: torch.optim.Optimizer
    num_batches: int = 0

    #: whether the reserve counts one sampled mini-batch's activations (an engine that
    #: trains on whole parts counts its own layers instead)
    batch_activations: bool = True
    #: the per-node tables' scope (:class:`~shoal.distributed.NodeTables`): ``"global"``
    #: (every node: an engine whose sampling reaches any node) or ``"local"`` (the rank's own
    #: and halo nodes: an engine that trains on its parts)
    tables_scope: str = "global"
    #: whether the ranks' batches of a step make one global batch (synchronous SGD): its
    #: size is kept when the run resumes on another number of processes
    #: (:meth:`_keep_global_batch`); an engine whose ranks step alone keeps the per-rank batch
    global_batch: bool = False
    #: with the parts' neighbour lists on disk on some rank, the memory of a group of batches
    #: sampled together (the same on every rank; the evaluations' samplers read from disk
    #: too); None: every rank holds them in memory
    structure_group: int | None = None

    def __init__(self, store: Store, config: TrainConfig, ctx: DistContext):
        self.task = config.task
        # what the spec does not support is refused in one place (the launcher asks first)
        get_engine(
            self.name,
            self.task,
            typed=store.schema is not None,
            factory=bool(config.model.factory),
            device=ctx.device.type,
        )
        use_row_backend(config.memory.rows_backend)  # every row this rank reads goes through it
        self.store = store
        self.config = config
        #: this engine's options (``config.engine``, as its own class: defaults filled in)
        self.options = self.options_of(config)
        self.ctx = ctx
        self.part_to_rank = self.rank_of_parts()
        self.parts = [store.part(int(i)) for i in np.flatnonzero(self.part_to_rank == ctx.rank)]
        typed = store.schema is not None
        if (
            self.task == "node"
            and not typed
            and (store.feature_dim is None or store.num_classes is None)
        ):
            raise ShoalInputError(
                "the store has no features or labels",
                path=store.path,
                fix="build it from a node-classification graph (features, labels, splits)",
            )
        self.stats = CommStats()
        self.device = ctx.device
        #: batches onto the model's device (a pass-through on the CPU)
        self.feed = DeviceFeed(self.device)
        self.tables = NodeTables(
            store, self.parts, part_to_rank=self.part_to_rank, scope=self.tables_scope
        )
        self.budget: BudgetPlan | None = None
        self._ended = False  # end_training was called
        self._lent = 0  # bytes it freed for the final evaluation
        self._evaluated_counts: dict[tuple[str, ...], int] = {}  # evaluated nodes per splits
        self._eval_footprint = 0  # the footprint measured as the last evaluation began
        self._eval_id_book = 0  # bytes of its per-node books for the layers' node sets
        # the same decision on every rank: the global training set, part 0's rows
        seeds = self.tables.num_train if self.task == "node" else int(store.num_edges)
        self.config = resolve_for_data(
            self.config,
            train_nodes=seeds,
            ranks=ctx.world_size,
            features=_first_rows(store),
        )
        #: the world size of the checkpoint this run resumes from, when it differs
        self.resharded_from: int | None = None
        self.config = self._keep_global_batch(self.config)
        self._refuse_options()
        if self.task == "link":  # positives counted on every rank (collective)
            self.link = DistLinkTask(self)

    def _refuse_options(self) -> None:
        """Options of the run no engine class of this kind trains (refused here, once)."""
        tc = self.config
        if self.task == "link" and tc.link.embedding_dim and not self.learned_rows:
            raise ShoalInputError(
                f"--embedding-dim (learned input rows) is not trained by the {self.name} engine",
                fix="use --engine minibatch (the rows' owners update them every step), or drop "
                "--embedding-dim to read the store's features",
            )
        if self.store.schema is not None and tc.model.type_embeddings == "disk":
            raise ShoalInputError(
                "--type-embeddings disk (the featureless types' tables on disk) trains in one "
                "process for now",
                fix="drop --type-embeddings (the engines keep the embeddings in the model), "
                "or train in one process with `shoal train --graph`",
            )

    def _keep_global_batch(self, tc: TrainConfig) -> TrainConfig:
        """``tc``, or on a resume from a checkpoint saved by another number of processes
        ``W`` (an engine with :attr:`global_batch`) with the per-rank batch
        ``ceil(G / W')``: ``G``, the global batch the run started with (``last.json``), stays
        the step's batch (within ``W' - 1`` seeds), and so the learning dynamics."""
        saved = committed_run(tc.checkpoint.dir) if tc.checkpoint.resume else None
        world = self.ctx.world_size
        if saved is None or int(saved.get("world_size", world)) == world:
            return tc
        self.resharded_from = int(saved["world_size"])
        if not self.global_batch:
            return tc
        total = int(saved.get("global_batch") or self.resharded_from * tc.sampling.batch_size)
        batch = -(-total // world)
        if self.ctx.is_rank0:
            log.warning(
                "resuming on %d processes (saved by %d): %d seeds per rank, the global batch "
                "of %d kept",
                world,
                self.resharded_from,
                batch,
                total,
            )
        return dataclasses.replace(tc, sampling=dataclasses.replace(tc.sampling, batch_size=batch))

    def checkpoint_meta(self) -> dict[str, Any]:
        """Recorded in ``last.json``: the global batch (the one the run started with, through
        every resume), so a run resumed on another number of processes keeps it."""
        saved = committed_run(self.config.checkpoint.dir) if self.resharded_from else None
        total = (saved or {}).get("global_batch")
        if total is None:
            total = self.config.sampling.batch_size * self.ctx.world_size
        return {"global_batch": int(total)}

    def rank_of_parts(self) -> np.ndarray:
        """``(p,)`` rank holding each part (the plan, or part ``j`` on rank ``j mod N``);
        an engine whose ranks do not all hold parts overrides it."""
        return parts_of_rank(self.store.num_parts, self.ctx.world_size, self.options.plan)

    # ---------------------------------------------------------------- memory
    def plan_memory(
        self,
        *,
        feature_bytes: int,
        num_rows: int,
        extra_bytes: int = 0,
        structure: str = "auto",
        held_lists: int = 0,
    ) -> BudgetPlan:
        """This rank's memory budget (``--memory``, by default its share of the machine's or
        cgroup's limit, :func:`~shoal.rows.budget.plan_budget`) for ``feature_bytes`` of
        feature rows over ``num_rows`` rows. The reserve measured on this rank
        (:meth:`reserve_bytes`) and ``extra_bytes`` (the engine's own arrays allocated after
        the plan: samplers' id maps, marks) are taken out first. The parts' row indices (``indptr``) are read into memory, their
        neighbour lists too when the plan keeps the structure there (``structure``: "auto",
        or "memory"/"disk" forced; an engine that samples from disk passes the option, and
        ``held_lists``: the bytes of the lists it holds in memory then, planned beside the
        index)."""
        tc = self.train_config
        return_freed_memory()
        index = sum(int(p.indptr.nbytes) for p in self.parts)
        csr = index + sum(int(p.indices.nbytes) for p in self.parts)
        plan = plan_budget(
            tc.memory.limit_bytes,
            feature_bytes=feature_bytes,
            structure_bytes=csr,
            min_window=batch_window(
                tc.sampling.fanouts, tc.sampling.batch_size, num_rows, self.row_bytes
            ),
            reserve=self.reserve_bytes(num_rows) + extra_bytes,
            processes=local_peers(self.ctx),
            index_bytes=index,
            structure=structure,
            held_lists=held_lists,
        )
        # the activations in the reserve: free while evaluating (refitted when sampled)
        act, row_bytes = step_activations(self._step_shape(num_rows))
        plan.activations, plan.activation_row_bytes = min(act, plan.reserve), row_bytes
        for p in self.parts:  # cached properties: the copies replace the memory maps
            p.indptr = load_array(p.indptr)
            if plan.structure_in_memory:
                p.indices = load_array(p.indices)
        self.budget = plan
        return plan

    @property
    def kept_step_memory(self) -> int:
        """Freed memory the allocator keeps between this rank's training steps (bytes; the
        loop's ``Trainable.kept_step_memory``): the plan's
        :attr:`~shoal.rows.budget.BudgetPlan.kept_step_memory` for steps on the host; 0 on a
        GPU or without a plan."""
        if self.budget is None or self.device.type != "cpu":
            return 0
        return self.budget.kept_step_memory

    def cached_rows(self, plan: BudgetPlan, *, show_progress: bool = False) -> Any:
        """This rank's parts' feature rows (a typed store's every node type in one source,
        padded to the widest type), read when needed through a cache of ``plan``, no windows."""
        tc, dim = self.train_config, int(self.store.feature_dim)
        arrays = [p.features for p in self.parts] or [np.empty((0, dim), np.float32)]
        if self.store.schema is not None:
            arrays = part_rows(self.parts, threads=tc.memory.io_threads) or arrays
        return BudgetedStore(
            arrays,
            plan,
            threads=tc.memory.io_threads,
            normalize=tc.model.normalize_features,
            show_progress=show_progress,
            read_ahead=False,
        ).features

    def reserve_bytes(self, num_rows: int) -> int:
        """What this rank needs beside its data, measured now
        (:func:`~shoal.training.footprint.training_reserve`: its footprint, which holds the
        per-node tables already, plus the model's gradients and optimizer state and one
        batch's activations over ``num_rows`` rows) plus :data:`ENGINE_RESERVE`."""
        model = getattr(self, "model", None)
        shape = self._step_shape(num_rows)
        io_threads = self.train_config.memory.io_threads
        return ENGINE_RESERVE + training_reserve(model, shape, io_threads=io_threads)

    def _step_shape(self, num_rows: int) -> StepShape:
        return StepShape.of(
            self.train_config,
            num_nodes=max(int(num_rows), 1),
            in_dim=int(self.store.feature_dim or 0),
            sampled=self.batch_activations,
        )

    @property
    def row_bytes(self) -> int:
        p = next((p for p in self.parts if p.features is not None), None)
        item = p.features.dtype.itemsize if p is not None else 4
        return int(self.store.feature_dim) * item

    def pause_io(self) -> int:
        """Stop reading ahead while evaluating; the bytes read ahead held (override; 0)."""
        return 0

    def resume_io(self) -> None:
        """Undo :meth:`pause_io` (override)."""
        return None

    def close_io(self) -> None:
        """Stop the reading threads (override; :meth:`fit` calls it)."""
        return None

    def feature_stores(self) -> list:
        """This rank's budgeted feature stores, whose caches :meth:`end_training` lends to
        the final evaluation (override; default none)."""
        return []

    def end_training(self) -> None:
        """No training step follows (the shared loop's final evaluation comes next; every
        rank calls it): the reading threads stop, the feature caches are released, and the
        memory that frees, measured, goes to the evaluation with the training step's
        activations. Evaluation reads the parts' rows itself, not through those caches."""
        if self._ended:
            return
        self._lent = bytes_freed_by(self._drop_training_state)
        self._ended = True

    def _drop_training_state(self) -> int:
        self.close_io()
        return sum(fs.release_cache() for fs in self.feature_stores())

    def io_record(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        """The epoch's feature I/O summed over this rank's loaders and over ranks
        (collective): rows requested and served by the cache, rows and bytes read, seconds."""
        keys = (
            "requested hits rows_read bytes_read unique_rows unique_bytes windows "
            "process_read_bytes read_seconds bytes_written pack_bytes_read structure_bytes_read"
        ).split()
        t = torch.tensor(
            [float(sum(r.get(k) or 0 for r in records)) for k in keys], dtype=torch.float64
        )
        if self.ctx.world_size > 1:
            dist.all_reduce(t)
        rec = {
            k: (float(v) if k == "read_seconds" else int(v))
            for k, v in zip(keys, t.tolist(), strict=True)
        }
        rec["cache_hit_rate"] = rec["hits"] / rec["requested"] if rec["requested"] else None
        return rec

    @property
    def metric(self) -> str:
        """The selection metric: accuracy, or the link task's MRR."""
        return self.link.metric if self.link is not None else "accuracy"

    @property
    def train_config(self) -> TrainConfig:
        """The run's configuration (the same object as :attr:`config`)."""
        return self.config

    @classmethod
    def spec(cls) -> EngineSpec:
        """The :class:`~shoal.engines.spec.EngineSpec` registered as :attr:`name`."""
        return get_spec(cls.name)

    @classmethod
    def options_of(cls, config: TrainConfig) -> EngineConfig:
        """``config.engine`` as this engine's configuration class (its spec's ``config``; a
        base :class:`EngineConfig`, or another engine's, keeps its shared options and takes
        this engine's defaults for the rest)."""
        opts, options_class = config.engine, cls.spec().config
        if isinstance(opts, options_class):
            return opts
        return options_class(**{**opts.shared(), "name": cls.name})

    def adam(self, module: nn.Module) -> torch.optim.Optimizer:
        """Adam over ``module``'s parameters at the run's learning rate and weight decay."""
        o = self.train_config.optim
        return torch.optim.Adam(module.parameters(), lr=o.lr, weight_decay=o.weight_decay)

    def build_model(
        self, *, in_dim: int | None = None, out_dim: int | None = None, rank: int | None = None
    ) -> nn.Module:
        """The configured model on the rank's device, with the same initial weights on every
        rank (built on the host, see :func:`~shoal.training.model_from_config`);
        ``in_dim``/``out_dim`` default to the store's feature width and class count; ``rank``
        (default this rank's) re-seeds torch afterwards for the rank's own dropout stream
        (0: not re-seeded; a ``--model-factory`` model is refused in :meth:`__init__` when
        the spec says the engine does not run one)."""
        rank = self.ctx.rank if rank is None else rank
        tc = self.train_config
        if self.link is None:
            out = int(self.store.num_classes) if out_dim is None else out_dim
        else:  # the link task: embeddings of the hidden width, then the edge scorer
            out = tc.model.hidden if out_dim is None else out_dim
        model = model_from_config(
            tc,
            in_dim=int(self.store.feature_dim) if in_dim is None else in_dim,
            out_dim=out,
            rank=0 if self.link is not None else rank,
            schema=self.store.schema,
        )
        if self.link is not None:  # drawn after the encoder from the same seed on every
            attach_scorer(model, self.link.head())  # rank, then the rank's dropout stream
            if rank:
                torch.manual_seed(tc.run.seed + rank)
        return model.to(self.device)

    # ---------------------------------------------------------------- Trainable
    @abstractmethod
    def train_epoch(self, epoch: int) -> dict[str, Any]:
        """Train one epoch (``epoch`` counts from 0); return :meth:`epoch_record`'s record."""

    def evaluate(
        self,
        splits: tuple[str, ...] = ("val", "test"),
        *,
        model: nn.Module | None = None,
        fanouts: tuple[int, ...] | None = None,
    ) -> dict[str, float]:
        """The task's exact metric of ``model`` (default: the engine's) on ``splits``:
        accuracy, or the link task's MRR and Hits@K (:meth:`DistLinkTask.evaluate`); the
        accuracy on sampled neighbourhoods with ``fanouts`` (``--eval-fanouts``).
        Collective; its communication is not counted in the epoch's."""
        tc = self.train_config
        held = self.pause_io()
        budget = self._eval_budget(splits, held) if self.budget is not None else None
        model = model if model is not None else self.model
        peak = PeakFootprint()
        try:
            with peak:
                if self.link is not None:
                    inputs, dev = self.learned_inputs(), self.device
                    return self.link.evaluate(
                        model, self.tables, splits, device=dev, budget=budget, inputs=inputs
                    )
                return dist_evaluate(
                    on_device(model, self.device),
                    self.store,
                    self.parts,
                    self.part_to_rank,
                    self.ctx,
                    self.tables,
                    splits=splits,
                    batch_size=tc.eval.batch_size,
                    normalize_features=tc.model.normalize_features,
                    scratch_dir=tc.memory.scratch_dir,
                    memory_budget=budget,
                    threads=tc.memory.io_threads,
                    halo=tc.eval.halo,
                    fanouts=fanouts,
                    seed=tc.run.seed,
                    structure_group=self.structure_group,
                    id_book=self._eval_id_book,
                )
        finally:
            if self.budget is not None and peak.peak >= 0:
                log.log(
                    logging.INFO if self._ended else logging.DEBUG,
                    "rank %d evaluated: peak footprint %.0f MiB (anonymous %.0f MiB) of a "
                    "%.0f MiB budget",
                    self.ctx.rank,
                    peak.peak / (1 << 20),
                    peak.peak_anon / (1 << 20),
                    self.budget.total / (1 << 20),
                )
            trim_freed_memory()  # the evaluation's buffers leave before training resumes
            self.resume_io()

    def _eval_budget(self, splits: tuple[str, ...], held: int) -> int:
        """An evaluation's working memory: what training frees less ``held`` (read ahead) and
        the per-node books, or the budget less the footprint measured now when more."""
        tc = self.train_config
        # per core node a byte per split mask and one for their union; per evaluated node
        # its id as a target (int32) and its label and prediction (12 B; the link task: per
        # core node); per local node and layer, the ids of the nodes each layer computes and
        # pulls (int32), its degree (float32) and a mark
        local = sum(p.num_core + p.num_halo for p in self.parts)
        core = sum(p.num_core for p in self.parts)
        ids = id_dtype(max((p.num_nodes for p in self.parts), default=0)).itemsize
        layers = max(tc.num_layers, 1)
        if self.link is None:
            per_core = (len(splits) + 1) * core + 12 * self._evaluated(splits)
        else:
            per_core = 12 * core
        book = per_core + local * (ids * layers + 5)
        # the layers' node sets at most: what they do not take, known once they are computed,
        # goes to the layers (dist_evaluate's id_book)
        self._eval_id_book = local * ids * layers
        if tc.eval.halo == "served":  # no halo sets or degrees kept; a served index each
            halo = local - core
            book -= halo * (ids * layers + 4)
            book += halo * id_dtype(int(self.store.num_nodes)).itemsize
            self._eval_id_book = core * ids * layers
        # no training step runs while evaluating: its activations' memory is free (the
        # last step's tensors are gone); after the last epoch the caches' memory too
        free = self.budget.transient + self.budget.activations
        if self._ended:
            free += self._lent
        planned = free - held - book
        measured, self._eval_footprint = measured_eval_budget(
            self.budget.total, book, io_threads=tc.memory.io_threads
        )
        budget = eval_working_memory(planned, measured, self._eval_footprint, self.budget.window)
        mib = 1 << 20
        log.log(  # the final evaluation at INFO, those between epochs at DEBUG
            logging.INFO if self._ended else logging.DEBUG,
            "rank %d evaluating %s: %.0f MiB of working memory (the budget %.0f MiB less "
            "the footprint measured now %.0f beside mapped data, per-node books %.0f, "
            "staging and slack; planned: %.0f)",
            self.ctx.rank,
            "+".join(splits),
            budget / mib,
            self.budget.total / mib,
            self._eval_footprint / mib,
            book / mib,
            planned / mib,
        )
        return budget

    def _evaluated(self, splits: tuple[str, ...]) -> int:
        """This rank's core nodes in any of ``splits`` (counted once per splits)."""
        cache = self._evaluated_counts
        if splits not in cache:
            cache[splits] = sum(
                int(np.count_nonzero(np.logical_or.reduce([np.asarray(p.mask(s)) for s in splits])))
                for p in self.parts
                if splits
            )
        return cache[splits]

    def learned_inputs(self) -> dict[int, np.ndarray] | None:
        """The link task's learned layer-0 rows per part (override; None: the features)."""
        return None

    def state(self) -> dict[str, Any]:
        """This rank's model, optimizer and torch RNG (a checkpoint)."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "torch_rng": get_rng_states(self.device),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state`. A resharded state (another number of processes saved it,
        :meth:`shoal.training.checkpoint.Checkpointer.load`) is saved rank 0's:
        the model and optimizer of a synchronous engine are the same on every saved rank; the
        random streams are drawn afresh from ``(seed, epoch, rank)``, since two ranks must
        not share one."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if state.get("resharded_from"):
            seed = (self.config.run.seed, int(state.get("epoch", 0)), self.ctx.rank)
            torch.manual_seed(int(np.random.SeedSequence(seed).generate_state(1)[0]))
            if self.device is not None and self.device.type == "cuda":
                torch.cuda.manual_seed(int(np.random.SeedSequence(seed).generate_state(2)[1]))
        else:
            set_rng_states(state["torch_rng"], self.device)

    # ---------------------------------------------------------------- shared
    def epoch_record(
        self,
        *,
        loss_sum: float,
        correct: int,
        seen: int,
        seconds: float,
        time_split: dict[str, float],
        **extra: Any,
    ) -> dict[str, Any]:
        """The epoch's record, reduced over ranks (collective): mean loss and accuracy over
        every rank's seeds, the slowest rank's seconds, communication summed over ranks."""
        comm = all_reduce_stats(self.stats)
        agg = torch.tensor([loss_sum, correct, seen], dtype=torch.float64)
        t = torch.tensor([seconds], dtype=torch.float64)
        if self.ctx.world_size > 1:
            dist.all_reduce(agg)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return {
            "loss": float(agg[0] / max(agg[2], 1)),
            "train_accuracy": float(agg[1] / max(agg[2], 1)),
            "seconds": float(t.item()),
            "time_split": time_split,
            "comm": comm,
            **extra,
        }

    def start_epoch(
        self, epoch: int, phases: tuple[str, ...] = ("sampling", "gather", "forward_backward")
    ) -> EpochMeter:
        """The epoch's start: communication counters reset, the model in training mode, and
        the epoch's meter over :attr:`num_batches` steps (a progress bar on rank 0)."""
        self.stats.reset()
        self.model.train()
        return EpochMeter(
            epoch,
            self.num_batches,
            enable=self.train_config.run.progress if self.ctx.is_rank0 else False,
            phases=phases,
            device=self.device,  # (on a GPU: CUDA events, no wait a step)
        )

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """This rank's ``self.seeds`` for ``epoch``, shuffled as the single-process trainer
        does, in exactly ``self.num_batches`` batches (fewer seeds than another rank: smaller
        batches, some possibly empty, so collectives stay in step)."""
        cfg = self.train_config
        order = np.random.default_rng([cfg.run.seed, epoch]).permutation(len(self.seeds))
        s = self.seeds[order]
        if -(-len(s) // cfg.sampling.batch_size) == self.num_batches:
            return [
                s[i : i + cfg.sampling.batch_size]
                for i in range(0, len(s), cfg.sampling.batch_size)
            ]
        return list(np.array_split(s, self.num_batches))

    def all_reduce_gradients(self, *, average: bool) -> None:
        """Sum (``average``: average) the model's gradients over ranks with one flattened
        all-reduce; a parameter without a gradient contributes zeros."""
        if self.ctx.world_size == 1:
            return
        params = list(self.model.parameters())
        flat = torch.cat(
            [
                p.grad.reshape(-1)
                if p.grad is not None
                else torch.zeros(p.numel(), device=p.device)
                for p in params
            ]
        )
        dist.all_reduce(flat, group=self.ctx.model_group)
        if average:
            flat /= self.ctx.world_size
        self.stats.allreduce_bytes += flat.numel() * 4
        off = 0
        for p in params:
            n = p.numel()
            p.grad = flat[off : off + n].view_as(p).clone()
            off += n

    def require_block_model(self, why: str) -> None:
        """Refuse a model that is not a shoal ``BlockGNN`` (``why``: what the engine needs)."""
        from shoal.nn.base import BlockGNN

        if not isinstance(self.model, BlockGNN):
            raise ShoalInputError(
                f"the {self.name} engine {why} and needs a shoal BlockGNN model",
                fix="use one of shoal's models (--model), or another engine",
            )

    def eval_work_ratio(self) -> float:
        """Estimated work of an exact evaluation over an epoch's (``--eval-every auto``;
        from global sizes: every rank gets the same); an engine training otherwise than by
        sampled mini-batches of training nodes overrides it."""
        if self.link is not None:
            return self.link.eval_work_ratio()
        return eval_work_ratio(
            num_nodes=self.store.num_nodes,
            num_edges=self.store.num_edges,
            num_seeds=self.tables.num_train,
            fanouts=self.train_config.sampling.fanouts,
        )

    def settings(self) -> dict[str, Any]:
        """Engine settings recorded in the result besides the TrainConfig (override)."""
        return {}

    def fit(self) -> RunResult:
        """Train and evaluate with the shared epoch loop; every rank returns the same result."""
        tc = self.train_config
        loop = EpochLoop(
            self,
            tc,
            group=self.ctx,
            engine=self.name,
            num_parts=self.store.num_parts,
            identity={
                "model": tc.model.name,
                "hidden": tc.model.hidden,
                "num_layers": tc.num_layers,
                "heads": tc.model.heads,
                "num_nodes": self.store.num_nodes,
                "num_parts": self.store.num_parts,
                "feature_dim": self.store.feature_dim,
                "num_classes": self.store.num_classes,
                "task": self.task,
            },
            settings={
                **(self.link.settings() if self.link is not None else {}),
                **self.settings(),
                "memory_plan": self.budget.to_dict() if self.budget is not None else None,
            },
        )
        try:  # windows are read ahead from the first epoch trained (after a resume too)
            return loop.fit()
        finally:
            self.close_io()
