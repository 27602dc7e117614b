"""NumPy's ufunc protocol on braze arrays: ``ufunc(...)`` with every keyword, and
the methods ``reduce``, ``accumulate``, ``outer`` and ``at``.

Every keyword NumPy accepts is honoured or refused with a ``BrazeError``,
never dropped:

* ``dtype=`` picks the *loop* (``np.add(i8, i8, dtype=np.int16)`` adds in
  int16), found with ``ufunc.resolve_dtypes`` as NumPy does;
* ``casting=`` is checked by asking NumPy itself on one-element stand-ins
  with the operands' dtypes, so its exact rules and messages apply;
* ``out=`` writes into a traced array (a captured NumPy array cannot be
  written from a compiled function: refused);
* ``where=`` with ``out=`` keeps ``out``'s values where the mask is False
  (without ``out=`` NumPy leaves them unset: refused);
* ``order=`` sets the result's memory order; ``subok`` has no effect on
  plain arrays; ``signature=`` is refused.
"""
from __future__ import annotations

import warnings

import numpy as np

from . import indexing
from . import numpy as bnp
from .aval import is_ndarray
from .errors import DTypeError, UnsupportedOpError, where as _where

_REDUCE = {"add": bnp.sum, "multiply": bnp.prod, "maximum": bnp.max, "minimum": bnp.min,
           "logical_and": bnp.all, "logical_or": bnp.any}
_ACCUMULATE = {"add": "cumsum", "multiply": "cumprod", "maximum": "_cummax", "minimum": "_cummin"}


def _is_braze(x) -> bool:
    return hasattr(x, "_assign") and hasattr(x, "shape")


def unsupported(name: str, detail: str = "") -> UnsupportedOpError:
    return UnsupportedOpError(
        f"numpy.{name} is not supported on traced arrays{detail}{_where()}; write it with supported "
        "NumPy functions (elementwise ufuncs, reductions, reshapes, indexing, matmul/einsum), "
        "or define it as a braze.composite and register a kernel for it"
    )


def _stand_in(x):
    """An empty value with ``x``'s promotion behaviour (NEP 50): NumPy resolves
    the loop and checks casting without looking at any element."""
    if _is_braze(x):
        if getattr(x, "weak", False):
            return {"b": bool, "i": int, "u": int, "f": float, "c": complex}[np.dtype(x.dtype).kind](0)
        return np.zeros(0, x.dtype)
    if isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic):
        return x
    return np.zeros(0, np.asarray(x).dtype)


def _check_with_numpy(ufunc, inputs, kwargs) -> None:
    """Raise NumPy's own refusal (as a DTypeError) for these dtypes and keywords."""
    samples = [_stand_in(x) for x in inputs]
    kw = {k: v for k, v in kwargs.items() if k in ("dtype", "casting", "signature")}
    out = kwargs.get("out")
    if out is not None:
        kw["out"] = tuple(np.zeros(0, o.dtype) if o is not None else None for o in out)
    key = (ufunc, tuple(_sample_key(x) for x in samples),
           tuple((k, v if k != "out" else tuple(o if o is None else o.dtype for o in v)) for k, v in kw.items()))
    try:
        if key in _ACCEPTED:
            return
    except TypeError:  # (an unhashable keyword value: checked each time)
        key = None
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ufunc(*samples, **kw)
    except TypeError as exc:  # (type resolution and casting; a ValueError would be about the values)
        shapes = ", ".join(str(x.aval) if _is_braze(x) else repr(x) for x in inputs)
        raise DTypeError(f"numpy.{ufunc.__name__}({shapes}): {exc}{_where()}") from None
    if key is not None:
        if len(_ACCEPTED) > 4096:
            _ACCEPTED.clear()
        _ACCEPTED.add(key)


# What NumPy accepted (ufunc, operand kinds, keywords): an unrolled loop asks
# again at every iteration, and a check costs tens of microseconds.
_ACCEPTED: set = set()


def _sample_key(x):
    """What of a stand-in NumPy's check reads: an array's dtype, a Python
    number's type, and an int's value too (NEP 50: out of the array's range is
    NumPy's OverflowError)."""
    if is_ndarray(x):
        return x.dtype
    return (type(x), x) if type(x) is int else type(x)


def _loop_dtypes(ufunc, inputs, dtype, casting):
    keys = []
    for x in inputs:
        s = _stand_in(x)
        keys.append(type(s) if not is_ndarray(s) else s.dtype)
    signature = (None,) * ufunc.nin + (np.dtype(dtype),) + (None,) * (ufunc.nout - 1)
    try:
        return ufunc.resolve_dtypes(tuple(keys) + (None,) * ufunc.nout, signature=signature, casting=casting)
    except (TypeError, ValueError) as exc:
        raise DTypeError(f"numpy.{ufunc.__name__} with dtype={np.dtype(dtype)}: {exc}{_where()}") from None


def call(ufunc, inputs, kwargs):
    """``ufunc(*inputs, **kwargs)`` where an input (or ``out``) is a braze array."""
    name = ufunc.__name__
    fn = bnp.UFUNCS.get(name)
    if fn is None:
        raise unsupported(name)
    kwargs = dict(kwargs)
    out = kwargs.pop("out", None)
    if out is not None and not isinstance(out, tuple):
        out = (out,)
    if out is not None and not all(o is None or _is_braze(o) or is_ndarray(o) for o in out):
        raise DTypeError(f"numpy.{name}: return arrays must be of ArrayType, got "
                         f"{', '.join(type(o).__name__ for o in out)}{_where()}")
    dtype = kwargs.pop("dtype", None)
    casting = kwargs.pop("casting", "same_kind")
    mask = kwargs.pop("where", True)
    order = kwargs.pop("order", "K")
    kwargs.pop("subok", None)
    signature = kwargs.pop("signature", None)
    if kwargs:
        raise UnsupportedOpError(f"numpy.{name}: unknown keyword argument(s) {sorted(kwargs)}{_where()}")
    if signature is not None:
        raise unsupported(f"{name} with signature=", "")
    _check_with_numpy(ufunc, inputs, {"dtype": dtype, "casting": casting, "out": out} if out or dtype else
                      {"casting": casting})
    if dtype is not None:
        loop = _loop_dtypes(ufunc, inputs, dtype, casting)
        inputs = tuple(bnp.astype(x, d) if np.dtype(bnp._dtype(x)) != d else x
                       for x, d in zip(inputs, loop[: ufunc.nin]))
    result = fn(*inputs)
    results = result if isinstance(result, tuple) else (result,)
    if dtype is not None:
        results = tuple(bnp.astype(r, d) if np.dtype(bnp._dtype(r)) != d else r
                        for r, d in zip(results, loop[ufunc.nin:]))
    if order not in ("K", None):
        results = tuple(bnp.copy(r, order=order) for r in results)
    if mask is not True and out is None:
        raise UnsupportedOpError(
            f"numpy.{name}: where= without out= leaves the masked-out elements unset{_where()}; "
            f"pass out=, or use np.where(mask, numpy.{name}(...), other)")
    if out is None:
        return results[0] if not isinstance(result, tuple) else results
    if len(out) != len(results):
        raise DTypeError(f"numpy.{name}: {len(out)} out= arrays for {len(results)} results{_where()}")
    for target, value in zip(out, results):
        if target is None:
            continue
        if not _is_braze(target):
            raise UnsupportedOpError(
                f"numpy.{name}: out= must be a traced array, not a {type(target).__name__}{_where()}; "
                f"assign the result instead (y = np.{name}(...)): a compiled function cannot write into "
                "an array it captured")
        if mask is not True:
            value = bnp.where(mask, value, target)
        target._assign(value, f"{name} (out=)", casting="unsafe")  # (NumPy checked the casting above)
    finals = tuple(t if t is not None else r for t, r in zip(out, results))
    return finals[0] if len(finals) == 1 else finals


def reduce(ufunc, inputs, kwargs):
    name = ufunc.__name__
    fn = _REDUCE.get(name)
    if fn is None:
        raise unsupported(f"{name}.reduce")
    (array,) = inputs
    kwargs = dict(kwargs)
    axis = kwargs.pop("axis", 0)
    out = kwargs.pop("out", None)
    if isinstance(out, tuple):
        (out,) = out
    keepdims = kwargs.pop("keepdims", False)
    initial = kwargs.pop("initial", np._NoValue)
    mask = kwargs.pop("where", True)
    dtype = kwargs.pop("dtype", None)
    if kwargs:
        raise UnsupportedOpError(f"numpy.{name}.reduce: unknown keyword argument(s) {sorted(kwargs)}{_where()}")
    extra = {"initial": initial}
    if mask is not True:
        extra["where"] = mask
    if name in ("add", "multiply"):
        return fn(array, axis=axis, dtype=dtype, out=out, keepdims=keepdims, **extra)
    if dtype is not None:
        array = bnp.astype(array, dtype)
    if name in ("logical_and", "logical_or"):
        if initial is not np._NoValue:
            raise unsupported(f"{name}.reduce with initial=")
        return fn(array, axis=axis, out=out, keepdims=keepdims, **({"where": mask} if mask is not True else {}))
    return fn(array, axis=axis, out=out, keepdims=keepdims, **extra)


def accumulate(ufunc, inputs, kwargs):
    name = ufunc.__name__
    if name not in _ACCUMULATE:
        raise unsupported(f"{name}.accumulate")
    (array,) = inputs
    kwargs = dict(kwargs)
    axis = kwargs.pop("axis", 0)
    dtype = kwargs.pop("dtype", None)
    out = kwargs.pop("out", None)
    if kwargs:
        raise UnsupportedOpError(f"numpy.{name}.accumulate: unknown keyword argument(s) {sorted(kwargs)}{_where()}")
    return getattr(bnp, _ACCUMULATE[name])(array, axis=axis, dtype=dtype, out=out)


def outer(ufunc, inputs, kwargs):
    a, b = inputs
    na, nb = bnp._ndim(a), bnp._ndim(b)
    a = bnp.reshape(a, bnp._shape(a) + (1,) * nb)
    return call(ufunc, (a, b), kwargs)


def at(ufunc, inputs, kwargs):
    """``np.add.at(x, idx, v)``: unbuffered in-place addition (repeated indices add up)."""
    if ufunc.__name__ != "add" or kwargs:
        raise unsupported(f"{ufunc.__name__}.at")
    x, idx = inputs[0], inputs[1]
    v = inputs[2] if len(inputs) > 2 else 1
    if not _is_braze(x):
        raise unsupported("add.at", " into an array the function did not receive or create")
    x._assign(indexing.add_at(x, idx, v), "add.at")


METHODS = {"__call__": call, "reduce": reduce, "accumulate": accumulate, "outer": outer, "at": at}


def dispatch(ufunc, method: str, inputs, kwargs):
    handler = METHODS.get(method)
    if handler is None:
        raise unsupported(f"{ufunc.__name__}.{method}")
    return handler(ufunc, inputs, kwargs)
