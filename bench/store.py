"""Benchmark: building a partitioned store, shoal vs DGL's ``partition_graph`` (METIS).

Graph: R-MAT (a, b, c, d = 0.57, 0.19, 0.19, 0.05; Chakrabarti et al., SDM 2004), 2**20 nodes,
10M directed edges, 128-d float32 features, 10 classes, 10/10/20 % train/val/test splits,
generated in chunks by this script into ``bench/work/rmat1m`` (``shoal data synth rmat`` was not
available when this was written). Each side runs in its own subprocess under
``/usr/bin/time -v`` (peak RSS = "Maximum resident set size" of the whole process):

- ``dgl``: the DGL venv (``bash bench/dgl_env.sh``) loads the edge list and features into
  memory (DGL needs an in-memory ``DGLGraph``), then ``dgl.distributed.partition_graph(g, ...,
  4, part_method="metis", balance_ntypes=train_mask, balance_edges=True)`` as in DistDGL's
  examples.
- ``shoal``: ``shoal partition`` with a streaming partitioner when one is registered and
  importable (spring, else ldg/fennel), else ``hash``; then ``shoal store build`` (timed
  separately: the store build is the part this benchmark is about).

Usage::

    .venv/bin/python bench/store.py            # generate (once), run both sides, write results
    .venv/bin/python bench/store.py --only shoal
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import common
from common import BENCH as HERE
from common import (
    RESULTS,
    WORK,
    command_line,
    load_json,
    machine_line,
    write_json,
    write_text_atomic,
)
from common import ROOT as REPO

GRAPH = WORK / "rmat1m"
SCALE = 20
NUM_EDGES = 10_000_000
FEAT_DIM = 128
PARTS = 4
SEED = 0


# ---------------------------------------------------------------------------- generation
def rmat_chunk(rng, k: int, scale: int, abcd=(0.57, 0.19, 0.19, 0.05)):
    import numpy as np

    a, b, c, _ = abcd
    src = np.zeros(k, dtype=np.int64)
    dst = np.zeros(k, dtype=np.int64)
    for _bit in range(scale):
        r = rng.random(k)
        right = ((r >= a) & (r < a + b)) | (r >= a + b + c)  # quadrants b, d: dst bit set
        down = r >= a + b  # quadrants c, d: src bit set
        src = (src << 1) | down
        dst = (dst << 1) | right
    return np.stack([src, dst], axis=1)


def generate(out: Path) -> None:
    import numpy as np

    from shoal.data.format import GraphWriter

    n = 1 << SCALE
    rng = np.random.default_rng(SEED)
    chunk = 1 << 20
    with GraphWriter(out, num_nodes=n, directed=True, name="rmat1m", overwrite=True) as w:
        left = NUM_EDGES
        while left:
            k = min(chunk, left)
            w.add_edges(rmat_chunk(rng, k, SCALE))
            left -= k
        w.finish_edges()
        block = 1 << 16
        w.write_features(
            rng.standard_normal((min(block, n - s), FEAT_DIM), dtype=np.float32)
            for s in range(0, n, block)
        )
        w.write_labels(rng.integers(0, 10, n))
        perm = rng.permutation(n)
        a, b = n // 10, n // 5
        w.write_split("train", np.sort(perm[:a]))
        w.write_split("val", np.sort(perm[a:b]))
        w.write_split("test", np.sort(perm[b : b + n // 5]))


# ---------------------------------------------------------------------------- DGL side
def dgl_side(graph: Path, out: Path) -> dict:
    """Runs inside the DGL venv (no shoal import)."""
    import dgl
    import numpy as np
    import torch

    t0 = time.perf_counter()
    meta = json.loads((graph / "meta.json").read_text())
    n, e = meta["num_nodes"], meta["num_edges"]
    edges = np.fromfile(graph / "edges.bin", dtype=meta["edge_dtype"]).reshape(e, 2)
    g = dgl.graph(
        (
            torch.from_numpy(edges[:, 0].astype(np.int64)),
            torch.from_numpy(edges[:, 1].astype(np.int64)),
        ),
        num_nodes=n,
    )
    del edges
    g.ndata["feat"] = torch.from_numpy(np.load(graph / "features.npy"))
    g.ndata["label"] = torch.from_numpy(np.load(graph / "labels.npy"))
    for s in ("train", "val", "test"):
        m = torch.zeros(n, dtype=torch.bool)
        m[torch.from_numpy(np.load(graph / f"{s}_idx.npy"))] = True
        g.ndata[f"{s}_mask"] = m
    t_load = time.perf_counter() - t0
    t1 = time.perf_counter()
    dgl.distributed.partition_graph(
        g,
        "rmat1m",
        PARTS,
        str(out),
        part_method="metis",
        balance_ntypes=g.ndata["train_mask"],
        balance_edges=True,
    )
    t_part = time.perf_counter() - t1
    return {
        "load_s": t_load,
        "partition_graph_s": t_part,
        "dgl_version": dgl.__version__,
        "torch": torch.__version__,
    }


# ---------------------------------------------------------------------------- harness
def timed(cmd: list[str], env: dict | None = None) -> dict:
    """Run ``cmd`` under /usr/bin/time -v; return wall seconds, peak RSS and the tail."""
    t0 = time.perf_counter()
    r = subprocess.run(
        ["/usr/bin/time", "-v", *cmd], capture_output=True, text=True, env=env, cwd=REPO
    )
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-4000:] + r.stderr[-4000:])
        raise SystemExit(f"command failed ({r.returncode}): {' '.join(cmd)}")
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)
    return {
        "cmd": " ".join(cmd),
        "wall_s": round(wall, 2),
        "peak_rss_mb": round(int(m.group(1)) / 1024, 1) if m else None,
        "stdout": r.stdout[-2000:],
    }


def pick_partitioner() -> str:
    sys.path.insert(0, str(REPO / "src"))
    from shoal.partition.base import available

    names = available()
    for name in ("spring", "fennel", "ldg"):
        if name in names:
            return name
    return "hash"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=["dgl", "shoal"], help="run one side only")
    ap.add_argument("--side", choices=["dgl"], help=argparse.SUPPRESS)
    ap.add_argument("--regen", action="store_true", help="regenerate the graph")
    ap.add_argument("--render-only", action="store_true", help="rewrite the .md from the .json")
    args = ap.parse_args()
    results_path = RESULTS / "store.json"
    if args.render_only:
        write_markdown(load_json(results_path))
        return 0

    if args.side == "dgl":
        res = dgl_side(GRAPH, WORK / "dgl-parts")
        print("RESULT " + json.dumps(res))
        return 0

    WORK.mkdir(parents=True, exist_ok=True)
    if args.regen or not (GRAPH / "meta.json").exists():
        t0 = time.perf_counter()
        generate(GRAPH)
        print(f"generated {GRAPH} in {time.perf_counter() - t0:.1f}s", file=sys.stderr)

    results = load_json(results_path)
    results["command"] = command_line("store.py")
    results["load_average_at_start"] = [round(x, 2) for x in os.getloadavg()]
    results["graph"] = {
        "generator": "R-MAT a,b,c,d=0.57,0.19,0.19,0.05 (this script)",
        "num_nodes": 1 << SCALE,
        "num_edges": NUM_EDGES,
        "feature_dim": FEAT_DIM,
        "parts": PARTS,
    }
    results["machine"] = {
        **common.machine(),
        "shoal_torch": _torch_version(str(REPO / ".venv" / "bin" / "python")),
    }
    shoal = str(REPO / ".venv" / "bin" / "shoal")
    if args.only in (None, "dgl"):
        py = subprocess.run(
            ["bash", str(HERE / "dgl_env.sh")], capture_output=True, text=True, check=True
        ).stdout.strip()
        shutil.rmtree(WORK / "dgl-parts", ignore_errors=True)
        r = timed([py, str(Path(__file__).resolve()), "--side", "dgl"])
        line = [x for x in r.pop("stdout").splitlines() if x.startswith("RESULT ")][-1]
        r.update(json.loads(line[len("RESULT ") :]))
        results["dgl"] = r
        print("dgl:", r, file=sys.stderr)
    if args.only in (None, "shoal"):
        algo = pick_partitioner()
        assign = WORK / f"rmat1m-{algo}{PARTS}"
        store = WORK / "rmat1m-store"
        rp = _api_assignment(algo, assign)
        py = str(REPO / ".venv" / "bin" / "python")
        build_args = [str(GRAPH), str(assign), "--out", str(store), "--overwrite"]
        # `python -m shoal store build` (registers only the store commands' parser) ...
        rs = timed(
            [
                py,
                "-m",
                "shoal",
                "store",
                "build",
                *build_args,
                "--json",
                str(WORK / "store-build.json"),
            ]
        )
        build = json.loads((WORK / "store-build.json").read_text())
        # ... and the full `shoal` command, whose parser imports every stage
        rc = timed([shoal, "store", "build", *build_args])
        rv = timed([py, "-m", "shoal", "verify", str(store)])
        for r in (rs, rc, rv, rp):
            r.pop("stdout", None)
        results["shoal"] = {
            "partitioner": algo,
            "partition": rp,
            "store_build": rs,
            "store_build_full_cli": rc,
            "verify": rv,
            "store_bytes": build.get("bytes"),
            "seconds": build.get("seconds"),
            "peak_rss_mb_after_phase": {
                k: round(v / 2**20, 1) for k, v in build.get("peak_rss_bytes_after", {}).items()
            },
            "metrics": build.get("metrics"),
        }
        print("shoal:", results["shoal"], file=sys.stderr)
    if "dgl" in results and "shoal" in results:
        d, sh = results["dgl"], results["shoal"]["store_build"]
        results["ratios"] = {
            "dgl_rss_over_shoal_store_build_rss": round(d["peak_rss_mb"] / sh["peak_rss_mb"], 1),
            "dgl_wall_over_shoal_store_build_wall": round(d["wall_s"] / sh["wall_s"], 2),
            "dgl_wall_over_shoal_partition_plus_build_wall": round(
                d["wall_s"] / (sh["wall_s"] + results["shoal"]["partition"]["wall_s"]), 2
            ),
        }
        print("ratios:", results["ratios"], file=sys.stderr)
    write_json(results_path, results, indent=2)
    write_markdown(results)
    return 0


def _torch_version(python: str) -> str:
    r = subprocess.run(
        [python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True
    )
    return r.stdout.strip() or "?"


def write_markdown(res: dict) -> None:
    """``bench/results/store.md``, every figure from ``store.json`` (nothing by hand)."""
    g, m, d, sh = res["graph"], res["machine"], res["dgl"], res["shoal"]
    ra, met = res["ratios"], sh.get("metrics") or {}
    b, c, v, p = sh["store_build"], sh["store_build_full_cli"], sh["verify"], sh["partition"]
    phases = ", ".join(f"{k} {x:.2f}" for k, x in (sh.get("seconds") or {}).items())
    rss = ", ".join(f"{k} {x:.0f}" for k, x in (sh.get("peak_rss_mb_after_phase") or {}).items())
    la = res.get("load_average_at_start")
    L = [
        "# Store build: shoal vs DGL `partition_graph` (METIS)",
        "",
        f"Command: `{res.get('command', 'python bench/store.py')}` (raw figures: `store.json`). "
        "Each side runs in its own subprocess under `/usr/bin/time -v`, one after the other "
        'in this run; peak RSS is its "Maximum resident set size".',
        "",
        f"- **Graph**: {g['generator']}, {g['num_nodes']:,} nodes, {g['num_edges']:,} directed "
        f"edges, {g['feature_dim']}-d float32 features, {g['parts']} parts.",
        f"- **DGL**: DGL {d.get('dgl_version', '2.1.0')} on torch {d.get('torch', '2.2.1')} (the "
        "venv of `bench/dgl_env.sh`: DGL 2.1.0 needs torch 2.2) loads the graph into a "
        '`DGLGraph` and runs `dgl.distributed.partition_graph(..., part_method="metis", '
        "balance_ntypes=train_mask, balance_edges=True)` (DistDGL's settings).",
        f"- **shoal** (torch {m.get('shoal_torch', '?')}; the store build does not use torch): "
        f"{sh['partitioner']} (streaming) partition + metrics in its own process, then "
        "`python -m shoal store build` with default settings; the full `shoal store build` "
        "command and `shoal verify` are listed too.",
        f"- **Machine**: {machine_line(m)}"
        + (f"; load average {la[0]:.2f} when the run started." if la and "cpus" in m else "."),
        "",
        "| step | wall s | peak RSS MB |",
        "|---|---:|---:|",
        f"| DGL: load + `partition_graph` (METIS), total process | {d['wall_s']:.1f} | "
        f"{d['peak_rss_mb']:.0f} |",
        f"| &nbsp;&nbsp;of which `partition_graph` | {d['partition_graph_s']:.1f} | |",
        f"| shoal: {sh['partitioner']} partition + metrics (own process) | {p['wall_s']:.1f} | "
        f"{p['peak_rss_mb']:.0f} |",
        f"| shoal: `python -m shoal store build` | {b['wall_s']:.1f} | {b['peak_rss_mb']:.1f} |",
        f"| shoal: `shoal store build` (full CLI) | {c['wall_s']:.1f} | {c['peak_rss_mb']:.1f} |",
        f"| shoal: `shoal verify` (all checks vs source) | {v['wall_s']:.1f} | "
        f"{v['peak_rss_mb']:.0f} |",
        "",
        f"- Peak RSS: DGL / shoal store build = {ra['dgl_rss_over_shoal_store_build_rss']}x.",
        f"- Wall: DGL / shoal store build = {ra['dgl_wall_over_shoal_store_build_wall']}x; "
        f"DGL / (partition + store build) = "
        f"{ra['dgl_wall_over_shoal_partition_plus_build_wall']}x (torch differs between the "
        "sides, 2.2.1 vs the repository's; neither the METIS call nor shoal's build is torch "
        "code).",
        f"- Store build phases (s): {phases}; peak RSS after each phase (MB): {rss}.",
        f"- Store: {sh.get('store_bytes', 0) / 1e6:.0f} MB on disk; replication factor "
        f"{met.get('replication_factor', float('nan')):.4f}, edge cut "
        f"{met.get('edge_cut', float('nan')):.4f} (the assignment's metrics).",
    ]
    write_text_atomic(RESULTS / "store.md", "\n".join(L) + "\n")


def _api_assignment(algo: str, out: Path) -> dict:
    """Partition through the Python API (``shoal partition`` may not be registered yet) and
    write the assignment with its metrics, in its own timed process."""
    code = (
        "from shoal.data.format import GraphDir\n"
        "from shoal.partition.base import get_partitioner\n"
        "from shoal.partition.io import write_assignment\n"
        "from shoal.partition.metrics import partition_metrics\n"
        f"g = GraphDir.open({str(GRAPH)!r})\n"
        "tm = g.mask('train')\n"
        f"a = get_partitioner({algo!r}, num_parts={PARTS}, seed={SEED}).partition(g, tm)\n"
        f"met = partition_metrics(g, a.node_part, {PARTS}, train_mask=tm)\n"
        f"write_assignment({str(out)!r}, a, g, metrics=met, overwrite=True)\n"
    )
    return timed([str(REPO / ".venv" / "bin" / "python"), "-c", code])


if __name__ == "__main__":
    raise SystemExit(main())
