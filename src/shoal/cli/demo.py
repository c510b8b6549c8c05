"""``shoal demo``: the whole pipeline on the bundled Cora dataset, printing each command.

Every step is an ordinary ``shoal`` command (shown before it runs), so the demo doubles as a
tour of the CLI: import, partition, store, verify, a single-process baseline, then the
registered engines on the same 2-process store (:func:`demo_engines`: each spec says its step
and flags), each writing its run JSON, and ``shoal report`` over those runs. After each run the
demo prints one line of its result, and a table of all of them before the report.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

__all__ = ["DemoStep", "bundled_dataset", "demo_engines", "demo_steps", "register", "run_demo"]


def demo_engines() -> list[tuple[str, str, tuple[str, ...]]]:
    """The engines the demo trains on the store, each on :data:`NPROC` processes, in the
    registry's order: (name, what the step says, the engine's own flags), from each spec's
    ``demo`` and ``demo_flags`` (an engine whose spec has no ``demo`` is left out)."""
    from shoal.engines.registry import demo_specs

    return [(s.name, s.demo or "", tuple(s.demo_flags)) for s in demo_specs()]


#: Processes of every engine's run.
NPROC = 2


def bundled_dataset(name: str = "cora") -> Path:
    """Path of a dataset shipped inside the package (``graph.npz`` + ``SOURCE.md``)."""
    p = Path(str(resources.files("shoal.data") / "datasets" / name / "graph.npz"))
    if not p.exists():
        raise FileNotFoundError(f"bundled dataset {name!r} not found at {p}")
    return p


@dataclass(frozen=True)
class DemoStep:
    """One command of the demo.

    Attributes:
        what: what it does, printed above it.
        argv: the ``shoal`` command line.
        result: the run JSON it writes (training steps), whose result line follows it.
        report: the report directory it writes (the report step).
    """

    what: str
    argv: list[str]
    result: Path | None = None
    report: Path | None = None


def _gcn(epochs: int) -> list[str]:
    """The accuracy benchmark's Cora GCN settings (``bench/accuracy.py``), one thread per
    process: two processes with two threads each on two cores run several times slower."""
    return (
        "--model gcn --fanouts all,all --hidden 64 --lr 0.01 --weight-decay 5e-4 "
        f"--normalize-features --epochs {epochs} --threads 1 --no-progress"
    ).split()


def _prepare(cora: Path, g: Path, a: Path, s: Path, parts: int) -> list[DemoStep]:
    return [
        DemoStep("import the bundled Cora graph", ["data", "import", str(cora), "--out", str(g)]),
        DemoStep("summarise it", ["data", "info", str(g)]),
        DemoStep(
            f"partition it into {parts} parts (SPRING, streaming, O(V) memory)",
            ["partition", str(g), "--algo", "spring", "--parts", str(parts), "--out", str(a)],
        ),
        DemoStep(
            "write the partitioned store (core + halo nodes, local CSR, features)",
            ["store", "build", str(g), str(a), "--out", str(s), "--halo-features"],
        ),
        DemoStep("check every byte and invariant of the store", ["verify", str(s)]),
        DemoStep("per-part summary", ["inspect", str(s)]),
    ]


def demo_steps(work: Path, parts: int = 4, epochs: int = 50) -> list[DemoStep]:
    """The demo's commands, in order, writing into ``work``: the store of ``parts`` parts,
    a single-process run, the :func:`demo_engines` on :data:`NPROC` processes (``epochs`` each,
    run JSONs in ``work/runs``) and the report of those runs in ``work/report``."""
    g, a, s = work / "cora", work / f"cora-spring-{parts}", work / "cora-store"
    runs = work / "runs"
    gcn = _gcn(epochs)
    single = runs / "single.json"
    steps = _prepare(bundled_dataset("cora"), g, a, s, parts)
    steps.append(
        DemoStep(
            "train a 2-layer GCN on one process (the baseline)",
            ["train", "--graph", str(g), *gcn, "--json", str(single)],
            result=single,
        )
    )
    for name, what, flags in demo_engines():
        out = runs / f"{name}.json"
        argv = ["train", "--store", str(s), "--engine", name, "--nproc", str(NPROC)]
        steps.append(
            DemoStep(
                f"engine {name}: {what}", [*argv, *gcn, *flags, "--json", str(out)], result=out
            )
        )
    results = [str(st.result) for st in steps if st.result is not None]
    report = work / "report"
    steps.append(
        DemoStep(
            "compare the runs: report.md and PNG plots (accuracy, epoch time by phase, bytes)",
            ["report", *results, "--out", str(report)],
            report=report,
        )
    )
    return steps


def _result(path: Path) -> tuple[str, int, float | None, float | None] | None:
    """(engine, processes, test accuracy, median epoch seconds) of a run JSON, or None."""
    from shoal.errors import ShoalInputError
    from shoal.report import load_run

    try:
        run = load_run(path)
    except ShoalInputError:
        return None
    return run.engine, run.world_size, run.final("test"), run.median_epoch_seconds()


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _result_line(path: Path) -> str:
    got = _result(path)
    if got is None:
        return f"    => no result in {path}"
    engine, procs, acc, sec = got
    return (
        f"    => {engine}: {procs} process{'es' if procs > 1 else ''}, test accuracy "
        f"{_num(acc, '.3f')}, median epoch {_num(sec, '.3f')} s"
    )


def _table(paths: list[Path]) -> list[str]:
    lines = [f"  {'engine':<10}  {'processes':>9}  {'test accuracy':>13}  {'median epoch s':>14}"]
    for p in paths:
        got = _result(p)
        if got is not None:
            engine, procs, acc, sec = got
            lines.append(
                f"  {engine:<10}  {procs:>9}  {_num(acc, '.3f'):>13}  {_num(sec, '.3f'):>14}"
            )
    return lines


def _report_files(out: Path) -> list[str]:
    files = [out / "report.md", *sorted(out.glob("*.png"))]
    return [f"  {f}" for f in files if f.exists()]


def run_demo(work: Path, *, parts: int = 4, epochs: int = 50, keep: bool = False) -> int:
    """Run :func:`demo_steps` in ``work`` (emptied first unless ``keep``), printing each
    command, a result line after each run, a table of the runs and the report's files.
    Returns 0, or the exit code of the first step that fails."""
    from shoal.cli import main

    if work.exists() and not keep:
        shutil.rmtree(work)
    (work / "runs").mkdir(parents=True, exist_ok=True)  # the run JSONs (--json FILE)
    print(f"shoal demo: working in {work}\n")
    t0 = time.perf_counter()
    steps = demo_steps(work, parts, epochs)
    results = [st.result for st in steps if st.result is not None]
    for i, step in enumerate(steps, 1):
        if step.report is not None:
            print(f"shoal demo: the {len(results)} runs ({epochs} epochs each)")
            print("\n".join(_table(results)) + "\n", flush=True)
        print(f"[{i}] {step.what}\n    $ shoal {shlex.join(step.argv)}", flush=True)
        code = main(step.argv)
        if code != 0:
            print(f"shoal demo: step {i} failed with exit code {code}", file=sys.stderr)
            return code
        if step.result is not None:
            print(_result_line(step.result), flush=True)
        if step.report is not None:
            print("shoal demo: the report and its plots:")
            print("\n".join(_report_files(step.report)), flush=True)
        print(flush=True)
    took = time.perf_counter() - t0
    print(f"shoal demo: {len(steps)} steps done in {took:.1f} s; outputs in {work}")
    return 0


def _cmd(args: argparse.Namespace) -> int:
    return run_demo(Path(args.workdir), parts=args.parts, epochs=args.epochs)


def register(sub: argparse._SubParsersAction) -> None:
    names = [name for name, _, _ in demo_engines()]
    p = sub.add_parser(
        "demo",
        help="run the whole pipeline on the bundled Cora dataset, every engine, a report",
        description=(
            "Import the bundled Cora dataset, partition it, build the store and verify it; "
            f"train a GCN on one process, then with each of the {len(names)} engines "
            f"({', '.join(names)}) on 2 processes over the store, printing a "
            "line of result after each run and a table of all of them; finally write "
            "`shoal report` of the runs (report.md and PNG plots) into WORKDIR/report. "
            "Each shoal command is printed as it runs. About 2-3 minutes on 2 cores."
        ),
    )
    p.add_argument("--workdir", default="shoal-demo", help="output folder (default ./shoal-demo)")
    p.add_argument("--parts", type=int, default=4, help="number of parts (default 4)")
    p.add_argument(
        "--epochs", type=int, default=50, help="training epochs of each run (default 50)"
    )
    p.set_defaults(func=_cmd)
