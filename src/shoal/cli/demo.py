"""``shoal demo``: the whole pipeline on the bundled Cora dataset, printing each command.

Every step is an ordinary ``shoal`` command (shown before it runs), so the demo doubles as a
tour of the CLI.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import time
from importlib import resources
from pathlib import Path

__all__ = ["bundled_dataset", "register", "run_demo"]


def bundled_dataset(name: str = "cora") -> Path:
    """Path of a dataset shipped inside the package (``graph.npz`` + ``SOURCE.md``)."""
    p = Path(str(resources.files("shoal.data") / "datasets" / name / "graph.npz"))
    if not p.exists():
        raise FileNotFoundError(f"bundled dataset {name!r} not found at {p}")
    return p


def _steps(work: Path, parts: int, epochs: int) -> list[tuple[str, list[str]]]:
    cora = bundled_dataset("cora")
    g, a, s = work / "cora", work / "cora-spring-4", work / "cora-store"
    # the accuracy benchmark's Cora GCN settings (bench/results/accuracy.md)
    gcn = [
        "--model",
        "gcn",
        "--fanouts",
        "all,all",
        "--hidden",
        "64",
        "--lr",
        "0.01",
        "--weight-decay",
        "5e-4",
        "--normalize-features",
        "--epochs",
        str(epochs),
        "--no-progress",
    ]
    return [
        ("import the bundled Cora graph", ["data", "import", str(cora), "--out", str(g)]),
        ("summarise it", ["data", "info", str(g)]),
        (
            f"partition it into {parts} parts (SPRING, streaming, O(V) memory)",
            ["partition", str(g), "--algo", "spring", "--parts", str(parts), "--out", str(a)],
        ),
        (
            "write the partitioned store (core + halo nodes, local CSR, features)",
            ["store", "build", str(g), str(a), "--out", str(s), "--halo-features"],
        ),
        ("check every byte and invariant of the store", ["verify", str(s)]),
        ("per-part summary", ["inspect", str(s)]),
        (
            "train a 2-layer GCN on one process",
            ["train", "--graph", str(g), *gcn, "--json", str(work / "train.json")],
        ),
        (
            "train it again on the store with 2 processes (DistDGL-style sync SGD)",
            [
                "train",
                "--store",
                str(s),
                "--engine",
                "minibatch",
                "--nproc",
                "2",
                *gcn,
                "--json",
                str(work / "train-minibatch.json"),
            ],
        ),
        (
            "and with SDT-GNN-style local training + model averaging",
            [
                "train",
                "--store",
                str(s),
                "--engine",
                "averaging",
                "--nproc",
                "2",
                *gcn,
                "--json",
                str(work / "train-averaging.json"),
            ],
        ),
    ]


def run_demo(work: Path, *, parts: int = 4, epochs: int = 100, keep: bool = False) -> int:
    from shoal.cli import main

    if work.exists() and not keep:
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    print(f"shoal demo: working in {work}\n")
    t0 = time.perf_counter()
    done = 0
    for i, (what, argv) in enumerate(_steps(work, parts, epochs), 1):
        cmd = "shoal " + shlex.join(argv)
        print(f"[{i}] {what}\n    $ {cmd}", flush=True)
        code = main(argv)
        if code != 0:
            print(f"shoal demo: step {i} failed with exit code {code}", file=sys.stderr)
            return code
        done += 1
        print(flush=True)
    print(f"shoal demo: {done} steps done in {time.perf_counter() - t0:.1f} s; outputs in {work}")
    return 0


def _cmd(args: argparse.Namespace) -> int:
    return run_demo(Path(args.workdir), parts=args.parts, epochs=args.epochs)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="run the whole pipeline on the bundled Cora dataset",
        description=(
            "Import the bundled Cora dataset, partition it, build the store, verify it and "
            "train a model, printing each shoal command as it runs."
        ),
    )
    p.add_argument("--workdir", default="shoal-demo", help="output folder (default ./shoal-demo)")
    p.add_argument("--parts", type=int, default=4, help="number of parts (default 4)")
    p.add_argument("--epochs", type=int, default=100, help="training epochs (default 100)")
    p.set_defaults(func=_cmd)
