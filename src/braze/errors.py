"""The errors a user can cause, and where in the user's code they happened.

Every message names what went wrong (op, shapes, dtypes), the user's source
line where the trace was, and what to do instead.
"""
from __future__ import annotations

import os
import sys

import numpy as np

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_ROOT_DIR = os.path.dirname(os.path.dirname(_PKG_DIR))  # holds kernels/, targets/
_SKIP_DIRS = (
    _PKG_DIR + os.sep,
    os.path.join(_ROOT_DIR, "targets") + os.sep,
    os.path.join(_ROOT_DIR, "kernels") + os.sep,
)


def _is_library_file(filename: str) -> bool:
    if filename.startswith(_SKIP_DIRS):
        return True
    # numpy's own Python frames (dispatch wrappers) are never the user's line.
    return f"{os.sep}numpy{os.sep}" in filename or filename.startswith("<__array_function__")


def user_frame() -> tuple[str, int, str] | None:
    """The innermost frame of the caller's code: (filename, line, function).

    Library frames (braze, its targets and kernels, numpy) are skipped.
    """
    frame = sys._getframe(1)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not _is_library_file(filename) and not filename.startswith("<frozen"):
            return filename, frame.f_lineno, frame.f_code.co_name
        frame = frame.f_back
    return None


def where() -> str:
    """' at FILE:LINE (in FUNC)' for the user's current line, or ''."""
    loc = user_frame()
    if loc is None:
        return ""
    filename, line, func = loc
    return f" at {filename}:{line} (in {func})"


class BrazeError(Exception):
    """Base class of every error braze raises because of what a user passed."""


class ConcretizationError(BrazeError):
    """A traced value was used where Python needs a concrete one (if, bool, int)."""


class RefusedValueError(ConcretizationError, ValueError):
    """A traced value read into Python that Python refuses with a ValueError
    (``int(nan)``): the function's own ``except ValueError`` catches it, as in NumPy."""


class RefusedTypeError(ConcretizationError, TypeError):
    """Likewise for a TypeError (``bool()`` of an array of several elements)."""


class GuardFailed(BrazeError):
    """A value a compiled program was specialized on (at a graph break) is
    different in this call: the program is traced again for the new values.
    Raised to the user only when re-specializing is not possible."""


class GradientError(BrazeError, TypeError):
    """A gradient was asked of something that has none, or a tape was misused."""


class ShapeError(BrazeError, ValueError):
    """Shapes that do not fit together (broadcasting, matmul, reshape, axes)."""


class AxisError(ShapeError, np.exceptions.AxisError):
    """An axis out of an array's range: NumPy's AxisError (a ValueError and an IndexError)."""

    def __init__(self, message: str):
        np.exceptions.AxisError.__init__(self, message)


class ArgumentTypeError(BrazeError, TypeError):
    """An argument of the wrong Python type (``axis="x"``): NumPy's TypeError."""


class LinAlgShapeError(ShapeError, np.linalg.LinAlgError):
    """A matrix of the wrong shape for a LAPACK routine (not square): NumPy's LinAlgError."""


class DTypeError(BrazeError, TypeError):
    """A dtype braze does not support, or one an op does not accept."""


class IntegerPowerError(DTypeError, ValueError):
    """Integers to a negative integer power: NumPy's ValueError, named as a dtype error."""


class UnsupportedOpError(BrazeError, NotImplementedError):
    """A NumPy function, method or keyword that braze cannot trace."""


class UnsupportedDTypeError(DTypeError, UnsupportedOpError):
    """A dtype braze does not compile (complex, strings, objects, datetimes,
    records): a call that meets one, as an argument or inside the function,
    runs as NumPy, as any other graph break does (``fullgraph=True``: raised)."""


class TargetError(BrazeError):
    """An unknown target, or one that is not available on this machine."""


class CompositeError(BrazeError):
    """A malformed composite op: bad name, attributes, or kernel signature."""


class IndexOutOfRangeError(BrazeError, IndexError):
    """An index array held a value out of range (known only when the program runs)."""


class IndexShapeError(ShapeError, IndexError):
    """An index NumPy refuses with IndexError, seen while tracing: out of the
    axis's bounds, too many indices, or index arrays whose shapes do not
    broadcast together."""


class IndexTypeError(DTypeError, IndexError):
    """An index of a type NumPy refuses with IndexError (a float, a string)."""


class PythonIntOverflowError(BrazeError, OverflowError):
    """A Python int out of the range of the integer array it meets (NumPy's OverflowError)."""


class TraceError(BrazeError):
    """A misuse of tracing itself, such as a tracer that escaped its trace."""


class ArgumentTraceError(TraceError):
    """Tracing failed where an argument was not an array (a str, None): what
    NumPy raised, with braze's guess about the argument. Raised as the subclass
    that is also NumPy's class (TraceValueError for its ValueError, ...), so a
    caller's ``except ValueError`` still catches it."""


class TraceValueError(ArgumentTraceError, ValueError):
    """ArgumentTraceError of NumPy's ValueError."""


class TraceTypeError(ArgumentTraceError, TypeError):
    """ArgumentTraceError of NumPy's TypeError."""


class TraceAttributeError(ArgumentTraceError, AttributeError):
    """ArgumentTraceError of an AttributeError."""
