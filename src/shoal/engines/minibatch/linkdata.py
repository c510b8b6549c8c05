"""Link prediction across ranks: each rank's positive edges, owner-local negatives, and node
embeddings held and updated by their owners.

- :class:`RankPositives`: a rank's positives are the in-edges ``(u, v)`` of its parts' core
  nodes ``v`` (the store keeps every in-edge once, in the part of its destination, so the
  ranks' positives together are the graph's edges, each once): an undirected graph's pairs
  once (``u < v``), each oriented at random every epoch, self-loops skipped, as
  :mod:`shoal.training.linkbatches` does on one process. An epoch visits them block-shuffled (chunks of the parts' neighbour lists in a random
  order, each shuffled), in exactly ``num_batches`` batches: a rank with fewer positives takes
  smaller batches, so every rank runs the same number of steps (collectives stay paired).
- :func:`owner_local_negatives`: negatives drawn uniformly among the rank's own core nodes
  (their rows are local: no feature traffic for them), the third sampler of
  :data:`LINK_NEGATIVES`.
- :class:`DistEmbedding`: learnable input rows (``--embedding-dim``) for graphs without
  features. Each part's rows are one :class:`~shoal.training.embedding.NodeEmbedding` table on
  the rank holding the part (initialised from ``(seed, part)``, so the values do not depend on
  the number of ranks), with its sparse optimizer's state beside it. A batch pulls its rows
  from their owners (DistDGL's ``DistEmbedding``, Section 3); after ``backward()`` the rows'
  gradients go back to the owners, which sum them over ranks and apply one sparse update per
  row. Updates are applied at the end of every step (synchronous: with the gradients divided by
  the number of ranks, as DDP averages the dense ones, N ranks on N batches update exactly as
  one process on the same batches with the mean loss); DistDGL applies them asynchronously.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from shoal.distributed.comm import CommStats, exchange
from shoal.distributed.feature_store import DistFeatureStore, owner_of
from shoal.store.reader import Partition
from shoal.training.embedding import NodeEmbedding, SparseAdagrad, SparseAdam, _unique_grad
from shoal.training.linkbatches import flip_random

__all__ = ["LINK_NEGATIVES", "DistEmbedding", "RankPositives", "owner_local_negatives"]

#: negative samplers of the distributed link task
LINK_NEGATIVES = ("uniform", "in-batch", "owner-local")


def _global_sources(part: Partition, halo: np.ndarray, local: np.ndarray) -> np.ndarray:
    src = np.asarray(local, dtype=np.int64)
    out = src + part.start
    h = src >= part.num_core
    out[h] = halo[src[h] - part.num_core]
    return out


class RankPositives:
    """The positive edges of a rank's parts (module docstring).

    Args:
        parts: the parts the rank holds; directed: whether the graph is directed;
        rank: the rank (its shuffles get their own stream); chunk_edges: neighbour-list
            entries per shuffled chunk (default 65536; memory is one chunk).
    """

    def __init__(
        self,
        parts: Sequence[Partition],
        *,
        directed: bool,
        rank: int = 0,
        chunk_edges: int = 1 << 16,
    ) -> None:
        self.parts, self.directed, self.rank = list(parts), directed, rank
        self._halo = [np.asarray(p.halo_ids, dtype=np.int64) for p in self.parts]
        self.chunks = [
            (k, s, min(s + chunk_edges, int(p.indptr[-1])))
            for k, p in enumerate(self.parts)
            for s in range(0, int(p.indptr[-1]), chunk_edges)
        ]
        self.count = sum(len(self._chunk(c)) for c in range(len(self.chunks)))

    def _chunk(self, c: int) -> np.ndarray:
        """``(k, 2)`` global positives of chunk ``c`` in file order."""
        k, s, e = self.chunks[c]
        p = self.parts[k]
        indptr = np.asarray(p.indptr)
        dst = np.searchsorted(indptr, np.arange(s, e), side="right") - 1 + p.start
        src = _global_sources(p, self._halo[k], np.asarray(p.indices[s:e]))
        keep = src < dst if not self.directed else src != dst
        return np.stack([src[keep], dst[keep]], axis=1)

    def epoch(self, seed: int, epoch: int, num_batches: int) -> Iterator[np.ndarray]:
        """Exactly ``num_batches`` ``(B, 2)`` batches of ``ceil(count / num_batches)``
        positives (the last ones smaller, maybe empty)."""
        size = max(1, math.ceil(self.count / max(num_batches, 1)))
        rng = np.random.default_rng([seed, epoch, 0x11C, self.rank])
        buf, done = np.zeros((0, 2), np.int64), 0
        for c in rng.permutation(len(self.chunks)):
            e = self._chunk(int(c))
            if not self.directed:
                flip_random(e, rng)
            buf = np.concatenate([buf, e[rng.permutation(len(e))]])
            while len(buf) >= size and done < num_batches:
                yield buf[:size]
                buf, done = buf[size:], done + 1
        while done < num_batches:
            yield buf[:size]
            buf, done = buf[size:], done + 1


def owner_local_negatives(
    pos: np.ndarray, k: int, parts: Sequence[Partition], rng: np.random.Generator
) -> np.ndarray:
    """``(B, k)`` negative destinations uniform over the core nodes of ``parts``."""
    sizes = np.array([p.num_core for p in parts], dtype=np.int64)
    starts = np.array([p.start for p in parts], dtype=np.int64)
    total = int(sizes.sum())
    if total == 0:
        raise ValueError("owner-local negatives need a rank holding at least one node")
    j = rng.integers(0, total, size=(len(pos), k))
    which = np.searchsorted(np.cumsum(sizes), j, side="right")
    return starts[which] + j - (np.cumsum(sizes) - sizes)[which]


class DistEmbedding:
    """Learnable input rows held by their owners (module docstring).

    Args:
        directory: where the tables live (``part_<i>/`` per part held here).
        parts: the parts this rank holds; part_offsets, part_to_rank, rank, world_size: the
            layout of every part; dim: row width; seed: initialisation seed;
        optimizer: ``adam`` or ``adagrad``; lr: its learning rate; stats: counters.
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        parts: Sequence[Partition],
        part_offsets: np.ndarray,
        part_to_rank: np.ndarray,
        rank: int,
        world_size: int,
        dim: int,
        seed: int,
        optimizer: str = "adam",
        lr: float = 0.01,
        stats: CommStats | None = None,
    ) -> None:
        self.part_offsets = np.asarray(part_offsets, dtype=np.int64)
        self.part_to_rank = np.asarray(part_to_rank, dtype=np.int64)
        self.rank, self.world_size, self.dim = rank, world_size, dim
        self.stats = stats if stats is not None else CommStats()
        root = Path(directory)
        self.tables = {
            p.index: NodeEmbedding(
                root / f"part_{p.index}", p.num_core, dim, seed=seed, stream=p.index + 1
            )
            for p in parts
        }
        opt = SparseAdam if optimizer == "adam" else SparseAdagrad
        self.optimizers = {i: opt(t, lr=lr) for i, t in self.tables.items()}
        self.rows = DistFeatureStore(
            part_offsets=self.part_offsets,
            part_to_rank=self.part_to_rank,
            rank=rank,
            world_size=world_size,
            local_parts={i: t.weight for i, t in self.tables.items()},
            feature_dim=dim,
            stats=self.stats,
        )

    @property
    def weights(self) -> dict[int, np.ndarray]:
        """Part -> its rows (the layer-0 inputs of an exact evaluation)."""
        return {i: t.weight for i, t in self.tables.items()}

    def pull(self, ids: np.ndarray) -> torch.Tensor:
        """The rows of ``ids`` as a leaf tensor that requires grad (collective)."""
        return self.rows.pull(np.asarray(ids, dtype=np.int64)).clone().requires_grad_()

    def push(
        self, ids: np.ndarray, grad: torch.Tensor | None
    ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Send the gradients of rows ``ids`` (divided by the number of ranks) to their owners,
        which apply one sparse update per row (collective). Returns what this rank applied:
        part -> (local rows, their summed gradients)."""
        ids = np.asarray(ids, dtype=np.int64)
        g = (
            np.zeros((len(ids), self.dim), np.float32)
            if grad is None
            else grad.detach().numpy().astype(np.float32, copy=False)
        )
        g = g / self.world_size if self.world_size > 1 else g
        owners = self.part_to_rank[owner_of(self.part_offsets, ids)] if len(ids) else ids
        here = owners == self.rank
        got_ids, got = ids[here], g[here]
        if self.world_size > 1:
            away = np.flatnonzero(~here)
            away = away[np.argsort(owners[away], kind="stable")]
            counts = np.bincount(owners[away], minlength=self.world_size)
            rid, _ = exchange(ids[away], counts, self.stats)
            rg, _ = exchange(np.ascontiguousarray(g[away]), counts, self.stats)
            got_ids = np.concatenate([got_ids, rid.numpy()])
            got = np.concatenate([got, rg.numpy()])
        part_of = owner_of(self.part_offsets, got_ids) if len(got_ids) else got_ids
        applied = {}
        for i, opt in self.optimizers.items():
            sel = part_of == i
            if sel.any():
                rows, g_rows = _unique_grad(got_ids[sel] - self.part_offsets[i], got[sel])
                opt.step(rows, torch.from_numpy(g_rows))
                applied[i] = (rows, g_rows)
        return applied

    def flush(self) -> None:
        for opt in self.optimizers.values():
            opt.flush()

    def state_tables(self) -> dict[int, dict[str, np.ndarray]]:
        """Part -> the table and its optimizer's state arrays (for checkpoints)."""
        return {i: opt.tables() for i, opt in self.optimizers.items()}
