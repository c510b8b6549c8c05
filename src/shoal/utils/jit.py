"""One numba kernel compiled twice, on every core and on the calling thread, cached apart.

numba names a function's on-disk cache by its module, qualified name and first line, and keys
each entry by signature, bytecode and closure variables: not by the compile options. So
``numba.njit(cache=True, parallel=True)(f)`` and ``numba.njit(cache=True)(f)`` share their
entries, and whichever compiles a signature first is what both load from then on in every later
process: a parallel kernel whose serial twin was compiled first (a small input, a test) ran on
one thread (docs/measurements.md#pulling-rows-held-in-memory). :func:`parallel_and_serial`
compiles each from a copy of the function under a name of its own.
"""

from __future__ import annotations

import types
from collections.abc import Callable

import numba

__all__ = ["parallel_and_serial", "renamed"]


def renamed(py_func: Callable, suffix: str) -> Callable:
    """A copy of ``py_func`` (same code, globals, defaults and closure) whose qualified name
    ends in ``.suffix``: numba caches it in files of its own."""
    f = types.FunctionType(
        py_func.__code__,
        py_func.__globals__,
        py_func.__name__,
        py_func.__defaults__,
        py_func.__closure__,
    )
    f.__kwdefaults__ = py_func.__kwdefaults__
    f.__module__ = py_func.__module__
    f.__qualname__ = f"{py_func.__qualname__}.{suffix}"
    f.__doc__ = py_func.__doc__
    return f


def parallel_and_serial(py_func: Callable, **options) -> tuple[Callable, Callable]:
    """``(parallel, serial)`` cached compilations of ``py_func`` (a loop over ``numba.prange``,
    a plain ``range`` in the serial one), with the other ``numba.njit`` ``options`` (e.g.
    ``nogil=True``); each has its own cache entries (module docstring)."""
    par = numba.njit(cache=True, parallel=True, **options)(renamed(py_func, "parallel"))
    ser = numba.njit(cache=True, **options)(renamed(py_func, "serial"))
    return par, ser
