"""The sections of a run's configuration tree (:class:`~shoal.training.TrainConfig`): one
keyword-only dataclass per component, each validating its own values once.

A value left ``None`` where the docstring says "the preset's" is filled by the tree from the
hyper-parameter preset (:func:`~shoal.training.presets.preset_defaults`); the values a
section is given are checked in its ``__post_init__``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shoal.nn import MODELS, TYPED_MODELS
from shoal.rows.budget import STRUCTURE_MODES
from shoal.rows.featstore import CACHE_POLICIES
from shoal.sample.sampler import parse_fanouts
from shoal.utils.device import check_device_spec
from shoal.utils.io import parse_size

#: where the single-process trainer produces its batches (``RunConfig.sample_on``)
SAMPLE_ON = ("auto", "host", "device")

__all__ = [
    "CheckpointConfig",
    "EvalConfig",
    "MemoryConfig",
    "ModelConfig",
    "OptimConfig",
    "RunConfig",
    "SAMPLE_ON",
    "SamplingConfig",
]


def _at_least_one(section: object, *names: str) -> None:
    for name in names:
        v = getattr(section, name)
        if v is not None and int(v) < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")


@dataclass(kw_only=True)
class ModelConfig:
    """The model.

    Args:
        name: registered model name (``shoal.nn.MODELS``; flag ``--model``; default
            ``"sage"``).
        factory: ``"module:function"`` building the model instead (called with
            ``in_dim, hidden, out_dim, num_layers, dropout``); a module called as
            ``model(x, edge_index)`` (PyG) is adapted to blocks (``--model-factory``; default
            None).
        hidden: hidden width (default: the preset's).
        heads: attention heads of GAT's hidden layers (default: the preset's, 8).
        dropout: dropout probability on every layer's input (default: the preset's).
        normalize_features: divide each feature row by its sum when it is read, as Kipf &
            Welling do for bag-of-words features; ``"auto"``: when the rows are non-negative
            with at most 64 non-zeros on average (why: :data:`~shoal.training.presets.
            AUTO_NORMALIZE_MAX_NNZ`; default: the preset's, "auto" for GCN, GAT and SGC).
        type_embeddings: where a typed graph's featureless node types keep their learned
            embeddings: ``"memory"`` (an ``nn.Embedding`` per type, dense Adam), ``"disk"``
            (a table per type on disk, in ``--embedding-dir`` or ``<graph>.emb/<type>``,
            rows read per batch and updated by sparse Adam, as DGL's ``NodeEmbedding``), or
            ``"auto"``: disk when the tables with Adam's two moments would take over a
            quarter of ``--memory`` (default ``"auto"``; one process only for now).
    """

    name: str = "sage"
    factory: str | None = None
    hidden: int | None = None
    heads: int | None = None
    dropout: float | None = None
    normalize_features: bool | str | None = None
    type_embeddings: str = "auto"

    def __post_init__(self) -> None:
        if self.type_embeddings not in ("auto", "memory", "disk"):
            raise ValueError(
                f"type_embeddings must be auto, memory or disk, got {self.type_embeddings!r}"
            )
        if self.name not in MODELS and self.name not in TYPED_MODELS:
            names = ", ".join(sorted(MODELS)) + "; for typed graphs " + ", ".join(TYPED_MODELS)
            raise ValueError(f"unknown model {self.name!r}; valid names: {names}")
        _at_least_one(self, "hidden", "heads")
        if self.dropout is not None and not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.normalize_features not in (None, True, False, "auto"):
            raise ValueError(
                f"normalize_features must be true, false or 'auto', got {self.normalize_features!r}"
            )


@dataclass(kw_only=True)
class OptimConfig:
    """Optimisation (Adam).

    Args:
        epochs: maximum number of epochs (default: the preset's).
        min_steps: train at least this many optimizer steps: the epochs grow to
            ``ceil(min_steps / steps per epoch)`` on a small training set (default: the
            preset's when ``epochs`` is not given -- 200 for GraphSAGE, whose paper's 10
            epochs are thousands of steps on Reddit but 10 on 160 labelled nodes -- else 0).
        lr: Adam learning rate (default: the preset's).
        weight_decay: Adam L2 penalty (default: the preset's).
        patience: stop after this many evaluations without a better validation accuracy;
            0 disables early stopping (default 0).
    """

    epochs: int | None = None
    min_steps: int | None = None
    lr: float | None = None
    weight_decay: float | None = None
    patience: int = 0

    def __post_init__(self) -> None:
        _at_least_one(self, "epochs")
        if self.min_steps is not None and self.min_steps < 0:
            raise ValueError(f"min_steps must be >= 0, got {self.min_steps}")
        if self.lr is not None and not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"lr must be a positive number, got {self.lr}")
        if self.weight_decay is not None and self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if self.patience < 0:
            raise ValueError(f"patience must be >= 0 (0 = off), got {self.patience}")


@dataclass(kw_only=True)
class SamplingConfig:
    """Neighbour sampling and batches.

    Args:
        fanouts: neighbours sampled per hop, hop 1 first (PyG's ``num_neighbors`` order);
            -1 = all; its length is the number of layers (default: the preset's).
            DGL's ``NeighborSampler`` and the papers list the input layer first: DGL's
            ``[5, 10, 15]`` is shoal's ``(15, 10, 5)``. Parsed and checked here, once.
        fanouts_order: how ``fanouts`` is written: ``"hop-first"`` (default) or
            ``"input-first"`` (DGL's order, for ported scripts); an input-first list is
            reversed on construction, after which the section holds ``"hop-first"``.
        batch_size: training seeds per mini-batch (positive edges for the link task)
            (default: the preset's: 1024 seeds; 512 edges for links).
    """

    fanouts: tuple[int, ...] | None = None
    fanouts_order: str = "hop-first"
    batch_size: int | None = None

    def __post_init__(self) -> None:
        if self.fanouts_order not in ("hop-first", "input-first"):
            raise ValueError(
                f"fanouts_order must be 'hop-first' or 'input-first', got {self.fanouts_order!r}"
            )
        if self.fanouts is not None:
            self.fanouts = parse_fanouts(self.fanouts)
            if self.fanouts_order == "input-first":  # DGL's order: store hop 1 first
                self.fanouts, self.fanouts_order = tuple(reversed(self.fanouts)), "hop-first"
        _at_least_one(self, "batch_size")

    @property
    def num_layers(self) -> int:
        return len(self.fanouts or ())


@dataclass(kw_only=True)
class EvalConfig:
    """Evaluation.

    Args:
        every: evaluate on the validation set every this many epochs, or ``"auto"``
            (default): a cadence from the graph's sizes and the fanouts so that evaluation
            takes about a fifth of the run or less (:func:`~shoal.training.loop.
            eval_work_ratio`), recorded as ``eval_every_chosen``, or every epoch with
            ``fanouts`` (a sampled validation); the last epoch is always evaluated, exactly
            (flag ``--eval-every``).
        test: also measure the test accuracy at every evaluation, recorded in the epoch's
            record (``test_accuracy``) to follow convergence, as DistGNN-MB's "epochs to
            reach the target" does; the best-validation weights are still chosen on
            validation only (``--eval-test``; default false).
        batch_size: target nodes per batch of the exact layer-wise inference; a batch reads
            the rows of all their in-neighbours, so this bounds its memory
            (``--eval-batch-size``; default 1024).
        halo: how the distributed exact evaluation's blocks get other ranks' rows
            (``--eval-halo``): ``"served"`` (default) or ``"stored"``, the ablation
            (docs/distributed.md#minibatch-distdgl).
        fanouts: neighbours sampled per hop (hop 1 first, as ``fanouts``; one per layer) for
            the evaluations *during* training: a sampled validation (GraphStorm's
            ``eval_fanout``), each batch drawn from a fixed stream so that every evaluation
            sees the same neighbourhoods; the final evaluation (and the last epoch's) stays
            exact (``--eval-fanouts``; default None: every evaluation exact; node
            classification).
    """

    every: int | str = "auto"
    test: bool = False
    batch_size: int = 1024
    halo: str = "served"
    fanouts: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.every != "auto":
            try:
                self.every = int(self.every)
            except (TypeError, ValueError):
                raise ValueError(
                    f"eval_every must be a number of epochs or 'auto', got {self.every!r}"
                ) from None
            if self.every < 1:
                raise ValueError(f"eval_every must be >= 1 or 'auto', got {self.every}")
        if int(self.batch_size) < 1:
            raise ValueError(f"eval_batch_size must be >= 1, got {self.batch_size}")
        if self.halo not in ("served", "stored"):
            raise ValueError(f"eval_halo must be 'served' or 'stored', got {self.halo!r}")
        if self.fanouts is not None:
            self.fanouts = parse_fanouts(self.fanouts)


@dataclass(kw_only=True)
class MemoryConfig:
    """Memory and I/O (out-of-core).

    Args:
        limit: memory one training process may use in all, page cache included, e.g.
            ``"4GiB"``; it is shared between a fixed reserve, the graph structure, windows of
            feature rows read ahead and a cache of hot rows (``shoal.sample.budget``). None =
            90% of the memory cgroup limit or of the memory available at the start, whichever
            is lower (flag ``--memory``; default None).
        io_threads: concurrent read requests of the feature reader (default 8).
        pack_epochs: with windows, one sweep of the feature file packs the uncached rows of
            this many epochs into the scratch directory (DiskGNN-style, ``shoal.rows.packing``;
            packs and spooled samples: docs/measurements.md#epoch-packs-and-spooled-samples;
            ``minibatch`` samples a packed epoch twice unless its lists are on disk, where
            it packs only when given); 0 or 1 = off; None = 8 (default None; the trainer,
            ``minibatch``, ``averaging``).
        cache_policy: which rows the static cache holds when the features do not fit:
            ``"presample"``, the rows the most batches of the first sampled epoch need
            (GNNLab's pre-sampling policy, ``shoal.rows.featstore.presampled_priority``), or
            ``"degree"``, the highest in-degrees (default ``"presample"``; the single-process
            trainer and ``averaging``; ``minibatch`` caches by degree; the pre-sampled cache
            reads fewer bytes per epoch: docs/measurements.md#static-cache-and-windows).
        structure: where the graph's CSR lives while training: ``"auto"`` (read into the
            process's own memory, counted in the plan, whenever it fits next to the two
            smallest feature windows; else on disk: its row index in memory, the sampled
            neighbour entries read with planned direct reads, a group of batches' entries in
            one sorted pass per hop), or ``"memory"`` / ``"disk"`` forced (default
            ``"auto"``; the single-process trainer and the ``averaging`` and ``minibatch``
            engines: minibatch's ranks then sample in groups together, each owner reading
            its parts' entries in one sorted pass per hop; a typed store or the link task
            under ``minibatch``, and ``hec``, hold it in memory:
            docs/measurements.md#the-memory-plan).
        scratch_dir: directory for large temporary files (inference arrays, packs); None =
            beside the input graph or store, never the system temp dir (default None).
        rows_backend: what files of rows are read through, by name (:mod:`shoal.rows.backends`:
            ``"file"``, planned ``O_DIRECT`` reads; ``"mmap"``, the page cache; or a
            registered one), in every process of the run, training and evaluation
            (default ``"file"``).
    """

    limit: str | int | None = None
    io_threads: int = 8
    pack_epochs: int | None = None
    cache_policy: str = "presample"
    structure: str = "auto"
    scratch_dir: str | None = None
    rows_backend: str = "file"

    def __post_init__(self) -> None:
        if not isinstance(self.rows_backend, str) or not self.rows_backend:
            raise ValueError(f"rows_backend must be a backend's name, got {self.rows_backend!r}")
        if self.limit is not None and parse_size(self.limit) <= 0:
            raise ValueError(f"memory must be a positive size, got {self.limit!r}")
        _at_least_one(self, "io_threads")
        if self.pack_epochs is not None and self.pack_epochs < 0:
            raise ValueError(f"pack_epochs must be >= 0 (0 = off), got {self.pack_epochs}")
        for name, valid in (("cache_policy", CACHE_POLICIES), ("structure", STRUCTURE_MODES)):
            if getattr(self, name) not in valid:
                raise ValueError(
                    f"{name} must be one of {', '.join(valid)}, got {getattr(self, name)!r}"
                )

    @property
    def limit_bytes(self) -> int | None:
        """``limit`` in bytes (None: derive from the machine)."""
        return None if self.limit is None else parse_size(self.limit)


@dataclass(kw_only=True)
class CheckpointConfig:
    """Checkpoints.

    Args:
        dir: write per-epoch checkpoints there (``--checkpoint-dir``; default None).
        resume: continue from the last checkpoint in ``dir`` when there is one (default
            false).
    """

    dir: str | None = None
    resume: bool = False

    def __post_init__(self) -> None:
        if self.resume and not self.dir:
            raise ValueError("resume needs checkpoint_dir")


@dataclass(kw_only=True)
class RunConfig:
    """Where and how the run computes, and what it reports as it goes.

    Args:
        seed: seed of initialisation, shuffling, sampling and dropout (default 0).
        device: where the model computes: ``"cpu"``, ``"cuda"`` (in a distributed run each
            process takes the GPU of its local rank) or ``"cuda:i"``; sampling, feature reads
            and exchanges stay on the host, batches are copied through pinned buffers
            (:class:`~shoal.training.device.DeviceFeed`), gradients of distributed engines
            are all-reduced over NCCL (default ``"cpu"``).
        threads: torch and numba threads of each process; None keeps the current settings
            in one process and gives each of several ranks its share of the machine's cores
            (:func:`shoal.utils.threads.threads_per_process`) (default None).
        progress: show tqdm bars; None = only when stderr is a terminal (default None).
        metrics_file: append one JSON line per epoch to this file (default None).
        sample_on: where the single-process trainer produces its batches: ``"host"`` (the
            numba sampler and the budgeted store; batches copied to the device),
            ``"device"`` (sampled by torch operations on the model's device over a copy of
            the CSR there, rows gathered from a device cache in front of the host's store:
            :mod:`shoal.training.devicebatches`; the same batches) or ``"auto"``: the device
            on a GPU when the graph is untyped, the task is node classification and the CSR
            fits ``device_memory`` (default ``"auto"``; the engines sample on the host).
        device_memory: bytes the device's copy of the CSR and its cached rows may take, a
            number or a size such as ``"8GiB"`` (default None: half the GPU's free memory
            at the start; on the CPU, 0: no rows cached beside the host's store).
    """

    seed: int = 0
    device: str = "cpu"
    threads: int | None = None
    progress: bool | None = None
    metrics_file: str | None = None
    sample_on: str = "auto"
    device_memory: str | int | None = None

    def __post_init__(self) -> None:
        _at_least_one(self, "threads")
        check_device_spec(self.device)
        if self.sample_on not in SAMPLE_ON:
            raise ValueError(f"sample_on must be one of {SAMPLE_ON}, got {self.sample_on!r}")
        if self.device_memory is not None:
            parse_size(self.device_memory)

    @property
    def device_memory_bytes(self) -> int | None:
        """``device_memory`` in bytes (None: from the device's free memory)."""
        return None if self.device_memory is None else parse_size(self.device_memory)
