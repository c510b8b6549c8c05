"""Plan: which worker trains which part (SDT-GNN workload allocation)."""

from shoal.plan.allocation import Config, Plan, default_reserve, graph_data_bytes, make_plan

__all__ = ["Config", "Plan", "default_reserve", "graph_data_bytes", "make_plan"]
