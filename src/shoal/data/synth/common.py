"""What both generators share: block sizes, seeded random streams, option checks, the writer
they feed and the class-correlated node data (labels, features, splits)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from shoal.data.extsort import DEFAULT_SORT_MEMORY
from shoal.data.format import GraphWriter
from shoal.data.writer import WRITE_FIELDS, graph_bytes
from shoal.errors import ShoalInputError
from shoal.utils.featdtype import FEATURE_DTYPES
from shoal.utils.progress import progress

__all__ = [
    "FEAT_BLOCK",
    "GEN_BLOCK",
    "STREAM_EDGES",
    "STREAM_FEATURES",
    "STREAM_NODES",
    "ClassSampler",
    "WriteConfig",
    "block_sizes",
    "FEATURE_DTYPES",
    "check_feature_dtype",
    "check_fractions",
    "write_random_splits",
    "check_positive",
    "class_node_data",
    "recorded_config",
    "rng_for",
    "synth_writer",
    "write_edge_blocks",
]

#: Edges generated per block (each block has its own random stream).
GEN_BLOCK = 1 << 20
#: Feature rows generated per block.
FEAT_BLOCK = 1 << 15

STREAM_EDGES, STREAM_FEATURES, STREAM_NODES = 1, 2, 3  # random stream ids

# config fields left out of meta.json's provenance (they say nothing about the graph)
_UNRECORDED = ("scratch_dir",)


def check_positive(name: str, v: float, allow_zero: bool = False) -> None:
    if v < 0 or (v == 0 and not allow_zero):
        raise ShoalInputError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {v}")


def check_fractions(train: float, val: float, test: float | None = None) -> None:
    """Split fractions in [0, 1] summing to at most 1 (``test`` None: the rest)."""
    parts = (train, val, 0.0 if test is None else test)
    if not (all(0 <= f <= 1 for f in parts) and sum(parts) <= 1):
        given = "/".join(str(f) for f in (train, val, test) if f is not None)
        raise ShoalInputError(
            f"split fractions {given} must lie in [0, 1] and sum to <= 1",
            fix="without a test fraction the rest of the nodes form the test split; with one, "
            "the nodes in no split are unlabelled for training and evaluation",
        )


def write_random_splits(
    w: GraphWriter, n: int, fractions: tuple[float, float, float | None], seed: int
) -> None:
    """Uniform random train/val/test splits of ``n`` nodes; a ``None`` test fraction takes
    every node the other two leave (with a fraction, the rest are in no split, as most of
    ogbn-papers100M's nodes)."""
    train, val, test = fractions
    order = rng_for(seed, STREAM_NODES, 3).permutation(n)
    a = int(round(train * n))
    b = a + int(round(val * n))
    w.write_split("train", order[:a])
    w.write_split("val", order[a:b])
    w.write_split("test", order[b:] if test is None else order[b : b + int(round(test * n))])


def check_feature_dtype(v: str) -> None:
    """Refuse a feature dtype that is not one of :data:`FEATURE_DTYPES`."""
    if v not in FEATURE_DTYPES:
        raise ShoalInputError(
            f"feature_dtype {v!r} is not one of {', '.join(FEATURE_DTYPES)}",
            fix="float16 or bfloat16 halve the features' bytes (and the out-of-core reads), "
            "int8 quarters them",
        )


def rng_for(seed: int, stream: int, block: int = 0) -> np.random.Generator:
    """The random stream of ``(seed, stream id, block)``: independent of chunk sizes."""
    return np.random.default_rng([seed, stream, block])


@dataclass
class ClassSampler:
    """Nodes with classes, drawn proportionally to a degree propensity ``theta``, among all
    nodes or within one class (the degree-corrected block model's two draws)."""

    labels: np.ndarray  # (N,) class of each node
    order: np.ndarray  # node ids sorted by class
    cum: np.ndarray  # cumulative theta in ``order`` (float64, N)
    lo: np.ndarray  # (C,) cum value before each class's first node
    hi: np.ndarray  # (C,) cum value at each class's last node
    start: np.ndarray  # (C,) first position of each class in ``order``
    stop: np.ndarray  # (C,) one past the last position

    @classmethod
    def power_law(
        cls,
        labels: np.ndarray,
        classes: int,
        exponent: float,
        max_theta: float,
        rng: np.random.Generator,
    ) -> ClassSampler:
        """``theta`` from a continuous power law with ``x_min = 1`` (``P(theta > x) =
        x^-(exponent - 1)``), capped at ``max_theta``."""
        n = len(labels)
        u = rng.random(n)
        theta = np.minimum((1.0 - u) ** (-1.0 / (exponent - 1.0)), max_theta)
        order = np.argsort(labels, kind="stable")
        cum = np.cumsum(theta[order])
        sizes = np.bincount(labels, minlength=classes)
        stop = np.cumsum(sizes)
        start = stop - sizes
        hi = cum[np.maximum(stop - 1, 0)]
        lo = np.where(start > 0, cum[np.maximum(start - 1, 0)], 0.0)
        return cls(labels, order, cum, lo, hi, start, stop)

    def draw(self, u: np.ndarray) -> np.ndarray:
        """Nodes drawn proportionally to theta among all (``u`` uniform in [0, 1))."""
        pos = np.searchsorted(self.cum, u * self.cum[-1], side="right")
        return self.order[np.minimum(pos, len(self.order) - 1)]

    def draw_in(self, cls: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Nodes drawn proportionally to theta within class ``cls`` (``u`` uniform in [0, 1));
        a class without nodes gives the node nearest its place in the class order."""
        target = self.lo[cls] + u * (self.hi[cls] - self.lo[cls])
        pos = np.searchsorted(self.cum, target, side="right")
        pos = np.clip(pos, self.start[cls], np.maximum(self.stop[cls] - 1, self.start[cls]))
        return self.order[np.minimum(pos, len(self.order) - 1)]


def block_sizes(total: int, size: int) -> Iterator[tuple[int, int]]:
    """``(block index, rows in the block)`` of ``total`` rows cut into blocks of ``size``."""
    for i, s in enumerate(range(0, total, size)):
        yield i, min(size, total - s)


@dataclass(kw_only=True)
class WriteConfig:
    """The write options of the R-MAT, DC-SBM and road generators' configs.

    Attributes:
        dedup: drop repeated edges by an external sort (default false).
        drop_self_loops: drop (v, v) edges (default false).
        sort_memory: external sort memory cap in bytes (default 256 MiB).
        scratch_dir: where the external sort of ``dedup`` puts its run files (default: beside
            the output directory; never the system temp dir). Not recorded in meta.json.
        name: dataset name (default: the output directory's name).
        overwrite: replace an existing output (default false).
    """

    dedup: bool = False
    drop_self_loops: bool = False
    sort_memory: int = DEFAULT_SORT_MEMORY
    scratch_dir: str | os.PathLike | None = None
    name: str | None = None
    overwrite: bool = False


_WRITE_FIELDS = [f.name for f in fields(WriteConfig)]


def recorded_config(config: Any) -> dict[str, Any]:
    """A generator's config as recorded in meta.json (``source.config``; the write options
    last)."""
    d = asdict(config)
    keys = sorted(d, key=lambda k: k in _WRITE_FIELDS)
    return {k: d[k] for k in keys if k not in _UNRECORDED}


def _synth_bytes(config: Any, symmetrize: bool) -> int | None:
    """The bytes a generator's output takes at least, from its config (None when the config
    does not say how many edges)."""
    edges = getattr(config, "edges", None)
    if edges is None:
        return None
    n = int(config.nodes)
    if getattr(config, "dedup", False) or getattr(config, "drop_self_loops", False):
        edges = 0  # how many edges stay is not known up front
    stored = int(edges) * (2 if symmetrize else 1)
    return graph_bytes(n, stored, features=getattr(config, "features", 0) or 0)


def synth_writer(
    out: str | os.PathLike, config: Any, *, generator: str, symmetrize: bool
) -> GraphWriter:
    """The :class:`GraphWriter` of a generator whose config has the shared write options
    (``nodes``, ``dedup``, ``drop_self_loops``, ``sort_memory``, ``scratch_dir``, ``name``,
    ``overwrite``)."""
    return GraphWriter(
        out,
        num_nodes=config.nodes,
        symmetrize=symmetrize,
        **{k: getattr(config, k) for k in WRITE_FIELDS},
        source={"generator": generator, "config": recorded_config(config)},
        need=_synth_bytes(config, symmetrize),
    )


def write_edge_blocks(
    w: GraphWriter,
    edge_blocks: Iterable[np.ndarray],
    total: int,
    *,
    generator: str,
    show_progress: bool | None,
) -> None:
    """Add every generated block to ``w`` with a progress bar, then fix num_nodes."""
    bar = progress(total=total, desc=f"{generator} edges", unit="edge", enable=show_progress)
    for e in edge_blocks:
        w.add_edges(e, origin=f"{generator} generator")
        bar.update(e.shape[0])
    bar.close()
    w.finish_edges()


def class_node_data(
    w: GraphWriter,
    n: int,
    classes: int,
    features: int,
    signal: float,
    labels: np.ndarray | None,
    fractions: tuple[float, float, float | None],
    seed: int,
    feature_dtype: str = "float32",
) -> None:
    """Labels (given or uniform), class-correlated features (generated in float32, stored
    as ``feature_dtype``) and random splits."""
    rng = rng_for(seed, STREAM_NODES, 1)
    if labels is None:
        labels = rng.integers(0, classes, n)
    if features:
        centroids = (
            rng_for(seed, STREAM_NODES, 2).standard_normal((classes, features))
            * (signal / math.sqrt(features))
        ).astype(np.float32)
        # with unit noise per coordinate, two centroids lie ~ signal * sqrt(2) noise standard
        # deviations apart (along the line joining them), whatever F

        def rows() -> Iterator[np.ndarray]:
            for i, k in block_sizes(n, FEAT_BLOCK):
                s = i * FEAT_BLOCK
                noise = rng_for(seed, STREAM_FEATURES, i).standard_normal(
                    (k, features), dtype=np.float32
                )
                noise += centroids[labels[s : s + k]]
                yield noise

        w.write_features(rows(), origin="synthetic features", dtype=feature_dtype)
    w.write_labels(labels, origin="synthetic labels", num_classes=classes)
    write_random_splits(w, n, fractions, seed)
