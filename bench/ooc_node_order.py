"""Does a node order for locality cut what the out-of-core windows read? (issue 11)

    python bench/ooc_node_order.py [--graph bench/work/ooc/g10m] [--cache 0.1,0.3]

Samples two epochs of GraphSAGE mini-batches on the issue-11 graph (fanouts 10,5, batch 1024,
seed 0: the batches ``shoal train`` draws; ``bench/out_of_core.py`` builds the graph) and, for
several orders of the feature rows, computes what the second epoch's window read costs when
the epoch is one window (the single-process trainer's case at 4 GiB): the rows it needs
beyond a static cache of the highest in-degree rows (``--cache`` fractions of the rows) are
sorted in file order, widened to 4 KiB pages, and merged into runs when closer than 32 KiB,
exactly as :class:`shoal.rows.direct.RowReader` plans them. Reported: distinct 4 KiB pages,
read requests (runs) and bytes transferred. Orders (a permutation of the rows; the graph is
not rewritten):

- ``original``: the graph's ids;
- ``degree``: by decreasing in-degree (the cache becomes one contiguous range);
- ``bfs``: Cuthill-McKee-like breadth-first order from the highest-degree node, neighbours
  by increasing degree (rows of adjacent nodes sit together);
- ``frequency``: by decreasing number of accesses in the *first* epoch (a pre-sampling pass,
  as GNNLab's PreSC does for its cache), measured on the second: rows that batches tend to
  need are packed into the front of the file.

Writes ``bench/results/ooc_node_order.{md,json}``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numba
import numpy as np

from common import RESULTS, ROOT, WORK, command_line, rel, write_json, write_text_atomic

sys.path.insert(0, str(ROOT / "src"))

from shoal.data.format import GraphDir  # noqa: E402
from shoal.rows import _kernels as K  # noqa: E402
from shoal.rows.direct import MAX_RUN, MERGE_GAP, PAGE  # noqa: E402
from shoal.sample.sampler import NeighborSampler  # noqa: E402
from shoal.training.batches import batch_seed  # noqa: E402


@numba.njit(cache=True)
def _bfs(indptr, indices, deg, start, order):
    """Breadth-first order over the (symmetric) graph from ``start``, neighbours by increasing
    degree, restarting from the next unvisited node of highest degree (``start`` lists all
    nodes by decreasing degree)."""
    n = indptr.shape[0] - 1
    seen = np.zeros(n, np.bool_)
    head = tail = 0
    k = 0
    while tail < n:
        while k < n and seen[start[k]]:
            k += 1
        if head == tail:
            v = start[k]
            seen[v] = True
            order[tail] = v
            tail += 1
        while head < tail:
            v = order[head]
            head += 1
            a, b = indptr[v], indptr[v + 1]
            nb = indices[a:b]
            nb = nb[np.argsort(deg[nb])]
            for u in nb:
                if not seen[u]:
                    seen[u] = True
                    order[tail] = u
                    tail += 1
    return order


def epochs(g: GraphDir, indptr, indices, num: int) -> list[list[np.ndarray]]:
    s = NeighborSampler(indptr, indices, (10, 5), num_nodes=g.num_nodes)
    train = np.asarray(g.split("train"), np.int64)
    out = []
    for epoch in range(num):
        seeds = train[np.random.default_rng([0, epoch]).permutation(len(train))]
        out.append(
            [
                s.sample(seeds[a : a + 1024], batch_seed(0, epoch, i)).n_id
                for i, a in enumerate(range(0, len(seeds), 1024))
            ]
        )
    return out


def read_cost(pos: np.ndarray, row_bytes: int) -> dict:
    """Pages, runs and bytes of one planned read of the rows at file positions ``pos``."""
    pos = np.unique(pos)
    n = len(pos)
    start, end, ptr = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n + 1, np.int64)
    nr = K._plan_runs(pos, 0, row_bytes, row_bytes, PAGE, MERGE_GAP, MAX_RUN, start, end, ptr)
    pages = len(np.unique(pos * row_bytes // PAGE))
    return {
        "rows": int(n),
        "pages": int(pages),
        "runs": int(nr),
        "bytes": int((end[:nr] - start[:nr]).sum()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graph", type=Path, default=WORK / "ooc/g10m")
    ap.add_argument("--cache", default="0.1,0.3", help="static cache sizes, fractions of rows")
    ap.add_argument("--out", type=Path, default=RESULTS / "ooc_node_order")
    a = ap.parse_args()
    t0 = time.perf_counter()
    g = GraphDir.open(a.graph)
    csr = g.csr("in")
    indptr, indices = np.asarray(csr.indptr), np.asarray(csr.indices)
    n = g.num_nodes
    row_bytes = int(g.features().shape[1]) * 4
    deg = np.diff(indptr).astype(np.int64)
    ep = epochs(g, indptr, indices, 2)
    by_deg = np.argsort(-deg, kind="stable")
    freq = np.bincount(np.concatenate(ep[0]), minlength=n)
    orders = {
        "original": np.arange(n, dtype=np.int64),
        "degree": by_deg,
        "bfs": _bfs(indptr, indices, deg, by_deg, np.empty(n, np.int64)),
        "frequency": np.lexsort((-deg, -freq)),  # ties (never accessed) by degree
    }
    need = np.concatenate(ep[1])
    rows = []
    for frac in (float(x) for x in a.cache.split(",")):
        hot = np.zeros(n, np.bool_)
        hot[by_deg[: int(frac * n)]] = True  # the cache holds the same rows in every order
        cold = np.unique(need[~hot[need]])
        for name, order in orders.items():
            position = np.empty(n, np.int64)
            position[order] = np.arange(n)
            c = read_cost(position[cold], row_bytes)
            rows.append({"cache": frac, "order": name, **c, "file_bytes": n * row_bytes})
            print(rows[-1], flush=True)
    res = {
        "command": command_line("ooc_node_order.py"),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "graph": rel(a.graph),
        "seconds": time.perf_counter() - t0,
        "rows": rows,
    }
    write_json(a.out.with_suffix(".json"), res)
    lines = [
        "# Node order for locality: what one epoch's window read costs (issue 11)",
        "",
        f"Command: `{res['command']}` ({res['date']}; graph `{res['graph']}`, 10M nodes, 512 "
        "B rows, 5.12 GB). Second epoch of GraphSAGE 10,5 batches; rows beyond a static "
        "in-degree cache, planned as RowReader plans them (4 KiB pages, runs merged within "
        "32 KiB). `frequency` is measured on the first epoch and applied to the second.",
        "",
        "| cache | order | rows read | 4 KiB pages | runs | GB transferred | of the file |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['cache']:.0%} | {r['order']} | {r['rows']:,} | {r['pages']:,} | "
            f"{r['runs']:,} | {r['bytes'] / 1e9:.2f} | "
            f"{r['bytes'] / r['file_bytes']:.0%} |"
        )
    lines.append("")
    write_text_atomic(a.out.with_suffix(".md"), "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
