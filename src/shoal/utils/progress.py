"""Progress bars: tqdm on stderr when it is a terminal; otherwise (logs, batch jobs) one
summary line per long stage when it ends; nothing when disabled or under ``--quiet``."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

from tqdm.auto import tqdm

__all__ = ["SUMMARY_AFTER_S", "progress"]

#: a stage shorter than this prints no summary line (seconds)
SUMMARY_AFTER_S = 2.0


class _Summary:
    """What ``progress`` returns when stderr is not a terminal: counts like a tqdm bar and,
    when closed after at least :data:`SUMMARY_AFTER_S`, prints one line:
    ``desc: n unit in t s (rate unit/s)``."""

    def __init__(
        self, iterable: Iterable | None, total: float | None, desc: str, unit: str
    ) -> None:
        self.iterable, self.total, self.desc, self.unit = iterable, total, desc, unit
        self.n = 0
        self.t0 = time.perf_counter()
        self.closed = False

    def __iter__(self) -> Iterator:
        assert self.iterable is not None
        try:
            for x in self.iterable:
                yield x
                self.n += 1
        finally:
            self.close()

    def __len__(self) -> int:
        return int(self.total or 0)

    def __enter__(self) -> _Summary:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, n: float = 1) -> None:
        self.n += n

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        return None

    def refresh(self) -> None:
        return None

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        t = time.perf_counter() - self.t0
        if t < SUMMARY_AFTER_S or not self.desc:
            return
        n = int(self.n) if float(self.n).is_integer() else self.n
        print(
            f"{self.desc}: {n} {self.unit} in {t:.1f} s ({self.n / t:,.1f} {self.unit}/s)",
            file=sys.stderr,
            flush=True,
        )


def progress(
    iterable: Iterable | None = None,
    *,
    total: float | None = None,
    desc: str = "",
    unit: str = "it",
    enable: bool | None = None,
    **kwargs: Any,
) -> tqdm:
    """Return a tqdm bar. ``enable=None`` shows it when stderr is a terminal and otherwise
    prints one summary line when a stage of at least :data:`SUMMARY_AFTER_S` ends (module
    docstring); ``enable=False`` and ``shoal --quiet`` (``SHOAL_QUIET=1``) print nothing."""
    if os.environ.get("SHOAL_QUIET") == "1":
        enable = False
    elif enable is None:
        if not sys.stderr.isatty():
            return _Summary(iterable, total, desc, unit)  # type: ignore[return-value]
        enable = True
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
