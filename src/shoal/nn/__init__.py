"""shoal.nn (see docs and DESIGN)."""
