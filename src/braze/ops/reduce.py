"""Reductions over static axes: sum prod max min any all, argmax argmin.

``mean``, ``var`` and ``std`` are built on these in ``braze.numpy``.
Axes are normalized (sorted, non-negative) before a node is made, so equal
reductions hash equal.
"""
from __future__ import annotations

import functools

import numpy as np

from ..aval import Aval
from ..core import declare
from ..errors import ShapeError, where
from ._util import dtype_error

REDUCTIONS = {
    "reduce_sum": np.sum,
    "reduce_prod": np.prod,
    "reduce_max": np.max,
    "reduce_min": np.min,
    "reduce_any": np.any,
    "reduce_all": np.all,
}
_NO_IDENTITY = {"reduce_max", "reduce_min"}


def reduced_shape(shape, axes, keepdims) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _check_nonempty(op: str, x: Aval, axes) -> None:
    if any(x.shape[a] == 0 for a in axes):
        raise ShapeError(
            f"{op}: reducing a zero-size axis of {x} (axes {axes}){where()}; "
            "max/min/argmax/argmin have no identity: guard the empty case with a static shape check"
        )


def _reduction(name: str, fn) -> None:
    @functools.lru_cache(maxsize=256)
    def result_dtype(dtype):
        return np.asarray(fn(np.array([1], dtype), axis=0)).dtype

    def abstract(x: Aval, *, axes, keepdims, dtype=None):
        if name in _NO_IDENTITY:
            _check_nonempty(name, x, axes)
        if dtype is not None:  # sum/prod(dtype=): the accumulator and result dtype
            return Aval(reduced_shape(x.shape, axes, keepdims), np.dtype(dtype))
        try:
            dtype = result_dtype(x.dtype)
        except TypeError as exc:
            raise dtype_error(name, [x], exc) from None
        return Aval(reduced_shape(x.shape, axes, keepdims), dtype)

    if name in ("reduce_sum", "reduce_prod"):
        def impl(x, *, axes, keepdims, dtype=None):
            return fn(x, axis=axes, keepdims=keepdims, dtype=dtype)
    else:
        def impl(x, *, axes, keepdims):
            return fn(x, axis=axes, keepdims=keepdims)

    declare(name, "reduce", abstract=abstract, impl=impl)


for _name, _fn in REDUCTIONS.items():
    _reduction(_name, _fn)


def _arg_reduction(name: str, fn) -> None:
    def abstract(x: Aval, *, axis, keepdims):
        if axis is None:
            _check_nonempty(name, x, tuple(range(x.ndim)))
            shape = (1,) * x.ndim if keepdims else ()
        else:
            _check_nonempty(name, x, (axis,))
            shape = reduced_shape(x.shape, (axis,), keepdims)
        return Aval(shape, np.dtype(np.intp))

    def impl(x, *, axis, keepdims):
        return fn(x, axis=axis, keepdims=keepdims)

    declare(name, "reduce", abstract=abstract, impl=impl)


_arg_reduction("argmax", np.argmax)
_arg_reduction("argmin", np.argmin)


def _scan_abstract(x: Aval, *, axis):
    if not 0 <= axis < max(x.ndim, 1):
        raise ShapeError(f"scan: axis {axis} out of range for {x}{where()}")
    return Aval(x.shape, x.dtype)


declare("cumsum", "scan", abstract=_scan_abstract, impl=lambda x, *, axis: np.cumsum(x, axis=axis, dtype=np.asarray(x).dtype))
declare("cumprod", "scan", abstract=_scan_abstract, impl=lambda x, *, axis: np.cumprod(x, axis=axis, dtype=np.asarray(x).dtype))
