"""Typed academic graphs shaped like IGBH (:func:`generate_igbh`), streamed to disk.

IGBH (Khatua et al., KDD 2023), the MLPerf Training GNN benchmark's dataset: its six node
types and six relations (plus reverses; papers carry the labels) are listed in
docs/format.md#shoal-data-synth-igbh; its public node counts per size
(:data:`IGBH_NODE_COUNTS`) times ``scale`` (0.01 of tiny: 1,000 papers, for tests).

The model, per relation ``(S, r, D)`` with ``degree[r]`` edges per node of ``S`` on average:
every node of every type has a latent class (uniform over ``classes``; the papers' classes are
their labels) and a degree propensity ``theta`` drawn from a power law (exponent
``degree_exponent``, as :mod:`~shoal.data.synth.dcsbm`), so degrees are heavy-tailed within
each relation. An edge's source is drawn proportionally to ``theta`` among ``S``; with
probability ``homophily[r]`` its destination's class is ``perm_r(class of the source)``, else
another class; the destination is drawn proportionally to ``theta`` within that class of
``D``. ``perm_r`` is the identity for ``cites``, ``written_by`` and ``affiliated_to`` and a
fixed random permutation of the classes for ``topic``, ``published`` and ``venue`` (a field,
a journal or a conference "means" another class than the paper's).

Features: every type has features of the same width ``features`` (IGBH: 1024 for all),
``x_v = signal[type(v)] * mu_{class(v)} + N(0, I)`` with class centroids ``mu_c`` shared by
all types. What each model can read of it: docs/format.md#shoal-data-synth-igbh.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from shoal.data.format import GraphDir
from shoal.data.hetero import HeteroSchema
from shoal.data.hetero_writer import HeteroGraphWriter
from shoal.data.synth.common import (
    FEAT_BLOCK,
    GEN_BLOCK,
    STREAM_EDGES,
    STREAM_FEATURES,
    STREAM_NODES,
    ClassSampler,
    block_sizes,
    check_feature_dtype,
    check_fractions,
    check_positive,
    recorded_config,
    rng_for,
    write_random_splits,
)
from shoal.errors import ShoalInputError
from shoal.utils.progress import progress

__all__ = ["IGBH_NODE_COUNTS", "IGBH_RELATIONS", "IGBHConfig", "generate_igbh", "igbh_schema"]

#: IGBH's node counts per size (the IGB datasets' public tables, as the MLPerf GNN
#: reference lists them); ``large`` and ``full`` are far beyond a synthetic run's use
IGBH_NODE_COUNTS: dict[str, dict[str, int]] = {
    "tiny": {
        "paper": 100_000,
        "author": 357_041,
        "institute": 8_738,
        "fos": 84_220,
        "journal": 8_101,
        "conference": 398,
    },
    "small": {
        "paper": 1_000_000,
        "author": 1_926_066,
        "institute": 14_751,
        "fos": 190_449,
        "journal": 15_277,
        "conference": 1_215,
    },
    "medium": {
        "paper": 10_000_000,
        "author": 15_544_654,
        "institute": 23_256,
        "fos": 415_054,
        "journal": 37_565,
        "conference": 4_189,
    },
}

#: IGBH's relations, in the order their edges are written
IGBH_RELATIONS: tuple[tuple[str, str, str], ...] = (
    ("paper", "cites", "paper"),
    ("paper", "written_by", "author"),
    ("author", "affiliated_to", "institute"),
    ("paper", "topic", "fos"),
    ("paper", "published", "journal"),
    ("paper", "venue", "conference"),
)

_PERMUTED = ("topic", "published", "venue")

#: mean edges per source node of each relation (default; a journal or a conference for
#: about every paper, a few authors and fields each, an affiliation for most authors)
DEFAULT_DEGREE = {
    "cites": 6.0,
    "written_by": 3.0,
    "affiliated_to": 0.8,
    "topic": 4.0,
    "published": 0.55,
    "venue": 0.45,
}
#: probability that an edge's destination has the (permuted) class of its source (default)
DEFAULT_HOMOPHILY = {
    "cites": 0.3,
    "written_by": 0.5,
    "affiliated_to": 0.6,
    "topic": 0.6,
    "published": 0.8,
    "venue": 0.8,
}
#: class-centroid scale of each type's features (default; the papers' are weak)
DEFAULT_SIGNAL = {
    "paper": 1.0,
    "author": 2.0,
    "institute": 2.0,
    "fos": 2.0,
    "journal": 2.0,
    "conference": 2.0,
}


@dataclass(kw_only=True)
class IGBHConfig:
    """Options of the IGBH-shaped generator (module docstring).

    Attributes:
        size: which IGBH node counts to scale: ``tiny``, ``small`` or ``medium`` (default
            ``tiny``).
        scale: multiplies every node count (at least one node per type; default 1.0).
        classes: classes of the papers' labels (default 19, as IGBH's 19-class labels).
        features: feature width of every node type (default 128; IGBH: 1024).
        degree: mean edges per source node of each relation (default
            :data:`DEFAULT_DEGREE`; a partial dict updates it).
        homophily: per relation (default :data:`DEFAULT_HOMOPHILY`).
        signal: class-centroid scale of each node type's features (default
            :data:`DEFAULT_SIGNAL`).
        featureless: node types stored without features (default none; a model then learns
            an embedding for them).
        add_reverse: store the reverse relations (default true, as the MLPerf reference:
            ``rev_<relation>`` between types, ``cites`` made symmetric).
        degree_exponent: power-law exponent of ``theta`` (default 2.5).
        max_theta: cap on ``theta`` relative to its minimum (default 1000).
        train_frac, val_frac: split fractions of the papers (default 0.6, 0.2).
        test_frac: the test split's fraction of the papers (default None: every paper not in
            train or val; a fraction leaves the others in no split).
        feature_dtype: the stored features' dtype, one of
            :data:`~shoal.utils.featdtype.FEATURE_DTYPES` (default
            float32, as MLPerf's ``--use_fp16`` stores IGBH's in float16).
        seed: random seed (default 0).
        name: dataset name (default: the output directory's name).
        overwrite: replace an existing output (default false).
    """

    size: str = "tiny"
    scale: float = 1.0
    classes: int = 19
    features: int = 128
    degree: dict[str, float] = field(default_factory=dict)
    homophily: dict[str, float] = field(default_factory=dict)
    signal: dict[str, float] = field(default_factory=dict)
    featureless: tuple[str, ...] = ()
    add_reverse: bool = True
    degree_exponent: float = 2.5
    max_theta: float = 1000.0
    train_frac: float = 0.6
    val_frac: float = 0.2
    test_frac: float | None = None
    feature_dtype: str = "float32"
    seed: int = 0
    name: str | None = None
    overwrite: bool = False

    def __post_init__(self) -> None:
        if self.size not in IGBH_NODE_COUNTS:
            raise ShoalInputError(
                f"--size {self.size!r} is not an IGBH size",
                fix=f"choose one of {', '.join(IGBH_NODE_COUNTS)}",
            )
        check_positive("--scale", self.scale)
        if self.classes < 1:
            raise ShoalInputError(f"--classes must be >= 1, got {self.classes}")
        check_positive("--features", self.features, allow_zero=True)
        rels = {r for _, r, _ in IGBH_RELATIONS}
        types = set(IGBH_NODE_COUNTS[self.size])
        for what, d, known in (
            ("degree", self.degree, rels),
            ("homophily", self.homophily, rels),
            ("signal", self.signal, types),
        ):
            unknown = set(d) - known
            if unknown:
                raise ShoalInputError(
                    f"--{what} names {', '.join(sorted(unknown))}, not among "
                    f"{', '.join(sorted(known))}"
                )
        self.degree = {**DEFAULT_DEGREE, **self.degree}
        self.homophily = {**DEFAULT_HOMOPHILY, **self.homophily}
        self.signal = {**DEFAULT_SIGNAL, **self.signal}
        for r, v in self.degree.items():
            check_positive(f"--degree {r}", v, allow_zero=True)
        for r, v in self.homophily.items():
            if not 0 <= v <= 1:
                raise ShoalInputError(f"--homophily {r} must be in [0, 1], got {v}")
        bad = set(self.featureless) - types
        if bad:
            raise ShoalInputError(f"--featureless names unknown types {', '.join(sorted(bad))}")
        if self.degree_exponent <= 2:
            raise ShoalInputError(
                f"--degree-exponent must be > 2 (finite mean degree), got {self.degree_exponent}"
            )
        if self.max_theta < 1:
            raise ShoalInputError(f"--max-theta must be >= 1, got {self.max_theta}")
        check_fractions(self.train_frac, self.val_frac, self.test_frac)
        check_feature_dtype(self.feature_dtype)

    @property
    def counts(self) -> dict[str, int]:
        """The scaled node count of each type (at least 1)."""
        return {
            t: max(1, int(round(n * self.scale))) for t, n in IGBH_NODE_COUNTS[self.size].items()
        }

    def relation_edges(self, rel: tuple[str, str, str]) -> int:
        """Edges generated for relation ``rel`` (before reverses)."""
        return int(round(self.counts[rel[0]] * self.degree[rel[1]]))


def igbh_schema(cfg: IGBHConfig) -> HeteroSchema:
    """The schema of the graph :func:`generate_igbh` writes for ``cfg`` (before reverses)."""
    return HeteroSchema.of(cfg.counts, IGBH_RELATIONS, target="paper")


def _permutations(cfg: IGBHConfig) -> dict[str, np.ndarray]:
    rng = rng_for(cfg.seed, STREAM_NODES, 10)
    ident = np.arange(cfg.classes)
    return {
        r: (rng.permutation(cfg.classes) if r in _PERMUTED else ident) for _, r, _ in IGBH_RELATIONS
    }


@dataclass
class _Types:
    samplers: dict[str, ClassSampler]
    perm: dict[str, np.ndarray]


def _types(cfg: IGBHConfig) -> _Types:
    samplers = {}
    for i, (t, n) in enumerate(cfg.counts.items()):
        rng = rng_for(cfg.seed, STREAM_NODES, 20 + i)
        labels = rng.permutation(np.arange(n, dtype=np.int64) % cfg.classes)
        samplers[t] = ClassSampler.power_law(
            labels, cfg.classes, cfg.degree_exponent, cfg.max_theta, rng
        )
    return _Types(samplers, _permutations(cfg))


def relation_blocks(
    cfg: IGBHConfig, rel: tuple[str, str, str], ty: _Types, index: int
) -> Iterator[np.ndarray]:
    """The edges of relation ``rel`` as ``(k, 2)`` int64 blocks of type-local ids."""
    s, r, d = rel
    src_s, dst_s = ty.samplers[s], ty.samplers[d]
    c = cfg.classes
    for i, k in block_sizes(cfg.relation_edges(rel), GEN_BLOCK):
        rng = rng_for(cfg.seed, STREAM_EDGES, (index << 20) + i)
        src = src_s.draw(rng.random(k))
        cls = ty.perm[r][src_s.labels[src]]
        if c > 1:
            keep = rng.random(k) < cfg.homophily[r]
            cls = np.where(keep, cls, (cls + rng.integers(1, c, k)) % c)
        dst = dst_s.draw_in(cls, rng.random(k))
        if s == d:  # no self-citations
            ok = src != dst
            src, dst = src[ok], dst[ok]
        yield np.stack([src, dst], axis=1)


def _feature_rows(cfg: IGBHConfig, t: str, ti: int, labels: np.ndarray) -> Iterator[np.ndarray]:
    f = cfg.features
    centroids = (
        rng_for(cfg.seed, STREAM_NODES, 2).standard_normal((cfg.classes, f)) / math.sqrt(f)
    ).astype(np.float32) * np.float32(cfg.signal[t])
    for i, k in block_sizes(len(labels), FEAT_BLOCK):
        s = i * FEAT_BLOCK
        x = rng_for(cfg.seed, STREAM_FEATURES, (ti << 24) + i).standard_normal(
            (k, f), dtype=np.float32
        )
        x += centroids[labels[s : s + k]]
        yield x


def generate_igbh(
    out: str | os.PathLike, config: IGBHConfig, *, show_progress: bool | None = None
) -> GraphDir:
    """Write an IGBH-shaped typed graph directory (module docstring); returns it opened."""
    cfg = config
    ty = _types(cfg)
    total = sum(cfg.relation_edges(r) for r in IGBH_RELATIONS)
    source = {"generator": "igbh", "config": recorded_config(cfg)}
    with HeteroGraphWriter(
        out,
        igbh_schema(cfg),
        add_reverse=cfg.add_reverse,
        name=cfg.name,
        source=source,
        overwrite=cfg.overwrite,
    ) as w:
        bar = progress(total=total, desc="igbh edges", unit="edge", enable=show_progress)
        for i, rel in enumerate(IGBH_RELATIONS):
            for e in relation_blocks(cfg, rel, ty, i):
                w.add_relation(rel, e, origin="igbh generator")
                bar.update(len(e))
        bar.close()
        w.finish_edges()
        if cfg.features:
            for ti, t in enumerate(cfg.counts):
                if t not in cfg.featureless:
                    labels = ty.samplers[t].labels
                    rows = _feature_rows(cfg, t, ti, labels)
                    w.write_node_features(t, rows, origin=f"{t}", dtype=cfg.feature_dtype)
        papers = ty.samplers["paper"].labels
        w.write_labels(papers, origin="synthetic labels", num_classes=cfg.classes)
        fractions = (cfg.train_frac, cfg.val_frac, cfg.test_frac)
        write_random_splits(w, len(papers), fractions, cfg.seed)
    return GraphDir.open(out)
