"""``averaging`` on a typed store: SDT-GNN's local training and weighted model averaging, typed.

The untyped engine's scheme (:mod:`shoal.engines.averaging.engine`): each rank trains its own
copy of the relational model on its parts alone -- core nodes of the target type with their
full in-neighbourhoods, and every halo node's rows of its own type replicated in the part (a
typed store built with ``--halo-features``) -- so nothing is communicated during an epoch;
every ``average_every`` epochs the models (and by default the Adam moments) are averaged,
each weighted by the training nodes its rank trained on.

Local sampling draws a fanout per relation inside the part
(:class:`~shoal.sample.typed.PartTypedSampler`); each batch's rows of each type are read from
the part's ``features/<type>.npy`` and ``halo_features/<type>.npy`` by one planned direct read
per type (:func:`~shoal.rows.opener.open_rows`). With one process and a one-part store the
batches equal the single-process :class:`~shoal.training.typed.TypedTrainer`'s. By default
(``--halo-hops auto``: ``min(2, layers)``) each part is first grown by its halo nodes' own
in-edges and rows (:mod:`shoal.engines.averaging.halo_hops`); ``--halo-hops 1`` trains the
stored part, as SDT-GNN. With more parts than ranks, one model per part by default
(``--part-models``, :class:`~shoal.engines.averaging.average.PartModels`), as the untyped
engine. Not yet here: the memory budget (no cache or windows).
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from shoal.engines.averaging.average import PartModels, average_saved_ranks
from shoal.engines.averaging.config import AveragingConfig
from shoal.engines.averaging.halo_hops import GrownPart, grow_parts
from shoal.engines.typed import TypedEngine
from shoal.errors import ShoalInputError
from shoal.graph.blocks import MiniBatch
from shoal.rows.opener import open_rows
from shoal.sample.typed import PartTypedSampler, TypedBatch
from shoal.store.reader import Partition
from shoal.training import batch_seed
from shoal.utils.io import scratch_space

__all__ = ["TypedAveragingEngine", "TypedPartRows"]

log = logging.getLogger(__name__)


class TypedPartRows:
    """Each node type's rows of a part's local nodes (core, halo, then the nodes a
    :class:`~shoal.engines.averaging.halo_hops.GrownPart` reached), read by one planned
    direct read per type and batch; ``node_type``: the type of every local node."""

    def __init__(self, part: Partition, threads: int = 8, grown: GrownPart | None = None) -> None:
        store = part.store
        schema = store.schema_or_raise()
        bounds = np.asarray(part.type_bounds, np.int64)
        halo = np.asarray(part.halo_ids, np.int64)
        htype = store.type_of(halo) if len(halo) else np.empty(0, np.int64)
        stored = np.concatenate(
            [np.repeat(np.arange(len(schema.node_types)), np.diff(bounds)), htype]
        ).astype(np.int64)
        self.node_type = grown.node_type if grown is not None else stored
        more = self.node_type[part.num_nodes :]  # the grown nodes' types
        # a local node's row in its type's stack [core rows, halo rows, grown rows of it]
        self.row = np.empty(len(self.node_type), np.int64)
        self.row[: part.num_core] = (
            np.arange(part.num_core) - bounds[self.node_type[: part.num_core]]
        )
        self.sources: list[Any] = []
        dims = store.type_feature_dims
        for t, nt in enumerate(schema.node_types):
            on = np.flatnonzero(htype == t)
            n_core = bounds[t + 1] - bounds[t]
            self.row[part.num_core + on] = n_core + np.arange(len(on))
            deep = np.flatnonzero(more == t)
            self.row[part.num_nodes + deep] = n_core + len(on) + np.arange(len(deep))
            if nt.name not in dims:
                self.sources.append(None)
                continue
            core = part.type_features(nt.name)
            members = [core]
            if len(on):
                h = part.halo_type_features(nt.name)
                if h is None:
                    raise ShoalInputError(
                        "the averaging engine trains parts locally and needs their halo features",
                        path=store.path,
                        fix="rebuild the store with `shoal store build ... --halo-features`",
                    )
                members.append(h)
            if len(deep):
                members.append(grown.extra[t])
            reader = open_rows(members, threads=threads)
            self.sources.append(
                (reader, None if reader is not None else np.concatenate(members), dims[nt.name])
            )

    def gather(self, tb: TypedBatch) -> list[torch.Tensor | None]:
        """``[rows of the batch's nodes of type t, batch order]`` per type (local ids)."""
        n_id = np.asarray(tb.n_id)
        types = tb.node_type.numpy()
        out: list[torch.Tensor | None] = []
        for t, src in enumerate(self.sources):
            if src is None:
                out.append(None)
                continue
            reader, mem, dim = src
            rows = self.row[n_id[types == t]]
            x = np.empty((len(rows), dim), np.float32)
            if len(rows) and reader is not None:
                order = np.argsort(rows, kind="stable")
                reader.read(rows[order], x, dest=order)
            elif len(rows):
                x[:] = mem[rows]
            out.append(torch.from_numpy(x))
        return out

    def close(self) -> None:
        for src in self.sources:
            if src is not None and src[0] is not None and hasattr(src[0], "close"):
                src[0].close()


class TypedAveragingEngine(TypedEngine):
    """SDT-GNN-style local training of a typed store with weighted model averaging."""

    name = "averaging"
    options_class = AveragingConfig
    tables_scope = "local"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.check_typed()
        cfg, store = self.train_config, self.store
        if store.num_parts > 1 and not store.halo_features:
            raise ShoalInputError(
                "the averaging engine trains parts locally and needs their halo features",
                path=store.path,
                fix="rebuild the store with `shoal store build ... --halo-features`",
            )
        self.model = self.build_model()
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay
        )
        self.rows, self.samplers, self.train_rows = [], [], []
        #: the hops of halo the parts are grown by (``--halo-hops``, "auto" resolved)
        self.halo_hops = self.options.resolve_halo_hops(typed=True, num_layers=cfg.num_layers)
        grown = self._grow() if self.halo_hops > 1 else [None] * len(self.parts)
        self.grown = grown
        for part, g in zip(self.parts, grown, strict=True):
            rows = TypedPartRows(part, threads=cfg.memory.io_threads, grown=g)
            if g is None:
                local_ids = np.concatenate([part.core_ids, np.asarray(part.halo_ids, np.int64)])
            else:
                local_ids = g.ids
            self.samplers.append(
                PartTypedSampler(
                    part if g is None else g,
                    rows.node_type,
                    cfg.sampling.fanouts,
                    degrees=np.asarray(self.tables.degrees[local_ids], np.float32),
                )
            )
            self.rows.append(rows)
            self.train_rows.append(np.flatnonzero(np.asarray(part.train_mask)))
        bs = cfg.sampling.batch_size
        self.num_batches = sum(-(-len(s) // bs) for s in self.train_rows)
        self.weight = float(sum(len(s) for s in self.train_rows))
        self.part_models = PartModels(
            self.model,
            self.optimizer,
            len(self.parts),
            per_part=self.options.part_models,
            make_optimizer=lambda m: torch.optim.Adam(
                m.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay
            ),
        )

    def _grow(self) -> list[GrownPart]:
        """The parts grown by ``halo_hops - 1`` hops of halo (collective; the rows go to a
        scratch directory beside the store, or in ``--scratch-dir``, removed at the end)."""
        cfg = self.train_config
        sampler = self.dist_sampler([-1])  # one hop, every in-edge
        self._scratch = contextlib.ExitStack()
        work = self._scratch.enter_context(
            scratch_space(cfg.memory.scratch_dir, beside=self.store.path, prefix="shoal-halo")
        )
        pulls = self.open_pulls()
        try:
            t0 = time.perf_counter()
            grown = grow_parts(
                self.parts,
                self.halo_hops,
                sampler=sampler,
                pulls=pulls,
                tables=self.tables,
                work=work,
                world_size=self.ctx.world_size,
            )
        finally:
            pulls.close()
        if self.ctx.is_rank0:
            log.info(
                "halo hops %d: rank 0's parts grew by %s nodes and %s in-edges in %.2fs",
                self.halo_hops,
                f"{sum(g.num_grown for g in grown):,}",
                f"{sum(len(g.indices) - int(g.part.indptr[-1]) for g in grown):,}",
                time.perf_counter() - t0,
            )
        return grown

    def _part_batches(self, i: int, epoch: int):
        """Part ``i``'s (step, local seeds) of ``epoch``: shuffled with the part's own seed
        (part 0's is the run's, as the single-process trainer's)."""
        cfg = self.train_config
        seed = cfg.run.seed + 1_000_003 * self.parts[i].index
        s = self.train_rows[i]
        s = s[np.random.default_rng([seed, epoch]).permutation(len(s))]
        bs = cfg.sampling.batch_size
        for step, a in enumerate(range(0, len(s), bs)):
            yield batch_seed(seed, epoch, step), s[a : a + bs]

    def train_epoch(self, epoch: int) -> dict[str, Any]:
        cfg = self.train_config
        meter = self.start_epoch(epoch)
        for i, part in enumerate(self.parts):  # p > N: this rank's parts in turn
            labels = part.labels
            model, optimizer = self.part_models[i]
            for key, seeds in self._part_batches(i, epoch):
                with meter.time("sampling"):
                    tb = self.samplers[i].sample(seeds, key)
                    self.note_rows(tb)
                with meter.time("gather"):
                    feats = self.rows[i].gather(tb)
                    y = torch.from_numpy(np.asarray(labels[seeds], np.int64))
                with meter.time("forward_backward"):
                    g = self.grown[i]
                    orig = np.asarray((part if g is None else g).orig_ids)[np.asarray(tb.n_id)]
                    mb = MiniBatch(orig, tb.blocks, tb.batch.num_seeds)
                    optimizer.zero_grad(set_to_none=True)
                    out = model(TypedBatch(mb, tb.node_type, tb.edge_types), feats)
                    loss = F.cross_entropy(out, y)
                    loss.backward()
                    optimizer.step()
                meter.step(float(loss.detach()), int((out.detach().argmax(1) == y).sum()), len(y))
        averaged = (epoch + 1) % self.options.average_every == 0 or epoch + 1 == cfg.optim.epochs
        if averaged:
            self._average(meter)
        return self.epoch_record(**meter.close(), averaged=averaged, evaluable=averaged)

    def _average(self, meter: Any) -> None:
        """One averaging round: the weighted mean of the models (and Adam's moments)."""
        t0 = time.perf_counter()
        nbytes = self.part_models.average(
            [float(len(s)) for s in self.train_rows],
            self.weight,
            group=self.ctx.model_group,
            moments=self.options.average_optimizer,
        )
        meter.phases["averaging"] = time.perf_counter() - t0
        self.stats.allreduce_bytes += nbytes if self.ctx.world_size > 1 else 0
        self.stats.rounds += 1 if self.ctx.world_size > 1 else 0

    def state(self) -> dict[str, Any]:
        return {
            **super().state(),
            "weight": self.weight,
            "part_models": self.part_models.state(),
            "part_weights": self.part_models.weights([float(len(s)) for s in self.train_rows]),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """As the untyped engine's: a state saved by another number of processes continues
        from the saved ranks' weighted average (:func:`average_saved_ranks`)."""
        resharded = bool(state.get("resharded_from"))
        if resharded:
            state = average_saved_ranks(state, moments=self.options.average_optimizer)
        super().load_state(state)
        self.part_models.load(
            state.get("part_models", []),
            resharded=resharded,
            moments=self.options.average_optimizer,
        )

    def close_io(self) -> None:
        super().close_io()
        for r in getattr(self, "rows", []):
            r.close()
        self.rows = []
        if getattr(self, "_scratch", None) is not None:
            self.samplers, self.grown = [], []  # their maps of the scratch files first
            self._scratch.close()
            self._scratch = None

    def settings(self) -> dict[str, Any]:
        return {
            **super().settings(),
            "average_every": self.options.average_every,
            "halo_hops": self.halo_hops,
            "average_optimizer": self.options.average_optimizer,
            "part_models": self.options.part_models,
        }
