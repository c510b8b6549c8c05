"""Building a partitioned store: shoal against DGL's ``partition_graph`` (METIS).

Graph: ``shoal data synth rmat`` (a, b, c, d = 0.57, 0.19, 0.19, 0.05; Chakrabarti et al., SDM
2004), 2**20 nodes, 10M directed edges, 128-d float32 features, 10 classes with train / val /
test splits, generated once under ``WORK/graphs``. Each step runs in its own subprocess, timed,
its peak RSS the child's ``ru_maxrss`` (``os.wait4``):

- ``dgl``: in the venv of ``bash bench/dgl_env.sh``, the edge list and features loaded into a
  ``DGLGraph`` (DGL needs the graph in memory), then ``dgl.distributed.partition_graph(g, ...,
  4, part_method="metis", balance_ntypes=train_mask, balance_edges=True)`` as in DistDGL's
  examples;
- ``shoal``: ``shoal partition --algo spring`` (streaming), then ``python -m shoal store build``
  (the step this benchmark is about), the same through the full ``shoal`` command (whose
  parser imports every stage), and ``shoal verify``.

Usage::

    python bench/store.py
    python bench/store.py --report-only     # re-render the .md from the .json

With ``--smoke`` the DGL side is skipped (and said so) when its venv is absent.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import common
from common import PY, SHOAL, WORK

PARTS = 4
ALGO = "spring"
DGL_PY = common.BENCH / "work" / "dgl-venv" / "bin" / "python"


def dgl_side(graph: Path, out: Path) -> dict:
    """Runs inside the DGL venv (no shoal import)."""
    import dgl
    import numpy as np
    import torch

    t0 = time.perf_counter()
    meta = json.loads((graph / "meta.json").read_text())
    n = meta["num_nodes"]
    e = np.fromfile(graph / "edges.bin", dtype=meta["edge_dtype"]).reshape(-1, 2).astype(np.int64)
    g = dgl.graph((torch.from_numpy(e[:, 0]), torch.from_numpy(e[:, 1])), num_nodes=n)
    del e
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
        graph.name,
        PARTS,
        str(out),
        part_method="metis",
        balance_ntypes=g.ndata["train_mask"],
        balance_edges=True,
    )
    return {
        "load_s": t_load,
        "partition_graph_s": time.perf_counter() - t1,
        "dgl_version": dgl.__version__,
        "torch": torch.__version__,
    }


def timed(cmd: list) -> dict:
    """Run ``cmd``; its wall seconds, peak RSS (``ru_maxrss``) and the tail of its output."""
    log = WORK / "store" / "log.txt"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        r = common.run_capped([str(c) for c in cmd], None, stdout=f, stderr=subprocess.STDOUT)
    out = log.read_text()
    if r["returncode"]:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed ({r['returncode']}):\n{out[-4000:]}")
    return {
        "cmd": " ".join("python" if c == PY else common.rel(c) for c in map(str, cmd)),
        "wall_s": round(r["seconds"], 2),
        "peak_rss_mb": round(r["maxrss_bytes"] / 2**20, 1),
        "stdout": out[-2000:],
    }


def make_graph(spec: dict) -> Path:
    g = WORK / "graphs" / f"rmat-{spec['nodes']}"
    if not (g / "meta.json").exists():
        common.shoal(
            "data", "synth", "rmat", *common.synth_flags(spec), "--out", g, "--overwrite", "-q"
        )
    return g


def measure(args: argparse.Namespace) -> dict:
    spec = {"nodes": 1 << 20, "edges": 10_000_000, "features": 128, "classes": 10, "seed": 0}
    if args.smoke:
        spec.update(nodes=2048, edges=16000, features=16, classes=4)
    graph = make_graph(spec)
    torch_version = common.sh([PY, "-c", "import torch; print(torch.__version__)"]).stdout.strip()
    res = common.new_results(
        "store.py",
        shoal_torch=torch_version,
        graph={
            "generator": f"`shoal data synth rmat {' '.join(common.synth_flags(spec))}`",
            "num_nodes": spec["nodes"],
            "num_edges": spec["edges"],
            "feature_dim": spec["features"],
            "parts": PARTS,
        },
    )
    if args.smoke and not DGL_PY.exists():
        res["dgl"] = {"skipped": f"{common.rel(DGL_PY)} absent; `bash bench/dgl_env.sh` makes it"}
    else:
        py = common.sh(["bash", common.BENCH / "dgl_env.sh"]).stdout.strip()
        r = timed([py, __file__, "--dgl-side", graph, WORK / "store" / "dgl-parts"])
        line = [x for x in r.pop("stdout").splitlines() if x.startswith("RESULT ")][-1]
        res["dgl"] = {**r, **json.loads(line[len("RESULT ") :])}
    assign, store = (
        WORK / "store" / f"{graph.name}-{ALGO}{PARTS}",
        WORK / "store" / f"{graph.name}-store",
    )
    part = ["partition", graph, "--algo", ALGO, "--parts", PARTS, "--seed", 0]
    rp = timed(
        [*SHOAL, *part, "--out", assign, "--overwrite", "--json", assign.with_suffix(".json")]
    )
    build = ["store", "build", graph, assign, "--out", store, "--overwrite"]
    rs = timed([*SHOAL, *build, "--json", store.with_suffix(".json")])
    b = json.loads(store.with_suffix(".json").read_text())
    rc = timed([Path(PY).with_name("shoal"), *build])
    rv = timed([*SHOAL, "verify", store])
    for r in (rp, rs, rc, rv):
        r.pop("stdout")
    res["shoal"] = {
        "partitioner": ALGO,
        "partition": rp,
        "store_build": rs,
        "store_build_full_cli": rc,
        "verify": rv,
        "store_bytes": b["bytes"],
        "seconds": b["seconds"],
        "peak_rss_mb_after_phase": {
            k: round(v / 2**20, 1) for k, v in b["peak_rss_bytes_after"].items()
        },
        "metrics": b["metrics"],
    }
    if "wall_s" in res["dgl"]:
        d, sh, p = res["dgl"], res["shoal"]["store_build"], res["shoal"]["partition"]
        res["ratios"] = {
            "dgl_rss_over_shoal_store_build_rss": round(d["peak_rss_mb"] / sh["peak_rss_mb"], 1),
            "dgl_wall_over_shoal_store_build_wall": round(d["wall_s"] / sh["wall_s"], 2),
            "dgl_wall_over_shoal_partition_plus_build_wall": round(
                d["wall_s"] / (sh["wall_s"] + p["wall_s"]), 2
            ),
        }
    return res


def render(res: dict) -> str:
    g, d, sh = res["graph"], res.get("dgl"), res.get("shoal")
    paras = [
        "Each step runs in its own subprocess, one after the other in this run; peak RSS is "
        "its maximum resident set size."
    ]
    if res.get("commit"):  # numbers of an earlier version of this script
        paras.append(
            f"Measured by `bench/store.py` as of commit {res['commit']} (the graph made by that "
            "version's own R-MAT generator, shoal's partition through the Python API, each "
            "step under `/usr/bin/time -v`); rendered by `python bench/store.py --report-only`."
        )
    L = common.header("Store build: shoal vs DGL `partition_graph` (METIS)", res, *paras)
    torch_sh = res.get("shoal_torch") or res["machine"].get("shoal_torch", "?")
    L += [
        f"- **Graph**: {g['generator']}, {g['num_nodes']:,} nodes, {g['num_edges']:,} directed "
        f"edges, {g['feature_dim']}-d float32 features, {g['parts']} parts.",
    ]
    if d and "skipped" in d:
        L.append(f"- **DGL**: skipped ({d['skipped']}).")
    elif d:
        L.append(
            f"- **DGL**: DGL {d['dgl_version']} on torch {d['torch']} (the venv of "
            "`bench/dgl_env.sh`: DGL 2.1.0 needs torch 2.2) loads the graph into a `DGLGraph` and "
            'runs `dgl.distributed.partition_graph(..., part_method="metis", '
            "balance_ntypes=train_mask, balance_edges=True)` (DistDGL's settings)."
        )
    if sh:
        L.append(
            f"- **shoal** (torch {torch_sh}; the store build does not use torch): "
            f"{sh['partitioner']} (streaming) partition + metrics in its own process, then "
            "`python -m shoal store build` with default settings; the full `shoal store build` "
            "command and `shoal verify` are listed too."
        )
    L += ["", "| step | wall s | peak RSS MB |", "|---|---:|---:|"]
    if d and "wall_s" in d:
        L += [
            f"| DGL: load + `partition_graph` (METIS), total process | {d['wall_s']:.1f} | "
            f"{d['peak_rss_mb']:.0f} |",
            f"| &nbsp;&nbsp;of which `partition_graph` | {d['partition_graph_s']:.1f} | |",
        ]
    if sh:
        for label, r in (
            (f"{sh['partitioner']} partition + metrics (own process)", sh["partition"]),
            ("`python -m shoal store build`", sh["store_build"]),
            ("`shoal store build` (full CLI)", sh["store_build_full_cli"]),
            ("`shoal verify` (all checks vs source)", sh["verify"]),
        ):
            L.append(f"| shoal: {label} | {r['wall_s']:.1f} | {r['peak_rss_mb']:.1f} |")
    L.append("")
    if "ratios" in res:
        ra = res["ratios"]
        L += [
            f"- Peak RSS: DGL / shoal store build = {ra['dgl_rss_over_shoal_store_build_rss']}x.",
            f"- Wall: DGL / shoal store build = {ra['dgl_wall_over_shoal_store_build_wall']}x; "
            f"DGL / (partition + store build) = "
            f"{ra['dgl_wall_over_shoal_partition_plus_build_wall']}x (torch differs between the "
            "sides; neither the METIS call nor shoal's build is torch code).",
        ]
    if sh:
        met = sh.get("metrics") or {}
        phases = ", ".join(f"{k} {x:.2f}" for k, x in (sh.get("seconds") or {}).items())
        rss = ", ".join(
            f"{k} {x:.0f}" for k, x in (sh.get("peak_rss_mb_after_phase") or {}).items()
        )
        L += [
            f"- Store build phases (s): {phases}; peak RSS after each phase (MB): {rss}.",
            f"- Store: {sh['store_bytes'] / 1e6:.0f} MB on disk; replication factor "
            f"{met.get('replication_factor', float('nan')):.4f}, edge cut "
            f"{met.get('edge_cut', float('nan')):.4f} (the assignment's metrics).",
        ]
    return "\n".join(L) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--report-only", action="store_true", help="re-render the .md from the .json")
    ap.add_argument("--dgl-side", nargs=2, type=Path, help=argparse.SUPPRESS)
    common.bench_args(ap, out="bench/results/store")
    args = ap.parse_args()
    if args.dgl_side:  # in DGL's venv
        print("RESULT " + json.dumps(dgl_side(*args.dgl_side)))
        return 0
    prefix = common.out_prefix(args, "bench/results/store")
    if args.report_only:
        res = common.load_json(prefix.with_suffix(".json"))
        common.write_text_atomic(prefix.with_suffix(".md"), render(res))
    else:
        common.write_results(prefix, measure(args), render)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
