"""Run reports (``shoal report``): ``report.md`` and PNG plots from run results.

::

    from shoal.report import ReportConfig, load_runs, write_report

    runs = load_runs(["single.json", "minibatch.json"])   # RunResult JSONs (shoal train --json)
    write_report(runs, "report/", ReportConfig(store="store/cora-4"))

The figures (shared axes, a note for each run a figure leaves out): README.md, "5. Report".
matplotlib (the ``report`` extra) is imported only when figures are drawn.
"""

from shoal.report.build import REPORT_FILE, ReportConfig, write_report
from shoal.report.load import Run, StoreParts, check_run, load_run, load_runs, load_store

__all__ = [
    "REPORT_FILE",
    "ReportConfig",
    "Run",
    "StoreParts",
    "check_run",
    "load_run",
    "load_runs",
    "load_store",
    "write_report",
]
