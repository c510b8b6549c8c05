"""Messages between the ``disagg`` engine's batch and compute workers (Armada, Section 5).

A **global batch** carries the ``G`` mini-batches of one compute iteration ("mini batch
grouping": the feature rows of the union of their nodes are sent once; without grouping, an
ablation, the union is the concatenation of the mini-batches' nodes). It travels as three
point-to-point messages (gloo ``isend``/``recv``): a fixed header (acknowledged cache update,
lengths), one int64 array (per mini-batch: seeds, its nodes as positions in the union, its
blocks; the union's ids; the positions whose rows are sent) and one float32 array (the sent
rows, in position order). A typed store's int64 array also carries every node's type and
original id (after the positions sent) and every block's edges' relations (after its
``rowptr``); a link batch's, at its end, each mini-batch's positives ``(B, 2)`` and negative
destinations ``(B, K)`` (after ``B`` and ``K``), its seeds being the step's sorted end nodes
(:class:`~shoal.engines.linktask.LinkStep`). A cache **update** (compute -> batch worker) is a
header ``(version, inserted, evicted)`` and the ids.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from shoal.graph.blocks import Block, MiniBatch

__all__ = [
    "GlobalBatch",
    "pack_batch",
    "recv_batch",
    "recv_update",
    "send_update",
    "unpack",
    "group_union",
]

TAG_META, TAG_INTS, TAG_ROWS, TAG_UPDATE, TAG_UPDATE_IDS = 11, 12, 13, 14, 15


@dataclass
class GlobalBatch:
    """A received global batch: its nodes (``ids``), the positions sent (``sent``, rows in
    ``rows``), and per mini-batch ``(num_seeds, positions in ids, [(edge_index, rowptr,
    num_src, num_dst, edge_type)] per layer)``; a typed store's also has every node's type
    (``types``) and original id (``orig``), and each layer its edges' relations (``edge_type``,
    None when untyped); a link batch has each mini-batch's positives and negatives
    (``links``)."""

    ack: int
    ids: np.ndarray
    sent: np.ndarray
    rows: np.ndarray
    minibatches: list[
        tuple[int, np.ndarray, list[tuple[np.ndarray, np.ndarray, int, int, np.ndarray | None]]]
    ]
    types: np.ndarray | None = None
    orig: np.ndarray | None = None
    #: per mini-batch, a link batch's positives ``(B, 2)`` and negatives ``(B, K)``
    links: list[tuple[np.ndarray, np.ndarray]] | None = None

    def blocks(self, k: int, degrees: np.ndarray) -> tuple[np.ndarray, list[Block]]:
        """Mini-batch ``k``'s positions in ``ids`` and its blocks (a typed store's with their
        edges' relations, their sources' types and original ids)."""
        _, pos, layers = self.minibatches[k]
        n_id = self.ids[pos]
        types = None if self.types is None else torch.from_numpy(self.types[pos])
        orig = None if self.orig is None else self.orig[pos]
        out = []
        for ei, rp, ns, nd, et in layers:
            deg = torch.from_numpy(np.asarray(degrees[n_id[:ns]], np.float32))
            blk = Block(torch.from_numpy(ei), ns, nd, torch.from_numpy(rp), deg)
            if et is not None:
                blk.edge_type = torch.from_numpy(et)
                blk.src_type = types[:ns]
                blk.node_ids = orig[:ns]
            out.append(blk)
        return pos, out


def group_union(mbs: list[MiniBatch], grouping: bool) -> tuple[np.ndarray, list[np.ndarray]]:
    """The global batch's nodes and each mini-batch's positions among them."""
    allids = np.concatenate([mb.n_id for mb in mbs]) if mbs else np.zeros(0, np.int64)
    offs = np.cumsum([0] + [len(mb.n_id) for mb in mbs])
    if not grouping:
        return allids, [np.arange(offs[i], offs[i + 1]) for i in range(len(mbs))]
    ids, inv = np.unique(allids, return_inverse=True)
    return ids, [inv[offs[i] : offs[i + 1]].astype(np.int64) for i in range(len(mbs))]


def pack_batch(
    ack: int,
    mbs: list[MiniBatch],
    ids: np.ndarray,
    pos: list[np.ndarray],
    sent: np.ndarray,
    rows: np.ndarray,
    typed: tuple[np.ndarray, np.ndarray] | None = None,
    links: list[tuple[np.ndarray, np.ndarray]] | None = None,
) -> list[torch.Tensor]:
    """The three tensors of a global batch (module docstring); ``typed``: a typed store's
    node type and original id of every node of ``ids`` (the blocks carry their relations);
    ``links``: a link batch's positives and negatives per mini-batch."""
    layers = len(mbs[0].blocks) if mbs else 0
    head = [len(mbs), layers, len(ids), len(sent)]
    body: list[np.ndarray] = []
    for mb, p in zip(mbs, pos):
        head += [mb.num_seeds, len(p)]
        body.append(p)
        for b in mb.blocks:
            head += [b.num_src, b.num_dst, b.edge_index.shape[1]]
            body += [b.edge_index.numpy().reshape(-1), b.rowptr.numpy()]
            if typed is not None:
                if b.edge_type is None:
                    raise ValueError("a typed store's batch has a block without relations")
                body.append(b.edge_type.numpy())
    nodes = [] if typed is None else [np.asarray(typed[0]), np.asarray(typed[1])]
    for pos, neg in links or ():
        body += [np.array(neg.shape, np.int64), pos.reshape(-1), neg.reshape(-1)]
    ints = np.concatenate([np.asarray(head, np.int64), ids, sent, *nodes, *body]).astype(np.int64)
    meta = torch.tensor([ack, len(ints), len(sent), rows.shape[1] if rows.ndim == 2 else 0])
    return [meta, torch.from_numpy(ints), torch.from_numpy(np.ascontiguousarray(rows))]


def unpack(
    meta: torch.Tensor,
    ints: torch.Tensor,
    rows: torch.Tensor,
    typed: bool = False,
    link: bool = False,
) -> GlobalBatch:
    """The global batch of :func:`pack_batch`'s tensors (``typed``: a typed store's;
    ``link``: a link batch's)."""
    a = ints.numpy()
    g, layers, n_ids, n_sent = (int(x) for x in a[:4])
    h = 4
    spec = []
    for _ in range(g):
        seeds, n_pos = int(a[h]), int(a[h + 1])
        h += 2
        lay = [tuple(int(x) for x in a[h + 3 * k : h + 3 * k + 3]) for k in range(layers)]
        h += 3 * layers
        spec.append((seeds, n_pos, lay))
    ids = a[h : h + n_ids]
    h += n_ids
    sent = a[h : h + n_sent]
    h += n_sent
    types = orig = None
    if typed:
        types, orig = a[h : h + n_ids], a[h + n_ids : h + 2 * n_ids]
        h += 2 * n_ids
    mbs = []
    for seeds, n_pos, lay in spec:
        pos = a[h : h + n_pos]
        h += n_pos
        blocks = []
        for ns, nd, ne in lay:
            ei = a[h : h + 2 * ne].reshape(2, ne)
            h += 2 * ne
            rp = a[h : h + nd + 1]
            h += nd + 1
            et = None
            if typed:
                et = a[h : h + ne]
                h += ne
            blocks.append((ei, rp, ns, nd, et))
        mbs.append((seeds, pos, blocks))
    links = [] if link else None
    for _ in range(g if link else 0):
        b, k = int(a[h]), int(a[h + 1])
        pos, neg = a[h + 2 : h + 2 + 2 * b], a[h + 2 + 2 * b : h + 2 + 2 * b + b * k]
        links.append((pos.reshape(b, 2), neg.reshape(b, k)))
        h += 2 + 2 * b + b * k
    return GlobalBatch(int(meta[0]), ids, sent, rows.numpy(), mbs, types, orig, links)


def recv_batch(
    src: int, dim: int, typed: bool = False, link: bool = False
) -> tuple[GlobalBatch, int]:
    """Receive one global batch from rank ``src`` (``typed``: a typed store's; ``link``: a
    link batch); returns it and the bytes received."""
    meta = torch.empty(4, dtype=torch.int64)
    dist.recv(meta, src, tag=TAG_META)
    ints = torch.empty(int(meta[1]), dtype=torch.int64)
    dist.recv(ints, src, tag=TAG_INTS)
    rows = torch.empty((int(meta[2]), dim), dtype=torch.float32)
    if rows.numel():
        dist.recv(rows, src, tag=TAG_ROWS)
    return unpack(meta, ints, rows, typed, link), 32 + ints.numel() * 8 + rows.numel() * 4


def send_update(dst: int, version: int, inserted: np.ndarray, evicted: np.ndarray) -> list:
    """Send a cache update to batch worker rank ``dst`` (non-blocking; keep the handles)."""
    head = torch.tensor([version, len(inserted), len(evicted)], dtype=torch.int64)
    ids = torch.from_numpy(np.concatenate([inserted, evicted]).astype(np.int64))
    works = [dist.isend(head, dst, tag=TAG_UPDATE)]
    if ids.numel():
        works.append(dist.isend(ids, dst, tag=TAG_UPDATE_IDS))
    return [works, head, ids]


def recv_update(src: int, head: torch.Tensor | None = None):
    """Receive one cache update from rank ``src`` (``head`` already received, if given)."""
    if head is None:
        head = torch.empty(3, dtype=torch.int64)
        dist.recv(head, src, tag=TAG_UPDATE)
    n_ins, n_ev = int(head[1]), int(head[2])
    ids = torch.empty(n_ins + n_ev, dtype=torch.int64)
    if ids.numel():
        dist.recv(ids, src, tag=TAG_UPDATE_IDS)
    a = ids.numpy()
    return int(head[0]), a[:n_ins], a[n_ins:], 24 + 8 * len(a)
