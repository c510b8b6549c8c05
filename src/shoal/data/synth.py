"""Synthetic graph generators, streamed to disk in chunks (``shoal data synth``).

Both generators produce edges in fixed blocks of :data:`GEN_BLOCK` edges, each from its own
random stream (``numpy.random.default_rng([seed, stream, block])``), and hand them to a
:class:`~shoal.data.format.GraphWriter`: edge memory is O(block) whatever the number of edges,
per-node state is a few O(N) arrays, and the output depends only on the configuration and the
seed (not on chunk sizes or the machine).

**R-MAT / Kronecker** (:func:`generate_rmat`): Chakrabarti, Zhan & Faloutsos, "R-MAT: A
Recursive Model for Graph Mining", SIAM SDM 2004, section 3: each edge descends
``scale = ceil(log2 N)`` levels of the adjacency matrix, choosing the quadrant (a, b, c, d) at
every level. Defaults are the Graph500 parameters a=0.57, b=0.19, c=0.19, d=0.05 (Graph500
benchmark specification, "Kronecker generator" section; https://graph500.org/), and as in the
Graph500 reference generator each level draws the source bit with P(1) = c + d and then the
destination bit with P(1) = d / (c + d) or b / (a + b) given the source bit, vectorised here
over a whole block of edges. Also as in Graph500, vertex ids are scrambled by a seeded random
permutation, so that the high-degree vertices are not the small ids. When N is not a power of
two, edges with an endpoint >= N (before scrambling) are redrawn.

**Degree-corrected SBM** (:func:`generate_dcsbm`): Karrer & Newman, "Stochastic blockmodels and
community structure in networks", Phys. Rev. E 83, 016107 (2011), eq. (7)-(8): edge counts
A_ij ~ Poisson(theta_i theta_j omega_{g_i g_j}). Sampling a fixed number of edges one by one
(the multinomial form of the same model, conditioned on the total) gives: source i with
probability proportional to theta_i; its block pair from omega, which here is
``homophily`` on the diagonal and ``(1 - homophily) / (C - 1)`` off it (each edge stays in the
source's class with probability ``homophily``); the destination proportional to theta within
the chosen class. theta is drawn from a power law with exponent ``degree_exponent`` (expected
degree proportional to theta), so degrees are heavy-tailed as in real graphs. Classes are the
blocks (balanced), node features are ``x_i = mu_{y_i} + N(0, I)`` with class centroids
``mu_c ~ N(0, feature_signal^2 / F * I)``, and train/val/test splits are uniform random.

Why a GNN beats an MLP on the defaults (``homophily=0.5``, ``feature_signal=1.5``, 10
classes): the features alone are weak (two class centroids lie about
``feature_signal * sqrt(2) = 2.1`` noise standard deviations apart), so a per-node classifier
confuses the classes often (MLP ~45 % test accuracy at 10k nodes, mean degree 20), while half of
a node's in-neighbours share its class and the other half spread over the 9 other classes:
averaging over them keeps ``0.5 - 0.5 / 9 = 0.44`` of the centroid separation and divides the
noise by about the square root of the degree (GCN ~89 %). Lower ``homophily`` towards
``1 / classes`` and the GNN's advantage disappears; raise ``feature_signal`` above ~3 and the MLP
catches up; with ``homophily=0.8`` the GCN saturates near 99 %.
See ``docs/format.md`` ("Synthetic graphs") and ``bench/results/data.md`` for the measured gap.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from shoal.data.extsort import DEFAULT_SORT_MEMORY
from shoal.data.format import GraphDir, GraphWriter
from shoal.errors import ShoalInputError
from shoal.utils.progress import progress

__all__ = [
    "GEN_BLOCK",
    "DCSBMConfig",
    "RMATConfig",
    "dcsbm_edge_blocks",
    "generate_dcsbm",
    "generate_rmat",
    "rmat_edge_blocks",
]

#: Edges generated per block (each block has its own random stream).
GEN_BLOCK = 1 << 20
#: Feature rows generated per block.
FEAT_BLOCK = 1 << 15

_EDGES, _FEATURES, _NODES = 1, 2, 3  # random stream ids


def _positive(name: str, v: float, allow_zero: bool = False) -> None:
    if v < 0 or (v == 0 and not allow_zero):
        raise ShoalInputError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {v}")


def _check_fractions(train: float, val: float) -> None:
    if not (0 <= train <= 1 and 0 <= val <= 1 and train + val <= 1):
        raise ShoalInputError(
            f"train/val fractions {train}/{val} must lie in [0, 1] and sum to <= 1",
            fix="the rest of the nodes form the test split",
        )


@dataclass(kw_only=True)
class RMATConfig:
    """R-MAT / Kronecker generator options (Graph500 defaults).

    Attributes:
        nodes: number of nodes N (required, >= 2).
        edges: number of generated edges (required); stored edges double with ``undirected``.
        a, b, c, d: quadrant probabilities (default 0.57, 0.19, 0.19, 0.05; must sum to 1).
        seed: random seed (default 0).
        scramble: permute vertex ids with a seeded permutation (default true, as Graph500).
        features: feature dimension F (default 0: no features).
        classes: number of classes C (default 0: no labels); labels are uniform random and
            features class-correlated (centroid + unit noise), so they are only a smoke-test
            signal: use the DC-SBM for accuracy experiments.
        feature_signal: class-centroid scale (default 1.0; smoke-test signal only).
        train_frac, val_frac: split fractions when ``classes`` > 0 (default 0.1, 0.1).
        undirected: store both directions of every edge (default false).
        dedup: drop repeated edges by an external sort (default false; R-MAT repeats edges).
        drop_self_loops: drop (v, v) edges (default false).
        sort_memory: external sort memory cap in bytes (default 256 MiB).
        name: dataset name (default: the output directory's name).
        overwrite: replace an existing output (default false).
    """

    nodes: int
    edges: int
    a: float = 0.57
    b: float = 0.19
    c: float = 0.19
    d: float = 0.05
    seed: int = 0
    scramble: bool = True
    features: int = 0
    classes: int = 0
    feature_signal: float = 1.0
    train_frac: float = 0.1
    val_frac: float = 0.1
    undirected: bool = False
    dedup: bool = False
    drop_self_loops: bool = False
    sort_memory: int = DEFAULT_SORT_MEMORY
    name: str | None = None
    overwrite: bool = False

    def __post_init__(self) -> None:
        if self.nodes < 2:
            raise ShoalInputError(f"--nodes must be >= 2, got {self.nodes}")
        if self.nodes > 2**40:
            raise ShoalInputError(f"--nodes must be <= 2**40, got {self.nodes}")
        _positive("--edges", self.edges)
        for k in ("a", "b", "c", "d"):
            _positive(k, getattr(self, k), allow_zero=True)
        if abs(self.a + self.b + self.c + self.d - 1) > 1e-6:
            raise ShoalInputError(
                f"a + b + c + d must be 1, got {self.a + self.b + self.c + self.d}",
                fix="e.g. the Graph500 values 0.57 0.19 0.19 0.05",
            )
        if self.a + self.b <= 0 or self.c + self.d <= 0:
            raise ShoalInputError("a + b and c + d must both be > 0")
        _positive("--features", self.features, allow_zero=True)
        _positive("--classes", self.classes, allow_zero=True)
        if self.classes == 1:
            raise ShoalInputError("--classes must be 0 (no labels) or >= 2")
        _check_fractions(self.train_frac, self.val_frac)

    @property
    def scale(self) -> int:
        return max(1, math.ceil(math.log2(self.nodes)))


@dataclass(kw_only=True)
class DCSBMConfig:
    """Degree-corrected stochastic block model options.

    Attributes:
        nodes: number of nodes N (required).
        edges: number of generated undirected edges (required); both directions are stored
            (2 * edges rows) unless ``directed``.
        classes: number of classes = blocks C (default 10).
        features: feature dimension F (default 64).
        homophily: probability that an edge stays inside its source's class (default 0.5).
        feature_signal: class-centroid scale; centroid distance is ~ signal * sqrt(2) noise
            standard deviations (default 1.5).
        degree_exponent: power-law exponent of the degree propensities theta (default 2.5).
        max_theta: cap on theta relative to its minimum (default 1000), i.e. on the ratio of
            the largest to the smallest expected degree.
        train_frac, val_frac: split fractions (default 0.1, 0.1; the rest is test).
        seed: random seed (default 0).
        directed: store each generated edge once, as (src, dst) (default false).
        dedup: drop repeated edges (default false).
        drop_self_loops: drop (v, v) edges (default false).
        sort_memory: external sort memory cap in bytes (default 256 MiB).
        name: dataset name (default: the output directory's name).
        overwrite: replace an existing output (default false).
    """

    nodes: int
    edges: int
    classes: int = 10
    features: int = 64
    homophily: float = 0.5
    feature_signal: float = 1.5
    degree_exponent: float = 2.5
    max_theta: float = 1000.0
    train_frac: float = 0.1
    val_frac: float = 0.1
    seed: int = 0
    directed: bool = False
    dedup: bool = False
    drop_self_loops: bool = False
    sort_memory: int = DEFAULT_SORT_MEMORY
    name: str | None = None
    overwrite: bool = False

    def __post_init__(self) -> None:
        if self.nodes < 2:
            raise ShoalInputError(f"--nodes must be >= 2, got {self.nodes}")
        _positive("--edges", self.edges)
        if not 1 <= self.classes <= self.nodes:
            raise ShoalInputError(f"--classes must be in [1, nodes], got {self.classes}")
        _positive("--features", self.features, allow_zero=True)
        if not 0 <= self.homophily <= 1:
            raise ShoalInputError(f"--homophily must be in [0, 1], got {self.homophily}")
        if self.degree_exponent <= 2:
            raise ShoalInputError(
                f"--degree-exponent must be > 2 (finite mean degree), got {self.degree_exponent}"
            )
        if self.max_theta < 1:
            raise ShoalInputError(f"--max-theta must be >= 1, got {self.max_theta}")
        _positive("--feature-signal", self.feature_signal, allow_zero=True)
        _check_fractions(self.train_frac, self.val_frac)


def _rng(seed: int, stream: int, block: int = 0) -> np.random.Generator:
    return np.random.default_rng([seed, stream, block])


def _blocks(total: int, size: int) -> Iterator[tuple[int, int]]:
    for i, s in enumerate(range(0, total, size)):
        yield i, min(size, total - s)


# ---------------------------------------------------------------------- R-MAT
def _rmat_ids(rng: np.random.Generator, k: int, cfg: RMATConfig) -> np.ndarray:
    """k edges in [0, 2**scale)^2 by the Graph500 per-level bit rule; (k, 2) int64."""
    ab = cfg.a + cfg.b
    c_norm = cfg.c / (cfg.c + cfg.d)  # P(dst bit = 0 | src bit = 1)
    a_norm = cfg.a / ab  # P(dst bit = 0 | src bit = 0)
    e = np.zeros((k, 2), dtype=np.int64)
    src, dst = e[:, 0], e[:, 1]
    thresh = np.empty(k, dtype=np.float32)
    for level in range(cfg.scale):
        bit = np.int64(1) << np.int64(cfg.scale - 1 - level)
        ii = rng.random(k, dtype=np.float32) > ab
        np.copyto(thresh, np.where(ii, np.float32(c_norm), np.float32(a_norm)))
        jj = rng.random(k, dtype=np.float32) > thresh
        src[ii] |= bit
        dst[jj] |= bit
    return e


def rmat_edge_blocks(cfg: RMATConfig) -> Iterator[np.ndarray]:
    """Yield the R-MAT edges as (k, 2) int64 blocks of at most :data:`GEN_BLOCK` rows."""
    n = cfg.nodes
    perm = None
    if cfg.scramble:
        perm = (
            _rng(cfg.seed, _NODES)
            .permutation(n)
            .astype(np.int32 if n <= np.iinfo(np.int32).max else np.int64)
        )
    for i, k in _blocks(cfg.edges, GEN_BLOCK):
        rng = _rng(cfg.seed, _EDGES, i)
        e = _rmat_ids(rng, k, cfg)
        bad = (e >= n).any(axis=1)
        while bad.any():  # N not a power of two: redraw edges that fall outside
            m = int(bad.sum())
            e[bad] = _rmat_ids(rng, m, cfg)
            bad = (e >= n).any(axis=1)
        if perm is not None:
            e = perm[e].astype(np.int64)
        yield e


def _class_node_data(
    w: GraphWriter,
    n: int,
    classes: int,
    features: int,
    signal: float,
    labels: np.ndarray | None,
    train: float,
    val: float,
    seed: int,
) -> None:
    """Labels (given or uniform), class-correlated features and random splits."""
    rng = _rng(seed, _NODES, 1)
    if labels is None:
        labels = rng.integers(0, classes, n)
    if features:
        centroids = (
            _rng(seed, _NODES, 2).standard_normal((classes, features))
            * (signal / math.sqrt(features))
        ).astype(np.float32)
        # with unit noise per coordinate, two centroids lie ~ signal * sqrt(2) noise standard
        # deviations apart (along the line joining them), whatever F

        def blocks() -> Iterator[np.ndarray]:
            for i, k in _blocks(n, FEAT_BLOCK):
                s = i * FEAT_BLOCK
                noise = _rng(seed, _FEATURES, i).standard_normal((k, features), dtype=np.float32)
                noise += centroids[labels[s : s + k]]
                yield noise

        w.write_features(blocks(), origin="synthetic features")
    w.write_labels(labels, origin="synthetic labels", num_classes=classes)
    order = _rng(seed, _NODES, 3).permutation(n)
    n_train, n_val = int(round(train * n)), int(round(val * n))
    w.write_split("train", order[:n_train])
    w.write_split("val", order[n_train : n_train + n_val])
    w.write_split("test", order[n_train + n_val :])


def generate_rmat(
    out: str | os.PathLike, config: RMATConfig, *, show_progress: bool | None = None
) -> GraphDir:
    """Write an R-MAT graph directory (see the module docstring); returns it opened."""
    cfg = config
    with GraphWriter(
        out,
        num_nodes=cfg.nodes,
        symmetrize=cfg.undirected,
        dedup=cfg.dedup,
        drop_self_loops=cfg.drop_self_loops,
        sort_memory=cfg.sort_memory,
        name=cfg.name,
        source={"generator": "rmat", "config": asdict(cfg)},
        overwrite=cfg.overwrite,
    ) as w:
        bar = progress(total=cfg.edges, desc="rmat edges", unit="edge", enable=show_progress)
        for e in rmat_edge_blocks(cfg):
            w.add_edges(e, origin="rmat generator")
            bar.update(e.shape[0])
        bar.close()
        w.finish_edges()
        if cfg.classes:
            _class_node_data(
                w,
                cfg.nodes,
                cfg.classes,
                cfg.features,
                cfg.feature_signal,
                None,
                cfg.train_frac,
                cfg.val_frac,
                cfg.seed,
            )
        elif cfg.features:
            _class_node_data_features_only(w, cfg)
    return GraphDir.open(out)


def _class_node_data_features_only(w: GraphWriter, cfg: RMATConfig) -> None:
    def blocks() -> Iterator[np.ndarray]:
        for i, k in _blocks(cfg.nodes, FEAT_BLOCK):
            yield _rng(cfg.seed, _FEATURES, i).standard_normal((k, cfg.features), dtype=np.float32)

    w.write_features(blocks(), origin="synthetic features")


# ---------------------------------------------------------------------- DC-SBM
@dataclass
class _SBMState:
    labels: np.ndarray  # (N,) class of each node
    order: np.ndarray  # node ids sorted by class
    cum: np.ndarray  # cumulative theta in ``order`` (float64, N)
    lo: np.ndarray  # (C,) cum value before each class's first node
    hi: np.ndarray  # (C,) cum value at each class's last node
    start: np.ndarray  # (C,) first position of each class in ``order``
    stop: np.ndarray  # (C,) one past the last position


def _sbm_state(cfg: DCSBMConfig) -> _SBMState:
    n, c = cfg.nodes, cfg.classes
    rng = _rng(cfg.seed, _NODES, 0)
    labels = rng.permutation(np.arange(n, dtype=np.int64) % c)
    # continuous power law with x_min = 1: P(theta > x) = x^-(gamma - 1)
    u = rng.random(n)
    theta = np.minimum((1.0 - u) ** (-1.0 / (cfg.degree_exponent - 1.0)), cfg.max_theta)
    order = np.argsort(labels, kind="stable")
    cum = np.cumsum(theta[order])
    sizes = np.bincount(labels, minlength=c)
    stop = np.cumsum(sizes)
    start = stop - sizes
    hi = cum[stop - 1]
    lo = np.where(start > 0, cum[np.maximum(start - 1, 0)], 0.0)
    return _SBMState(labels, order, cum, lo, hi, start, stop)


def _sbm_pick(st: _SBMState, cls: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Nodes drawn proportionally to theta within class ``cls`` (u uniform in [0, 1))."""
    target = st.lo[cls] + u * (st.hi[cls] - st.lo[cls])
    pos = np.searchsorted(st.cum, target, side="right")
    pos = np.clip(pos, st.start[cls], st.stop[cls] - 1)
    return st.order[pos]


def dcsbm_edge_blocks(cfg: DCSBMConfig, st: _SBMState | None = None) -> Iterator[np.ndarray]:
    """Yield the DC-SBM edges (one direction) as (k, 2) int64 blocks; no self-loops."""
    st = st or _sbm_state(cfg)
    c = cfg.classes
    total = st.cum[-1]
    for i, k in _blocks(cfg.edges, GEN_BLOCK):
        rng = _rng(cfg.seed, _EDGES, i)
        pos = np.searchsorted(st.cum, rng.random(k) * total, side="right")
        src = st.order[np.minimum(pos, cfg.nodes - 1)]
        csrc = st.labels[src]
        if c > 1:
            same = rng.random(k) < cfg.homophily
            cdst = np.where(same, csrc, (csrc + rng.integers(1, c, k)) % c)
        else:
            cdst = csrc
        dst = _sbm_pick(st, cdst, rng.random(k))
        loop = src == dst
        tries = 0
        while loop.any() and tries < 100:  # redraw self-loops (a class of one node keeps them)
            dst[loop] = _sbm_pick(st, cdst[loop], rng.random(int(loop.sum())))
            loop = src == dst
            tries += 1
        if loop.any():
            keep = ~loop
            src, dst = src[keep], dst[keep]
        yield np.stack([src, dst], axis=1)


def generate_dcsbm(
    out: str | os.PathLike, config: DCSBMConfig, *, show_progress: bool | None = None
) -> GraphDir:
    """Write a DC-SBM graph directory with features, labels and splits; returns it opened."""
    cfg = config
    st = _sbm_state(cfg)
    source: dict[str, Any] = {"generator": "dcsbm", "config": asdict(cfg)}
    with GraphWriter(
        out,
        num_nodes=cfg.nodes,
        symmetrize=not cfg.directed,
        dedup=cfg.dedup,
        drop_self_loops=cfg.drop_self_loops,
        sort_memory=cfg.sort_memory,
        name=cfg.name,
        source=source,
        overwrite=cfg.overwrite,
    ) as w:
        bar = progress(total=cfg.edges, desc="dcsbm edges", unit="edge", enable=show_progress)
        for e in dcsbm_edge_blocks(cfg, st):
            w.add_edges(e, origin="dcsbm generator")
            bar.update(e.shape[0])
        bar.close()
        w.finish_edges()
        _class_node_data(
            w,
            cfg.nodes,
            cfg.classes,
            cfg.features,
            cfg.feature_signal,
            st.labels,
            cfg.train_frac,
            cfg.val_frac,
            cfg.seed,
        )
    return GraphDir.open(out)
