"""Defaults a user can trust (issue 17): ``shoal train --graph G --model M --seed S`` and no
other hyper-parameter (the ``paper`` preset, the automatic evaluation cadence), one thread,
next to the published accuracy and to the tuned runs of ``bench/accuracy.py``.

The table gives the test accuracy of the best-validation epoch, the run's seconds (its epochs
plus its evaluations, from ``shoal train --json``) and the share of them spent in exact
evaluation. ``--ablation`` also runs each model with the paper's rule in place of shoal's
data-dependent default (:data:`PAPER_RULES`).

Usage::

    python bench/defaults.py run [--datasets cora,citeseer,amazon_photo,coauthor_physics]
                                 [--models gcn,gat,sage] [--seeds 0,1,2] [--ablation] [--fresh]
    python bench/defaults.py report     # re-render the .md from the .json

Runs already in the JSON are kept unless ``--fresh``.
"""

from __future__ import annotations

import argparse
import statistics

import common

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
#: the paper's rule for each of shoal's data-dependent defaults (the ablation)
PAPER_RULES = {
    "gcn": ("--normalize-features", "rows always divided by their sum"),
    "gat": ("--normalize-features", "rows always divided by their sum"),
    "sage": ("--min-steps=0", "10 epochs whatever the training set"),
}


def run_one(dataset: str, model: str, seed: int, *extra: str) -> dict:
    g = common.dataset_graph(dataset)
    out = common.WORK / "defaults" / f"{dataset}-{model}-{seed}{''.join(extra)}.json"
    r = common.train(
        "--graph",
        g,
        "--model",
        model,
        "--seed",
        seed,
        *extra,
        "--threads",
        1,
        "--no-progress",
        out=out,
    )
    c = r["config"]
    seconds = sum(h["seconds"] for h in r["history"]) + r["eval_seconds"]
    return {
        "test_accuracy": r["test_accuracy"],
        "val_accuracy": r["val_accuracy"],
        "best_epoch": r["best_epoch"],
        "epochs": r["epochs"],
        "seconds": seconds,
        "eval_share": r["eval_seconds"] / seconds,
        "eval_every": c["eval_every_chosen"],
        "config": {
            "preset": c["preset"],
            "fanouts": c["sampling"]["fanouts"],
            **{k: c["model"][k] for k in ("hidden", "heads", "dropout", "normalize_features")},
            **{k: c["optim"][k] for k in ("lr", "weight_decay", "epochs", "min_steps")},
        },
    }


def tuned() -> dict:
    """Mean test accuracy of ``bench/results/accuracy.json``'s runs, with its commands."""
    acc = common.load_json(common.RESULTS / "accuracy.json", {"runs": {}})
    means = {
        k: statistics.mean(s["test_accuracy"] for s in r["seeds"]) for k, r in acc["runs"].items()
    }
    return {"commands": acc.get("commands") or [acc.get("command")], "means": means}


def run(args: argparse.Namespace, prefix) -> dict:
    res = (
        {"runs": {}} if args.fresh else common.load_json(prefix.with_suffix(".json"), {"runs": {}})
    )
    res.update(command=common.command_line("defaults.py"), machine=common.machine_line(threads=1))
    res["tuned"] = tuned()
    extra = ["--epochs", "2"] if args.smoke else []
    for dataset in args.datasets.split(","):
        for model in args.models.split(","):
            for seed in map(int, args.seeds.split(",")):
                todo = [("runs", f"{dataset}/{model}/seed{seed}", [])]
                if args.ablation and model in PAPER_RULES:
                    rule = [PAPER_RULES[model][0]]
                    todo.append(("ablation", f"{dataset}/{model}/paper-rule/seed{seed}", rule))
                for part, key, flags in todo:
                    if key not in res.setdefault(part, {}):
                        res[part][key] = run_one(dataset, model, seed, *flags, *extra)
                        print(key, round(res[part][key]["test_accuracy"], 4), flush=True)
                        common.write_results(prefix, res, render)
    return res


def _ablation_md(res: dict) -> list[str]:
    ab, runs = res.get("ablation", {}), res["runs"]
    if not ab:
        return []
    lines = [
        "",
        "## Ablation: shoal's data-dependent defaults against the papers' rules",
        "",
        "GCN and GAT: `normalize_features = auto` (row-normalise only non-negative rows "
        "with at most 64 non-zeros on average) against the papers' rows always divided by "
        "their sum (`--normalize-features`); GraphSAGE: `min_steps = 200` against the paper's "
        "10 epochs whatever the training set (`--min-steps=0`). Same seeds, test accuracy "
        "(mean).",
        "",
        "| dataset | model | shoal default | paper rule | difference | paper rule is |",
        "|---|---|---|---|---|---|",
    ]
    for dataset in DATASETS:
        for model, (_, what) in PAPER_RULES.items():
            p = [r["test_accuracy"] for k, r in ab.items() if k.startswith(f"{dataset}/{model}/")]
            d = [r["test_accuracy"] for k, r in runs.items() if k.startswith(f"{dataset}/{model}/")]
            if p and d:
                a, b = statistics.mean(d), statistics.mean(p)
                lines.append(
                    f"| {dataset} | {model} | {a:.3f} | {b:.3f} | {100 * (a - b):+.1f} | {what} |"
                )
    return lines


def render(res: dict) -> str:
    tuned = res.get("tuned", {"means": {}})
    paras = [
        "Every run is `shoal train --graph G --model M --seed S --threads 1`: the `paper` "
        "preset (each model's paper settings, 2 layers sampled 25,10; GCN and GAT features "
        "row-normalised when they are sparse bag-of-words, GraphSAGE at least 200 optimizer "
        "steps) and `eval_every = auto`. Test accuracy of the best-validation epoch (mean ± sd "
        "over seeds); *seconds*: the run's epochs and evaluations (median over seeds); *eval "
        "share*: the part of them spent in exact evaluation (target: under ~20%); *tuned*: "
        "`bench/accuracy.py`'s hand-set hyper-parameters on the same split, mean test accuracy "
        "copied from `bench/results/accuracy.json` by this command (written by "
        + ", ".join(f"`{c}`" for c in tuned.get("commands", []))
        + ")."
    ]
    every = [*res["runs"].values(), *res.get("ablation", {}).values()]
    old = sorted({r["commit"] for r in every if "commit" in r})
    if old:  # runs of an earlier version of this script
        paras.append(
            f"{sum('commit' in r for r in every)} of the {len(every)} runs were measured by "
            f"`bench/defaults.py` as of commit {', '.join(old)} (the trainer called in-process; "
            "seconds: its `fit`); rendered by `python bench/defaults.py report`."
        )
    lines = common.header(
        "Defaults: `shoal train --graph G --model M` and nothing else", res, *paras
    )
    lines += [
        "| dataset | model | seeds | test accuracy | published | tuned | seconds | eval share "
        "| eval every | preset values |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for dataset in DATASETS:
        for model in MODELS:
            rs = [r for k, r in res["runs"].items() if k.startswith(f"{dataset}/{model}/")]
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
            t = tuned["means"].get(f"{dataset}-{model}")
            lines.append(
                f"| {dataset} | {model} | {len(rs)} | {statistics.mean(acc):.3f} ± {sd:.3f} | "
                f"{PUBLISHED.get((dataset, model), '-')} | {'-' if t is None else f'{t:.3f}'} | "
                f"{statistics.median(r['seconds'] for r in rs):.0f} | "
                f"{100 * statistics.median(r['eval_share'] for r in rs):.0f}% | "
                f"{statistics.median(r['eval_every'] for r in rs):.0f} | {vals} |"
            )
    return "\n".join(lines + _ablation_md(res)) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.bench_args(ap, out="bench/results/defaults")
    sub = ap.add_subparsers(dest="cmd")
    r = sub.add_parser("run", help="train (runs already in the JSON are kept)")
    r.add_argument("--datasets", default=",".join(DATASETS))
    r.add_argument("--models", default=",".join(MODELS))
    r.add_argument("--seeds", default="0,1,2")
    r.add_argument("--ablation", action="store_true", help="also each paper rule (GCN, GAT, SAGE)")
    r.add_argument("--fresh", action="store_true", help="forget the runs in the JSON")
    sub.add_parser("report", help="re-render the .md from the .json")
    args = ap.parse_args()
    prefix = common.out_prefix(args, "bench/results/defaults")
    if args.smoke:  # both sub-commands, Cora GCN 2 epochs, one seed
        args.datasets, args.models, args.seeds, args.ablation, args.fresh = (
            "cora",
            "gcn",
            "0",
            True,
            True,
        )
    elif args.cmd is None:
        ap.error("a sub-command is needed: run or report")
    if args.smoke or args.cmd == "run":
        run(args, prefix)
    if args.smoke or args.cmd == "report":
        res = common.load_json(prefix.with_suffix(".json"))
        common.write_text_atomic(prefix.with_suffix(".md"), render(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
