"""``fullgraph``: full-graph training with DepCache / DepComm / Hybrid dependencies (NeutronStar).

Q. Wang et al., "NeutronStar: Distributed GNN Training with Hybrid Dependency Management"
(SIGMOD 2022), Sections 2.2-4. Every epoch computes every layer for every core node of every
part with full neighbourhoods (``fanouts`` only give the number of layers), then takes one
optimizer step on the gradients summed over ranks (Algorithm 1; the loss is the mean over every
training node of the graph: the single-process full-graph step). A rank's remote
in-neighbours are handled per ``--deps`` (:mod:`shoal.engines.fullgraph.deps`): ``comm``
(DepComm, Algorithm 3: fetched every layer, their gradients summed by the owners,
:mod:`shoal.engines.fullgraph.depcomm`), ``cache`` (DepCache, Algorithm 2: subtrees replicated
once, recomputed every epoch) or ``hybrid`` (default: Algorithm 4's split by Eq. 1-2, with
``T_v``, ``T_e``, ``T_c`` probed at start-up or given, ``dep_costs``, under the memory limit
``S``, ``dep_memory``). Each layer exchanges its level's rows in ring time slots (``ring``;
Sec. 4.3, Figure 8) and, with ``overlap``, computes while they are in flight
(:meth:`FullGraphEngine.forward`, :meth:`FullGraphEngine.backward`). Every rank posts every
slot of every level's exchange, rows or not, so every send has its receive (issue 37).

A replicated computation's weight gradients flow back through the replica only (its owner
computes the node for its own consumers), so their sum over ranks is the full-graph gradient;
dropout is keyed by (seed, epoch, layer, original node id)
(:func:`shoal.nn.base.keyed_dropout`), so every mode and number of processes trains the
single-process model. A typed store trains the relational models on every type's rows padded
to the widest (:func:`~shoal.rows.parts.part_rows`). The link task is trained full-batch, as
Kipf and Welling's graph auto-encoder is: the same epoch (Sec. 3-4), one step over every
positive inside the rank's parts (:meth:`FullGraphEngine.link_step`,
:meth:`FullGraphEngine.link_loss`; ``link_scope = "part"``), the positives kept in message
passing. The rest: docs/distributed.md#fullgraph-neutronstar and
docs/linkpred.md#across-processes-every-engine.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn import functional as F

from shoal.distributed.comm import exchange
from shoal.distributed.rankgraph import rank_graph
from shoal.engines.base import Engine
from shoal.engines.fullgraph.costs import check_fits, memory_bytes
from shoal.engines.fullgraph.depcomm import RowExchange, Transfer
from shoal.engines.fullgraph.deps import (
    Costs,
    DepSets,
    RemoteCSR,
    build_sets,
    fetch_closure,
    split_dependencies,
)
from shoal.engines.fullgraph.probe import block_from_csr, probe_costs
from shoal.engines.linktask import LinkStep
from shoal.graph.blocks import Block
from shoal.nn.base import keyed_dropout, layer_widths
from shoal.training import batch_seed
from shoal.training.meter import EpochMeter
from shoal.utils.arrays import setdiff_sorted
from shoal.utils.io import parse_size

__all__ = ["FullGraphEngine"]

log = logging.getLogger(__name__)


class FullGraphEngine(Engine):
    """NeutronStar-style full-graph training (module docstring)."""

    name = "fullgraph"
    batch_activations = False  # its memory_bytes counts every layer of its parts
    link_scope = "part"  # it computes its own parts' core nodes only

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
        self.typed = store.schema is not None
        # a typed store's graph carries every entry's relation and every local node's type
        g = rank_graph(self.parts, self.part_to_rank, ctx.rank, store.owner, store)
        self.graph = g
        # a typed store: the relation of a (source type, destination type) pair
        self.relation_of = store.schema.pair_relations() if self.typed else None
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
        self.optimizer = self.adam(self.model)
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
        return self._owner_rank(ids) == self.ctx.rank

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
        return probe_costs(self.model, self.widths, self.ctx, schema=self.store.schema)

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
        g, ctx, sets = self.graph, self.ctx, self.sets
        dim = int(self.store.feature_dim)
        self.features = self.cached_rows(plan)
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
        if self.link is None:  # the node task's training nodes among the local rows
            train = np.asarray(self.tables.train[g.solid]) if g.num_solid else np.zeros(0, bool)
            self.train_pos = torch.from_numpy(np.flatnonzero(train))
            self.y = torch.from_numpy(self.tables.labels[g.solid[train]].astype(np.int64))
            n = torch.tensor([len(self.train_pos)], dtype=torch.float64)
            if ctx.world_size > 1:
                dist.all_reduce(n)
            self.num_train = max(float(n.item()), 1.0)
        else:  # the link task reads its positives' ends (link_loss)
            self.train_pos = self.y = torch.zeros(0, dtype=torch.int64)
            self.num_train = 1.0
        dev = self.device  # the part's inputs and blocks live where the model computes
        self.x0 = self.x0.to(dev)
        self.blocks = [
            (r.to(dev) if r is not None else None, [grp.to(dev) for grp in groups])
            for r, groups in self.blocks
        ]
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

    def _layer_blocks(self, k: int) -> tuple[Block | None, list[_Group]]:
        """Layer ``k`` (level ``k`` -> ``k+1``): the block of the replicated targets (sources:
        ``rep[k]``, then the local nodes its edges use, at positions ``self.rep_local[k]``)
        and the local targets' blocks, one per :class:`_Group` (:meth:`_groups`; sources:
        local nodes, ``rep[k]``, the mirrors)."""
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
        groups = self._groups(k, src, ids, s + len(rep))
        top = sets.rep[k + 1]
        if not len(top):
            return None, groups
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
        rblk = replace(rblk, node_ids=self.store.to_orig(rids))
        if self.typed:  # an in-edge's relation from its endpoints' types
            types = self.store.type_of(rids)
            dst = np.repeat(np.arange(len(top)), np.diff(rowptr))
            et = self.relation_of[types[rsrc], types[dst]]
            rblk = replace(rblk, **_typing(et, types))
        return rblk, groups

    def _groups(self, k: int, src: np.ndarray, ids: np.ndarray, have: int) -> list[_Group]:
        """Layer ``k``'s local targets split by the exchange slot after which they can be
        computed (Sec. 4.3, Figure 8): stage 0 = every in-neighbour is here (a local row or a
        replica: computed while the first chunks are in flight), stage ``s`` = the last of its
        mirrors arrives in slot ``s``. Without ``overlap`` one group, computed after the last
        slot. ``src``: the sources of ``self.graph``'s edges as positions in ``ids`` (local
        rows, replicas, mirrors; the first ``have`` are here)."""
        g, ex, deg = self.graph, self.exchanges[k], self.tables.degrees
        s = g.num_solid
        counts = np.diff(np.asarray(g.indptr, np.int64))
        tgt = np.repeat(np.arange(s), counts)
        types = self.store.type_of(ids) if self.typed else None
        if self.options.overlap:
            edge_stage = np.zeros(len(src), np.int64)
            far = src >= have
            if far.any():
                owners = self._owner_rank(ids[src[far]])
                edge_stage[far] = [ex.recv_slot(int(o)) for o in owners]
            stage = np.zeros(s, np.int64)
            np.maximum.at(stage, tgt, edge_stage)
        else:
            stage = np.full(s, ex.num_slots, np.int64)
        out = []
        for st in np.unique(stage).tolist():
            targets = np.flatnonzero(stage == st)
            esrc = src[stage[tgt] == st]
            used = setdiff_sorted(esrc, targets)
            loc, mir = used[used < have], used[used >= have]
            order = np.concatenate([targets, loc, mir])
            remap = np.full(len(ids), -1, np.int64)
            remap[order] = np.arange(len(order))
            rowptr = np.concatenate([[0], np.cumsum(counts[targets])]).astype(np.int64)
            blk = block_from_csr(rowptr, remap[esrc], len(order), deg[ids[order]])
            blk = replace(blk, node_ids=self.store.to_orig(ids[order]))
            if self.typed:  # the entries' relations (the parts'), the sources' types
                et = np.asarray(g.edge_types)[stage[tgt] == st]
                blk = replace(blk, **_typing(et, types[order]))
            out.append(
                _Group(
                    stage=int(st),
                    targets=torch.from_numpy(targets),
                    local=torch.from_numpy(np.concatenate([targets, loc])),
                    mirror=torch.from_numpy(mir - have),
                    block=blk,
                )
            )
        return out

    # ---------------------------------------------------------------- training
    def forward(self, timer: dict[str, float] | None = None) -> torch.Tensor:
        """Every layer for the local nodes and the replicas, overlapped with the ring slots
        (Sec. 4.3, Figure 8; docs/distributed.md#fullgraph-neutronstar); the local nodes'
        logits (a leaf: :meth:`backward` takes the gradient from there, layer by layer)."""
        timer = timer if timer is not None else {}
        s, dev = self.graph.num_solid, self.x0.device
        h, h_rep = self.x0[:s], self.x0[s:]
        self._levels = []
        for k, (rep_blk, groups) in enumerate(self.blocks):
            ex = self.exchanges[k]
            done, box = None, {}
            if dev.type != "cpu":  # copy each owner's rows to the device as they arrive
                mirrors = torch.empty((ex.num_recv, h.shape[1]), device=dev)

                def done(owner: int, m=mirrors, ex=ex, box=box) -> None:
                    with torch.no_grad():
                        m[ex.mirrors(owner)] = box["recv"][ex.mirrors(owner)].to(m.device)

            transfer, recv = ex.rows(h, done)
            box["recv"] = recv
            if dev.type == "cpu":
                mirrors = recv.detach()  # the chunks land in it
            mirrors.requires_grad_(k > 0)  # level 0 (features) is constant
            both = self.x0 if k == 0 else torch.cat([h, h_rep])
            out = torch.empty((s, self.widths[k + 1]), device=dev)
            lv = _Level(h=h if k else None, h_rep=h_rep if k else None, mirrors=mirrors, out=out)
            rep_stage = 0 if self.options.overlap else ex.num_slots
            for stage in range(ex.num_slots + 1):
                if stage:
                    t0 = time.perf_counter()
                    transfer.finish()  # this slot in, the next one posted
                    timer["communication"] = (
                        timer.get("communication", 0.0) + time.perf_counter() - t0
                    )
                t0 = time.perf_counter()
                if stage == rep_stage and rep_blk is not None:
                    src = torch.cat([h_rep, h.index_select(0, self.rep_local[k])])
                    lv.rep_out = self.model.layer_forward(k, src, rep_blk)
                t1 = time.perf_counter()
                timer["cached_compute"] = timer.get("cached_compute", 0.0) + t1 - t0
                for grp in groups:
                    if grp.stage != stage:
                        continue
                    x = both.index_select(0, grp.local)
                    if len(grp.mirror):
                        x = torch.cat([x, mirrors.index_select(0, grp.mirror)])
                    y = self.model.layer_forward(k, x, grp.block)
                    lv.outs.append((grp, y))
                    with torch.no_grad():
                        out.index_copy_(0, grp.targets, y.detach())
                timer["local_compute"] = timer.get("local_compute", 0.0) + time.perf_counter() - t1
            h = out.requires_grad_()
            if lv.rep_out is not None:
                h_rep = lv.rep_out.detach().requires_grad_()
            else:
                h_rep = torch.zeros((0, self.widths[k + 1]), device=dev, requires_grad=True)
            lv.rep_next = h_rep
            self._levels.append(lv)
        return h

    def backward(self, loss: torch.Tensor) -> None:
        """The weights' gradients of ``loss`` (of :meth:`forward`'s logits), layer by layer
        (Sec. 4.3: compute, then communicate; docs/distributed.md#fullgraph-neutronstar): the
        groups in reverse slot order, after the group of forward slot ``s`` the backward slot
        ``world - s`` posts its owner's mirror gradients. Every rank posts every slot of every
        level but the features', rows or not, so every gradient send has its receive."""
        loss.backward()  # the logits' gradient
        overlap = self.options.overlap
        pending: tuple[Transfer, torch.Tensor, torch.Tensor] | None = None
        for k in reversed(range(self.model.num_layers)):
            lv, ex = self._levels[k], self.exchanges[k]
            if lv.rep_out is not None:  # needs only the replicas' gradients: already final
                torch.autograd.backward(lv.rep_out, _grad(lv.rep_next))
            if pending is not None:  # the gradients of this layer's output rows from peers
                self._finish_push(*pending)
                pending = None
            grad_out = _grad(lv.out)
            push = None
            if k > 0:  # the mirrors' gradients go to their owners (features have none)
                push, summed = ex.gradients(
                    lambda m=lv.mirrors: m.grad, self.graph.num_solid, int(lv.mirrors.shape[1])
                )
            by_stage: dict[int, list] = {}
            for grp, y in lv.outs:
                by_stage.setdefault(grp.stage, []).append((grp, y))
            for stage in range(ex.num_slots, -1, -1):
                outs = by_stage.get(stage, [])
                if outs:
                    torch.autograd.backward(
                        [y for _, y in outs], [grad_out[grp.targets] for grp, _ in outs]
                    )
                if push is not None and overlap and stage >= 1:
                    if push.posted > push.finished:
                        push.finish(post_next=False)
                    push.post()
            if push is not None:
                if overlap:
                    pending = (push, summed, lv.h)
                else:
                    self._finish_push(push, summed, lv.h)
        if pending is not None:
            self._finish_push(*pending)
        self._levels = []

    @staticmethod
    def _finish_push(push: Transfer, summed: torch.Tensor, h: torch.Tensor) -> None:
        """Wait for a gradient push's remaining slots; add what arrived to ``h``'s gradient."""
        push.finish_all()
        summed = summed.to(h.device)
        if h.grad is None:
            h.grad = summed
        else:
            h.grad += summed

    def loss(self, logits: torch.Tensor) -> torch.Tensor:
        """The sum of this rank's training losses over every rank's training nodes."""
        out = logits[self.train_pos]
        return F.cross_entropy(out, self.y, reduction="sum") / self.num_train

    def link_step(self, epoch: int) -> LinkStep:
        """This rank's link step of ``epoch`` (module docstring, the link task): every
        positive of its epoch (:class:`~shoal.engines.linktask.RankPositives`, one batch)
        with the seam's step 0 seed (:meth:`~shoal.engines.linktask.DistLinkTask.step`)."""
        seed = self.train_config.run.seed
        pos = next(self.link.positives.epoch(seed, epoch, 1))
        return self.link.step(pos, batch_seed(seed, epoch, 0) + self.ctx.rank)

    def link_loss(self, logits: torch.Tensor, step: LinkStep) -> torch.Tensor:
        """The link loss of ``step`` from :meth:`forward`'s outputs: the mean over its
        positives weighted by their share of every rank's (summed over ranks: the mean over
        the graph's positives, as :meth:`loss` is over its training nodes); a zero that
        reaches every weight when the step is empty."""
        # the forward's rows are the rank's core nodes, in order of their (global) ids
        at = np.searchsorted(self.graph.solid, step.nodes)
        h = logits[torch.from_numpy(at).to(logits.device)]
        share = len(step) / max(self.link.total_positives, 1)
        return self.link.loss(self.model, h, step) * share

    def eval_work_ratio(self) -> float:
        """An epoch is one full-graph forward and backward pass (about 3 forward passes over
        every edge), an evaluation one forward pass: 1/3 (the link task's too: its epoch is
        the same pass, its evaluation an exact one over every node)."""
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
            device=self.device,  # (on a GPU: CUDA events, no wait a step)
        )
        timer = meter.phases
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        with keyed_dropout(self.model, self.train_config.run.seed, epoch):
            logits = self.forward(timer)
        if self.link is not None:
            step = self.link_step(epoch)
            loss = self.link_loss(logits, step)
        else:
            loss = self.loss(logits)
        t0 = time.perf_counter()
        fwd_wait = sum(ex.seconds for ex in self.exchanges)
        self.backward(loss)
        back_wait = sum(ex.seconds for ex in self.exchanges) - fwd_wait
        timer["backward"] = time.perf_counter() - t0 - back_wait
        timer["communication"] += back_wait
        with meter.time("allreduce"):
            # summed, not averaged: the loss is already divided by every rank's training nodes
            self.all_reduce_gradients(average=False)
        self.optimizer.step()
        if self.link is not None:  # the mean over every rank's positives in the record
            total = float(self.link.total_positives)
            meter.step_sums(float(loss.detach()) * total, 0, len(step))
            return self.epoch_record(**meter.close())
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


def _typing(edge_type: np.ndarray, src_type: np.ndarray) -> dict[str, torch.Tensor]:
    """A typed block's ``edge_type`` and ``src_type`` (int64 tensors)."""
    return {
        "edge_type": torch.from_numpy(np.asarray(edge_type, np.int64)),
        "src_type": torch.from_numpy(np.asarray(src_type, np.int64)),
    }


def _positions(sorted_ids: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Positions of ``ids`` in ``sorted_ids`` (sorted ascending unless it is a ``rep`` list,
    whose order is arbitrary: looked up through a sort)."""
    if not len(ids):
        return np.empty(0, np.int64)
    order = np.argsort(sorted_ids, kind="stable")
    p = np.searchsorted(sorted_ids[order], ids)
    return order[p].astype(np.int64)


@dataclass
class _Group:
    """Local targets of one layer computed together: after exchange slot ``stage`` (0: before
    any chunk is in). ``local``: source positions in [local rows; replicas] (the targets
    first), ``mirror``: source positions in the mirrors' buffer, in ``block``'s order."""

    stage: int
    targets: torch.Tensor
    local: torch.Tensor
    mirror: torch.Tensor
    block: Block

    def to(self, device: torch.device) -> _Group:
        return _Group(
            self.stage,
            self.targets.to(device),
            self.local.to(device),
            self.mirror.to(device),
            self.block.to(device),
        )


@dataclass
class _Level:
    """One layer's forward, kept for :meth:`FullGraphEngine.backward`: its input leaves
    (local rows ``h``, replicas ``h_rep``, ``mirrors``), each group's output, the replicas'
    output ``rep_out`` and the output leaves ``out`` (local rows) and ``rep_next``."""

    h: torch.Tensor | None
    h_rep: torch.Tensor | None
    mirrors: torch.Tensor
    out: torch.Tensor
    outs: list = field(default_factory=list)
    rep_out: torch.Tensor | None = None
    rep_next: torch.Tensor | None = None


def _grad(t: torch.Tensor) -> torch.Tensor:
    """``t``'s gradient, zero when nothing reached it."""
    return t.grad if t.grad is not None else torch.zeros_like(t)
