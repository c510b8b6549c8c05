"""Rows read from disk: feature rows, and the planned direct reads that also serve the
sampler's neighbour entries.

- the interface of a row source (:class:`RowSource`, :mod:`shoal.rows.source`) and its
  implementations: planned coalesced direct reads of a file (:class:`RowReader`,
  :mod:`shoal.rows.direct`), an in-memory array (:class:`MemoryRows`), several stacked
  (:class:`StackedReader`), and :func:`open_rows`, which picks one (or takes any other
  source as it is);
- gathers of rows by id into float32 buffers (:mod:`shoal.rows.gather`);
- the memory budget (:mod:`shoal.rows.budget`) and its cache/window split fitted to a
  sampled epoch (:mod:`shoal.rows.windowfit`);
- the budgeted feature store: static cache + windows (:class:`DiskFeatures`,
  :mod:`shoal.rows.featstore`), built under a plan by :class:`BudgetedStore`
  (:mod:`shoal.rows.budgeted`), its windows read ahead by a background thread
  (:mod:`shoal.rows.prefetch`, :mod:`shoal.rows.readahead`) and several epochs' rows gathered
  by one sweep into pack files (:mod:`shoal.rows.packing`);
- the CLOCK cache of blocks of neighbour entries read from disk (:mod:`shoal.rows.blockcache`).
"""

from shoal.rows.budget import BudgetPlan, plan_budget
from shoal.rows.budgeted import BudgetedStore
from shoal.rows.direct import RowFile, RowReader, load_array
from shoal.rows.featstore import DiskFeatures
from shoal.rows.memory import MemoryRows
from shoal.rows.opener import open_rows
from shoal.rows.source import ReadStats, RowSource
from shoal.rows.stacked import StackedReader

__all__ = [
    "BudgetPlan",
    "BudgetedStore",
    "DiskFeatures",
    "MemoryRows",
    "ReadStats",
    "RowFile",
    "RowReader",
    "RowSource",
    "StackedReader",
    "load_array",
    "open_rows",
    "plan_budget",
]
