"""KaMinPar (the ``kaminpar`` package) as an in-memory reference partitioner.

**Loads the whole graph into memory**: the symmetric simple CSR is built in memory
(:func:`shoal.partition.metis.symmetric_csr`) and written to a temporary METIS-format file
(in ``config.scratch_dir``, else beside the graph directory), which KaMinPar (Gottesbüren et
al., "Deep multilevel graph partitioning", ESA 2021) reads and partitions with its default
context. Reference only, never a streaming algorithm.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from shoal.data.format import GraphDir
from shoal.errors import ShoalInputError
from shoal.partition.base import Assignment, PartitionConfig, Partitioner
from shoal.partition.metis import symmetric_csr
from shoal.utils.io import scratch_space

__all__ = ["KaMinPar", "KaMinParConfig"]


@dataclass(kw_only=True)
class KaMinParConfig(PartitionConfig):
    """Options of :class:`KaMinPar` (plus the shared ones).

    Args:
        epsilon: allowed imbalance (default 0.03).
        threads: KaMinPar threads (default 1).
        preset: KaMinPar context name: default, fast, strong, eco, ... (default "default").
    """

    epsilon: float = 0.03
    threads: int = 1
    preset: str = "default"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.epsilon < 0:
            raise ShoalInputError(f"epsilon must be >= 0, got {self.epsilon}")
        if self.threads < 1:
            raise ShoalInputError(f"threads must be >= 1, got {self.threads}")


def _write_metis(path: str, indptr: np.ndarray, indices: np.ndarray) -> None:
    n = indptr.shape[0] - 1
    with open(path, "w") as f:
        f.write(f"{n} {indices.shape[0] // 2}\n")
        step = 1 << 14
        for s in range(0, n, step):
            lines = []
            for v in range(s, min(n, s + step)):
                row = indices[indptr[v] : indptr[v + 1]] + 1
                lines.append(" ".join(map(str, row.tolist())))
            f.write("\n".join(lines))
            f.write("\n")


class KaMinPar(Partitioner):
    """KaMinPar on the whole graph in memory."""

    name = "kaminpar"
    Config = KaMinParConfig
    in_memory = True

    def partition(self, graph: GraphDir, train_mask: np.ndarray | None = None) -> Assignment:
        import kaminpar

        cfg: KaMinParConfig = self.config  # type: ignore[assignment]
        n, p = graph.num_nodes, cfg.num_parts
        t0 = time.perf_counter()
        indptr, indices = symmetric_csr(graph)
        seconds = {"load": time.perf_counter() - t0}
        t0 = time.perf_counter()
        if p == 1 or n == 0 or indices.shape[0] == 0:
            part = np.arange(n, dtype=np.int32) % p
        else:
            with scratch_space(cfg.scratch_dir, beside=graph.path, prefix="shoal-kaminpar") as d:
                fn = os.path.join(d, "graph.metis")
                _write_metis(fn, indptr, indices)
                g = kaminpar.load_graph(fn, kaminpar.GraphFileFormat.METIS)
                kaminpar.reseed(int(cfg.seed))
                ctx = kaminpar.context_by_name(cfg.preset)
                parts = kaminpar.KaMinPar(cfg.threads, ctx).compute_partition(
                    g, p, float(cfg.epsilon)
                )
            part = np.asarray(parts, dtype=np.int32)
        seconds["kaminpar"] = time.perf_counter() - t0
        return self.assignment(part, seconds)
