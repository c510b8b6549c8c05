"""minibatch engine: background sampling against inline sampling (issue 37).

DistDGL (Zheng et al., IA3 2020, Sec. III-D) overlaps sampling with training: sampler workers
prepare the next mini-batches while the trainer computes. shoal's ``minibatch`` engine does it
with a thread per rank that samples and pulls the input rows of the next batches
(``--prefetch-batches N``; 0 = inline in the step, the ablation).

On a synthetic graph (``--graph``, a ``common.GRAPHS`` name, default the 200k-node one of
``bench/distributed.py speed``) in 2 SPRING parts with halo features, 2 processes of 1 thread
(``shoal train --store S --engine minibatch --nproc 2 --prefetch-batches D --json``; GraphSAGE
3 layers hidden 256, fanouts 15,10,5, batch 1024, lr 0.003): every round runs each prefetch
depth once, back to back (their order reversed every other round), ``--epochs`` training
epochs each and one exact evaluation after the last. Reported: the median epoch over rounds
and epochs (epoch 1 of each run left out: it holds numba's compilation and the caches'
warm-up), rank 0's split (sampling and gather: seconds of the thread that samples, on the
training thread inline and on the background thread otherwise; forward/backward and
``batch_wait``, the training thread's wait for the next batch), bytes exchanged per epoch, the
loss and the test accuracy.

``--rate 1gbit`` puts each rank in its own network namespace with its link shaped to that
rate (``bench/netshape.py``: a machine per rank behind a switch, one ``torchrun -m shoal
train`` each), so the pulls and remote sampling wait on a network as on a cluster; without it
the ranks talk over loopback.

Usage::

    python bench/minibatch.py [--rounds 3] [--epochs 3] [--depths 0,1,2] [--rate 1gbit]
        [--graph 200k] [--out bench/results/minibatch]
    python bench/minibatch.py [--out ...] report   # re-render the markdown from the JSON
    python bench/minibatch.py --smoke              # one run (the default depth), smoke graph
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import common

NAME = "bench/results/minibatch"
HP = dict(model="sage", fanouts=[15, 10, 5], batch_size=1024, hidden=256, lr=0.003, seed=0)
ENV = {"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
SMOKE = "--graph smoke --rounds 1 --epochs 2 --depths 2"


def run_one(store, depth: int, args: argparse.Namespace) -> dict:
    """One run of ``depth`` (loopback: ``shoal train --nproc 2``; shaped: one torchrun per
    rank in its namespace); the per-epoch record of its JSON."""
    out = common.WORK / "minibatch" / f"{store.name}-prefetch{depth}.json"
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in HP.items() if k != "fanouts"]
    flags += [
        "--fanouts",
        ",".join(map(str, HP["fanouts"])),
        "--store",
        store,
        "--engine",
        "minibatch",
        "--prefetch-batches",
        depth,
    ]
    flags += ["--epochs", args.epochs, "--eval-every", args.epochs, "--threads", 1, "--no-progress"]
    if args.rate:
        import netshape

        argv = ["-m", "shoal", "train", *map(str, flags), "--json", str(out)]
        netshape.launch(2, args.rate, argv, {**os.environ, **ENV}, timeout=1500)
        d = json.loads(out.read_text())
    else:
        d = common.train(*flags, "--nproc", 2, out=out, env=ENV)
    h = d["history"]
    return {
        "prefetch_batches": depth,
        "epoch_seconds": [e["seconds"] for e in h],
        "time_split_rank0": [e["time_split"] for e in h],
        "bytes_sent_per_epoch": [e["comm"]["bytes_sent"] for e in h],
        "remote_feature_fraction": h[-1]["comm"]["remote_feature_fraction"],
        "loss": [e["loss"] for e in h],
        "train_accuracy": [e["train_accuracy"] for e in h],
        "batches_per_epoch_per_rank": d["batches_per_epoch"],
        "val_accuracy": d["val_accuracy"],
        "test_accuracy": d["test_accuracy"],
    }


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


def run(args: argparse.Namespace) -> dict:
    store = common.partitioned_store(common.synth_graph(args.graph), 2, algo="spring")
    depths = [int(d) for d in args.depths.split(",")]
    res = common.new_results(
        "minibatch.py",
        threads=1,
        network=_network(args.rate),
        graph={"name": args.graph, "synth": common.GRAPHS[args.graph], "parts": 2},
        rounds=args.rounds,
        epochs=args.epochs,
        depths=depths,
        hparams=HP,
        runs={str(d): [] for d in depths},
    )
    t0 = time.perf_counter()
    for r in range(args.rounds):
        for d in depths if r % 2 == 0 else depths[::-1]:
            got = run_one(store, d, args)
            res["runs"][str(d)].append(got)
            print(f"round {r} prefetch {d}: epochs {got['epoch_seconds']}", flush=True)
    res["wall_seconds"] = time.perf_counter() - t0
    return res


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
        "min_epoch_seconds": min(secs),
        "max_epoch_seconds": max(secs),
        "split": {k: statistics.median(s.get(k, 0.0) for s in splits) for k in keys},
        "mb_sent_per_epoch": statistics.median(sent) / 1e6,
        "loss": runs[0]["loss"],
        "test_accuracy": runs[0]["test_accuracy"],
    }


def render(res: dict) -> str:
    from shoal.engines.minibatch.config import DEFAULT_PREFETCH_BATCHES

    sums = {int(d): summary(runs) for d, runs in res["runs"].items() if runs}
    base = sums.get(0)
    g, hp = res["graph"], res["hparams"]
    L = common.header(
        "minibatch: background sampling against inline sampling (issue 37)",
        res,
        f"Network: {res['network']}",
        f"Graph: `shoal data synth dcsbm {' '.join(common.synth_flags(g['synth']))}`; SPRING, "
        f"{g['parts']} parts, `--halo-features`. 2 processes, 1 thread each (torch and numba). "
        f"{hp['model']}, {len(hp['fanouts'])} layers, hidden {hp['hidden']}, fanouts "
        f"{','.join(map(str, hp['fanouts']))}, batch {hp['batch_size']}, lr {hp['lr']}, seed "
        f"{hp['seed']}. {res['rounds']} round(s), each running every prefetch depth once back "
        f"to back (order reversed every other round), {res['epochs']} epochs per run; the "
        "median is over the epochs after the first of every run (the first holds numba's "
        "compilation), the max over ranks of each epoch. `--prefetch-batches 0` samples "
        f"inline (the ablation); the default is {DEFAULT_PREFETCH_BATCHES}.",
        *([f"Measured by {res['measured_by']}."] if res.get("measured_by") else []),
    )
    L += [
        "| --prefetch-batches | epoch (s), median | min-max | vs inline | sampling | gather "
        "| fwd/bwd | batch wait | MB sent/epoch | loss (epochs) | test acc. |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for d, s in sorted(sums.items()):
        sp = s["split"]
        rel = f"{s['median_epoch_seconds'] / base['median_epoch_seconds']:.3f}x" if base else "-"
        acc = f"{s['test_accuracy']:.4f}" if s["test_accuracy"] is not None else "-"
        wait = f"{sp['batch_wait']:.2f}" if d and "batch_wait" in sp else "-"
        L.append(
            f"| {d}{' (inline)' if d == 0 else ''} | {s['median_epoch_seconds']:.2f} | "
            f"{s['min_epoch_seconds']:.2f}-{s['max_epoch_seconds']:.2f} | {rel} | "
            f"{sp.get('sampling', 0):.2f} | {sp.get('gather', 0):.2f} | "
            f"{sp.get('forward_backward', 0):.2f} | {wait} | {s['mb_sent_per_epoch']:.1f} | "
            f"{', '.join(f'{x:.4f}' for x in s['loss'])} | {acc} |"
        )
    L += [
        "",
        "Split columns: rank 0's seconds per epoch (medians). Inline, sampling + gather + "
        "fwd/bwd is the epoch less what no phase times. With a background thread, sampling "
        "and gather are that thread's seconds, overlapping fwd/bwd; `batch wait` is what the "
        "training thread waited for the next batch (the sampling the thread did not hide). "
        "MB sent: the all-to-all-v payloads of sampling and pulls, summed over ranks (the "
        "background thread's per-batch agreement, 8 bytes, is not counted).",
        "",
    ]
    if base:
        L += ["## Notes (computed from the runs above)", "", *_notes(sums, base), ""]
    return "\n".join(L)


def _notes(sums: dict[int, dict], base: dict) -> list[str]:
    out = []
    for d, s in sorted(sums.items()):
        if d:
            gain = 1 - s["median_epoch_seconds"] / base["median_epoch_seconds"]
            out.append(
                f"- prefetch {d}: median epoch {s['median_epoch_seconds']:.2f} s against "
                f"{base['median_epoch_seconds']:.2f} s inline: {abs(gain) * 100:.1f}% "
                f"{'faster' if gain > 0 else 'slower'}; the same losses per epoch: "
                f"{s['loss'] == base['loss']}; test accuracy {s['test_accuracy']} against "
                f"{base['test_accuracy']}."
            )
    hidden = base["split"].get("sampling", 0) + base["split"].get("gather", 0)
    out.append(
        f"- inline, sampling + gather take {hidden:.2f} s of rank 0's "
        f"{base['median_epoch_seconds']:.2f} s epoch: the most a background thread can hide "
        "when the cores have room for it."
    )
    return out


def main() -> None:
    ap = common.bench_args(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]), out=NAME)
    ap.add_argument("cmd", nargs="?", choices=["report"], help="re-render the markdown only")
    ap.add_argument("--graph", default="200k", choices=sorted(common.GRAPHS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--depths", default="0,1,2", help="prefetch depths to run (0 = inline)")
    ap.add_argument(
        "--rate",
        default=None,
        help="shape each rank's link to RATE (e.g. 1gbit; needs root, ip and tc); "
        "default: loopback",
    )
    args = ap.parse_args()
    prefix = common.out_prefix(args, NAME)
    if args.cmd == "report":
        common.write_results(prefix, common.load_json(prefix.with_suffix(".json")), render)
        return
    if args.smoke:
        args = ap.parse_args(["--smoke", *SMOKE.split()])
    common.write_results(prefix, run(args), render)


if __name__ == "__main__":
    main()
