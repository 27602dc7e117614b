"""Tracing ``np.empty``/``np.zeros``/``np.ones``/``np.full`` called with no array argument.

Such calls never reach ``__array_function__`` (no argument is a tracer), so
NumPy would hand the traced function a real buffer, and filling its slices
with traced values could not be recorded. While at least one thread is
tracing, these four functions in the ``numpy`` module are replaced by
wrappers that look at the *calling thread's* context: in a thread that is
tracing, and called from code outside NumPy, numba and braze, they return a traced array (a broadcast constant, so
``out = np.zeros(...); out[1:] = f(x)`` becomes a functional update); in any
other thread they call NumPy's own function unchanged. The wrappers are
installed on the first trace and removed when the last one ends, under a
lock, so concurrent traces in several threads are safe.

Limits (documented in the README):

* Code that bound the functions before tracing (``from numpy import zeros``)
  keeps NumPy's originals; filling such a buffer with traced values raises
  a ``ConcretizationError`` that says to use ``np.zeros`` or
  ``braze.numpy.zeros``.
* ``np.empty`` is traced as ``np.zeros`` (its contents are unspecified).
* Other constructors (``arange``, ``eye``, ``tri``, ``linspace``, ...) return
  NumPy arrays as usual; inside a trace they become captured constants.
* A ``numba.njit`` function compiled *in another thread while a trace runs*
  that calls one of the four functions sees the wrapper and fails to type it.
"""
from __future__ import annotations

import contextlib
import functools
import sys
import threading

import numpy

from . import numpy as bnp
from .core import current_context

NAMES = ("empty", "zeros", "ones", "full")

# Callers inside these packages always get NumPy's own functions (NumPy's
# Python code, such as np.broadcast_shapes, calls np.empty internally).
_LIBRARIES = ("numpy", "braze", "numba", "llvmlite")

_lock = threading.Lock()
_active = 0
_originals = {name: getattr(numpy, name) for name in NAMES}


def _wrap(name: str):
    original = _originals[name]
    traced = getattr(bnp, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        from .tracing import GraphContext

        if (
            isinstance(current_context(), GraphContext)
            and not kwargs.get("like")
            and not sys._getframe(1).f_globals.get("__name__", "").startswith(_LIBRARIES)
        ):
            return traced(*args, **kwargs)
        return original(*args, **kwargs)

    return wrapper


_wrappers = {name: _wrap(name) for name in NAMES}


@contextlib.contextmanager
def traced_constructors():
    """Install the wrappers for the duration of a trace (reference counted)."""
    global _active
    with _lock:
        if _active == 0:
            for name in NAMES:
                setattr(numpy, name, _wrappers[name])
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0:
                for name in NAMES:
                    setattr(numpy, name, _originals[name])
