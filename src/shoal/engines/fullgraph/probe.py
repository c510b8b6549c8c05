"""NeutronStar's cost probe (Q. Wang et al., SIGMOD 2022, Algorithm 4 line 1) for the
``fullgraph`` engine's dependency split: ``T_v``, ``T_e`` and ``T_c`` per output dimension,
measured on this machine with the model being trained; and the block type the engine builds
from CSR arrays. On a typed store (``schema``) the probe's blocks are typed (the relational
models refuse a block with edges and no relations): the sources take every node type in turn
(original ids inside each type's range, for a featureless type's embedding row) and the edges
every relation in turn.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import torch
import torch.distributed as dist

from shoal.data.hetero import HeteroSchema
from shoal.engines.fullgraph.depcomm import RowExchange
from shoal.engines.fullgraph.deps import Costs
from shoal.graph.blocks import Block
from shoal.nn.base import BlockGNN

__all__ = ["block_from_csr", "probe_costs"]


def block_from_csr(rowptr: np.ndarray, src: np.ndarray, num_src: int, deg: np.ndarray) -> Block:
    """A :class:`Block` from a CSR by target (``rowptr``, sources ``src`` in ``[0, num_src)``)
    and the sources' full in-degrees ``deg``."""
    rowptr = torch.from_numpy(np.asarray(rowptr, np.int64))
    counts = rowptr[1:] - rowptr[:-1]
    dst = torch.repeat_interleave(torch.arange(len(counts)), counts)
    return Block(
        torch.stack([torch.from_numpy(np.asarray(src, np.int64)), dst]),
        int(num_src),
        len(counts),
        rowptr,
        torch.from_numpy(np.asarray(deg, np.float32)),
    )


_PROBE_FLOATS = 1 << 20  # 4 MB per peer in the T_c probe


def _typed(blk: Block, schema: HeteroSchema) -> Block:
    """``blk`` with node types, original ids and relations (every type and relation in turn)."""
    n, t = blk.num_src, len(schema.node_types)
    src_type = np.arange(n, dtype=np.int64) % t
    counts = np.array([max(nt.count, 1) for nt in schema.node_types], np.int64)
    offsets = np.asarray(schema.offsets, np.int64)[:t]
    ids = offsets[src_type] + (np.arange(n, dtype=np.int64) // t) % counts[src_type]
    et = np.arange(blk.num_edges, dtype=np.int64) % len(schema.edge_types)
    return replace(
        blk,
        node_ids=ids,
        src_type=torch.from_numpy(src_type),
        edge_type=torch.from_numpy(et),
    )


def probe_costs(
    model: BlockGNN,
    widths: list[int],
    ctx,
    *,
    nodes: int = 2048,
    degree: int = 16,
    repeats: int = 3,
    schema: HeteroSchema | None = None,
) -> Costs:
    """Algorithm 4 line 1: ``T_v``, ``T_e`` (forward + backward of the model's second layer,
    or its first when it has one, on synthetic blocks without and with ``degree`` in-edges per
    node) and ``T_c`` (a row exchange with every peer, forward and back, of ``nodes`` rows but
    at least ``_PROBE_FLOATS`` values, so that it measures the per-row cost the split trades,
    the bandwidth, not one message's latency), per output dimension; medians of ``repeats``,
    averaged over ranks (a collective). ``schema``: a typed store's (typed blocks, module
    docstring)."""
    layer = 1 if model.num_layers > 1 else 0
    d_in, d_out = widths[layer], widths[layer + 1]
    g = torch.Generator().manual_seed(0)
    dev = next(model.parameters()).device

    def timed(deg: int) -> float:
        src = torch.randint(0, nodes, (nodes * deg,), generator=g)
        rowptr = torch.arange(0, nodes * deg + 1, max(deg, 1)) if deg else torch.zeros(nodes + 1)
        blk = block_from_csr(
            rowptr.long().numpy(), src.numpy(), nodes, np.full(nodes, deg, np.float32)
        )
        if schema is not None:
            blk = _typed(blk, schema)
        blk = blk.to(dev)
        x = torch.randn(nodes, d_in).to(dev).requires_grad_()
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            model.layer_forward(layer, x, blk).sum().backward()
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            ts.append(time.perf_counter() - t0)
        model.zero_grad(set_to_none=True)
        return float(np.median(ts))

    t0, t1 = timed(0), timed(degree)
    t_v = t0 / (nodes * d_out)
    t_e = max(t1 - t0, 0.0) / (nodes * degree * d_out)
    t_c = float("inf")
    if ctx.world_size > 1:
        world, rank = ctx.world_size, ctx.rank
        nodes = max(nodes, -(-_PROBE_FLOATS // d_out))  # bandwidth, not latency
        idx = [np.arange(nodes) if r != rank else np.empty(0, np.int64) for r in range(world)]
        ex = RowExchange(
            idx, [nodes if r != rank else 0 for r in range(world)], rank=rank, world=world, tag=999
        )
        h = torch.randn(nodes, d_out)
        ts = []
        for _ in range(repeats):
            dist.barrier()
            t = time.perf_counter()
            got = ex.pull(h)
            ex.push_gradients(got, nodes)
            ts.append(time.perf_counter() - t)
        t_c = float(np.median(ts)) / ((world - 1) * nodes * d_out)
    out = torch.tensor([t_v, t_e, t_c if np.isfinite(t_c) else 0.0], dtype=torch.float64)
    if ctx.world_size > 1:
        dist.all_reduce(out)
        out /= ctx.world_size
    return Costs(float(out[0]), float(out[1]), float(out[2]) if ctx.world_size > 1 else t_c)
