"""Progress bars: tqdm on stderr, silent when disabled or when stderr is not a terminal."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any

from tqdm.auto import tqdm

__all__ = ["progress"]


def progress(
    iterable: Iterable | None = None,
    *,
    total: float | None = None,
    desc: str = "",
    unit: str = "it",
    enable: bool | None = None,
    **kwargs: Any,
) -> tqdm:
    """Return a tqdm bar. ``enable=None`` shows it only when stderr is a terminal; never
    under ``shoal --quiet`` (``SHOAL_QUIET=1``)."""
    if os.environ.get("SHOAL_QUIET") == "1":
        enable = False
    elif enable is None:
        enable = sys.stderr.isatty()
    return tqdm(
        iterable,
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=True,
        disable=not enable,
        leave=False,
        dynamic_ncols=True,
        file=sys.stderr,
        **kwargs,
    )
