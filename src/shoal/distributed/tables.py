"""Which parts a rank holds, and the ``O(V)`` per-node tables every rank needs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from shoal.errors import ShoalInputError
from shoal.store.reader import Partition, Store
from shoal.utils.io import read_json

__all__ = ["NodeTables", "parts_of_rank"]


def parts_of_rank(num_parts: int, world_size: int, plan: str | None = None) -> np.ndarray:
    """``(p,)`` rank holding each part: the plan's ``worker_of_part`` (``shoal plan`` JSON) or,
    without a plan, SDT-GNN's cyclic rule (part ``j`` -> rank ``j mod N``)."""
    if plan is None:
        if num_parts < world_size:
            raise ShoalInputError(
                f"the store has {num_parts} parts but {world_size} processes were started",
                fix=f"use --nproc {num_parts} or fewer, or build a store with more parts",
            )
        return np.arange(num_parts, dtype=np.int64) % world_size
    meta = read_json(Path(plan))
    try:
        wop = np.asarray(meta["worker_of_part"], dtype=np.int64)
        workers = int(meta["workers"])
    except (KeyError, TypeError, ValueError):
        raise ShoalInputError(
            "plan: field 'worker_of_part' or 'workers' is missing",
            path=plan,
            fix="write the plan with `shoal plan --store STORE --workers N --json FILE`",
        ) from None
    if wop.shape != (num_parts,):
        raise ShoalInputError(
            f"plan: worker_of_part has {wop.shape[0]} entries, the store has {num_parts} parts",
            path=plan,
            fix="make the plan from this store",
        )
    if workers != world_size:
        raise ShoalInputError(
            f"plan: made for {workers} workers, but {world_size} processes were started",
            path=plan,
            fix=f"use --nproc {workers}",
        )
    return wop


#: nodes per all-reduce when the tables are built: 24 MB of int64 at a time, whatever N
TABLE_CHUNK = 1 << 20


class NodeTables:
    """``O(V)`` per-node arrays every rank needs, built by all-reducing the owned parts'
    values in chunks of :data:`TABLE_CHUNK` nodes (each node is owned by one rank, the others
    add zeros), so that building them holds the 9 bytes per node they keep and one chunk, not
    three float64 arrays over all nodes.

    Attributes: ``degrees`` float32 full in-degrees; ``labels`` int32 (-1 unlabelled; half the
    memory of int64, which a loss needs only for a batch's seeds); ``train`` bool training mask.
    """

    def __init__(self, store: Store, parts: list[Partition]) -> None:
        n = store.num_nodes
        self.degrees = np.zeros(n, np.float32)
        self.labels = np.full(n, -1, np.int32)
        self.train = np.zeros(n, np.bool_)
        for part in parts:
            sl = slice(part.start, part.stop)
            self.degrees[sl] = np.diff(np.asarray(part.indptr))
            if part.labels is not None:
                self.labels[sl] = np.asarray(part.labels)
            self.train[sl] = np.asarray(part.train_mask)
        if not (dist.is_initialized() and dist.get_world_size() > 1):
            return
        for a in range(0, n, TABLE_CHUNK):
            b = min(a + TABLE_CHUNK, n)
            t = torch.empty((3, b - a), dtype=torch.int64)
            t[0] = torch.from_numpy(self.degrees[a:b].astype(np.int64))
            t[1] = torch.from_numpy(self.labels[a:b].astype(np.int64) + 1)  # 0: not owned
            t[2] = torch.from_numpy(self.train[a:b].astype(np.int64))
            dist.all_reduce(t)
            self.degrees[a:b] = t[0].numpy()
            self.labels[a:b] = t[1].numpy() - 1
            self.train[a:b] = t[2].numpy() > 0
