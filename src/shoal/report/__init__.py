"""Run reports (``shoal report``): ``report.md`` and PNG plots from run results.

::

    from shoal.report import ReportConfig, load_runs, write_report

    runs = load_runs(["single.json", "minibatch.json"])   # RunResult JSONs (shoal train --json)
    write_report(runs, "report/", ReportConfig(store="store/cora-4"))

A report compares its runs on shared axes: loss and validation metric per epoch, the epoch
time split, bytes per epoch, cache hit rates, and the parts of the store trained on (sizes and
halo fractions, from its ``meta.json``). A run lacking a figure's fields is left out of that
figure, with a note in ``report.md``. matplotlib (the ``report`` extra) is imported only when
figures are drawn.
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
