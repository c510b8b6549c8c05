"""shoal.report (see docs and DESIGN)."""
