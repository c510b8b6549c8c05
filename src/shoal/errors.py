"""Exceptions shared by every stage.

``ShoalInputError`` is raised for bad user input (a file, a row, a field); the CLI turns it into
exit code 2 with the message, which always names the file, the problem and what to do.
``ShoalDiskFullError`` is a write that ran out of space: the CLI prints its one line (the path,
its filesystem's free bytes, the bytes needed where known) and exits 1. ``ShoalPeerLostError``
is a collective that failed because a peer is gone: one line naming the lost rank and host,
the operation and the fix, exit 1.
"""

from __future__ import annotations

__all__ = ["ShoalDiskFullError", "ShoalError", "ShoalInputError", "ShoalPeerLostError"]


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


class ShoalPeerLostError(ShoalError):
    """A collective failed because a peer (a process, a machine, the network) is gone
    (:mod:`shoal.distributed.liveness`): the message names this rank and host, the lost rank
    and host, the operation and the fix."""

    def __init__(
        self, message: str, *, fix: str | None = None, lost: list[int] | None = None, rank: int = 0
    ):
        super().__init__(message + (f" -> {fix}" if fix else ""))
        self.fix = fix
        self.lost = lost
        self.rank = rank
