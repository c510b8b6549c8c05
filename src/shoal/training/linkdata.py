"""A split graph for link prediction and what its evaluation ranks against.

:class:`LinkData` is what the link task (:class:`~shoal.training.tasks.LinkTask`) reads from a
graph directory made by ``shoal data split-edges``: the message-passing graph, its edges (the
positives) and the held-out positives. Evaluation follows OGB: every held-out positive
``(u, v)`` is ranked against ``eval_negatives`` pairs ``(u, w)``, ``w`` uniform, drawn once
per split from the seed in blocks (:func:`eval_negative_chunk`: the same candidates at every
evaluation, and in the distributed evaluation that reads one block at a time), or on a typed
graph the split's fixed negatives of the target's destination type.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from shoal.data.format import GraphDir
from shoal.data.hetero import HeteroSchema
from shoal.errors import ShoalInputError
from shoal.rows.source import RowSource
from shoal.rows.typed import open_typed_rows
from shoal.training.data import FeatureShape

__all__ = [
    "EVAL_CHUNK",
    "EVAL_SCORE_BYTES",
    "LinkData",
    "eval_negative_chunk",
    "eval_negatives",
    "score_held_out",
]


@dataclass
class LinkData(FeatureShape):
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


def score_held_out(
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
