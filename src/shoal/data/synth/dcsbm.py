"""Degree-corrected stochastic block model graphs (:func:`generate_dcsbm`), streamed to disk
in blocks, with class-correlated features, labels and splits.

The model: Karrer & Newman, "Stochastic blockmodels and community structure in networks",
Phys. Rev. E 83, 016107 (2011), eq. (7)-(8): edge counts A_ij ~ Poisson(theta_i theta_j omega_{g_i g_j}). Sampling a fixed number of edges one by one
(the multinomial form of the same model, conditioned on the total) gives: source i with
probability proportional to theta_i; its block pair from omega, which here is
``homophily`` on the diagonal and ``(1 - homophily) / (C - 1)`` off it (each edge stays in the
source's class with probability ``homophily``); the destination proportional to theta within
the chosen class. theta is drawn from a power law with exponent ``degree_exponent`` (expected
degree proportional to theta), so degrees are heavy-tailed as in real graphs. Classes are the
blocks (balanced), node features are ``x_i = mu_{y_i} + N(0, I)`` with class centroids
``mu_c ~ N(0, feature_signal^2 / F * I)``, and train/val/test splits are uniform random.

Why a GNN beats an MLP on the defaults (``homophily=0.5``, ``feature_signal=1.5``, 10
classes), and the measured accuracies: docs/format.md#synthetic-graphs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from shoal.data.format import GraphDir
from shoal.data.synth.common import (
    GEN_BLOCK,
    STREAM_EDGES,
    STREAM_NODES,
    ClassSampler,
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

__all__ = ["DCSBMConfig", "dcsbm_edge_blocks", "generate_dcsbm"]


@dataclass(kw_only=True)
class DCSBMConfig(WriteConfig):
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
        train_frac, val_frac: split fractions (default 0.1, 0.1).
        test_frac: test fraction (default None: the rest; a fraction leaves the others in
            no split, as most of ogbn-papers100M's nodes).
        feature_dtype: the stored features' dtype, one of
            :data:`~shoal.utils.featdtype.FEATURE_DTYPES` (default
            float32; generated in float32 either way).
        seed: random seed (default 0).
        directed: store each generated edge once, as (src, dst) (default false).
        and the write options of :class:`~shoal.data.synth.common.WriteConfig`.
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
    test_frac: float | None = None
    feature_dtype: str = "float32"
    seed: int = 0
    directed: bool = False

    def __post_init__(self) -> None:
        if self.nodes < 2:
            raise ShoalInputError(f"--nodes must be >= 2, got {self.nodes}")
        check_positive("--edges", self.edges)
        if not 1 <= self.classes <= self.nodes:
            raise ShoalInputError(f"--classes must be in [1, nodes], got {self.classes}")
        check_positive("--features", self.features, allow_zero=True)
        if not 0 <= self.homophily <= 1:
            raise ShoalInputError(f"--homophily must be in [0, 1], got {self.homophily}")
        if self.degree_exponent <= 2:
            raise ShoalInputError(
                f"--degree-exponent must be > 2 (finite mean degree), got {self.degree_exponent}"
            )
        if self.max_theta < 1:
            raise ShoalInputError(f"--max-theta must be >= 1, got {self.max_theta}")
        check_positive("--feature-signal", self.feature_signal, allow_zero=True)
        check_fractions(self.train_frac, self.val_frac, self.test_frac)
        check_feature_dtype(self.feature_dtype)


def _sbm_state(cfg: DCSBMConfig) -> ClassSampler:
    rng = rng_for(cfg.seed, STREAM_NODES, 0)
    labels = rng.permutation(np.arange(cfg.nodes, dtype=np.int64) % cfg.classes)
    return ClassSampler.power_law(labels, cfg.classes, cfg.degree_exponent, cfg.max_theta, rng)


def dcsbm_edge_blocks(cfg: DCSBMConfig, st: ClassSampler | None = None) -> Iterator[np.ndarray]:
    """Yield the DC-SBM edges (one direction) as (k, 2) int64 blocks; no self-loops."""
    st = st or _sbm_state(cfg)
    c = cfg.classes
    for i, k in block_sizes(cfg.edges, GEN_BLOCK):
        rng = rng_for(cfg.seed, STREAM_EDGES, i)
        src = st.draw(rng.random(k))
        csrc = st.labels[src]
        if c > 1:
            same = rng.random(k) < cfg.homophily
            cdst = np.where(same, csrc, (csrc + rng.integers(1, c, k)) % c)
        else:
            cdst = csrc
        dst = st.draw_in(cdst, rng.random(k))
        loop = src == dst
        tries = 0
        while loop.any() and tries < 100:  # redraw self-loops (a class of one node keeps them)
            dst[loop] = st.draw_in(cdst[loop], rng.random(int(loop.sum())))
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
    with synth_writer(out, cfg, generator="dcsbm", symmetrize=not cfg.directed) as w:
        write_edge_blocks(
            w, dcsbm_edge_blocks(cfg, st), cfg.edges, generator="dcsbm", show_progress=show_progress
        )
        class_node_data(
            w,
            cfg.nodes,
            cfg.classes,
            cfg.features,
            cfg.feature_signal,
            st.labels,
            (cfg.train_frac, cfg.val_frac, cfg.test_frac),
            cfg.seed,
            cfg.feature_dtype,
        )
    return GraphDir.open(out)
