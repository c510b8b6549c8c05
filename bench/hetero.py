"""Typed graphs through shoal's own commands (issue 34): R-GCN and R-GAT against a homogeneous
GraphSAGE on the flattened graph, in one process and in two on a typed store.

    python bench/hetero.py [--scale 0.1] [--seeds 3] [--epochs 30] [--out bench/results/hetero]
    python bench/hetero.py --report-only

Graph (built once under WORK): ``shoal data synth igbh --size tiny --scale S --features 128``
(IGBH's six node types and relations plus reverses), and ``shoal data flatten`` of it. Runs,
each over ``--seeds`` seeds, ``shoal train ... --fanouts 10,10 --hidden 64 --epochs E
--threads 1 --json`` (``common.train``; the other settings the models' presets), exact
evaluation, test accuracy at the best validation epoch:

- ``rgcn``, ``rgat`` (``--heads 4``) on the typed graph, ``sage-flat`` on the flattened one
  (types and relations dropped), one process;
- ``<model>-minibatch-2``, ``<model>-averaging-2``: ``--store STORE --engine E --nproc 2
  --batch-size 512`` on a typed store of the same graph (``common.partitioned_store``: LDG in
  2 parts, each node type balanced, halo features): half the batch per process, so the
  one-process run's global batch and steps per epoch;
- ``<model>-averaging-2-hops1``: the same with ``--halo-hops 1`` (SDT-GNN's stored part,
  whose halo nodes have no in-edges), the ablation of averaging's default on a typed store.

``E`` defaults to 30: at 10 epochs R-GAT is still climbing, and the comparison would measure
how fast each scheme converges rather than where. The table gives each store run's difference
to the one-process run of the same model (mean over the seeds). ``--smoke``: ``--scale 0.01
--features 8``, one epoch, one seed, two launches: ``rgat`` and ``rgat-averaging-2-hops1``
(R-GCN on a typed graph runs in ``bench/hetero_memory.py --smoke``).
"""

from __future__ import annotations

import argparse
import json
import statistics

from common import (
    WORK,
    bench_args,
    header,
    load_json,
    new_results,
    out_prefix,
    partitioned_store,
    shoal,
    train,
    write_results,
)

COMMON = ["--fanouts", "10,10", "--hidden", "64", "--threads", "1", "--no-progress"]


def plan() -> dict[str, tuple[str, list[str]]]:
    """Run name -> (what it trains: ``TYPED``, ``FLAT`` or ``STORE``, its flags)."""
    heads = ["--heads", "4"]
    runs = {
        "rgcn": ("TYPED", ["--model", "rgcn"]),
        "rgat": ("TYPED", ["--model", "rgat", *heads]),
        "sage-flat": ("FLAT", ["--model", "sage"]),
    }
    variants = (
        ("minibatch-2", "minibatch", []),
        ("averaging-2", "averaging", []),
        ("averaging-2-hops1", "averaging", ["--halo-hops", "1"]),
    )
    for model in ("rgcn", "rgat"):
        for suffix, engine, more in variants:
            flags = ["--engine", engine, "--nproc", "2", "--batch-size", "512", *more]
            runs[f"{model}-{suffix}"] = ("STORE", flags + runs[model][1])
    return runs


def render(res: dict) -> str:
    gr, s, rows, cmds = res["graph"], res["settings"], res["rows"], res["run_commands"]
    cut = res["partition"].get("edge_cut", float("nan"))
    lines = header(
        "Typed graphs: relational models against a homogeneous one (issue 34)",
        res,
        f"Graph: `{gr['synth']}`: {gr['nodes']:,} nodes "
        f"({', '.join(f'{n:,} {t}' for t, n in gr['node_types'].items())}), "
        f"{gr['edges']:,} stored edges in {gr['relations']} relations (reverses included), "
        f"{gr['classes']} classes, {gr['features']} features on every type; `sage-flat` trains "
        "on `shoal data flatten` of it (the same nodes and edges, no types).",
        f"`shoal train --fanouts 10,10 --hidden 64 --epochs {s['epochs']} --threads 1` in one "
        f"process, seeds 0..{s['seeds'] - 1}; test accuracy at the best validation epoch, exact "
        "evaluation.",
        f"The 2-process rows train a typed store of the same graph: `shoal partition --algo ldg "
        f"--parts 2` (edge cut {cut:.3f}, each node type within `--balance`), `shoal store "
        "build --halo-features`.",
    )
    lines += [
        "| run | command | test accuracy (mean ± std) | vs one process | best epoch (median) | "
        "seconds per epoch (median) |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        sec = statistics.median(x["seconds_per_epoch"] for x in r["runs"])
        best = statistics.median(x["best_epoch"] for x in r["runs"])
        diff = f"{100 * r['vs_one_process']:+.2f} points" if "vs_one_process" in r else ""
        lines.append(
            f"| {name} | `{cmds[name]}` | {r['test_mean']:.4f} ± {r['test_std']:.4f} | {diff} | "
            f"{best:g} | {sec:.2f} |"
        )
    lines += [
        "",
        "`averaging` trains each part alone (SDT-GNN): in a stored part a halo node's own "
        "in-edges are not there, so from the second layer on a halo node is seen without its "
        "neighbours, while the evaluation sees the graph. On a typed store the engine's "
        "default, `--halo-hops auto` (2 for these 2-layer models), fetches them once before "
        "training (DGL's `num_hops`); the `-hops1` rows (`--halo-hops 1`, the stored part as "
        "SDT-GNN trains it) against the `averaging-2` rows are that default's ablation. The "
        "generator's planted signal: `bench/results/hetero_signal.md`; a typed graph under a "
        "memory cap: `bench/results/hetero_memory.md`.",
    ]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bench_args(ap, out="bench/results/hetero")
    ap.add_argument("--scale", type=float, default=0.1, help="IGBH-tiny scale (default 0.1)")
    ap.add_argument("--seeds", type=int, default=3, help="training seeds (default 3)")
    ap.add_argument("--epochs", type=int, default=30, help="epochs (default 30)")
    ap.add_argument("--report-only", action="store_true", help="rewrite the .md from the .json")
    a = ap.parse_args()
    prefix = out_prefix(a, "bench/results/hetero")
    if a.report_only:
        write_results(prefix, load_json(prefix.with_suffix(".json")), render)
        return 0
    features, runs = 128, plan()
    if a.smoke:
        a.scale, a.seeds, a.epochs, features = 0.01, 1, 1, 8
        runs = {k: runs[k] for k in ("rgat", "rgat-averaging-2-hops1")}
    res = new_results("hetero.py", threads=1)
    res["settings"] = {"scale": a.scale, "seeds": a.seeds, "epochs": a.epochs}
    synth = ["--size", "tiny", "--scale", str(a.scale), "--features", str(features)]
    typed = WORK / "graphs" / f"igbh-{a.scale}-{features}f"
    flat = typed.with_name(typed.name + "-flat")
    if not (typed / "meta.json").exists():
        shoal("data", "synth", "igbh", *synth, "--out", typed, "--overwrite", "-q")
    if not (flat / "meta.json").exists():
        shoal("data", "flatten", typed, "--out", flat, "--overwrite", "-q")
    store = partitioned_store(typed, 2, algo="ldg")
    where = {"TYPED": ("--graph", typed), "FLAT": ("--graph", flat), "STORE": ("--store", store)}
    meta = json.loads((typed / "meta.json").read_text())
    parts = store.with_name(store.name.removesuffix("-store"))  # partitioned_store's folder
    pmeta = json.loads((parts / "meta.json").read_text())["metrics"]
    rows = {}
    for name, (what, flags) in runs.items():
        got = []
        for seed in range(a.seeds):
            out = WORK / "hetero" / f"{name}-{seed}.json"
            args = [*where[what], *flags, *COMMON, "--epochs", a.epochs, "--seed", seed]
            r = train(*args, out=out)
            got.append(
                {
                    "seed": seed,
                    "test": r["test_accuracy"],
                    "val": r["val_accuracy"],
                    "seconds_per_epoch": r["seconds_per_epoch"],
                    "eval_seconds": r.get("eval_seconds"),
                    "best_epoch": r.get("best_epoch"),
                }
            )
        tests = [x["test"] for x in got]
        rows[name] = {
            "test_mean": statistics.mean(tests),
            "test_std": statistics.pstdev(tests),
            "runs": got,
        }
        one = rows.get(name.split("-")[0]) if what == "STORE" else None
        if one is not None:  # against the one-process run of the same model
            rows[name]["vs_one_process"] = rows[name]["test_mean"] - one["test_mean"]
        print(f"{name}: test {rows[name]['test_mean']:.4f}", flush=True)
    res["graph"] = {
        "synth": "shoal data synth igbh " + " ".join(synth),
        "nodes": meta["num_nodes"],
        "edges": meta["num_edges"],
        "node_types": {t["name"]: t["count"] for t in meta["node_types"]},
        "relations": len(meta["edge_types"]),
        "classes": meta["num_classes"],
        "features": features,
    }
    res["partition"] = {k: pmeta.get(k) for k in ("edge_cut", "type_balance", "balance")}
    res["rows"] = rows
    res["run_commands"] = {
        name: f"{where[what][0]} {what} {' '.join(flags)}" for name, (what, flags) in runs.items()
    }
    write_results(prefix, res, render)
    print(prefix.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
