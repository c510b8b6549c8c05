"""Same numbers before and after a restructure: the demo and the accuracy benchmark's runs,
trained by two commits of shoal on the same data with the same seeds, compared number by number.

Each side runs from its own source tree (``PYTHONPATH=<tree>/src``, the same interpreter and
packages): the base commit in a git worktree under ``bench/work/same_numbers/base``, the other
side this checkout. Both run the same command lines (``shoal train`` flags did not change), one
thread each (``OMP_NUM_THREADS=1 --threads 1``):

- ``shoal demo``: the single-process trainer and the five engines on Cora (4 parts, 2
  processes; its run JSONs);
- every run of ``bench/accuracy.py`` (``RUNS``) at seed 0 with its hyper-parameters, the epochs
  capped at ``--epochs-cap`` (default 30; 0 = the benchmark's own) except those listed in
  ``--full`` (default ``cora-gcn``, run to its 200 epochs);
- link prediction on Cora (``shoal data split-edges`` + ``shoal train --task link``, 5 epochs).

For every run the comparison takes the final test and validation metrics, the best epoch and
every epoch's loss, training accuracy and validation metric, and reports the largest absolute
difference (0.0 = identical). Timings are not compared.

Usage::

    python bench/same_numbers.py [--base 32fc5bf] [--only demo,cora-gcn,...]

Writes ``bench/results/same_numbers.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import PY, RESULTS, ROOT, SHARED, WORK, command_line, machine_line, write_json
from common import write_text_atomic as write_text

HERE = Path(__file__).resolve().parent
OUT = WORK / "same_numbers"
#: the metrics of a run JSON compared (top level) and per epoch (history)
TOP = ("test_accuracy", "val_accuracy", "test_mrr", "val_mrr", "best_epoch", "epochs")
PER_EPOCH = ("loss", "train_accuracy", "val_accuracy", "val_mrr")


def _flags(opts: dict[str, Any]) -> list[str]:
    """``shoal train`` flags for accuracy.py's option dict."""
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


def _run(side: Path, args: list[str], log: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(side / "src"), "OMP_NUM_THREADS": "1", "SHOAL_QUIET": ""}
    env.pop("SHOAL_ENGINES", None)
    with open(log, "a") as f:
        p = subprocess.run([PY, "-m", "shoal", *args], cwd=side, env=env, stdout=f, stderr=f)
    if p.returncode:
        raise SystemExit(
            f"{side.name}: shoal {' '.join(args)} failed (exit {p.returncode}); see {log}"
        )


def _data(name: str) -> Path:
    d = OUT / "data" / name
    if not d.exists():
        d.parent.mkdir(parents=True, exist_ok=True)
        _run(
            ROOT,
            ["data", "import", str(SHARED / name / "graph.npz"), "--out", str(d)],
            OUT / "import.log",
        )
    return d


def _accuracy_runs(cap: int, full: set[str]) -> dict[str, list[str]]:
    sys.path.insert(0, str(HERE))
    import accuracy

    runs = {}
    for key, (dataset, opts, _) in accuracy.RUNS.items():
        o = dict(opts)
        if cap and key not in full:
            o["epochs"] = min(int(o["epochs"]), cap)
        runs[key] = [
            "train",
            "--graph",
            str(_data(dataset)),
            *_flags(o),
            "--seed",
            "0",
            "--threads",
            "1",
            "--no-progress",
        ]
    return runs


def run_side(
    side: Path, name: str, runs: dict[str, list[str]], only: set[str] | None
) -> dict[str, Path]:
    """Every run on one side; returns run name -> its JSON."""
    out = OUT / name
    out.mkdir(parents=True, exist_ok=True)
    log = out / "log.txt"
    files = {}
    for key, args in runs.items():
        if only and key not in only:
            continue
        path = out / f"{key}.json"
        t0 = time.perf_counter()
        _run(side, [*args, "--json", str(path)], log)
        print(f"{name} {key}: {time.perf_counter() - t0:.0f} s", flush=True)
        files[key] = path
    if not only or "demo" in only:
        demo = out / "demo"
        _run(side, ["demo", "--workdir", str(demo)], log)
        for p in sorted((demo / "runs").glob("*.json")):
            files[f"demo/{p.stem}"] = p
    return files


def _diff(a: Any, b: Any) -> float:
    if a is None and b is None:
        return 0.0
    if a is None or b is None:
        return math.inf
    return abs(float(a) - float(b))


def compare(x: dict, y: dict) -> dict[str, Any]:
    """The largest absolute difference of the compared metrics, and the values of the first
    side's final metrics."""
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
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    base = OUT / "base"
    if base.exists():
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False
        )
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--force", "--detach", str(base), args.base],
        check=True,
    )
    runs = _accuracy_runs(args.epochs_cap, set(args.full.split(",")))
    link = OUT / "data" / "cora-link"
    if not link.exists():
        _run(
            ROOT,
            ["data", "split-edges", str(_data("cora")), "--out", str(link)],
            OUT / "import.log",
        )
    runs["link"] = [
        "train",
        "--graph",
        str(link),
        "--task",
        "link",
        "--epochs",
        "5",
        "--seed",
        "0",
        "--threads",
        "1",
        "--no-progress",
    ]
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "src"], capture_output=True, text=True
    ).stdout.strip()
    a = run_side(base, "base", runs, only)
    b = run_side(ROOT, "head", runs, only)
    rows = {}
    for key in a:
        rows[key] = compare(json.loads(a[key].read_text()), json.loads(b[key].read_text()))
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False
    )
    res = {
        "command": command_line("same_numbers.py", sys.argv[1:]),
        "machine": machine_line(threads=1),
        "base": args.base,
        "head": head + (" (with uncommitted changes in src/)" if dirty else ""),
        "epochs_cap": args.epochs_cap,
        "full": args.full,
        "runs": rows,
    }
    write_json(RESULTS / "same_numbers.json", res, indent=2)
    lines = [
        "# Same numbers before and after the restructure",
        "",
        f"Command: `{res['command']}`  ",
        f"Machine: {res['machine']}",
        "",
        f"Base commit {res['base']} against {res['head']}: each run trained by both from the same "
        "data with the same seeds and one thread; the largest absolute difference over the final "
        "test/validation metrics, the best epoch and every epoch's loss, training accuracy and "
        f"validation metric. Accuracy runs: `bench/accuracy.py`'s settings at seed 0, epochs capped "
        f"at {args.epochs_cap} except {args.full}; `demo/*`: the runs of `shoal demo`; `link`: Cora "
        "link prediction, 5 epochs.",
        "",
        "| run | epochs | test metric (base) | largest difference | where |",
        "|---|---|---|---|---|",
    ]
    for key, r in rows.items():
        m = r.get("test_mrr", r.get("test_accuracy"))
        lines.append(
            f"| {key} | {r.get('epochs', '?')} | {m if m is None else f'{m:.4f}'} | "
            f"{r['max_abs_diff']:.3g} | {r['where'] or '-'} |"
        )
    same = all(r["max_abs_diff"] == 0.0 for r in rows.values())
    lines += ["", "Every number identical." if same else "Some numbers differ (table)."]
    write_text(RESULTS / "same_numbers.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
