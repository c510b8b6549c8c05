"""Exact layer-wise inference: the one layer loop, for one process and for many.

Layer ``l`` of a node is computed from *all* its in-neighbours' layer ``l - 1`` outputs, layer
by layer for every node: one pass over the edges per layer (GraphSAGE's and DGL's offline
inference), in batches of ``batch_size`` targets (memory: a batch + one layer's output).

The loop runs over *segments*: the whole graph in one process (:func:`layerwise_inference`),
or each part a rank holds in a distributed run (``shoal.distributed.evaluate``). A segment
computes its first ``num_core`` local ids; its other local ids (a part's halo nodes) are
*remote*: their rows come from a :class:`RowProvider`, whose ``fetch`` the distributed version
implements with one collective pull per batch (every rank takes the same number of steps).

A model's ``inference_split(l)`` (:class:`shoal.nn.BlockGNN`) splits a layer into a node-wise
part (e.g. a projection of wide inputs), run once per core node, and an aggregation part;
remote rows are then exchanged already projected. Layer outputs above
:data:`INFERENCE_MEMMAP_BYTES` go to memory maps in a scratch directory (``--scratch-dir``;
default beside the input, never the system temp dir), released after every batch; the
blocked layers keep an output in their working memory instead when it fits there
(:data:`shoal.training.blocked.KEEP_SHARE`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np
import torch
from torch import nn

from shoal.graph.blocks import Block, MiniBatch, full_graph_block
from shoal.rows import _kernels as K
from shoal.rows.featstore import DiskFeatures
from shoal.rows.gather import gather_rows, read_rows, source_rows
from shoal.rows.source import RowSource
from shoal.sample.sampler import NeighborSampler
from shoal.training.batches import batch_seed
from shoal.training.blocked import blocked_layers, id_dtype, needed_nodes, sum_layers
from shoal.training.data import TrainData
from shoal.utils.arrays import unique_sorted
from shoal.utils.diskspace import open_output_memmap
from shoal.utils.io import release_pages, scratch_space
from shoal.utils.progress import progress

__all__ = [
    "BLOCKED_BUDGET",
    "EVAL_EPOCH",
    "INFERENCE_MEMMAP_BYTES",
    "RowProvider",
    "Scratch",
    "Segment",
    "evaluate",
    "evaluation_bytes",
    "layerwise_inference",
    "receptive_field",
    "run_layers",
    "sampled_evaluate",
]

#: the "epoch" of a sampled evaluation's sampling streams (:func:`~shoal.training.batches.
#: batch_seed`): one no training epoch reaches, so its draws are not a training batch's
EVAL_EPOCH = 2**31 - 1
#: A layer's output array larger than this goes to a memory map in the scratch directory.
INFERENCE_MEMMAP_BYTES = 16 << 20
#: working memory of the blocked layer loop when no budget is given (default 1 GiB).
BLOCKED_BUDGET = 1 << 30


class Scratch(contextlib.ExitStack):
    """Arrays of one inference: in memory when small, memory maps in a scratch directory (made
    on first use inside ``scratch_dir``, else beside ``beside``) when large; removed on close."""

    def __init__(self, scratch_dir: str | os.PathLike | None, *, beside: str | os.PathLike):
        super().__init__()
        self.scratch_dir = scratch_dir
        self.beside = beside
        self._dir: Path | None = None
        self._count = 0

    def array(self, rows: int, cols: int, dtype: np.dtype | type = np.float32) -> np.ndarray:
        """A ``(rows, cols)`` array of ``dtype`` (default float32; contents undefined)."""
        if rows * cols * np.dtype(dtype).itemsize <= INFERENCE_MEMMAP_BYTES:
            return np.empty((rows, cols), dtype)
        return self.spill(rows, cols, dtype)

    def spill(self, rows: int, cols: int, dtype: np.dtype | type = np.float32) -> np.ndarray:
        """A ``(rows, cols)`` array of ``dtype`` in the scratch directory, whatever its size
        (a memory map, written and read with positioned I/O: memory a plan gave up)."""
        if self._dir is None:
            self._dir = self.enter_context(
                scratch_space(self.scratch_dir, beside=self.beside, prefix="shoal-infer")
            )
        self._count += 1
        path = self._dir / f"a{self._count}.npy"
        return open_output_memmap(path, dtype, (rows, cols))


@dataclass
class Segment:
    """One unit of the layer loop (the whole graph, or one part a rank holds).

    Attributes:
        key: the segment's name in :class:`RowProvider` calls (a part index; 0 for a graph).
        sampler: a sampler over the segment's local ids (only ``full`` is used).
        num_core: local ids ``[0, num_core)`` are computed here.
        inputs: ``(>= num_core, F)`` layer-0 rows of the core ids (a memory map is fine).
        remote: global id of local id ``num_core + i`` (its rows come from the provider);
            empty when the segment has no remote ids.
        targets: local ids whose last-layer output is wanted.
        original: local ids -> the graph's original ids, which a typed graph's blocks carry
            (``Block.node_ids``: a featureless type's embedding rows); None: local ids are
            the original ones (a graph directory).
        needed: the receptive field of ``targets``: ``needed[l]`` (sorted core ids) are the
            nodes whose layer-``l`` inputs some computation reads, so layer ``l`` computes
            ``needed[l + 1]`` (the last layer ``targets``; :func:`receptive_field`); None:
            every core id at every layer (default).
    """

    key: int
    sampler: NeighborSampler
    num_core: int
    inputs: np.ndarray | RowSource
    remote: np.ndarray
    targets: np.ndarray
    original: Callable[[np.ndarray], np.ndarray] | None = None
    needed: list[np.ndarray] | None = None

    def rows(self, layer: int) -> np.ndarray:
        """The core ids whose layer-``layer`` inputs are read (a layer's staged rows)."""
        if self.needed is None:
            return np.arange(self.num_core, dtype=np.int64)
        return np.asarray(self.needed[layer], np.int64)

    def first_block(self, mb: MiniBatch) -> Block:
        """``mb``'s first block, with its sources' original ids on a typed graph."""
        blk = mb.blocks[0]
        if blk.src_type is None or blk.node_ids is not None:
            return blk
        ids = np.asarray(mb.n_id[: blk.num_src])
        return replace(blk, node_ids=ids if self.original is None else self.original(ids))


class RowProvider:
    """Rows of remote ids for the current layer. One process has none (this class); the
    distributed inference pulls them from their owners (``shoal.distributed.evaluate``)."""

    def set_layer(self, inputs: dict[int, np.ndarray], dim: int) -> None:
        """The layer's input arrays of this process's segments (their core rows), width
        ``dim``: what this process serves to the others."""
        self.dim = dim

    def num_steps(self, local_steps: int) -> int:
        """Steps every process takes this layer (the maximum over processes)."""
        return local_steps

    def end_layer(self) -> None:
        """The layer is done: drop references to its input arrays (so they can be freed)."""

    def fetch(self, ids: np.ndarray) -> np.ndarray:
        """``(len(ids), dim)`` rows of global ``ids``; collective, called once per step."""
        if len(ids):
            raise ValueError("a single process has no remote rows")
        return np.empty((0, self.dim), np.float32)


def receptive_field(
    indptr: np.ndarray, indices: np.ndarray, size: int, targets: np.ndarray, num_layers: int
) -> list[np.ndarray] | None:
    """:attr:`Segment.needed` of ``targets`` in the in-neighbour CSR ``(indptr, indices)`` of
    ``size`` core nodes: ``num_layers + 1`` sorted id arrays, the last the targets, each
    earlier one the next plus its in-neighbours (:func:`~shoal.training.blocked.
    needed_nodes`; layer ``l`` only needs the nodes within ``L - l`` hops of the evaluated
    ones). None when the targets are every node (``shoal embed``): the full pass."""
    targets = unique_sorted(np.asarray(targets, np.int64))
    if len(targets) >= size:
        return None
    return needed_nodes(indptr, indices, size, targets, num_layers + 1)


def _buffer(bufs: dict[str, np.ndarray], name: str, rows: int, cols: int) -> np.ndarray:
    b = bufs.get(name)
    if b is None or b.shape[0] < rows or b.shape[1] != cols:
        b = bufs[name] = np.empty((max(rows, 1), cols), np.float32)
    return b


def _stage(pre, width: int, seg: Segment, layer: int, src, normalize, batch_size, scratch):
    """The node-wise part ``pre`` (output ``width``) of ``layer`` on the core rows of ``seg``
    whose inputs are read (:meth:`Segment.rows`) into a new array (the rows read by :func:`~shoal.rows.gather.read_rows`: positioned reads
    of a mapped file, whose pages never join this process)."""
    dim = src.shape[1]
    out = scratch.array(seg.num_core, width)
    bufs: dict[str, np.ndarray] = {}
    rows = seg.rows(layer)
    for start in range(0, len(rows), batch_size):
        ids = rows[start : start + batch_size]
        x = read_rows(src, ids, _buffer(bufs, "x", len(ids), dim), normalize=normalize)[: len(ids)]
        out[ids] = pre(torch.from_numpy(x)).numpy()
        release_pages(out)
    return out


def _out_dim(post, in_dim: int) -> int:
    """Output width of a layer's aggregation part (a dry run on a one-node block)."""
    blk = full_graph_block(np.zeros(2, np.int64), np.zeros(0, np.int64))
    return int(post(torch.zeros(1, in_dim), blk).shape[1])


def _steps(segments: list[Segment], layer: int, last: bool, batch_size: int) -> Iterator[tuple]:
    for seg in segments:
        rows = seg.targets if last else seg.rows(layer + 1)
        for start in range(0, len(rows), batch_size):
            yield seg, start, rows[start : start + batch_size]


def width_of(src: np.ndarray | RowSource) -> int:
    """Columns of an array's or a row source's rows."""
    return int(src.dim if isinstance(src, RowSource) else src.shape[1])


def _inputs_of_batch(seg, mb, src, provider, normalize, bufs) -> torch.Tensor:
    """The layer inputs of a full-neighbourhood batch: core rows read here (straight into
    their positions), remote rows fetched (collective), row-normalised when ``normalize``."""
    ids = mb.n_id
    x = _buffer(bufs, "in", len(ids), width_of(src))[: len(ids)]
    is_core = ids < seg.num_core
    core, far = np.flatnonzero(is_core), np.flatnonzero(~is_core)
    if isinstance(src, RowSource):  # one planned read of the batch's sorted core rows
        order = core[np.argsort(ids[core], kind="stable")]
        src.read(np.ascontiguousarray(ids[order]), x, dest=order)
    elif len(far):
        read_rows(src, ids[core], x, at=core)
    else:
        read_rows(src, ids, x)
    got = provider.fetch(seg.remote[ids[far] - seg.num_core] if len(far) else far)
    if len(far):
        x[far] = got
    if normalize:
        K._row_normalize(x, len(ids))
    return torch.from_numpy(x)


def run_layers(
    model: nn.Module,
    segments: list[Segment],
    on_output: Callable[[Segment, np.ndarray, np.ndarray], None],
    *,
    provider: RowProvider | None = None,
    normalize_features: bool = False,
    batch_size: int = 1024,
    scratch: Scratch,
    show_progress: bool | None = None,
) -> None:
    """The layer loop (module docstring). ``on_output(segment, rows, logits)`` receives the
    last layer's outputs of ``rows`` (positions in ``segment.targets``) batch by batch.

    The model needs ``num_layers`` and ``layer_forward(l, x, block)`` (every
    :class:`shoal.nn.BlockGNN` has them). Collective when the provider is.
    """
    provider = provider or RowProvider()
    splitter = getattr(model, "inference_split", None)
    num_layers = int(model.num_layers)
    prev = {seg.key: seg.inputs for seg in segments}
    dim = width_of(segments[0].inputs) if segments else 0
    dim = int(getattr(provider, "feature_dim", dim))
    bufs: dict[str, np.ndarray] = {}
    for layer in range(num_layers):
        pre, post = splitter(layer) if splitter is not None else (None, None)
        width = int(pre(torch.zeros(1, dim)).shape[1]) if pre is not None else dim
        if pre is not None and width >= dim:
            pre, post = None, None  # the node-wise part would widen the rows: skip the split
        post = post if post is not None else partial(model.layer_forward, layer)
        normalize = normalize_features and layer == 0
        if pre is not None:
            prev = {
                s.key: _stage(pre, width, s, layer, prev[s.key], normalize, batch_size, scratch)
                for s in segments
            }
            dim, normalize = width, False
        provider.set_layer(prev, dim)
        last = layer == num_layers - 1
        out_dim = _out_dim(post, dim)
        outs = {} if last else {s.key: scratch.array(s.num_core, out_dim) for s in segments}
        local = list(_steps(segments, layer, last, batch_size))
        total = provider.num_steps(len(local))
        bar = progress(
            total=total, desc=f"inference layer {layer}", unit="batch", enable=show_progress
        )
        for step in range(total):
            if step >= len(local):
                provider.fetch(np.empty(0, np.int64))  # keep in step with the other ranks
                bar.update(1)
                continue
            seg, start, rows = local[step]
            mb = seg.sampler.full(rows)
            x = _inputs_of_batch(seg, mb, prev[seg.key], provider, normalize, bufs)
            h = post(x, seg.first_block(mb)).numpy()
            if last:
                on_output(seg, np.arange(start, start + len(rows)), h)
            else:
                outs[seg.key][rows] = h
                release_pages(outs[seg.key])
            release_pages(seg.sampler.indptr)  # the part's CSR, read through its memory map
            release_pages(seg.sampler.indices)
            bar.update(1)
        bar.close()
        provider.end_layer()
        prev, dim = outs, out_dim


def _sampled_inference(
    model, data, nodes, sampler, normalize, batch_size, memory_budget=None, fanouts=None, seed=0
) -> np.ndarray:
    """Models without ``layer_forward``: full L-hop neighbourhoods of each batch of nodes
    (every neighbour of every relation on a typed graph, its blocks with their sources' ids),
    their rows read from an array or a row source. With ``memory_budget``, a batch whose
    neighbourhood holds more rows than the budget's share (each row with a few layers'
    activations) is sampled again at half its nodes: on a power-law graph a fixed count of
    nodes can hold most of the graph two hops out. ``fanouts`` (one per layer) samples the
    neighbourhoods instead (a sampled evaluation), the batch from position ``i`` drawn from
    the stream ``batch_seed(seed, EVAL_EPOCH, i)`` (the same draws at every call)."""
    num_layers = int(getattr(model, "num_layers", 0))
    if not num_layers:
        raise ValueError("a model without layer_forward must define num_layers")
    fanouts = tuple(fanouts) if fanouts is not None else (-1,) * num_layers
    # the sampler's own fanouts are drawn as it draws them (a typed one: per relation)
    override = None if tuple(sampler.fanouts) == fanouts else fanouts
    dim = data.feature_dim
    max_rows = max(1, int(memory_budget) // (16 * max(dim, 1) * num_layers)) if memory_budget else 0
    out = None
    buf = np.empty((0, dim), np.float32)
    start, k = 0, batch_size
    while start < len(nodes):
        seeds = nodes[start : start + k]
        mb = sampler.sample(seeds, batch_seed(seed, EVAL_EPOCH, start), fanouts=override)
        if max_rows and len(mb.n_id) > max_rows and len(seeds) > 1:
            k = max(1, len(seeds) // 2)  # sampled again, halved
            continue
        if buf.shape[0] < len(mb.n_id):
            buf = np.empty((len(mb.n_id), dim), np.float32)
        if isinstance(data.features, RowSource):
            x = source_rows(data.features, mb.n_id, buf, normalize=normalize)
        else:
            x = gather_rows(data.features, mb.n_id, buf, normalize=normalize)[: len(mb.n_id)]
        blocks = mb.with_node_ids() if mb.typed else mb.blocks
        h = model(torch.from_numpy(x), blocks).numpy()
        if out is None:
            out = np.empty((len(nodes), h.shape[1]), dtype=np.float32)
        out[start : start + len(h)] = h
        start += len(seeds)
        if max_rows and 2 * len(mb.n_id) < max_rows:
            k = min(batch_size, 2 * k)
    return out if out is not None else np.empty((0, 0), np.float32)


@torch.no_grad()
def layerwise_inference(
    model: nn.Module,
    data: TrainData,
    nodes: np.ndarray,
    *,
    sampler: NeighborSampler | None = None,
    normalize_features: bool = False,
    batch_size: int = 1024,
    show_progress: bool | None = None,
    scratch_dir: str | os.PathLike | None = None,
    features: DiskFeatures | None = None,
    memory_budget: int | None = None,
    predict: bool = False,
    new_output: Callable[[tuple[int, ...], np.dtype], np.ndarray] | None = None,
) -> np.ndarray:
    """Exact outputs (logits) of ``model`` for ``nodes`` of a graph, in one process (the layer
    loop of the module docstring). When every layer is a sum of messages
    (:func:`~shoal.training.blocked.sum_layers`), layers run block by block
    (:mod:`shoal.training.blocked`) within ``memory_budget`` bytes (default
    :data:`BLOCKED_BUDGET`), and layer 0 reads its rows through ``features`` (a budgeted
    store; default ``data.features``). Other models run in batches of ``batch_size`` targets
    with their full in-neighbourhoods; models without ``layer_forward`` on full L-hop
    neighbourhoods sampled with fanout -1.
    ``predict=True`` returns each node's predicted class instead (argmax taken block by block).
    ``new_output(shape, dtype)`` creates the result (e.g. a memory-mapped ``.npy`` of every
    node, written block by block, returned as is; ``nodes`` strictly increasing).
    """
    model.eval()
    nodes = np.asarray(nodes, dtype=np.int64)
    if new_output is not None and len(nodes) > 1 and not (np.diff(nodes) > 0).all():
        raise ValueError("new_output needs strictly increasing nodes")
    alloc = new_output or np.empty
    if sampler is None:
        sampler = NeighborSampler(
            data.indptr,
            data.indices,
            (-1,),
            num_nodes=data.num_nodes,
            degrees=data.degrees,
            schema=getattr(data, "schema", None),
        )
    if not hasattr(model, "layer_forward"):
        out = _sampled_inference(
            model, data, nodes, sampler, normalize_features, batch_size, memory_budget
        )
        return _as_predictions(out, len(nodes)) if predict else out
    layers = sum_layers(model)
    if layers is not None:
        return _blocked_inference(
            layers,
            data,
            nodes,
            predict,
            new_output,
            features=features,
            normalize_features=normalize_features,
            memory_budget=memory_budget,
            show_progress=show_progress,
            scratch_dir=scratch_dir,
        )
    layers = int(model.num_layers)
    seg = Segment(
        key=0,
        sampler=sampler,
        num_core=data.num_nodes,
        inputs=data.features,
        remote=np.empty(0, np.int64),
        targets=nodes,
        needed=receptive_field(data.indptr, data.indices, data.num_nodes, nodes, layers),
    )
    result: np.ndarray | None = None

    def keep(_seg: Segment, rows: np.ndarray, h: np.ndarray) -> None:
        nonlocal result
        if result is None:
            result = alloc((len(nodes), h.shape[1]), np.dtype(np.float32))
        result[rows] = h

    # beside the graph directory (in-memory data: the current directory)
    beside = data.path if data.path is not None else Path.cwd() / "data"
    with Scratch(scratch_dir, beside=beside) as scratch:
        run_layers(
            model,
            [seg],
            keep,
            normalize_features=normalize_features,
            batch_size=batch_size,
            scratch=scratch,
            show_progress=show_progress,
        )
    out = result if result is not None else np.empty((0, 0), np.float32)
    return _as_predictions(out, len(nodes)) if predict else out


def _as_predictions(logits: np.ndarray, n: int) -> np.ndarray:
    return logits.argmax(1).astype(np.int32) if n and logits.size else np.empty(n, np.int32)


def _blocked_inference(layers, data, nodes, predict, alloc, **kwargs) -> np.ndarray:
    uniq, inverse = np.unique(nodes, return_inverse=True)
    res: np.ndarray | None = None

    def keep(pos: np.ndarray, h: np.ndarray) -> None:
        nonlocal res
        if res is None:
            shape = (len(uniq),) if predict else (len(uniq), h.shape[1])
            dtype = np.dtype(np.int32 if predict else np.float32)
            res = (alloc or np.empty)(shape, dtype)
        res[pos] = h.argmax(1) if predict else h

    _run_blocked(layers, data, uniq, keep, **kwargs)
    if res is None:
        return np.empty(len(nodes), np.int32) if predict else np.empty((len(nodes), 0), np.float32)
    return res if alloc is not None else res[inverse]  # alloc: nodes are sorted and unique


def _run_blocked(
    layers,
    data,
    targets,
    on_output,
    *,
    features=None,
    normalize_features=False,
    memory_budget=None,
    show_progress=None,
    scratch_dir=None,
    **_,
) -> None:
    """:func:`blocked_layers` over ``data`` for the sorted unique ``targets`` (the other
    arguments: :func:`layerwise_inference`'s)."""
    n = data.num_nodes
    if data.degrees is None:
        deg = np.zeros(n, np.float32)
        deg[: len(data.indptr) - 1] = np.diff(np.asarray(data.indptr, np.int64))
    else:
        deg = np.asarray(data.degrees, np.float32)
    beside = data.path if data.path is not None else Path.cwd() / "data"
    src = features if features is not None else data.features
    norm = normalize_features and features is None  # a DiskFeatures normalises itself
    with Scratch(scratch_dir, beside=beside) as scratch:
        blocked_layers(
            layers,
            src,
            data.indptr,
            data.indices,
            deg,
            targets,
            on_output,
            new_array=scratch.array,
            spill=scratch.spill,
            budget=memory_budget or BLOCKED_BUDGET,
            normalize=norm,
            show_progress=show_progress,
        )


def evaluation_bytes(num_targets: int, num_nodes: int) -> int:
    """Memory an exact :func:`evaluate` of ``num_targets`` nodes of a ``num_nodes``-node graph
    holds beside its ``memory_budget`` (whose blocks hold the accumulators and in-edges): per
    target its id and a byte of split flags; per node of the graph its in-degree (float32)
    and its id in the nodes the first layers compute (at most every node); ids are int32
    below 2**31 nodes (:func:`~shoal.training.blocked.id_dtype`). The temporaries of
    building them (a few ids per target, before any block exists) stay below the blocks."""
    idb = id_dtype(int(num_nodes)).itemsize
    return (idb + 1) * int(num_targets) + (4 + idb) * int(num_nodes)


def evaluate(
    model: nn.Module, data: TrainData, splits: tuple[str, ...] = ("val", "test"), **kwargs
) -> dict[str, float]:
    """Accuracy on each split by exact :func:`layerwise_inference` (one pass for all splits).

    When the layers run blocked (:func:`~shoal.training.blocked.sum_layers`), predictions are
    counted block by block as they come (each block's labels read then): the evaluation holds
    the targets' ids and a byte of split flags each (:func:`evaluation_bytes`), not their
    logits, predictions and labels."""
    ids = [np.asarray(data.split(s), dtype=np.int64) for s in splits]
    counted = _counted_evaluation(model, data, splits, ids, **kwargs)
    if counted is not None:
        return counted
    nodes = np.concatenate(ids) if ids else np.empty(0, np.int64)
    pred = layerwise_inference(model, data, nodes, predict=True, **kwargs)
    return _accuracies(data, splits, ids, nodes, pred)


def _accuracies(data, splits, ids, nodes, pred) -> dict[str, float]:
    """Accuracy per split of the predictions ``pred`` of ``nodes`` (the splits' ``ids``
    concatenated)."""
    y = np.asarray(data.labels[nodes]) if len(nodes) else np.empty(0, np.int64)
    release_pages(data.labels)  # a mapped label file's pages leave this process
    out, pos = {}, 0
    for s, idx in zip(splits, ids, strict=True):
        n = len(idx)
        out[s] = float((pred[pos : pos + n] == y[pos : pos + n]).mean()) if n else float("nan")
        pos += n
    return out


@torch.no_grad()
def sampled_evaluate(
    model: nn.Module,
    data: TrainData,
    splits: tuple[str, ...],
    *,
    sampler: NeighborSampler,
    fanouts: tuple[int, ...],
    seed: int = 0,
    normalize_features: bool = False,
    batch_size: int = 1024,
    memory_budget: int | None = None,
) -> dict[str, float]:
    """Accuracy on each split from sampled neighbourhoods (``fanouts``, one per layer, hop 1
    first): GraphStorm's mini-batch validation during training, far cheaper than the exact
    pass when the split is small; the draws are fixed by ``seed`` (batch ``i`` of the
    splits' concatenated nodes from a stream of ``seed`` and ``i``), so successive evaluations of
    a run compare weights on the same neighbourhoods."""
    model.eval()
    ids = [np.asarray(data.split(s), dtype=np.int64) for s in splits]
    nodes = np.concatenate(ids) if ids else np.empty(0, np.int64)
    logits = _sampled_inference(
        model,
        data,
        nodes,
        sampler,
        normalize_features,
        batch_size,
        memory_budget,
        fanouts=fanouts,
        seed=seed,
    )
    return _accuracies(data, splits, ids, nodes, _as_predictions(logits, len(nodes)))


def _union_flags(
    ids: list[np.ndarray], size: int = 2**63 - 1
) -> tuple[np.ndarray, np.ndarray] | None:
    """The sorted union of ``ids`` (each sorted and unique, below ``size``; as
    :func:`~shoal.training.blocked.id_dtype` ids) and a bit per array per node (up to 8
    arrays); None when an array is unsorted or repeats a node."""
    if len(ids) > 8 or any(len(a) > 1 and not (np.diff(a) > 0).all() for a in ids):
        return None
    dt = id_dtype(size)
    uniq = np.concatenate([np.asarray(a, dt) for a in ids]) if ids else np.empty(0, dt)
    uniq.sort(kind="stable")  # merges the sorted runs
    if len(uniq) > 1:
        keep = np.empty(len(uniq), np.bool_)
        keep[0] = True
        np.not_equal(uniq[1:], uniq[:-1], out=keep[1:])
        uniq = uniq[keep]
        del keep
    flags = np.zeros(len(uniq), np.uint8)
    for b, a in enumerate(ids):
        for c in range(0, len(a), 1 << 22):  # in chunks: positions are int64
            flags[np.searchsorted(uniq, np.asarray(a[c : c + (1 << 22)], dt))] |= np.uint8(1 << b)
    return uniq, flags


@torch.no_grad()
def _counted_evaluation(model, data, splits, ids, **kwargs) -> dict[str, float] | None:
    """:func:`evaluate` with the blocked layers, counting correct predictions as the blocks
    come; None when the model's layers are not sums or a split is unsorted or repeats."""
    layers = sum_layers(model) if hasattr(model, "layer_forward") else None
    union = _union_flags(ids, data.num_nodes) if layers is not None else None
    if union is None:
        return None
    uniq, flags = union
    correct = np.zeros(len(ids), np.int64)
    labels = data.labels

    def count(pos: np.ndarray, h: np.ndarray) -> None:
        ok = h.argmax(1) == np.asarray(labels[uniq[pos]])
        f = flags[pos]
        for b in range(len(ids)):
            correct[b] += int(np.count_nonzero(ok & ((f >> b) & 1).astype(np.bool_)))

    model.eval()
    _run_blocked(layers, data, uniq, count, **kwargs)
    release_pages(labels)  # a mapped label file's pages leave this process
    return {
        s: float(correct[b] / len(a)) if len(a) else float("nan")
        for b, (s, a) in enumerate(zip(splits, ids, strict=True))
    }
