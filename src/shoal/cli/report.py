"""``shoal report``: ``report.md`` and PNG plots of one or more runs.

Reads the result JSON of each run (``shoal train ... --json RUN.json``) and writes into --out:
report.md (a table of the runs: engine, model, data, processes, epochs, best validation and
test metric, median epoch time, total time; the settings that differ; the figures) and one
PNG per figure: training loss and validation metric (accuracy, or MRR for link prediction)
per epoch, the epoch time split by phase, bytes per epoch (sent, all-reduced, read from disk),
cache hit rates, and the parts of the store trained on (core and halo nodes, in-edges, halo
fraction: from --store, or the store the runs recorded). Several runs share the axes of each
figure (e.g. engines compared on one store); a run lacking a figure's fields is left out of
it, with a note in report.md. ``shoal train ... --report DIR`` writes the report of the run
when it ends. Needs matplotlib: pip install 'shoal[report]'.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_report_argument", "register", "report_after_run", "run_with_report"]


def _report_dir(text: str) -> str:
    """``--report DIR`` of ``shoal train``: refused when parsing, before any training, when
    matplotlib is missing."""
    import importlib.util

    from shoal.report.figures import MATPLOTLIB_FIX

    if importlib.util.find_spec("matplotlib") is None:
        raise argparse.ArgumentTypeError(f"the report's plots need matplotlib: {MATPLOTLIB_FIX}")
    return text


def add_report_argument(g: argparse._ArgumentGroup) -> None:
    """``shoal train --report DIR``."""
    g.add_argument(
        "--report",
        metavar="DIR",
        type=_report_dir,
        help="when the run ends, write its report there: report.md and PNG plots (`shoal "
        "report`; also DIR/run.json when --json names no file; needs shoal[report])",
    )


def report_after_run(
    out: str | os.PathLike, result: dict[str, Any], *, json_path: str | None
) -> None:
    """The report of a run that just ended, in ``out``: its result is ``json_path`` when that
    names a file, else it is written to ``out/run.json`` first (so the report can be redrawn
    with ``shoal report``)."""
    from shoal.report import REPORT_FILE, Run, check_run, write_report
    from shoal.utils.io import write_json_output

    out = Path(out)
    own = out / "run.json"
    if json_path and json_path != "-":
        path = Path(json_path)
    else:
        out.mkdir(parents=True, exist_ok=True)
        write_json_output(own, result)
        path = own
    label = str(result.get("engine") or "run") if path == own else path.stem
    write_report([Run(label=label, data=check_run(result, path=path), path=path)], out)
    print(f"report of the run: {out / REPORT_FILE}", file=sys.stderr)


def run_with_report(spec: Any, out: str | os.PathLike) -> int:
    """``shoal train --store ... --report DIR``: run ``spec`` (a LaunchSpec) with its result
    in a file (``DIR/run.json`` unless --json names one; with ``--json -`` it is printed
    too), then rank 0 writes the report. Returns the run's exit code."""
    from shoal.engines.launch import run
    from shoal.utils.io import read_json

    to_stdout = spec.json == "-"
    if not spec.json or to_stdout:
        Path(out).mkdir(parents=True, exist_ok=True)
        spec = dataclasses.replace(spec, json=str(Path(out) / "run.json"))
    code = run(spec)
    if code != 0 or os.environ.get("RANK", "0") != "0":  # torchrun: rank 0's process only
        return code
    result = read_json(spec.json)
    if to_stdout:
        print(json.dumps(result, indent=2))
    report_after_run(out, result, json_path=spec.json)
    return code


def _cmd_report(args: argparse.Namespace) -> int:
    from shoal.report import ReportConfig, load_runs, write_report
    from shoal.utils.io import write_json_output

    runs = load_runs(args.runs)
    summary = write_report(runs, args.out, ReportConfig(store=args.store, dpi=args.dpi))
    if args.json != "-":
        drawn = [Path(f["file"]).name for f in summary["figures"] if f["file"]]
        print(f"report of {len(runs)} run(s) -> {summary['report']} ({', '.join(drawn)})")
        for f in summary["figures"]:
            if f["file"] is None:
                why = "; ".join(f["notes"]) or "no run has its fields"
                print(f"  not drawn: {f['title']} ({why})")
        for note in summary["notes"]:
            print(f"  note: {note}")
    write_json_output(args.json, summary)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report",
        help="write report.md and PNG plots of one or more runs (loss, accuracy, time, bytes)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__.split("\n\n", 1)[1].strip() + "\n\nexamples:\n"
        "  shoal report run.json --out report/\n"
        "  shoal report single.json minibatch.json averaging.json --store store/cora-4 "
        "--out cmp/\n"
        "  shoal train --graph data/cora --epochs 50 --json run.json --report report/",
    )
    p.add_argument(
        "runs",
        nargs="+",
        metavar="RUN.json",
        help="result JSON of a run (shoal train --json); several share the plots",
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="directory to write report.md and the PNGs into (created if needed)",
    )
    p.add_argument(
        "--store",
        metavar="STORE",
        help="store whose parts to plot (default: the store the runs recorded)",
    )
    p.add_argument("--dpi", type=int, default=110, help="resolution of the PNGs (default 110)")
    p.add_argument(
        "--json",
        metavar="FILE",
        help="write a summary (files, figures, notes) as JSON ('-' = stdout)",
    )
    p.set_defaults(func=_cmd_report)
