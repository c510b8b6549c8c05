"""Same numbers before and after a restructure: the demo and the accuracy benchmark's runs,
trained by two commits of shoal on the same data with the same seeds, compared number by number.

Each side runs from its own source tree (``PYTHONPATH=<tree>/src``, the same interpreter and
packages): the base commit in a git worktree under ``WORK/same_numbers/base``, the other side
this checkout. Both run the same command lines, one thread each (``OMP_NUM_THREADS=1
--threads 1``), the training runs of the two sides at the same time, the demo one side after
the other:

- ``demo``: ``shoal demo``, the single-process trainer and the five engines on Cora (4 parts,
  2 processes; its run JSONs);
- every run of ``bench/accuracy.py`` (``RUNS``) at seed 0 with its options, the epochs capped
  at ``--epochs-cap`` (0 = the benchmark's own) except the runs of ``--full``;
- ``link``: link prediction on Cora (``shoal data split-edges``, ``shoal train --task link``,
  5 epochs).

For every run the comparison takes the final test and validation metrics, the best epoch and
every epoch's loss, training accuracy and validation metric, and reports the largest absolute
difference (0.0 = identical). Timings are not compared.

Usage::

    python bench/same_numbers.py [--base 32fc5bf] [--only demo,link,cora-gcn,...]
                                 [--epochs-cap 30] [--full cora-gcn]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import accuracy  # bench/accuracy.py: the runs and their flags
import common
from common import PY, ROOT

#: the metrics of a run JSON compared (top level) and per epoch (history)
TOP = ("test_accuracy", "val_accuracy", "test_mrr", "val_mrr", "best_epoch", "epochs")
PER_EPOCH = ("loss", "train_accuracy", "val_accuracy", "val_mrr")
ONE_THREAD = ["--seed", "0", "--threads", "1", "--no-progress"]


def _run(side: Path, args: list[Any], log: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(side / "src"), "OMP_NUM_THREADS": "1", "SHOAL_QUIET": ""}
    env.pop("SHOAL_ENGINES", None)
    with open(log, "a") as f:
        p = subprocess.run(
            [PY, "-m", "shoal", *map(str, args)], cwd=side, env=env, stdout=f, stderr=f
        )
    if p.returncode:
        raise SystemExit(
            f"{side}: shoal {' '.join(map(str, args))} failed ({p.returncode}); see {log}"
        )


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def the_runs(only: set[str], cap: int, full: set[str], out: Path) -> dict[str, list[Any]]:
    """Run name -> ``shoal`` arguments (without ``--json``) of the runs in ``only``; ``demo``
    is run apart."""
    runs = {}
    for key, (dataset, opts, _) in accuracy.RUNS.items():
        if key in only:
            o = {**opts, "epochs": min(opts["epochs"], cap)} if cap and key not in full else opts
            g = common.dataset_graph(dataset)
            runs[key] = ["train", "--graph", g, *accuracy.flags(o), *ONE_THREAD]
    link = out / "cora-link"
    if "link" in only and not (link / "meta.json").exists():
        common.shoal(
            "data", "split-edges", common.dataset_graph("cora"), "--out", link, "--overwrite"
        )
    if "link" in only:
        runs["link"] = ["train", "--graph", link, "--task", "link", "--epochs", "5", *ONE_THREAD]
    return runs


def run_side(side: Path, out: Path, runs: dict[str, list[Any]]) -> dict[str, Path]:
    """The training runs on one side; returns run name -> its JSON."""
    out.mkdir(parents=True, exist_ok=True)
    for key, args in runs.items():
        _run(side, [*args, "--json", out / f"{key}.json"], out / "log.txt")
    return {key: out / f"{key}.json" for key in runs}


def run_demo(side: Path, out: Path) -> dict[str, Path]:
    """``shoal demo`` on one side; returns ``demo/<run>`` -> its JSON."""
    _run(side, ["demo", "--workdir", out / "demo"], out / "log.txt")
    return {f"demo/{p.stem}": p for p in sorted((out / "demo" / "runs").glob("*.json"))}


def _diff(a: Any, b: Any) -> float:
    if a is None and b is None:
        return 0.0
    if a is None or b is None:
        return math.inf
    return abs(float(a) - float(b))


def compare(x: dict, y: dict) -> dict[str, Any]:
    """The largest absolute difference of the compared metrics, and the first side's final
    test metric."""
    worst, where = 0.0, None
    for k in TOP:
        if k in x or k in y:
            d = _diff(x.get(k), y.get(k))
            if d > worst:
                worst, where = d, k
    hx, hy = x.get("history", []), y.get("history", [])
    if len(hx) != len(hy):
        return {"max_abs_diff": math.inf, "where": f"{len(hx)} vs {len(hy)} epochs"}
    for i, (ex, ey) in enumerate(zip(hx, hy, strict=True)):
        for k in PER_EPOCH:
            if k in ex or k in ey:
                d = _diff(ex.get(k), ey.get(k))
                if d > worst:
                    worst, where = d, f"epoch {i + 1} {k}"
    metric = "test_mrr" if "test_mrr" in x else "test_accuracy"
    return {"max_abs_diff": worst, "where": where, metric: x.get(metric), "epochs": len(hx)}


def render(res: dict) -> str:
    cap = res["epochs_cap"]
    lines = common.header(
        "Same numbers before and after the restructure",
        res,
        f"Base commit {res['base']} against {res['head']}: each run trained by both from the "
        "same data with the same seeds and one thread; the largest absolute difference over "
        "the final test/validation metrics, the best epoch and every epoch's loss, training "
        "accuracy and validation metric. Accuracy runs: `bench/accuracy.py`'s settings at seed "
        f"0, epochs {f'capped at {cap}' if cap else 'their own'} except {res['full'] or 'none'}; "
        "`demo/*`: the runs of `shoal demo`; `link`: Cora link prediction, 5 epochs.",
    )
    lines += [
        "| run | epochs | test metric (base) | largest difference | where |",
        "|---|---|---|---|---|",
    ]
    for key, r in res["runs"].items():
        m = r.get("test_mrr", r.get("test_accuracy"))
        lines.append(
            f"| {key} | {r.get('epochs', '?')} | {m if m is None else f'{m:.4f}'} | "
            f"{r['max_abs_diff']:.3g} | {r['where'] or '-'} |"
        )
    same = all(r["max_abs_diff"] == 0.0 for r in res["runs"].values())
    return (
        "\n".join(
            [*lines, "", "Every number identical." if same else "Some numbers differ (table)."]
        )
        + "\n"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--base", default="32fc5bf", help="the commit compared against (default 32fc5bf)"
    )
    ap.add_argument(
        "--only", help="comma-separated runs (accuracy.py names, link, demo; default all)"
    )
    ap.add_argument(
        "--epochs-cap", type=int, default=30, help="epochs of each accuracy run (0 = its own)"
    )
    ap.add_argument(
        "--full", default="cora-gcn", help="accuracy runs not capped (default cora-gcn)"
    )
    ap.add_argument("--report-only", action="store_true", help="re-render the .md from the .json")
    common.bench_args(ap, out="bench/results/same_numbers")
    args = ap.parse_args()
    prefix = common.out_prefix(args, "bench/results/same_numbers")
    if args.report_only:
        res = common.load_json(prefix.with_suffix(".json"))
        common.write_text_atomic(prefix.with_suffix(".md"), render(res))
        return 0
    if args.smoke:  # HEAD against itself, Cora GCN for 2 epochs
        args.base, args.only, args.epochs_cap, args.full = "HEAD", "cora-gcn", 2, ""
    out = common.WORK / "same_numbers"
    only = set(args.only.split(",")) if args.only else {*accuracy.RUNS, "link", "demo"}
    runs = the_runs(only, args.epochs_cap, set(args.full.split(",")), out)
    head = _git("rev-parse", "--short", "HEAD")
    dirty = _git("status", "--porcelain", "src")
    base = out / "base"
    _git("worktree", "add", "--force", "--detach", str(base), args.base)
    try:
        # the training runs of both sides at the same time (one thread each; timings are not
        # compared), the demo's 2-process engines one side after the other
        with ThreadPoolExecutor(2) as pool:
            ta = pool.submit(run_side, base, out / "base-runs", runs)
            b = run_side(ROOT, out / "head-runs", runs)
            a = ta.result()
        if "demo" in only:
            a.update(run_demo(base, out / "base-runs"))
            b.update(run_demo(ROOT, out / "head-runs"))
    finally:
        _git("worktree", "remove", "--force", str(base))
    res = common.new_results(
        "same_numbers.py",
        threads=1,
        base=args.base,
        head=head + (" (with uncommitted changes in src/)" if dirty else ""),
        epochs_cap=args.epochs_cap,
        full=args.full,
        runs={k: compare(json.loads(a[k].read_text()), json.loads(b[k].read_text())) for k in a},
    )
    common.write_results(prefix, res, render)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
