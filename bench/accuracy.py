"""Accuracy of the single-process trainer on the shared datasets (mean ± std over seeds).

Each dataset's ``graph.npz`` (``../shared/data/<name>/``) is imported once into
``bench/work/data/<name>`` with ``shoal.data.importers.import_graph`` (the official split of
the file), then trained with :class:`shoal.training.Trainer` for every seed in ``--seeds``.
Test accuracy is that of the best-validation epoch, computed exactly (layer-wise full-neighbour
inference). Hyper-parameters are listed in ``RUNS`` below and written next to the figures.

Usage::

    .venv/bin/python bench/accuracy.py [--only cora-gcn,...] [--seeds 0,1,2] [--threads 1]

Writes ``bench/results/accuracy.json`` and ``bench/results/accuracy.md`` (merging with runs
already there, so runs can be done in pieces).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import common
from common import (
    RESULTS,
    SHARED,
    command_line,
    load_json,
    machine_line,
    write_json,
    write_text_atomic,
)

WORK = common.WORK / "data"

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

#: name -> (dataset, TrainConfig options, target / published reference)
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


def graph_dir(name: str) -> Path:
    out = WORK / name
    if not (out / "meta.json").exists():
        from shoal.data.importers import import_graph

        src = SHARED / name / "graph.npz"
        if not src.exists():
            raise SystemExit(f"{src} not found (the shared datasets are needed)")
        WORK.mkdir(parents=True, exist_ok=True)
        import_graph(src, out)
    return out


def run_one(key: str, seed: int, threads: int) -> dict:
    from shoal.training import TrainConfig, TrainData, Trainer

    dataset, opts, _ = RUNS[key]
    data = TrainData.from_graph_dir(graph_dir(dataset))
    cfg = TrainConfig.from_options(seed=seed, threads=threads, progress=False, **opts)
    t0 = time.perf_counter()
    r = Trainer(cfg, data).fit()
    return {
        "seed": seed,
        "test_accuracy": r.test_accuracy,
        "val_accuracy": r.val_accuracy,
        "best_epoch": r.best_epoch,
        "epochs": r.epochs,
        "seconds": time.perf_counter() - t0,
        "seconds_per_epoch": r.seconds_per_epoch,
    }


def write_tables(results: dict) -> None:
    write_json(RESULTS / "accuracy.json", results, indent=2)  # concurrent invocations read it
    lines = [
        "# Accuracy of the single-process trainer",
        "",
        f"Command: `{results['command']}`  ",
        f"Machine: {results['machine']}",
        "",
        "Test accuracy of the best-validation epoch (exact layer-wise inference), official "
        "split of each `graph.npz`, mean ± std (sample std) over seeds.",
        "",
        "| run | test accuracy | val accuracy | seeds | target / published | hyper-parameters |",
        "|---|---|---|---|---|---|",
    ]
    for key in RUNS:
        if key not in results["runs"]:
            continue
        rows = results["runs"][key]["seeds"]
        t = [r["test_accuracy"] for r in rows]
        v = [r["val_accuracy"] for r in rows]
        sd = statistics.stdev(t) if len(t) > 1 else 0.0
        opts = results["runs"][key]["config"]
        hp = ", ".join(f"{k}={v}" for k, v in opts.items())
        lines.append(
            f"| {key} | {statistics.mean(t):.3f} ± {sd:.3f} | {statistics.mean(v):.3f} | "
            f"{','.join(str(r['seed']) for r in rows)} | {RUNS[key][2]} | {hp} |"
        )
    lines += [
        "",
        "References: T. Kipf, M. Welling, Semi-supervised classification with graph "
        "convolutional networks, ICLR 2017 (Table 2). P. Veličković et al., Graph attention "
        "networks, ICLR 2018 (Table 2). O. Shchur et al., Pitfalls of graph neural network "
        "evaluation, R2L workshop 2018 (GS-mean row, averaged over random 20-per-class splits, so not the same split as here). "
        "K. Xu et al., How powerful are graph neural networks?, ICLR 2019 (graph "
        "classification only).",
        "",
        *results.get("notes", []),
        "",
        "Common options: Adam; dropout on every layer's input; GCN/GAT/GIN use full "
        "neighbourhoods (fanouts all) with all 120-140 training nodes in one batch (= full-batch "
        "training) and row-normalised features (Kipf & Welling); GraphSAGE samples 25 then 10 "
        "neighbours. Weight decay applies to all parameters.",
    ]
    write_text_atomic(RESULTS / "accuracy.md", "\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated run names (default: all)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--render-only", action="store_true", help="rewrite the .md from the .json")
    args = ap.parse_args()
    if args.render_only:
        write_tables(load_json(RESULTS / "accuracy.json"))
        return 0
    keys = args.only.split(",") if args.only else list(RUNS)
    for k in keys:
        if k not in RUNS:
            raise SystemExit(f"unknown run {k!r}; valid: {', '.join(RUNS)}")
    path = RESULTS / "accuracy.json"
    results = load_json(path, {"runs": {}})
    results["command"] = command_line("accuracy.py")
    results["machine"] = machine_line(threads=args.threads)
    for key in keys:
        rows = []
        for seed in [int(s) for s in args.seeds.split(",")]:
            r = run_one(key, seed, args.threads)
            print(
                f"{key} seed {seed}: test {r['test_accuracy']:.4f} val {r['val_accuracy']:.4f} "
                f"best epoch {r['best_epoch']} ({r['seconds']:.0f} s)",
                flush=True,
            )
            rows.append(r)
        cfg = dict(RUNS[key][1])
        cfg["fanouts"] = list(cfg["fanouts"])
        # re-read: other invocations may have written their runs meanwhile
        if path.exists():
            results["runs"] = load_json(path)["runs"]
        old = results["runs"].get(key)
        if old and old.get("config") == cfg:  # same settings, other seeds: keep them
            mine = {r["seed"] for r in rows}
            rows = sorted(
                [r for r in old["seeds"] if r["seed"] not in mine] + rows, key=lambda r: r["seed"]
            )
        results["runs"][key] = {"dataset": RUNS[key][0], "config": cfg, "seeds": rows}
        write_tables(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
