"""Which rows should the feature cache hold? Hit rates of cache policies on a real access trace.

    python bench/ooc_cache_policy.py [--graph bench/work/ooc/g10m] [--epochs 2]

Samples ``--epochs`` epochs of GraphSAGE mini-batches (fanouts 10,5, batch 1024, seed 0:
exactly the batches ``shoal train`` draws) on the issue-11 graph (``bench/out_of_core.py``
builds it), records every row each batch reads, and replays the trace through caches of 10-40%
of the rows: a static cache of the highest in-degree nodes (shoal's choice), CLOCK (an LRU
approximation) and S3-FIFO (Yang et al., SOSP 2023: small FIFO 10%, main FIFO with 2-bit
frequencies, ghost FIFO). Hit rates are measured on the last epoch (the dynamic caches are
warmed by the earlier ones). Also reports, per epoch, how many distinct rows it needs and how
many 4 KiB pages they touch in file order: what a window read must cover. Writes
``bench/results/ooc_cache_policy.{md,json}``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numba
import numpy as np

from common import RESULTS, WORK, command_line, write_json, write_text_atomic


@numba.njit(cache=True)
def clock(trace, n, cap, start):
    slot = np.full(n, -1, np.int64)
    owner = np.full(cap, -1, np.int64)
    ref = np.zeros(cap, np.uint8)
    hand = hits = seen = 0
    for i in range(trace.shape[0]):
        v = trace[i]
        if slot[v] >= 0:
            ref[slot[v]] = 1
            hits += i >= start
        else:
            while ref[hand]:
                ref[hand] = 0
                hand = (hand + 1) % cap
            if owner[hand] >= 0:
                slot[owner[hand]] = -1
            owner[hand] = v
            slot[v] = hand
            ref[hand] = 1
            hand = (hand + 1) % cap
        seen += i >= start
    return hits / max(seen, 1)


@numba.njit(cache=True)
def s3fifo(trace, n, cap, start):  # long: one replay loop with three queues
    small_cap = max(1, cap // 10)
    main_cap = cap - small_cap
    where = np.zeros(n, np.int8)  # 0 absent, 1 small, 2 main, 3 ghost
    freq = np.zeros(n, np.int8)
    S = np.empty(small_cap + 1, np.int64)
    M = np.empty(main_cap + 1, np.int64)
    G = np.empty(main_cap + 1, np.int64)
    sh = st = sn = mh = mt = mn = gh = gt = gn = 0
    hits = seen = 0
    for i in range(trace.shape[0]):
        v = trace[i]
        w = where[v]
        if w == 1 or w == 2:
            if freq[v] < 3:
                freq[v] += 1
            hits += i >= start
        else:
            while sn + mn >= cap:
                if sn >= small_cap or mn == 0:
                    x = S[sh]
                    sh = (sh + 1) % (small_cap + 1)
                    sn -= 1
                    if freq[x] > 0:
                        while mn >= main_cap:
                            y = M[mh]
                            mh = (mh + 1) % (main_cap + 1)
                            mn -= 1
                            if freq[y] > 0:
                                freq[y] -= 1
                                M[mt] = y
                                mt = (mt + 1) % (main_cap + 1)
                                mn += 1
                            else:
                                where[y] = 0
                        M[mt] = x
                        mt = (mt + 1) % (main_cap + 1)
                        mn += 1
                        where[x] = 2
                        freq[x] = 0
                    else:
                        if gn >= main_cap:
                            z = G[gh]
                            gh = (gh + 1) % (main_cap + 1)
                            gn -= 1
                            if where[z] == 3:
                                where[z] = 0
                        G[gt] = x
                        gt = (gt + 1) % (main_cap + 1)
                        gn += 1
                        where[x] = 3
                else:
                    y = M[mh]
                    mh = (mh + 1) % (main_cap + 1)
                    mn -= 1
                    if freq[y] > 0:
                        freq[y] -= 1
                        M[mt] = y
                        mt = (mt + 1) % (main_cap + 1)
                        mn += 1
                    else:
                        where[y] = 0
            if w == 3:
                M[mt] = v
                mt = (mt + 1) % (main_cap + 1)
                mn += 1
                where[v] = 2
            else:
                S[st] = v
                st = (st + 1) % (small_cap + 1)
                sn += 1
                where[v] = 1
            freq[v] = 0
        seen += i >= start
    return hits / max(seen, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graph", type=Path, default=WORK / "ooc/g10m")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=RESULTS / "ooc_cache_policy")
    a = ap.parse_args()
    from shoal.data.format import GraphDir
    from shoal.sample.sampler import NeighborSampler
    from shoal.training.batches import BatchLoader

    g = GraphDir.open(a.graph)
    csr = g.csr("in")
    indptr, indices = np.asarray(csr.indptr), np.array(csr.indices)
    n = g.num_nodes
    deg = np.diff(indptr)
    sampler = NeighborSampler(indptr, indices, (10, 5), num_nodes=n)
    loader = BatchLoader(
        sampler, None, g.labels(), np.asarray(g.split("train")), batch_size=1024, seed=0
    )
    t0 = time.perf_counter()
    epochs = [[mb.n_id for mb in loader.samples(e)] for e in range(a.epochs)]
    sample_s = time.perf_counter() - t0
    trace = np.concatenate([np.concatenate(e) for e in epochs])
    start = len(trace) - sum(len(x) for x in epochs[-1])
    rank = np.empty(n, np.int64)
    rank[np.argsort(-deg, kind="stable")] = np.arange(n)
    last = trace[start:]
    rows = []
    for frac in (0.1, 0.2, 0.3, 0.4):
        cap = int(frac * n)
        rows.append(
            {
                "fraction": frac,
                "static_degree": float((rank[last] < cap).mean()),
                "clock_lru": clock(trace, n, cap, start),
                "s3fifo": s3fifo(trace, n, cap, start),
            }
        )
    per_epoch = []
    for e in epochs:
        u = np.unique(np.concatenate(e))
        per_epoch.append(
            {
                "accesses": int(sum(len(x) for x in e)),
                "unique_rows": len(u),
                "pages_touched": len(np.unique((128 + u * 512) // 4096)),
            }
        )
    res = {
        "command": command_line("ooc_cache_policy.py"),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "graph": str(a.graph),
        "nodes": n,
        "sample_seconds": sample_s,
        "policies": rows,
        "epochs": per_epoch,
    }
    write_json(a.out.with_suffix(".json"), res)
    md = [
        "# Feature cache policies on the issue-11 access trace",
        "",
        f"Command: `{res['command']}` ({res['date']}). Graph: {a.graph.name} ({n:,} nodes, "
        "128 float32 features, 512 B rows); GraphSAGE fanouts 10,5, batch 1024, seed 0; "
        f"{a.epochs} epochs replayed, hit rates measured on the last.",
        "",
        "| cache (share of rows) | static, by in-degree | CLOCK (LRU) | S3-FIFO |",
        "|---|---|---|---|",
        *(
            f"| {r['fraction']:.0%} | {r['static_degree']:.3f} | {r['clock_lru']:.3f} | "
            f"{r['s3fifo']:.3f} |"
            for r in rows
        ),
        "",
        "| epoch | rows read by its batches | distinct rows | 4 KiB pages they touch |",
        "|---|---|---|---|",
        *(
            f"| {i + 1} | {p['accesses']:,} | {p['unique_rows']:,} | {p['pages_touched']:,} "
            f"of {(128 + n * 512) // 4096:,} |"
            for i, p in enumerate(per_epoch)
        ),
        "",
    ]
    write_text_atomic(a.out.with_suffix(".md"), "\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
