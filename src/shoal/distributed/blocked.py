"""Exact distributed evaluation under a memory budget: halo exchange, then local blocked layers.

When every layer is a sum of per-source messages (:class:`shoal.nn.SumLayer`), a layer is
computed as in DistGNN's full-graph layer (Md et al., SC 2021, Sec. 3: a layer's aggregation
runs over the local part, and the partial results of the halo nodes are exchanged between
layers) combined with the single-process blocked scheme (:mod:`shoal.training.blocked`). A
block's halo sources reach it as messages from their owners' sweeps
(:mod:`shoal.distributed.served`, the default), or from halo rows stored on this rank
(:func:`exchange_halos`, chunk by chunk within the budget; a store built with
``--halo-features`` holds layer 0's), swept with the part's core rows as one stacked input
(docs/distributed.md#evaluation-every-engine).

The last layer is computed for the evaluation targets only, its rows handed to a callback
(:func:`blocked_dist_counts` compares them with their labels; the link task keeps them), so
no per-node output of the last layer is kept. Memory is the budget plus ``O(local nodes)``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist

from shoal.distributed.comm import CommStats, exchange, reduced
from shoal.distributed.feature_store import DistFeatureStore, owner_of, placement
from shoal.distributed.runtime import DistContext
from shoal.distributed.served import ServedLayout, served_layer
from shoal.distributed.tables import NodeTables
from shoal.nn.base import SumLayer
from shoal.rows.direct import RowFile
from shoal.rows.gather import gather_rows
from shoal.rows.opener import open_file
from shoal.rows.source import RowSource
from shoal.store.reader import Partition, Store
from shoal.training import _kernels as BK
from shoal.training.blocked import (
    RowWriter,
    blocked_layer,
    id_dtype,
    nonzero_ids,
    output_width,
    width_of,
)
from shoal.utils.arrays import union_sorted
from shoal.utils.featdtype import FeatureDtype, encode, feature_dtype

__all__ = [
    "HALO_MODES",
    "PlannedGather",
    "blocked_dist_counts",
    "blocked_dist_outputs",
    "exchange_halos",
    "needed_nodes_dist",
]


#: how a block's halo sources reach it (:func:`blocked_dist_outputs`)
HALO_MODES = ("served", "stored")


class PlannedGather:
    """``gather(src, ids, out)`` for a :class:`DistFeatureStore`: rows of a memory-mapped
    float32 array by planned direct reads (one :class:`RowReader` per file, kept), any other
    array by :func:`~shoal.rows.gather.gather_rows`."""

    def __init__(self, threads: int = 8) -> None:
        self.threads = threads
        self.readers: dict[tuple[str, int], RowSource] = {}

    def __call__(self, src: np.ndarray, ids: np.ndarray, out: np.ndarray | None = None):
        ids = np.asarray(ids, dtype=np.int64)
        n = len(ids)
        if out is None:
            out = np.empty((n, src.shape[1]), np.float32)
        f = RowFile.of(src) if src.dtype == np.float32 else None
        if f is None or n == 0:
            return gather_rows(src, ids, out)[:n]
        r = self.readers.get((f.path, f.offset))
        if r is None:
            r = self.readers[(f.path, f.offset)] = open_file(f, threads=self.threads)
        uniq, inverse = np.unique(ids, return_inverse=True)
        rows = np.empty((len(uniq), src.shape[1]), np.float32)
        r.read(uniq, rows)
        out[:n] = rows[inverse]
        return out[:n]

    def close(self) -> None:
        for r in self.readers.values():
            r.close()
        self.readers.clear()


def exchange_halos(
    store: Store,
    parts: list[Partition],
    part_to_rank: np.ndarray,
    ctx: DistContext,
    inputs: dict[int, np.ndarray],
    dim: int,
    *,
    new_array,
    budget: int,
    stats: CommStats,
    threads: int = 8,
    needed: dict[int, np.ndarray] | None = None,
) -> dict[int, np.ndarray]:
    """Each part's halo rows of a layer's input (``inputs``: this rank's parts' core rows,
    width ``dim``), pulled from their owners into ``new_array(num_halo, dim, dtype)`` (the
    inputs' dtype when every rank's are float16 or bfloat16, else float32); with
    ``needed`` (part -> sorted halo positions) only those rows (the others are left unset).
    Collective: every rank takes the same number of pulls (the most any rank needs)."""
    gather = PlannedGather(threads)
    fs = DistFeatureStore(
        **placement(store, part_to_rank, ctx),
        local_parts=inputs,
        feature_dim=dim,
        stats=stats,
        gather=gather,
    )
    # pulled rows, their copy and the rows served to others: a few row copies per id
    chunk = max(1024, budget // (4 * 4 * max(dim, 1)))
    # halo rows of 16-bit inputs kept in their kind (the owners' rows were widened exactly):
    # they are stacked after the core rows, read as one source of one dtype
    kind = _halo_kind(inputs, ctx)
    outs = {p.index: new_array(p.num_halo, dim, kind.stored) for p in parts}
    want = {
        p.index: np.arange(p.num_halo, dtype=np.int64) if needed is None else needed[p.index]
        for p in parts
    }
    jobs = [
        (p, want[p.index][a : a + chunk])
        for p in parts
        for a in range(0, len(want[p.index]), chunk)
    ]
    writers = {p.index: RowWriter(outs[p.index]) for p in parts}
    try:
        for k in range(reduced(len(jobs), ctx.world_size, dist.ReduceOp.MAX)):
            if k >= len(jobs):
                fs.pull(np.empty(0, np.int64))
                continue
            p, pos = jobs[k]
            rows = fs.pull(np.asarray(p.halo_ids[pos], dtype=np.int64)).numpy()
            writers[p.index].write(pos, encode(rows, kind)[0])
    finally:
        for w in writers.values():
            w.close()
        gather.close()
    return outs


#: a layer input's kind, as agreed over the ranks by :func:`_halo_kind` (3: no rows)
_KIND_CODES = {np.dtype(np.float16): 1, np.dtype(np.uint16): 2, np.dtype(np.int8): 4}


def _halo_kind(inputs: dict[int, np.ndarray], ctx: DistContext) -> FeatureDtype:
    """The feature dtype halo rows are kept in (collective): the inputs' when every rank's
    rows are float16, or every rank's bfloat16, so that a part's core and halo rows stack as
    one source; float32 otherwise. int8 inputs are refused on every rank: their rows need
    their stored scales, which the pull does not carry."""
    kinds = {np.dtype(a.dtype) for a in inputs.values()}
    if not kinds:
        code = 3  # a rank without rows agrees with any
    elif len(kinds) == 1:
        code = _KIND_CODES.get(kinds.pop(), 0)
    else:
        code = 0
    lo = reduced(code, ctx.world_size, dist.ReduceOp.MIN)
    hi = reduced(-1 if code == 3 else code, ctx.world_size, dist.ReduceOp.MAX)
    if hi == 4:
        raise ValueError(
            "--eval-halo stored cannot stack an int8 store's rows with halo rows pulled from "
            "their owners (the rows' scales stay with them); use --eval-halo served"
        )
    if lo == hi and lo in (1, 2):
        return feature_dtype("float16" if lo == 1 else "bfloat16")
    return feature_dtype("float32")


def _ask_owners(
    store: Store, part_to_rank: np.ndarray, ctx: DistContext, ids: np.ndarray, stats: CommStats
) -> np.ndarray:
    """Send global ``ids`` to the ranks owning them; returns the ids sent to this rank (its
    own among them). Collective."""
    owners = part_to_rank[owner_of(store.part_offsets, ids)] if len(ids) else ids
    mine = owners == ctx.rank
    rest, owners = ids[~mine], owners[~mine]
    order = np.argsort(owners, kind="stable")
    counts = np.bincount(owners, minlength=ctx.world_size).astype(np.int64)
    got, _ = exchange(rest[order], counts, stats)
    return np.concatenate([ids[mine], got.numpy()])


def needed_nodes_dist(
    store: Store,
    parts: list[Partition],
    part_to_rank: np.ndarray,
    ctx: DistContext,
    targets: dict[int, np.ndarray],
    num_layers: int,
    stats: CommStats,
    *,
    keep_halo: bool = True,
) -> tuple[list[dict], list[dict]]:
    """What each layer computes and pulls, from the last layer's ``targets`` (part -> core
    positions) down (collective: one exchange of ids per layer): ``core[l][part]``, the sorted
    core positions layer ``l`` computes (the next layer's and their in-neighbours, including
    those other ranks' nodes need), and ``halo[l][part]``, the sorted halo positions whose
    layer-``l`` inputs it reads (:func:`shoal.training.blocked.needed_nodes`, distributed;
    empty unless ``keep_halo``)."""
    core: list[dict] = [{} for _ in range(num_layers)]
    halo: list[dict] = [{} for _ in range(num_layers)]
    if not keep_halo:  # every level's halo entry empty, as if marked and dropped
        halo = [{p.index: np.empty(0, np.int32) for p in parts} for _ in range(num_layers)]
    if num_layers == 0:
        return core, halo
    core[-1] = dict(targets)
    # layer 0's in-neighbours only name the halo rows it reads: without keep_halo nothing
    # below layer 1 is marked (a pass over every list layer 0 computes, for nothing)
    for li in range(num_layers - 1, -1 if keep_halo else 0, -1):
        asks = []
        below: dict[int, np.ndarray] = {}
        for p in parts:
            mark = np.zeros(p.num_nodes, dtype=np.bool_)
            cur = core[li][p.index]
            mark[cur] = True
            BK._mark_in_neighbours(p.indptr, p.indices, cur, mark)
            below[p.index] = nonzero_ids(mark[: p.num_core])  # int32 below 2**31 nodes
            need = nonzero_ids(mark[p.num_core :])
            asks.append(np.asarray(p.halo_ids[need], dtype=np.int64))
            halo[li][p.index] = need if keep_halo else need[:0]
            del need
        if li == 0:
            break
        got = _ask_owners(
            store, part_to_rank, ctx, np.concatenate(asks or [np.empty(0, np.int64)]), stats
        )
        for p in parts:
            mine = got[(got >= p.start) & (got < p.stop)] - p.start
            both = union_sorted(below[p.index], mine)
            core[li - 1][p.index] = both.astype(id_dtype(p.num_core), copy=False)
    return core, halo


def _counter(part: Partition, masks, correct, total):
    """Adds a block of targets' hits and counts per split (the part's own labels: no table
    over every node is read)."""

    def count(pos: np.ndarray, logits: np.ndarray, todo: np.ndarray) -> None:
        local = np.asarray(todo[pos], np.int64)
        pred = logits.argmax(1)
        if part.labels is None:
            y = np.full(len(local), -1, np.int64)
        else:
            y = np.asarray(part.labels[local], np.int64)
        for k, m in enumerate(masks):
            sel = m[local]
            correct[k] += float((pred[sel] == y[sel]).sum())
            total[k] += float(sel.sum())

    return count


@torch.no_grad()
def blocked_dist_counts(
    layers: list[SumLayer],
    store: Store,
    parts: list[Partition],
    part_to_rank: np.ndarray,
    ctx: DistContext,
    tables: NodeTables,
    splits: tuple[str, ...],
    **kwargs,
) -> tuple[np.ndarray, np.ndarray]:
    """This rank's ``(correct, total)`` per split of the model ``layers`` (module docstring;
    ``kwargs``: :func:`blocked_dist_outputs`'s); collective."""
    correct = np.zeros(len(splits), np.float64)
    total = np.zeros(len(splits), np.float64)
    targets, counters = {}, {}
    for p in parts:
        masks = [np.asarray(p.mask(s)) for s in splits]
        any_split = np.logical_or.reduce(masks) if masks else np.zeros(p.num_core, np.bool_)
        targets[p.index] = nonzero_ids(any_split)  # int32 below 2**31 nodes
        counters[p.index] = _counter(p, masks, correct, total)
    blocked_dist_outputs(
        layers,
        store,
        parts,
        part_to_rank,
        ctx,
        tables,
        targets,
        counters,
        **kwargs,
    )
    return correct, total


@torch.no_grad()
def blocked_dist_outputs(
    layers: list[SumLayer],
    store: Store,
    parts: list[Partition],
    part_to_rank: np.ndarray,
    ctx: DistContext,
    tables: NodeTables,
    targets: dict[int, np.ndarray],
    on_output: dict[int, Callable[[np.ndarray, np.ndarray, np.ndarray], None]],
    *,
    scratch,
    budget: int,
    normalize: bool = False,
    stats: CommStats | None = None,
    threads: int = 8,
    inputs: dict[int, np.ndarray] | None = None,
    halo: str = "served",
    id_book: int = 0,
) -> None:
    """Run the model ``layers`` for the sorted core positions ``targets[part]`` of this rank's
    parts; the last layer's rows are handed to ``on_output[part](pos, h, todo)`` (``h`` the
    outputs of the core positions ``todo[pos]``). Collective. ``scratch.array(rows, cols)``
    makes the layers' arrays; ``inputs``: layer-0 rows per
    part (default the store's features; halo rows are then pulled from the owners).
    ``halo``: how a block's halo sources reach it (:data:`HALO_MODES`, module docstring).
    ``id_book``: bytes the caller set aside outside ``budget`` for the sets of nodes each
    layer computes and pulls (default 0); what those sets do not take once known goes to
    the layers' working memory."""
    if halo not in HALO_MODES:
        raise ValueError(f"halo must be one of {', '.join(HALO_MODES)}, got {halo!r}")
    mode = halo
    stats = stats if stats is not None else CommStats()
    graphs = {}
    for p in parts:  # served: only the rank's own nodes' degrees are read (by their owner)
        if mode == "stored":
            local = np.concatenate([p.core_ids, np.asarray(p.halo_ids, dtype=np.int64)])
            deg = np.asarray(tables.degrees[local], np.float32)
            del local
        else:  # a part holds its core nodes' whole in-neighbourhoods: no table is read
            ptr = np.asarray(p.indptr)
            deg = np.empty(len(ptr) - 1, np.float32)  # (cast as computed: no int64 copy)
            np.subtract(ptr[1:], ptr[:-1], out=deg, casting="unsafe")
        graphs[p.index] = (p.indptr, p.indices, torch.from_numpy(deg))
    core, need_halo = needed_nodes_dist(
        store, parts, part_to_rank, ctx, targets, len(layers), stats, keep_halo=mode == "stored"
    )
    sets = sum(int(np.asarray(a).nbytes) for level in core + need_halo for a in level.values())
    if id_book > sets:  # the sets are known now: the rest of their book is working memory
        budget += id_book - sets
    if inputs is None:
        inputs = {p.index: p.features for p in parts}
        halos = {p.index: p.halo_features for p in parts} if store.halo_features else None
        dim = int(store.feature_dim)
    else:
        halos, dim = None, int(next(iter(inputs.values())).shape[1]) if inputs else 0
        dim = reduced(dim, ctx.world_size, dist.ReduceOp.MAX)
    norm, pre = normalize, layers[0].pre if layers else None
    if mode == "served":
        layout = ServedLayout(store.part_offsets, part_to_rank, ctx.world_size)
        served = {p.index: layout.served_of(p.halo_ids) for p in parts}
    for li, sl in enumerate(layers):
        last = li == len(layers) - 1
        nxt = None if last else layers[li + 1].pre
        width = output_width(sl, width_of(pre, dim), nxt)
        # served: the rows the next layer needs only, in order (not an array over every core
        # row, of which a validation pass writes a few percent, read back scattered)
        outs = {}
        if not last:
            for p in parts:
                rows = len(core[li][p.index]) if mode == "served" else p.num_core
                outs[p.index] = scratch.array(rows, width)
        emits = None
        if last:
            emits = {
                p.index: (lambda pos, h, c=on_output[p.index], t=core[li][p.index]: c(pos, h, t))
                for p in parts
            }
        if mode == "served":
            served_layer(
                sl,
                inputs,
                parts,
                graphs,
                {p.index: core[li][p.index] for p in parts},
                layout,
                served,
                ctx,
                dim=dim,
                outs=None if last else outs,
                on_output=emits,
                pre=pre,
                nxt=nxt,
                budget=budget,
                normalize=norm,
                threads=threads,
                stats=stats,
                input_rows=None if li == 0 else {p.index: core[li - 1][p.index] for p in parts},
                spill=scratch.spill,
            )
            inputs, dim, norm, pre = outs, width, False, None
            continue
        if halos is None:  # the same decision on every rank: the exchange is collective
            halos = exchange_halos(
                store,
                parts,
                part_to_rank,
                ctx,
                inputs,
                dim,
                new_array=scratch.array,
                budget=budget,
                stats=stats,
                threads=threads,
                needed=need_halo[li],
            )
        for p in parts:
            halo = halos[p.index]
            src = [inputs[p.index]] + ([halo] if halo is not None and p.num_halo else [])
            blocked_layer(
                sl,
                src,
                graphs[p.index],
                core[li][p.index],
                out=outs.get(p.index),
                on_output=None if emits is None else emits[p.index],
                pre=pre,
                nxt=nxt,
                budget=budget,
                normalize=norm,
                threads=threads,
                spill=scratch.spill,
            )
        inputs, halos, dim, norm, pre = outs, None, width, False, None
