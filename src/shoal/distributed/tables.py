"""Which parts a rank holds, and the per-node tables a rank needs (over all nodes, or over its
own and halo nodes only)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from shoal.distributed.comm import exchange
from shoal.distributed.feature_store import owner_of
from shoal.errors import ShoalInputError
from shoal.store.reader import Partition, Store
from shoal.utils.arrays import union_sorted, unique_sorted
from shoal.utils.io import read_json
from shoal.utils.memory import trim_freed_memory

__all__ = ["SCOPES", "LocalIndex", "NodeTables", "NodeValues", "parts_of_rank"]


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

#: the scopes of :class:`NodeTables`
SCOPES = ("global", "local")


def _own_values(parts: list[Partition], size: int, at) -> tuple[np.ndarray, ...]:
    """``(degrees, labels, train)`` over ``size`` nodes (0, -1, False where unset) with the
    values of ``parts``' core nodes, part ``p``'s from position ``at(p)``."""
    deg, lab, tr = np.zeros(size, np.float32), np.full(size, -1, np.int32), np.zeros(size, bool)
    for p in parts:
        if not p.num_core:
            continue
        sl = slice(at(p), at(p) + p.num_core)
        deg[sl] = np.diff(np.asarray(p.indptr))
        if p.labels is not None:
            lab[sl] = np.asarray(p.labels)
        tr[sl] = np.asarray(p.train_mask)
    return deg, lab, tr


class LocalIndex:
    """Positions of global node ids among a rank's nodes: the id ranges of its parts' core
    nodes (the store numbers each part's core nodes contiguously), then ``extra`` (sorted
    ids outside those ranges: the parts' halo nodes). Memory: 8 bytes per extra id and a few
    per part, nothing per global node."""

    def __init__(self, ranges: list[tuple[int, int]], extra: np.ndarray) -> None:
        ranges = sorted((int(a), int(b)) for a, b in ranges if b > a)
        self.starts = np.array([a for a, _ in ranges], np.int64)
        self.stops = np.array([b for _, b in ranges], np.int64)
        lens = self.stops - self.starts
        self.offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        self.num_owned = int(self.offsets[-1])
        self.extra = np.asarray(extra, np.int64)
        self.size = self.num_owned + len(self.extra)

    def _ranges(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(range of each id, whether it lies in that range)`` for the 1-d int64 ``ids``."""
        k = np.searchsorted(self.starts, ids, side="right") - 1
        inr = k >= 0
        inr[inr] = ids[inr] < self.stops[k[inr]]
        return k, inr

    def owned(self, ids: np.ndarray) -> np.ndarray:
        """Whether each id lies in one of the ranges."""
        return self._ranges(np.asarray(ids, np.int64))[1]

    def find(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(positions, found)`` of the 1-d ``ids``: positions where found (others 0)."""
        flat = np.asarray(ids, np.int64)
        k, inr = self._ranges(flat)
        pos = np.zeros(len(flat), np.int64)
        pos[inr] = self.offsets[k[inr]] + flat[inr] - self.starts[k[inr]]
        found = inr.copy()
        rest = np.flatnonzero(~inr)
        if len(rest) and len(self.extra):
            j = np.searchsorted(self.extra, flat[rest])
            hit = j < len(self.extra)
            hit[hit] = self.extra[j[hit]] == flat[rest[hit]]
            pos[rest[hit]] = self.num_owned + j[hit]
            found[rest[hit]] = True
        return pos, found

    def positions(self, ids) -> np.ndarray:
        """int64 positions of ``ids`` (array-like or int); KeyError for an id not held."""
        ids = np.asarray(ids, np.int64)
        pos, found = self.find(ids.reshape(-1))
        if not found.all():
            bad = int(ids.reshape(-1)[~found][0])
            raise KeyError(f"node {bad} is neither owned by this rank nor in its halo")
        return pos.reshape(ids.shape)


class NodeValues:
    """One per-node table over a :class:`LocalIndex`: ``values[ids]`` by global ids, as the
    dense array over all nodes would answer for the ids this rank holds."""

    def __init__(self, index: LocalIndex, values: np.ndarray) -> None:
        self.index = index
        self.values = values
        self.dtype = values.dtype

    def __getitem__(self, ids) -> np.ndarray:
        return self.values[self.index.positions(ids)]

    @property
    def nbytes(self) -> int:
        return int(self.values.nbytes)


class _Released:
    """Stands for a released per-node table (:meth:`NodeTables.release`): any read raises."""

    nbytes = 0

    def __init__(self, why: str) -> None:
        self.why = why

    def __getitem__(self, ids):
        raise RuntimeError(f"the per-node tables were released ({self.why}); nothing may read them")


class NodeTables:
    """Per-node arrays of a rank: ``degrees`` float32 full in-degrees; ``labels`` int32 (-1
    unlabelled; half the memory of int64, which a loss needs only for a batch's seeds);
    ``train`` bool training mask; ``num_train`` the global number of training nodes.

    ``scope="global"`` (default; engines that sample across ranks: their frontiers reach any
    node): dense arrays over all ``N`` nodes, built by all-reducing the owned parts' values
    in chunks of :data:`TABLE_CHUNK` nodes (each node is owned by one rank, the others add
    zeros), so building them holds the 9 bytes per node they keep and one chunk.

    ``scope="local"`` (engines that train on their parts and halos: averaging, hec): tables
    over the rank's own nodes and its parts' halo nodes only (:class:`NodeValues` looked up
    by global id through a :class:`LocalIndex`), the halo's values asked of their owners in
    one exchange (collective; ``part_to_rank`` needed). Memory: 9 bytes per own node and 17
    per halo node, whatever ``N``; :meth:`hold` adds other nodes (a rank's seeds owned
    elsewhere), and a distributed sampler asks owners for the degrees of the rest
    (:class:`~shoal.distributed.DistNeighborSampler`).
    """

    def __init__(
        self,
        store: Store,
        parts: list[Partition],
        *,
        part_to_rank: np.ndarray | None = None,
        scope: str = "global",
    ) -> None:
        if scope not in SCOPES:
            raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
        self.store, self.parts, self.scope = store, parts, scope
        self.num_nodes = int(store.num_nodes)
        distributed = dist.is_initialized() and dist.get_world_size() > 1
        if scope == "global":
            self.degrees, self.labels, self.train = self._dense(store, parts, distributed)
            self.num_train = int(self.train.sum())
            return
        self._local(parts, part_to_rank, distributed)
        t = torch.tensor([int(sum(np.count_nonzero(p.train_mask) for p in parts))])
        if distributed:
            dist.all_reduce(t)
        self.num_train = int(t.item())

    @staticmethod
    def _dense(store: Store, parts: list[Partition], distributed: bool):
        n = store.num_nodes
        degrees, labels, train = _own_values(parts, n, lambda p: p.start)
        if not distributed:
            return degrees, labels, train
        for a in range(0, n, TABLE_CHUNK):
            b = min(a + TABLE_CHUNK, n)
            t = torch.empty((3, b - a), dtype=torch.int64)
            t[0] = torch.from_numpy(degrees[a:b].astype(np.int64))
            t[1] = torch.from_numpy(labels[a:b].astype(np.int64) + 1)  # 0: not owned
            t[2] = torch.from_numpy(train[a:b].astype(np.int64))
            dist.all_reduce(t)
            degrees[a:b] = t[0].numpy()
            labels[a:b] = t[1].numpy() - 1
            train[a:b] = t[2].numpy() > 0
        return degrees, labels, train

    def _local(self, parts: list[Partition], part_to_rank, distributed: bool) -> None:
        ranges = [(p.start, p.stop) for p in parts]
        own = LocalIndex(ranges, np.empty(0, np.int64))
        halo = [np.asarray(p.halo_ids, np.int64) for p in parts if p.num_halo]
        extra = unique_sorted(np.concatenate(halo)) if halo else np.empty(0, np.int64)
        extra = extra[~own.owned(extra)]
        index = LocalIndex(ranges, extra)
        deg, lab, tr = _own_values(
            parts, index.size, lambda p: int(index.positions(np.array([p.start]))[0])
        )
        if len(extra) and not distributed:
            raise ValueError(
                "local node tables of a subset of the parts need a process group to ask the "
                "halo nodes' owners"
            )
        if distributed:  # every rank takes part, even one with no halo
            if part_to_rank is None:
                raise ValueError("local node tables need part_to_rank to find the halo's owners")
            vals = self._ask_owners(extra, np.asarray(part_to_rank), own, (deg, lab, tr))
            self.part_to_rank = np.asarray(part_to_rank)
            o = index.num_owned
            deg[o:], lab[o:], tr[o:] = vals
            del vals
        self.index = index
        self.degrees = NodeValues(index, deg)
        self.labels = NodeValues(index, lab)
        self.train = NodeValues(index, tr)
        del halo, extra, own
        trim_freed_memory()  # the temporaries' heap pages back to the system

    def train_ids_by_rank(self, part_to_rank: np.ndarray) -> list[np.ndarray]:
        """The sorted global training node ids each rank owns (collective under the local
        scope: an all-gather of ``O(training nodes)``)."""
        world = dist.get_world_size() if dist.is_initialized() else 1
        if self.scope == "global":
            ids = np.flatnonzero(self.train).astype(np.int64)
            owner = part_to_rank[owner_of(self.store.part_offsets, ids)] if ids.size else ids
            return [ids[owner == r] for r in range(world)]
        own = [np.flatnonzero(np.asarray(p.train_mask)) + p.start for p in self.parts]
        mine = np.sort(np.concatenate(own)).astype(np.int64) if own else np.empty(0, np.int64)
        if world == 1:
            return [mine]
        sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
        dist.all_gather(sizes, torch.tensor([len(mine)], dtype=torch.int64))
        longest = max(int(t.item()) for t in sizes)
        buf = torch.full((longest,), -1, dtype=torch.int64)
        buf[: len(mine)] = torch.from_numpy(mine)
        got = [torch.empty(longest, dtype=torch.int64) for _ in range(world)]
        dist.all_gather(got, buf)
        return [g[: int(t.item())].numpy() for g, t in zip(got, sizes, strict=True)]

    def hold(self, ids: np.ndarray) -> None:
        """Hold the values of ``ids`` too (the local scope; a no-op under the global one),
        asked of their owners. Collective under the local scope (every rank calls, maybe
        with nothing new)."""
        if self.scope == "global":
            return
        ids = unique_sorted(np.asarray(ids, np.int64))
        _, found = self.index.find(ids)
        new = ids[~found]
        distributed = dist.is_initialized() and dist.get_world_size() > 1
        if not distributed:
            if len(new):
                raise KeyError(f"node {int(new[0])} is not held and there is no process group")
            return
        values = (self.degrees.values, self.labels.values, self.train.values)
        vals = self._ask_owners(new, self.part_to_rank, self.index, values)
        old = self.index
        extra = union_sorted(old.extra, new)
        index = LocalIndex(list(zip(old.starts, old.stops, strict=True)), extra)
        at_old = index.positions(old.extra)
        at_new = index.positions(new)
        o = old.num_owned
        for table, got in zip((self.degrees, self.labels, self.train), vals, strict=True):
            v = np.empty(index.size, table.values.dtype)
            v[:o] = table.values[:o]
            v[at_old] = table.values[o:]
            v[at_new] = got
            table.values, table.index = v, index
        self.index = index
        del old, at_old, at_new, vals
        trim_freed_memory()  # the old tables' heap pages back to the system

    def _ask_owners(self, ids, part_to_rank, own: LocalIndex, values) -> tuple[np.ndarray, ...]:
        """``(degrees float32, labels int32, train bool)`` of ``ids`` (none owned here) from
        their owners' ``values`` (over ``own``, whose first positions are the owned nodes),
        in rounds of :data:`TABLE_CHUNK` ids (collective: every rank runs as many rounds),
        so the exchanges hold a chunk's ids and answers at a time, not the halo's (a quarter
        of papers100M in two parts has 14M halo nodes per rank: 0.7 GB of int64 answers)."""
        n = len(ids)
        deg = np.empty(n, np.float32)
        lab = np.empty(n, np.int32)
        tr = np.empty(n, np.bool_)
        rounds = torch.tensor([-(-n // TABLE_CHUNK)], dtype=torch.int64)
        dist.all_reduce(rounds, op=dist.ReduceOp.MAX)
        for r in range(int(rounds.item())):
            a, b = min(r * TABLE_CHUNK, n), min((r + 1) * TABLE_CHUNK, n)
            got = self._ask_round(ids[a:b], part_to_rank, own, values)
            deg[a:b], lab[a:b], tr[a:b] = got[:, 0], got[:, 1] - 1, got[:, 2] > 0
        return deg, lab, tr

    def _ask_round(self, ids, part_to_rank, own: LocalIndex, values) -> np.ndarray:
        """``(len(ids), 3)`` int64 (degree, label + 1, train) of ``ids``: one exchange of
        ids, one of values (collective)."""
        world = dist.get_world_size()
        owners = part_to_rank[owner_of(self.store.part_offsets, ids)] if len(ids) else ids
        order = np.argsort(owners, kind="stable")
        counts = np.bincount(owners, minlength=world).astype(np.int64)
        got, got_counts = exchange(ids[order], counts)
        asked = got.numpy()
        pos = own.positions(asked)
        deg, lab, tr = values
        answer = np.stack(
            [deg[pos].astype(np.int64), lab[pos].astype(np.int64) + 1, tr[pos].astype(np.int64)],
            axis=1,
        ).reshape(-1, 3)
        back, _ = exchange(answer, got_counts)
        out = np.empty((len(ids), 3), np.int64)
        out[order] = back.numpy().reshape(-1, 3)
        return out

    def release(self, why: str) -> int:
        """Drop the per-node arrays (``degrees``, ``labels``, ``train``; ``num_train`` stays)
        when nothing will read them again (``why`` says what released them); reading one
        afterwards raises a RuntimeError naming ``why``. Returns the bytes they held."""
        held = self.nbytes
        self.degrees = self.labels = self.train = _Released(why)
        return held

    @property
    def nbytes(self) -> int:
        """Bytes the tables hold (their index included)."""
        n = sum(int(t.nbytes) for t in (self.degrees, self.labels, self.train))
        if self.scope == "local" and not isinstance(self.degrees, _Released):
            n += int(self.index.extra.nbytes)
        return n
