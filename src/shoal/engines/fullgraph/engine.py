"""``fullgraph``: full-graph training with DepCache / DepComm / Hybrid dependencies (NeutronStar).

Q. Wang et al., "NeutronStar: Distributed GNN Training with Hybrid Dependency Management"
(SIGMOD 2022), Sections 2.2-4. Every epoch computes every layer for every core node of every
part, exactly (full neighbourhoods; ``fanouts`` only give the number of layers), then takes
one optimizer step on the gradients summed over ranks (Algorithm 1; the loss is the mean over
every training node of the graph, so the step is the single-process full-graph step).

Rank ``i`` owns ``V_i`` (its parts' core nodes) and their in-edges. Its remote in-neighbours
(the halo) are handled per ``--deps`` (:mod:`shoal.engines.fullgraph.deps`):

- ``comm`` (DepComm, Algorithm 3): per layer, their rows are fetched from the owners (one
  packed chunk per peer, master-mirror), and in backward their gradients go back to the owners,
  which sum them (:mod:`shoal.engines.fullgraph.depcomm`);
- ``cache`` (DepCache, Algorithm 2): their subtrees down to the input features are replicated
  here once and computed again every epoch; no representation traffic;
- ``hybrid`` (default): Algorithm 4 splits them per layer by Eq. 1-2 with the costs ``T_v``,
  ``T_e``, ``T_c`` probed on this machine at start-up (or given: ``dep_costs``) under the memory
  limit ``S`` (``dep_memory``); the split and the costs are logged and recorded.

Each layer first posts the exchange of the level's rows (ring order), computes the cached
dependencies' rows while chunks are in flight (``overlap``), then the local nodes' rows.

The weights' gradients of a replicated computation flow back through the replica only (its
owner computes the node for its own consumers), so their sum over ranks is the full-graph
gradient: the tests check it against single-process full-graph training. Dropout is keyed by
(seed, epoch, layer, original node id) (:func:`shoal.nn.base.keyed_dropout`): a replica
draws its owner's mask, so every ``deps`` mode, every number of processes and the
single-process trainer train the same model for a seed, with dropout on (up to the order of
floating-point sums).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn import functional as F

from shoal.distributed.comm import exchange
from shoal.distributed.rankgraph import rank_graph
from shoal.engines.base import Engine
from shoal.engines.fullgraph.config import FullGraphConfig
from shoal.engines.fullgraph.costs import check_fits, memory_bytes
from shoal.engines.fullgraph.depcomm import PullRows, RowExchange
from shoal.engines.fullgraph.deps import (
    Costs,
    DepSets,
    RemoteCSR,
    build_sets,
    fetch_closure,
    split_dependencies,
)
from shoal.engines.fullgraph.probe import block_from_csr, probe_costs
from shoal.graph.blocks import Block
from shoal.nn.base import keyed_dropout, layer_widths
from shoal.rows.budgeted import BudgetedStore
from shoal.training.meter import EpochMeter
from shoal.utils.io import parse_size

__all__ = ["FullGraphEngine"]

log = logging.getLogger(__name__)


class FullGraphEngine(Engine):
    """NeutronStar-style full-graph training (module docstring)."""

    name = "fullgraph"
    batch_activations = False  # its memory_bytes counts every layer of its parts
    options_class = FullGraphConfig
    accepts_factory_models = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg, ctx, store = self.train_config, self.ctx, self.store
        self.model = self.build_model()
        self.require_block_model("runs the model layer by layer")
        if any(f != -1 for f in cfg.sampling.fanouts):
            log.warning(
                "fullgraph uses every neighbour: --fanouts %s only sets %d layers",
                ",".join(map(str, cfg.sampling.fanouts)),
                cfg.num_layers,
            )
        g = rank_graph(self.parts, self.part_to_rank, ctx.rank, store.owner)
        self.graph = g
        self.widths = layer_widths(self.model, int(store.feature_dim))
        s_rows = g.num_solid
        plan = self.plan_memory(
            feature_bytes=s_rows * self.row_bytes, num_rows=max(s_rows, 1), extra_bytes=16 * s_rows
        )
        need = memory_bytes(
            rows=s_rows, row_bytes=self.row_bytes, widths=self.widths, edges=len(g.indices)
        )
        check_fits(
            need,
            plan.pool,
            rank_parts=len(self.parts),
            num_parts=store.num_parts,
            world=ctx.world_size,
        )
        t0 = time.perf_counter()
        self.costs = self._costs()
        self.sets = self._split(plan)
        self.split_seconds = time.perf_counter() - t0
        self._build(plan)
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay
        )
        self.num_batches = 1
        if ctx.is_rank0:
            log.info(
                "fullgraph (%s): rank 0 has %d nodes, %d halo; per layer cached %s, "
                "communicated %s; costs T_v %.3g T_e %.3g T_c %.3g s/dim; split in %.2fs",
                self.options.deps,
                g.num_solid,
                len(g.halo),
                [len(c) for c in self.sets.cached],
                [len(c) for c in self.sets.communicated],
                self.costs.t_v,
                self.costs.t_e,
                self.costs.t_c,
                self.split_seconds,
            )

    # ---------------------------------------------------------------- set-up
    def _local(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, np.int64)
        if not len(ids):
            return np.zeros(0, bool)
        return self.part_to_rank[self.store.owner(ids)] == self.ctx.rank

    def _owner_rank(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, np.int64)
        return self.part_to_rank[self.store.owner(ids)] if len(ids) else np.zeros(0, np.int64)

    def _serve(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """In-degrees and in-neighbours (global ids) of this rank's nodes ``ids``."""
        g = self.graph
        pos = np.searchsorted(g.solid, ids)
        deg = (g.indptr[pos + 1] - g.indptr[pos]).astype(np.int64)
        flat = [g.to_global(g.indices[g.indptr[p] : g.indptr[p + 1]]) for p in pos]
        return deg, (np.concatenate(flat) if flat else np.empty(0, np.int64))

    def _costs(self) -> Costs:
        if self.options.dep_costs is not None:
            return Costs(*self.options.dep_costs)
        if self.options.deps != "hybrid":
            return Costs(0.0, 0.0, 0.0)
        return probe_costs(self.model, self.widths, self.ctx)

    def _split(self, plan) -> DepSets:
        g = self.graph
        depth = 0 if self.options.deps == "comm" else self.model.num_layers - 1
        self.structure = RemoteCSR.empty()
        if depth:
            self.structure = fetch_closure(
                g.halo,
                depth,
                owner_rank=self._owner_rank,
                local_mask=self._local,
                serve=self._serve,
                world=self.ctx.world_size,
                stats=self.stats,
            )
        if self.options.dep_memory is not None:
            limit = float(parse_size(self.options.dep_memory))
        else:  # what the features' share of the budget leaves after this rank's own rows
            own = g.num_solid * 4 * (self.widths[0] + 2 * sum(self.widths[1:]))
            limit = float(max(plan.cache + 2 * plan.window - own, 0))
        self.memory_limit = limit
        local_set = set(g.solid.tolist())
        cached, have, self.replicated_bytes = split_dependencies(
            g.halo,
            self.structure,
            self.widths,
            self.costs,
            is_local=local_set.__contains__,
            memory_limit=limit,
            mode=self.options.deps,
        )
        return build_sets(g.halo, cached, have)

    def _build(self, plan) -> None:
        """Features, exchanges and blocks of every layer."""
        cfg, g, ctx, sets = self.train_config, self.graph, self.ctx, self.sets
        dim = int(self.store.feature_dim)
        arrays = [p.features for p in self.parts] or [np.empty((0, dim), np.float32)]
        self.features = BudgetedStore(  # rows read when needed: a cache, no windows
            arrays,
            plan,
            threads=cfg.memory.io_threads,
            normalize=cfg.model.normalize_features,
            show_progress=False,
            read_ahead=False,
        ).features
        # level 0 never changes: [local rows; replicated rows] in one buffer, read once
        self.x0 = torch.empty((g.num_solid + len(sets.rep[0]), dim), dtype=torch.float32)
        self._read_rows(np.arange(g.num_solid), out=self.x0[: g.num_solid])
        self._remote_features(sets.rep[0], out=self.x0[g.num_solid :])
        # the mirrors of each level in (owner rank, id) order, and what each peer mirrors here
        self.exchanges, self.com_order = [], []
        for k in range(self.model.num_layers):
            com = sets.com[k]
            owners = self._owner_rank(com)
            order = np.lexsort((com, owners)) if len(com) else np.zeros(0, np.int64)
            com = com[order]
            self.com_order.append(com)
            counts = np.bincount(owners[order], minlength=ctx.world_size).astype(np.int64)
            asked, asked_counts = exchange(com, counts, self.stats)
            pos = np.searchsorted(g.solid, asked.numpy())
            off = np.concatenate([[0], np.cumsum(asked_counts)])
            send_idx = [pos[off[r] : off[r + 1]] for r in range(ctx.world_size)]
            self.exchanges.append(
                RowExchange(
                    send_idx,
                    counts.tolist(),
                    rank=ctx.rank,
                    world=ctx.world_size,
                    tag=k,
                    ring=self.options.ring,
                    stats=self.stats,
                )
            )
        self.rep_local: list[torch.Tensor] = [torch.zeros(0, dtype=torch.int64)] * len(sets.rep)
        self.blocks = [self._layer_blocks(k) for k in range(self.model.num_layers)]
        train = np.asarray(self.tables.train[g.solid]) if g.num_solid else np.zeros(0, bool)
        self.train_pos = torch.from_numpy(np.flatnonzero(train))
        self.y = torch.from_numpy(self.tables.labels[g.solid[train]].astype(np.int64))
        n = torch.tensor([len(self.train_pos)], dtype=torch.float64)
        if ctx.world_size > 1:
            dist.all_reduce(n)
        self.num_train = max(float(n.item()), 1.0)
        dev = self.device  # the part's inputs and blocks live where the model computes
        self.x0 = self.x0.to(dev)
        self.blocks = [(r.to(dev) if r is not None else None, b.to(dev)) for r, b in self.blocks]
        self.rep_local = [t.to(dev) for t in self.rep_local]
        self.train_pos, self.y = self.train_pos.to(dev), self.y.to(dev)

    def _read_rows(
        self, pos: np.ndarray, chunk: int = 1 << 16, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """This rank's feature rows at positions ``pos`` (into ``out`` if given), read ``chunk``
        rows at a time (the reader's buffer is reused by every call: the rows are copied out)."""
        if out is None:
            out = torch.empty((len(pos), self.widths[0]), dtype=torch.float32)
        for i in range(0, len(pos), chunk):
            out[i : i + chunk] = self.features.gather(pos[i : i + chunk])
        return out

    def _remote_features(self, ids: np.ndarray, out: torch.Tensor) -> torch.Tensor:
        """Feature rows of remote ``ids`` into ``out``, from their owners (once; collective)."""
        ctx, g = self.ctx, self.graph
        owners = self._owner_rank(ids)
        order = np.argsort(owners, kind="stable")
        counts = np.bincount(owners, minlength=ctx.world_size).astype(np.int64)
        asked, asked_counts = exchange(np.asarray(ids, np.int64)[order], counts, self.stats)
        pos = np.searchsorted(g.solid, asked.numpy())
        got, _ = exchange(self._read_rows(pos), asked_counts, self.stats)
        out[torch.from_numpy(order)] = got
        return out

    def _layer_blocks(self, k: int) -> tuple[Block | None, Block]:
        """Layer ``k`` (level ``k`` -> ``k+1``): the block of the replicated targets (sources:
        ``rep[k]``, then the local nodes its edges use, at positions ``self.rep_local[k]``)
        and that of the local targets (sources: local nodes, ``rep[k]``, the mirrors)."""
        g, sets, deg = self.graph, self.sets, self.tables.degrees
        s, rep, com = g.num_solid, self.sets.rep[k], self.com_order[k]
        # local targets: halo sources become a replica or a mirror
        halo_pos = np.full(len(g.halo), -1, np.int64)
        in_rep = np.isin(g.halo, rep)
        halo_pos[in_rep] = s + _positions(rep, g.halo[in_rep])
        halo_pos[~in_rep] = s + len(rep) + _positions(com, g.halo[~in_rep])
        src = np.array(g.indices, dtype=np.int64)
        remote = src >= s
        src[remote] = halo_pos[src[remote] - s]
        ids = np.concatenate([g.solid, rep, com])
        local = block_from_csr(g.indptr, src, len(ids), deg[ids] if len(ids) else np.zeros(0))
        local = replace(local, node_ids=self.store.to_orig(ids))  # keyed dropout
        top = sets.rep[k + 1]
        if not len(top):
            return None, local
        nbrs = [self.structure.neighbours(np.array([w], np.int64)) for w in top.tolist()]
        rowptr = np.concatenate([[0], np.cumsum([len(x) for x in nbrs])]).astype(np.int64)
        flat = np.concatenate(nbrs).astype(np.int64) if nbrs else np.empty(0, np.int64)
        mine = self._local(flat)
        rsrc = np.empty(len(flat), np.int64)
        rsrc[~mine] = _positions(rep, flat[~mine])
        used, inv = np.unique(np.searchsorted(g.solid, flat[mine]), return_inverse=True)
        rsrc[mine] = len(rep) + inv
        self.rep_local[k] = torch.from_numpy(used)
        rids = np.concatenate([rep, g.solid[used]])
        rblk = block_from_csr(rowptr, rsrc, len(rids), deg[rids])
        return replace(rblk, node_ids=self.store.to_orig(rids)), local

    # ---------------------------------------------------------------- training
    def forward(self, timer: dict[str, float] | None = None) -> torch.Tensor:
        """Every layer for the local nodes (and the replicas); the local nodes' logits."""
        timer = timer if timer is not None else {}
        s = self.graph.num_solid
        h, h_rep = self.x0[:s], self.x0[s:]
        for k, (rep_blk, blk) in enumerate(self.blocks):
            ex = self.exchanges[k]
            if self.options.overlap:
                ex.start(h)
            t0 = time.perf_counter()
            nxt = None
            if rep_blk is not None:  # sources: the replicas, then the local rows it uses
                src = torch.cat([h_rep, h.index_select(0, self.rep_local[k])])
                nxt = self.model.layer_forward(k, src, rep_blk)
            timer["cached_compute"] = timer.get("cached_compute", 0.0) + time.perf_counter() - t0
            if not self.options.overlap:
                ex.start(h)
            t0 = time.perf_counter()
            mirrors = PullRows.apply(h, ex)
            timer["communication"] = timer.get("communication", 0.0) + time.perf_counter() - t0
            t0 = time.perf_counter()
            both = self.x0 if k == 0 else torch.cat([h, h_rep])
            h = self.model.layer_forward(
                k, torch.cat([both, mirrors]) if len(mirrors) else both, blk
            )
            timer["local_compute"] = timer.get("local_compute", 0.0) + time.perf_counter() - t0
            h_rep = nxt if nxt is not None else h[:0]
        return h

    def loss(self, logits: torch.Tensor) -> torch.Tensor:
        """The sum of this rank's training losses over every rank's training nodes."""
        out = logits[self.train_pos]
        return F.cross_entropy(out, self.y, reduction="sum") / self.num_train

    def eval_work_ratio(self) -> float:
        """An epoch is one full-graph forward and backward pass (about 3 forward passes over
        every edge), an evaluation one forward pass: 1/3."""
        return 1.0 / 3.0

    def train_epoch(self, epoch: int) -> dict[str, Any]:
        self.stats.reset()
        for ex in self.exchanges:
            ex.seconds = 0.0
        meter = EpochMeter(  # one step: full-graph training
            epoch,
            1,
            enable=False,
            phases=("cached_compute", "local_compute", "communication", "backward", "allreduce"),
        )
        timer = meter.phases
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        with keyed_dropout(self.model, self.train_config.run.seed, epoch):
            logits = self.forward(timer)
        loss = self.loss(logits)
        t0 = time.perf_counter()
        fwd_wait = sum(ex.seconds for ex in self.exchanges)
        loss.backward()
        back_wait = sum(ex.seconds for ex in self.exchanges) - fwd_wait
        timer["backward"] = time.perf_counter() - t0 - back_wait
        timer["communication"] += back_wait
        with meter.time("allreduce"):
            # summed, not averaged: the loss is already divided by every rank's training nodes
            self.all_reduce_gradients(average=False)
        self.optimizer.step()
        with torch.no_grad():
            out = logits[self.train_pos]
            correct = int((out.argmax(1) == self.y).sum())
        # summed over ranks in the record
        meter.step_sums(float(loss.detach()) * self.num_train, correct, len(self.train_pos))
        return self.epoch_record(**meter.close())

    def close_io(self) -> None:
        self.features.close()

    def settings(self) -> dict[str, Any]:
        s = self.sets
        return {
            "deps": self.options.deps,
            "ring": self.options.ring,
            "overlap": self.options.overlap,
            "dep_costs_probed": [self.costs.t_v, self.costs.t_e, self.costs.t_c],
            "dep_memory_limit": self.memory_limit,
            "replicated_bytes_rank0": self.replicated_bytes,
            "cached_per_layer_rank0": [len(c) for c in s.cached],
            "communicated_per_layer_rank0": [len(c) for c in s.communicated],
            "replicated_per_level_rank0": [len(r) for r in s.rep],
            "split_seconds": self.split_seconds,
        }


def _positions(sorted_ids: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Positions of ``ids`` in ``sorted_ids`` (sorted ascending unless it is a ``rep`` list,
    whose order is arbitrary: looked up through a sort)."""
    if not len(ids):
        return np.empty(0, np.int64)
    order = np.argsort(sorted_ids, kind="stable")
    p = np.searchsorted(sorted_ids[order], ids)
    return order[p].astype(np.int64)
