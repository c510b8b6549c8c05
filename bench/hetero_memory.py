"""A typed graph whose features are larger than a memory cap, trained under that cap (issue 34).

    python bench/hetero_memory.py [--scale 1.0] [--features 1024] [--epochs 3] [--fanouts 5,5]
        [--batch-size 256] [--caps fraction:4] [--out bench/results/hetero_memory]
    python bench/hetero_memory.py --report-only

Graph (built once under WORK): ``shoal data synth igbh --size tiny --scale S --features F
--train-frac 0.1 --val-frac 0.02`` (IGBH's six node types, eleven relations with the
reverses, F features on every type). Runs, back to back, ``shoal train --graph G --model rgcn
--fanouts 5,5 --batch-size 256 --hidden 64 --epochs E --eval-every E --threads 2 --json``
uncapped and under each cap: a cgroup-v1 memory group whose limit covers the process and its
page cache (``common.run_capped``, not ``common.train``, which runs no cgroup; the graph's
page cache is dropped before each run). A cap is a size (``900MiB``) or ``fraction:K``: a
K-th of the features plus the footprint the uncapped run measured (``common.cap_bytes``).
Each row gives the epoch seconds, their ratio to the uncapped run's, and the bytes read per
epoch against the distinct rows' bytes the epoch needed. ``--smoke``: ``--scale 0.01
--features 8``, one epoch, uncapped and at 1 GiB.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
from pathlib import Path

from common import (
    ROOT,
    SHOAL,
    WORK,
    bench_args,
    cap_bytes,
    caps_available,
    header,
    load_json,
    new_results,
    out_prefix,
    run_capped,
    shoal,
    write_results,
)

GiB = 1 << 30


def prepare(scale: float, features: int) -> tuple[Path, str]:
    args = ["--size", "tiny", "--scale", str(scale), "--features", str(features)]
    args += ["--train-frac", "0.1", "--val-frac", "0.02"]
    g = WORK / "graphs" / f"igbh-tiny-{scale}-{features}"
    if not (g / "meta.json").exists():
        shoal("data", "synth", "igbh", *args, "--out", g, "--overwrite", "-q")
    return g, "shoal data synth igbh " + " ".join(args)


def train(g: Path, tag: str, cap: int | None, a: argparse.Namespace) -> dict:
    out = WORK / "hetero_memory" / f"{g.name}-{tag}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    cmd = [*SHOAL, "train", "--graph", str(g), "--model", "rgcn", "--fanouts", a.fanouts]
    cmd += ["--batch-size", str(a.batch_size), "--hidden", "64", "--epochs", str(a.epochs)]
    cmd += ["--eval-every", str(a.epochs), "--threads", "2", "--no-progress", "--json", str(out)]
    print(f"[{tag}] {shlex.join(cmd[2:])}", flush=True)
    name = f"hetero_memory_{os.getpid()}"
    res = run_capped(cmd, cap, name=name, evict_paths=[g], cwd=ROOT, timeout=3600)
    res.update(tag=tag, cap=cap)
    if res["returncode"] == 0 and out.exists():
        res["train"] = json.loads(out.read_text())
    print(f"[{tag}] rc={res['returncode']} {res['seconds']:.0f} s", flush=True)
    return res


def _epochs(t: dict) -> dict:
    hist = t["history"]
    io = [h.get("io") or {} for h in hist]
    return {
        "seconds": [h["seconds"] for h in hist],
        "read": [i.get("bytes_read", 0) for i in io],
        "unique": [i.get("unique_bytes", 0) for i in io],
        "hit": [i.get("cache_hit_rate") or 0.0 for i in io],
        "gather": [h["time_split"].get("gather", 0.0) for h in hist],
    }


def row(r: dict, base: dict | None) -> str:
    cg = r.get("cgroup", {})
    cap = f"{r['cap'] / GiB:.2f} GiB ({r['cap_spec']})" if r["cap"] else "none"
    t = r.get("train")
    if t is None:
        return f"| {r['tag']} | {cap} | failed (rc {r['returncode']}, OOM kills " + (
            f"{cg.get('oom_kill')}) |" + " |" * 10
        )
    e = _epochs(t)
    med = statistics.median
    sec = med(e["seconds"])
    ratio = f"{sec / med(_epochs(base['train'])['seconds']):.2f}x" if base else "1.00x"
    plan = t["config"].get("memory_plan") or {}
    peak = cg.get("max_usage")
    peak_s = f"{peak / GiB:.2f}" if peak else "-"
    return (
        f"| {r['tag']} | {cap} | {' / '.join(f'{x:.1f}' for x in e['seconds'])} | {sec:.1f} | "
        f"{ratio} | {med(e['gather']):.1f} | {med(e['read']) / 1e9:.3f} | "
        f"{med(e['unique']) / 1e9:.3f} | {med(e['hit']):.2f} | "
        f"{(plan.get('cache_bytes') or 0) / GiB:.2f} | {t['test_accuracy']:.4f} | {peak_s} |"
    )


def render(res: dict) -> str:
    gr, s, runs = res["graph"], res["settings"], res["runs"]
    base = runs[0] if runs[0].get("train") else None
    lines = header(
        "A typed graph larger than its memory cap (issue 34)",
        res,
        f"Graph: `{gr['synth']}`: {gr['nodes']:,} nodes in {len(gr['node_types'])} types, "
        f"{gr['edges']:,} stored edges in {gr['relations']} relations, features "
        f"{gr['feature_bytes'] / GiB:.2f} GiB (every type).",
        f"`shoal train --graph G --model rgcn --fanouts {s['fanouts']} --batch-size "
        f"{s['batch_size']} --hidden 64 --epochs {s['epochs']} --eval-every {s['epochs']} "
        "--threads 2`, uncapped, then in a cgroup-v1 memory group (process and page cache; the "
        "graph's pages dropped before each run). A `fraction:K` cap is a K-th of the features "
        "plus the footprint the uncapped run measured.",
    )
    lines += [
        "| run | cap | epoch seconds | median | vs uncapped | gather s/epoch | read GB/epoch "
        "| distinct rows GB/epoch | cache hit rate | cache GiB | test acc | peak GiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [row(r, None if r is runs[0] else base) for r in runs]
    lines += [
        "",
        "Uncapped, the plan caches every row (read once at the start, not counted in the "
        "epochs). Under a cap it caches part of the rows (`cache GiB`) and each batch reads "
        "the others with planned direct reads per type; read GB/epoch against distinct rows "
        "GB/epoch is the cost of reading per batch rather than per window.",
    ]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bench_args(ap, out="bench/results/hetero_memory")
    ap.add_argument("--scale", type=float, default=1.0, help="IGBH-tiny scale (default 1.0)")
    ap.add_argument("--features", type=int, default=1024, help="feature width (default 1024)")
    ap.add_argument("--epochs", type=int, default=3, help="epochs (default 3)")
    ap.add_argument("--fanouts", default="5,5", help="fanouts per relation (default 5,5)")
    ap.add_argument("--batch-size", type=int, default=256, help="batch size (default 256)")
    ap.add_argument(
        "--caps", default="fraction:4", help="comma-separated caps (default fraction:4)"
    )
    ap.add_argument("--report-only", action="store_true", help="rewrite the .md from the .json")
    a = ap.parse_args()
    prefix = out_prefix(a, "bench/results/hetero_memory")
    if a.report_only:
        write_results(prefix, load_json(prefix.with_suffix(".json")), render)
        return 0
    if a.smoke:  # any fraction of the tiny graph's features is below shoal's least working set
        a.scale, a.features, a.epochs, a.caps = 0.01, 8, 1, "1GiB"
    capped = caps_available(a.smoke)
    res = new_results("hetero_memory.py", threads=2)
    res["settings"] = {"fanouts": a.fanouts, "batch_size": a.batch_size, "epochs": a.epochs}
    g, synth = prepare(a.scale, a.features)
    meta = json.loads((g / "meta.json").read_text())
    fbytes = sum(f.stat().st_size for f in (g / "features").glob("*.npy"))
    runs = [train(g, "uncapped", None, a)]
    for spec in a.caps.split(","):
        cap = cap_bytes(spec, fbytes, runs[0].get("train")) if capped else None
        runs.append({**train(g, f"cap-{spec.replace(':', '')}", cap, a), "cap_spec": spec})
    res["graph"] = {
        "synth": synth,
        "nodes": meta["num_nodes"],
        "edges": meta["num_edges"],
        "relations": len(meta["edge_types"]),
        "node_types": {t["name"]: t["count"] for t in meta["node_types"]},
        "feature_bytes": fbytes,
    }
    res["runs"] = runs
    write_results(prefix, res, render)
    print(prefix.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
