"""``TrainData``: what the single-process trainer reads from a graph directory."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from shoal.data.format import GraphDir
from shoal.errors import ShoalInputError

__all__ = ["TrainData"]


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
    path: str | None = None

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
            path=str(g.path),
        )

    @property
    def feature_dim(self) -> int:
        return int(self.features.shape[1])

    def split(self, name: str) -> np.ndarray:
        return {"train": self.train_idx, "val": self.val_idx, "test": self.test_idx}[name]
