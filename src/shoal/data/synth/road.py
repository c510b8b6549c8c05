"""Road-like graphs (:func:`generate_road`): a 2-D lattice with missing streets and short
shortcuts, streamed to disk in blocks (the model: docs/format.md#synthetic-graphs).

Each lattice edge (to the right and downwards) is kept with probability ``keep``; each node
gets, with probability ``shortcuts``, one extra edge to a random cell at most ``reach`` cells
away in each direction; a shortcut that lands on its own cell is dropped. Node ids are
scrambled by a seeded permutation (default). Nodes are generated in blocks of
:data:`GEN_BLOCK` cells, each from its own random stream: the graph depends only on the
configuration and the seed.
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
    WriteConfig,
    block_sizes,
    check_positive,
    rng_for,
    synth_writer,
    write_edge_blocks,
)
from shoal.errors import ShoalInputError

__all__ = ["RoadConfig", "generate_road", "road_edge_blocks"]


@dataclass(kw_only=True)
class RoadConfig(WriteConfig):
    """Road-like lattice generator options.

    Attributes:
        width, height: grid size (required, each >= 2); N = width * height nodes.
        keep: probability that a lattice edge exists (default 0.75; mean degree ~3).
        shortcuts: probability that a node gets one extra short edge (default 0.05).
        reach: a shortcut joins cells at most this many rows and columns apart (default 8).
        seed: random seed (default 0).
        scramble: permute node ids with a seeded permutation (default true).
        and the write options of :class:`~shoal.data.synth.common.WriteConfig`.

    Every edge is stored in both directions (an undirected graph); a shortcut may repeat a
    lattice edge (``dedup``), no edge is a self-loop.
    """

    width: int
    height: int
    keep: float = 0.75
    shortcuts: float = 0.05
    reach: int = 8
    seed: int = 0
    scramble: bool = True

    def __post_init__(self) -> None:
        if self.width < 2 or self.height < 2:
            raise ShoalInputError(
                f"width and height must be >= 2, got {self.width} x {self.height}"
            )
        if self.width * self.height > 2**40:
            raise ShoalInputError(f"width * height must be <= 2**40, got {self.nodes}")
        for k in ("keep", "shortcuts"):
            v = getattr(self, k)
            if not 0 <= v <= 1:
                raise ShoalInputError(f"{k} must lie in [0, 1], got {v}")
        check_positive("reach", self.reach)

    @property
    def nodes(self) -> int:
        return self.width * self.height


def road_edge_blocks(cfg: RoadConfig) -> Iterator[np.ndarray]:
    """Yield the road graph's edges (one direction each) as (k, 2) int64 blocks; block ``i``
    holds the edges leaving the cells ``[i * GEN_BLOCK, (i + 1) * GEN_BLOCK)`` (row-major)."""
    w, h, n = cfg.width, cfg.height, cfg.nodes
    perm = None
    if cfg.scramble:
        perm = rng_for(cfg.seed, STREAM_NODES).permutation(n)
    for i, k in block_sizes(n, GEN_BLOCK):
        rng = rng_for(cfg.seed, STREAM_EDGES, i)
        v = np.arange(i * GEN_BLOCK, i * GEN_BLOCK + k, dtype=np.int64)
        row, col = v // w, v % w
        right = v[(col < w - 1) & (rng.random(k) < cfg.keep)]
        down = v[(row < h - 1) & (rng.random(k) < cfg.keep)]
        has = rng.random(k) < cfg.shortcuts
        m = int(has.sum())
        dr = rng.integers(-cfg.reach, cfg.reach + 1, m)
        dc = rng.integers(-cfg.reach, cfg.reach + 1, m)
        tr = np.clip(row[has] + dr, 0, h - 1)
        tc = np.clip(col[has] + dc, 0, w - 1)
        src, dst = v[has], tr * w + tc
        ok = src != dst
        e = np.concatenate(
            [
                np.stack([right, right + 1], axis=1),
                np.stack([down, down + w], axis=1),
                np.stack([src[ok], dst[ok]], axis=1),
            ]
        )
        if perm is not None:
            e = perm[e]
        yield e


def generate_road(
    out: str | os.PathLike, config: RoadConfig, *, show_progress: bool | None = None
) -> GraphDir:
    """Write a road-like graph directory (see the module docstring); returns it opened."""
    cfg = config
    expected = round(cfg.nodes * (2 * cfg.keep + cfg.shortcuts))
    with synth_writer(out, cfg, generator="road", symmetrize=True) as w:
        write_edge_blocks(
            w, road_edge_blocks(cfg), expected, generator="road", show_progress=show_progress
        )
    return GraphDir.open(out)
