"""Rows read from disk: feature rows, and the planned direct reads that also serve the
sampler's neighbour entries (its modules: docs/architecture.md#layers, layer 6)."""

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
