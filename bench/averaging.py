"""The ``averaging`` engine's mechanism, on and off (issue 37): SDT-GNN's model averaging.

On one store per dataset (SPRING, ``--parts`` parts, ``--halo-features``: the stores of
``bench/distributed.py accuracy``), 2 processes, the same seeds and hyper-parameters
(``common.HPARAMS``) for every row:

- ``carried``: one model per rank carried through its parts in turn (``--no-part-models``),
  Adam moments averaged with the weights;
- ``part-models``: one model per part, trained in turn, all p averaged each epoch
  (``--part-models``, SDT-GNN Sec. III-C), moments averaged;
- ``paper``: ``--part-models --local-optimizer-state``, SDT-GNN Sec. III-C/D as written
  (each model keeps its own optimizer state: the paper averages weights only);
- ``carried-local-moments``: ``--no-part-models --local-optimizer-state``;
- ``no-averaging``: the mechanism off: ``--average-every EPOCHS``, the ranks' models train
  apart and are averaged once, after the last epoch (one-shot averaging);
- ``single``: the single-process trainer on the whole graph (the target).

Each row: mean +- std of the test accuracy (best validation epoch, evaluated every 5 epochs)
over the seeds, seconds per epoch (median over the seeds of each run's mean; every row's runs
interleaved seed by seed, so time-comparable within a table) and MB all-reduced per epoch per
rank (the averaging's only traffic).

Usage: ``python bench/averaging.py [--datasets cora,amazon_photo] [--seeds 0,1,2,3,4]
[--parts 4] [--rows carried,...] [--epochs N] [--out bench/results/averaging]``
(``--report-only``: re-render the markdown from the JSON, e.g. after a change of the engine's
defaults, which the table names; ``--smoke``: one row on Cora, one epoch)
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import common
from common import HPARAMS, hp_flags

NAME = "bench/results/averaging"
ROWS = {
    "carried": ["--no-part-models"],
    "part-models": ["--part-models"],
    "paper": ["--part-models", "--local-optimizer-state"],
    "carried-local-moments": ["--no-part-models", "--local-optimizer-state"],
    "no-averaging": ["--no-part-models", "--average-every", "{epochs}"],
}
NPROC = 2
SMOKE = "--datasets cora --seeds 0 --parts 2 --epochs 1 --rows no-averaging"


def default_row() -> str:
    """The row that equals the engine's defaults (no flags)."""
    from shoal.engines.averaging import AveragingConfig

    d = AveragingConfig()
    if not d.average_optimizer:
        return "paper" if d.part_models else "carried-local-moments"
    return "part-models" if d.part_models else "carried"


def run_row(store: Path, row: str, hp: dict, seed: int) -> dict:
    extra = [a.format(epochs=hp["epochs"]) for a in ROWS[row]]
    out = common.WORK / "averaging" / f"{store.name}-{row}-{seed}.json"
    flags = ["--store", store, "--engine", "averaging", "--nproc", NPROC, "--threads", 1]
    d = common.train(*flags, *hp_flags(hp, seed), *extra, out=out)
    return {
        "test_accuracy": d["test_accuracy"],
        "seconds_per_epoch": d["seconds_per_epoch"],
        "allreduce_bytes_per_epoch": d["comm_per_epoch"]["allreduce_bytes"],
        "settings": d["config"]["engine"],
    }


def _ms(xs: list[float]) -> str:
    if len(xs) < 2:
        return f"{xs[0]:.3f}" if xs else "-"
    return f"{statistics.mean(xs):.3f} ± {statistics.stdev(xs):.3f}"


def render(res: dict) -> str:
    L = common.header(
        "averaging engine (SDT-GNN): model averaging on and off",
        res,
        f"{NPROC} processes, {res['parts']} parts (SPRING, `--halo-features`), seeds "
        f"{', '.join(map(str, res['seeds']))}; the hyper-parameters of bench/common.py's `HPARAMS` "
        "(below). Test accuracy at the best validation epoch (evaluated every 5 epochs), "
        "mean ± std over the seeds. s/epoch: median over the seeds (rows interleaved seed by "
        "seed); MB all-reduced: per rank and epoch, the averaging's only traffic.",
        "Rows: `carried` = one model per rank through its parts in turn; `part-models` = "
        "one model per part, all p averaged each round (SDT-GNN Sec. III-C); `paper` = "
        "that with each model's own Adam moments (Sec. III-D averages weights only); "
        "`no-averaging` = averaged once, after the last epoch; `single` = one process on "
        "the whole graph. Every other row averages the Adam moments with the weights. "
        f"`shoal train --engine averaging` with no flags = the `{default_row()}` row.",
    )
    L += [
        "| dataset | row | flags | test accuracy | vs single (points) | s/epoch "
        "| MB all-reduced/epoch |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, entry in res["datasets"].items():
        single_acc = [r["test_accuracy"] for r in entry["single"]]
        base = statistics.mean(single_acc)
        L.append(f"| {name} | single | | {_ms(single_acc)} | | - | - |")
        for row, runs in entry["rows"].items():
            acc = [r["test_accuracy"] for r in runs]
            sec = statistics.median(r["seconds_per_epoch"] for r in runs)
            mb = statistics.median(r["allreduce_bytes_per_epoch"] for r in runs) / 1e6
            flags = " ".join(ROWS[row]).format(epochs=entry["hparams"]["epochs"])
            d = 100 * (statistics.mean(acc) - base)
            L.append(
                f"| {name} | {row} | `{flags}` | {_ms(acc)} | {d:+.1f} | {sec:.3f} | {mb:.2f} |"
            )
    L += ["", "Hyper-parameters:", ""]
    L += [f"- {name}: `{json.dumps(e['hparams'])}`" for name, e in res["datasets"].items()]
    return "\n".join(L)


def main() -> None:
    ap = common.bench_args(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]), out=NAME)
    ap.add_argument("--datasets", default="cora,amazon_photo")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--rows", default=",".join(ROWS), help="rows to run (single always runs)")
    ap.add_argument("--epochs", type=int, default=None, help="instead of HPARAMS' epochs")
    ap.add_argument("--report-only", action="store_true", help="re-render <out>.md from <out>.json")
    args = ap.parse_args()
    prefix = common.out_prefix(args, NAME)
    if args.report_only:
        common.write_results(prefix, common.load_json(prefix.with_suffix(".json")), render)
        return
    if args.smoke:
        args = ap.parse_args(["--smoke", *SMOKE.split()])
    seeds = [int(s) for s in args.seeds.split(",")]
    res = common.new_results("averaging.py", threads=1, parts=args.parts, seeds=seeds)
    res["datasets"] = {}
    for name in args.datasets.split(","):
        hp = dict(HPARAMS[name], **({"epochs": args.epochs} if args.epochs else {}))
        g, store = common.dataset_store(name, args.parts)
        entry = res["datasets"][name] = {"hparams": hp, "single": [], "rows": {}}
        for seed in seeds:
            out = common.WORK / "averaging" / f"{name}-single-{seed}.json"
            entry["single"].append(common.single(g, hp, seed, out=out))
            for row in args.rows.split(","):
                r = run_row(store, row, hp, seed)
                entry["rows"].setdefault(row, []).append(r)
                print(name, seed, row, r["test_accuracy"], f"{r['seconds_per_epoch']:.3f}")
            common.write_results(prefix, res, render)


if __name__ == "__main__":
    main()
