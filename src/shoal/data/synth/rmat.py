"""R-MAT / Kronecker graphs (:func:`generate_rmat`), streamed to disk in blocks.

The model: Chakrabarti, Zhan & Faloutsos, "R-MAT: A Recursive Model for Graph Mining", SIAM
SDM 2004, section 3: each edge descends ``scale = ceil(log2 N)`` levels of the adjacency
matrix, choosing the quadrant (a, b, c, d) at every level; defaults and the seeded vertex
scrambling are Graph500's (benchmark specification, "Kronecker generator" section;
docs/format.md#synthetic-graphs). As in the Graph500 reference generator each level draws the
source bit with P(1) = c + d and then the destination bit with P(1) = d / (c + d) or
b / (a + b) given the source bit, vectorised over a block of edges. When N is not a power of
two, edges with an endpoint >= N (before scrambling) are redrawn.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from shoal.data.format import GraphDir, GraphWriter
from shoal.data.synth.common import (
    FEAT_BLOCK,
    GEN_BLOCK,
    STREAM_EDGES,
    STREAM_FEATURES,
    STREAM_NODES,
    WriteConfig,
    block_sizes,
    check_feature_dtype,
    check_fractions,
    check_positive,
    class_node_data,
    rng_for,
    synth_writer,
    write_edge_blocks,
)
from shoal.errors import ShoalInputError

__all__ = ["RMATConfig", "generate_rmat", "rmat_edge_blocks"]


@dataclass(kw_only=True)
class RMATConfig(WriteConfig):
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
        test_frac: test fraction (default None: the rest; a fraction leaves the others in
            no split).
        feature_dtype: the stored features' dtype, one of
            :data:`~shoal.utils.featdtype.FEATURE_DTYPES` (default
            float32; generated in float32 either way).
        undirected: store both directions of every edge (default false).
        and the write options of :class:`~shoal.data.synth.common.WriteConfig`.
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
    test_frac: float | None = None
    feature_dtype: str = "float32"
    undirected: bool = False

    def __post_init__(self) -> None:
        if self.nodes < 2:
            raise ShoalInputError(f"--nodes must be >= 2, got {self.nodes}")
        if self.nodes > 2**40:
            raise ShoalInputError(f"--nodes must be <= 2**40, got {self.nodes}")
        check_positive("--edges", self.edges)
        for k in ("a", "b", "c", "d"):
            check_positive(k, getattr(self, k), allow_zero=True)
        if abs(self.a + self.b + self.c + self.d - 1) > 1e-6:
            raise ShoalInputError(
                f"a + b + c + d must be 1, got {self.a + self.b + self.c + self.d}",
                fix="e.g. the Graph500 values 0.57 0.19 0.19 0.05",
            )
        if self.a + self.b <= 0 or self.c + self.d <= 0:
            raise ShoalInputError("a + b and c + d must both be > 0")
        check_positive("--features", self.features, allow_zero=True)
        check_positive("--classes", self.classes, allow_zero=True)
        if self.classes == 1:
            raise ShoalInputError("--classes must be 0 (no labels) or >= 2")
        check_fractions(self.train_frac, self.val_frac, self.test_frac)
        check_feature_dtype(self.feature_dtype)

    @property
    def scale(self) -> int:
        return max(1, math.ceil(math.log2(self.nodes)))


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
            rng_for(cfg.seed, STREAM_NODES)
            .permutation(n)
            .astype(np.int32 if n <= np.iinfo(np.int32).max else np.int64)
        )
    for i, k in block_sizes(cfg.edges, GEN_BLOCK):
        rng = rng_for(cfg.seed, STREAM_EDGES, i)
        e = _rmat_ids(rng, k, cfg)
        bad = (e >= n).any(axis=1)
        while bad.any():  # N not a power of two: redraw edges that fall outside
            m = int(bad.sum())
            e[bad] = _rmat_ids(rng, m, cfg)
            bad = (e >= n).any(axis=1)
        if perm is not None:
            e = perm[e].astype(np.int64)
        yield e


def _random_features(w: GraphWriter, cfg: RMATConfig) -> None:
    """Unit Gaussian features without classes."""

    def rows() -> Iterator[np.ndarray]:
        for i, k in block_sizes(cfg.nodes, FEAT_BLOCK):
            yield rng_for(cfg.seed, STREAM_FEATURES, i).standard_normal(
                (k, cfg.features), dtype=np.float32
            )

    w.write_features(rows(), origin="synthetic features", dtype=cfg.feature_dtype)


def generate_rmat(
    out: str | os.PathLike, config: RMATConfig, *, show_progress: bool | None = None
) -> GraphDir:
    """Write an R-MAT graph directory (see the module docstring); returns it opened."""
    cfg = config
    with synth_writer(out, cfg, generator="rmat", symmetrize=cfg.undirected) as w:
        write_edge_blocks(
            w, rmat_edge_blocks(cfg), cfg.edges, generator="rmat", show_progress=show_progress
        )
        if cfg.classes:
            class_node_data(
                w,
                cfg.nodes,
                cfg.classes,
                cfg.features,
                cfg.feature_signal,
                None,
                (cfg.train_frac, cfg.val_frac, cfg.test_frac),
                cfg.seed,
                cfg.feature_dtype,
            )
        elif cfg.features:
            _random_features(w, cfg)
    return GraphDir.open(out)
