"""Reductions over static axes (sum prod max min any all, argmax argmin) and
scans along one axis (cumsum, cumprod).

``mean``, ``var`` and ``std`` are built on these in ``braze.numpy``. Axes are
normalized (sorted, non-negative) before a node is made, so equal reductions
are one node. ``reduce_sum``/``reduce_prod`` take NumPy's ``dtype=`` (the
accumulator and result dtype) as a param, present only when it changes the
default.
"""
from __future__ import annotations

import functools

import numpy as np

from .. import layout
from ..aval import Aval
from ..core import NONDIFFERENTIABLE, bind, declare
from ..errors import ShapeError, where
from ._util import dtype_error
from .elementwise import convert, equal, logical_and, logical_or, not_equal, where as select
from .shape import broadcast_to, dtype_of, reshape, shape_of, slice_

_NO_IDENTITY = {"reduce_max", "reduce_min"}


def reduce_sum(x, axes, keepdims=False):
    return bind("reduce_sum", x, axes=tuple(axes), keepdims=bool(keepdims))


def cumsum(x, axis):
    return bind("cumsum", x, axis=axis)


def cumprod(x, axis):
    return bind("cumprod", x, axis=axis)


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


def _reduce_strides(strides, avals, params, aval):
    """NumPy's reductions allocate their result in the input's memory order (order 'K')."""
    src = strides[0]
    if src is None:
        return None
    axes = params.get("axes")
    if axes is None:
        axis = params.get("axis")
        axes = tuple(range(avals[0].ndim)) if axis is None else (axis,)
    kept = tuple(0 if i in axes else s for i, s in enumerate(src)) if params.get("keepdims") else \
        tuple(s for i, s in enumerate(src) if i not in axes)
    return layout.k_order(aval.shape, [kept])


def _expand(ct, x_shape, axes, keepdims):
    """A reduction's cotangent, broadcast back over the reduced axes."""
    if not keepdims:
        ct = reshape(ct, tuple(1 if i in axes else d for i, d in enumerate(x_shape)))
    return broadcast_to(ct, x_shape)


def _sum_vjp(ct, x, *, out, axes, keepdims, dtype=None):
    return (_expand(ct, shape_of(x), axes, keepdims),)


def _prod_vjp(ct, x, *, out, axes, keepdims, dtype=None):
    shape = shape_of(x)
    zero = equal(x, 0)
    zeros = bind("reduce_sum", convert(zero, np.int64), axes=axes, keepdims=True)
    others = bind("reduce_prod", select(zero, 1, x), axes=axes, keepdims=True)  # product of nonzeros
    safe = select(zero, 1, x)
    out_b = _expand(out, shape, axes, keepdims)
    grad = select(equal(zeros, 0), out_b / safe, select(logical_and(zero, equal(zeros, 1)), others, 0))
    return (_expand(ct, shape, axes, keepdims) * grad,)


def _chooser_vjp(ct, x, *, out, axes, keepdims):
    """max/min: the elements equal to the result share the cotangent (ties split, as JAX)."""
    shape = shape_of(x)
    hit = equal(x, _expand(out, shape, axes, keepdims))
    count = bind("reduce_sum", convert(hit, dtype_of(x)), axes=axes, keepdims=True)
    return (_expand(ct, shape, axes, keepdims) * select(hit, 1, 0) / count,)


def _reduction(name: str, fn, vjp) -> None:
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

    declare(name, "reduce", abstract=abstract, impl=impl, vjp=vjp, strides=_reduce_strides)


_reduction("reduce_sum", np.sum, _sum_vjp)
_reduction("reduce_prod", np.prod, _prod_vjp)
_reduction("reduce_max", np.max, _chooser_vjp)
_reduction("reduce_min", np.min, _chooser_vjp)
_reduction("reduce_any", np.any, NONDIFFERENTIABLE)
_reduction("reduce_all", np.all, NONDIFFERENTIABLE)


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

    declare(name, "reduce", abstract=abstract, impl=impl, vjp=NONDIFFERENTIABLE, strides=_reduce_strides)


_arg_reduction("argmax", np.argmax)
_arg_reduction("argmin", np.argmin)

# ---------------------------------------------------------------- scans


def _scan_abstract(x: Aval, *, axis):
    if not 0 <= axis < max(x.ndim, 1):
        raise ShapeError(f"scan: axis {axis} out of range for {x}{where()}")
    return Aval(x.shape, x.dtype)


def _reverse_cumsum(x, axis):
    """sum over j >= i along ``axis``: a cumsum of the reversed array, reversed."""
    shape = shape_of(x)
    flip = tuple((n - 1, None, -1) if i == axis else (0, n, 1) for i, n in enumerate(shape))
    if shape[axis] == 0:
        return x
    return slice_(cumsum(slice_(x, flip), axis), flip)


def _cumsum_vjp(ct, x, *, out, axis):
    return (_reverse_cumsum(ct, axis),)


def _cumprod_vjp(ct, x, *, out, axis):
    # d out_j / d x_i = prod_{k <= j, k != i} x_k. Before a row's first zero z that
    # is out_j / x_i; at z it is the cumprod with x_z replaced by 1; after z it is 0.
    is_zero = equal(x, 0)
    zeros_so_far = cumsum(convert(is_zero, np.int64), axis)
    before = equal(zeros_so_far, 0)
    first = logical_and(is_zero, equal(zeros_so_far, 1))
    safe = select(before, x, 1)
    at_first = _reverse_cumsum(ct * cumprod(select(first, 1, x), axis), axis)
    return (select(before, _reverse_cumsum(ct * out, axis) / safe, select(first, at_first, 0)),)


def _cumulative_extremum_vjp(ct, x, *, out, axis):
    """cummax / cummin (``np.maximum.accumulate``): ``out[j]`` is ``x[k]`` for
    the last ``k <= j`` where ``x[k]`` equals it (after a NaN, the last NaN), and
    ``x[k]`` takes all of ``ct[j]``: PyTorch's rule for ``cummax``. (JAX's
    associative scan splits a tie by the shape of its tree.)"""
    from .index import _take_along_axis_vjp  # (index imports this module's neighbours)

    shape = shape_of(x)
    iota = np.arange(shape[axis], dtype=np.intp).reshape(tuple(n if i == axis else 1 for i, n in enumerate(shape)))
    hit = logical_or(equal(x, out), not_equal(x, x))
    at = bind("cummax", select(hit, broadcast_to(iota, shape), -1), axis=axis)
    return (_take_along_axis_vjp(ct, x, at, out=out, axis=axis)[0],)


declare("cummax", "scan", abstract=_scan_abstract, vjp=_cumulative_extremum_vjp,
        impl=lambda x, *, axis: np.maximum.accumulate(x, axis=axis))
declare("cummin", "scan", abstract=_scan_abstract, vjp=_cumulative_extremum_vjp,
        impl=lambda x, *, axis: np.minimum.accumulate(x, axis=axis))
declare("cumsum", "scan", abstract=_scan_abstract, vjp=_cumsum_vjp,
        impl=lambda x, *, axis: np.cumsum(x, axis=axis, dtype=np.asarray(x).dtype))
declare("cumprod", "scan", abstract=_scan_abstract, vjp=_cumprod_vjp,
        impl=lambda x, *, axis: np.cumprod(x, axis=axis, dtype=np.asarray(x).dtype))
