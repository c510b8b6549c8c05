"""The shared training loop: mini-batch training, exact layer-wise evaluation, checkpoints.

Single process, no partitions: the distributed engines reuse its pieces —
:class:`TrainData` (what a trainer reads: an in-neighbour CSR, memory-mapped features and
labels, split ids), :class:`BatchLoader` (shuffled seeds -> sampled blocks + gathered features
+ labels, timed), :func:`train_step`, :func:`layerwise_inference`/:func:`evaluate`, and
:func:`save_checkpoint`/:func:`load_checkpoint`. :class:`Trainer` puts them together.

Training follows GraphSAGE's mini-batch scheme (Hamilton et al., NeurIPS 2017, Algorithm 2):
sample each batch's L-hop neighbourhood with per-hop fanouts, run the model on the blocks,
minimise cross-entropy with Adam (Kingma & Ba, ICLR 2015). Evaluation is exact: layer ``l``
is computed for every node from all its in-neighbours' layer ``l - 1`` outputs, in node
batches, into a temporary array (a memory map when large), so no sampling noise enters the
validation/test accuracy and memory stays bounded.
"""

from __future__ import annotations

import copy
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import tomllib
import torch
from torch import nn
from torch.nn import functional as F

from shoal.data.format import GraphDir
from shoal.errors import ShoalInputError
from shoal.nn import MODELS, build_model
from shoal.sample.features import FeatureGatherer, gather_rows
from shoal.sample.sampler import MiniBatch, NeighborSampler, parse_fanouts
from shoal.utils.memory import peak_rss_bytes
from shoal.utils.progress import progress

__all__ = [
    "Batch",
    "BatchLoader",
    "TrainConfig",
    "TrainData",
    "Timer",
    "TrainResult",
    "Trainer",
    "batch_seed",
    "evaluate",
    "layerwise_inference",
    "load_checkpoint",
    "save_checkpoint",
    "set_threads",
    "train_step",
]

#: Intermediate inference arrays larger than this go to a memory-mapped temporary file.
INFERENCE_MEMMAP_BYTES = 256 << 20


@dataclass(kw_only=True)
class TrainConfig:
    """Hyper-parameters and run options of the single-process trainer (and of the engines).

    Attributes:
        model: registered model name (``shoal.nn.MODELS``; default ``"sage"``).
        fanouts: neighbours sampled per hop, hop 1 first (PyG's ``num_neighbors`` order);
            -1 = all; its length is the number of layers (default ``(15, 10, 5)``).
        batch_size: training seeds per mini-batch (default 1024).
        hidden: hidden width (default 256).
        epochs: maximum number of epochs (default 20).
        lr: Adam learning rate (default 0.003).
        dropout: dropout probability on every layer's input (default 0.5).
        weight_decay: Adam L2 penalty (default 0.0).
        patience: stop after this many evaluations without a better validation accuracy;
            0 disables early stopping (default 0).
        eval_every: evaluate on the validation set every this many epochs (default 1).
        eval_batch_size: nodes per batch of layer-wise inference (default 4096).
        seed: seed of initialisation, shuffling, sampling and dropout (default 0).
        threads: torch and numba threads; None keeps the current settings (default None).
        normalize_features: divide each feature row by its sum when it is gathered, as Kipf &
            Welling do for bag-of-words features (default false).
        heads: attention heads of GAT's hidden layers (default 8).
        checkpoint_dir: write ``last.pt`` (every epoch) and ``best.pt`` there (default None).
        resume: continue from ``checkpoint_dir/last.pt`` when it exists (default false).
        metrics_file: append one JSON line per epoch to this file (default None).
        progress: show tqdm bars; None = only when stderr is a terminal (default None).
    """

    model: str = "sage"
    fanouts: tuple[int, ...] = (15, 10, 5)
    batch_size: int = 1024
    hidden: int = 256
    epochs: int = 20
    lr: float = 0.003
    dropout: float = 0.5
    weight_decay: float = 0.0
    patience: int = 0
    eval_every: int = 1
    eval_batch_size: int = 4096
    seed: int = 0
    threads: int | None = None
    normalize_features: bool = False
    heads: int = 8
    checkpoint_dir: str | None = None
    resume: bool = False
    metrics_file: str | None = None
    progress: bool | None = None

    def __post_init__(self) -> None:
        self.fanouts = parse_fanouts(self.fanouts)
        if self.model not in MODELS:
            raise ValueError(
                f"unknown model {self.model!r}; valid names: {', '.join(sorted(MODELS))}"
            )
        for name in ("batch_size", "hidden", "epochs", "eval_every", "eval_batch_size", "heads"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"lr must be a positive number, got {self.lr}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if self.patience < 0:
            raise ValueError(f"patience must be >= 0 (0 = off), got {self.patience}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")
        if self.resume and not self.checkpoint_dir:
            raise ValueError("resume needs checkpoint_dir")

    @property
    def num_layers(self) -> int:
        return len(self.fanouts)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["fanouts"] = list(self.fanouts)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, origin: str = "config") -> TrainConfig:
        """Build from a mapping; unknown keys and bad values raise ShoalInputError."""
        known = {f.name for f in fields(cls)}
        for k in d:
            if k not in known:
                raise ShoalInputError(
                    f"unknown option {k!r}", path=origin, fix=f"valid: {', '.join(sorted(known))}"
                )
        try:
            return cls(**d)
        except (TypeError, ValueError) as e:
            raise ShoalInputError(str(e), path=origin) from None

    @classmethod
    def from_toml(cls, path: str | os.PathLike, **overrides: Any) -> TrainConfig:
        """Load a TOML file (top level or a ``[train]`` table); ``overrides`` win."""
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text())
        except FileNotFoundError:
            raise ShoalInputError("config file not found", path=p) from None
        except tomllib.TOMLDecodeError as e:
            raise ShoalInputError(f"invalid TOML: {e}", path=p) from None
        data = dict(data.get("train", data))
        data.update(overrides)
        return cls.from_dict(data, origin=str(p))


@dataclass
class TrainData:
    """What a trainer reads. Arrays may be memory maps; nothing here is copied whole.

    ``indptr``/``indices``: in-neighbour CSR over ids ``[0, num_nodes)`` (rows may stop
    short of ``num_nodes``: e.g. a store part's halo nodes); ``features`` ``(num_nodes, F)``;
    ``labels`` ``(num_nodes,)`` int (-1 unlabelled); split ids index the same id space.
    """

    indptr: np.ndarray
    indices: np.ndarray
    features: np.ndarray
    labels: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    num_classes: int
    num_nodes: int
    degrees: np.ndarray | None = None
    name: str = "graph"

    @classmethod
    def from_graph_dir(cls, graph: GraphDir | str | os.PathLike) -> TrainData:
        g = graph if isinstance(graph, GraphDir) else GraphDir.open(graph)
        x, y = g.features(), g.labels()
        if x is None or y is None:
            raise ShoalInputError(
                "training needs features.npy and labels.npy",
                path=g.path,
                fix="import a node-classification dataset (with features, labels and splits)",
            )
        splits = {}
        for s in ("train", "val", "test"):
            idx = g.split(s)
            if idx is None or len(idx) == 0:
                raise ShoalInputError(
                    f"split {s!r} ({s}_idx.npy) is missing or empty",
                    path=g.path,
                    fix="import the dataset with train/val/test splits",
                )
            splits[s] = np.asarray(idx, dtype=np.int64)
        csr = g.csr("in")
        num_classes = g.num_classes or int(np.max(y)) + 1
        return cls(
            indptr=csr.indptr,
            indices=csr.indices,
            features=x,
            labels=y,
            train_idx=splits["train"],
            val_idx=splits["val"],
            test_idx=splits["test"],
            num_classes=int(num_classes),
            num_nodes=g.num_nodes,
            name=g.name,
        )

    @property
    def feature_dim(self) -> int:
        return int(self.features.shape[1])

    def split(self, name: str) -> np.ndarray:
        return {"train": self.train_idx, "val": self.val_idx, "test": self.test_idx}[name]


def set_threads(threads: int | None) -> None:
    """Set torch's and numba's thread counts (None: leave them)."""
    if threads is None:
        return
    import numba

    torch.set_num_threads(threads)
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))


def batch_seed(seed: int, epoch: int, step: int) -> int:
    """The sampling seed of one mini-batch: a function of (run seed, epoch, step) only."""
    ss = np.random.SeedSequence([seed, epoch, step])
    return int(ss.generate_state(1, np.uint64)[0])


class Timer:
    """Accumulates wall time per phase name."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds


@dataclass
class Batch:
    """A ready mini-batch: sampled blocks, input features of ``mb.n_id``, seed labels."""

    mb: MiniBatch
    x: torch.Tensor
    y: torch.Tensor


class BatchLoader:
    """Yields an epoch's mini-batches: shuffled seeds, sampling, feature gather (timed).

    Args:
        sampler: the neighbour sampler; gatherer: the feature gatherer; labels: ``(N,)`` ints;
        seeds: training node ids; batch_size: seeds per batch; seed: run seed.
    Shuffling and sampling depend only on ``(seed, epoch, step)``, so a resumed run sees the
    same batches. Phases ``sampling`` and ``gather`` are added to ``timer``.
    """

    def __init__(
        self,
        sampler: NeighborSampler,
        gatherer: FeatureGatherer,
        labels: np.ndarray,
        seeds: np.ndarray,
        *,
        batch_size: int,
        seed: int,
        timer: Timer | None = None,
    ) -> None:
        self.sampler = sampler
        self.gatherer = gatherer
        self.labels = labels
        self.seeds = np.asarray(seeds, dtype=np.int64)
        self.batch_size = batch_size
        self.seed = seed
        self.timer = timer or Timer()

    def __len__(self) -> int:
        return max(1, math.ceil(len(self.seeds) / self.batch_size)) if len(self.seeds) else 0

    def epoch(self, epoch: int) -> Iterator[Batch]:
        order = np.random.default_rng([self.seed, epoch]).permutation(len(self.seeds))
        seeds = self.seeds[order]
        for step, start in enumerate(range(0, len(seeds), self.batch_size)):
            t0 = time.perf_counter()
            mb = self.sampler.sample(
                seeds[start : start + self.batch_size], batch_seed(self.seed, epoch, step)
            )
            t1 = time.perf_counter()
            x = self.gatherer.gather(mb.n_id)
            y = torch.from_numpy(np.asarray(self.labels[mb.seeds], dtype=np.int64))
            t2 = time.perf_counter()
            self.timer.add("sampling", t1 - t0)
            self.timer.add("gather", t2 - t1)
            yield Batch(mb, x, y)


def train_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, batch: Batch
) -> tuple[float, int]:
    """One optimisation step on a batch; returns (loss, number of correct predictions)."""
    model.train()
    optimizer.zero_grad(set_to_none=True)
    out = model(batch.x, batch.mb.blocks)
    loss = F.cross_entropy(out, batch.y)
    loss.backward()
    optimizer.step()
    return float(loss.detach()), int((out.detach().argmax(1) == batch.y).sum())


def _temp_array(shape: tuple[int, int], tmpdir: str, name: str) -> np.ndarray:
    if shape[0] * shape[1] * 4 > INFERENCE_MEMMAP_BYTES:
        return np.lib.format.open_memmap(
            os.path.join(tmpdir, name), mode="w+", dtype=np.float32, shape=shape
        )
    return np.empty(shape, dtype=np.float32)


@torch.no_grad()
def layerwise_inference(
    model: nn.Module,
    data: TrainData,
    nodes: np.ndarray,
    *,
    sampler: NeighborSampler | None = None,
    normalize_features: bool = False,
    batch_size: int = 4096,
    show_progress: bool | None = None,
) -> np.ndarray:
    """Exact outputs (logits) of ``model`` for ``nodes``, computed layer by layer.

    Every layer but the last is computed for all ``num_nodes`` nodes (in batches of
    ``batch_size`` destination nodes with their full in-neighbourhoods) into a temporary array
    that becomes the next layer's input; the last layer only for ``nodes``. Models need a
    ``layer_forward(l, x, block)`` and ``num_layers`` (every :class:`shoal.nn.BlockGNN` has
    them); other modules are evaluated on full L-hop neighbourhoods sampled with fanout -1.
    A model's ``inference_split(l)`` (see :class:`shoal.nn.BlockGNN`) lets its node-wise part
    (e.g. projecting wide features) run once per node instead of once per edge.
    """
    model.eval()
    nodes = np.asarray(nodes, dtype=np.int64)
    if sampler is None:
        sampler = NeighborSampler(
            data.indptr, data.indices, (-1,), num_nodes=data.num_nodes, degrees=data.degrees
        )
    gatherer = FeatureGatherer(data.features, normalize=normalize_features)
    if not hasattr(model, "layer_forward"):
        out = None
        num_layers = int(getattr(model, "num_layers", 0)) or None
        if num_layers is None:
            raise ValueError("a model without layer_forward must define num_layers")
        for start in range(0, len(nodes), batch_size):
            mb = sampler.sample(nodes[start : start + batch_size], 0, fanouts=(-1,) * num_layers)
            h = model(gatherer.gather(mb.n_id), mb.blocks).numpy()
            if out is None:
                out = np.empty((len(nodes), h.shape[1]), dtype=np.float32)
            out[start : start + len(h)] = h
        return out if out is not None else np.empty((0, 0), np.float32)
    L = int(model.num_layers)
    all_nodes = np.arange(data.num_nodes, dtype=np.int64)
    splitter = getattr(model, "inference_split", None)
    with tempfile.TemporaryDirectory(prefix="shoal-infer-") as tmpdir:
        prev: np.ndarray | None = None  # None = the (memory-mapped) input features
        bufs: dict[str, np.ndarray] = {}

        def rows(ids: np.ndarray) -> torch.Tensor:
            if prev is None:
                return gatherer.gather(ids)
            b = bufs.get("in")
            if b is None or b.shape[0] < len(ids) or b.shape[1] != prev.shape[1]:
                b = bufs["in"] = np.empty((max(len(ids), 1), prev.shape[1]), np.float32)
            return torch.from_numpy(gather_rows(prev, ids, b)[: len(ids)])

        for layer in range(L):
            pre, post = splitter(layer) if splitter else (None, None)
            if pre is not None:
                # node-wise part once per node, into a temporary array
                staged = None
                for start in range(0, data.num_nodes, batch_size):
                    ids = all_nodes[start : start + batch_size]
                    h = pre(rows(ids)).numpy()
                    if staged is None:
                        staged = _temp_array(
                            (data.num_nodes, h.shape[1]), tmpdir, f"pre{layer}.npy"
                        )
                    staged[start : start + len(ids)] = h
                prev = staged
            targets = nodes if layer == L - 1 else all_nodes
            out = None
            bar = progress(
                total=len(targets),
                desc=f"inference layer {layer}",
                unit="node",
                enable=show_progress,
            )
            for start in range(0, len(targets), batch_size):
                batch = targets[start : start + batch_size]
                mb = sampler.full(batch)
                x = rows(mb.n_id)
                if post is not None:
                    h = post(x, mb.blocks[0]).numpy()
                else:
                    h = model.layer_forward(layer, x, mb.blocks[0]).numpy()
                if out is None:
                    shape = (len(targets), h.shape[1])
                    out = (
                        np.empty(shape, np.float32)
                        if layer == L - 1
                        else _temp_array(shape, tmpdir, f"layer{layer}.npy")
                    )
                out[start : start + len(batch)] = h
                bar.update(len(batch))
            bar.close()
            prev = out
        result = np.array(prev) if prev is not None else np.empty((0, 0), np.float32)
    return result


def evaluate(
    model: nn.Module, data: TrainData, splits: tuple[str, ...] = ("val", "test"), **kwargs: Any
) -> dict[str, float]:
    """Accuracy on each split by exact :func:`layerwise_inference` (one pass for all splits)."""
    ids = [data.split(s) for s in splits]
    nodes = np.concatenate(ids) if ids else np.empty(0, np.int64)
    logits = layerwise_inference(model, data, nodes, **kwargs)
    pred = logits.argmax(1) if len(nodes) else np.empty(0, np.int64)
    y = np.asarray(data.labels[nodes]) if len(nodes) else np.empty(0, np.int64)
    out, pos = {}, 0
    for s, idx in zip(splits, ids, strict=True):
        n = len(idx)
        out[s] = float((pred[pos : pos + n] == y[pos : pos + n]).mean()) if n else float("nan")
        pos += n
    return out


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> None:
    """Write a checkpoint atomically (temporary sibling + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Load a checkpoint with ``weights_only=True`` (no arbitrary code runs)."""
    try:
        return torch.load(Path(path), map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ShoalInputError("checkpoint not found", path=path) from None
    except Exception as e:  # a corrupt or foreign file
        raise ShoalInputError(f"cannot load checkpoint: {e}", path=path) from None


@dataclass
class TrainResult:
    """Outcome of a run; ``to_json()`` is what ``shoal train --json`` writes."""

    test_accuracy: float
    val_accuracy: float
    best_epoch: int
    epochs: int
    seconds_per_epoch: float
    time_split: dict[str, float]
    eval_seconds: float
    num_parameters: int
    peak_rss_bytes: int
    config: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["sampling_seconds_per_epoch"] = self.time_split.get("sampling", 0.0)
        d["gather_seconds_per_epoch"] = self.time_split.get("gather", 0.0)
        d["forward_backward_seconds_per_epoch"] = self.time_split.get("forward_backward", 0.0)
        return d


class Trainer:
    """Single-process mini-batch trainer with best-validation model selection.

    Args:
        config: a :class:`TrainConfig`.
        data: a :class:`TrainData`.
        model: any ``nn.Module`` called as ``model(x, blocks)`` (default: built from
            ``config.model`` by :func:`shoal.nn.build_model`).
    """

    def __init__(self, config: TrainConfig, data: TrainData, model: nn.Module | None = None):
        self.config = config
        self.data = data
        set_threads(config.threads)
        torch.manual_seed(config.seed)
        if model is None:
            extra = {"heads": config.heads} if config.model == "gat" else {}
            model = build_model(
                config.model,
                in_dim=data.feature_dim,
                hidden=config.hidden,
                out_dim=data.num_classes,
                num_layers=config.num_layers,
                dropout=config.dropout,
                **extra,
            )
        self.model = model
        self.optimizer = torch.optim.Adam(
            model.parameters(), lr=config.lr, weight_decay=config.weight_decay
        )
        self.sampler = NeighborSampler(
            data.indptr,
            data.indices,
            config.fanouts,
            num_nodes=data.num_nodes,
            degrees=data.degrees,
        )
        self.timer = Timer()
        self.loader = BatchLoader(
            self.sampler,
            FeatureGatherer(data.features, normalize=config.normalize_features),
            data.labels,
            data.train_idx,
            batch_size=config.batch_size,
            seed=config.seed,
            timer=self.timer,
        )
        self.epoch = 0  # epochs completed
        self.best_val = -1.0
        self.best_epoch = 0
        self.bad_evals = 0
        self.best_state: dict[str, torch.Tensor] | None = None
        self.history: list[dict[str, Any]] = []

    # ---------------------------------------------------------------- checkpoints
    def state(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "epoch": self.epoch,
            "best_val": self.best_val,
            "best_epoch": self.best_epoch,
            "bad_evals": self.bad_evals,
            "best_model": self.best_state,
            "torch_rng": torch.get_rng_state(),
            "config": self.config.to_dict(),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.epoch = int(state["epoch"])
        self.best_val = float(state["best_val"])
        self.best_epoch = int(state["best_epoch"])
        self.bad_evals = int(state["bad_evals"])
        self.best_state = state.get("best_model")
        torch.set_rng_state(state["torch_rng"])

    # ---------------------------------------------------------------- loop
    def train_epoch(self) -> dict[str, Any]:
        """Train one epoch; returns its metrics (loss, train accuracy, time split)."""
        before = dict(self.timer.seconds)
        total_loss, correct, seen = 0.0, 0, 0
        bar = progress(
            total=len(self.loader),
            desc=f"epoch {self.epoch + 1}",
            unit="batch",
            enable=self.config.progress,
        )
        t_epoch = time.perf_counter()
        for batch in self.loader.epoch(self.epoch):
            t0 = time.perf_counter()
            loss, ok = train_step(self.model, self.optimizer, batch)
            self.timer.add("forward_backward", time.perf_counter() - t0)
            n = len(batch.y)
            total_loss += loss * n
            correct += ok
            seen += n
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
        bar.close()
        seconds = time.perf_counter() - t_epoch
        self.epoch += 1
        split = {k: v - before.get(k, 0.0) for k, v in self.timer.seconds.items()}
        return {
            "epoch": self.epoch,
            "loss": total_loss / max(seen, 1),
            "train_accuracy": correct / max(seen, 1),
            "seconds": seconds,
            "time_split": split,
        }

    def evaluate(self, splits: tuple[str, ...] = ("val",)) -> dict[str, float]:
        return evaluate(
            self.model,
            self.data,
            splits,
            sampler=self.sampler,
            normalize_features=self.config.normalize_features,
            batch_size=self.config.eval_batch_size,
            show_progress=self.config.progress,
        )

    def _log(self, record: dict[str, Any]) -> None:
        self.history.append(record)
        if self.config.metrics_file:
            p = Path(self.config.metrics_file)
            p.parent.mkdir(parents=True, exist_ok=True)
            with open(p, "a") as f:
                f.write(json.dumps(record) + "\n")

    def fit(self) -> TrainResult:
        """Train until ``epochs`` or early stopping; test the best-validation model."""
        cfg = self.config
        ckpt_dir = Path(cfg.checkpoint_dir) if cfg.checkpoint_dir else None
        if cfg.resume and ckpt_dir and (ckpt_dir / "last.pt").exists():
            self.load_state(load_checkpoint(ckpt_dir / "last.pt"))
        train_seconds: list[float] = []
        splits: list[dict[str, float]] = []
        eval_seconds = 0.0
        while self.epoch < cfg.epochs:
            rec = self.train_epoch()
            train_seconds.append(rec["seconds"])
            splits.append(rec["time_split"])
            if self.epoch % cfg.eval_every == 0 or self.epoch == cfg.epochs:
                t0 = time.perf_counter()
                val = self.evaluate(("val",))["val"]
                eval_seconds += time.perf_counter() - t0
                rec["val_accuracy"] = val
                if val > self.best_val:
                    self.best_val, self.best_epoch, self.bad_evals = val, self.epoch, 0
                    self.best_state = copy.deepcopy(self.model.state_dict())
                    if ckpt_dir:
                        save_checkpoint(ckpt_dir / "best.pt", {"model": self.best_state})
                else:
                    self.bad_evals += 1
            self._log(rec)
            if ckpt_dir:
                save_checkpoint(ckpt_dir / "last.pt", self.state())
            if cfg.patience and self.bad_evals >= cfg.patience:
                break
        if self.best_state is not None:
            self.model.load_state_dict(self.best_state)
        t0 = time.perf_counter()
        final = self.evaluate(("val", "test"))
        eval_seconds += time.perf_counter() - t0
        n = max(len(train_seconds), 1)
        keys = {k for s in splits for k in s}
        return TrainResult(
            test_accuracy=final["test"],
            val_accuracy=final["val"],
            best_epoch=self.best_epoch,
            epochs=self.epoch,
            seconds_per_epoch=sum(train_seconds) / n,
            time_split={k: sum(s.get(k, 0.0) for s in splits) / n for k in sorted(keys)},
            eval_seconds=eval_seconds,
            num_parameters=sum(p.numel() for p in self.model.parameters()),
            peak_rss_bytes=peak_rss_bytes(),
            config=cfg.to_dict(),
            history=self.history,
        )


if __name__ == "__main__":
    # `python -m shoal.train ...` (and `torchrun ... -m shoal.train --store ...`) is `shoal train`
    from shoal.cli import main as _cli_main

    raise SystemExit(_cli_main(["train", *sys.argv[1:]]))
