"""Compact feature storage (issue 54): accuracy and out-of-core bytes of each feature dtype.

    python bench/feature_dtype.py --part accuracy [--seeds 0,1,2] [--threads 1]
    python bench/feature_dtype.py --part io [--graph 200k] [--epochs 3] [--fraction 4] [--seeds 0,1,2]
        [--discard-graphs]
    python bench/feature_dtype.py --report-only

``accuracy``: Cora and Amazon-Photo imported once per dtype (``shoal data import
--feature-dtype D``: float32, float16, bfloat16, int8), then ``shoal train --graph G`` with
GraphSAGE (:data:`RUNS`) for each seed, on one process; test accuracy of the best-validation
epoch (exact inference), mean ± std over the seeds, and each dtype's difference to float32.

``io``: the DC-SBM graph ``common.GRAPHS[--graph]`` generated once per dtype (``shoal data
synth dcsbm --feature-dtype D``: the same float32 features, stored rounded or quantised), then
trained uncapped once per seed (the accuracy of each dtype against float32's, and the in-memory
epoch), and out of core with the first seed, each dtype under the *same* budget: the footprint the uncapped float32
run measured plus 8 MiB, two windows of 16 MiB and a K-th (``--fraction``) of the float32 features, 90% of
a memory cgroup's limit (``common.run_capped``, shoal's default budget in a cgroup; the graph's
page cache dropped first; where no cgroup can be made, ``--memory`` of that size): the
bytes read per epoch (a compact row is half or a quarter of the bytes, and twice or four times
as many rows fit the cache) and the epoch's seconds. The timing is a claim about an idle
machine: run this part alone on it.

Both parts write their section of ``bench/results/feature_dtype.{md,json}`` (running one keeps
the other's). ``--smoke``: the bundled Cora (float32) and the smoke graph (float32 uncapped, int8
capped), 2 epochs, one seed.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import common

DTYPES = ("float32", "float16", "bfloat16", "int8")
#: the smoke run's dtypes: the float32 reference and the one with scales (float16's and
#: bfloat16's decoding is the same code path, tested bit for bit in tests/rows)
SMOKE_DTYPES = ("float32", "int8")
#: name -> (dataset, ``shoal train`` options): GraphSAGE on each
RUNS: dict[str, tuple[str, dict[str, Any]]] = {
    "cora-sage": (
        "cora",
        dict(
            model="sage",
            fanouts=(-1, -1),
            batch_size=4096,
            hidden=64,
            epochs=200,
            lr=0.01,
            dropout=0.5,
            weight_decay=5e-4,
            normalize_features=True,
        ),
    ),
    "amazon_photo-sage": (
        "amazon_photo",
        dict(
            model="sage",
            fanouts=(25, 10),
            batch_size=1024,
            hidden=128,
            epochs=100,
            lr=0.01,
            dropout=0.7,
            weight_decay=5e-4,
            eval_every=4,
            eval_batch_size=2048,
        ),
    ),
}
#: the two windows of feature rows every budget holds (``shoal.rows.budget.MIN_WINDOW``)
WINDOW = 16 << 20
#: room for the reserve measured anew by each run (a few MiB apart)
MARGIN = 8 << 20
MODEL = ["--model", "sage", "--fanouts", "10,5", "--hidden", "128", "--threads", "2"]


def flags(opts: dict[str, Any]) -> list[str]:
    """``shoal train`` flags of an option dict of :data:`RUNS`."""
    out: list[str] = []
    for k, v in opts.items():
        flag = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            out.append(flag if v else f"--no-{k.replace('_', '-')}")
        elif isinstance(v, tuple):
            out.append(f"{flag}={','.join(map(str, v))}")
        else:
            out += [flag, str(v)]
    return out


def dataset(name: str, dtype: str) -> Path:
    """The shared dataset ``name`` imported with its features stored as ``dtype`` (once)."""
    src = common.SHARED / name / "graph.npz"
    if not src.exists() and name == "cora":
        src = common.bundled_cora()
    if not src.exists():
        raise SystemExit(f"dataset {name!r}: {src} not found (the shared datasets are absent)")
    g = common.WORK / "feature_dtype" / f"{name}-{dtype}"
    if not (g / "meta.json").exists():
        common.shoal("data", "import", src, "--out", g, "--feature-dtype", dtype, "-q")
    return g


def graph(name: str, dtype: str) -> Path:
    """``common.GRAPHS[name]`` generated with its features stored as ``dtype`` (once)."""
    g = common.WORK / "feature_dtype" / f"{name}-{dtype}"
    if not (g / "meta.json").exists():
        spec = common.synth_flags(common.GRAPHS[name])
        common.shoal("data", "synth", "dcsbm", *spec, "--feature-dtype", dtype, "--out", g, "-q")
    return g


def run_accuracy(args: argparse.Namespace) -> dict:
    keys = ["cora-sage"] if args.smoke else list(RUNS)
    seeds = [0] if args.smoke else [int(s) for s in args.seeds.split(",")]
    runs: dict[str, Any] = {}
    for key in keys:
        ds, opts = RUNS[key]
        opts = {**opts, **({"epochs": 2} if args.smoke else {})}
        # (the smoke: float32 only here; the io part runs int8's decoding end to end)
        for dtype in ("float32",) if args.smoke else DTYPES:
            g, rows = dataset(ds, dtype), []
            for seed in seeds:
                out = common.WORK / "feature_dtype" / "runs" / f"{key}-{dtype}-{seed}.json"
                t0 = time.perf_counter()
                how = [*flags(opts), "--seed", seed, "--threads", args.threads, "--no-progress"]
                r = common.train("--graph", g, *how, out=out)
                rows.append(
                    {
                        "seed": seed,
                        "test_accuracy": r["test_accuracy"],
                        "val_accuracy": r["val_accuracy"],
                        "best_epoch": r["best_epoch"],
                        "seconds": time.perf_counter() - t0,
                    }
                )
                print(f"{key} {dtype} seed {seed}: test {r['test_accuracy']:.4f}", flush=True)
            feats = g / "features.npy"
            runs[f"{key}/{dtype}"] = {
                "dataset": ds,
                "dtype": dtype,
                "feature_bytes": feats.stat().st_size,
                "config": {k: list(v) if isinstance(v, tuple) else v for k, v in opts.items()},
                "seeds": rows,
            }
    return {"runs": runs, "command": common.command_line("feature_dtype.py")}


def run_io(args: argparse.Namespace) -> dict:
    name = "smoke" if args.smoke else args.graph
    epochs = 2 if args.smoke else args.epochs
    seeds = [0] if args.smoke else [int(s) for s in args.seeds.split(",")]
    capped = common.caps_available(args.smoke)
    runs: dict[str, Any] = {}
    budget = None
    for dtype in SMOKE_DTYPES if args.smoke else DTYPES:
        g = graph(name, dtype)
        f32 = common.GRAPHS[name]["nodes"] * common.GRAPHS[name]["features"] * 4
        # uncapped, every seed: the accuracy and the in-memory epoch of each dtype
        # (the smoke run: float32's uncapped and int8's capped only)
        free = [
            _train(g, f"{dtype} uncapped", None, epochs, [], seed)
            for seed in seeds
            if not (args.smoke and dtype != "float32")
        ]
        if budget is None:  # the uncapped float32 run's footprint sizes the one budget
            fp = common.footprint(free[0].get("train"))
            if fp is None:
                raise SystemExit("the uncapped run recorded no memory plan")
            budget = fp + MARGIN + 2 * WINDOW + f32 // args.fraction
        if args.smoke and dtype == "float32":
            continue
        # capped (the first seed): shoal's budget is 90% of the cgroup's limit
        # (bench/out_of_core.py's runs)
        extra = [] if capped else ["--memory", str(budget)]
        cap = -(-budget * 10 // 9) + 4096 if capped else None
        r = _train(g, dtype, cap, epochs, extra, seeds[0])
        runs[dtype] = {
            "feature_bytes": (g / "features.npy").stat().st_size,
            "budget": budget,
            "capped": capped,
            **_io_record(r),
            "uncapped": [{"seed": s, **_io_record(u)} for s, u in zip(seeds, free)],
        }
        if args.discard_graphs and not args.smoke:  # room for the next dtype's copy
            shutil.rmtree(g)
    return {
        "graph": name,
        "spec": common.GRAPHS[name],
        "epochs": epochs,
        "fraction": args.fraction,
        "seeds": seeds,
        "runs": runs,
        "command": common.command_line("feature_dtype.py"),
        "machine": common.machine_line(threads=2),
    }


def _io_record(r: dict) -> dict:
    """One run's return code, per-epoch reads and seconds, and test accuracy."""
    hist = (r.get("train") or {}).get("history") or []
    io = [h.get("io") or {} for h in hist]
    return {
        "returncode": r["returncode"],
        "bytes_read": [i.get("bytes_read", 0) for i in io],
        "rows_read": [i.get("rows_read", 0) for i in io],
        "hit_rate": [i.get("cache_hit_rate") or 0 for i in io],
        "seconds": [h["seconds"] for h in hist],
        "test_accuracy": (r.get("train") or {}).get("test_accuracy"),
    }


def _train(g: Path, tag: str, cap: int | None, epochs: int, extra: list[str], seed: int) -> dict:
    out = common.WORK / "feature_dtype" / "io" / f"{g.name}-{tag.replace(' ', '-')}-{seed}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    cmd = [*common.SHOAL, "train", "--graph", str(g), *MODEL, "--epochs", str(epochs)]
    cmd += ["--eval-every", str(epochs), "--seed", str(seed), "--no-progress", "--json", str(out)]
    cmd += extra
    res = common.run_capped(cmd, cap, name="feature_dtype", evict_paths=[g], cwd=common.ROOT)
    if res["returncode"] == 0 and out.exists():
        res["train"] = common.load_json(out)
    print(f"[{tag} seed {seed}] rc={res['returncode']} {res['seconds']:.0f} s", flush=True)
    return res


def _mean_sd(xs: list[float]) -> tuple[float, float]:
    return statistics.mean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0


def render(res: dict) -> str:
    lines = common.header(
        "Compact feature storage (issue 54)",
        {"commands": res.get("commands", []), "machine": res.get("machine")},
        "Features stored as float32, float16, bfloat16 (raw uint16 bits) or int8 (symmetric "
        "per-row quantisation, a float32 scale per row; docs/format.md#feature-dtypes), "
        "decoded into float32 as rows are gathered: the model computes in float32.",
    )
    acc = res.get("accuracy")
    lines += ["## Accuracy (GraphSAGE, one process)", ""]
    if not acc:
        lines += ["Not run yet: `python bench/feature_dtype.py --part accuracy`.", ""]
    else:
        lines += [
            f"Written by `{acc['command']}`. Test accuracy of the best-validation epoch (exact "
            "inference), official split, mean ± std over seeds; Δ: the mean's difference to "
            "float32 in points.",
            "",
            "| run | dtype | feature bytes | test accuracy | Δ vs float32 (points) | seeds |",
            "|---|---|---|---|---|---|",
        ]
        for key, run in acc["runs"].items():
            t = [r["test_accuracy"] for r in run["seeds"]]
            ref = acc["runs"].get(key.rsplit("/", 1)[0] + "/float32")
            m, sd = _mean_sd(t)
            d = (m - _mean_sd([r["test_accuracy"] for r in ref["seeds"]])[0]) * 100 if ref else 0
            lines.append(
                f"| {key.rsplit('/', 1)[0]} | {run['dtype']} | {run['feature_bytes']:,} | "
                f"{m:.4f} ± {sd:.4f} | {d:+.2f} | {','.join(str(r['seed']) for r in run['seeds'])} |"
            )
        lines += [
            "",
            "Cora's and Amazon-Photo's features are binary (bags of words): 0 and 1 are exact in "
            "float16 and bfloat16, and an int8 row of them stores 127 with the scale 1/127, "
            "which decodes to exactly 1.0 in float32. Every dtype's decoded rows are the float32 "
            "ones bit for bit, so the runs are the same runs (a difference would be a bug). The "
            "io part's DC-SBM graph has Gaussian features, where the dtypes do differ; its test "
            "accuracy is in that table.",
            "",
        ]
    io = res.get("io")
    lines += ["## Out of core: bytes read per epoch under one budget", ""]
    if not io:
        lines += [
            "Not run yet: `python bench/feature_dtype.py --part io` (alone on the machine: it "
            "times epochs).",
            "",
        ]
    else:
        lines += [
            f"Written by `{io['command']}` on {io['machine']}. Graph `{io['graph']}` "
            f"({io['spec']}), {io['epochs']} epochs, one budget for every dtype: the footprint + 8 MiB, "
            f"two 16 MiB windows and 1/{io['fraction']} of the float32 features"
            + (
                ", a memory cgroup's limit."
                if any(r["capped"] for r in io["runs"].values())
                else " (`--memory`, no cgroup)."
            ),
            "",
            "Uncapped: test accuracy (mean ± std over the seeds "
            f"{','.join(str(x) for x in io.get('seeds', [0]))}; Δ: the difference of the means "
            "to float32 in points) and the median epoch. Capped (the first seed): the feature "
            "bytes read per epoch (mean over the epochs; ×: against float32's), the rows read, "
            "the cache's hit rate and the median epoch.",
            "",
            "| dtype | feature bytes | test accuracy | Δ vs float32 (points) | epoch s uncapped | "
            "bytes read / epoch capped | × float32 | rows read / epoch | cache hit rate | "
            "epoch s capped | test accuracy capped |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        ref = io["runs"].get("float32") or {}
        ref_acc = [u["test_accuracy"] for u in ref.get("uncapped", []) if u["returncode"] == 0]
        ref_read = statistics.mean(ref["bytes_read"]) if ref.get("bytes_read") else None
        for dtype, r in io["runs"].items():
            free = [u for u in r.get("uncapped", []) if u["returncode"] == 0 and u["seconds"]]
            if free:
                m, sd = _mean_sd([u["test_accuracy"] for u in free])
                d = f"{(m - statistics.mean(ref_acc)) * 100:+.2f}" if ref_acc else "-"
                acc = f"{m:.4f} ± {sd:.4f} | {d} | "
                acc += f"{common.median([common.median(u['seconds']) for u in free]):.2f}"
            else:
                acc = "- | - | -"
            if r["returncode"] != 0 or not r["bytes_read"]:
                cap = f"failed (rc {r['returncode']}) | | | | |"
            else:
                read = statistics.mean(r["bytes_read"])
                x = f"{read / ref_read:.2f}x" if ref_read else "-"
                cap = (
                    f"{read:,.0f} | {x} | {statistics.mean(r['rows_read']):,.0f} | "
                    f"{statistics.mean(r['hit_rate']):.3f} | {common.median(r['seconds']):.2f} | "
                    f"{r['test_accuracy']:.4f}"
                )
            lines.append(f"| {dtype} | {r['feature_bytes']:,} | {acc} | {cap} |")
        lines += [""]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=("accuracy", "io", "both"), default="both")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--graph", default="200k", help="io: a graph of common.GRAPHS (default 200k)")
    ap.add_argument("--epochs", type=int, default=3, help="io: epochs per run (default 3)")
    ap.add_argument("--fraction", type=int, default=4, help="io: budget K (default 4)")
    ap.add_argument(
        "--discard-graphs",
        action="store_true",
        help="io: delete each dtype's graph after its runs (the 10m graph's four copies "
        "need about 20 GB of disk at once; default: keep them for reruns)",
    )
    ap.add_argument("--report-only", action="store_true", help="re-render the .md from the .json")
    common.bench_args(ap, out="bench/results/feature_dtype")
    args = ap.parse_args()
    prefix = common.out_prefix(args, "bench/results/feature_dtype")
    res = common.load_json(prefix.with_suffix(".json"), {})
    if not args.report_only:
        if args.part in ("accuracy", "both"):
            res["accuracy"] = run_accuracy(args)
            res["machine"] = common.machine_line(threads=args.threads)
        if args.part in ("io", "both"):
            res["io"] = run_io(args)
        every = [p["command"] for p in (res.get("accuracy"), res.get("io")) if p]
        res["commands"] = list(dict.fromkeys(every))
    common.write_results(prefix, res, render)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
