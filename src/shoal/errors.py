"""Exceptions shared by every stage.

``ShoalInputError`` is raised for bad user input (a file, a row, a field); the CLI turns it into
exit code 2 with the message, which always names the file, the problem and what to do.
"""

from __future__ import annotations

__all__ = ["ShoalError", "ShoalInputError"]


class ShoalError(Exception):
    """Base class of shoal's own errors."""


class ShoalInputError(ShoalError, ValueError):
    """Bad input: the message names the file, the offending row or field, and a fix."""

    def __init__(self, message: str, *, path: object | None = None, fix: str | None = None):
        parts = []
        if path is not None:
            parts.append(f"{path}: ")
        parts.append(message)
        if fix:
            parts.append(f" -> {fix}")
        super().__init__("".join(parts))
        self.path = path
        self.fix = fix
