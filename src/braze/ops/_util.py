"""Helpers shared by the primitive declarations: broadcasting and errors."""
from __future__ import annotations

import functools

import numpy as np

from ..aval import Aval
from ..errors import ArgumentTypeError, AxisError, DTypeError, ShapeError, where


def describe(avals) -> str:
    return ", ".join(str(a) for a in avals)


def broadcast_shape(*shapes) -> tuple[int, ...]:
    """``np.broadcast_shapes`` for any rank (NumPy's stops at 32 dimensions)."""
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for i, d in enumerate(s, rank - len(s)):
            if d != 1:
                if out[i] != 1 and out[i] != d:
                    raise ValueError(f"shapes {shapes} cannot be broadcast together")
                out[i] = d
    return tuple(int(d) for d in out)


def broadcast_shapes(op: str, avals) -> tuple[int, ...]:
    try:
        return broadcast_shape(*(a.shape for a in avals))
    except ValueError:
        raise ShapeError(
            f"{op}: operands with shapes {describe(avals)} cannot be broadcast together{where()}; "
            "NumPy broadcasting needs each pair of trailing dimensions to be equal or 1 "
            "(insert axes with x[:, None] or reshape one operand)"
        ) from None


def dtype_error(op: str, avals, exc: Exception) -> DTypeError:
    return DTypeError(
        f"{op}: not defined for operands {describe(avals)}{where()} ({exc}); "
        "cast the operands with .astype(...) to a dtype the op accepts"
    )


def normalize_axis(op: str, axis: int, ndim: int, shape=None) -> int:
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise ArgumentTypeError(f"{op}: axis must be an int, got {axis!r}{where()}")
    if not -ndim <= axis < ndim:
        what = f"shape {shape}" if shape is not None else f"ndim {ndim}"
        raise AxisError(
            f"{op}: axis {axis} is out of range for an array of {what}{where()}; "
            f"use an axis in [{-ndim}, {ndim - 1}]"
        )
    return int(axis) % ndim


def normalize_axes(op: str, axis, ndim: int, shape=None) -> tuple[int, ...]:
    """None -> all axes; int or tuple -> sorted non-negative axes, no repeats."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, list):
        raise ShapeError(f"{op}: axis must be an int or a tuple of ints, got the list {axis!r}{where()}; pass tuple(axis)")
    if isinstance(axis, tuple):
        axes = tuple(normalize_axis(op, a, ndim, shape) for a in axis)
    else:
        axes = (normalize_axis(op, axis, ndim, shape),)
    if len(set(axes)) != len(axes):
        raise ShapeError(f"{op}: repeated axis in {axis!r}{where()}; name each axis once")
    return tuple(sorted(axes))


def strong(shape, dtype) -> Aval:
    return Aval(tuple(int(d) for d in shape), np.dtype(dtype))


# ---- scalar code (numba source) helpers, shared by the ops' scalar rules and the targets

@functools.lru_cache(maxsize=None)
def np_type(dtype) -> str:
    dtype = np.dtype(dtype)
    return "np.bool_" if dtype == np.bool_ else f"np.{dtype.name}"


class Typed(str):
    """A name in generated scalar code whose numba type is ``dtype``'s (a
    variable assigned a cast, a load from an array of that dtype): casting it
    to that dtype again is the name itself. numba types and lowers every call
    of ``np.float32(...)``; the casts a kernel no longer writes were an eighth
    of its compile time."""

    def __new__(cls, name: str, dtype):
        typed = super().__new__(cls, name)
        typed.numba = np_type(dtype)
        return typed


def _is_cast(expr: str, to: str) -> bool:
    """Whether ``expr`` is one call ``to(...)`` as a whole (``np.float32(a + b)``,
    not ``np.float32(a) + b``)."""
    if not (expr.startswith(to) and expr.endswith(")")) or expr[len(to):len(to) + 1] != "(":
        return False
    depth = 0
    for i in range(len(to), len(expr)):
        c = expr[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i == len(expr) - 1
    return False


def scalar_cast(expr: str, dtype) -> str:
    """``expr`` as ``dtype`` in generated scalar code: a cast, unless ``expr``
    is one already (casts are idempotent)."""
    to = np_type(dtype)
    if (type(expr) is Typed and expr.numba == to) or _is_cast(expr, to):
        return expr
    return f"{to}({expr})"


def typed_as(expr: str, dtype) -> bool:
    """Whether numba types ``expr`` as ``dtype``: a Typed name or expression
    of it, or one cast to it."""
    to = np_type(dtype)
    return (type(expr) is Typed and expr.numba == to) or _is_cast(expr, to)


def typed_name(name: str, expr: str, dtype) -> str:
    """``name``, assigned ``expr``: Typed when numba types ``expr`` as ``dtype``."""
    return Typed(name, dtype) if typed_as(expr, dtype) else name


def scalar_literal(value, dtype) -> str:
    """A constant of ``dtype`` as numba source text (NaN and inf included)."""
    dtype = np.dtype(dtype)
    value = np.asarray(value).astype(dtype)[()]
    if dtype.kind == "f":
        if np.isnan(value):
            return f"{np_type(dtype)}(np.nan)"
        if np.isinf(value):
            return f"{np_type(dtype)}({'-' if value < 0 else ''}np.inf)"
        return f"{np_type(dtype)}({float(value)!r})"
    if dtype.kind == "b":
        return "True" if value else "False"
    return f"{np_type(dtype)}({int(value)})"
