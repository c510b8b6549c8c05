"""A typed graph whose features are larger than a memory cap, trained under that cap (issue 34).

    python bench/hetero_memory.py [--scale 1.0] [--features 1024] [--epochs 3]
        [--fanouts 5,5] [--batch-size 256] [--caps fraction:4] [--out bench/results/hetero_memory]

Graph (built once under ``--work``): ``shoal data synth igbh --size tiny --scale S --features
F --train-frac 0.1 --val-frac 0.02`` (IGBH's six node types, eleven relations with the
reverses, F features on every type).

Runs, back to back, ``shoal train --graph G --model rgcn --fanouts 5,5 --batch-size 256
--hidden 64 --epochs E --eval-every E --threads 2`` uncapped and under each cap (``bench/common.py``: a cgroup-v1
memory group whose limit covers the process and its page cache; the graph's page cache is
dropped before each run). A cap is a size (``900MiB``) or ``fraction:K``: a K-th of the
features plus the process footprint the uncapped run measured (its memory plan's reserve and
the CSR's row index). The memory plan of ``shoal.training.typed`` then keeps the neighbour
lists in memory and caches the rows of highest in-degree over all types; a batch's other rows
are read by one planned direct read per type. Each row of the table gives the epoch seconds,
their ratio to the uncapped run's, and the bytes read per epoch against the distinct rows'
bytes the epoch needed.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import (
    ROOT,
    SHOAL,
    WORK,
    command_line,
    machine_line,
    parse_size,
    run_capped,
    write_json,
    write_text_atomic,
)

GiB = 1 << 30


def prepare(work: Path, scale: float, features: int) -> tuple[Path, str]:
    g = work / f"igbh-tiny-{scale}-{features}"
    args = ["--size", "tiny", "--scale", str(scale), "--features", str(features)]
    args += ["--train-frac", "0.1", "--val-frac", "0.02"]
    if not (g / "meta.json").exists():
        cmd = [*SHOAL, "data", "synth", "igbh", *args, "--out", str(g), "--overwrite"]
        subprocess.run(cmd, check=True, cwd=ROOT)
    return g, "shoal data synth igbh " + " ".join(args)


def feature_bytes(g: Path) -> int:
    return sum(f.stat().st_size for f in (g / "features").glob("*.npy"))


def train(g: Path, work: Path, tag: str, cap: int | None, a: argparse.Namespace) -> dict:
    out = work / f"train-{g.name}-{tag}.json"
    out.unlink(missing_ok=True)
    cmd = [*SHOAL, "train", "--graph", str(g), "--model", "rgcn", "--fanouts", a.fanouts]
    cmd += ["--batch-size", str(a.batch_size), "--hidden", "64", "--epochs", str(a.epochs)]
    cmd += ["--eval-every", str(a.epochs)]
    cmd += ["--threads", "2", "--no-progress", "--json", str(out)]
    print(f"[{tag}] {shlex.join(cmd[2:])}", flush=True)
    res = run_capped(cmd, cap, evict_paths=[g], cwd=ROOT, timeout=3600)
    res.update(tag=tag, cap=cap)
    if res["returncode"] == 0 and out.exists():
        res["train"] = json.loads(out.read_text())
    print(f"[{tag}] rc={res['returncode']} {res['seconds']:.0f} s", flush=True)
    return res


def footprint(run: dict) -> int:
    plan = run["train"]["config"].get("memory_plan") or {}
    return int(plan["reserve"]) + int(plan.get("index_bytes") or 0)


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="IGBH-tiny scale (default 1.0)")
    ap.add_argument("--features", type=int, default=1024, help="feature width (default 1024)")
    ap.add_argument("--epochs", type=int, default=3, help="epochs (default 3)")
    ap.add_argument("--fanouts", default="5,5", help="fanouts per relation (default 5,5)")
    ap.add_argument("--batch-size", type=int, default=256, help="batch size (default 256)")
    ap.add_argument(
        "--caps", default="fraction:4", help="comma-separated caps (default fraction:4)"
    )
    ap.add_argument("--out", default=str(ROOT / "bench/results/hetero_memory"))
    ap.add_argument("--work", default=str(WORK / "hetero_memory"))
    a = ap.parse_args(argv)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    g, synth = prepare(work, a.scale, a.features)
    meta = json.loads((g / "meta.json").read_text())
    fbytes = feature_bytes(g)
    print(f"graph {g.name}: features {fbytes / GiB:.2f} GiB ({time.perf_counter() - t0:.0f} s)")
    runs = [train(g, work, "uncapped", None, a)]
    base = runs[0] if runs[0].get("train") else None
    for spec in a.caps.split(","):
        if spec.startswith("fraction:"):
            if base is None:
                raise SystemExit("a fraction cap needs the uncapped run's memory plan")
            cap = int(fbytes / float(spec.split(":", 1)[1])) + footprint(base)
        else:
            cap = parse_size(spec)
        r = train(g, work, f"cap-{spec.replace(':', '')}", cap, a)
        r["cap_spec"] = spec
        runs.append(r)
    cmd = command_line("hetero_memory.py", sys.argv[1:] if argv is None else argv)
    res = {
        "command": cmd,
        "machine": machine_line(threads=2),
        "graph": {
            "synth": synth,
            "nodes": meta["num_nodes"],
            "edges": meta["num_edges"],
            "node_types": {t["name"]: t["count"] for t in meta["node_types"]},
            "feature_bytes": fbytes,
        },
        "runs": runs,
    }
    write_json(a.out + ".json", res)
    lines = [
        "# A typed graph larger than its memory cap (issue 34)",
        "",
        f"Command: `{cmd}` ({res['machine']}).",
        "",
        f"Graph: `{synth}`: {meta['num_nodes']:,} nodes in 6 types, {meta['num_edges']:,} "
        f"stored edges in {len(meta['edge_types'])} relations, features {fbytes / GiB:.2f} GiB "
        "(every type).",
        "",
        f"`shoal train --graph G --model rgcn --fanouts {a.fanouts} --batch-size {a.batch_size} "
        f"--hidden 64 --epochs {a.epochs} --eval-every {a.epochs} --threads 2`, uncapped, then in a cgroup-v1 memory group "
        "(process and page cache; the graph's pages dropped before each run). A `fraction:K` "
        "cap is a K-th of the features plus the footprint the uncapped run measured.",
        "",
        "| run | cap | epoch seconds | median | vs uncapped | gather s/epoch | read GB/epoch "
        "| distinct rows GB/epoch | cache hit rate | cache GiB | test acc | peak GiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [row(r, None if r is runs[0] else base) for r in runs]
    lines += [
        "",
        "Uncapped, the plan caches every row (read once at the start, not counted in the "
        "epochs). Under a cap the rows of highest in-degree over all types are cached and each "
        "batch reads the others by one planned direct read per type; read GB/epoch against "
        "distinct rows GB/epoch is the cost of reading per batch rather than per window.",
        "",
    ]
    write_text_atomic(a.out + ".md", "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
