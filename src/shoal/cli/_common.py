"""Helpers shared by the sub-commands: sizes, JSON outputs."""

from __future__ import annotations

from typing import Any

__all__ = ["human", "parse_size_arg", "write_json"]


def write_json(path: str | None, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` atomically; ``'-'`` prints it; None does nothing."""
    from shoal.utils.io import write_json_output

    write_json_output(path, obj)


def human(n: float) -> str:
    """``1536`` -> ``"1.5 KiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


def parse_size_arg(text: str) -> int:
    """``"4GB"`` -> bytes (ShoalInputError on a bad size)."""
    from shoal.utils.io import parse_size

    return parse_size(text)
