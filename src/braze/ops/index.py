"""Indexing primitives: static slices, gathers by integer arrays, and their updates.

``slice`` and ``update_slice`` take one normalized ``(start, stop, step)``
per axis (``stop`` is None where a negative step runs past index 0).
``gather``/``scatter`` index the axes in ``axes`` with integer arrays, with
NumPy's advanced-indexing rule for where the broadcast index dimensions go.
Everything NumPy's ``__getitem__``/``__setitem__`` accept is reduced to these
in ``braze.indexing``.
"""
from __future__ import annotations

import numpy as np

from ..aval import Aval
from ..core import declare
from ..errors import DTypeError, IndexOutOfRangeError, ShapeError, where
from ._util import broadcast_shapes


def slice_length(start: int, stop, step: int) -> int:
    return len(range(start, -1 if stop is None else stop, step))


def _slices(slices):
    return tuple(slice(a, b, c) for a, b, c in slices)


def _slice_abstract(x: Aval, *, slices):
    return Aval(tuple(slice_length(*s) for s in slices), x.dtype, x.weak and not slices)


def _slice_impl(x, *, slices):
    return np.asarray(x)[_slices(slices)]


def _update_slice_abstract(x: Aval, v: Aval, *, slices):
    expected = tuple(slice_length(*s) for s in slices)
    if v.shape != expected:
        raise ShapeError(f"update_slice: value {v} does not fit region of shape {expected} of {x}{where()}")
    return Aval(x.shape, x.dtype)


def _update_slice_impl(x, v, *, slices):
    out = np.array(x, copy=True)
    out[_slices(slices)] = v
    return out


def gather_shape(x_shape, index_shapes, axes) -> tuple[int, ...]:
    """NumPy's advanced-indexing result shape: broadcast index dims go in place
    of the indexed axes when those are adjacent, else in front."""
    b = tuple(np.broadcast_shapes(*index_shapes))
    rest = [d for i, d in enumerate(x_shape) if i not in axes]
    adjacent = list(axes) == list(range(axes[0], axes[0] + len(axes)))
    if adjacent:
        before = [d for i, d in enumerate(x_shape) if i < axes[0]]
        return tuple(before) + b + tuple(rest[len(before):])
    return b + tuple(rest)


def _check_indices(op: str, idx) -> None:
    for i in idx:
        if i.dtype.kind not in "iu":
            raise DTypeError(f"{op}: index arrays must be integers, got {i}{where()}")


def _gather_abstract(x: Aval, *idx: Aval, axes):
    _check_indices("gather", idx)
    shape = gather_shape(x.shape, [i.shape for i in idx], axes) if idx else x.shape
    broadcast_shapes("gather", idx)
    return Aval(shape, x.dtype)


def _index_tuple(ndim, idx, axes):
    key = [slice(None)] * ndim
    for axis, i in zip(axes, idx):
        key[axis] = i
    return tuple(key)


def _gather_impl(x, *idx, axes):
    x = np.asarray(x)
    return x[_index_tuple(x.ndim, idx, axes)]


def _scatter_abstract(x: Aval, v: Aval, *idx: Aval, axes):
    _check_indices("scatter", idx)
    expected = gather_shape(x.shape, [i.shape for i in idx], axes)
    if v.shape != expected:
        raise ShapeError(f"scatter: value {v} does not fit the indexed region {expected} of {x}{where()}")
    return Aval(x.shape, x.dtype)


def _scatter_impl(x, v, *idx, axes):
    out = np.array(x, copy=True)
    out[_index_tuple(out.ndim, idx, axes)] = v
    return out


def _scatter_add_impl(x, v, *idx, axes):
    out = np.array(x, copy=True)
    np.add.at(out, _index_tuple(out.ndim, idx, axes), v)
    return out


def _take_along_axis_abstract(x: Aval, idx: Aval, *, axis):
    _check_indices("take_along_axis", (idx,))
    if idx.ndim != x.ndim:
        raise ShapeError(
            f"take_along_axis: indices {idx} must have as many dimensions as the array {x}{where()}"
        )
    shape = []
    for i, (a, b) in enumerate(zip(x.shape, idx.shape)):
        if i == axis:
            shape.append(b)
        elif a == b or a == 1 or b == 1:
            shape.append(b if a == 1 else a)
        else:
            raise ShapeError(f"take_along_axis: {x} and indices {idx} do not broadcast{where()}")
    return Aval(tuple(shape), x.dtype)


def _take_along_axis_impl(x, idx, *, axis):
    return np.take_along_axis(np.asarray(x), idx, axis=axis)


def _index_errors(op: str, fn):
    """``fn`` raising IndexOutOfRangeError (a BrazeError) where NumPy raises
    IndexError: index values are only known when the program runs."""
    def impl(*args, **params):
        try:
            return fn(*args, **params)
        except IndexError as exc:
            shapes = ", ".join(f"{np.asarray(a).dtype}{list(np.shape(a))}" for a in args)
            raise IndexOutOfRangeError(
                f"{op}: {exc} (operands {shapes}){where()}; index values must lie in [-size, size) "
                "of the axis they index, as NumPy requires") from None

    impl.__name__ = fn.__name__
    return impl


_gather_impl = _index_errors("gather", _gather_impl)
_scatter_impl = _index_errors("scatter", _scatter_impl)
_scatter_add_impl = _index_errors("scatter_add", _scatter_add_impl)
_take_along_axis_impl = _index_errors("take_along_axis", _take_along_axis_impl)

def _strided_view_abstract(buf: Aval, *, offset, shape, strides):
    return Aval(tuple(shape), buf.dtype)


def _strided_view_impl(buf, *, offset, shape, strides):
    """Elements ``offset + sum(i_k * strides[k])`` of the flat ``buf``: how
    arguments that share memory are read, as views of one buffer."""
    buf = np.asarray(buf)
    item = buf.itemsize
    return np.lib.stride_tricks.as_strided(buf[offset:], tuple(shape), tuple(s * item for s in strides))


def _strided_update_abstract(buf: Aval, v: Aval, *, offset, shape, strides):
    if tuple(v.shape) != tuple(shape):
        raise ShapeError(f"strided_update: value {v} does not fit the view of shape {tuple(shape)}{where()}")
    return Aval(buf.shape, buf.dtype)


def _strided_update_impl(buf, v, *, offset, shape, strides):
    out = np.array(buf, copy=True)
    _strided_view_impl(out, offset=offset, shape=shape, strides=strides)[...] = v
    return out


def strided_indices(offset: int, shape, strides) -> np.ndarray:
    """The flat buffer index of every element of a strided view (C order)."""
    idx = np.full(tuple(shape), offset, dtype=np.intp)
    for axis, (d, s) in enumerate(zip(shape, strides)):
        idx += (np.arange(d, dtype=np.intp) * s).reshape((-1,) + (1,) * (len(shape) - axis - 1))
    return idx


declare("slice", "index", abstract=_slice_abstract, impl=_slice_impl)
declare("strided_view", "index", abstract=_strided_view_abstract, impl=_strided_view_impl)
declare("strided_update", "index", abstract=_strided_update_abstract, impl=_strided_update_impl)
declare("update_slice", "index", abstract=_update_slice_abstract, impl=_update_slice_impl)
declare("gather", "index", abstract=_gather_abstract, impl=_gather_impl)
declare("scatter", "index", abstract=_scatter_abstract, impl=_scatter_impl)
declare("scatter_add", "index", abstract=_scatter_abstract, impl=_scatter_add_impl)
declare("take_along_axis", "index", abstract=_take_along_axis_abstract, impl=_take_along_axis_impl)
