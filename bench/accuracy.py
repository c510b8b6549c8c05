"""Accuracy of the single-process trainer on the shared datasets (mean ± std over seeds).

Every run of :data:`RUNS` is ``shoal train --graph <dataset> <its flags> --seed S --threads T``
(:func:`common.train`) on the dataset imported once by ``shoal data import`` (the official split
of its ``graph.npz``); test accuracy is that of the best-validation epoch, computed exactly
(layer-wise full-neighbour inference).

Usage::

    python bench/accuracy.py [--only cora-gcn,...] [--seeds 0,1,2] [--threads 1]
    python bench/accuracy.py --report-only     # re-render the .md from the .json

Runs already in the JSON are kept (runs can be made in pieces); a run's seeds are replaced when
run again with the same settings. ``bench/defaults.py`` and ``bench/same_numbers.py`` use
:data:`RUNS` and :func:`flags`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import common

PLANETOID = dict(
    fanouts=(-1, -1),
    batch_size=4096,
    epochs=200,
    lr=0.01,
    weight_decay=5e-4,
    normalize_features=True,
)
SAGE = dict(
    model="sage",
    fanouts=(25, 10),
    batch_size=1024,
    hidden=256,
    epochs=300,
    lr=0.01,
    dropout=0.7,
    weight_decay=5e-4,
    eval_every=2,
    eval_batch_size=2048,
)
#: Coauthor-Physics has 8415-d features: smaller model, fanouts and inference batches.
SAGE_PHYSICS = dict(
    SAGE,
    fanouts=(10, 5),
    hidden=64,
    epochs=60,
    dropout=0.5,
    eval_every=5,
    eval_batch_size=512,
    normalize_features=True,
)
#: Amazon-Computers: fewer epochs/evaluations than Photo (CPU time on the shared machine).
SAGE_COMPUTERS = dict(SAGE, hidden=128, epochs=200, eval_every=4)

#: name -> (dataset, ``shoal train`` options, target / published reference)
RUNS: dict[str, tuple[str, dict, str]] = {
    "cora-gcn": (
        "cora",
        dict(model="gcn", hidden=64, dropout=0.5, **PLANETOID),
        ">= 0.80; Kipf & Welling 2017 Table 2: 0.815",
    ),
    "citeseer-gcn": (
        "citeseer",
        dict(model="gcn", hidden=64, dropout=0.5, **PLANETOID),
        ">= 0.69; Kipf & Welling 2017 Table 2: 0.703",
    ),
    "cora-gat": (
        "cora",
        dict(model="gat", hidden=64, heads=8, dropout=0.6, **{**PLANETOID, "lr": 0.005}),
        "Veličković et al. 2018 Table 2: 0.830 ± 0.007",
    ),
    "citeseer-gat": (
        "citeseer",
        dict(model="gat", hidden=64, heads=8, dropout=0.6, **{**PLANETOID, "lr": 0.005}),
        "Veličković et al. 2018 Table 2: 0.725 ± 0.007",
    ),
    "cora-gin": (
        "cora",
        dict(model="gin", hidden=64, dropout=0.5, **PLANETOID),
        "no figure in Xu et al. 2019 (graph tasks only); GCN's 0.815 as reference",
    ),
    "citeseer-gin": (
        "citeseer",
        dict(model="gin", hidden=64, dropout=0.5, **PLANETOID),
        "no figure in Xu et al. 2019 (graph tasks only); GCN's 0.703 as reference",
    ),
    "amazon_photo-sage": ("amazon_photo", dict(SAGE), ">= 0.90; Shchur et al. 2018: 0.914"),
    "amazon_computers-sage": (
        "amazon_computers",
        dict(SAGE_COMPUTERS),
        ">= 0.83; Shchur et al. 2018: 0.824",
    ),
    "coauthor_physics-sage": (
        "coauthor_physics",
        dict(SAGE_PHYSICS),
        ">= 0.92; Shchur et al. 2018: 0.930",
    ),
}


def flags(opts: dict[str, Any]) -> list[str]:
    """``shoal train`` flags of an option dict of :data:`RUNS`."""
    out = []
    for k, v in opts.items():
        flag = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            out.append(flag if v else f"--no-{k.replace('_', '-')}")
        elif isinstance(v, tuple | list):
            out.append(f"{flag}={','.join(map(str, v))}")
        else:
            out += [flag, str(v)]
    return out


def run_one(key: str, opts: dict, seed: int, threads: int) -> dict:
    dataset = RUNS[key][0]
    args = ["--graph", common.dataset_graph(dataset), *flags(opts), "--seed", seed]
    out = common.WORK / "accuracy" / f"{key}-{seed}.json"
    t0 = time.perf_counter()
    r = common.train(*args, "--threads", threads, "--no-progress", out=out)
    return {
        "seed": seed,
        "test_accuracy": r["test_accuracy"],
        "val_accuracy": r["val_accuracy"],
        "best_epoch": r["best_epoch"],
        "epochs": r["epochs"],
        "seconds": time.perf_counter() - t0,
        "seconds_per_epoch": r["seconds_per_epoch"],
    }


def render(res: dict) -> str:
    paras = [
        "Test accuracy of the best-validation epoch (exact layer-wise inference), official "
        "split of each `graph.npz`, mean ± std (sample std) over seeds."
    ]
    lines = common.header("Accuracy of the single-process trainer", res, *paras)
    lines += [
        "| run | test accuracy | val accuracy | seeds | target / published | hyper-parameters |",
        "|---|---|---|---|---|---|",
    ]
    for key in sorted(res["runs"], key=lambda k: list(RUNS).index(k) if k in RUNS else len(RUNS)):
        run = res["runs"][key]
        rows = run["seeds"]
        t = [r["test_accuracy"] for r in rows]
        v = [r["val_accuracy"] for r in rows]
        sd = statistics.stdev(t) if len(t) > 1 else 0.0
        hp = ", ".join(f"{k}={x}" for k, x in run["config"].items())
        target = RUNS[key][2] if key in RUNS else "-"
        old = {r["commit"] for r in rows if r.get("commit")}
        lines.append(
            f"| {key}{' †' if old else ''} | {statistics.mean(t):.3f} ± {sd:.3f} | "
            f"{statistics.mean(v):.3f} | "
            f"{','.join(str(r['seed']) for r in rows)} | {target} | {hp} |"
        )
    lines += [
        "",
        "References: T. Kipf, M. Welling, Semi-supervised classification with graph "
        "convolutional networks, ICLR 2017 (Table 2). P. Veličković et al., Graph attention "
        "networks, ICLR 2018 (Table 2). O. Shchur et al., Pitfalls of graph neural network "
        "evaluation, R2L workshop 2018 (GS-mean row, averaged over random 20-per-class "
        "splits, so not the same split as here). K. Xu et al., How powerful are graph neural "
        "networks?, ICLR 2019 (graph classification only).",
        "",
        "Common options: Adam; dropout on every layer's input; weight decay on all parameters.",
    ]
    old = sorted({r["commit"] for v in res["runs"].values() for r in v["seeds"] if "commit" in r})
    if old:  # runs of an earlier version of this script
        lines += [
            "",
            f"† measured by `bench/accuracy.py` as of commit {', '.join(old)} (the trainer "
            "called in-process, the commands above as that version took them); rendered by "
            "`python bench/accuracy.py --report-only`.",
        ]
    if res.get("notes"):
        lines += ["", f"## Notes written with the runs of commit {res['notes_commit']}", ""]
        lines += res["notes"]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated run names (default: all)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--report-only", action="store_true", help="re-render the .md from the .json")
    common.bench_args(ap, out="bench/results/accuracy")
    args = ap.parse_args()
    prefix = common.out_prefix(args, "bench/results/accuracy")
    res = common.load_json(prefix.with_suffix(".json"), {"runs": {}})
    if args.report_only:
        common.write_text_atomic(prefix.with_suffix(".md"), render(res))
        return 0
    keys = args.only.split(",") if args.only else list(RUNS)
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.smoke:
        keys, seeds = ["cora-gcn"], [0]
    for k in keys:
        if k not in RUNS:
            raise SystemExit(f"unknown run {k!r}; valid: {', '.join(RUNS)}")
    command = common.command_line("accuracy.py")
    for key in keys:
        opts = {**RUNS[key][1], **({"epochs": 2} if args.smoke else {})}
        rows = []
        for seed in seeds:
            r = run_one(key, opts, seed, args.threads)
            print(f"{key} seed {seed}: test {r['test_accuracy']:.4f}", flush=True)
            rows.append({**r, "command": command})
        cfg = {k: list(v) if isinstance(v, tuple) else v for k, v in opts.items()}
        # re-read: other invocations may have written their runs meanwhile
        res = common.load_json(prefix.with_suffix(".json"), {"runs": {}})
        old = res["runs"].get(key)
        if old and old.get("config") == cfg:  # same settings, other seeds: kept
            mine = {r["seed"] for r in rows}
            rows = sorted(
                [r for r in old["seeds"] if r["seed"] not in mine] + rows, key=lambda r: r["seed"]
            )
        res["runs"][key] = {"dataset": RUNS[key][0], "config": cfg, "seeds": rows}
        every = [
            r.get("command", res.get("command")) for v in res["runs"].values() for r in v["seeds"]
        ]
        res["commands"] = sorted(set(filter(None, every)), key=every.index)
        res["machine"] = common.machine_line(threads=args.threads)
        common.write_results(prefix, res, render)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
