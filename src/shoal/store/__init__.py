"""shoal.store (see docs and DESIGN)."""
