"""Fennel streaming node partitioning.

Tsourakakis, Gkantsidis, Radunovic, Vojnovic, "FENNEL: Streaming Graph Partitioning for
Massive Scale Graphs", WSDM 2014, Section 4 (greedy assignment for the objective of Eq. 2 with
``c(x) = alpha * x**gamma``): node ``v`` goes to

    argmax_i  |P_i & N(v)| - alpha * gamma * |P_i| ** (gamma - 1)

over the parts below the hard load bound ``max(floor(nu * |V| / p), ceil(|V| / p))``
(Algorithm 1; ``nu`` = our ``balance``), with the paper's ``gamma = 1.5`` and
``alpha = sqrt(p) * m / n ** 1.5`` (Section 4, ``m`` = number of undirected edges). Ties go to the part with fewer nodes, then the
lowest index; with a train mask, training nodes also respect the same bound over training
nodes, and on a typed graph each node type the same bound over its own nodes (as in
:mod:`shoal.partition.ldg`).

Same vertex stream as :mod:`shoal.partition.ldg`: the CSR views read block by block, O(V)
memory plus one block of neighbours, nodes in id order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from shoal.data.format import GraphDir
from shoal.errors import ShoalInputError
from shoal.partition.base import Assignment, PartitionConfig, Partitioner
from shoal.partition.ldg import _count_parts, _place, _run_vertex_stream
from shoal.utils.ranges import range_index

__all__ = ["Fennel"]


@njit(cache=True)
def _fennel_block(
    a, po, io, pi, ii, node_part, sizes, tsizes, train, use_train, cap, tcap, ty, cnt, alpha, gamma
):
    p = sizes.shape[0]
    toff, tysizes, tycap = ty
    ag = alpha * gamma
    g1 = gamma - 1.0
    for r in range(po.shape[0] - 1):
        v = a + r
        nt = range_index(toff, v)
        _count_parts(r, v, po, io, pi, ii, node_part, cnt)
        is_train = use_train and train[v]
        best = -1
        best_s = 0.0
        for q in range(p):
            if sizes[q] >= cap:
                continue
            if is_train and tsizes[q] >= tcap:
                continue
            if tysizes[q, nt] >= tycap[nt]:
                continue
            s = cnt[q] - ag * float(sizes[q]) ** g1
            if best < 0 or s > best_s or (s == best_s and sizes[q] < sizes[best]):
                best_s = s
                best = q
        _place(v, nt, best, is_train, node_part, sizes, tsizes, tysizes)


@dataclass(kw_only=True)
class FennelConfig(PartitionConfig):
    """Options of :class:`Fennel` (plus those of :class:`PartitionConfig`; ``balance``,
    default 1.10, is the paper's load bound ``nu``; ``seed`` is unused).

    Args:
        gamma: exponent of the load cost ``alpha * x**gamma`` (default 1.5, as in the paper).
        alpha: weight of the load cost; ``None`` (default) uses the paper's
            ``sqrt(p) * m / n**1.5``.
    """

    gamma: float = 1.5
    alpha: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.gamma >= 1.0:
            raise ShoalInputError(f"gamma must be >= 1, got {self.gamma}")
        if self.alpha is not None and not self.alpha >= 0:
            raise ShoalInputError(f"alpha must be >= 0, got {self.alpha}")


class Fennel(Partitioner):
    """Fennel (Tsourakakis et al., WSDM 2014, Algorithm 1 / Section 4) over the vertex stream
    of the CSR views (module docstring)."""

    name = "fennel"
    Config = FennelConfig

    def partition(self, graph: GraphDir, train_mask: np.ndarray | None = None) -> Assignment:
        cfg = self.config
        n = graph.num_nodes
        # undirected edges: stored twice in an undirected graph directory
        m = graph.num_edges if graph.directed else graph.num_edges / 2
        alpha = cfg.alpha
        if alpha is None:
            alpha = math.sqrt(cfg.num_parts) * m / n**1.5 if n else 0.0
        node_part, seconds = _run_vertex_stream(
            self, graph, train_mask, _fennel_block, (float(alpha), float(cfg.gamma))
        )
        return self.assignment(node_part, seconds, alpha_used=float(alpha))
