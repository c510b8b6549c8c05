"""``TrainData``: what the single-process trainer reads from a graph directory."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from shoal.data.format import GraphDir
from shoal.data.hetero import HeteroSchema
from shoal.errors import ShoalInputError
from shoal.rows.budget import RESERVE, batch_window, plan_budget
from shoal.rows.budgeted import BudgetedStore
from shoal.rows.direct import RowFile, load_array
from shoal.rows.source import RowSource
from shoal.rows.typed import open_typed_rows
from shoal.utils.memory import return_freed_memory

__all__ = ["TrainData", "open_features", "structure_on_disk"]


def structure_on_disk(indices: np.ndarray) -> bool:
    """Whether ``indices`` is a memory map that a sampler can read with planned direct reads
    (``NeighborSampler(direct_indices=True)``)."""
    return bool(indices.size) and RowFile.of(indices.reshape(-1, 1)) is not None


class FeatureShape:
    """``num_rows`` and ``feature_dim`` of a dataclass's ``features`` (an array or any
    :class:`~shoal.rows.source.RowSource`; 0 without)."""

    @property
    def num_rows(self) -> int:
        x = self.features
        return 0 if x is None else int(x.num_rows if isinstance(x, RowSource) else x.shape[0])

    @property
    def feature_dim(self) -> int:
        x = self.features
        return 0 if x is None else int(x.dim if isinstance(x, RowSource) else x.shape[1])


@dataclass
class TrainData(FeatureShape):
    """What a trainer reads. Arrays may be memory maps; nothing here is copied whole.

    ``indptr``/``indices``: in-neighbour CSR over ids ``[0, num_nodes)`` (rows may stop
    short of ``num_nodes``: e.g. a store part's halo nodes); ``features`` ``(num_nodes, F)``
    (an array or any :class:`~shoal.rows.source.RowSource`); ``labels`` ``(num_nodes,)`` int
    (-1 unlabelled); split ids index the same id space. ``schema``: a typed graph's node
    types and relations (None: untyped, one type and one relation); its ``features`` are then
    every type's rows in one source, each padded to the widest type
    (:class:`~shoal.rows.typed.TypedRows`), and its labels and splits are the target type's.
    """

    indptr: np.ndarray
    indices: np.ndarray
    features: np.ndarray | RowSource
    labels: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    num_classes: int
    num_nodes: int
    degrees: np.ndarray | None = None
    name: str = "graph"
    path: str | None = None
    schema: HeteroSchema | None = None

    @classmethod
    def from_graph_dir(
        cls, graph: GraphDir | str | os.PathLike, *, io_threads: int = 8
    ) -> TrainData:
        g = graph if isinstance(graph, GraphDir) else GraphDir.open(graph)
        typed = g.schema is not None
        if typed:
            x = open_typed_rows(g, threads=io_threads)
            if x is None:
                raise ShoalInputError(
                    "no node type of the typed graph has features",
                    path=g.path,
                    fix="import the node features of at least one type",
                )
            y = g.labels()
        else:
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
            splits[f"{s}_idx"] = np.asarray(idx, dtype=np.int64)
        csr = g.csr("in")
        num_classes = g.num_classes or int(np.max(y)) + 1
        return cls(
            indptr=csr.indptr,
            indices=csr.indices,
            features=x,
            labels=y,
            **splits,
            num_classes=int(num_classes),
            num_nodes=g.num_nodes,
            name=g.name,
            path=str(g.path),
            schema=g.schema,
        )

    def split(self, name: str) -> np.ndarray:
        return {"train": self.train_idx, "val": self.val_idx, "test": self.test_idx}[name]


def open_features(
    data: TrainData,
    *,
    memory: int | None,
    fanouts: tuple[int, ...],
    batch_size: int,
    normalize: bool = False,
    io_threads: int = 8,
    show_progress: bool | None = None,
    structure: str = "auto",
    reserve: int = RESERVE,
) -> BudgetedStore:
    """The budgeted feature store of ``data`` under ``memory`` bytes (None: the machine's or
    cgroup's limit; ``shoal.rows.budget``), built by :class:`~shoal.rows.budgeted.BudgetedStore`
    (its ``plan`` is the memory plan). Loads the in-neighbour CSR into memory when the
    plan keeps it there (``data.indptr``/``indices`` are replaced by the copies), and caches
    the rows of the highest in-degree nodes first. When the cache does not hold every row,
    its rows are read with the first window (one pass), not here. When the CSR stays on
    disk (``plan.structure_in_memory`` false; ``structure``: ``"auto"``, ``"memory"`` or
    ``"disk"``) only ``indptr`` is read into memory and the sampler reads the sampled
    entries of ``indices`` directly (``NeighborSampler(direct_indices=True)``). ``reserve``:
    the memory the process needs beside its data (give
    :func:`~shoal.training.footprint.training_reserve`, measured; default the fixed
    :data:`~shoal.rows.budget.RESERVE`)."""
    return_freed_memory()  # freed buffers leave the process: the budget stays honest
    x = data.features
    row_bytes = int(x.row_bytes if isinstance(x, RowSource) else x.shape[1] * x.dtype.itemsize)
    index = int(data.indptr.nbytes) + 16 * data.num_nodes  # + the sampler's per-node arrays
    if structure == "disk" and not structure_on_disk(data.indices):
        structure = "auto"  # already in memory: nothing to read from disk
    plan = plan_budget(
        memory,
        feature_bytes=data.num_rows * row_bytes,
        structure_bytes=index + int(data.indices.nbytes),
        min_window=batch_window(fanouts, batch_size, data.num_nodes, row_bytes),
        index_bytes=index,
        structure=structure,
        reserve=reserve,
    )
    data.indptr = load_array(data.indptr)  # O(V): in memory in any case
    if plan.structure_in_memory:
        data.indices = load_array(data.indices)
    deg = None
    if plan.cache < plan.features:
        deg = np.diff(np.asarray(data.indptr[: data.num_nodes + 1], dtype=np.int64))
        if len(deg) < data.num_nodes:
            deg = np.concatenate([deg, np.zeros(data.num_nodes - len(deg), np.int64)])
    return BudgetedStore(
        x,
        plan,
        degrees=deg,
        normalize=normalize,
        threads=io_threads,
        show_progress=show_progress,
    )
