"""NumPy indexing reduced to braze primitives.

``getitem`` handles ints, slices (any step), ``None``, ``...``, integer
arrays (traced or concrete) with NumPy's advanced-indexing placement rule,
and concrete boolean masks (turned into integer arrays at trace time, since
their result shape is then static). ``setitem`` returns the updated array
as a new value (a functional update); the caller rebinds it. A *traced*
boolean mask can only be assigned through (``a[mask] = v`` becomes
``np.where``): reading ``a[mask]`` has a data-dependent shape.
"""
from __future__ import annotations

import operator

import numpy as np

from . import numpy as bnp
from .core import bind
from .errors import (DTypeError, IndexOutOfRangeError, IndexShapeError, IndexTypeError, PythonIntOverflowError,
                     ShapeError, UnsupportedOpError, where)
from .ops.shape import slice_length
from .aval import is_ndarray
from .ops._util import broadcast_shape

_CONCRETE = (list, tuple, range)  # or a NumPy array (is_ndarray)


def _is_traced(value) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and not (is_ndarray(value) or isinstance(value, np.generic))


def _static_slice(k: slice) -> slice:
    """A slice whose bounds are traced integers (``x[:n]`` with ``n =
    x.argmax() + 1``), with their values read where a graph break may happen
    (the result's shape depends on them; a guard traces again when they change)."""
    parts = [k.start, k.stop, k.step]
    traced = [getattr(p, "_can_break", None) is not None and p._can_break() and np.ndim(p) == 0 and
              np.dtype(p.dtype).kind in "iub" for p in parts]
    if not any(traced):
        return k
    return slice(*(operator.index(p) if t else p for p, t in zip(parts, traced)))


def _entries(key, shape):
    """One entry per index item, with ``...`` expanded and masks resolved."""
    if not isinstance(key, tuple):
        key = (key,)
    entries = []
    for k in key:
        if isinstance(k, list) and not _plain(k):
            # ``A[[k, p]]`` with a traced pivot p: an index array built by braze (a stack),
            # not converted by NumPy (a graph break guarding every pivot's value)
            k = bnp.array(k)
        if _is_traced(k):
            known = getattr(k, "_known_value", lambda: None)()
            k = k if known is None else known  # (a constant: its value, as NumPy's index)
        if k is None:
            entries.append(("none", None))
        elif k is Ellipsis:
            entries.append(("ellipsis", None))
        elif isinstance(k, slice):
            k = _static_slice(k)
            for part in (k.start, k.stop, k.step):
                if part is not None and not isinstance(part, (int, np.integer)):
                    raise DTypeError(
                        f"getitem: slice bounds must be static integers, got {k}{where()}; "
                        "a traced value cannot be a slice bound (make it a static argument)"
                    )
            entries.append(("slice", k))
        elif isinstance(k, (bool, np.bool_)):
            raise UnsupportedOpError(f"getitem: a scalar boolean index ({k}) is not supported{where()}")
        elif isinstance(k, (int, np.integer)):
            entries.append(("int", int(k)))
        elif is_ndarray(k) or isinstance(k, _CONCRETE):
            arr = np.asarray(k)
            if arr.dtype == bool:
                entries.extend(("array", np.asarray(i)) for i in np.nonzero(arr))
            elif arr.size == 0:
                entries.append(("array", arr.astype(np.intp)))
            elif arr.dtype.kind in "iu":
                entries.append(("array", arr))
            else:
                raise IndexTypeError(f"getitem: index arrays must be integers or booleans, got {arr.dtype}{where()}")
        elif _is_traced(k):
            kind = np.dtype(k.dtype).kind
            if kind == "b":
                entries.append(("mask", k))
            elif kind in "iu":
                entries.append(("array", k))
            else:
                raise IndexTypeError(f"getitem: index arrays must be integers, got a traced {k.dtype} array{where()}")
        else:
            raise IndexTypeError(
                f"getitem: {type(k).__name__} {k!r} is not a valid index{where()}; "
                "use ints, slices, None, ..., or integer/boolean arrays"
            )
    if sum(kind == "ellipsis" for kind, _ in entries) > 1:
        raise ShapeError(f"getitem: an index can only have a single ellipsis ('...'){where()}")
    consumed = sum(1 for kind, _ in entries if kind in ("slice", "int", "array"))
    consumed += sum(len(v.shape) for kind, v in entries if kind == "mask")
    if consumed > len(shape):
        raise IndexShapeError(
            f"getitem: too many indices for an array of shape {tuple(shape)}: "
            f"{len(shape)} dimensions, {consumed} indexed{where()}"
        )
    fill = [("slice", slice(None))] * (len(shape) - consumed)
    for i, (kind, _) in enumerate(entries):
        if kind == "ellipsis":
            return entries[:i] + fill + entries[i + 1:]
    return entries + fill


def _check_int(i: int, n: int, axis: int) -> int:
    if not -n <= i < n:
        raise IndexShapeError(
            f"getitem: index {i} is out of bounds for axis {axis} with size {n}{where()}; "
            f"use an index in [{-n}, {n - 1}]"
        )
    return i % n


def _check_array(arr, n: int, axis: int):
    if is_ndarray(arr) and arr.size and (arr.min() < -n or arr.max() >= n):
        bad = arr.max() if arr.max() >= n else arr.min()
        raise IndexShapeError(f"getitem: index {bad} is out of bounds for axis {axis} with size {n}{where()}")
    return arr


def norm_slice(s: slice, n: int) -> tuple:
    """The one normalization of a slice over an axis of size ``n``: Python's own
    ``slice.indices``, then a canonical ``(start, stop, step)`` that means the
    same when applied again: an empty slice is ``(0, 0, 1)``; ``start`` is the
    first index taken, ``stop`` one step past the last (None where a negative
    step runs past index 0: -1 would mean the last element)."""
    r = range(*s.indices(n))
    if not r:
        return (0, 0, 1)
    after = r[-1] + r.step
    return (r.start, after if after >= 0 else None, r.step)


_norm_slice = norm_slice


def _is_full(s: tuple, n: int) -> bool:
    return s == (0, n, 1)


def _basic(entries, shape):
    """(slices per axis, shape after slicing with ints kept as size 1, final shape)."""
    slices, kept, final, axis = [], [], [], 0
    for kind, value in entries:
        if kind == "none":
            final.append(1)
            continue
        n = shape[axis]
        if kind == "int":
            i = _check_int(value, n, axis)
            slices.append((i, i + 1, 1))
            kept.append(1)
        else:
            s = _norm_slice(value, n)
            slices.append(s)
            kept.append(slice_length(*s))
            final.append(kept[-1])
        axis += 1
    return tuple(slices), tuple(kept), tuple(final)


def is_basic(key) -> bool:
    """Whether NumPy would return a view for ``x[key]`` (no array indices)."""
    items = key if isinstance(key, tuple) else (key,)
    return all(k is None or k is Ellipsis or isinstance(k, (slice, int, np.integer)) and not isinstance(k, bool) for k in items)


def _slice(x, slices, shape):
    if all(_is_full(s, n) for s, n in zip(slices, shape)):
        return x
    return bind("slice", x, slices=slices)


def _advanced(entries, shape):
    """(x-reshape with None axes inserted, slices, array operands, their axes)."""
    expanded, new_shape, axis = [], [], 0
    for kind, value in entries:
        if kind == "none":
            expanded.append(("slice", slice(None)))
            new_shape.append(1)
            continue
        n = shape[axis]
        if kind == "int":
            expanded.append(("array", np.asarray(_check_int(value, n, axis), dtype=np.intp)))
        elif kind == "array":
            expanded.append(("array", _check_array(value, n, axis)))
        else:
            expanded.append((kind, value))
        new_shape.append(n)
        axis += 1
    slices = tuple(
        _norm_slice(v, n) if kind == "slice" else (0, n, 1)
        for (kind, v), n in zip(expanded, new_shape)
    )
    axes = tuple(i for i, (kind, _) in enumerate(expanded) if kind == "array")
    arrays = [v for kind, v in expanded if kind == "array"]
    return tuple(new_shape), slices, arrays, axes


def _check_masks(key, shape) -> None:
    """A boolean array in an index covers the axes it indexes exactly (NumPy's
    IndexError; a shorter mask's nonzero positions would index silently)."""
    items = key if isinstance(key, tuple) else (key,)

    def width(k):
        if k is None or k is Ellipsis:
            return 0
        if hasattr(k, "dtype") and np.dtype(k.dtype) == np.bool_ and np.ndim(k) >= 1:
            return np.ndim(k)
        return 1

    pos = 0
    for i, k in enumerate(items):
        if k is Ellipsis:
            pos = len(shape) - sum(width(j) for j in items[i + 1:])
            continue
        if hasattr(k, "dtype") and np.dtype(k.dtype) == np.bool_ and np.ndim(k) >= 1:
            for axis, n in enumerate(np.shape(k)):
                if pos + axis < len(shape) and shape[pos + axis] != n:
                    raise IndexOutOfRangeError(
                        f"getitem: boolean index did not match indexed array along axis {pos + axis}; size of "
                        f"axis is {shape[pos + axis]} but size of corresponding boolean axis is {n}{where()}")
        pos += width(k)



def _bool_0d(k) -> bool:
    return isinstance(k, (bool, np.bool_)) or (
        hasattr(k, "dtype") and hasattr(k, "shape") and np.dtype(k.dtype) == np.bool_ and len(k.shape) == 0)


def getitem(x, key):
    """``x[key]`` with NumPy's semantics, for any index NumPy's basic and
    advanced indexing accept whose result shape is static."""
    items = key if isinstance(key, tuple) else (key,)
    if any(_bool_0d(k) for k in items):
        # x[True] / x[np.array(b)]: a new leading axis of length 1, masked by the value
        # (NumPy's rule); beside other indices (a new axis where it stands) not handled
        if len(items) != 1:
            raise UnsupportedOpError(
                f"getitem: a 0-d boolean index beside other indices is not supported{where()}; index with "
                "it alone (x[b][:, ...]) or use np.where(b, x, fill)")
        (k,) = items
        if _is_traced(k) and getattr(k, "_known_value", lambda: None)() is None:
            return getitem(bnp.expand_dims(x, 0), bnp.reshape(k, (1,)))
        return getitem(bnp.expand_dims(x, 0), slice(None) if bool(np.asarray(
            k._known_value() if _is_traced(k) else k)) else slice(0, 0))
    shape = tuple(x.shape) if hasattr(x, "shape") else np.shape(x)
    _check_masks(key, shape)
    entries = _entries(key, shape)
    if any(kind == "mask" for kind, _ in entries):
        tracer = next((t for t in [x, *(key if isinstance(key, tuple) else (key,))]
                       if getattr(t, "_can_break", None) is not None and t._can_break()), None)
        k0 = key[0] if isinstance(key, tuple) and len(key) == 1 else key
        if (tracer is not None and not (isinstance(key, tuple) and len(key) != 1) and _is_traced(k0)
                and np.dtype(k0.dtype) == np.bool_ and 1 <= len(k0.shape) <= len(shape)
                and tuple(k0.shape) == shape[:len(k0.shape)]):
            # the whole array selected by a mask of its shape: one op whose length is
            # the data's (guarded), a count-then-fill kernel fused with the mask's and
            # the values' producers on cpu; or its rows by a mask of its leading axes
            # (X[labels == k]), whose sums fusion takes without gathering the rows
            return tracer._ctx.select(x, k0)
        inner = _inner_mask(entries, shape) if tracer is not None else None
        if inner is not None:
            # x[:, mask]: the mask's axes moved first, their rows selected as above (the
            # count guarded, no graph break), and the selection's axis moved back to
            # where the mask was, as NumPy puts it; a store of values elementwise in it
            # (``a[:, mask] *= 2``) then computes them over the whole array (``unselected``)
            at, mask = inner
            nd, m = len(shape), len(mask.shape)
            picked = tracer._ctx.select(bnp.transpose(x, (*range(at, at + m), *range(at), *range(at + m, nd))), mask)
            return bnp.transpose(picked, (*range(1, at + 1), 0, *range(at + 1, nd - m + 1)))
        if tracer is not None:
            # a graph break: NumPy finds the mask's nonzero positions (their number is
            # guarded), and the selection is a gather of them, differentiable as any
            # gather: x[mask] is x[np.nonzero(mask)] (NumPy's own definition)
            parts = []
            for k in (key if isinstance(key, tuple) else (key,)):
                if hasattr(k, "dtype") and np.dtype(k.dtype) == np.bool_ and np.ndim(k) >= 1:
                    parts.extend(tracer._ctx.host_call(np.nonzero, "numpy.nonzero (of a boolean mask index)", (k,),
                                                       {}, "the selection's length depends on the data"))
                else:
                    parts.append(k)
            return getitem(x, tuple(parts))
        raise UnsupportedOpError(
            f"getitem: indexing with a traced boolean mask gives a result whose shape depends on "
            f"the data{where()}; use np.where(mask, x, fill) to keep the shape, or pass the mask "
            "as a NumPy array captured from outside the function"
        )
    if not any(kind == "array" for kind, _ in entries):
        slices, _, final = _basic(entries, shape)
        return bnp.reshape(_slice(x, slices, shape), final)
    places = [i for i, (kind, _) in enumerate(entries) if kind in ("int", "array")]
    if any(kind == "int" for kind, _ in entries) and places == list(range(places[0], places[-1] + 1)):
        # ``psi[t + 1, path[t + 1]]``: integers beside the index arrays, all adjacent, are the
        # same as a basic index first (the result's axes land where they would), so each
        # integer is a view's offset, not an index array of its own, and iterations alike
        first = [entry if entry[0] != "array" else ("slice", slice(None)) for entry in entries]
        slices, _, final = _basic(first, shape)
        x, shape = bnp.reshape(_slice(x, slices, shape), final), final
        entries = [("slice", slice(None)) if kind in ("slice", "none") else (kind, v)
                   for kind, v in entries if kind != "int"]
    new_shape, slices, arrays, axes = _advanced(entries, shape)
    x = bnp.reshape(x, new_shape)
    return bind("gather", _slice(x, slices, new_shape), *arrays, axes=axes)


def _inner_mask(entries, shape):
    """(axis, mask) for an index of whole slices and one traced boolean mask after
    at least one of them, matching the axes it indexes (``x[:, mask]``), else None."""
    at, found = 0, None
    for kind, v in entries:
        if kind == "mask" and found is None and _is_traced(v) and tuple(v.shape) == tuple(shape[at: at + len(v.shape)]):
            found = (at, v)
            at += len(v.shape)
        elif kind == "slice" and _is_full(norm_slice(v, shape[at]), shape[at]):
            at += 1
        else:
            return None
    return found if found is not None and found[0] > 0 else None


def _plain(value) -> bool:
    """Whether a (nested) list holds no traced value."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, (list, tuple)):
            stack.extend(v)
        elif not isinstance(v, (bool, int, float, complex, str, np.generic)) and not is_ndarray(v):
            return False
    return True


def _fit_value(value, region_shape, dtype):
    """The value cast (unsafely, as NumPy's setitem does) and broadcast to the region."""
    if isinstance(value, (list, tuple)) and not _plain(value):
        # traced values in a list (``curve[t] = [S.sum(), S.max()]``): built as NumPy
        # builds the array, traced, not converted to one (a guard on every value)
        value = bnp.array(value, copy=None)
    if is_ndarray(value) or isinstance(value, (bool, int, float, np.generic, list, tuple)):
        given = np.asarray(value)
        if given.dtype.kind in "OUSVc":
            raise DTypeError(f"setitem: cannot assign a {given.dtype} value into a {dtype} array{where()}")
        converted = np.empty(given.shape, dtype)
        try:
            converted[...] = value  # NumPy's own conversion: a Python int out of the dtype's range is an error
        except OverflowError as exc:
            raise PythonIntOverflowError(f"setitem: {exc}{where()}, as NumPy says; assign a value the "
                                         f"{dtype} array can hold, or cast the array first") from None
        value = converted[()] if converted.ndim == 0 else converted
    elif np.dtype(value.dtype) != dtype:
        value = bnp.astype(value, dtype)
    vshape = bnp.shape(value)
    while len(vshape) > len(region_shape) and vshape[0] == 1:
        vshape = vshape[1:]
        value = bnp.reshape(value, vshape)
    try:
        ok = len(vshape) <= len(region_shape) and tuple(broadcast_shape(vshape, region_shape)) == tuple(region_shape)
    except ValueError:
        ok = False
    if not ok:
        raise ShapeError(
            f"setitem: could not broadcast input array from shape {vshape} into shape "
            f"{tuple(region_shape)}{where()}"
        )
    return bnp.broadcast_to(value, tuple(region_shape))


def setitem(x, key, value):
    """The array ``x`` with ``x[key] = value`` applied, as a new value."""
    shape = tuple(x.shape)
    dtype = np.dtype(x.dtype)
    entries = _entries(key, shape)
    masks = [v for kind, v in entries if kind == "mask"]
    if masks:
        mask = masks[0]
        explicit = [e for e in entries if not (e[0] == "slice" and e[1] == slice(None))]
        at = next(i for i, e in enumerate(entries) if e[0] == "mask")
        if (len(explicit) == 1 and at and bnp.ndim(value) == 0 and "ellipsis" not in [e[0] for e in entries]
                and tuple(mask.shape) == shape[at: at + len(mask.shape)]):
            # x[:, mask] = v: the mask over later axes, one value (NumPy's result, as np.where)
            value = _fit_value(value, (), dtype)
            rest = len(shape) - at - len(mask.shape)
            return bnp.where(bnp.reshape(mask, (1,) * at + tuple(mask.shape) + (1,) * rest), value, x)
        if (not (len(explicit) == 1 and at == 0) and len(masks) == 1 and all(kind in ("slice", "int", "mask") for kind, _ in entries)
                and _mask_fits(entries, shape)):
            return _setitem_inner_mask(x, entries, value)
        if len(explicit) != 1 or tuple(mask.shape) != shape[: len(mask.shape)]:
            raise UnsupportedOpError(
                f"setitem: a traced boolean mask must be the only index and match the leading "
                f"dimensions of the array (mask {tuple(mask.shape)}, array {shape}){where()}; "
                "use np.where(mask, value, x)"
            )
        rest = shape[len(mask.shape):]
        whole = _unselected(x, mask, value, rest)
        if whole is not None:  # (before reading the value's shape: its length is the mask's count)
            mask = bnp.reshape(mask, tuple(mask.shape) + (1,) * len(rest))
            return bnp.where(mask, _fit_value(whole, shape, dtype), x)
        vshape = tuple(bnp.shape(value))
        if len(vshape) == len(rest) + 1 and vshape[0] != 1:
            return _masked_values(x, mask, value, rest, dtype)
        value = _fit_value(value, rest, dtype) if bnp.ndim(value) else _fit_value(value, (), dtype)
        mask = bnp.reshape(mask, tuple(mask.shape) + (1,) * len(rest))
        return bnp.where(mask, value, x)
    if not any(kind == "array" for kind, _ in entries):
        slices, kept, final = _basic(entries, shape)
        value = _fit_value(value, final, dtype)
        if all(_is_full(s, n) for s, n in zip(slices, shape)):
            return bnp.asarray_copy(bnp.reshape(value, shape))
        return bind("update_slice", x, bnp.reshape(value, kept), slices=slices)
    return _scatter("scatter", "setitem", x, key, entries, value)


def _mask_fits(entries, shape) -> bool:
    """Whether the one mask among basic indices matches the axes it indexes (else
    NumPy's IndexError is NumPy's to raise: the call runs as NumPy)."""
    axis = 0
    for kind, v in entries:
        if kind == "mask":
            return tuple(v.shape) == tuple(shape[axis: axis + len(v.shape)])
        axis += 1
    return False


def _setitem_inner_mask(x, entries, value):
    """``x[key] = value`` where ``key`` holds one traced mask among slices and
    ints (``a[mask, 1:] = -1``, ``a[0, mask] = v``, ``a[:, mask] *= 2``): the
    region the basic indices pick, with the mask's axes moved to the front, is
    a leading-mask update (one value, a broadcast value, or one value per
    selected element, in order); moved back and stored into ``x``. NumPy puts
    the selection's axis where the mask was; the value is aligned to that."""
    sub_key, at = [], None
    for kind, v in entries:
        if kind == "mask":
            at = sum(1 for k in sub_key if isinstance(k, slice))
            mask = v
            sub_key.extend([slice(None)] * len(v.shape))
        else:
            sub_key.append(v)
    sub_key = tuple(sub_key)
    sub = getitem(x, sub_key)
    m, nd = len(mask.shape), len(sub.shape)
    perm = (*range(at, at + m), *range(at), *range(at + m, nd))
    if at and bnp.ndim(value) == nd - m + 1:
        # values elementwise in ``sub[..., mask, ...]`` itself (``a[:, mask] *= 2``): computed
        # over ``sub``, where the mask picks them (no selection, any count)
        shape = tuple(sub.shape)
        whole = _unselected(sub, mask, value, shape[:at] + shape[at + m:], at)
        if whole is not None:
            mask = bnp.reshape(mask, (1,) * at + tuple(mask.shape) + (1,) * (nd - at - m))
            return setitem(x, sub_key, bnp.where(mask, _fit_value(whole, shape, np.dtype(x.dtype)), sub))
    if isinstance(value, (list, tuple)):
        value = np.asarray(value) if _plain(value) else bnp.array(value, copy=None)
    if bnp.ndim(value):
        result_ndim = nd - m + 1  # the selection's shape: sub's, the mask's axes one axis of selected elements
        vshape = tuple(bnp.shape(value))
        while len(vshape) > result_ndim and vshape[0] == 1:
            vshape = vshape[1:]
        if len(vshape) > result_ndim:
            raise ShapeError(f"setitem: could not broadcast input array from shape {tuple(bnp.shape(value))} into "
                             f"a selection of {result_ndim} dimensions{where()}")
        value = bnp.reshape(value, (1,) * (result_ndim - len(vshape)) + vshape)
        value = bnp.moveaxis(value, at, 0)
    moved = setitem(bnp.transpose(sub, perm), mask, value)
    return setitem(x, sub_key, bnp.transpose(moved, tuple(int(i) for i in np.argsort(perm))))


def _masked_values(x, mask, value, rest: tuple, dtype):
    """``x[mask] = value`` with one value per element (or row) the mask selects,
    in order (``x[x > 0.5] += 1``: the selection, changed, stored back): the
    k-th selected position takes ``value[k]``. The mask's count is the
    selection's (``x[mask]``, guarded: another count traces again) and must be
    the value's length, as NumPy requires."""
    count = int(bnp.shape(getitem(x, mask))[0])  # (registers the guard on the mask's count)
    if count != bnp.shape(value)[0]:
        raise ShapeError(f"setitem: NumPy boolean array indexing assignment cannot assign {bnp.shape(value)[0]} "
                         f"input values to the {count} output values where the mask is true{where()}")
    if count == 0:
        return x
    value = _fit_value(value, (count, *rest), dtype)
    order = bnp.cumsum(bnp.reshape(mask, (-1,)), dtype=np.int64) - 1  # the k of each selected position
    order = bnp.where(mask, bnp.reshape(order, tuple(mask.shape)), 0)
    mask = bnp.reshape(mask, tuple(mask.shape) + (1,) * len(rest))
    return bnp.where(mask, getitem(value, order), x)


def _unselected(x, mask, value, rest: tuple, at: int = 0):
    """``value`` computed over the arrays its selections by ``mask`` select from
    (``GraphContext.unselected``), or None."""
    ctx = getattr(value, "_ctx", None)
    return ctx.unselected(x, mask, value, rest, at) if ctx is not None and hasattr(ctx, "unselected") else None


def _scatter(op: str, what: str, x, key, entries, value):
    """``x`` with the elements an advanced index picks set (``scatter``) or
    added to (``scatter_add``), as a new value."""
    shape, dtype = tuple(x.shape), np.dtype(x.dtype)
    if any(kind == "none" for kind, _ in entries):
        raise UnsupportedOpError(f"{what}: None mixed with array indices is not supported{where()}")
    _, slices, arrays, axes = _advanced(entries, shape)
    region = getitem(x, key)
    value = _fit_value(value, tuple(region.shape), dtype)
    if all(_is_full(s, n) for s, n in zip(slices, shape)):
        return bind(op, x, value, *arrays, axes=axes)
    sub = bind("slice", x, slices=slices)
    return bind("update_slice", x, bind(op, sub, value, *arrays, axes=axes), slices=slices)


def add_at(x, key, value):
    """``np.add.at(x, key, value)`` as a new value: unbuffered, so repeated
    indices add up (a scatter-add); basic indices are an ordinary update."""
    shape = tuple(x.shape)
    entries = _entries(key, shape)
    if any(kind == "mask" for kind, _ in entries):
        mask = [v for kind, v in entries if kind == "mask"][0]
        return bnp.where(bnp.reshape(mask, tuple(mask.shape) + (1,) * (len(shape) - len(mask.shape))),
                         bnp.add(x, value), x)
    if not any(kind == "array" for kind, _ in entries):
        return setitem(x, key, bnp.add(getitem(x, key), value))
    return _scatter("scatter_add", "add.at", x, key, entries, value)
