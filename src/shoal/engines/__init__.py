"""shoal.engines (see docs and DESIGN)."""
