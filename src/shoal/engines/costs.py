"""What every engine's cost estimate for ``--engine auto`` starts from (:class:`CostInputs`)
and the shared pieces of the estimates: network time, all-reduces, one batch's gather.

Each engine's own estimate lives in its folder (``shoal.engines.<name>.costs``: an
``estimate(x: CostInputs) -> dict | None`` of seconds per phase with ``epoch_s`` their total,
and an ``excluded(x) -> str | None`` saying why it cannot run), registered with the engine
(:class:`~shoal.engines.spec.EngineSpec`); :mod:`shoal.engines.autoplan` compares them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from shoal.engines.probe import MachineCosts
from shoal.store.reader import Store
from shoal.training import TrainConfig
from shoal.utils.featdtype import feature_dtype

__all__ = [
    "CACHE_SHARE",
    "CostInputs",
    "allreduce_seconds",
    "net_seconds",
    "split",
    "store_bytes",
]

#: share of a worker's memory its feature cache may take (the rest: structure, windows, model)
CACHE_SHARE = 0.5


def net_seconds(nbytes: float, messages: float, c: MachineCosts) -> float:
    """``nbytes`` in ``messages`` messages at the probed bandwidth and latency."""
    return nbytes / c.net_bytes_per_s + messages * c.net_latency_s


def allreduce_seconds(params: int, n: int, c: MachineCosts) -> float:
    """One all-reduce of ``params`` floats over ``n`` ranks: probed when the probe ran with
    ``n`` ranks, else a ring's ``2 P (n-1)/n`` floats."""
    if n <= 1:
        return 0.0
    if c.allreduce_s is not None and c.ranks == n:
        return c.allreduce_s
    return net_seconds(2 * 4 * params * (n - 1) / n, 2 * (n - 1), c)


def split(steps: float, **parts: float) -> dict[str, float]:
    """``steps`` times each phase's seconds, and their total ``epoch_s``."""
    out = {k: steps * v for k, v in parts.items()}
    out["epoch_s"] = sum(out.values())
    return out


def store_bytes(store: Store) -> int:
    """The store's feature rows and neighbour lists (what the disagg engine's batch workers
    read once per epoch, every part resident in turn)."""
    row = feature_dtype(store.meta.get("feature_dtype")).row_bytes(int(store.feature_dim or 0))
    edge = np.dtype(store.meta.get("edge_dtype") or "int64").itemsize
    return store.num_nodes * (row if store.feature_dim else 0) + store.num_edges * edge


@dataclass(kw_only=True)
class CostInputs:
    """One estimate's inputs: the store, the run's config, the probed costs, ``workers``
    ranks, the model's parameters and layer widths, and the memory of one worker (None:
    rows always gathered with direct reads); the derived quantities every engine uses are
    properties."""

    store: Store
    config: TrainConfig
    costs: MachineCosts
    workers: int
    params: int
    widths: list[int]
    memory_per_worker: int | None = None

    def gather(self, *, halo: bool) -> float:
        """One batch's gather: from memory when the rank's rows (its core nodes', with
        ``halo`` its halo's too) fit in :data:`CACHE_SHARE` of the worker's memory, else
        with direct reads."""
        c, n, memory = self.costs, self.workers, self.memory_per_worker
        if memory is None:
            return c.gather_s
        parts = self.store.meta["parts"]
        rows = max(
            sum(
                p["num_core"] + (p["num_halo"] if halo else 0)
                for j, p in enumerate(parts)
                if j % n == r
            )
            for r in range(n)
        )
        fits = rows * int(self.store.feature_dim or 1) * 4 <= CACHE_SHARE * memory
        return c.gather_mem_s if fits else c.gather_s

    @cached_property
    def train_nodes(self) -> int:
        return sum(int(p.get("train", 0)) for p in self.store.meta["parts"]) or self.store.num_nodes

    @property
    def steps(self) -> int:
        """Optimizer steps of one epoch of synchronous mini-batches on every rank."""
        return math.ceil(self.train_nodes / (self.config.sampling.batch_size * self.workers))

    @property
    def row_bytes(self) -> int:
        return int(self.store.feature_dim or 1) * 4

    @property
    def remote(self) -> float:
        """1 when several ranks share the parts (rows are remote), else 0."""
        return 1.0 if self.workers > 1 else 0.0

    @property
    def hidden(self) -> int:
        """The first hidden layer's width (the input width for a one-layer model)."""
        return self.widths[1] if len(self.widths) > 2 else self.row_bytes // 4

    @property
    def remote_scale(self) -> float:
        """How much larger a batch grows when the owners expand the halo nodes too."""
        return self.costs.remote_scale if self.workers > 1 else 1.0

    def allreduce(self, n: int | None = None) -> float:
        """One all-reduce of the model over ``n`` ranks (default: every worker)."""
        return allreduce_seconds(self.params, self.workers if n is None else n, self.costs)
