"""Probes of this machine's costs for the automatic plan (:mod:`shoal.engines.autoplan`).

As NeutronStar's Algorithm 4 line 1 probes ``T_v``, ``T_e`` and ``T_c`` before splitting the
dependencies, the automatic plan measures, on the store it will train and with the model it
will train, what one mini-batch costs (sampling, the halo share of its rows, their gather with
direct reads and from memory, forward + backward + Adam), a part's sequential read rate, every
layer on up to 2048 core nodes with all their in-edges, and the network's bandwidth and round
trip (or a given link rate). Ranks that will share a machine's cores probe at the same time
(:func:`probe_in_group`; ``shoal plan`` starts them here: :func:`spawn_probe`), as they will
contend while training (docs/distributed.md#choosing-an-engine-automatically).
"""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from shoal.nn.base import BlockGNN, layer_widths
from shoal.rows.direct import load_array
from shoal.rows.parts import part_rows
from shoal.sample.sampler import NeighborSampler
from shoal.store.reader import Store
from shoal.training import TrainConfig, model_from_config
from shoal.utils.arrays import unique_sorted

__all__ = [
    "MachineCosts",
    "parse_rate",
    "probe_group_network",
    "probe_in_group",
    "probe_machine",
    "probe_network",
    "spawn_probe",
]

log = logging.getLogger(__name__)


#: tries of the probing workers' rendezvous (:func:`spawn_probe`)
PROBE_ATTEMPTS = 3
_CONNECTION_ERRORS = ("Connection reset", "Connection refused", "Address already in use")

#: round-trip latency assumed for a given link rate (a switched data-centre network)
GIVEN_LATENCY = 50e-6


@dataclass(kw_only=True)
class MachineCosts:
    """What the probes measured (seconds, bytes; per mini-batch of part 0 unless stated)."""

    sample_s: float
    batch_edges: float
    batch_rows: float
    halo_fraction: float
    remote_scale: float
    gather_mem_s: float
    seq_read_bytes_per_s: float
    gather_s: float
    compute_s: float
    layer_s: list[float]
    layer_nodes: int
    layer_sources: int
    net_bytes_per_s: float
    net_latency_s: float
    network: str
    params: int = 0
    widths: list[int] | None = None
    allreduce_s: float | None = None
    ranks: int = 1
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_rate(text: str) -> float:
    """``"10gbit"``, ``"1gbit"``, ``"500mbit"`` -> bytes per second."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([kmg])bit\s*", text.lower())
    if not m:
        raise ValueError(f"network rate must look like 1gbit, 10gbit or 500mbit, got {text!r}")
    return float(m.group(1)) * {"k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8


def probe_network(nbytes: int = 32 << 20, pings: int = 200) -> tuple[float, float]:
    """(bytes per second, round-trip seconds) of a loopback TCP connection."""
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            for _ in range(pings):
                conn.sendall(conn.recv(1))
            left = nbytes
            while left > 0:
                left -= len(conn.recv(min(left, 1 << 20)))
            conn.sendall(b"k")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    with socket.create_connection(("127.0.0.1", port)) as c:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t0 = time.perf_counter()
        for _ in range(pings):
            c.sendall(b"p")
            c.recv(1)
        rtt = (time.perf_counter() - t0) / pings
        chunk = bytes(1 << 20)
        t0 = time.perf_counter()
        for i in range(0, nbytes, len(chunk)):
            c.sendall(chunk[: min(len(chunk), nbytes - i)])
        c.recv(1)
        bw = nbytes / (time.perf_counter() - t0)
    t.join()
    srv.close()
    return bw, rtt


def _seeds(part: Any, batch_size: int, rng: np.random.Generator) -> np.ndarray:
    train = np.flatnonzero(np.asarray(part.train_mask))
    pool = train if train.size else np.arange(part.num_core)
    return np.sort(rng.choice(pool, size=min(batch_size, pool.size), replace=False))


def _remote_scale(mb: Any, num_core: int) -> float:
    """How much larger the batch is when the owners also expand its halo nodes (distributed
    sampling, ``minibatch``/``disagg``) than in the part alone, where halo nodes are leaves:
    the outermost hop's new rows grow by ``1 / (1 - h)``, ``h`` the halo share of the nodes
    it expands."""
    if len(mb.blocks) < 2 or mb.n_id.size == 0:
        return 1.0
    outer = mb.blocks[0]
    h = float((mb.n_id[: outer.num_dst] >= num_core).mean())
    grown = outer.num_dst + (outer.num_src - outer.num_dst) / max(1.0 - h, 0.1)
    return grown / max(outer.num_src, 1)


def _seq_read_rate(feats: Any, nbytes: int = 64 << 20) -> float:
    """Bytes per second of a sequential read of the first ``nbytes`` of ``feats`` from its
    file (:func:`~shoal.rows.direct.load_array`; infinite for rows in memory or none)."""
    if feats is None or feats.shape[0] == 0 or getattr(feats, "filename", None) is None:
        return float("inf")
    rows = max(1, min(feats.shape[0], nbytes // max(feats[0].nbytes, 1)))
    head = feats[:rows]
    t = time.perf_counter()
    got = load_array(head)
    return got.nbytes / max(time.perf_counter() - t, 1e-9)


def _largest_file(part: Any) -> Any:
    """A typed part's largest feature file (a node type's rows), None when none has rows."""
    arrays = [part.type_features(n) for n in part.store.type_feature_dims]
    arrays = [a for a in arrays if a is not None and a.shape[0]]
    return max(arrays, key=lambda a: a.nbytes, default=None)


def _median_time(fn, repeats: int) -> float:
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def _probe_layers(
    model: Any,
    part: Any,
    sampler: NeighborSampler,
    width: int,
    rng: np.random.Generator,
    repeats: int,
    ids_of: Any = None,
    nodes: int = 2048,
) -> tuple[list[float], int, int]:
    """Seconds of every layer (forward + backward) on ``nodes`` random core nodes of
    ``part`` with all their in-edges, the node count and the block's source count (0, 0:
    the model has no layers to probe). A slow layer (over 0.5 s) is timed once."""
    if not isinstance(model, BlockGNN) or part.num_core == 0:
        return [], 0, 0
    k = min(nodes, part.num_core)
    dst = np.sort(rng.choice(part.num_core, size=k, replace=False))
    mb = sampler.sample(dst, 0, fanouts=(-1,))
    blk = (ids_of(mb) if ids_of is not None else mb.blocks)[0]
    out = []
    for layer, w in enumerate(layer_widths(model, width)[:-1]):
        x = torch.randn(blk.num_src, w, requires_grad=True)

        def step(layer: int = layer, x: torch.Tensor = x) -> None:
            model.layer_forward(layer, x, blk).sum().backward()

        t = _median_time(step, 1)
        out.append(t if t > 0.5 else _median_time(step, repeats))
    model.zero_grad(set_to_none=True)
    return out, k, int(blk.num_src)


def probe_machine(
    store: Store,
    config: TrainConfig,
    *,
    network: str | tuple[float, float, str] | None = None,
    repeats: int = 3,
    part: int | None = None,
) -> MachineCosts:
    """Probe the costs of training ``config`` on ``store`` here (module docstring); a few
    seconds. ``network``: None or ``"loopback"`` probes loopback TCP; a rate (``"10gbit"``)
    is taken as given, as is a measured ``(bytes per second, round trip, label)``. ``part``:
    the part probed (default the largest)."""
    t_start = time.perf_counter()
    if part is None:
        part = max(range(store.num_parts), key=lambda i: store.meta["parts"][i]["num_core"])
    part = store.part(part)
    rng = np.random.default_rng(config.run.seed)
    n_local = part.num_core + part.num_halo
    typed = store.schema is not None
    local = np.concatenate([part.core_ids, np.asarray(part.halo_ids, np.int64)])
    sampler = NeighborSampler(
        part.indptr,
        part.indices,
        config.sampling.fanouts,
        num_nodes=n_local,
        # a typed part: fanouts per relation, its blocks labelled
        schema=store.schema,
        node_type=store.type_of(local) if typed else None,
        edge_types=np.asarray(part.edge_types) if typed else None,
    )
    # the blocks a model sees: a typed part's carry their sources' original ids
    ids_of = (lambda mb: mb.with_node_ids(store.to_orig(local[mb.n_id]))) if typed else None
    batches = []
    sample_s = _median_time(
        lambda: batches.append(sampler.sample(_seeds(part, config.sampling.batch_size, rng))),
        repeats,
    )
    edges = float(np.mean([sum(b.edge_index.shape[1] for b in mb.blocks) for mb in batches]))
    rows = float(np.mean([mb.n_id.size for mb in batches]))
    halo = float(np.mean([(mb.n_id >= part.num_core).mean() for mb in batches]))
    remote = float(np.mean([_remote_scale(mb, part.num_core) for mb in batches]))
    mb = batches[-1]
    # core rows through the run's row source (a typed part's: every type's, padded)
    reader = part_rows(part, threads=config.memory.io_threads)
    ids = unique_sorted(mb.n_id)
    ids = ids[ids < (part.num_core if reader is not None else 0)]
    width = int(store.feature_dim or 1)
    gather_s = gather_mem_s = 0.0
    if reader is not None and ids.size:
        out = np.empty((ids.size, width), dtype=reader.dtype)
        gather_s = _median_time(lambda: reader.read(ids, out), repeats) * mb.n_id.size / ids.size
        held = out.copy()  # the rows as a cache in memory holds them
        order = np.random.default_rng(0).permutation(ids.size)
        gather_mem_s = _median_time(lambda: np.take(held, order, 0, out), repeats)
        gather_mem_s *= mb.n_id.size / ids.size
    if reader is not None:
        reader.close()
    seq = _seq_read_rate(_largest_file(part) if typed else part.features)
    model = model_from_config(
        config, in_dim=width, out_dim=int(store.num_classes or 2), schema=store.schema
    )
    blocks = ids_of(mb) if typed else mb.blocks
    opt = torch.optim.Adam(model.parameters(), lr=config.optim.lr)
    x = torch.randn(mb.n_id.size, width)
    y = torch.randint(0, int(store.num_classes or 2), (mb.num_seeds,))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x, blocks), y).backward()
        opt.step()

    step()  # warm-up (allocations, first kernels)
    compute_s = _median_time(step, repeats)
    layer_s, k, sources = _probe_layers(model, part, sampler, width, rng, repeats, ids_of)
    if isinstance(network, tuple):
        bw, lat, label = network
    elif network in (None, "loopback"):
        bw, lat = probe_network()
        label = "loopback (probed)"
    else:
        bw, lat, label = parse_rate(network), GIVEN_LATENCY, f"{network} (given)"
    return MachineCosts(
        sample_s=sample_s,
        batch_edges=edges,
        batch_rows=rows,
        halo_fraction=halo,
        remote_scale=remote,
        seq_read_bytes_per_s=seq,
        gather_mem_s=gather_mem_s,
        gather_s=gather_s,
        compute_s=compute_s,
        layer_s=layer_s,
        layer_nodes=k,
        layer_sources=sources,
        params=sum(p.numel() for p in model.parameters()),
        widths=layer_widths(model, width) if isinstance(model, BlockGNN) else None,
        net_bytes_per_s=bw,
        net_latency_s=lat,
        network=label,
        seconds=time.perf_counter() - t_start,
    )


def probe_group_network(ctx: Any, nbytes: int = 8 << 20, pings: int = 20) -> tuple[float, float]:
    """(bytes per second, round-trip seconds) between ranks 0 and 1 of the process group (a
    collective: every rank calls it; the result is broadcast from rank 0)."""
    import torch.distributed as dist

    out = torch.zeros(2, dtype=torch.float64)
    if ctx.world_size > 1 and ctx.rank in (0, 1):
        peer = 1 - ctx.rank
        small, big = torch.zeros(1), torch.zeros(nbytes // 4)

        def there_and_back(x: torch.Tensor) -> None:  # rank 0 sends x, rank 1 answers
            if ctx.rank == 0:
                dist.send(x, peer)
                dist.recv(small, peer)
            else:
                dist.recv(x, peer)
                dist.send(small, peer)

        t0 = time.perf_counter()
        for _ in range(pings):
            there_and_back(small)
        rtt = (time.perf_counter() - t0) / pings
        t0 = time.perf_counter()
        there_and_back(big)
        out[:] = torch.tensor([nbytes / (time.perf_counter() - t0), rtt])
    if ctx.world_size > 1:
        dist.broadcast(out, 0)
    return float(out[0]), float(out[1])


def _mean_costs(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The ranks' probes averaged (numbers and lists of numbers; the rest from rank 0)."""
    out = dict(rows[0])
    for k, v in out.items():
        if isinstance(v, float):
            out[k] = float(np.mean([r[k] for r in rows]))
        elif k == "layer_s" and v:
            out[k] = np.mean([r[k] for r in rows], axis=0).tolist()
    return out


def probe_in_group(
    store: Store, config: TrainConfig, ctx: Any, *, repeats: int = 3
) -> MachineCosts:
    """Every rank of the group probes at once, each on its own part (the contention of
    training); ranks 0 and 1 time the exchange, all ranks an all-reduce of the model's
    parameters; returns the ranks' mean on every rank (a collective)."""
    import torch.distributed as dist

    bw, rtt = probe_group_network(ctx)
    dist.barrier()
    c = probe_machine(
        store,
        config,
        network=(bw, rtt, "between the run's ranks (probed)"),
        repeats=repeats,
        part=ctx.rank % max(store.num_parts, 1),
    )
    buf = torch.zeros(max(c.params, 1))
    dist.barrier()
    c.allreduce_s = _median_time(lambda: dist.all_reduce(buf), 2 * repeats + 1)
    c.ranks = ctx.world_size
    rows: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(rows, c.to_dict())
    return MachineCosts(**_mean_costs(rows))


def _spawned(rank: int, world: int, port: int, store: str, config: dict, out: str) -> None:
    import json
    import os

    from shoal.distributed import DistConfig, process_group
    from shoal.utils.threads import set_threads, threads_per_process

    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
    )
    set_threads(threads_per_process(world))
    with process_group(DistConfig(backend="gloo")) as ctx:
        c = probe_in_group(Store.open(store), TrainConfig.from_dict(config), ctx)
        if rank == 0:
            with open(out, "w") as f:
                json.dump(c.to_dict(), f)


def _probe_options(config: TrainConfig) -> dict[str, Any]:
    """``config`` for the probing workers: the engine's shared options only (a probe never
    reads an engine's own), so the training layer reads it back."""
    return {**config.to_dict(), "engine": config.engine.shared()}


def spawn_probe(store: str, config: TrainConfig, workers: int, scratch: str) -> MachineCosts:
    """:func:`probe_in_group` in ``workers`` processes started here (the workers of one
    machine, sharing its cores); ``scratch``: a directory for the result (a few bytes)."""
    import json
    import os
    import tempfile

    import torch.multiprocessing as mp

    fd, out = tempfile.mkstemp(prefix="shoal-probe-", suffix=".json", dir=scratch)
    os.close(fd)
    try:
        for attempt in range(1, PROBE_ATTEMPTS + 1):
            # a port free now may be taken before the workers bind it (another process on
            # the machine): a rendezvous that fails on its connections is tried again
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            try:
                mp.spawn(
                    _spawned,
                    args=(workers, port, str(store), _probe_options(config), out),
                    nprocs=workers,
                    join=True,
                )
                break
            except Exception as e:  # noqa: BLE001 - re-raised unless the connection failed
                if attempt == PROBE_ATTEMPTS or not _connection_failed(e):
                    raise
                log.warning("probing workers: %s; trying again on another port", e)
        with open(out) as f:
            return MachineCosts(**json.load(f))
    finally:
        os.unlink(out)


def _connection_failed(error: BaseException) -> bool:
    """Whether a worker failed on its process group's connections (not on the probe)."""
    return any(m in str(error) for m in _CONNECTION_ERRORS)
