"""``braze.numpy``: NumPy's functions written with braze primitives.

Each function here calls ``bind``, so it runs eagerly on NumPy arrays, is
recorded while tracing, and is watched by a gradient tape, all through the
same code. Traced arrays reach these functions from plain NumPy calls via
``__array_ufunc__``/``__array_function__`` (see ``braze.tracing``).

>>> import numpy as np, braze.numpy as bnp
>>> bnp.exp(np.zeros(2))
array([1., 1.])
"""
from __future__ import annotations

import builtins
import math
from math import prod as _prod  # (the namespace mirrors NumPy's: math is deleted at the end)
import operator

import numpy as np

from .core import bind
from .errors import (DTypeError, IndexOutOfRangeError, IntegerPowerError, PythonIntOverflowError, ShapeError,
                     UnsupportedOpError, where as _where)
from .ops._util import normalize_axes, normalize_axis
from .ops.elementwise import BINARY, UNARY
from .ops._util import broadcast_shape
from . import layout
from .aval import is_ndarray
from .layout import is_c_contiguous, is_f_contiguous

_NoValue = np._NoValue  # numpy's own "argument not given" marker


def _shape(x) -> tuple[int, ...]:
    return tuple(np.shape(x)) if not hasattr(x, "shape") else tuple(x.shape)


def _ndim(x) -> int:
    return x.ndim if hasattr(x, "ndim") else np.ndim(x)  # (not the shape: a selection's length unread)


def _index(a, key):
    """``a[key]`` through the array's own indexing (a traced array records a
    view or a gather; a constant is indexed by NumPy)."""
    return (a if hasattr(a, "shape") else np.asarray(a))[key]


def _dtype(x) -> np.dtype:
    if hasattr(x, "dtype"):
        return np.dtype(x.dtype)
    return np.asarray(x).dtype


def _unsupported(func: str, arg: str, instead: str):
    return UnsupportedOpError(
        f"numpy.{func}: argument {arg} is not supported when tracing{_where()}; {instead}"
    )


def _reject(func: str, **kwargs) -> None:
    """Raise for keyword arguments braze cannot honour (anything not left default)."""
    for name, value in kwargs.items():
        if value is not None and value is not _NoValue and value is not False:
            raise _unsupported(func, f"{name}={value!r}", f"call numpy.{func} without {name}=")


def _as_dtype(func: str, dtype) -> np.dtype:
    """A ``dtype=`` argument as NumPy accepts it (a dtype, type or name; not an array)."""
    if _is_braze_array(dtype) or is_ndarray(dtype):
        raise DTypeError(f"{func}: dtype= got an array, not a data type{_where()}; pass e.g. np.float32 or x.dtype")
    try:
        return np.dtype(dtype)
    except TypeError as exc:
        raise DTypeError(f"{func}: {exc}{_where()}") from None


def _check_order(func: str, order, allowed: str = "KACF") -> str:
    if order is None:
        return "K"
    if not isinstance(order, str) or order.upper() not in allowed or len(order) != 1:
        raise DTypeError(f"{func}: order must be one of {', '.join(repr(c) for c in allowed)}, got {order!r}{_where()}")
    return order.upper()


def _check_cast(func: str, src, dst, casting: str) -> None:
    if casting not in ("no", "equiv", "safe", "same_kind", "unsafe"):
        raise DTypeError(f"{func}: casting must be one of 'no', 'equiv', 'safe', 'same_kind', or 'unsafe'{_where()}")
    if not np.can_cast(np.dtype(src), np.dtype(dst), casting):
        raise DTypeError(f"{func}: cannot cast array data from {np.dtype(src)} to {np.dtype(dst)} according to "
                         f"the rule {casting!r}{_where()}")


def _is_braze_array(x) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and hasattr(x, "_assign")


# ---------------------------------------------------------------- structure


def shape(a) -> tuple[int, ...]:
    """``np.shape``: static, known while tracing."""
    return _shape(a)


def ndim(a) -> int:
    return _ndim(a)


def size(a, axis=None) -> int:
    s = _shape(a)
    if axis is None:
        return int(np.prod(s, dtype=np.int64))
    axes = normalize_axes("size", axis, len(s), s)
    return int(np.prod([s[i] for i in axes], dtype=np.int64))


def result_type(*arrays_and_dtypes):
    return np.result_type(*(np.array(1, _dtype(a)) if hasattr(a, "dtype") and hasattr(a, "shape")
                            and not isinstance(a, type) else a  # (np.float32, the type, is a dtype)
                            for a in arrays_and_dtypes))


def iscomplexobj(x) -> bool:
    return _dtype(x).kind == "c"


def isrealobj(x) -> bool:
    return not iscomplexobj(x)


# ---------------------------------------------------------------- elementwise


def _strong(value):
    """NumPy's explicit calls return strongly typed results even for Python
    scalar operands (``np.add(2.0, 1.0)`` is a float64); Python arithmetic on
    weak values (``s * 2.0``) stays weak, which the operators keep."""
    if getattr(value, "weak", False):
        return bind("convert", value, dtype=value.dtype)
    return value


def _make_ufunc(name: str, nin: int):
    if nin == 1:
        def fn(x):
            return _strong(bind(name, x))
    else:
        def fn(x1, x2):
            return _strong(bind(name, x1, x2))
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise ``numpy.{name}``."
    return fn


UFUNCS = {name: _make_ufunc(name, 1) for name in UNARY}
UFUNCS.update({name: _make_ufunc(name, 2) for name in BINARY})


def check_power(base, exponent) -> None:
    """NumPy refuses integers to negative integer powers (a ValueError at run
    time); with a literal exponent braze can say so while tracing."""
    dtype = getattr(base, "dtype", None)
    if dtype is None or np.dtype(dtype).kind not in "iub":
        return
    if type(exponent) is int and np.dtype(dtype).kind != "b" and exponent < np.iinfo(dtype).min:
        return  # (NumPy's OverflowError first: the Python int does not fit the dtype)
    if isinstance(exponent, (int, np.integer)) and not isinstance(exponent, bool) and exponent < 0:
        if 0 in tuple(np.shape(base)):
            return  # (NumPy checks element by element: an empty base raises nothing)
        raise IntegerPowerError(
            f"power: integers to negative integer powers are not allowed ({np.dtype(dtype)} ** {exponent})"
            f"{_where()}; convert to float first (x.astype(float) ** {exponent}), as NumPy requires")


def _power(x1, x2):
    check_power(x1, x2)
    return _strong(bind("power", x1, x2))


_power.__name__ = _power.__qualname__ = "power"
_power.__doc__ = "Elementwise ``numpy.power``."
UFUNCS["power"] = _power
globals().update(UFUNCS)
true_divide = UFUNCS["divide"]
abs = UFUNCS["absolute"]  # noqa: A001  (NumPy's name)
bitwise_not = bitwise_invert = UFUNCS["invert"]
bitwise_left_shift, bitwise_right_shift = UFUNCS["left_shift"], UFUNCS["right_shift"]
conj = UFUNCS["conjugate"]
pow = UFUNCS["power"]  # noqa: A001


def erf(x):
    """The error function, elementwise (NumPy has none; ``scipy.special.erf`` maps here).

    >>> float(erf(0.0))
    0.0
    """
    return _strong(bind("erf", x))


UFUNCS["erf"] = erf


def expit(x):
    """The logistic sigmoid, elementwise (``scipy.special.expit`` maps here):
    ``1 / (1 + exp(-x))``, SciPy's own formula, in float32 for float32 and in
    float64 for any other dtype (SciPy's loops)."""
    dtype = np.dtype(np.float32) if _dtype(x) == np.float32 else np.dtype(np.float64)
    x = x if _dtype(x) == dtype else astype(x, dtype)
    one = dtype.type(1)
    return _strong(true_divide(one, UFUNCS["add"](one, UFUNCS["exp"](UFUNCS["negative"](x)))))


UFUNCS["expit"] = expit


def divmod(x1, x2):  # noqa: A001  (NumPy's name)
    """``np.divmod``: ``(floor_divide, remainder)`` with NumPy's signs."""
    return floor_divide(x1, x2), remainder(x1, x2)  # noqa: F821


UFUNCS["divmod"] = divmod
UFUNCS["true_divide"] = true_divide


def where(condition, x=_NoValue, y=_NoValue):
    """``np.where(condition, x, y)``; the one-argument form has a data-dependent shape."""
    if x is _NoValue or y is _NoValue:
        raise _unsupported("where", "with only a condition", "its result shape depends on the data; use np.where(cond, x, y)")
    result = _strong(bind("where", condition, x, y))
    if getattr(result, "_is_scalar", lambda: False)():
        result = bind("view", result)  # (NumPy's where gives an array, 0-d too)
    return result


def clip(a, a_min=_NoValue, a_max=_NoValue, out=None, *, min=_NoValue, max=_NoValue, **kwargs):
    """``np.clip``, with NumPy's argument rules; either bound may be None."""
    if a_min is _NoValue and a_max is _NoValue:
        lo = None if min is _NoValue else min
        hi = None if max is _NoValue else max
    elif a_min is _NoValue or a_max is _NoValue:
        raise DTypeError(f"clip() missing 1 required positional argument: "
                         f"{'a_min' if a_min is _NoValue else 'a_max'}{_where()}")
    elif min is not _NoValue or max is not _NoValue:
        raise ShapeError(f"clip: passing min= or max= when a_min and a_max are given is forbidden{_where()}")
    else:
        lo, hi = a_min, a_max
    unknown = set(kwargs) - {"dtype", "casting"}
    if unknown:
        raise _unsupported("clip", f"{sorted(unknown)}", "clip the values with np.clip(a, lo, hi) and combine "
                           "with np.where for a mask")
    if kwargs.get("dtype") is not None:
        dtype = _as_dtype("clip", kwargs["dtype"])
        _check_cast("clip", _dtype(a), dtype, kwargs.get("casting", "same_kind"))
        a = astype(a, dtype)
    if _dtype(a).kind in "iu":  # NumPy clamps Python-int bounds to the array's range
        info = np.iinfo(_dtype(a))
        lo = builtins.max(lo, int(info.min)) if type(lo) is int else lo
        hi = builtins.min(hi, int(info.max)) if type(hi) is int else hi
    if lo is None and hi is None:
        result = asarray_copy(a)
    elif lo is None:
        result = minimum(a, hi)  # noqa: F821  (defined by globals().update)
    elif hi is None:
        result = maximum(a, lo)  # noqa: F821
    else:
        result = bind("clip", a, lo, hi)
    return _into_out("clip", result, out)


def fix(x, out=None):
    """``np.fix``: round towards zero, as NumPy computes it (ceil, then floor where x >= 0)."""
    return _into_out("fix", where(greater_equal(x, 0), floor(x), ceil(x)), out)  # noqa: F821


def astype(x, dtype, /, *, copy=True, device=None):
    """Cast to ``dtype`` (``np.astype``; unsafe casting, a new array unless
    ``copy=False`` and the dtype is already right)."""
    dtype = _as_dtype("astype", dtype)
    if not copy and _dtype(x) == dtype:
        return x
    return bind("convert", x, dtype=dtype)


def astype_method(x, dtype, order="K", casting="unsafe", subok=True, copy=True):
    """``ndarray.astype`` with its keywords."""
    dtype = _as_dtype("astype", dtype)
    _check_cast("astype", _dtype(x), dtype, casting)
    order = _check_order("astype", order)
    if not copy and _dtype(x) == dtype and _laid_out(x, order):
        return x
    return copy_as(bind("convert", x, dtype=dtype), order)


def asarray_copy(x):
    """A copy of ``x``: a new array with the same values."""
    return bind("convert", x, dtype=_dtype(x))


def _new(x):
    """``x`` as a new array where NumPy's function makes one (``np.take`` with
    one index, ``np.repeat(x, 1)``) and braze's ops built a view: a write into
    it must not reach the argument."""
    return asarray_copy(x) if getattr(x, "_view", None) is not None else x


def _laid_out(x, order: str) -> bool:
    """Whether ``x``'s memory already is in ``order`` (NumPy copies when not);
    an array whose layout braze does not model (watched by a tape) is."""
    try:
        flags = getattr(x, "flags", None)
    except UnsupportedOpError:
        flags = None
    if flags is None or order == "K":
        return True
    if order == "A":
        return flags.c_contiguous or flags.f_contiguous
    return flags.c_contiguous if order == "C" else flags.f_contiguous


def copy(a, order="K", subok=False):
    """``np.copy`` (memory order 'K' by default, as NumPy; ``ndarray.copy`` is 'C')."""
    return copy_as(asarray_copy(a), _check_order("copy", order))


def copy_as(result, order: str, like=None):
    """``result`` (a new array) laid out in ``order`` ('K' and 'A': like ``like``):
    traced arrays follow NumPy's layout."""
    relayout = getattr(result, "_relayout", None)
    if relayout is not None and (order != "K" or like is not None):
        relayout(order, like)
    return result


def round(a, decimals=0, out=None):  # noqa: A001
    """``np.round``: half to even, computed as NumPy does (``a * 10**d``, rint,
    ``/ 10**d``; for a negative ``d``, ``a / 10**-d``, rint, ``* 10**-d``, in
    float64 for integers, which come back as their own dtype), a 0-d argument
    giving a scalar."""
    decimals = operator.index(decimals)  # (NumPy's TypeError for np.round(x, 1.5))
    dt = _dtype(a)
    if dt.kind in "biu" and decimals >= 0:
        result = asarray_copy(a)
    elif decimals == 0:
        result = rint(a)  # noqa: F821  (defined by globals().update)
    else:
        work = astype(a, np.float64) if dt.kind in "biu" else a
        try:
            scale = 10.0 ** builtins.abs(decimals)
        except OverflowError:  # (|decimals| > 308: NumPy's C pow gives inf, and the result is NaN)
            scale = float("inf")
        if decimals > 0:
            result = divide(rint(multiply(work, scale)), scale)  # noqa: F821
        else:
            result = multiply(rint(divide(work, scale)), scale)  # noqa: F821
        if dt.kind in "biu":
            result = astype(result, dt)
    if out is None and _ndim(a) == 0 and not getattr(result, "_is_scalar", lambda: True)():
        result = result[()]
    return _into_out("round", result, out)


around = round


# ---------------------------------------------------------------- reductions
# Every keyword NumPy's reductions take is honoured: dtype (the accumulator
# and result dtype; inputs are cast first, unsafely, as NumPy does), out (a
# traced array), keepdims, initial (combined with the result; the result of
# an empty reduction), where (masked-out elements count as the identity,
# which max/min only have with initial=).

_IDENTITY = {"reduce_sum": 0, "reduce_prod": 1, "reduce_any": False, "reduce_all": True}
_COMBINE = {"reduce_sum": "add", "reduce_prod": "multiply", "reduce_max": "maximum", "reduce_min": "minimum"}


def _into_out(func: str, result, out, reduction: bool = False):
    """``result`` written into ``out=`` (a traced array), which is returned. A
    reduction's ``out`` has the result's shape exactly (NumPy broadcasts
    only a ufunc's result into it)."""
    if out is None:
        return result
    if isinstance(out, tuple):
        (out,) = out
    if not hasattr(out, "_assign"):
        raise _unsupported(func, f"out= (a {type(out).__name__})",
                           "assign the result instead: a compiled function cannot write into an array it captured")
    if reduction and _shape(out) != _shape(result):
        raise ShapeError(f"{func}: out= has shape {_shape(out)}, the reduction's result {_shape(result)}{_where()}; "
                         "NumPy needs the result's shape exactly (keepdims=True keeps the reduced axes)")
    out._assign(result, f"{func} (out=)", casting="unsafe")
    return out


def _reduce(prim: str, func: str, a, axis, dtype=None, out=None, keepdims=False,
            initial=_NoValue, where=_NoValue):
    axes = normalize_axes(func, axis, _ndim(a), _shape(a))
    if out is not None and dtype is None and prim in ("reduce_sum", "reduce_prod"):
        # NumPy's loop: the reduction's own dtype promoted with out's (a float64 sum
        # into an int64 out adds in float64, a float32 one into float64 in float64)
        promoted = np.promote_types(_reduction_dtype(prim, _dtype(a)),
                                    _dtype(out[0] if isinstance(out, tuple) else out))
        if promoted != _reduction_dtype(prim, _dtype(a)):
            dtype = promoted
    if initial is not _NoValue and _dtype(a).kind in "iu" and isinstance(initial, int) \
            and not isinstance(initial, bool):
        info = np.iinfo(_dtype(a))
        if not info.min <= initial <= info.max:
            raise PythonIntOverflowError(f"{func}: Python integer {initial} out of bounds for {_dtype(a)} "
                                         f"(initial=){_where()}; pass an initial the dtype holds")
    if dtype is not None:
        a = astype(a, dtype)
    if where is not _NoValue and where is not True:
        fill = _IDENTITY.get(prim, initial)
        if fill is _NoValue:
            raise ShapeError(
                f"{func}: the reduction has no identity, so where= needs initial= (the value of a "
                f"row with every element masked out){_where()}, as NumPy requires")
        a = globals()["where"](where, a, _dtype(a).type(fill))
    params = {"axes": axes, "keepdims": bool(keepdims)}
    if dtype is not None and prim in ("reduce_sum", "reduce_prod") and \
            np.dtype(dtype) != _reduction_dtype(prim, _dtype(a)):  # (only a dtype that changes it: one node per sum)
        params["dtype"] = np.dtype(dtype)
    if initial is not _NoValue and _count(a, axes) == 0:  # the empty reduction is the initial value
        shape = tuple(1 if i in axes else d for i, d in enumerate(_shape(a))) if keepdims else \
            tuple(d for i, d in enumerate(_shape(a)) if i not in axes)
        dt = np.dtype(dtype) if dtype is not None else _reduction_dtype(prim, _dtype(a))
        result = full(shape, initial, dt)
        return _into_out(func, result, out, reduction=True)
    result = bind(prim, a, **params)
    if initial is not _NoValue:
        value = np.asarray(initial).astype(_dtype(result))[()]
        result = astype(UFUNCS[_COMBINE[prim]](result, value), _dtype(result))
    return _into_out(func, result, out, reduction=True)


def _reduction_dtype(prim: str, dtype) -> np.dtype:
    from .core import ABSTRACT
    from .aval import Aval

    return ABSTRACT[prim](Aval((1,), np.dtype(dtype)), axes=(0,), keepdims=False).dtype


def _over_whole(a, axis, out, where):
    """``a`` a selection by a mask (``x[m]``, or elementwise in selections,
    ``x[m] * w[m]``) reduced whole: (the values over the arrays selected from,
    the mask), the reduction NumPy's ``where=`` one, so that the selection's
    length is not read (``GraphContext.whole_selection``); else None."""
    if where is not _NoValue or out is not None or axis not in (None, 0, -1, (0,), (-1,)):
        return None
    whole = getattr(getattr(a, "_ctx", None), "whole_selection", None)
    return whole(a) if whole is not None else None


def _reduction(prim: str, func: str):
    def fn(a, axis=None, dtype=None, out=None, keepdims=False, initial=_NoValue, where=_NoValue):
        picked = _over_whole(a, axis, out, where)
        if picked is not None:
            value = _reduce(prim, func, picked[0], None, dtype, None, False, initial, picked[1])
            return reshape(value, (1,)) if keepdims else value  # noqa: F821
        return _reduce(prim, func, a, axis, dtype, out, keepdims, initial, where)

    fn.__name__ = fn.__qualname__ = func
    fn.__doc__ = f"``numpy.{func}`` over static axes (int, tuple or None), with NumPy's keywords."
    return fn


sum = _reduction("reduce_sum", "sum")  # noqa: A001
prod = _reduction("reduce_prod", "prod")


def _extremum(prim: str, func: str):
    def fn(a, axis=None, out=None, keepdims=False, initial=_NoValue, where=_NoValue):
        return _reduce(prim, func, a, axis, None, out, keepdims, initial, where)

    fn.__name__ = fn.__qualname__ = func
    fn.__doc__ = f"``numpy.{func}`` over static axes, with NumPy's keywords."
    return fn


max = _extremum("reduce_max", "max")  # noqa: A001
min = _extremum("reduce_min", "min")  # noqa: A001
amax, amin = max, min


def _logical_reduction(prim: str, func: str):
    def fn(a, axis=None, out=None, keepdims=False, *, where=_NoValue):
        return _reduce(prim, func, a, axis, None, out, keepdims, _NoValue, where)

    fn.__name__ = fn.__qualname__ = func
    return fn


any = _logical_reduction("reduce_any", "any")  # noqa: A001
all = _logical_reduction("reduce_all", "all")  # noqa: A001


def _arg_reduction(prim: str, func: str):
    def fn(a, axis=None, out=None, *, keepdims=False):
        if axis is not None:
            axis = normalize_axis(func, axis, _ndim(a), _shape(a))
        return _into_out(func, bind(prim, a, axis=axis, keepdims=bool(keepdims)), out)

    fn.__name__ = fn.__qualname__ = func
    return fn


argmax = _arg_reduction("argmax", "argmax")
argmin = _arg_reduction("argmin", "argmin")


def _scan(prim: str, func: str):
    def fn(a, axis=None, dtype=None, out=None):
        if axis is None:
            a, axis = ravel(a), 0
        axis = normalize_axis(func, axis, _ndim(a), _shape(a))
        if dtype is None:
            dtype = _reduction_dtype("reduce_sum" if prim == "cumsum" else "reduce_prod", _dtype(a))
        a = astype(a, dtype) if np.dtype(dtype) != _dtype(a) else a
        return _into_out(func, bind(prim, a, axis=axis), out)

    fn.__name__ = fn.__qualname__ = func
    fn.__doc__ = f"``numpy.{func}`` along one axis (flattened when axis is None), with ``dtype=``."
    return fn


cumsum = _scan("cumsum", "cumsum")
cumprod = _scan("cumprod", "cumprod")


def _extremum_scan(prim: str, func: str):
    def fn(a, axis=0, dtype=None, out=None):
        if _ndim(a) == 0:
            raise ShapeError(f"{func}: cannot accumulate on a scalar{_where()}")
        axis = normalize_axis(func, axis, _ndim(a), _shape(a))
        if dtype is not None and np.dtype(dtype) != _dtype(a):
            a = astype(a, dtype)
        return _into_out(func, bind(prim, a, axis=axis), out)

    fn.__name__ = fn.__qualname__ = "_" + prim
    fn.__doc__ = f"``numpy.{func}``: the running extremum along ``axis`` (NaN carried on, as NumPy's)."
    return fn


_cummax = _extremum_scan("cummax", "maximum.accumulate")
_cummin = _extremum_scan("cummin", "minimum.accumulate")


def _cumulative(func: str, scan):
    def fn(x, /, *, axis=None, dtype=None, out=None, include_initial=False):
        if axis is None:
            if _ndim(x) > 1:
                raise ShapeError(f"{func}: axis must be given for an array of more than one dimension{_where()}")
            axis = 0
        result = scan(x, axis=axis, dtype=dtype)
        if include_initial:
            axis = normalize_axis(func, axis, _ndim(result), _shape(result))
            shape = tuple(1 if i == axis else d for i, d in enumerate(_shape(result)))
            first = full(shape, 0 if func == "cumulative_sum" else 1, _dtype(result))
            result = concatenate([first, result], axis=axis)
        return _into_out(func, result, out)

    fn.__name__ = fn.__qualname__ = func
    fn.__doc__ = f"``numpy.{func}`` (the array API's scan: ``axis`` needed above one dimension)."
    return fn


cumulative_sum = _cumulative("cumulative_sum", cumsum)
cumulative_prod = _cumulative("cumulative_prod", cumprod)


def _mean_dtype(dtype, requested):
    if requested is not None:
        return np.dtype(requested), np.dtype(requested)
    dtype = np.dtype(dtype)
    if dtype.kind in "biu":
        return np.dtype(np.float64), np.dtype(np.float64)
    if dtype == np.float16:
        return np.dtype(np.float32), dtype
    return dtype, dtype


def _count(a, axes) -> int:
    shape = _shape(a)
    return int(np.prod([shape[i] for i in axes], dtype=np.int64))


def _where_count(a, axes, keepdims, mask, acc):
    """The number of elements each result averages: static, or a traced count under where=."""
    if mask is _NoValue or mask is True:
        return acc.type(_count(a, axes))
    counts = bind("reduce_sum", astype(broadcast_to(mask, _shape(a)), np.intp), axes=axes, keepdims=bool(keepdims))
    return astype(counts, acc) if acc.kind == "f" else counts


def mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=_NoValue):
    """``np.mean``: integers average in float64, float16 accumulates in float32."""
    picked = _over_whole(a, axis, out, where)
    if picked is not None:  # (``x[m].mean()``: over ``x`` where ``m``, the count a traced sum of ``m``)
        value = mean(picked[0], None, dtype, None, False, where=picked[1])
        return reshape(value, (1,)) if keepdims else value  # noqa: F821
    axes = normalize_axes("mean", axis, _ndim(a), _shape(a))
    acc, result = _mean_dtype(_dtype(a), dtype)
    total = _reduce("reduce_sum", "mean", a, axis, acc, None, keepdims, _NoValue, where)
    with np.errstate(invalid="ignore", divide="ignore"):
        value = astype(divide(total, _where_count(a, axes, keepdims, where, acc)), result)  # noqa: F821
    return _into_out("mean", value, out)


def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=_NoValue, mean=_NoValue,
        correction=_NoValue):
    """``np.var`` as NumPy computes it: mean of squared deviations, ``ddof`` aware."""
    if mean is not _NoValue:
        raise _unsupported("var", "mean=", "leave it out: braze computes the mean itself")
    if correction is not _NoValue:
        ddof = correction
    picked = _over_whole(a, axis, out, where)
    if picked is not None:  # (``np.var(x[m])``: over ``x`` where ``m``, as mean)
        value = var(picked[0], None, dtype, None, ddof, False, where=picked[1])
        return reshape(value, (1,)) if keepdims else value  # noqa: F821
    axes = normalize_axes("var", axis, _ndim(a), _shape(a))
    acc, result = _mean_dtype(_dtype(a), dtype)
    count = _where_count(a, axes, True, where, acc)
    if dtype is not None and acc != _dtype(a):
        # NumPy's: the sums cast their elements to dtype= as they add them, the
        # mean is stored in it, and the deviations are the input's less that mean
        # (a float array's var with dtype=int32: float deviations of an int mean)
        mu = astype(divide(_reduce("reduce_sum", "var", a, axis, acc, None, True, _NoValue, where),  # noqa: F821
                           count), acc)
        dev = subtract(a, mu)  # noqa: F821
        total = _reduce("reduce_sum", "var", multiply(dev, dev), axis, acc, None, keepdims, _NoValue, where)  # noqa: F821
    else:
        x = astype(a, acc)
        mu = divide(_reduce("reduce_sum", "var", x, axis, None, None, True, _NoValue, where), count)  # noqa: F821
        dev = subtract(x, mu)  # noqa: F821
        total = _reduce("reduce_sum", "var", multiply(dev, dev), axis, None, None, keepdims, _NoValue, where)  # noqa: F821
    n = _where_count(a, axes, keepdims, where, acc)
    denom = maximum(subtract(n, ddof), 0) if _is_braze_array(n) else acc.type(builtins.max(n - ddof, 0))  # noqa: F821
    return _into_out("var", astype(divide(total, denom), result), out)  # noqa: F821


def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=_NoValue, mean=_NoValue, correction=_NoValue):
    """``np.std``: the square root of :func:`var` (in var's dtype, as NumPy:
    an integer ``dtype`` truncates a scalar result and refuses an array one)."""
    v = var(a, axis, dtype, None, ddof, keepdims, where=where, mean=mean, correction=correction)
    value = sqrt(v)  # noqa: F821
    if _dtype(v).kind in "biu":
        if _ndim(v):
            raise DTypeError(f"std: cannot cast ufunc 'sqrt' output from float64 to {_dtype(v)} with casting "
                             f"rule 'same_kind'{_where()}; pass a float dtype=")
        value = astype(value, _dtype(v))
    return _into_out("std", value, out)


def ptp(a, axis=None, out=None, keepdims=False):
    """``np.ptp``: the maximum minus the minimum, in the array's dtype."""
    return _into_out("ptp", subtract(max(a, axis, None, keepdims), min(a, axis, None, keepdims)), out)  # noqa: F821


def _nan_filled(a, fill):
    """``a`` with its NaNs replaced by ``fill`` (NumPy's ``_replace_nan``), and
    the mask of NaNs (None for a dtype that holds no NaN)."""
    if _dtype(a).kind not in "fc":
        return a, None
    mask = isnan(a)  # noqa: F821
    return globals()["where"](mask, _dtype(a).type(fill), a), mask


def _nan_reduction(func: str, reduce, fill):
    def fn(a, axis=None, dtype=None, out=None, keepdims=False, initial=_NoValue, where=_NoValue):
        return reduce(_nan_filled(a, fill)[0], axis, dtype, out, keepdims, initial, where)

    fn.__name__ = fn.__qualname__ = func
    fn.__doc__ = f"``numpy.{func}``: NaNs count as {fill}."
    return fn


nansum = _nan_reduction("nansum", sum, 0)
nanprod = _nan_reduction("nanprod", prod, 1)


def nanmean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=_NoValue):
    """``np.nanmean`` as NumPy computes it: the sum of the non-NaN values over
    their count, in the sum's dtype (NaN for a slice of NaNs only)."""
    if _dtype(a).kind not in "fc":
        return mean(a, axis, dtype, out, keepdims, where=where)
    if dtype is not None and np.dtype(dtype).kind not in "fc":
        raise DTypeError(f"nanmean: if a is inexact, then dtype must be inexact (got {np.dtype(dtype)}){_where()}, "
                         "as NumPy says; pass a float dtype=")
    filled, mask = _nan_filled(a, 0)
    count = sum(logical_not(mask), axis, np.intp, None, keepdims, _NoValue, where)  # noqa: F821
    total = sum(filled, axis, dtype, None, keepdims, _NoValue, where)
    with np.errstate(invalid="ignore", divide="ignore"):
        value = astype(divide(total, count), _dtype(total))  # noqa: F821
    return _into_out("nanmean", value, out, reduction=True)


def _nan_extremum(func: str, reduce, fill):
    def fn(a, axis=None, out=None, keepdims=False, initial=_NoValue, where=_NoValue):
        if _dtype(a).kind not in "fc":
            return reduce(a, axis, out, keepdims, initial, where)
        if where is not _NoValue:
            raise _unsupported(func, "where=", "mask the values with np.where(mask, x, np.nan) first")
        filled, mask = _nan_filled(a, fill)
        value = reduce(filled, axis, None, keepdims, initial)
        if initial is _NoValue:  # (NumPy's fmax.reduce: NaN where every value is)
            value = globals()["where"](all(mask, axis, keepdims=keepdims), _dtype(a).type(np.nan), value)
            if _ndim(value) == 0 and not getattr(value, "_is_scalar", lambda: True)():
                value = value[()]
        return _into_out(func, value, out, reduction=True)

    fn.__name__ = fn.__qualname__ = func
    fn.__doc__ = f"``numpy.{func}``: NaNs ignored; NaN where a slice holds nothing else."
    return fn


nanmax = _nan_extremum("nanmax", max, -np.inf)
nanmin = _nan_extremum("nanmin", min, np.inf)


def average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    """``np.average`` as NumPy computes it. Weights whose sum may be zero raise
    NumPy's ZeroDivisionError: checked when traced, and traced weights guarded
    at each call."""
    keep = {"keepdims": keepdims} if keepdims else {}
    if weights is None:
        avg = mean(a, axis, **keep)
        scl = _dtype(avg).type(int(np.prod(_shape(a))) / int(np.prod(_shape(avg))))
    else:
        traced = _is_braze_array(weights)
        wgt = weights if traced else np.asarray(weights)
        if _dtype(a).kind in "biu":
            result = np.result_type(_dtype(a), _dtype(wgt), "f8")
        else:
            result = np.result_type(_dtype(a), _dtype(wgt))
        if _shape(a) != _shape(wgt):
            if axis is None:
                raise DTypeError(f"average: axis must be specified when shapes of a and weights differ{_where()}")
            if _ndim(wgt) != 1:
                raise DTypeError(f"average: 1D weights expected when shapes of a and weights differ{_where()}")
            ax = normalize_axis("average", axis, _ndim(a), _shape(a))
            if _shape(wgt)[0] != _shape(a)[ax]:
                raise ShapeError(f"average: length of weights not compatible with specified axis{_where()}")
            along = tuple(_shape(wgt)[0] if d == ax else 1 for d in range(_ndim(a)))
            wgt = reshape(wgt, along) if traced else \
                np.broadcast_to(wgt, (_ndim(a) - 1) * (1,) + wgt.shape).swapaxes(-1, ax)
        if traced:
            wgt = astype(wgt, result)
            scl = sum(wgt, axis, **keep)  # noqa: F821
            known = _known_value(scl)
            if known is None:
                raise _unsupported("average", "traced weights= where the trace has no values",
                                   "compute (a * w).sum(axis) / w.sum(axis)")
            if np.any(known[0] == 0.0):
                raise ZeroDivisionError("Weights sum to zero, can't be normalized")
            if known[1] is not None:
                zeros = sum(UFUNCS["equal"](scl, 0.0), dtype=np.intp)  # noqa: F821
                _guard(known[1], zeros, 0, "np.average's weights not summing to 0")
        else:
            scl = wgt.sum(axis=axis, dtype=result, **keep)
            if np.any(scl == 0.0):
                raise ZeroDivisionError("Weights sum to zero, can't be normalized")
            wgt = wgt.astype(result)
        avg = divide(sum(multiply(astype(a, result), wgt), axis, **keep), scl)  # noqa: F821
    if not returned:
        return avg
    if np.shape(scl) != _shape(avg):
        scl = broadcast_to(scl, _shape(avg)) if _is_braze_array(scl) else np.broadcast_to(scl, _shape(avg)).copy()
    return avg, scl


def polyval(p, x):
    """``np.polyval``: Horner's rule, as NumPy's loop (``y = y * x + pv``)."""
    if isinstance(p, np.poly1d) or isinstance(x, np.poly1d):
        raise _unsupported("polyval", "of a np.poly1d", "pass the coefficients as an array")
    x = x if _is_braze_array(x) else np.asanyarray(x)
    y = zeros_like(x)
    for pv in (p if _is_braze_array(p) else np.asarray(p)):
        y = add(multiply(y, x), pv)  # noqa: F821
    return y


# ---------------------------------------------------------------- shapes


def _resolve_shape(func: str, shape, size: int) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)) or getattr(shape, "ndim", None) == 0:
        shape = (shape,)
    shape = [int(operator.index(d)) for d in shape]
    unknown = [i for i, d in enumerate(shape) if d == -1]
    if len(unknown) > 1:
        raise ShapeError(f"{func}: only one dimension can be -1, got {tuple(shape)}{_where()}")
    if unknown:
        known = _prod(d for d in shape if d != -1)
        if known == 0 or size % known:
            raise ShapeError(f"{func}: cannot reshape {size} elements into {tuple(shape)}{_where()}")
        shape[unknown[0]] = size // known
    return tuple(shape)


def reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    """``np.reshape`` (-1 allowed once): a view when NumPy's would be one.
    ``order='F'`` reads and writes in Fortran order; ``copy=True`` copies,
    ``copy=False`` refuses to (as NumPy, when a copy would be needed)."""
    order = _check_order("reshape", order, "CFA")
    if order == "A":
        flags = getattr(a, "flags", None)
        order = "F" if flags is not None and flags.f_contiguous and not flags.c_contiguous else "C"
    shape = newshape if shape is None else shape
    size = _prod(int(d) for d in _shape(a))
    shape = _resolve_shape("reshape", shape, size)
    if copy:
        a = asarray_copy(a)
    if order == "F":
        result = transpose(_reshape_c(transpose(a), tuple(reversed(shape))))
    else:
        result = _reshape_c(a, shape)
    if copy is False and _is_braze_array(result) and result is not a and getattr(result, "_view", True) is None:
        raise ShapeError(f"reshape: a copy is needed to reshape {a.aval} into {shape} (copy=False){_where()}")
    return result


def _reshape_c(a, shape):
    if shape == _shape(a):
        return a
    return bind("reshape", a, shape=shape)


def view(a):
    """``a.view()``: a new view of the same data."""
    return bind("view", a)


def read_only(a):
    """``a`` as a read-only view (NumPy's ``imag`` of a real array, ...)."""
    return bind("view", a, readonly=True)


def ravel(a, order="C"):
    """``np.ravel``: a view exactly where NumPy's is one (C order: the array is
    C-contiguous; F: Fortran-contiguous; K: dense in memory with positive
    strides), else a copy in that order."""
    order = _check_order("ravel", order)
    strides = _element_strides(a)
    if strides is None or _ndim(a) < 1:  # (layout not modelled: a reshape, which knows it is uncertain)
        return reshape(a, (-1,), order="F" if order == "F" else "C")
    shape = _shape(a)
    c = is_c_contiguous(shape, strides)
    f = is_f_contiguous(shape, strides)
    if order == "A":
        order = "F" if f and not c else "C"
    if order == "K":
        perm = _memory_order(a)
        dense = builtins.all(s >= 0 for s, d in zip(strides, shape) if d != 1) and \
            is_c_contiguous(tuple(shape[i] for i in perm), tuple(strides[i] for i in perm))
        ordered = transpose(a, perm) if perm != tuple(range(len(shape))) else a
        return reshape(ordered if dense else copy(ordered, order="C"), (-1,))
    if order == "C":
        return reshape(a if c else copy(a, order="C"), (-1,))
    return reshape(a if f else copy(a, order="F"), (-1,), order="F")


def _element_strides(a):
    """Strides in elements: a NumPy array's own, a tracer's modelled ones, or
    None where the layout is not known (a gradient tape's watched array)."""
    if is_ndarray(a):
        return tuple(st // a.itemsize for st in a.strides) if a.itemsize else (0,) * a.ndim
    if hasattr(a, "shape"):
        return getattr(a, "_strides", None)
    return layout.c_strides(np.shape(a))


def _memory_order(a):
    """The axes from slowest to fastest in memory (order 'K': memory order, with
    negative strides read forwards); C order where the strides are unknown."""
    strides = _element_strides(a)
    shape = _shape(a)
    if strides is None or len(shape) < 2:
        return tuple(range(len(shape)))
    return tuple(sorted(range(len(shape)), key=lambda i: (-(0 if shape[i] == 1 else builtins.abs(strides[i])), i)))


def transpose(a, axes=None):
    """``np.transpose``; axes default to reversed."""
    nd = _ndim(a)
    if axes is None:
        perm = tuple(range(nd))[::-1]
    else:
        if isinstance(axes, (int, np.integer)):
            axes = (axes,)
        perm = tuple(normalize_axis("transpose", ax, nd, _shape(a)) for ax in axes)
        if sorted(perm) != list(range(nd)):
            raise ShapeError(f"transpose: axes {tuple(axes)} don't match an array of {nd} dimensions{_where()}")
    if perm == tuple(range(nd)):
        return a
    return bind("transpose", a, perm=perm)


permute_dims = transpose


def swapaxes(a, axis1, axis2):
    nd = _ndim(a)
    perm = list(range(nd))
    i = normalize_axis("swapaxes", axis1, nd, _shape(a))
    j = normalize_axis("swapaxes", axis2, nd, _shape(a))
    perm[i], perm[j] = perm[j], perm[i]
    return transpose(a, perm)


def moveaxis(a, source, destination):
    nd = _ndim(a)
    src = [normalize_axis("moveaxis", s, nd) for s in (source if isinstance(source, (list, tuple)) else [source])]
    dst = [normalize_axis("moveaxis", d, nd) for d in (destination if isinstance(destination, (list, tuple)) else [destination])]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ShapeError(f"moveaxis: repeated axis in source {source} or destination {destination}{_where()}")
    if len(src) != len(dst):
        raise ShapeError(f"moveaxis: source {source} and destination {destination} differ in length{_where()}")
    order = [n for n in range(nd) if n not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(a, order)


def broadcast_to(array, shape, subok=False):
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)
    if _shape(array) == shape:
        return array
    return bind("broadcast_to", array, shape=shape)


def broadcast_arrays(*args, subok=False):
    """``np.broadcast_arrays``: arguments already of the broadcast shape come back
    as they are (NumPy scalars as 0-d arrays), the others as broadcast views.
    (NumPy still lets one write through those, with a FutureWarning that it
    will stop; braze's are read-only already.)"""
    args = [asarray(a) for a in args]
    shape = tuple(broadcast_shape(*(_shape(a) for a in args)))
    return tuple(a if _shape(a) == shape else broadcast_to(a, shape) for a in args)


def expand_dims(a, axis):
    axes = axis if isinstance(axis, (list, tuple)) else (axis,)
    nd = _ndim(a) + len(axes)
    axes = normalize_axes("expand_dims", axes, nd)
    it = iter(_shape(a))
    return reshape(a, tuple(1 if i in axes else next(it) for i in range(nd)))


def squeeze(a, axis=None):
    shape = _shape(a)
    if axis is None:
        axes = tuple(i for i, d in enumerate(shape) if d == 1)
    else:
        axes = normalize_axes("squeeze", axis, len(shape), shape)
        for i in axes:
            if shape[i] != 1:
                raise ShapeError(f"squeeze: cannot select axis {i} of shape {shape}: its size is not 1{_where()}")
    return reshape(a, tuple(d for i, d in enumerate(shape) if i not in axes))


def atleast_1d(*arys):
    res = [reshape(a, (1,)) if _ndim(a) == 0 else a for a in arys]
    return res[0] if len(res) == 1 else tuple(res)


def atleast_2d(*arys):
    res = []
    for a in arys:
        nd = _ndim(a)
        res.append(reshape(a, (1, 1)) if nd == 0 else reshape(a, (1,) + _shape(a)) if nd == 1 else a)
    return res[0] if len(res) == 1 else tuple(res)


def atleast_3d(*arys):
    """``np.atleast_3d``: (1, 1, 1), (1, N, 1) and (M, N, 1) for 0-, 1- and 2-d inputs (views)."""
    res = []
    for a in arys:
        nd, shape = _ndim(a), _shape(a)
        new = {0: (1, 1, 1), 1: (1,) + shape + (1,), 2: shape + (1,)}.get(nd)
        res.append(reshape(a, new) if new is not None else a)
    return res[0] if len(res) == 1 else tuple(res)


def concatenate(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    """``np.concatenate``; ``axis=None`` flattens first; ``dtype``/``casting``
    cast the inputs (checked with NumPy's rule), ``out=`` a traced array."""
    if out is not None and dtype is not None:
        raise DTypeError(f"concatenate() only takes `out` or `dtype` as an argument, but both were provided{_where()}")
    # (a list among them, ``[[h[0]], rest]``, is an array NumPy builds from it)
    arrays = [array(a) if isinstance(a, (list, tuple)) else a for a in arrays]
    if dtype is not None or out is not None:
        target = _as_dtype("concatenate", dtype) if dtype is not None else _dtype(out)
        for a in arrays:
            _check_cast("concatenate", _dtype(a), target, casting)
        arrays = [astype(a, target) if _dtype(a) != target else a for a in arrays]
        return _into_out("concatenate", concatenate(arrays, axis), out)
    if not arrays:
        raise ShapeError(f"concatenate: needs at least one array{_where()}")
    if axis is None:
        arrays, axis = [ravel(a) for a in arrays], 0
    nd = _ndim(arrays[0])
    if nd == 0:
        raise ShapeError(f"concatenate: zero-dimensional arrays cannot be concatenated{_where()}; use np.stack")
    axis = normalize_axis("concatenate", axis, nd)
    result = arrays[0] if len(arrays) == 1 else bind("concatenate", *arrays, axis=axis)
    if len(arrays) == 1:
        result = asarray_copy(result)
    return result


def stack(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    arrays = list(arrays)
    if not arrays:
        raise ShapeError(f"stack: needs at least one array{_where()}")
    shapes = {_shape(a) for a in arrays}
    if len(shapes) != 1:
        raise ShapeError(f"stack: all input arrays must have the same shape, got {sorted(shapes)}{_where()}")
    axis = normalize_axis("stack", axis, _ndim(arrays[0]) + 1)
    return concatenate([expand_dims(a, axis) for a in arrays], axis, out, dtype=dtype, casting=casting)


def hstack(tup, *, dtype=None, casting="same_kind"):
    arrs = [atleast_1d(a) for a in tup]
    return concatenate(arrs, 0 if _ndim(arrs[0]) == 1 else 1, dtype=dtype, casting=casting)


def vstack(tup, *, dtype=None, casting="same_kind"):
    return concatenate([atleast_2d(a) for a in tup], 0, dtype=dtype, casting=casting)


class _SectionsByZero(ShapeError, ZeroDivisionError):
    """``np.split(x, 0)``: a ShapeError that is NumPy's ZeroDivisionError too."""


def _split(func: str, ary, indices_or_sections, axis, even: bool):
    shape = _shape(ary)
    axis = normalize_axis(func, axis, len(shape), shape)
    n = shape[axis]
    if isinstance(indices_or_sections, (int, np.integer)):
        sections = int(indices_or_sections)
        if sections <= 0:
            # (np.split(x, 0) is NumPy's ZeroDivisionError, from its n % sections; array_split's a ValueError)
            error = _SectionsByZero if even and sections == 0 else ShapeError
            raise error(f"{func}: number of sections must be larger than 0{_where()}")
        if even and n % sections:
            raise ShapeError(
                f"{func}: array split does not result in an equal division: axis {axis} of "
                f"shape {shape} into {sections}{_where()}; use np.array_split"
            )
        each, extra = builtins.divmod(n, sections)
        sizes = [each + 1] * extra + [each] * (sections - extra)
        bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    else:
        bounds = [0] + [int(i) for i in indices_or_sections] + [n]
    pieces = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        key = (slice(None),) * axis + (slice(lo, hi),)
        pieces.append(_index(ary, key))
    return pieces


def diagonal(a, offset=0, axis1=0, axis2=1):
    """``np.diagonal``: a read-only view, as NumPy's."""
    nd = _ndim(a)
    if nd < 2:
        raise ShapeError(f"diagonal: the array must have at least two dimensions, got {nd}{_where()}")
    a1 = normalize_axis("diagonal", axis1, nd, _shape(a))
    a2 = normalize_axis("diagonal", axis2, nd, _shape(a))
    if a1 == a2:
        raise ShapeError(f"diagonal: axis1 and axis2 cannot be the same{_where()}")
    return bind("diagonal", a, offset=int(offset), axis1=a1, axis2=a2)


def hsplit(ary, indices_or_sections):
    if _ndim(ary) == 0:
        raise ShapeError(f"hsplit only works on arrays of 1 or more dimensions{_where()}")
    return split(ary, indices_or_sections, 1 if _ndim(ary) > 1 else 0)


def vsplit(ary, indices_or_sections):
    if _ndim(ary) < 2:
        raise ShapeError(f"vsplit only works on arrays of 2 or more dimensions{_where()}")
    return split(ary, indices_or_sections, 0)


def dsplit(ary, indices_or_sections):
    if _ndim(ary) < 3:
        raise ShapeError(f"dsplit only works on arrays of 3 or more dimensions{_where()}")
    return split(ary, indices_or_sections, 2)


def split(ary, indices_or_sections, axis=0):
    return _split("split", ary, indices_or_sections, axis, even=True)


def array_split(ary, indices_or_sections, axis=0):
    return _split("array_split", ary, indices_or_sections, axis, even=False)


# ---------------------------------------------------------------- indexing


def take(a, indices, axis=None, out=None, mode="raise"):
    """``np.take``; ``mode`` 'raise', 'wrap' (indices modulo the axis) or 'clip'."""
    if mode not in ("raise", "wrap", "clip"):
        raise ShapeError(f"take: mode must be 'raise', 'wrap' or 'clip', got {mode!r}{_where()}")
    if axis is None:
        a, axis = ravel(a), 0
    axis = normalize_axis("take", axis, _ndim(a), _shape(a))
    n = _shape(a)[axis]
    # booleans are positions 0 and 1 to np.take (cast to intp), not a mask as in a[m]
    if _is_braze_array(indices):
        indices = astype(indices, np.intp) if _dtype(indices) == np.bool_ else indices
    elif np.asarray(indices).dtype == np.bool_:
        indices = np.asarray(indices).astype(np.intp)
    if mode != "raise":
        if n == 0:
            raise ShapeError(f"take: cannot do a non-empty take from an empty axis{_where()}")
        indices = asarray(indices) if not _is_braze_array(indices) else indices
        indices = remainder(indices, n) if mode == "wrap" else clip(indices, 0, n - 1)  # noqa: F821
    return _into_out("take", _new(_index(a, (slice(None),) * axis + (indices,))), out)


def take_along_axis(arr, indices, axis=-1):
    if axis is None:
        arr, axis = ravel(arr), 0
    axis = normalize_axis("take_along_axis", axis, _ndim(arr), _shape(arr))
    return bind("take_along_axis", arr, indices, axis=axis)


def tril(m, k=0):
    """``np.tril`` (a 1-d ``m`` is a row repeated into a square, as NumPy does)."""
    mask = np.tri(*_shape(m)[-2:], k=k, dtype=bool)
    return where(mask, m, zeros(1, _dtype(m)))


def triu(m, k=0):
    """``np.triu`` (a 1-d ``m`` is a row repeated into a square, as NumPy does)."""
    mask = np.tri(*_shape(m)[-2:], k=k - 1, dtype=bool)
    return where(mask, zeros(1, _dtype(m)), m)


# ---------------------------------------------------------------- contractions


def matmul(x1, x2, /, out=None, *, casting="same_kind", order="K", dtype=None, subok=True, signature=None,
           axes=None, axis=None):
    """``np.matmul`` / ``@`` (a generalized ufunc: ``dtype``, ``casting``, ``out``)."""
    _reject("matmul", signature=signature, axes=axes, axis=axis)
    _check_order("matmul", order)
    if dtype is not None:
        dtype = _as_dtype("matmul", dtype)
        for x in (x1, x2):
            _check_cast("matmul", _dtype(x), dtype, casting)
        x1, x2 = astype(x1, dtype), astype(x2, dtype)
    result = bind("matmul", x1, x2)
    if out is not None:
        _check_cast("matmul", _dtype(result), _dtype(out[0] if isinstance(out, tuple) else out), casting)
    return _into_out("matmul", result, out)


UFUNCS["matmul"] = matmul


def dot(a, b, out=None):
    """``np.dot``: matmul for 1-D and 2-D, multiply for scalars, a contraction of a's
    last axis with b's second-to-last for N-D."""
    na, nb = _ndim(a), _ndim(b)
    if na == 0 or nb == 0:
        result = multiply(a, b)  # noqa: F821
    elif na <= 2 and nb <= 2:
        result = matmul(a, b)
    else:
        result = tensordot(a, b, axes=([na - 1], [nb - 2 if nb >= 2 else 0]))
    if out is not None and _dtype(out) != _dtype(result):
        raise DTypeError(f"dot: out= must have the dtype of the result, {_dtype(result)}{_where()}")
    return _into_out("dot", result, out)


def vdot(a, b):
    """``np.vdot``: the dot product of the flattened arrays (equal sizes)."""
    if size(a) != size(b):
        raise ShapeError(f"vdot: vectors of sizes {size(a)} and {size(b)} are not aligned{_where()}")
    return _contract(ravel(a), ravel(b), ([0], [0]))  # (a dot: int8 wraps, bools are any-of-ands, as NumPy's)


def inner(a, b):
    if _ndim(a) == 0 or _ndim(b) == 0:
        return multiply(a, b)  # noqa: F821
    return _contract(a, b, ([-1], [-1]))  # (a NumPy scalar for two vectors, as NumPy's inner)


def outer(a, b, out=None):
    """``np.outer`` of the flattened inputs."""
    _reject("outer", out=out)
    return multiply(reshape(a, (-1, 1)), reshape(b, (1, -1)))  # noqa: F821


def tensordot(a, b, axes=2):
    result = _contract(a, b, axes)
    return result if _ndim(result) else array(result)  # (NumPy's tensordot of every axis: a 0-d array)


def _contract(a, b, axes):
    """The einsum of ``tensordot(a, b, axes)``; a NumPy scalar when no axis is left."""
    na, nb = _ndim(a), _ndim(b)
    if isinstance(axes, (int, np.integer)):
        ax_a, ax_b = list(range(na - axes, na)), list(range(axes))
    else:
        ax_a, ax_b = axes
        ax_a = [ax_a] if isinstance(ax_a, int) else list(ax_a)
        ax_b = [ax_b] if isinstance(ax_b, int) else list(ax_b)
    ax_a = [normalize_axis("tensordot", x, na) for x in ax_a]
    ax_b = [normalize_axis("tensordot", x, nb) for x in ax_b]
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    sa = [next(letters) for _ in range(na)]
    sb = [next(letters) for _ in range(nb)]
    for i, j in zip(ax_a, ax_b):
        sb[j] = sa[i]
    out = [c for i, c in enumerate(sa) if i not in ax_a] + [c for j, c in enumerate(sb) if j not in ax_b]
    return bind("einsum", a, b, subscripts=f"{''.join(sa)},{''.join(sb)}->{''.join(out)}")


def einsum(subscripts, *operands, out=None, optimize=False, dtype=None, order="K", casting="safe", **kwargs):
    """``np.einsum`` with explicit or implicit output, no ellipsis; ``optimize``
    only chooses NumPy's contraction order (braze picks its own)."""
    if kwargs:
        raise DTypeError(f"einsum: unexpected keyword argument(s) {sorted(kwargs)}{_where()}")
    if not operands:
        raise ShapeError(f"einsum: must provide at least an operand and a subscripts list{_where()}")
    _check_order("einsum", order)
    if dtype is not None:
        dtype = _as_dtype("einsum", dtype)
        for x in operands:
            _check_cast("einsum", _dtype(x), dtype, casting)
        operands = tuple(astype(x, dtype) for x in operands)
    result = _einsum(subscripts, *operands)
    if optimize is not False and len(operands) > 1 and _ndim(result) == 0:
        result = asarray(result)  # (NumPy's optimized path contracts into an array: a 0-d one, not a scalar)
    return _into_out("einsum", result, out)


def _einsum(subscripts, *operands):
    if not isinstance(subscripts, str):
        raise _unsupported("einsum", "in interleaved (operand, sublist) form", "pass a subscripts string")
    spec = subscripts.replace(" ", "")
    if "." in spec:
        raise _unsupported("einsum", "'...' (ellipsis)", "name every axis with a letter")
    if "->" not in spec:
        letters = spec.replace(",", "")
        spec += "->" + "".join(c for c in sorted(set(letters)) if letters.count(c) == 1)
    ins, result = spec.split("->")[0].split(","), spec.split("->")[1]
    if len(ins) != len(operands):
        raise ShapeError(f"einsum: {subscripts!r} names {len(ins)} operands, got {len(operands)}{_where()}")
    operands = list(operands)
    for k, letters in enumerate(ins):  # a repeated letter in one operand ('ii'): its diagonal, a view
        letters = list(letters)
        while len(set(letters)) < len(letters) and len(letters) == _ndim(operands[k]):
            c = next(c for c in letters if letters.count(c) > 1)
            p = letters.index(c)
            q = letters.index(c, p + 1)
            if _shape(operands[k])[p] != _shape(operands[k])[q]:
                raise ShapeError(f"einsum: dimensions in operand {k} for collapsing index {c!r} don't match "
                                 f"({_shape(operands[k])[p]} != {_shape(operands[k])[q]}){_where()}")
            operands[k] = diagonal(operands[k], 0, p, q)  # (the diagonal's axis comes last)
            letters = [x for i, x in enumerate(letters) if i not in (p, q)] + [c]
        ins[k] = "".join(letters)
    spec = ",".join(ins) + "->" + result
    if len(ins) == 1 and len(set(ins[0])) == len(ins[0]) == len(result) == _ndim(operands[0]) \
            and set(result) == set(ins[0]):
        return transpose(operands[0], tuple(ins[0].index(c) for c in result))  # NumPy's einsum: a view
    return bind("einsum", *operands, subscripts=spec)


# ---------------------------------------------------------------- arrays from sequences


def _build(obj, inner: bool = False):
    """An array built with braze ops from a (nested) list of traced/watched
    arrays, NumPy arrays and scalars: ``np.array([x, y])`` is a stack."""
    if isinstance(obj, (list, tuple)):
        parts = [_build(o, True) for o in obj]
        if not parts:
            return np.asarray(obj)
        shapes = {_shape(p) for p in parts}
        if len(shapes) != 1:
            raise ShapeError(
                f"array: setting an array element with a sequence: the elements have shapes "
                f"{sorted(shapes)}, an inhomogeneous shape{_where()}; NumPy needs equal shapes at each level")
        return stack(parts)
    if _is_braze_array(obj):
        return obj
    # array creation from Python scalars is strong (np.array([x, 2.5]) is float64); a number
    # is a NumPy scalar, a literal of the graph (as a 0-d array it was a captured array, one
    # per call: ``np.max([0.0, a, b])`` in a loop read another array each iteration)
    value = np.asarray(obj)
    return value[()] if inner and value.ndim == 0 and not is_ndarray(obj) else value


def array(object, dtype=None, *, copy=True, order="K", subok=False, ndmin=0, like=None):  # noqa: A002
    """``np.array`` of traced values (or lists of them), built with braze ops.
    ``copy``: True always copies, None copies when needed, False never (and
    raises when a new array must be built), as in NumPy 2."""
    if like is not None:
        raise _unsupported("array", "like=", "leave it out")
    order = _check_order("array", order)
    result = _build(object)
    new = result is not object  # built from a list, or a NumPy value
    if getattr(result, "_is_scalar", lambda: False)():
        result, new = bind("view", result), True  # np.array of a NumPy scalar is a new 0-d array
    if dtype is not None and _as_dtype("array", dtype) != _dtype(result):
        result, new = astype(result, dtype), True
    if not new and _is_braze_array(result) and (copy or not _laid_out(result, order)):
        result, new = asarray_copy(result), True  # (copy=None: only when the order asks for other memory)
    if copy is False and new:
        raise ShapeError(f"array: unable to avoid a copy (copy=False) while building the array{_where()}; "
                         "pass copy=None to copy only when needed")
    if new and _is_braze_array(result):
        result = copy_as(result, order)
    if _ndim(result) < ndmin:
        result = reshape(result, (1,) * (ndmin - _ndim(result)) + _shape(result))
    return result


def asarray(a, dtype=None, order=None, *, device=None, copy=None, like=None):
    """``np.asarray``: a traced array is returned as it is (no copy)."""
    _check_device("asarray", device)
    return array(a, dtype, copy=copy, order=order or "K", like=like)


def asanyarray(a, dtype=None, order=None, *, device=None, copy=None, like=None):
    return asarray(a, dtype, order, device=device, copy=copy, like=like)


def require(a, dtype=None, requirements=None, *, like=None):
    """``np.require``: ``a`` itself when it meets the requirements (C, F, A,
    W, O; E asks for an ndarray, which a traced array is), else a copy."""
    names = {"C": "C", "C_CONTIGUOUS": "C", "CONTIGUOUS": "C", "F": "F", "F_CONTIGUOUS": "F", "FORTRAN": "F",
             "A": "A", "ALIGNED": "A", "W": "W", "WRITEABLE": "W", "O": "O", "OWNDATA": "O", "E": "E",
             "ENSUREARRAY": "E"}
    if isinstance(requirements, str):
        requirements = [requirements]
    wanted = set()
    for r in requirements or ():
        if str(r).upper() not in names:
            raise ShapeError(f"require: unknown requirement {r!r}{_where()}")
        wanted.add(names[str(r).upper()])
    if "C" in wanted and "F" in wanted:
        raise ShapeError(f"require: cannot specify both 'C' and 'F' order{_where()}")
    order = "C" if "C" in wanted else "F" if "F" in wanted else "A"
    result = array(a, dtype, copy=None, order="K", like=like)
    if not _laid_out(result, order if order != "A" else "K") or "O" in wanted and result is a:
        result = copy(result, order=order if order != "A" else "K")
    return result


def real_if_close(a, tol=100):
    """``np.real_if_close`` of a real array: the array itself (braze traces no complex values)."""
    return a


def unstack(x, /, *, axis=0):
    """``np.unstack``: views along ``axis``, as NumPy's."""
    axis = normalize_axis("unstack", axis, _ndim(x), _shape(x))
    return tuple(_index(x, (slice(None),) * axis + (i,)) for i in range(_shape(x)[axis]))


def ascontiguousarray(a, dtype=None, *, like=None):
    result = array(a, dtype, copy=None, ndmin=1, like=like)
    flags = getattr(result, "flags", None)
    if flags is not None and not flags.c_contiguous:
        result = copy(result, order="C")
    return result


def asfortranarray(a, dtype=None, *, like=None):
    result = array(a, dtype, copy=None, ndmin=1, like=like)
    flags = getattr(result, "flags", None)
    if flags is not None and not flags.f_contiguous:
        result = copy(result, order="F")
    return result


def frombuffer(buffer, dtype=float, count=-1, offset=0, *, like=None):
    """``np.frombuffer`` of a traced array: its elements, flattened (a view)."""
    item = _dtype(buffer).itemsize
    if _as_dtype("frombuffer", dtype) != _dtype(buffer):
        raise _unsupported("frombuffer", f"dtype={np.dtype(dtype)} of a {_dtype(buffer)} array",
                           "reinterpreting bytes as another dtype is not traced; use .astype() to convert values")
    if offset % item:
        raise ShapeError(f"frombuffer: offset {offset} is not a multiple of the element size {item}{_where()}")
    flat = ravel(buffer)
    start = offset // item
    stop = _shape(flat)[0] if count < 0 else start + count
    if stop > _shape(flat)[0] or start > _shape(flat)[0]:
        raise ShapeError(f"frombuffer: buffer is smaller than requested size{_where()}")
    return _index(flat, slice(start, stop))


def fromiter(iter, dtype, count=-1, *, like=None):  # noqa: A002
    """``np.fromiter`` of a traced 1-d array: a copy with ``dtype``."""
    if _ndim(iter) != 1:
        raise ShapeError(f"fromiter: setting an array element with a sequence: the items of a "
                         f"{_ndim(iter)}-d array are arrays{_where()}")
    return astype(_index(iter, slice(0, None if count < 0 else count)), dtype)


def fromstring(string, dtype=float, count=-1, *, sep="", like=None):
    raise _unsupported("fromstring", "of a traced array", "it parses text: use np.asarray(x).astype(dtype)")


def append(arr, values, axis=None):
    """``np.append``: a concatenation (flattened when ``axis`` is None)."""
    if axis is None:
        arr = ravel(asarray(arr)) if _ndim(arr) != 1 else arr
        values = ravel(asarray(values))
        return concatenate((arr, values), axis=0)
    return concatenate((arr, values), axis=axis)


# np.convolve with a longer kernel than this runs as NumPy's (a graph break).
CONVOLVE_TAPS = 64


def convolve(a, v, mode="full"):
    """``np.convolve`` with a kernel of at most CONVOLVE_TAPS taps: each output
    the sum of the taps' products with windows of the longer operand shifted
    one element apart (``a[j:j + n] * v[m - 1 - j]``), which fusion reads by
    offset in one kernel (a moving average, a FIR filter). NumPy's dtype,
    length and errors for every mode; the sum's order is braze's, as for any
    reduction."""
    if mode not in ("full", "same", "valid"):
        raise ShapeError(f"mode must be one of 'valid', 'same', or 'full' (got {mode!r}){_where()}")
    a, v = asarray(a), asarray(v)
    a = reshape(a, (1,)) if _ndim(a) == 0 else a
    v = reshape(v, (1,)) if _ndim(v) == 0 else v
    if _ndim(a) > 1 or _ndim(v) > 1:
        raise ShapeError(f"convolve: object too deep for desired array{_where()}")
    if not _shape(a)[0]:
        raise ShapeError(f"convolve: a cannot be empty{_where()}")
    if not _shape(v)[0]:
        raise ShapeError(f"convolve: v cannot be empty{_where()}")
    if _shape(v)[0] > _shape(a)[0]:
        a, v = v, a
    n, m = _shape(a)[0], _shape(v)[0]
    if m > CONVOLVE_TAPS:
        raise _unsupported("convolve", "v", f"kernels of at most {CONVOLVE_TAPS} taps are traced; "
                           "a longer one runs as NumPy's convolve (a graph break)")
    if mode != "valid" and m > 1:
        pad = zeros(m - 1, dtype=_dtype(a))
        a = concatenate((pad, a, pad))
    length = _shape(a)[0] - m + 1
    total = None
    for j in range(m):
        term = _index(a, (slice(j, j + length),)) * _index(v, (m - 1 - j,))
        total = term if total is None else total + term
    if mode == "same":
        start = (m - 1) // 2
        total = _index(total, (slice(start, start + n),))
    return total


def insert(arr, obj, values, axis=None):
    """``np.insert`` at one static index (``np.insert(x, 0, 0.0)`` before a
    cumsum): the values, cast to the array's dtype as NumPy casts them,
    concatenated between the array's two parts. Other indices (a sequence, a
    slice, a traced value) are a graph break."""
    if isinstance(obj, (bool, np.bool_)) or not isinstance(obj, (int, np.integer)):
        raise _unsupported("insert", "obj", "one integer index is traced; other indices run as a graph break")
    arr = asarray(arr)
    if axis is None:
        arr = ravel(arr) if _ndim(arr) != 1 else arr
        axis = _ndim(arr) - 1
    shape = _shape(arr)
    axis = normalize_axis("insert", axis, len(shape), shape)
    n, index = shape[axis], int(obj)
    if not -n <= index <= n:
        raise IndexOutOfRangeError(f"insert: index {index} is out of bounds for axis {axis} with size {n}"
                                   f"{_where()}")
    index += n if index < 0 else 0
    values = array(values, dtype=_dtype(arr), copy=None, ndmin=len(shape))
    values = moveaxis(values, 0, axis)  # (NumPy: a scalar index inserts like arr[:, [i], :] = values)
    new = shape[:axis] + (_shape(values)[axis],) + shape[axis + 1:]
    head = (slice(None),) * axis
    parts = (_index(arr, head + (slice(0, index),)), broadcast_to(values, new), _index(arr, head + (slice(index, None),)))
    return concatenate(parts, axis=axis)


class _AxisConcatenator:
    """``np.r_`` / ``np.c_`` for items that include traced arrays: NumPy's rules
    (slices become ``arange``, scalars and 1-D items are promoted to ``ndmin``
    dimensions, the result dtype is ``result_type`` of the items with Python
    scalars weak). String directives (``np.r_['0,2', ...]``) are not supported."""

    def __init__(self, name: str, axis: int, ndmin: int, trans1d: int):
        self.name, self.axis, self.ndmin, self.trans1d = name, axis, ndmin, trans1d

    def __getitem__(self, key):
        items = key if isinstance(key, tuple) else (key,)
        objs, scalars, type_objs = [], [], []
        for item in items:
            if isinstance(item, str):
                raise _unsupported(self.name, f"the directive {item!r}", f"write np.concatenate(...) instead of np.{self.name}[...]")
            if isinstance(item, slice):
                step = 1 if item.step is None else item.step
                if isinstance(step, complex):
                    new = np.linspace(item.start or 0, item.stop, int(builtins.abs(step)))
                else:
                    new = np.arange(item.start or 0, item.stop, step)
                new = np.array(new, ndmin=self.ndmin)
                if self.ndmin > 1 and self.trans1d != -1:
                    new = np.moveaxis(new, -1, self.trans1d)
                objs.append(new)
                type_objs.append(new)
                continue
            if isinstance(item, (bool, int, float, complex, np.generic)) or (
                    _is_braze_array(item) and _ndim(item) == 0):
                scalars.append(len(objs))
                type_objs.append(item)
                new = reshape(asarray(item), (1,) * self.ndmin) if _is_braze_array(item) else np.array(item, ndmin=self.ndmin)
                objs.append(new)
                continue
            new = array(item, copy=False)
            nd = _ndim(new)
            if nd < self.ndmin:
                new = reshape(new, (1,) * (self.ndmin - nd) + _shape(new))
                if self.trans1d != -1:
                    k2, k1 = self.ndmin - nd, self.trans1d
                    if k1 < 0:
                        k1 += k2 + 1
                    axes = list(range(self.ndmin))
                    new = transpose(new, axes[:k1] + axes[k2:] + axes[k1:k2])
            objs.append(new)
            type_objs.append(item)
        final = result_type(*type_objs)
        for k in scalars:
            objs[k] = astype(objs[k], final)
        return concatenate(objs, axis=self.axis)

    def __len__(self):
        return 0


r_ = _AxisConcatenator("r_", 0, 1, -1)
c_ = _AxisConcatenator("c_", -1, 2, 0)


# ---------------------------------------------------------------- constructors


def full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, *, device=None):
    """``np.full_like``: ``a``'s shape, dtype and (``order='K'``) memory order."""
    dtype = _as_dtype("full_like", dtype) if dtype is not None else _dtype(a)
    order = _check_order("full_like", order)
    _check_device("full_like", device)
    same_shape = shape is None
    shape = _shape(a) if shape is None else ((shape,) if isinstance(shape, (int, np.integer)) else tuple(shape))
    return copy_as(full(shape, fill_value, dtype), order, like=a if same_shape else None)


def zeros_like(a, dtype=None, order="K", subok=True, shape=None, *, device=None):
    return full_like(a, 0, dtype, order, subok, shape, device=device)


def ones_like(a, dtype=None, order="K", subok=True, shape=None, *, device=None):
    return full_like(a, 1, dtype, order, subok, shape, device=device)


empty_like = zeros_like


def _check_device(func: str, device) -> None:
    if device not in (None, "cpu"):
        raise _unsupported(func, f"device={device!r}", "leave it out: braze places arrays by target")


def full(shape, fill_value, dtype=None, order="C", *, device=None, like=None):
    """An array of ``shape`` filled with ``fill_value`` (a broadcast, not a buffer)."""
    order = _check_order("full", order, "CF")
    _check_device("full", device)
    if like is not None:
        raise _unsupported("full", "like=", "leave it out")
    if dtype is not None:
        dtype = _as_dtype("full", dtype)
    # (an integer: a NumPy or Python one, or a 0-d integer array, traced or not, as NumPy takes it)
    one = isinstance(shape, (int, np.integer)) or getattr(shape, "ndim", None) == 0
    shape = (operator.index(shape),) if one else tuple(int(d) for d in shape)
    if builtins.any(d < 0 for d in shape):
        raise ShapeError(f"negative dimensions are not allowed: shape {shape}{_where()} (NumPy's ValueError)")
    if is_ndarray(fill_value) or isinstance(fill_value, (bool, int, float, np.generic, list, tuple)):
        value = np.asarray(fill_value, dtype=dtype)
        value = value[()] if value.ndim == 0 else value
    else:  # a traced or watched value
        value = fill_value if dtype is None else astype(fill_value, dtype)
    # A copy, so that eagerly the result is a fresh writable array, as NumPy's.
    result = copy_as(asarray_copy(broadcast_to(value, shape)), order)
    if not shape and getattr(result, "_scalar", False):
        result._scalar = False  # (np.full((), x[0]) is a 0-d array, no scalar)
    return result


def zeros(shape, dtype=float, order="C", *, device=None, like=None):
    return full(shape, 0, dtype, order, device=device, like=like)


def ones(shape, dtype=float, order="C", *, device=None, like=None):
    return full(shape, 1, dtype, order, device=device, like=like)


empty = zeros


# ---------------------------------------------------------------- compositions
# NumPy functions written as NumPy writes them, in ops braze has: each is
# differentiable through those ops' rules, fuses like them, and is checked
# against NumPy (tests/test_numpy_more.py). Calls use ``np.`` names: on traced
# or watched arrays they dispatch to braze, on plain arrays they are NumPy.


def _axes_of(func, axis, ndim, shape):
    if axis is None:
        return tuple(range(ndim))
    return normalize_axes(func, axis, ndim, shape)


def flip(m, axis=None):
    """``np.flip``: a view with negative strides along ``axis``."""
    shape = _shape(m)
    axes = _axes_of("flip", axis, len(shape), shape)
    return _index(m, tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(len(shape))))


def flipud(m):
    if _ndim(m) < 1:
        raise ShapeError(f"flipud: input must be >= 1-d{_where()}")
    return flip(m, 0)


def fliplr(m):
    if _ndim(m) < 2:
        raise ShapeError(f"fliplr: input must be >= 2-d{_where()}")
    return flip(m, 1)


def rot90(m, k=1, axes=(0, 1)):
    axes = tuple(axes)
    nd = _ndim(m)
    if len(axes) != 2:
        raise ShapeError(f"rot90: len(axes) must be 2{_where()}")
    if axes[0] == axes[1] or builtins.abs(axes[0] - axes[1]) == nd:
        raise ShapeError(f"rot90: axes must be different{_where()}")
    if axes[0] >= nd or axes[0] < -nd or axes[1] >= nd or axes[1] < -nd:
        raise ShapeError(f"rot90: axes={axes} out of range for array of ndim={nd}{_where()}")
    k %= 4
    if k == 0:
        return _index(m, (slice(None),))
    if k == 2:
        return flip(flip(m, axes[0]), axes[1])
    order = list(range(nd))
    order[axes[0]], order[axes[1]] = order[axes[1]], order[axes[0]]
    if k == 1:
        return transpose(flip(m, axes[1]), order)
    return flip(transpose(m, order), axes[1])


def roll(a, shift, axis=None):
    if axis is None:
        return reshape(roll(ravel(a), shift, 0), _shape(a))
    shape = _shape(a)
    shifts = (shift,) * (len(axis) if isinstance(axis, tuple) else 1) if np.ndim(shift) == 0 else tuple(shift)
    axes = (axis,) if not isinstance(axis, tuple) else axis
    if len(shifts) != len(axes):
        raise ShapeError(f"roll: 'shift' and 'axis' should be scalars or 1D sequences of the same length{_where()}")
    total = {}
    for s, ax in zip(shifts, axes):
        ax = normalize_axis("roll", ax, len(shape), shape)
        total[ax] = total.get(ax, 0) + int(s)
    out = a
    for ax, s in total.items():
        n = shape[ax]
        if n == 0 or s % n == 0:
            continue
        s %= n
        head = (slice(None),) * ax
        out = np.concatenate([_index(out, head + (slice(n - s, None),)), _index(out, head + (slice(0, n - s),))],
                             axis=ax)
    return out if out is not a else array(a, copy=True)


def diff(a, n=1, axis=-1, prepend=_NoValue, append=_NoValue):
    if n == 0:
        return a
    if n < 0:
        raise ShapeError(f"diff: order must be non-negative but got {n!r}{_where()}")
    shape = _shape(a)
    if not shape:
        raise ShapeError(f"diff requires input that is at least one dimensional{_where()}")
    axis = normalize_axis("diff", axis, len(shape), shape)
    parts = []
    for value, where_ in ((prepend, "before"), (a, None), (append, "after")):
        if value is _NoValue:
            continue
        if where_ is not None and np.ndim(value) == 0:
            value = np.broadcast_to(value, shape[:axis] + (1,) + shape[axis + 1:])
        parts.append(value)
    if len(parts) > 1:
        a = np.concatenate(parts, axis)
    head = (slice(None),) * axis
    op = np.not_equal if _dtype(a) == np.bool_ else np.subtract
    for _ in range(n):
        a = op(_index(a, head + (slice(1, None),)), _index(a, head + (slice(None, -1),)))
    return a


def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    _reject("trace", out=out)
    return np.sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


def diag(v, k=0):
    shape = _shape(v)
    if len(shape) == 2:
        return diagonal(v, k)
    if len(shape) != 1:
        raise ShapeError(f"diag: input must be 1- or 2-d{_where()}")
    n = shape[0] + builtins.abs(k)
    mask = np.eye(n, k=k, dtype=bool)
    padded = np.concatenate([v, np.zeros(builtins.abs(k), _dtype(v))]) if k else v
    along = _index(padded, (slice(None), None)) if k >= 0 else _index(padded, (None, slice(None)))
    return np.where(mask, along, np.zeros((), _dtype(v)))


def diagflat(v, k=0):
    return diag(ravel(v), k)


def repeat(a, repeats, axis=None):
    if axis is None:
        a, axis = ravel(a), 0
    shape = _shape(a)
    axis = normalize_axis("repeat", axis, len(shape), shape)
    if np.ndim(repeats) == 0:
        r = int(repeats)
        if r < 0:
            raise ShapeError(f"repeat: negative dimensions are not allowed{_where()}")
        wide = broadcast_to(expand_dims(a, axis + 1), shape[:axis + 1] + (r,) + shape[axis + 1:])
        return _new(reshape(wide, shape[:axis] + (shape[axis] * r,) + shape[axis + 1:]))
    index = np.repeat(np.arange(shape[axis]), np.asarray(repeats))  # static counts: a gather
    return take(a, index, axis=axis)


def tile(A, reps):
    reps = (int(reps),) if np.ndim(reps) == 0 else tuple(int(r) for r in reps)
    if builtins.any(r < 0 for r in reps):
        raise ShapeError(f"tile: negative dimensions are not allowed, got reps {reps}{_where()}; "
                         "use reps >= 0 (0 gives an empty axis)")
    shape = _shape(A)
    d = len(reps)
    if builtins.all(r == 1 for r in reps) and d <= len(shape):
        return array(A, copy=True, ndmin=d)
    nd = builtins.max(d, len(shape))
    shape = (1,) * (nd - len(shape)) + shape
    reps = (1,) * (nd - d) + reps
    a = reshape(A, tuple(x for s in shape for x in (1, s)))
    a = broadcast_to(a, tuple(x for r, s in zip(reps, shape) for x in (r, s)))
    return reshape(a, tuple(r * s for r, s in zip(reps, shape)))


def _pad_widths(pad_width, ndim):
    if hasattr(pad_width, "shape") and not is_ndarray(pad_width):
        raise UnsupportedOpError(f"numpy.pad: traced pad widths are not supported{_where()}; pass Python ints")
    w = np.broadcast_to(np.asarray(pad_width, dtype=np.int64).reshape(-1, 2) if np.ndim(pad_width) else
                        np.asarray([[pad_width, pad_width]], dtype=np.int64), (ndim, 2))
    if (w < 0).any():
        raise ShapeError(f"pad: index can't contain negative values{_where()}")
    return [tuple(int(x) for x in row) for row in w]


def _pad_source(p: int, n: int, mode: str) -> int:
    """The index along an axis of length ``n`` that padded position ``p`` reads."""
    if mode == "edge":
        return builtins.min(builtins.max(p, 0), n - 1)
    if mode == "wrap":
        return p % n
    if mode == "reflect":
        if n == 1:
            return 0
        r = p % (2 * (n - 1))
        return r if r < n else 2 * (n - 1) - r
    r = p % (2 * n)  # symmetric
    return r if r < n else 2 * n - 1 - r


_new_array = array


def pad(array, pad_width, mode="constant", **kwargs):
    """``np.pad`` for modes constant, edge, reflect, symmetric and wrap: per
    axis, the original between two blocks (a constant, or a gather of the
    positions each mode reads)."""
    if mode not in ("constant", "edge", "reflect", "symmetric", "wrap"):
        raise UnsupportedOpError(f"numpy.pad: mode={mode!r} is not traced{_where()}; constant, edge, reflect, "
                                 "symmetric and wrap are")
    allowed = {"constant": {"constant_values"}, "reflect": {"reflect_type"}, "symmetric": {"reflect_type"}}
    if set(kwargs) - allowed.get(mode, set()) or kwargs.get("reflect_type", "even") != "even":
        raise UnsupportedOpError(f"numpy.pad: {sorted(kwargs)} with mode={mode!r} are not traced{_where()}")
    shape = _shape(array)
    widths = _pad_widths(pad_width, len(shape))
    fills = np.broadcast_to(np.asarray(kwargs.get("constant_values", 0)), (len(shape), 2))
    out = array
    for ax, (lo, hi) in enumerate(widths):
        if lo == 0 and hi == 0:
            continue
        cur = _shape(out)
        n = cur[ax]
        if mode != "constant" and n == 0:
            raise ShapeError(f"pad: can't extend empty axis {ax} using modes other than 'constant'{_where()}")
        parts = []
        for width, side in ((lo, 0), (hi, 1)):
            if not width:
                parts.append(None)
            elif mode == "constant":
                fill = np.asarray(fills[ax, side]).astype(_dtype(array))
                parts.append(np.broadcast_to(fill, cur[:ax] + (width,) + cur[ax + 1:]))
            else:
                positions = range(-width, 0) if side == 0 else range(n, n + width)
                index = np.asarray([_pad_source(p, n, mode) for p in positions], dtype=np.intp)
                parts.append(take(out, index, axis=ax))
        out = np.concatenate([p for p in (parts[0], out, parts[1]) if p is not None], axis=ax)
    return out if out is not array else _new_array(array, copy=True)


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """``np.nan_to_num``; ``copy=False`` writes into ``x`` (NumPy's in-place form)."""
    dt = _dtype(x)
    if _ndim(x) == 0:  # NumPy's ``x[()]``: a 0-d array comes back a scalar (and copy=False writes x)
        value = nan_to_num(reshape(x, (1,)), True, nan, posinf, neginf)
        if not copy and hasattr(x, "_assign") and dt.kind in "fc":
            x._assign(reshape(value, ()), "nan_to_num (copy=False)")
        return _index(value, 0)
    if dt.kind not in "fc":
        return array(x, copy=True) if copy else x
    info = np.finfo(dt)
    big = info.max if posinf is None else posinf
    small = info.min if neginf is None else neginf
    cast = lambda v: asarray(v).astype(dt)  # noqa: E731  (NumPy casts the fills to x's dtype)
    out = np.where(np.isnan(x), cast(nan), x)
    out = np.where(np.isinf(out) & (out > 0), cast(big), out)
    out = np.where(np.isinf(out) & (out < 0), cast(small), out)
    if copy or _ndim(x) == 0 or not hasattr(x, "_assign"):  # (NumPy's truth test; a 0-d x comes back new)
        return out
    x._assign(out, "nan_to_num (copy=False)")
    return x


def select(condlist, choicelist, default=0):
    if len(condlist) != len(choicelist):
        raise ShapeError(f"select: list of cases must be same length as list of conditions{_where()}")
    if len(choicelist) == 0:
        raise ShapeError(f"select: select with an empty condition list is not possible{_where()}")
    for i, c in enumerate(condlist):
        if _dtype(c) != np.bool_:
            raise DTypeError(f"select: invalid entry {i} in condlist: should be boolean ndarray{_where()}")
    dtype = np.result_type(*[_dtype(c) if hasattr(c, "dtype") else c for c in choicelist],
                           _dtype(default) if hasattr(default, "dtype") else default)
    out = asarray(default).astype(dtype)
    for cond, choice in zip(condlist[::-1], choicelist[::-1]):
        out = np.where(cond, asarray(choice).astype(dtype), out)
    shape = broadcast_shape(*[_shape(c) for c in condlist], *[_shape(c) for c in choicelist], _shape(default))
    return array(broadcast_to(out, shape), copy=True)


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = moveaxis(a, axisa, -1), moveaxis(b, axisb, -1)
    if _shape(a)[-1] != 3 or _shape(b)[-1] != 3:
        raise UnsupportedOpError(f"numpy.cross: vectors of length {_shape(a)[-1]} and {_shape(b)[-1]} are not "
                                 f"traced{_where()}; 3-vectors are")
    a0, a1, a2 = (_index(a, (Ellipsis, i)) for i in range(3))
    b0, b1, b2 = (_index(b, (Ellipsis, i)) for i in range(3))
    c = np.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)
    return moveaxis(c, -1, axisc)


def kron(a, b):
    sa, sb = _shape(a), _shape(b)
    nd = builtins.max(len(sa), len(sb))
    sa, sb = (1,) * (nd - len(sa)) + sa, (1,) * (nd - len(sb)) + sb
    a = reshape(a, tuple(x for s in sa for x in (s, 1)))
    b = reshape(b, tuple(x for s in sb for x in (1, s)))
    return reshape(a * b, tuple(x * y for x, y in zip(sa, sb)))


def column_stack(tup):
    return np.concatenate([reshape(v, (-1, 1)) if _ndim(v) < 2 else v for v in tup], axis=1)


def rollaxis(a, axis, start=0):
    n = _ndim(a)
    axis = normalize_axis("rollaxis", axis, n, _shape(a))
    if start < 0:
        start += n
    if not 0 <= start < n + 1:
        raise ShapeError(f"rollaxis: 'start' arg requires {-n} <= start < {n + 1}, but {start} was passed in"
                         f"{_where()}")
    if axis < start:
        start -= 1
    if axis == start:
        return _index(a, (Ellipsis,))
    axes = list(range(n))
    axes.remove(axis)
    axes.insert(start, axis)
    return transpose(a, axes)


def sinc(x):
    """NumPy 2's: a zero becomes its dtype's eps (1e-20 underflowed to 0 in float16)."""
    x = np.pi * asarray(x)
    eps = np.finfo(_dtype(x)).eps if _dtype(x).kind == "f" else 1e-20
    y = np.where(x != 0, x, eps)
    return np.sin(y) / y


def real(val):
    return val.real if hasattr(val, "real") and hasattr(val, "shape") else np.asarray(val).real


def imag(val):
    return val.imag if hasattr(val, "imag") and hasattr(val, "shape") else np.asarray(val).imag


def angle(z, deg=False):
    a = np.arctan2(imag(z), real(z))
    return a * (180 / np.pi) if deg else a


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *, device=None):
    num = operator.index(num)
    if num < 0:
        raise ShapeError(f"linspace: number of samples, {num}, must be non-negative{_where()}")
    div = (num - 1) if endpoint else num
    dt = np.result_type(_dtype(start) if hasattr(start, "dtype") else start,
                        _dtype(stop) if hasattr(stop, "dtype") else stop, float(num))
    dtype = dt if dtype is None else np.dtype(dtype)
    delta = np.subtract(stop, start, dtype=dt) if hasattr(stop, "shape") or hasattr(start, "shape") else \
        np.asarray(stop - start, dt)
    nd = _ndim(delta)
    y = np.arange(0, num, dtype=dt).reshape((-1,) + (1,) * nd)
    if div > 0:
        step = delta / div
        # NumPy's two formulas: y / div * delta for all elements if any step is 0 (denormals)
        y = np.where(np.any(step == 0), y / div * delta, y * step)
    else:
        step = np.nan  # (0 or 1 samples with the endpoint: NumPy's undefined step)
        y = y * delta
    y = y + start
    if endpoint and num > 1:
        y = np.concatenate([_index(y, (slice(0, -1),)), np.broadcast_to(stop, (1,) + _shape(y)[1:])], axis=0)
    if axis != 0:
        y = moveaxis(y, 0, axis)
    if np.issubdtype(dtype, np.integer):
        y = np.floor(y)
    y = y.astype(dtype) if _dtype(y) != dtype else y
    return (y, step) if retstep else y


def gradient(f, *varargs, axis=None, edge_order=1):
    shape = _shape(f)
    n = len(shape)
    axes = _axes_of("gradient", axis, n, shape)
    if isinstance(axis, tuple):  # (in the order given: one result and one spacing per axis, as NumPy pairs them)
        axes = tuple(normalize_axis("gradient", a, n, shape) for a in axis)
    if len(varargs) == 0:
        dx = [(1.0, None, True)] * len(axes)
    elif len(varargs) == 1 and np.ndim(varargs[0]) == 0:
        dx = [(varargs[0], None, True)] * len(axes)
    elif len(varargs) == len(axes):
        dx = [_gradient_spacing(v, shape[ax]) for ax, v in zip(axes, varargs)]
    else:
        raise ShapeError(f"gradient: invalid number of arguments{_where()}")
    if edge_order not in (1, 2):
        raise ShapeError(f"gradient: 'edge_order' greater than 2 not supported{_where()}")
    otype = _dtype(f)
    if otype.kind in "iu":  # (NumPy's: bool is not converted, and its subtraction raises)
        f = f.astype(np.float64)
        otype = np.dtype(np.float64)
    outs = []
    for ax, (h, diffs, uniform) in zip(axes, dx):
        if shape[ax] < edge_order + 1:
            raise ShapeError(f"gradient: shape of the array along axis {ax} too small to calculate a numerical "
                             f"gradient, at least (edge_order + 1) elements are required{_where()}")
        head = (slice(None),) * ax
        s = lambda a, b: _index(f, head + (slice(a, b),))  # noqa: E731
        along = (1,) * ax + (-1,) + (1,) * (len(shape) - ax - 1)  # (coefficients broadcast along the axis)

        def pick(even, uneven):
            """NumPy's formula for evenly spaced coordinates (its spacing a scalar) or
            for uneven ones; where traced coordinates decide it, both, selected."""
            if diffs is None:
                return even()
            if isinstance(uniform, (bool, np.bool_)):  # (coordinates known when tracing)
                return even() if uniform else uneven()
            return np.where(uniform, even(), uneven())

        def interior_uneven():
            dx1, dx2 = reshape(diffs[:-1], along), reshape(diffs[1:], along)
            a = -(dx2) / (dx1 * (dx1 + dx2))
            b = (dx2 - dx1) / (dx1 * dx2)
            c = dx1 / (dx2 * (dx1 + dx2))
            return a * s(None, -2) + b * s(1, -1) + c * s(2, None)

        interior = pick(lambda: (s(2, None) - s(None, -2)) / (2.0 * h), interior_uneven)
        if edge_order == 1:  # (the first and last spacing: h itself where the spacing is even)
            first = (s(1, 2) - s(0, 1)) / (h if diffs is None else diffs[0])
            last = (s(-1, None) - s(-2, -1)) / (h if diffs is None else diffs[-1])
        else:
            def first_uneven():
                dx1, dx2 = diffs[0], diffs[1]
                a = -(2.0 * dx1 + dx2) / (dx1 * (dx1 + dx2))
                b = (dx1 + dx2) / (dx1 * dx2)
                c = - dx1 / (dx2 * (dx1 + dx2))
                return a * s(0, 1) + b * s(1, 2) + c * s(2, 3)

            def last_uneven():
                dx1, dx2 = diffs[-2], diffs[-1]
                a = (dx2) / (dx1 * (dx1 + dx2))
                b = - (dx2 + dx1) / (dx1 * dx2)
                c = (2.0 * dx2 + dx1) / (dx2 * (dx1 + dx2))
                return a * s(-3, -2) + b * s(-2, -1) + c * s(-1, None)

            first = pick(lambda: (-1.5 / h) * s(0, 1) + (2.0 / h) * s(1, 2) + (-0.5 / h) * s(2, 3), first_uneven)
            last = pick(lambda: (0.5 / h) * s(-3, -2) + (-2.0 / h) * s(-2, -1) + (1.5 / h) * s(-1, None),
                        last_uneven)
        # (NumPy stores each piece into an array of the input's float dtype)
        outs.append(np.concatenate([first.astype(otype, copy=False), interior.astype(otype, copy=False),
                                    last.astype(otype, copy=False)], axis=ax))
    return outs[0] if len(outs) == 1 else tuple(outs)


def _gradient_spacing(distances, n: int):
    """(spacing, coordinate differences or None, whether they are even) of one
    axis's ``np.gradient`` spacing argument: a scalar, or 1-d coordinates.
    NumPy treats coordinates whose differences are all equal as that scalar
    spacing (another formula, so other roundings): with traced coordinates the
    test is traced too."""
    if np.ndim(distances) == 0:
        return distances, None, True
    if np.ndim(distances) != 1:
        raise ShapeError(f"gradient: distances must be either scalars or 1d{_where()}")
    if _shape(distances)[0] != n:
        raise ShapeError(f"gradient: when 1d, distances must match the length of the corresponding "
                         f"dimension ({_shape(distances)[0]} against {n}){_where()}")
    if _dtype(distances).kind in "iu":  # (NumPy's: no modular arithmetic in the differences)
        distances = distances.astype(np.float64)
    diffs = diff(distances)
    if _shape(diffs)[0] == 0:
        raise ShapeError(f"gradient: at least 2 coordinates are needed along an axis{_where()}")
    h = diffs[0]
    return h, diffs, (diffs == h).all()


def trapezoid(y, x=None, dx=1.0, axis=-1):
    """``np.trapezoid`` (``np.trapz``), as NumPy computes it."""
    nd = _ndim(y)
    if x is None:
        d = dx
    elif _ndim(x) == 1:
        d = diff(x)
        shape = [1] * nd
        shape[axis] = _shape(d)[0]
        d = reshape(d, tuple(shape))
    else:
        d = diff(x, axis=axis)
    slice1, slice2 = [slice(None)] * nd, [slice(None)] * nd
    slice1[axis], slice2[axis] = slice(1, None), slice(None, -1)
    return (d * (_index(y, tuple(slice1)) + _index(y, tuple(slice2))) / 2.0).sum(axis)


trapz = trapezoid


def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *, dtype=None):
    """``np.cov`` without weights, following NumPy's own code (so its rounding)."""
    _reject("cov", fweights=fweights, aweights=aweights)
    if ddof is not None and ddof != int(ddof):
        raise DTypeError(f"cov: ddof must be integer{_where()}")
    if _ndim(m) > 2:
        raise ShapeError(f"cov: m has more than 2 dimensions{_where()}")
    if dtype is None:
        dtype = np.result_type(_dtype(m), np.float64) if y is None else \
            np.result_type(_dtype(m), _dtype(y), np.float64)
    X = array(m, ndmin=2, dtype=dtype)
    if not rowvar and _shape(X)[0] != 1:
        X = X.T
    if _shape(X)[0] == 0:
        return np.zeros((0, 0), dtype)
    if y is not None:
        Y = array(y, copy=None, ndmin=2, dtype=dtype)
        if not rowvar and _shape(Y)[0] != 1:
            Y = Y.T
        X = np.concatenate((X, Y), axis=0)
    if ddof is None:
        ddof = 0 if bias else 1
    avg = np.mean(X, axis=1)
    fact = _shape(X)[1] - ddof
    if fact <= 0:
        fact = 0.0
    X = X - avg[:, None]
    c = np.dot(X, X.T)
    c = (c * np.true_divide(1, fact)).astype(_dtype(c), copy=False)  # (NumPy's c *= ...: in c's dtype)
    return np.squeeze(c)


def corrcoef(x, y=None, rowvar=True, *, dtype=None):
    c = cov(x, y, rowvar, dtype=dtype)
    if _ndim(c) == 0:
        return c / c
    d = diag(c)
    stddev = np.sqrt(d)
    c = c / stddev[:, None]
    c = c / stddev[None, :]
    return np.clip(c, -1, 1)



def _sort_kind(func, kind, order, stable):
    _reject(func, order=order)
    if stable is not None and kind is not None:
        raise ShapeError(f"{func}: `kind` and `stable` parameters can't both be specified{_where()}")
    return "stable" if stable else kind


def argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    """``np.argsort`` with NumPy's algorithm (``kind``), as an extern."""
    kind = _sort_kind("argsort", kind, order, stable)
    if axis is None or (_ndim(a) == 0 and axis in (0, -1)):  # (NumPy's: a 0-d array sorts as one element)
        a, axis = ravel(a), 0
    axis = normalize_axis("argsort", axis, _ndim(a), _shape(a))
    return bind("argsort", a, axis=axis, kind=kind)


def _kth(func, kth, n):
    kths = [kth] if isinstance(kth, (int, np.integer)) else list(np.asarray(kth).ravel())
    out = []
    for k in kths:
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool):
            raise ShapeError(f"{func}: kth must be an integer or a sequence of integers, got {kth!r}{_where()}")
        if not -n <= k < n:
            raise ShapeError(f"{func}: kth(={k}) out of bounds ({n}){_where()}")
        out.append(int(k) % n)
    return tuple(out)


def _selection(op, a, kth, axis, kind, order):
    """``np.partition`` / ``np.argpartition``: NumPy's introselect, as an extern."""
    _reject(op, order=order)
    if axis is None:
        a, axis = ravel(a), 0
    axis = normalize_axis(op, axis, _ndim(a), _shape(a))
    return bind(op, a, kth=_kth(op, kth, _shape(a)[axis]), axis=axis, kind=kind)


def argpartition(a, kth, axis=-1, kind="introselect", order=None):
    return _selection("argpartition", a, kth, axis, kind, order)


def partition(a, kth, axis=-1, kind="introselect", order=None):
    """``np.partition`` (differentiable: its VJP sends each result's cotangent to its element)."""
    return _selection("partition", a, kth, axis, kind, order)


def sort(a, axis=-1, kind=None, order=None, *, stable=None):
    """``np.sort`` (NumPy's own; differentiable as the gather of its argsort)."""
    kind = _sort_kind("sort", kind, order, stable)
    if axis is None:
        a, axis = ravel(a), 0
    axis = normalize_axis("sort", axis, _ndim(a), _shape(a))
    return bind("sort", a, axis=axis, kind=kind)


# ---------------------------------------------------------------- median
# The median along a short axis (a running median's window of shifted slices,
# the per-pixel median of a few images) is a sorting network of minimum and
# maximum: exact (it moves values, never computes one), fused with the values'
# producers, where NumPy partitions each slice in turn (4M windows of 5 values:
# 340 ms). The middle value, or the mean of the middle two, as NumPy's mean
# computes it. A NaN in a slice makes NumPy's median NaN; here minimum and
# maximum pass it on to both their results, so it reaches every position the
# passes settle, the middle included. A longer axis, or the whole of a larger
# array, runs as NumPy's call.
MEDIAN_NETWORK = 9


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """``np.median`` along an axis of at most MEDIAN_NETWORK values, as a sorting network."""
    def refuse(why):
        return UnsupportedOpError(f"numpy.median: {why}{_where()}; runs as NumPy's call")

    if overwrite_input:  # (NumPy reorders the argument: what it leaves there is NumPy's to say)
        raise refuse("overwrite_input=True")
    if isinstance(axis, (tuple, list)) or _dtype(a).kind not in "biuf" or _dtype(a) == np.float16:
        raise refuse("several axes, or a dtype other than bool, integer, float32 or float64")
    shape = _shape(a)
    if axis is None:
        kept = (1,) * len(shape)
        a, axis = ravel(a), 0
    else:
        axis = normalize_axis("median", axis, len(shape), shape)
        kept = shape[:axis] + (1,) + shape[axis + 1:]
    m = _shape(a)[axis]
    if not 1 <= m <= MEDIAN_NETWORK:
        raise refuse(f"a median of {m} values")
    values = [_index(a, (slice(None),) * axis + (i,)) for i in range(m)]
    lo, hi = UFUNCS["minimum"], UFUNCS["maximum"]
    for end in range(m - 1, m // 2 - 1 - (m % 2 == 0), -1):  # bubble passes until the middle (two) settled
        for j in range(end):
            values[j], values[j + 1] = lo(values[j], values[j + 1]), hi(values[j], values[j + 1])
    middle = [values[m // 2]] if m % 2 else [values[m // 2 - 1], values[m // 2]]
    if _dtype(a).kind != "f":  # (NumPy's mean of integers or bools: in float64)
        middle = [astype(v, np.float64) for v in middle]
    result = middle[0] if m % 2 else true_divide(UFUNCS["add"](*middle), 2)
    if keepdims:
        result = reshape(result, kept)  # noqa: F821
    return _into_out("median", result, out, reduction=True)


# ---------------------------------------------------------------- searchsorted
# A search of a short sorted array (bucket edges, a table's breakpoints) is a
# count of comparisons per key, NumPy's order with NaN last: one vectorized
# pass, fused with the keys' producers and consumers, where NumPy's binary
# search branches per key (1e6 random keys in 5 edges: 22 ms). The array is
# checked sorted when traced and guarded so at each call (NumPy's result for
# an unsorted one is its search's own); a longer or unsorted array, or a
# ``sorter``, runs as NumPy's call (a graph break).
SEARCH_UNROLLED = 16


def searchsorted(a, v, side="left", sorter=None):
    """``np.searchsorted``: a count of comparisons for a short sorted ``a``."""
    def refuse(why):
        return UnsupportedOpError(f"numpy.searchsorted: {why}{_where()}; runs as NumPy's call")

    if side not in ("left", "right") or sorter is not None or _ndim(a) != 1:
        raise refuse("a sorter, another side or an array not 1-D")
    m = _shape(a)[0]
    try:
        dt = np.result_type(_dtype(a), _dtype(v) if hasattr(v, "dtype") else np.asarray(v).dtype)
    except (OverflowError, TypeError) as exc:
        raise refuse(str(exc)) from None
    if not 1 <= m <= SEARCH_UNROLLED or dt.kind not in "biuf":
        raise refuse(f"an array of {m} {dt} elements")
    known = _known_value(a)
    if known is None:
        raise refuse("the array's values are not known while tracing")
    table, tracer = known
    table = table.astype(dt)

    def less(x, y):  # NumPy's sort order: NaN after everything
        if dt.kind != "f":
            return UFUNCS["less"](x, y)
        after = UFUNCS["logical_and"](UFUNCS["isnan"](y), UFUNCS["logical_not"](UFUNCS["isnan"](x)))
        return UFUNCS["logical_or"](UFUNCS["less"](x, y), after)

    order = np.isnan(table[:-1]) <= np.isnan(table[1:]) if dt.kind == "f" else np.ones(m - 1, bool)
    if not np.all(order & ~(table[1:] < table[:-1])):
        raise refuse("the array is not sorted")
    keys = asarray(v, dtype=dt)
    edges = astype(a, dt, copy=False)
    counted = None
    for i in range(m):
        hit = less(edges[i], keys) if side == "left" else UFUNCS["logical_not"](less(keys, edges[i]))
        counted = astype(hit, np.intp) if counted is None else UFUNCS["add"](counted, hit)
    if tracer is not None and m > 1:  # (a guard: still sorted at each call)
        edges = astype(tracer, dt, copy=False)
        _guard_none(tracer, [less(edges[i + 1], edges[i]) for i in range(m - 1)], "np.searchsorted's array sorted")
    return counted


def digitize(x, bins, right=False):
    """``np.digitize``: NumPy's definition (a search of the bins, reversed when
    they decrease), with braze's search of a short sorted array."""
    if _dtype(x).kind == "c":
        raise TypeError("x may not be complex")
    known = _known_value(bins) if _ndim(bins) == 1 else None
    if known is None:
        raise UnsupportedOpError(f"numpy.digitize: bins not 1-D or not known while tracing{_where()}; "
                                 "runs as NumPy's call")
    mono = np._core.multiarray._monotonicity(known[0])
    if mono == 0:
        raise UnsupportedOpError(f"numpy.digitize: bins neither increasing nor decreasing{_where()}; runs as "
                                 "NumPy's call (which raises)")
    side = "left" if right else "right"
    if mono == -1:
        if known[1] is not None:  # (all-equal bins are increasing to NumPy: decreasing takes a first > last)
            _guard(known[1], UFUNCS["not_equal"](known[1][0], known[1][-1]), True, "np.digitize's bins decreasing")
        return UFUNCS["subtract"](_shape(bins)[0], searchsorted(bins[::-1], x, side=side))
    return searchsorted(bins, x, side=side)


# A count of a few labels (``np.bincount(labels, minlength=k)``, the weighted
# one too) is one sum per label, all in one pass over the labels fused with
# their producers (NumPy's loop stores to a random bin per element). The
# number of bins is the data's: it is guarded at each call, with the labels'
# sign (NumPy raises for a negative one); more bins run as NumPy's call.
BINCOUNT_UNROLLED = 16
# Past this many bins the count is a scatter-add (np.add.at: NumPy's order of
# additions, bit for bit), not a sum per bin: LLVM stopped vectorizing the pass
# at 7 bins of sums and counts (a group-by mean over 1M rows: 12.8 ms against
# 1.4 ms for 4 bins; np.add.at takes 2.3 ms).
BINCOUNT_SUMS = 4


def bincount(x, /, weights=None, minlength=0):
    """``np.bincount``: a sum per bin for a few bins."""
    def refuse(why):
        return UnsupportedOpError(f"numpy.bincount: {why}{_where()}; runs as NumPy's call")

    if _ndim(x) != 1 or not np.can_cast(_dtype(x), np.intp, "safe") or isinstance(minlength, bool) \
            or not isinstance(minlength, (int, np.integer)) or minlength < 0 \
            or (weights is not None and (_shape(weights) != _shape(x) or _dtype(weights).kind not in "biuf")):
        raise refuse("labels not 1-D integers, weights not of their shape, or another minlength")
    n = _shape(x)[0]
    known = _known_value(x)
    if known is None:
        raise refuse("the labels are not known while tracing")
    labels, tracer = known
    if n and labels.min() < 0:
        raise refuse("a negative label")
    bins = builtins.max(int(labels.max()) + 1 if n else 0, int(minlength))
    if bins > BINCOUNT_UNROLLED:
        raise refuse(f"{bins} bins")
    if n == 0:  # (NumPy's: intp zeros for no labels, weighted or not)
        return zeros(bins, dtype=np.intp)
    x = astype(x, np.intp, copy=False)
    w = None if weights is None else astype(weights, np.float64, copy=False)
    if bins > BINCOUNT_SUMS:
        # (clamped: a label out of range at a later call fails the guard below, traced again, not an index)
        at = UFUNCS["minimum"](UFUNCS["maximum"](x, 0), bins - 1)
        added = broadcast_to(np.intp(1), (n,)) if w is None else w
        result = bind("scatter_add", zeros(bins, dtype=np.intp if w is None else np.float64), added, at, axes=(0,))
    else:
        sums = []
        for k in range(bins):
            hit = UFUNCS["equal"](x, k)
            sums.append(sum(hit, dtype=np.intp) if w is None else sum(where(hit, w, 0.0)))
        result = stack(sums)
    if tracer is not None and n:  # (a guard: the same number of bins, no negative label)
        t = astype(tracer, np.intp, copy=False)
        top = UFUNCS["maximum"](max(t) + 1, int(minlength))
        _guard(tracer, where(min(t) < 0, -1, top), bins, f"np.bincount's number of bins ({bins})")
    return result


def _guard(tracer, value, expected, what: str) -> None:
    """Check at each call that traced ``value`` (of ``tracer``'s trace) is still ``expected``."""
    while not hasattr(value, "_ctx"):  # (watched by a gradient tape: the value it records)
        value = value._value_
    tracer._ctx.guards.append((value._node, np.array(expected, value._node.aval.dtype), f"{what}{_where()}"))


def _guard_none(tracer, flags: list, what: str) -> None:
    """A guard that none of the traced bools ``flags`` holds at a call."""
    count = astype(flags[0], np.intp)
    for f in flags[1:]:
        count = UFUNCS["add"](count, f)
    _guard(tracer, count, 0, what)


# ``np.interp`` on a short table (at most 16 points, strictly increasing: checked
# when traced, guarded at each call): NumPy's formula and its special cases
# written out over the segments, one fused pass, differentiable in x and fp.
# Longer or other tables, ``period=`` and complex values run as NumPy's call.
INTERP_UNROLLED = 16


def interp(x, xp, fp, left=None, right=None, period=None):
    """``np.interp`` of a short increasing table, NumPy's values bit for bit."""
    def refuse(why):
        return UnsupportedOpError(f"numpy.interp: {why}{_where()}; runs as NumPy's call")

    m = _shape(xp)[0] if _ndim(xp) == 1 else 0
    if period is not None or _ndim(xp) != 1 or _shape(fp) != _shape(xp) or not 1 <= m <= INTERP_UNROLLED:
        raise refuse("period=, a table not 1-D or of another length, or longer than 16 points")
    if builtins.any(_dtype(a).kind not in "biuf" for a in (x, xp, fp, left, right) if a is not None):
        raise refuse("a complex or non-numeric value")
    known = _known_value(xp)
    if known is None:
        raise refuse("the table's points are not known while tracing")
    table, tracer = known
    table = table.astype(np.float64)
    if not np.all(table[1:] > table[:-1]):
        raise refuse("the points are not strictly increasing")
    f64 = np.float64
    x = asarray(x, dtype=f64)
    px, py = astype(xp, f64, copy=False), astype(fp, f64, copy=False)
    lo_x, lo_f = px[0], py[0]
    low = lo_f if left is None else asarray(left, dtype=f64)
    high = py[m - 1] if right is None else asarray(right, dtype=f64)
    if m == 1:
        r = where(UFUNCS["less"](x, lo_x), low, where(UFUNCS["greater"](x, lo_x), high, lo_f))
        return r[()] if _ndim(r) == 0 else r  # (NumPy's: a scalar for a 0-d x)
    sub, div, mul, add = UFUNCS["subtract"], UFUNCS["divide"], UFUNCS["multiply"], UFUNCS["add"]
    isnan, eq = UFUNCS["isnan"], UFUNCS["equal"]
    slope = div(sub(py[1], py[0]), sub(px[1], px[0]))
    hi_x, hi_f = px[1], py[1]
    for k in range(1, m - 1):  # the segment x falls in: the last whose start is at most x
        at = UFUNCS["greater_equal"](x, px[k])
        seg = div(sub(py[k + 1], py[k]), sub(px[k + 1], px[k]))
        lo_x, lo_f, hi_x, hi_f = where(at, px[k], lo_x), where(at, py[k], lo_f), where(at, px[k + 1], hi_x), \
            where(at, py[k + 1], hi_f)
        slope = where(at, seg, slope)
    r = add(mul(slope, sub(x, lo_x)), lo_f)
    r = where(isnan(r), add(mul(slope, sub(x, hi_x)), hi_f), r)  # (NaN one way: the other, as NumPy)
    r = where(UFUNCS["logical_and"](isnan(r), eq(lo_f, hi_f)), lo_f, r)
    # at a point, its value (NumPy's, exactly: its -0.0 too; elsewhere the formula
    # gives it already, and its gradient in x is the segment's slope)
    exact = UFUNCS["logical_or"](UFUNCS["logical_not"](UFUNCS["isfinite"](slope)), eq(lo_f, 0.0))
    r = where(UFUNCS["logical_and"](eq(x, lo_x), exact), lo_f, r)
    r = where(eq(x, px[m - 1]), py[m - 1], r)
    r = where(UFUNCS["less"](x, px[0]), low, where(UFUNCS["greater"](x, px[m - 1]), high, r))
    if tracer is not None:
        _guard_none(tracer, [UFUNCS["logical_not"](UFUNCS["greater"](px[k + 1], px[k])) for k in range(m - 1)],
                    "np.interp's points increasing")
    r = where(isnan(x), x, r)
    return r[()] if _ndim(r) == 0 else r


def _known_value(a):
    """``a``'s value now and the traced array a guard must check at each call
    (None for a constant), or None where the trace has no values."""
    if not _is_braze_array(a):
        return np.asarray(a), None
    t = a
    while not hasattr(t, "_ctx") and hasattr(t, "_value_"):  # a gradient tape's array: what it watches
        t = t._value_
    if not _is_braze_array(t):
        return np.asarray(t), None  # (eager: each call computes it again)
    if not t._ctx.can_break():
        return None
    return np.asarray(t._ctx.value(t._node)), None if t._node.op == "const" else t


# ---------------------------------------------------------------- numpy.linalg
# LAPACK calls are primitives (ops/linalg.py: inv, solve, det, slogdet,
# cholesky, qr, eigh, svd, with VJP rules); norm is written as NumPy writes
# it. lstsq, whose residuals' length depends on the rank it finds, runs as a
# graph break with a VJP rule (braze.defvjp, in autodiff.py). The rest of
# numpy.linalg (eig, pinv, matrix_power, ...) runs as a graph break.

_SlogdetResult = type(np.linalg.slogdet(np.eye(1)))
_QRResult = type(np.linalg.qr(np.eye(1)))
_EighResult = type(np.linalg.eigh(np.eye(1)))
_SVDResult = type(np.linalg.svd(np.eye(1)))


def _linalg_inv(a):
    return bind("inv", a)


def _linalg_solve(a, b):
    return bind("solve", a, b)


def _linalg_det(a):
    return bind("det", a)


def _linalg_slogdet(a):
    return _SlogdetResult(bind("slogdet", a, part="sign"), bind("slogdet", a, part="logabsdet"))


def _linalg_cholesky(a, /, *, upper=False):
    if upper:  # NumPy then reads the upper triangle of a: the lower one of its transpose
        return swapaxes(bind("cholesky", swapaxes(a, -1, -2)), -1, -2)
    return bind("cholesky", a)


def _linalg_qr(a, mode="reduced"):
    if mode not in ("reduced", "complete", "r"):
        raise UnsupportedOpError(f"numpy.linalg.qr: mode={mode!r} is not traced{_where()}")
    result = bind("qr", a, mode=mode)
    return result if mode == "r" else _QRResult(*result)


def _uplo(func, UPLO):
    if UPLO not in ("L", "U", "l", "u"):
        raise ShapeError(f"{func}: UPLO argument must be 'L' or 'U', got {UPLO!r}{_where()}")
    return UPLO.upper()


def _linalg_eigh(a, UPLO="L"):
    return _EighResult(*bind("eigh", a, UPLO=_uplo("eigh", UPLO), vectors=True))


def _linalg_eigvalsh(a, UPLO="L"):
    return bind("eigh", a, UPLO=_uplo("eigvalsh", UPLO), vectors=False)


def _linalg_svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    result = bind("svd", a, full_matrices=bool(full_matrices), compute_uv=bool(compute_uv),
                  hermitian=bool(hermitian))
    return _SVDResult(*result) if compute_uv else result


def _linalg_svdvals(x, /):
    return bind("svd", x, full_matrices=False, compute_uv=False, hermitian=False)


def _linalg_norm(x, ord=None, axis=None, keepdims=False):
    if _is_braze_array(ord):  # (a Python float argument, traced: the norm's kind is read, and guarded)
        ord = float(ord)
    if not hasattr(x, "shape"):
        x = asarray(x)
    if _dtype(x).kind not in "fc":
        x = x.astype(float)
    nd = _ndim(x)
    if axis is None and (ord is None or (ord in ("f", "fro") and nd == 2) or (ord == 2 and nd == 1)):
        flat = ravel(x, order="K")
        ret = np.sqrt(np.dot(flat, flat))
        return reshape(ret, (1,) * nd) if keepdims else ret
    axis = tuple(range(nd)) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
    axis = tuple(normalize_axis("norm", a, nd, _shape(x)) for a in axis)
    absx = np.abs(x)
    if len(axis) == 1:
        if ord == np.inf:
            return absx.max(axis=axis, keepdims=keepdims)
        if ord == -np.inf:
            return absx.min(axis=axis, keepdims=keepdims)
        if ord == 0:
            return (x != 0).astype(_dtype(x)).sum(axis=axis, keepdims=keepdims)
        if ord == 1:
            return np.add.reduce(absx, axis=axis, keepdims=keepdims)
        if ord is None or ord == 2:
            return np.sqrt(np.add.reduce(x * x, axis=axis, keepdims=keepdims))
        if isinstance(ord, str):
            raise ShapeError(f"norm: invalid norm order {ord!r} for vectors{_where()}")
        ret = np.add.reduce(absx ** ord, axis=axis, keepdims=keepdims)
        return ret ** np.reciprocal(ord, dtype=_dtype(ret))
    if len(axis) != 2:
        raise ShapeError(f"norm: improper number of dimensions to norm{_where()}")
    row, col = axis
    if row == col:
        raise ShapeError(f"norm: duplicate axes given{_where()}")
    if ord in (1, -1):
        if col > row:
            col -= 1
        sums = np.add.reduce(absx, axis=row)
        ret = sums.max(axis=col) if ord == 1 else sums.min(axis=col)
    elif ord in (np.inf, -np.inf):
        if row > col:
            row -= 1
        sums = np.add.reduce(absx, axis=col)
        ret = sums.max(axis=row) if ord == np.inf else sums.min(axis=row)
    elif ord in (None, "fro", "f"):
        ret = np.sqrt(np.add.reduce(x * x, axis=axis))
    elif ord in (2, -2, "nuc"):  # as NumPy's _multi_svd_norm
        sv = bind("svd", np.moveaxis(x, (row, col), (-2, -1)), full_matrices=False, compute_uv=False,
                  hermitian=False)
        ret = sv.max(axis=-1) if ord == 2 else (sv.min(axis=-1) if ord == -2 else np.add.reduce(sv, axis=-1))
    else:
        raise ShapeError(f"norm: invalid norm order {ord!r} for matrices{_where()}")
    if keepdims:
        shape = list(_shape(x))
        shape[axis[0]] = shape[axis[1]] = 1
        ret = reshape(ret, tuple(shape))
    return ret

__all__ = sorted(
    name for name, value in list(globals().items())
    if callable(value) and not name.startswith("_") and getattr(value, "__module__", None) == __name__
) + sorted(UFUNCS)

# NumPy function object -> braze implementation, for __array_function__.
ARRAY_FUNCTIONS = {
    getattr(np, name): globals()[name]
    for name in __all__
    if hasattr(np, name) and callable(getattr(np, name)) and name in globals()
}
for _np_name in ("amax", "amin", "round", "around", "abs", "true_divide", "permute_dims", "pow"):
    if hasattr(np, _np_name):
        ARRAY_FUNCTIONS[getattr(np, _np_name)] = globals()[_np_name]

for _np_name in ("inv", "solve", "det", "slogdet", "cholesky", "norm", "qr", "eigh", "eigvalsh", "svd", "svdvals"):
    if hasattr(np.linalg, _np_name):
        ARRAY_FUNCTIONS[getattr(np.linalg, _np_name)] = globals()[f"_linalg_{_np_name}"]

del _np_name, math
