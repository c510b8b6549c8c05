"""shoal.sample (see docs and DESIGN)."""
