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


class NodeTables:
    """``O(V)`` per-node arrays every rank needs, built by one all-reduce over owned parts.

    Attributes: ``degrees`` float32 full in-degrees; ``labels`` int32 (-1 unlabelled; half the
    memory of int64, which a loss needs only for a batch's seeds); ``train`` bool training mask.
    """

    def __init__(self, store: Store, parts: list[Partition]) -> None:
        n = store.num_nodes
        t = torch.zeros((3, n), dtype=torch.float64)
        for part in parts:
            sl = slice(part.start, part.stop)
            t[0, sl] = torch.from_numpy(np.diff(np.asarray(part.indptr)).astype(np.float64))
            if part.labels is not None:
                t[1, sl] = torch.from_numpy(np.asarray(part.labels, dtype=np.float64) + 1.0)
            t[2, sl] = torch.from_numpy(np.asarray(part.train_mask, dtype=np.float64))
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(t)
        a = t.numpy()
        self.degrees = a[0].astype(np.float32)
        self.labels = a[1].astype(np.int32) - 1
        self.train = a[2] > 0.5
