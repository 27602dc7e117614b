"""Elementwise primitives: NumPy's ufuncs, ``erf``, ``where``, ``clip`` and casts.

Result dtypes are NumPy's own: the rule asks the ufunc, on tiny stand-ins
with the same promotion behaviour (0-d arrays for strong operands, Python
scalars for weak ones), which dtype it would produce. That is NEP 50 exactly.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..aval import Aval
from ..core import declare
from ._util import broadcast_shapes, dtype_error

UNARY = (
    "negative positive absolute sign exp exp2 expm1 log log2 log10 log1p sqrt "
    "square reciprocal sin cos tan arcsin arccos arctan sinh cosh tanh arcsinh "
    "arccosh arctanh floor ceil trunc rint isnan isinf isfinite signbit "
    "logical_not invert cbrt deg2rad rad2deg conjugate"
).split()
BINARY = (
    "add subtract multiply divide floor_divide remainder fmod power arctan2 "
    "hypot maximum minimum fmax fmin logical_and logical_or logical_xor "
    "bitwise_and bitwise_or bitwise_xor equal not_equal less less_equal "
    "greater greater_equal copysign logaddexp logaddexp2 left_shift right_shift"
).split()

ELEMENTWISE_OPS: list[str] = []


def _elementwise(name: str, fn, nin: int) -> None:
    @functools.lru_cache(maxsize=4096)
    def result_dtype(*keys):
        samples = [Aval((), dtype, weak).sample() for dtype, weak in keys]
        with np.errstate(all="ignore"):
            return np.asarray(fn(*samples)).dtype

    def abstract(*avals):
        if len(avals) != nin:
            raise TypeError(f"{name} takes {nin} operands, got {len(avals)}")
        shape = broadcast_shapes(name, avals)
        try:
            dtype = result_dtype(*((a.dtype, a.weak) for a in avals))
        except (TypeError, ValueError) as exc:
            raise dtype_error(name, avals, exc) from None
        return Aval(shape, dtype, all(a.weak for a in avals))

    declare(name, "elementwise", abstract=abstract, impl=fn)
    ELEMENTWISE_OPS.append(name)


for _name in UNARY:
    _elementwise(_name, getattr(np, _name), 1)
for _name in BINARY:
    _elementwise(_name, getattr(np, _name), 2)


_erf_f64 = np.vectorize(math.erf, otypes=[np.float64])


def erf(x):
    """The error function with NumPy's dtype rule for transcendental ufuncs."""
    x = np.asarray(x)
    dtype = np.tanh(np.array(1, x.dtype)).dtype
    return _erf_f64(x.astype(np.float64)).astype(dtype)[()]


_elementwise("erf", erf, 1)


def scalar_power(x, y):
    """``x ** y`` for a NumPy scalar ``x``: NumPy's scalar math, C's ``pow``
    (``np.float64(-inf) ** 0.5`` is inf, where arrays take a square root: NaN)."""
    x = np.asarray(x)[()]
    y = y if isinstance(y, (bool, int, float)) else np.asarray(y)[()]
    return x ** y


_elementwise("scalar_power", scalar_power, 2)
_elementwise("where", np.where, 3)
_elementwise("clip", np.clip, 3)


def _convert_abstract(x: Aval, *, dtype) -> Aval:
    return Aval(x.shape, np.dtype(dtype))


def _convert_impl(x, *, dtype):
    return np.asarray(x).astype(dtype)


declare("convert", "elementwise", abstract=_convert_abstract, impl=_convert_impl)
ELEMENTWISE_OPS.append("convert")
