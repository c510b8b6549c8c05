"""The Engine interface, the registry of engines, and what every engine shares.

An engine trains a model on a partitioned store across the ranks of a process group
(``shoal.dist.process_group``); it is built with :func:`get_engine` and run with
:meth:`Engine.fit`, which returns a :class:`RunResult` (identical on every rank).

Shared pieces:

- :func:`parts_of_rank`: which parts a rank holds -- the plan's assignment (``shoal plan``
  JSON, ``worker_of_part``) or, without a plan, SDT-GNN's cyclic rule (part ``j`` -> rank
  ``j mod N``).
- :class:`NodeTables`: ``O(V)`` per-node arrays every rank needs (full in-degrees, labels),
  assembled by one all-reduce in which each rank contributes the rows of its own parts.
- :func:`dist_evaluate`: exact accuracy by distributed layer-wise inference. Each rank computes
  layer ``l`` for the core nodes of its parts from all their in-neighbours' layer ``l - 1``
  rows (halo rows pulled from their owners through a :class:`~shoal.dist.DistFeatureStore`
  holding that layer's outputs: one exchange per layer), so no sampling noise enters the
  reported accuracy.
"""

from __future__ import annotations

import copy
import importlib
import json
import logging
import math
import os
import tempfile
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from shoal.dist.comm import CommStats
from shoal.dist.feature_store import DistFeatureStore
from shoal.dist.runtime import DistContext
from shoal.errors import ShoalInputError
from shoal.nn import build_model
from shoal.sample.features import gather_rows
from shoal.sample.sampler import NeighborSampler, full_graph_block
from shoal.store.reader import Partition, Store
from shoal.train import INFERENCE_MEMMAP_BYTES, TrainConfig, load_checkpoint, save_checkpoint
from shoal.utils.io import read_json, write_json_atomic
from shoal.utils.memory import peak_rss_bytes

__all__ = [
    "ENGINES",
    "Engine",
    "EngineConfig",
    "NodeTables",
    "RunResult",
    "dist_evaluate",
    "get_engine",
    "parts_of_rank",
    "run_epochs",
]

#: Engine names -> "module:Class" (imported on use).
ENGINES: dict[str, str] = {
    "minibatch": "shoal.engines.minibatch:MinibatchEngine",
    "averaging": "shoal.engines.averaging:AveragingEngine",
}


@dataclass(kw_only=True)
class EngineConfig:
    """Options of a distributed run (the model/optimiser options are a :class:`TrainConfig`).

    Attributes:
        train: hyper-parameters shared with the single-process trainer (default
            ``TrainConfig()``), including ``patience``, ``checkpoint_dir``/``resume`` and
            ``metrics_file`` (see :func:`run_epochs`).
        average_every: averaging engine: average the models every k epochs (default 1).
        average_optimizer: averaging engine: also average the optimizer state (Adam's
            moments, weighted like the parameters) at every averaging round (default true;
            false keeps each rank's own moments, which on Cora with 2 ranks converged much
            more slowly: see docs/distributed.md).
        plan: a plan JSON from ``shoal plan`` (its ``worker_of_part`` gives each part's rank);
            default None assigns part ``j`` to rank ``j mod N``.
        eval_every: evaluate (validation) every this many epochs; the best-validation model
            is tested at the end (default: ``train.eval_every``).
    """

    train: TrainConfig = field(default_factory=TrainConfig)
    average_every: int = 1
    average_optimizer: bool = True
    plan: str | None = None
    eval_every: int | None = None

    def __post_init__(self) -> None:
        if self.average_every < 1:
            raise ValueError(f"average_every must be >= 1, got {self.average_every}")
        if self.eval_every is None:
            self.eval_every = self.train.eval_every
        if self.eval_every < 1:
            raise ValueError(f"eval_every must be >= 1, got {self.eval_every}")


@dataclass
class RunResult:
    """Outcome of a distributed run (``to_json()`` is what ``--json`` writes)."""

    engine: str
    world_size: int
    num_parts: int
    test_accuracy: float
    val_accuracy: float
    best_epoch: int
    epochs: int
    seconds_per_epoch: float
    time_split: dict[str, float]
    comm_per_epoch: dict[str, float]
    batches_per_epoch: int
    eval_seconds: float
    num_parameters: int
    peak_rss_bytes: int
    config: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["bytes_per_epoch"] = self.comm_per_epoch.get("bytes_sent", 0.0) + self.comm_per_epoch.get(
            "allreduce_bytes", 0.0
        )
        return d


def parts_of_rank(num_parts: int, world_size: int, plan: str | None = None) -> np.ndarray:
    """``(p,)`` rank holding each part: the plan's ``worker_of_part`` or ``j mod N``."""
    if plan is None:
        if num_parts < world_size:
            raise ShoalInputError(
                f"the store has {num_parts} parts but {world_size} processes were started",
                fix=f"use --nproc {num_parts} or fewer, or build a store with more parts",
            )
        return np.arange(num_parts, dtype=np.int64) % world_size
    meta = read_json(Path(plan))
    try:
        wop = np.asarray(meta["worker_of_part"], dtype=np.int64)
        workers = int(meta["workers"])
    except (KeyError, TypeError, ValueError):
        raise ShoalInputError(
            "plan: field 'worker_of_part' or 'workers' is missing",
            path=plan,
            fix="write the plan with `shoal plan --store STORE --workers N --json FILE`",
        ) from None
    if wop.shape != (num_parts,):
        raise ShoalInputError(
            f"plan: worker_of_part has {wop.shape[0]} entries, the store has {num_parts} parts",
            path=plan,
            fix="make the plan from this store",
        )
    if workers != world_size:
        raise ShoalInputError(
            f"plan: made for {workers} workers, but {world_size} processes were started",
            path=plan,
            fix=f"use --nproc {workers}",
        )
    return wop


class NodeTables:
    """``O(V)`` per-node arrays every rank needs, built by one all-reduce over owned parts.

    Attributes: ``degrees`` float32 full in-degrees; ``labels`` int64 (-1 unlabelled);
    ``train`` bool training mask.
    """

    def __init__(self, store: Store, parts: list[Partition]) -> None:
        n = store.num_nodes
        t = torch.zeros((3, n), dtype=torch.float64)
        for part in parts:
            sl = slice(part.start, part.stop)
            t[0, sl] = torch.from_numpy(np.diff(np.asarray(part.indptr)).astype(np.float64))
            if part.labels is not None:
                t[1, sl] = torch.from_numpy(np.asarray(part.labels, dtype=np.float64) + 1.0)
            t[2, sl] = torch.from_numpy(np.asarray(part.train_mask, dtype=np.float64))
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(t)
        a = t.numpy()
        self.degrees = a[0].astype(np.float32)
        self.labels = a[1].astype(np.int64) - 1
        self.train = a[2] > 0.5


def build_engine_model(cfg: TrainConfig, store: Store, rank: int = 0) -> nn.Module:
    """The model named by ``cfg.model``, initialised from ``cfg.seed`` as the trainer does (the
    same weights on every rank). Ranks other than 0 then re-seed torch with ``seed + rank`` so
    their dropout masks are independent of rank 0's (rank 0 keeps the trainer's stream)."""
    if store.feature_dim is None or store.num_classes is None:
        raise ShoalInputError(
            "the store has no features or labels",
            path=store.path,
            fix="build it from a node-classification graph (features, labels, splits)",
        )
    torch.manual_seed(cfg.seed)
    extra = {"heads": cfg.heads} if cfg.model == "gat" else {}
    model = build_model(
        cfg.model,
        in_dim=int(store.feature_dim),
        hidden=cfg.hidden,
        out_dim=int(store.num_classes),
        num_layers=cfg.num_layers,
        dropout=cfg.dropout,
        **extra,
    )
    if rank:
        torch.manual_seed(cfg.seed + rank)
    return model


def _map_core_rows(
    src: np.ndarray,
    fn,
    *,
    normalize: bool,
    width: int,
    batch_size: int,
    path: str,
) -> np.ndarray:
    """``fn`` (None = identity) applied to the rows of ``src`` in batches (row-normalised first
    when ``normalize``), into an array (a temporary memory map above 256 MiB)."""
    n = src.shape[0]
    if n * width * 4 > INFERENCE_MEMMAP_BYTES:
        out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, width))
    else:
        out = np.empty((n, width), np.float32)
    buf = np.empty((min(batch_size, max(n, 1)), src.shape[1]), np.float32)
    for start in range(0, n, batch_size):
        ids = np.arange(start, min(start + batch_size, n), dtype=np.int64)
        x = gather_rows(src, ids, buf, normalize=normalize)[: len(ids)]
        out[start : start + len(ids)] = fn(torch.from_numpy(x)).numpy() if fn is not None else x
    return out


@torch.no_grad()
def dist_evaluate(
    model: nn.Module,
    store: Store,
    parts: list[Partition],
    part_to_rank: np.ndarray,
    ctx: DistContext,
    tables: NodeTables,
    *,
    splits: tuple[str, ...] = ("val", "test"),
    batch_size: int = 4096,
    normalize_features: bool = False,
    stats: CommStats | None = None,
) -> dict[str, float]:
    """Exact accuracy on ``splits`` by distributed layer-wise inference. Collective.

    Layer ``l`` of every core node is computed from all its in-neighbours (full
    neighbourhoods, as in the single-process :func:`shoal.train.layerwise_inference`); the
    halo rows each layer needs are pulled from their owners (one exchange per layer). When
    the model splits a layer into a node-wise and an aggregation part
    (:meth:`shoal.nn.BlockGNN.inference_split`), the node-wise part runs once per core node
    before the pull, so the halo rows exchanged are the projected ones (GraphSAGE on
    Coauthor-Physics: 128 instead of 8415 columns). Per-part arrays larger than 256 MiB go to
    temporary memory maps.
    """
    model.eval()
    num_layers = int(model.num_layers)
    stats = stats if stats is not None else CommStats()
    splitter = getattr(model, "inference_split", None)
    for p in parts:
        if p.features is None:
            raise ShoalInputError("the store has no features", path=p.path)
    # layer-0 inputs of each local part: its core rows (memory-mapped)
    prev_core: dict[int, np.ndarray] = {p.index: p.features for p in parts}
    prev_dim = int(store.feature_dim)
    correct = np.zeros(len(splits), dtype=np.float64)
    total = np.zeros(len(splits), dtype=np.float64)
    with tempfile.TemporaryDirectory(prefix="shoal-dist-infer-") as tmp:
        for layer in range(num_layers):
            pre, post = splitter(layer) if splitter is not None else (None, None)
            if post is None:
                post = partial(model.layer_forward, layer)
            norm = normalize_features and layer == 0
            if pre is not None or norm:
                # the node-wise part of the layer once per core node, before the halo pull
                # (so owners send the projected rows, e.g. 2 x hidden instead of 8415 columns)
                width = int(pre(torch.zeros(1, prev_dim)).shape[1]) if pre else prev_dim
                prev_core = {
                    i: _map_core_rows(
                        a,
                        pre,
                        normalize=norm,
                        width=width,
                        batch_size=batch_size,
                        path=os.path.join(tmp, f"pre{layer}_p{i}.npy"),
                    )
                    for i, a in prev_core.items()
                }
                prev_dim = width
            # every rank knows the layer's width without a collective (a one-node dry run)
            out_dim = _out_dim(post, prev_dim)
            fs = DistFeatureStore(
                part_offsets=store.part_offsets,
                part_to_rank=part_to_rank,
                rank=ctx.rank,
                world_size=ctx.world_size,
                local_parts=prev_core,
                feature_dim=prev_dim,
                stats=stats,
            )
            halo_all = np.concatenate(
                [np.asarray(p.halo_ids, dtype=np.int64) for p in parts] or [np.empty(0, np.int64)]
            )
            halo_rows = fs.pull(halo_all).numpy()
            new_core: dict[int, np.ndarray] = {}
            pos = 0
            for part in parts:
                inputs = np.empty((part.num_nodes, prev_dim), dtype=np.float32)
                inputs[: part.num_core] = prev_core[part.index]
                inputs[part.num_core :] = halo_rows[pos : pos + part.num_halo]
                pos += part.num_halo
                local_ids = np.concatenate(
                    [part.core_ids, np.asarray(part.halo_ids, dtype=np.int64)]
                )
                sampler = NeighborSampler(
                    part.indptr,
                    part.indices,
                    (-1,),
                    num_nodes=part.num_nodes,
                    degrees=tables.degrees[local_ids],
                )
                last = layer == num_layers - 1
                if last:
                    masks = [np.asarray(part.mask(s)) for s in splits]
                    rows = np.flatnonzero(np.logical_or.reduce(masks)) if masks else np.empty(0)
                else:
                    rows = np.arange(part.num_core)
                out = None
                for start in range(0, len(rows), batch_size):
                    batch = rows[start : start + batch_size]
                    mb = sampler.full(batch)
                    x = torch.from_numpy(inputs[mb.n_id])
                    h = post(x, mb.blocks[0]).numpy()
                    if out is None:
                        shape = (len(rows), h.shape[1])
                        if not last and shape[0] * shape[1] * 4 > INFERENCE_MEMMAP_BYTES:
                            out = np.lib.format.open_memmap(
                                os.path.join(tmp, f"l{layer}_p{part.index}.npy"),
                                mode="w+",
                                dtype=np.float32,
                                shape=shape,
                            )
                        else:
                            out = np.empty(shape, np.float32)
                    out[start : start + len(batch)] = h
                if last:
                    if out is not None:
                        pred = out.argmax(1)
                        y = tables.labels[part.start + rows]
                        for k, m in enumerate(masks):
                            sel = m[rows]
                            correct[k] += float((pred[sel] == y[sel]).sum())
                            total[k] += float(sel.sum())
                else:
                    if out is None:
                        out = np.empty((0, out_dim), np.float32)
                    new_core[part.index] = out
            if not last:
                prev_dim = out_dim
                prev_core = new_core
    t = torch.from_numpy(np.concatenate([correct, total]))
    if ctx.world_size > 1:
        dist.all_reduce(t)
    c, n = t[: len(splits)].numpy(), t[len(splits) :].numpy()
    return {s: float(c[k] / n[k]) if n[k] else math.nan for k, s in enumerate(splits)}


def _out_dim(post, in_dim: int) -> int:
    """Output width of a layer's ``post`` part (a dry run on a one-node block)."""
    blk = full_graph_block(np.zeros(2, np.int64), np.zeros(0, np.int64))
    with torch.no_grad():
        return int(post(torch.zeros(1, in_dim), blk).shape[1])


class Engine(ABC):
    """A distributed training strategy over a store (one instance per rank).

    Args:
        store: the opened store; config: an :class:`EngineConfig`; ctx: the process group.
    """

    name: str = "engine"

    def __init__(self, store: Store, config: EngineConfig, ctx: DistContext) -> None:
        self.store = store
        self.config = config
        self.ctx = ctx
        self.part_to_rank = parts_of_rank(store.num_parts, ctx.world_size, config.plan)
        self.parts = [store.part(int(i)) for i in np.flatnonzero(self.part_to_rank == ctx.rank)]
        if store.feature_dim is None:
            raise ShoalInputError("the store has no features", path=store.path)
        self.stats = CommStats()
        self.tables = NodeTables(store, self.parts)

    @abstractmethod
    def fit(self) -> RunResult:
        """Train and evaluate; every rank returns the same result."""

    def evaluate(self, model: nn.Module, splits: tuple[str, ...] = ("val", "test")):
        """Exact accuracy of ``model`` (collective); communication is not counted per epoch."""
        return dist_evaluate(
            model,
            self.store,
            self.parts,
            self.part_to_rank,
            self.ctx,
            self.tables,
            splits=splits,
            batch_size=self.config.train.eval_batch_size,
            normalize_features=self.config.train.normalize_features,
        )


def get_engine(name: str) -> type[Engine]:
    """The engine class registered as ``name``."""
    target = ENGINES.get(name)
    if target is None:
        raise ShoalInputError(
            f"unknown engine {name!r}", fix=f"valid engines: {', '.join(sorted(ENGINES))}"
        )
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)


CHECKPOINT_FORMAT = 1


class _Checkpointer:
    """Per-epoch checkpoints of a distributed run in ``checkpoint_dir``.

    Every rank writes its own state (model, optimizer, torch RNG, loop counters) as
    ``epoch{E}-rank{R}.pt``; after a barrier rank 0 commits the epoch by rewriting
    ``last.json`` atomically, then every rank deletes its previous epoch's file. A crash at any
    point leaves ``last.json`` naming an epoch whose files are all complete, so ``--resume``
    (every rank loads its own file) continues exactly where the committed epoch ended. Rank 0
    also writes ``best.pt`` (``{"model": state_dict}``) when validation improves, as the
    single-process trainer does. Resuming needs the same engine and world size.
    """

    def __init__(self, engine: Engine, directory: str) -> None:
        self.engine = engine
        self.dir = Path(directory)
        self.rank = engine.ctx.rank
        if self.rank == 0:
            self.dir.mkdir(parents=True, exist_ok=True)
        engine.ctx.barrier()

    def _file(self, epoch: int, rank: int | None = None) -> Path:
        return self.dir / f"epoch{epoch}-rank{self.rank if rank is None else rank}.pt"

    def load(self) -> dict[str, Any] | None:
        """This rank's state of the last committed epoch (None when there is none)."""
        last = self.dir / "last.json"
        if not last.exists():
            return None
        meta = read_json(last)
        e = self.engine
        for key, want in (("engine", e.name), ("world_size", e.ctx.world_size)):
            if meta.get(key) != want:
                raise ShoalInputError(
                    f"checkpoint was written by {key} {meta.get(key)!r}, this run has {want!r}",
                    path=last,
                    fix="resume with the same engine and --nproc, or use a new --checkpoint-dir",
                )
        return load_checkpoint(self._file(int(meta["epoch"])))

    def save(self, epoch: int, state: dict[str, Any], best_improved: bool) -> None:
        """Write this rank's state for ``epoch`` (epochs done) and commit it. Collective."""
        save_checkpoint(self._file(epoch), state)
        self.engine.ctx.barrier()
        if self.rank == 0:
            if best_improved:
                save_checkpoint(self.dir / "best.pt", {"model": state["best_model"]})
            write_json_atomic(
                self.dir / "last.json",
                {
                    "format": CHECKPOINT_FORMAT,
                    "engine": self.engine.name,
                    "world_size": self.engine.ctx.world_size,
                    "epoch": epoch,
                    "files": [self._file(epoch, r).name for r in range(self.engine.ctx.world_size)],
                },
            )
        self.engine.ctx.barrier()
        for old in self.dir.glob(f"epoch*-rank{self.rank}.pt"):
            if old.name != self._file(epoch).name:
                old.unlink(missing_ok=True)


def run_epochs(engine: Engine, model: torch.nn.Module, train_epoch, after_epoch=None) -> RunResult:
    """The epoch loop both engines share: train, evaluate every ``eval_every`` epochs, keep the
    best-validation weights, test them at the end.

    Also as in :class:`shoal.train.Trainer`: early stopping after ``patience`` evaluations
    without a better validation accuracy (every rank sees the same collective accuracy, so
    all stop together), one JSON line per epoch in ``metrics_file`` (rank 0), and per-epoch
    checkpoints with ``resume`` (:class:`_Checkpointer`). The engine's ``optimizer`` attribute
    is checkpointed with the model.
    """
    cfg = engine.config
    tc = cfg.train
    history: list[dict[str, Any]] = []
    best_val, best_epoch, best_state, bad_evals = -1.0, 0, None, 0
    eval_seconds = 0.0
    start = 0
    optimizer = getattr(engine, "optimizer", None)
    ckpt = _Checkpointer(engine, tc.checkpoint_dir) if tc.checkpoint_dir else None
    if ckpt is not None and tc.resume:
        st = ckpt.load()
        if st is not None:
            model.load_state_dict(st["model"])
            if optimizer is not None:
                optimizer.load_state_dict(st["optimizer"])
            torch.set_rng_state(st["torch_rng"])
            start = int(st["epoch"])
            best_val, best_epoch = float(st["best_val"]), int(st["best_epoch"])
            bad_evals, best_state = int(st["bad_evals"]), st["best_model"]
            history = list(st["history"])
            if engine.ctx.is_rank0:
                logging.getLogger("shoal.engines").info(
                    "resumed from %s after epoch %d", ckpt.dir, start
                )
    metrics = Path(tc.metrics_file) if tc.metrics_file and engine.ctx.is_rank0 else None
    if metrics is not None:
        metrics.parent.mkdir(parents=True, exist_ok=True)
    stop = bad_evals >= tc.patience > 0
    for epoch in range(start, tc.epochs):
        if stop:
            break
        rec = train_epoch(epoch)
        if after_epoch is not None:
            after_epoch(epoch, rec)
        last = epoch + 1 == tc.epochs
        improved = False
        if (epoch + 1) % cfg.eval_every == 0 or last:
            if rec.get("evaluable", True):
                t0 = time.perf_counter()
                val = engine.evaluate(model, ("val",))["val"]
                eval_seconds += time.perf_counter() - t0
                rec["val_accuracy"] = val
                if val > best_val:
                    best_val, best_epoch, bad_evals, improved = val, epoch + 1, 0, True
                    best_state = copy.deepcopy(model.state_dict())
                else:
                    bad_evals += 1
        history.append(rec)
        stop = tc.patience > 0 and bad_evals >= tc.patience
        if metrics is not None:
            with open(metrics, "a") as f:
                f.write(json.dumps(rec) + "\n")
        if ckpt is not None:
            ckpt.save(
                epoch + 1,
                {
                    "format": CHECKPOINT_FORMAT,
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict() if optimizer is not None else None,
                    "torch_rng": torch.get_rng_state(),
                    "epoch": epoch + 1,
                    "best_val": best_val,
                    "best_epoch": best_epoch,
                    "bad_evals": bad_evals,
                    "best_model": best_state,
                    "history": history,
                    "config": tc.to_dict(),
                },
                improved,
            )
        if engine.ctx.is_rank0:
            # every 10th epoch (and the first) at INFO, the others at DEBUG
            logging.getLogger("shoal.engines").log(
                logging.INFO if epoch == 0 or (epoch + 1) % 10 == 0 or stop else logging.DEBUG,
                "epoch %d loss %.4f val %s %.2fs%s",
                epoch + 1,
                rec["loss"],
                rec.get("val_accuracy", "-"),
                rec["seconds"],
                f" (early stop: {bad_evals} evaluations without improvement)" if stop else "",
            )
    if best_state is not None:
        model.load_state_dict(best_state)
    t0 = time.perf_counter()
    final = engine.evaluate(model, ("val", "test"))
    eval_seconds += time.perf_counter() - t0
    n = max(len(history), 1)
    keys = sorted({k for r in history for k in r["time_split"]})
    comm_keys = sorted({k for r in history for k in r["comm"]})
    rss = torch.tensor([peak_rss_bytes()], dtype=torch.float64)
    if engine.ctx.world_size > 1:
        torch.distributed.all_reduce(rss, op=torch.distributed.ReduceOp.MAX)
    return RunResult(
        engine=engine.name,
        world_size=engine.ctx.world_size,
        num_parts=engine.store.num_parts,
        test_accuracy=final["test"],
        val_accuracy=final["val"],
        best_epoch=best_epoch,
        epochs=len(history),
        seconds_per_epoch=sum(r["seconds"] for r in history) / n,
        time_split={k: sum(r["time_split"].get(k, 0.0) for r in history) / n for k in keys},
        comm_per_epoch={k: sum(r["comm"].get(k, 0.0) for r in history) / n for k in comm_keys},
        batches_per_epoch=int(getattr(engine, "num_batches", 0)),
        eval_seconds=eval_seconds,
        num_parameters=sum(p.numel() for p in model.parameters()),
        peak_rss_bytes=int(rss.item()),
        config={
            "train": cfg.train.to_dict(),
            "average_every": cfg.average_every,
            "plan": cfg.plan,
            "eval_every": cfg.eval_every,
        },
        history=history,
    )
