"""``TrainConfig``: every option of a training run, single-process and distributed, in one
keyword-only dataclass (settable from flags and from TOML, validated in ``__post_init__``)."""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import tomllib

from shoal.errors import ShoalInputError
from shoal.nn import MODELS
from shoal.rows.budget import STRUCTURE_MODES
from shoal.sample.sampler import parse_fanouts
from shoal.training.presets import PRESETS, preset_defaults
from shoal.utils.device import check_device_spec
from shoal.utils.io import parse_size

__all__ = ["DEP_MODES", "PRESETS", "TrainConfig", "preset_defaults"]

#: how the fullgraph engine handles remote dependencies (``TrainConfig.deps``)
DEP_MODES = ("hybrid", "comm", "cache")


@dataclass(kw_only=True)
class TrainConfig:
    """Hyper-parameters and run options of the trainer and of every engine.

    Model and optimisation:
        model: registered model name (``shoal.nn.MODELS``; default ``"sage"``).
        model_factory: ``"module:function"`` building the model instead (called with
            ``in_dim, hidden, out_dim, num_layers, dropout``); a module called as
            ``model(x, edge_index)`` (PyG) is adapted to blocks (default None).
        task: ``"node"`` (node classification, default) or ``"link"`` (link prediction on a
            graph split by ``shoal data split-edges``; its options: ``LinkConfig``).
        preset: where the hyper-parameters left unset (``None``: ``fanouts``, ``hidden``,
            ``heads``, ``epochs``, ``lr``, ``dropout``, ``weight_decay``,
            ``normalize_features``) come from: ``"paper"`` (default): the model's paper
            (GCN: hidden 64, dropout 0.5, lr 0.01, L2 5e-4, 200 epochs, row-normalised
            features; GAT: 8 heads x 8, dropout 0.6, lr 0.005, L2 5e-4; SAGE: hidden 256,
            lr 0.01, 10 epochs; GIN: hidden 64, lr 0.01; SGC: lr 0.2, 100 epochs), 2 layers
            sampled (25, 10) as GraphSAGE's paper; ``"large"``: for large graphs, every model
            with 3 sampled hops (15, 10, 5), hidden 256, lr 0.003, dropout 0.5, 20 epochs
            (:func:`preset_defaults`; the resolved values are what the run records).
        fanouts: neighbours sampled per hop, hop 1 first (PyG's ``num_neighbors`` order);
            -1 = all; its length is the number of layers (default: the preset's).
            DGL's ``NeighborSampler`` and the papers list the input layer first: DGL's
            ``[5, 10, 15]`` is shoal's ``(15, 10, 5)``.
        fanouts_order: how ``fanouts`` is written: ``"hop-first"`` (default) or
            ``"input-first"`` (DGL's order, for ported scripts); an input-first list is
            reversed on construction, after which the config holds ``"hop-first"``.
        batch_size: training seeds per mini-batch (positive edges for ``task="link"``)
            (default: the preset's: 1024 seeds; 512 edges for links).
        hidden: hidden width (default: the preset's).
        heads: attention heads of GAT's hidden layers (default: the preset's, 8).
        epochs: maximum number of epochs (default: the preset's).
        lr: Adam learning rate (default: the preset's).
        dropout: dropout probability on every layer's input (default: the preset's).
        weight_decay: Adam L2 penalty (default: the preset's).
        normalize_features: divide each feature row by its sum when it is read, as Kipf &
            Welling do for bag-of-words features; ``"auto"``: when the rows are non-negative
            with at most 64 non-zeros on average (sparse bag-of-words; denser rows divided by
            their sum leave GCN far behind, e.g. Amazon-Photo)
            (:func:`~shoal.training.presets.resolve_for_data`; default: the preset's, "auto"
            for GCN, GAT and SGC).
        min_steps: train at least this many optimizer steps: the epochs grow to
            ``ceil(min_steps / steps per epoch)`` on a small training set (default: the
            preset's when ``epochs`` is not given -- 200 for GraphSAGE, whose paper's 10
            epochs are thousands of steps on Reddit but 10 on 160 labelled nodes -- else 0).
        patience: stop after this many evaluations without a better validation accuracy;
            0 disables early stopping (default 0).
        eval_every: evaluate on the validation set every this many epochs, or ``"auto"``
            (default): every ``k = ceil(4 r)`` epochs, ``r`` the work of one exact evaluation
            over one epoch's estimated from the graph's sizes and the fanouts
            (:func:`~shoal.training.loop.eval_work_ratio`), so evaluation takes about a fifth
            of the run or less; deterministic (the same epochs in every run with the same
            data and options); the last epoch is always evaluated; ``k`` is recorded
            (``eval_every_chosen``).
        eval_test: also measure the test accuracy at every evaluation, recorded in the epoch's
            record (``test_accuracy``) to follow convergence, as DistGNN-MB's "epochs to
            reach the target" does; the best-validation weights are still chosen on
            validation only (default false).
        eval_batch_size: target nodes per batch of the exact layer-wise inference; a batch
            reads the rows of all their in-neighbours, so this bounds its memory
            (default 1024).
        seed: seed of initialisation, shuffling, sampling and dropout (default 0).

    Run and output:
        device: where the model computes: ``"cpu"``, ``"cuda"`` (in a distributed run each
            process takes the GPU of its local rank) or ``"cuda:i"``; sampling, feature reads
            and exchanges stay on the host, batches are copied through pinned buffers
            (:class:`~shoal.training.device.DeviceFeed`), gradients of distributed engines
            are all-reduced over NCCL (default ``"cpu"``).
        threads: torch and numba threads; None keeps the current settings (default None; under
            several processes, torch's current setting).
        checkpoint_dir: write per-epoch checkpoints there (default None).
        resume: continue from the last checkpoint in ``checkpoint_dir`` when there is one
            (default false).
        metrics_file: append one JSON line per epoch to this file (default None).
        progress: show tqdm bars; None = only when stderr is a terminal (default None).
        scratch_dir: directory for large temporary files (inference arrays); None = beside the
            input graph or store, never the system temp dir (default None).

    Memory (out-of-core):
        memory: memory one training process may use in all, page cache included, e.g.
            ``"4GiB"``; it is shared between a fixed reserve, the graph structure, windows of
            feature rows read ahead and a cache of hot rows (``shoal.rows.budget``). None =
            90% of the memory cgroup limit or of the memory available at the start, whichever
            is lower (default None).
        io_threads: concurrent read requests of the feature reader (default 8).
        pack_epochs: when feature rows are read in windows, one sweep of the feature file
            reads the uncached rows of this many epochs into a pack file per epoch in the
            scratch directory, and each epoch's windows read its pack (DiskGNN-style packing,
            ``shoal.rows.packing``); 0 or 1 = off, every window reads the feature file;
            None = 4 when the graph structure is held in memory, else off (packing samples
            every epoch twice) (default None; the single-process trainer, ``minibatch`` and
            ``averaging``).
        structure: where the graph's CSR lives while training: ``"auto"`` (in memory when it
            fits half of the budget left after the reserve, else on disk: its row index in
            memory, the sampled neighbour entries read with planned direct reads), or
            ``"memory"`` / ``"disk"`` forced (default ``"auto"``; the single-process trainer
            and the ``averaging`` engine; ``minibatch`` always uses ``"auto"``).

    Distributed (``shoal train --store``; ignored by the single-process trainer):
        engine: registered engine name (``shoal.engines.ENGINES``; default ``"minibatch"``).
        nproc: processes to start on this machine; torchrun sets the world itself
            (default 1).
        plan: a plan JSON from ``shoal plan`` (its ``worker_of_part``); None = part ``j`` on
            rank ``j mod N`` (default None).
        dist_timeout: seconds before a stuck collective fails the run (default 300).
        max_restarts: with ``nproc``: restart all workers up to this many times after a
            failure (default 0).
        average_every: averaging engine: average the models every k epochs (default 1).
        part_models: averaging engine with more parts than ranks: one model per part, all
            averaged at each round (SDT-GNN Sec. III-C/D; default false: one model carried
            through a rank's parts in turn).
        average_optimizer: averaging engine: average Adam's moments with the weights
            (default true; false = ``--local-optimizer-state``).
        hec_size: hec engine: lines of each layer's historical embedding cache, ``cs``
            (default 1,000,000, DistGNN-MB's; at most the rank's halo nodes are allocated).
        hec_push: hec engine: most rows pushed per step, layer and peer, ``nc``, drawn by
            degree (default 2000; -1 = every candidate).
        hec_lifespan: hec engine: steps a cache line stays valid, ``ls`` (default 2).
        hec_delay: hec engine: steps between a push and its use, ``d`` (default 1).
        deps: fullgraph engine: how remote dependencies are handled: ``"comm"`` (fetched
            every layer, DepComm), ``"cache"`` (recomputed from replicated subtrees,
            DepCache) or ``"hybrid"`` (split per dependency by NeutronStar's cost model;
            default ``"hybrid"``).
        dep_memory: fullgraph engine: the memory limit ``S`` of the replicated dependencies,
            a size (e.g. ``"512MiB"``); None = what the rank's memory budget leaves for
            features after its own part (default None).
        dep_costs: fullgraph engine: ``(T_v, T_e, T_c)`` seconds per dimension instead of
            probing them (for ablations and tests; default None = probe).
        ring: fullgraph engine: exchange chunks in ring order (default true).
        overlap: fullgraph engine: compute cached dependencies while chunks are in flight
            (default true).
        batch_workers: disagg engine: ranks that sample and load features (the last ones);
            the others compute; at least as many as compute workers; None = half the
            ranks, rounded up (default None).
        replicas: disagg engine: model replicas per compute worker, ``G`` (one per GPU; on
            CPU the ``G`` mini-batches run one after the other); a batch worker sends them
            as one global batch (default 1).
        disagg_cache: disagg engine: LRU feature cache of each compute worker: rows (an
            int), a share of the nodes (``"5%"``) or a size (``"64MiB"``); 0 = off
            (default ``"5%"``).
        batch_queue: disagg engine: global batches a batch worker may have in flight
            (default 4).
        local_sampling: disagg engine: sample only the edges among a batch worker's own
            parts, no traffic between batch workers (default false: remote sampling, the
            same distribution as ``minibatch``).
        grouping: disagg engine: send the rows of a global batch's union once (default
            true; false sends every mini-batch's rows, an ablation).
        resident_parts: disagg engine: most parts a batch worker holds together (the rest
            are swapped in one at a time); None = as many as half its memory budget holds
            (default None).
    """

    model: str = "sage"
    model_factory: str | None = None
    task: str = "node"
    preset: str = "paper"
    fanouts: tuple[int, ...] | None = None
    fanouts_order: str = "hop-first"
    batch_size: int | None = None
    hidden: int | None = None
    epochs: int | None = None
    lr: float | None = None
    dropout: float | None = None
    weight_decay: float | None = None
    patience: int = 0
    eval_every: int | str = "auto"
    eval_test: bool = False
    eval_batch_size: int = 1024
    seed: int = 0
    threads: int | None = None
    device: str = "cpu"
    normalize_features: bool | str | None = None
    min_steps: int | None = None
    heads: int | None = None
    checkpoint_dir: str | None = None
    resume: bool = False
    metrics_file: str | None = None
    progress: bool | None = None
    scratch_dir: str | None = None
    engine: str = "minibatch"
    nproc: int = 1
    plan: str | None = None
    dist_timeout: float = 300.0
    max_restarts: int = 0
    average_every: int = 1
    average_optimizer: bool = True
    part_models: bool = False
    hec_size: int = 1_000_000
    hec_push: int = 2000
    hec_lifespan: int = 2
    hec_delay: int = 1
    deps: str = "hybrid"
    dep_memory: str | int | None = None
    dep_costs: tuple[float, float, float] | list[float] | None = None
    ring: bool = True
    overlap: bool = True
    batch_workers: int | None = None
    replicas: int = 1
    disagg_cache: str | int = "5%"
    batch_queue: int = 4
    local_sampling: bool = False
    grouping: bool = True
    resident_parts: int | None = None
    memory: str | int | None = None
    io_threads: int = 8
    pack_epochs: int | None = None
    structure: str = "auto"

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(
                f"unknown model {self.model!r}; valid names: {', '.join(sorted(MODELS))}"
            )
        self._resolve_preset()
        self.fanouts = parse_fanouts(self.fanouts)
        if self.fanouts_order not in ("hop-first", "input-first"):
            raise ValueError(
                f"fanouts_order must be 'hop-first' or 'input-first', got {self.fanouts_order!r}"
            )
        if self.fanouts_order == "input-first":  # DGL's order: store hop 1 first
            self.fanouts, self.fanouts_order = tuple(reversed(self.fanouts)), "hop-first"
        if self.task not in ("node", "link"):
            raise ValueError(f"task must be 'node' or 'link', got {self.task!r}")
        for name in (
            "batch_size",
            "hidden",
            "epochs",
            "eval_batch_size",
            "heads",
            "nproc",
            "average_every",
            "io_threads",
            "hec_size",
            "hec_delay",
            "replicas",
            "batch_queue",
        ):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.normalize_features not in (True, False, "auto"):
            raise ValueError(
                f"normalize_features must be true, false or 'auto', got {self.normalize_features!r}"
            )
        if self.pack_epochs is not None and self.pack_epochs < 0:
            raise ValueError(f"pack_epochs must be >= 0 (0 = off), got {self.pack_epochs}")
        if self.min_steps < 0:
            raise ValueError(f"min_steps must be >= 0, got {self.min_steps}")
        if self.eval_every != "auto" and self.eval_every < 1:
            raise ValueError(f"eval_every must be >= 1 or 'auto', got {self.eval_every}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"lr must be a positive number, got {self.lr}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if self.patience < 0:
            raise ValueError(f"patience must be >= 0 (0 = off), got {self.patience}")
        self._check_run_options()
        if self.memory is not None:
            if parse_size(self.memory) <= 0:
                raise ValueError(f"memory must be a positive size, got {self.memory!r}")
        if self.structure not in STRUCTURE_MODES:
            raise ValueError(
                f"structure must be one of {', '.join(STRUCTURE_MODES)}, got {self.structure!r}"
            )
        if self.hec_push < -1:
            raise ValueError(f"hec_push must be >= 0, or -1 for all, got {self.hec_push}")
        if self.hec_lifespan < 0:
            raise ValueError(f"hec_lifespan must be >= 0, got {self.hec_lifespan}")
        if self.deps not in DEP_MODES:
            raise ValueError(f"deps must be one of {', '.join(DEP_MODES)}, got {self.deps!r}")
        if self.dep_memory is not None and parse_size(self.dep_memory) < 0:
            raise ValueError(f"dep_memory must be a size >= 0, got {self.dep_memory!r}")
        if self.dep_costs is not None:
            self.dep_costs = tuple(float(x) for x in self.dep_costs)
            if len(self.dep_costs) != 3 or not all(
                x >= 0 and math.isfinite(x) for x in self.dep_costs
            ):
                raise ValueError(
                    f"dep_costs must be three costs >= 0 (T_v, T_e, T_c), got {self.dep_costs!r}"
                )
        for name in ("batch_workers", "resident_parts"):
            v = getattr(self, name)
            if v is not None and int(v) < 1:
                raise ValueError(f"{name} must be >= 1 (or None), got {v}")
        _check_cache(self.disagg_cache)
        if self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {self.max_restarts}")

    def _check_run_options(self) -> None:
        """Threads, device, resume and the distributed timeout."""
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")
        check_device_spec(self.device)
        if self.resume and not self.checkpoint_dir:
            raise ValueError("resume needs checkpoint_dir")
        if not self.dist_timeout > 0:
            raise ValueError(f"dist_timeout must be > 0, got {self.dist_timeout}")

    def _resolve_preset(self) -> None:
        """Fill the hyper-parameters left ``None`` from the preset; parse ``eval_every``."""
        if self.min_steps is None and self.epochs is not None:
            self.min_steps = 0  # epochs given: exactly those
        for name, value in preset_defaults(self.model, self.preset, self.task).items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        if self.eval_every != "auto":
            try:
                self.eval_every = int(self.eval_every)
            except (TypeError, ValueError):
                raise ValueError(
                    f"eval_every must be a number of epochs or 'auto', got {self.eval_every!r}"
                ) from None

    @property
    def num_layers(self) -> int:
        return len(self.fanouts)

    @property
    def memory_bytes(self) -> int | None:
        """``memory`` in bytes (None: derive from the machine)."""
        return None if self.memory is None else parse_size(self.memory)

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
        data.pop("link", None)  # the [link] table is LinkConfig's
        data.update(overrides)
        return cls.from_dict(data, origin=str(p))


def _check_cache(spec: str | int) -> None:
    """``disagg_cache``: rows >= 0, a percentage in [0, 100] or a size."""
    text = str(spec).strip()
    try:
        if isinstance(spec, int) or text.isdigit():
            ok = int(text) >= 0
        elif text.endswith("%"):
            ok = 0.0 <= float(text[:-1]) <= 100.0
        else:
            ok = parse_size(text) >= 0
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(
            f"disagg_cache must be rows (e.g. 10000), a share of the nodes "
            f"(e.g. 5%) or a size (e.g. 64MiB), got {spec!r}"
        )
