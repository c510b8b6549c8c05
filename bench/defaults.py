"""Defaults a user can trust (issue 17): ``shoal train --graph G --model M`` with no other
hyper-parameter, next to the published accuracy and to the tuned runs of
``bench/accuracy.py``.

Every run uses only ``TrainConfig.from_options(model=M, seed=S)`` (the ``paper`` preset and the automatic
evaluation cadence), one thread; the table gives the test accuracy of the best-validation
epoch, the run's wall time and the share of it spent in exact evaluation.

Usage::

    python bench/defaults.py run [--datasets cora,citeseer,amazon_photo,coauthor_physics]
                                 [--models gcn,gat,sage] [--seeds 0,1,2] [--ablation] [--fresh]
    python bench/defaults.py report

Results: bench/results/defaults.json and bench/results/defaults.md (resumable: runs already
in the JSON are kept).
"""

from __future__ import annotations

import argparse
import statistics
import time

import accuracy  # bench/accuracy.py: datasets and published references
from common import RESULTS, command_line, load_json, machine_line, write_json, write_text_atomic

DATASETS = ("cora", "citeseer", "amazon_photo", "coauthor_physics")
MODELS = ("gcn", "gat", "sage")
#: (dataset, model) -> published test accuracy on the same split, with its source
PUBLISHED = {
    ("cora", "gcn"): "0.815 (Kipf & Welling 2017, Table 2)",
    ("citeseer", "gcn"): "0.703 (Kipf & Welling 2017, Table 2)",
    ("cora", "gat"): "0.830 (Veličković et al. 2018, Table 2)",
    ("citeseer", "gat"): "0.725 (Veličković et al. 2018, Table 2)",
    ("amazon_photo", "gcn"): "0.899 (the dataset's own 2-layer GCN check, SOURCE.md)",
    ("coauthor_physics", "gcn"): "0.917 (the dataset's own 2-layer GCN check, SOURCE.md)",
}


def load() -> dict:
    return load_json(RESULTS / "defaults.json", {"runs": {}})


def save(res: dict) -> None:
    write_json(RESULTS / "defaults.json", res, indent=2)
    write_markdown(res)


#: the paper's rule for each of shoal's data-dependent defaults (the ablation)
PAPER_RULES = {
    "gcn": ("normalize_features", True, "rows always divided by their sum"),
    "gat": ("normalize_features", True, "rows always divided by their sum"),
    "sage": ("min_steps", 0, "10 epochs whatever the training set"),
}


def run_one(dataset: str, model: str, seed: int, **kw) -> dict:
    from shoal.training import TrainConfig, TrainData, Trainer
    from shoal.training.config import flatten_config

    data = TrainData.from_graph_dir(accuracy.graph_dir(dataset))
    cfg = TrainConfig.from_options(model=model, seed=seed, threads=1, progress=False, **kw)
    t0 = time.perf_counter()
    r = Trainer(cfg, data).fit()
    wall = time.perf_counter() - t0
    return {
        "test_accuracy": r.test_accuracy,
        "val_accuracy": r.val_accuracy,
        "best_epoch": r.best_epoch,
        "epochs": r.epochs,
        "seconds": wall,
        "eval_share": r.eval_seconds / wall,
        "eval_every": r.config["eval_every_chosen"],
        "config": {
            k: flatten_config(r.config)[k]
            for k in (
                "preset",
                "fanouts",
                "hidden",
                "heads",
                "lr",
                "dropout",
                "weight_decay",
                "epochs",
                "normalize_features",
                "min_steps",
            )
        },
    }


def run(args: argparse.Namespace) -> None:
    res = {"runs": {}} if args.fresh else load()
    res["command"] = command_line("defaults.py")
    res["machine"] = machine_line(threads=1)
    for dataset in args.datasets.split(","):
        for model in args.models.split(","):
            for seed in map(int, args.seeds.split(",")):
                key = f"{dataset}/{model}/seed{seed}"
                if key in res["runs"]:
                    continue
                res["runs"][key] = run_one(dataset, model, seed)
                r = res["runs"][key]
                print(
                    key,
                    round(r["test_accuracy"], 4),
                    f"{r['seconds']:.0f}s",
                    f"eval {100 * r['eval_share']:.0f}%",
                    flush=True,
                )
                save(res)
                if args.ablation and model in PAPER_RULES:
                    name, value, _ = PAPER_RULES[model]
                    key = f"{dataset}/{model}/paper-rule/seed{seed}"
                    if key not in res.setdefault("ablation", {}):
                        res["ablation"][key] = run_one(dataset, model, seed, **{name: value})
                        print(key, round(res["ablation"][key]["test_accuracy"], 4), flush=True)
                        save(res)


def _ablation_md(res: dict) -> list[str]:
    ab, runs = res.get("ablation", {}), res.get("runs", {})
    if not ab:
        return []
    lines = [
        "",
        "## Ablation: shoal's data-dependent defaults against the papers' rules",
        "",
        "GCN and GAT: `normalize_features = auto` (row-normalise only non-negative rows "
        "with at most 64 non-zeros on average) against the papers' rows always divided by "
        "their sum; GraphSAGE: `min_steps = 200` against the paper's 10 epochs whatever "
        "the training set. Same seeds, test accuracy (mean).",
        "",
        "| dataset | model | shoal default | paper rule | difference | paper rule is |",
        "|---|---|---|---|---|---|",
    ]
    for dataset in DATASETS:
        for model, (_, _, what) in PAPER_RULES.items():
            p = [r["test_accuracy"] for k, r in ab.items() if k.startswith(f"{dataset}/{model}/")]
            d = [r["test_accuracy"] for k, r in runs.items() if k.startswith(f"{dataset}/{model}/")]
            if p and d:
                a, b = statistics.mean(d), statistics.mean(p)
                lines.append(
                    f"| {dataset} | {model} | {a:.3f} | {b:.3f} | {100 * (a - b):+.1f} | {what} |"
                )
    return lines


def _tuned(dataset: str, model: str) -> str:
    runs = load_json(RESULTS / "accuracy.json").get("runs", {})
    r = runs.get(f"{dataset}-{model}")
    if not r:
        return "-"
    return f"{statistics.mean(s['test_accuracy'] for s in r['seeds']):.3f}"


def write_markdown(res: dict) -> None:
    runs = res.get("runs", {})
    lines = [
        "# Defaults: `shoal train --graph G --model M` and nothing else",
        "",
        f"Command: `{res.get('command', 'python bench/defaults.py run')}`  ",
        f"Machine: {res.get('machine', '?')}",
        "",
        "Every run is `TrainConfig.from_options(model=M, seed=S)`: the `paper` preset (each model's "
        "paper settings, 2 layers sampled 25,10; GCN and GAT features row-normalised when "
        "they are sparse bag-of-words, GraphSAGE at least 200 optimizer steps) and "
        "`eval_every = auto`. Test accuracy "
        "of the best-validation epoch (mean ± sd over seeds); *eval share*: the part of "
        "the run's wall time spent in exact evaluation (target: under ~20%); *tuned*: "
        "`bench/accuracy.py`'s hand-set hyper-parameters on the same split.",
        "",
        "| dataset | model | seeds | test accuracy | published | tuned | wall s | eval share "
        "| eval every | preset values |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for dataset in DATASETS:
        for model in MODELS:
            rs = [r for k, r in runs.items() if k.startswith(f"{dataset}/{model}/")]
            if not rs:
                continue
            acc = [r["test_accuracy"] for r in rs]
            sd = statistics.stdev(acc) if len(acc) > 1 else 0.0
            c = rs[0]["config"]
            vals = (
                f"fanouts {','.join(map(str, c['fanouts']))}, hidden {c['hidden']}, lr "
                f"{c['lr']}, dropout {c['dropout']}, wd {c['weight_decay']}, "
                f"{c['epochs']} epochs{', row-normalised' if c['normalize_features'] else ''}"
            )
            lines.append(
                f"| {dataset} | {model} | {len(rs)} | {statistics.mean(acc):.3f} ± {sd:.3f} | "
                f"{PUBLISHED.get((dataset, model), '-')} | {_tuned(dataset, model)} | "
                f"{statistics.median(r['seconds'] for r in rs):.0f} | "
                f"{100 * statistics.median(r['eval_share'] for r in rs):.0f}% | "
                f"{statistics.median(r['eval_every'] for r in rs):.0f} | {vals} |"
            )
    lines += _ablation_md(res)
    write_text_atomic(RESULTS / "defaults.md", "\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--datasets", default=",".join(DATASETS))
    r.add_argument("--models", default=",".join(MODELS))
    r.add_argument("--seeds", default="0,1,2")
    r.add_argument("--ablation", action="store_true", help="also each paper rule (GCN, GAT, SAGE)")
    r.add_argument("--fresh", action="store_true", help="forget the runs in the JSON")
    sub.add_parser("report")
    args = ap.parse_args()
    {"run": run, "report": lambda _: write_markdown(load())}[args.cmd](args)


if __name__ == "__main__":
    main()
