"""minibatch engine: background sampling against inline sampling (issue 37).

DistDGL (Zheng et al., IA3 2020, Sec. III-D) overlaps sampling with training: sampler workers
prepare the next mini-batches while the trainer computes. shoal's ``minibatch`` engine does it
with a thread per rank that samples and pulls the input rows of the next batches
(``--prefetch-batches N``; 0 = inline in the step, the ablation).

On the 200k-node benchmark graph of ``bench/distributed.py speed`` (``shoal data synth dcsbm``
200,000 nodes, 2M stored edges, 128-d features, 47 classes, SPRING 2 parts, ``--halo-features``;
built here when missing, in the same place), 2 processes through ``torch.distributed.run``
with 1 thread each (torch and numba), GraphSAGE 3 layers hidden 256, fanouts 15,10,5, batch
1024, lr 0.003: every round runs each prefetch depth once, back to back (their order reversed
every other round), ``--epochs`` training epochs each (no evaluation between them) and then
one exact evaluation. Reported: the median epoch over rounds and epochs (epoch 1 of each run
left out: it holds numba's compilation and the caches' warm-up), rank 0's split (sampling and
gather: seconds of the thread that samples, on the training thread inline and on the
background thread otherwise; forward/backward and ``batch_wait``, the training thread's wait
for the next batch), bytes exchanged per epoch, the loss and the test accuracy.

``--rate 1gbit`` puts each rank in its own network namespace with its link shaped to that
rate (``bench/netshape.py``: a machine per rank behind a switch), so the pulls and remote
sampling wait on a network as on a cluster; without it the ranks talk over loopback.

Usage::

    python bench/minibatch.py [--rounds 3] [--epochs 3] [--depths 0,1,2] [--rate 1gbit]
        [--out bench/results/minibatch]
    python bench/minibatch.py [--out ...] report   # rewrite the markdown from the JSON

Results: ``<out>.json`` and ``<out>.md`` (default bench/results/minibatch).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from common import (
    PY,
    RESULTS,
    WORK,
    command_line,
    load_json,
    machine_line,
    sh,
    shoal,
    write_json,
    write_text_atomic,
)

DWORK = WORK / "distributed"  # bench/distributed.py's store, shared
HP = dict(model="sage", fanouts=(15, 10, 5), batch_size=1024, hidden=256, lr=0.003, seed=0)


def build(graph: Path) -> Path:
    """The 200k-node graph and its 2-part store (bench/distributed.py speed's), built once."""
    if not (graph / "meta.json").exists():
        synth = ["data", "synth", "dcsbm", "--nodes", 200000, "--edges", 1000000]
        shoal(*synth, "--out", graph, "--classes", 47, "--features", 128, "--seed", 0)
    a, s = DWORK / "synth-200k-spring2", DWORK / "synth-200k-store2"
    if not (a / "meta.json").exists():
        shoal("partition", graph, "--algo", "spring", "--parts", 2, "--out", a)
    if not (s / "meta.json").exists():
        shoal("store", "build", graph, a, "--out", s, "--halo-features")
    return s


# ----------------------------------------------------------------------------- worker
def worker(args: argparse.Namespace) -> None:
    """One rank of one run (started by torch.distributed.run)."""
    from shoal.distributed import DistConfig, process_group
    from shoal.engines.minibatch.config import MinibatchConfig
    from shoal.engines.minibatch.engine import MinibatchEngine
    from shoal.store import Store
    from shoal.training import TrainConfig
    from shoal.utils.threads import set_threads

    set_threads(1)
    tc = TrainConfig.from_options(
        **HP,
        epochs=args.epochs,
        progress=False,
        threads=1,
        engine=MinibatchConfig(prefetch_batches=args.prefetch),
    )
    with process_group(DistConfig(threads=1)) as ctx:
        t0 = time.perf_counter()
        eng = MinibatchEngine(Store.open(args.store), tc, ctx)
        setup = time.perf_counter() - t0
        recs = [eng.train_epoch(e) for e in range(args.epochs)]
        acc = eng.evaluate(("val", "test")) if args.evaluate else {}
        if ctx.is_rank0:
            out = {
                "prefetch_batches": args.prefetch,
                "setup_seconds": setup,
                "epoch_seconds": [r["seconds"] for r in recs],
                "time_split_rank0": [r["time_split"] for r in recs],
                "bytes_sent_per_epoch": [r["comm"]["bytes_sent"] for r in recs],
                "remote_feature_fraction": recs[-1]["comm"]["remote_feature_fraction"],
                "loss": [r["loss"] for r in recs],
                "train_accuracy": [r["train_accuracy"] for r in recs],
                "batches_per_epoch_per_rank": eng.num_batches,
                "val_accuracy": acc.get("val"),
                "test_accuracy": acc.get("test"),
            }
            Path(args.out).write_text(json.dumps(out))


# ----------------------------------------------------------------------------- driver
def _network(rate: str | None) -> str:
    if not rate:
        return "loopback (both ranks on this machine)"
    import netshape

    got = netshape.throughput(rate) / 1e9
    return (
        f"each rank in its own network namespace, its link shaped to {rate} in both "
        f"directions (netns + veth + tc tbf, bench/netshape.py; one TCP stream measured "
        f"{got:.2f} Gbit/s)"
    )


def run(args: argparse.Namespace) -> None:
    store = build(Path(args.graph))
    depths = [int(d) for d in args.depths.split(",")]
    res = {
        "command": command_line("minibatch.py"),
        "machine": machine_line(threads=1),
        "network": _network(args.rate),
        "rounds": args.rounds,
        "epochs": args.epochs,
        "depths": depths,
        "hparams": {**HP, "fanouts": list(HP["fanouts"])},
        "runs": {str(d): [] for d in depths},
    }
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    for r in range(args.rounds):
        order = depths if r % 2 == 0 else depths[::-1]
        for d in order:
            out = DWORK / f"minibatch-prefetch{d}.json"
            argv = [str(Path(__file__).resolve()), "worker", "--store", str(store)]
            argv += ["--prefetch", str(d), "--epochs", str(args.epochs), "--out", str(out)]
            if r == 0:  # the model is the same in every round: evaluate it once
                argv.append("--evaluate")
            if args.rate:
                import netshape

                netshape.launch(2, args.rate, argv, env, timeout=1500)
            else:
                cmd = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
                sh([*cmd, *argv], env=env)
            got = json.loads(out.read_text())
            res["runs"][str(d)].append(got)
            print(f"round {r} prefetch {d}: epochs {got['epoch_seconds']}", flush=True)
    res["wall_seconds"] = time.perf_counter() - t0
    out = Path(args.out)
    write_json(out.with_suffix(".json"), res)
    write_markdown(res, out.with_suffix(".md"))


# ----------------------------------------------------------------------------- report
def summary(runs: list[dict]) -> dict:
    """Medians over the runs' epochs after the first: epoch, split, bytes."""
    secs, splits, sent = [], [], []
    for run in runs:
        secs += run["epoch_seconds"][1:]
        splits += run["time_split_rank0"][1:]
        sent += run["bytes_sent_per_epoch"][1:]
    keys = sorted({k for s in splits for k in s})
    return {
        "median_epoch_seconds": statistics.median(secs),
        "epochs": len(secs),
        "min_epoch_seconds": min(secs),
        "max_epoch_seconds": max(secs),
        "split": {k: statistics.median(s.get(k, 0.0) for s in splits) for k in keys},
        "mb_sent_per_epoch": statistics.median(sent) / 1e6,
        "batches": runs[0]["batches_per_epoch_per_rank"],
        "loss": runs[0]["loss"],
        "test_accuracy": runs[0]["test_accuracy"],
        "val_accuracy": runs[0]["val_accuracy"],
        "remote_feature_fraction": runs[0]["remote_feature_fraction"],
    }


def write_markdown(res: dict, path: Path) -> None:
    from shoal.engines.minibatch.config import DEFAULT_PREFETCH_BATCHES

    sums = {int(d): summary(runs) for d, runs in res["runs"].items() if runs}
    base = sums.get(0)
    lines = [
        "# minibatch: background sampling against inline sampling (issue 37)",
        "",
        f"Command: `{res['command']}`",
        "",
        f"Machine: {res['machine']}",
        "",
        f"Network: {res.get('network', 'loopback (both ranks on this machine)')}",
        "",
        "Graph: `shoal data synth dcsbm` 200,000 nodes, 2,000,000 stored edges, 128-d "
        "features, 47 classes; SPRING, 2 parts, `--halo-features` (bench/distributed.py "
        "speed's). 2 processes (`torch.distributed.run`), 1 thread each (torch and numba). "
        "GraphSAGE 3 layers, hidden 256, fanouts 15,10,5, batch 1024, lr 0.003, seed 0. "
        f"{res['rounds']} rounds, each running every prefetch depth once back to back (order "
        f"reversed every other round), {res['epochs']} epochs per run; the median is over the "
        "epochs after the first of every run (the first holds numba's compilation), the max "
        "over ranks of each epoch. `--prefetch-batches 0` samples inline (the ablation); "
        f"the default is {DEFAULT_PREFETCH_BATCHES}.",
        "",
        "| --prefetch-batches | epoch (s), median | min-max | vs inline | sampling | gather "
        "| fwd/bwd | batch wait | MB sent/epoch | loss (epochs) | test acc. |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for d, s in sorted(sums.items()):
        sp = s["split"]
        rel = f"{s['median_epoch_seconds'] / base['median_epoch_seconds']:.3f}x" if base else "-"
        acc = f"{s['test_accuracy']:.4f}" if s["test_accuracy"] is not None else "-"
        loss = ", ".join(f"{x:.4f}" for x in s["loss"])
        lines.append(
            f"| {d}{' (inline)' if d == 0 else ''} | {s['median_epoch_seconds']:.2f} | "
            f"{s['min_epoch_seconds']:.2f}-{s['max_epoch_seconds']:.2f} | {rel} | "
            f"{sp.get('sampling', 0):.2f} | {sp.get('gather', 0):.2f} | "
            f"{sp.get('forward_backward', 0):.2f} | {_wait(sp, d)} | "
            f"{s['mb_sent_per_epoch']:.1f} | {loss} | {acc} |"
        )
    lines += [
        "",
        "Split columns: rank 0's seconds per epoch (medians). Inline, sampling + gather + "
        "fwd/bwd is the epoch less what no phase times. With a background thread, sampling "
        "and gather are that thread's seconds, overlapping fwd/bwd; `batch wait` is what the "
        "training thread waited for the next batch (the sampling the thread did not hide). "
        "MB sent: the all-to-all-v payloads of sampling and pulls, summed over ranks (the "
        "background thread's per-batch agreement, 8 bytes, is not counted).",
        "",
        "## Notes (computed from the runs above)",
        "",
        *_notes(sums),
        "",
    ]
    write_text_atomic(path, "\n".join(lines))


def _wait(split: dict, depth: int) -> str:
    return f"{split['batch_wait']:.2f}" if depth and "batch_wait" in split else "-"


def _notes(sums: dict[int, dict]) -> list[str]:
    out = []
    base = sums.get(0)
    if base is None:
        return out
    for d, s in sorted(sums.items()):
        if d == 0:
            continue
        gain = 1 - s["median_epoch_seconds"] / base["median_epoch_seconds"]
        word = "faster" if gain > 0 else "slower"
        out.append(
            f"- prefetch {d}: median epoch {s['median_epoch_seconds']:.2f} s against "
            f"{base['median_epoch_seconds']:.2f} s inline: {abs(gain) * 100:.1f}% {word}; "
            f"the same losses per epoch: {s['loss'] == base['loss']}; "
            f"test accuracy {s['test_accuracy']} against {base['test_accuracy']}."
        )
    sp = base["split"]
    hidden = sp.get("sampling", 0) + sp.get("gather", 0)
    out.append(
        f"- inline, sampling + gather take {hidden:.2f} s of rank 0's "
        f"{base['median_epoch_seconds']:.2f} s epoch: the most a background thread can hide "
        "when the cores have room for it."
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    w = sub.add_parser("worker")
    w.add_argument("--store", required=True)
    w.add_argument("--prefetch", type=int, required=True)
    w.add_argument("--epochs", type=int, default=3)
    w.add_argument("--evaluate", action="store_true")
    w.add_argument("--out", required=True)
    sub.add_parser("report")
    ap.add_argument("--graph", default=str(WORK / "synth-200k"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--depths", default="0,1,2", help="prefetch depths to run (0 = inline)")
    ap.add_argument(
        "--rate",
        default=None,
        help="shape each rank's link to RATE (e.g. 1gbit; needs root, ip and tc); "
        "default: loopback",
    )
    ap.add_argument(
        "--out", default=str(RESULTS / "minibatch"), help="PREFIX of the .json/.md results"
    )
    args = ap.parse_args()
    DWORK.mkdir(parents=True, exist_ok=True)
    if args.cmd == "worker":
        worker(args)
    elif args.cmd == "report":
        out = Path(args.out)
        write_markdown(load_json(out.with_suffix(".json")), out.with_suffix(".md"))
    else:
        run(args)


if __name__ == "__main__":
    main()
