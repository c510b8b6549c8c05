"""Exceptions shared by every stage.

``ShoalInputError`` is raised for bad user input (a file, a row, a field); the CLI turns it into
exit code 2 with the message, which always names the file, the problem and what to do.
``ShoalDiskFullError`` is a write that ran out of space: the CLI prints its one line (the path,
its filesystem's free bytes, the bytes needed where known) and exits 1.
"""

from __future__ import annotations

__all__ = ["ShoalDiskFullError", "ShoalError", "ShoalInputError"]


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


class ShoalDiskFullError(ShoalError):
    """A write ran out of space (:mod:`shoal.utils.diskspace`): the message names the output,
    its filesystem, the free bytes there and, where known, the bytes needed."""

    def __init__(
        self,
        message: str,
        *,
        path: object,
        fix: str | None = None,
        free: int | None = None,
        need: int | None = None,
        mount: str | None = None,
    ):
        text = f"{path}: {message}" + (f" -> {fix}" if fix else "")
        super().__init__(text)
        self.path = path
        self.fix = fix
        self.free = free
        self.need = need
        self.mount = mount
