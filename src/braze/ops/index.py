"""Indexing primitives: gathers by integer arrays and their updates, strided views
of a flat buffer (arguments that share memory), and diagonals.

``gather``/``scatter`` index the axes in ``axes`` with integer arrays, with
NumPy's advanced-indexing rule for where the broadcast index dimensions go.
Everything NumPy's ``__getitem__``/``__setitem__`` accept is reduced to these
and to the static slices of ``ops/shape.py`` in ``braze.indexing``.
"""
from __future__ import annotations

import numpy as np

from .. import layout
from ..aval import Aval
from ..core import NONDIFFERENTIABLE, bind, declare
from ..errors import (GuardFailed, IndexOutOfRangeError, IndexShapeError, IndexTypeError, ShapeError,
                      where)
from ._util import broadcast_shapes
from .elementwise import convert, equal, less, where as select
from .shape import broadcast_to, dtype_of, full, reshape, shape_of, transpose


def gather(x, *idx, axes):
    return bind("gather", x, *idx, axes=tuple(axes))


def scatter_add(x, v, *idx, axes):
    return bind("scatter_add", x, v, *idx, axes=tuple(axes))


def gather_shape(x_shape, index_shapes, axes) -> tuple[int, ...]:
    """NumPy's advanced-indexing result shape: broadcast index dims go in place
    of the indexed axes when those are adjacent, else in front."""
    try:
        b = tuple(np.broadcast_shapes(*index_shapes))
    except ValueError:
        shown = " ".join(str(tuple(s)) for s in index_shapes)
        raise IndexShapeError(f"shape mismatch: indexing arrays could not be broadcast together with shapes "
                              f"{shown}{where()}; a boolean mask selects as many positions as it has True "
                              "values, which must match the other index arrays' length") from None
    rest = [d for i, d in enumerate(x_shape) if i not in axes]
    adjacent = list(axes) == list(range(axes[0], axes[0] + len(axes)))
    if adjacent:
        before = [d for i, d in enumerate(x_shape) if i < axes[0]]
        return tuple(before) + b + tuple(rest[len(before):])
    return b + tuple(rest)


def _check_indices(op: str, idx) -> None:
    for i in idx:
        if i.dtype.kind not in "iu":
            raise IndexTypeError(f"{op}: index arrays must be integers, got {i}{where()}")  # (NumPy's IndexError)


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
    if len(idx) == 1:
        # One index array: np.take is NumPy's indexing with the same result and
        # errors (negative indices wrap, out of range raises IndexError), and
        # 10-30x faster than ``x[:, i]``/``x[i, :]`` through the general path
        # (rows of a (400000, 4) array by 52k indices: 0.08 ms against 2.2 ms).
        return np.take(x, idx[0], axis=axes[0])
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
            raise IndexShapeError(f"take_along_axis: {x} and indices {idx} do not broadcast{where()}")
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




def _scatter_inplace(x, v, *idx, axes):
    x[_index_tuple(x.ndim, idx, axes)] = v
    return x


_scatter_inplace = _index_errors("scatter", _scatter_inplace)


def _gather_vjp(ct, x, *idx, out, axes):
    return (scatter_add(full(shape_of(x), 0, dtype_of(ct)), ct, *idx, axes=axes),) + (None,) * len(idx)


def _scatter_add_vjp(ct, x, v, *idx, out, axes):
    return (ct, gather(ct, *idx, axes=axes)) + (None,) * len(idx)


def _scatter_vjp(ct, x, v, *idx, out, axes):
    # Positions written get their cotangent from the value, the rest from x.
    # With repeated indices the value written last is the one that stays (NumPy's
    # order, which the forward scatter follows): it alone gets the cotangent. Which
    # one that is, the same scatter says: each value's number, scattered and read back.
    dx = bind("scatter", ct, full(shape_of(v), 0, dtype_of(ct)), *idx, axes=axes)
    numbers = np.arange(int(np.prod(shape_of(v), dtype=np.int64)), dtype=np.int64).reshape(shape_of(v))
    kept = gather(bind("scatter", full(shape_of(ct), -1, np.int64), numbers, *idx, axes=axes), *idx, axes=axes)
    dv = select(equal(kept, numbers), gather(ct, *idx, axes=axes), 0)
    return (dx, dv) + (None,) * len(idx)


def _take_along_axis_vjp(ct, x, idx, *, out, axis):
    shape = shape_of(x)
    n = shape[axis]
    if shape_of(idx)[axis] == 1:
        # One index per line (a label per row): a one-hot comparison that
        # fuses with the rest of the backward pass into one loop.
        # Indices are in [-n, n) (the forward checked), so int32 holds them when
        # n does: a 32-bit compare vectorizes with the float32 select (2x faster).
        itype = np.int32 if n < 2**31 else np.intp
        iota = np.arange(n, dtype=itype).reshape(tuple(n if i == axis else 1 for i in range(len(shape))))
        idx = convert(select(less(idx, 0), idx + n, idx), itype)
        return select(equal(iota, idx), ct, 0), None
    # General case: scatter-add into zeros, with the other axes indexed by ranges.
    ishape = shape_of(idx)
    whole = tuple(d if i == axis else max(d, s) for i, (d, s) in enumerate(zip(ishape, shape)))
    index = []
    for i, d in enumerate(whole):
        if i == axis:
            index.append(broadcast_to(select(less(idx, 0), idx + n, idx), whole))
        else:
            index.append(np.broadcast_to(np.arange(d, dtype=np.intp).reshape(
                tuple(d if j == i else 1 for j in range(len(whole)))), whole))
    return scatter_add(full(shape, 0, dtype_of(ct)), broadcast_to(ct, whole), *index,
                       axes=tuple(range(len(whole)))), None


def _strided_view_vjp(ct, buf, *, out, offset, shape, strides):
    idx = strided_indices(offset, shape, strides).reshape(-1)  # views may overlap themselves: add
    return (scatter_add(full(shape_of(buf), 0, dtype_of(ct)), reshape(ct, (-1,)), idx, axes=(0,)),)


def _strided_update_vjp(ct, buf, v, *, out, offset, shape, strides):
    dbuf = bind("strided_update", ct, full(tuple(shape), 0, dtype_of(ct)), offset=offset, shape=shape,
                strides=strides)
    return dbuf, bind("strided_view", ct, offset=offset, shape=shape, strides=strides)


# ---------------------------------------------------------------- diagonal


def _diagonal_abstract(x: Aval, *, offset, axis1, axis2):
    n1, n2 = x.shape[axis1], x.shape[axis2]
    length = max(0, min(n1, n2 - offset) if offset >= 0 else min(n1 + offset, n2))
    rest = tuple(d for i, d in enumerate(x.shape) if i not in (axis1, axis2))
    return Aval(rest + (length,), x.dtype)


def _diagonal_vjp(ct, x, *, out, offset, axis1, axis2):
    # grad[..., i, j] = ct[..., i'] on the diagonal j - i = offset, 0 elsewhere
    shape = shape_of(x)
    n1, n2 = shape[axis1], shape[axis2]
    length = shape_of(ct)[-1]
    rest = shape_of(ct)[:-1]
    if length == 0:
        return (full(shape, 0, dtype_of(ct)),)
    i, j = np.indices((n1, n2))
    index = np.clip(np.where(offset >= 0, i, j), 0, length - 1)
    on = (j - i) == offset
    picked = gather(ct, index, axes=(len(rest),))  # (rest..., n1, n2)
    grad = select(on, picked, 0)
    nd = len(shape)
    order = [k for k in range(nd) if k not in (axis1, axis2)]
    perm = [0] * nd  # grad's axes are (rest..., axis1, axis2): put them back
    for pos, k in enumerate(order + [axis1, axis2]):
        perm[k] = pos
    return (transpose(grad, perm),)


def _diagonal_strides(strides, avals, params, aval):
    src = strides[0]
    if src is None:
        return None
    a1, a2 = params["axis1"], params["axis2"]
    return tuple(s for i, s in enumerate(src) if i not in (a1, a2)) + (src[a1] + src[a2],)


# ---- boolean-mask selection: a result whose length depends on the data

def compress(x, mask, *, length):
    """``x[mask]`` for a boolean ``mask`` of ``x``'s shape, or of its leading
    axes (rows, ``X[labels == k]``): the selected elements (or rows) in C
    order. Tracing saw ``length`` of them; a call selecting another number
    raises GuardFailed (the program is traced again for it)."""
    return bind("compress", x, mask, length=int(length))


def expand(v, mask):
    """Zeros of ``mask``'s shape (and ``v``'s trailing axes) with ``v`` at its
    true positions (C order): the transpose of ``compress``."""
    return bind("expand", v, mask)


def _compress_abstract(x: Aval, mask: Aval, *, length):
    if mask.dtype != np.bool_ or not 1 <= mask.ndim <= x.ndim or tuple(mask.shape) != tuple(x.shape[:mask.ndim]):
        raise ShapeError(f"compress: the mask must be bool of the array's shape or of its leading axes, got "
                         f"{mask} for {x}{where()}")
    return Aval((length,) + tuple(x.shape[mask.ndim:]), x.dtype)


def _compress_impl(x, mask, *, length):
    mask = np.asarray(mask)
    picked = np.flatnonzero(mask)  # (NumPy's x[mask] is 4x slower than finding the positions first)
    if len(picked) != length:
        raise GuardFailed(f"a boolean mask selected {len(picked)} elements; traced with {length}")
    x = np.asarray(x)
    return np.take(x.reshape((-1,) + x.shape[mask.ndim:]), picked, axis=0)


def _compress_vjp(ct, x, mask, *, out, length):
    return expand(ct, mask), None


def _expand_abstract(v: Aval, mask: Aval):
    if mask.dtype != np.bool_ or v.ndim < 1 or mask.ndim < 1:
        raise ShapeError(f"expand: takes a value of rows and a bool mask, got {v} and {mask}{where()}")
    return Aval(tuple(mask.shape) + tuple(v.shape[1:]), v.dtype)


def _expand_impl(v, mask):
    mask, v = np.asarray(mask), np.asarray(v)
    n = int(np.count_nonzero(mask))
    if n != len(v):  # (a cotangent that needs no forward value can run before the compress's guard)
        raise GuardFailed(f"a boolean mask selected {n} elements; traced with {len(v)}")
    out = np.zeros(mask.shape + v.shape[1:], v.dtype)
    out[mask] = v
    return out


def _expand_vjp(ct, v, mask, *, out):
    return compress(ct, mask, length=shape_of(v)[0]), None


declare("compress", "index", abstract=_compress_abstract, impl=_compress_impl, vjp=_compress_vjp)
declare("expand", "index", abstract=_expand_abstract, impl=_expand_impl, vjp=_expand_vjp)
declare("gather", "index", abstract=_gather_abstract, impl=_gather_impl, vjp=_gather_vjp)
declare("scatter", "index", abstract=_scatter_abstract, impl=_scatter_impl, vjp=_scatter_vjp,
        inplace=_scatter_inplace, strides=lambda strides, avals, params, aval: strides[0])
declare("scatter_add", "index", abstract=_scatter_abstract, impl=_scatter_add_impl, vjp=_scatter_add_vjp,
        strides=lambda strides, avals, params, aval: strides[0])
declare("take_along_axis", "index", abstract=_take_along_axis_abstract, impl=_take_along_axis_impl,
        vjp=_take_along_axis_vjp)
declare("strided_view", "index", abstract=_strided_view_abstract, impl=_strided_view_impl,
        vjp=_strided_view_vjp, flags=("layout",),
        view=lambda base, value, **params: bind("strided_update", base, value, **params),
        strides=lambda strides, avals, params, aval: tuple(params["strides"]))
declare("strided_update", "index", abstract=_strided_update_abstract, impl=_strided_update_impl,
        vjp=_strided_update_vjp, strides=lambda strides, avals, params, aval: strides[0])
declare("diagonal", "shape", abstract=_diagonal_abstract,
        impl=lambda x, *, offset, axis1, axis2: np.diagonal(x, offset, axis1, axis2),  # read-only, as NumPy's
        vjp=_diagonal_vjp, flags=("layout",), view="np.diagonal returns a read-only view", strides=_diagonal_strides)


# ---------------------------------------------------------------- argsort
# NumPy's argsort, on every target (an extern).


def _argsort_abstract(x: Aval, *, axis, kind):
    if x.ndim == 0:
        raise ShapeError(f"argsort: a 0-d array has no axis to sort along{where()}")
    return Aval(x.shape, np.dtype(np.intp))


def _argsort_impl(x, *, axis, kind):
    return np.argsort(x, axis=axis, kind=kind)  # (NumPy's algorithm: ties ordered as NumPy orders them)


declare("argsort", "index", abstract=_argsort_abstract, impl=_argsort_impl, vjp=NONDIFFERENTIABLE)


# ``np.sort`` itself (its SIMD sorts: a gather of argsort was 3.5-7.7x slower on
# 1e6 elements, and left -0.0 and 0.0 in another order than np.sort leaves them);
# its gradient is the gather's, by the argsort of the same values.


def _sort_abstract(x: Aval, *, axis, kind):
    if x.ndim == 0:
        raise ShapeError(f"sort: a 0-d array has no axis to sort along{where()}")
    return Aval(x.shape, x.dtype)


def _sort_impl(x, *, axis, kind):
    return np.sort(x, axis=axis, kind=kind)


def _sort_vjp(ct, x, *, out, axis, kind):
    perm = bind("argsort", x, axis=axis, kind=kind)
    return (_take_along_axis_vjp(ct, x, perm, out=out, axis=axis)[0],)


declare("sort", "index", abstract=_sort_abstract, impl=_sort_impl, vjp=_sort_vjp)


def _argpartition_abstract(x: Aval, *, kth, axis, kind):
    if x.ndim == 0:
        raise ShapeError(f"argpartition: a 0-d array has no axis to partition along{where()}")
    return Aval(x.shape, np.dtype(np.intp))


def _argpartition_impl(x, *, kth, axis, kind):
    # (NumPy's introselect; a gather of its result equals np.partition, ties and NaNs included)
    return np.argpartition(x, list(kth), axis=axis, kind=kind)


def _partition_abstract(x: Aval, *, kth, axis, kind):
    if x.ndim == 0:
        raise ShapeError(f"partition: a 0-d array has no axis to partition along{where()}")
    return x


def _partition_vjp(ct, x, *, out, kth, axis, kind):
    """Each result is some element of ``x`` with its value: pair them by stable
    rank (equal values, NaNs too, pair in order: at a tie any pairing is a
    subgradient), and send each cotangent back to its element."""
    from_x, from_out = np.argsort(x, axis=axis, kind="stable"), np.argsort(out, axis=axis, kind="stable")
    where_out = np.take_along_axis(from_out, np.argsort(from_x, axis=axis, kind="stable"), axis)
    return (np.take_along_axis(ct, where_out, axis),)


declare("argpartition", "index", abstract=_argpartition_abstract, impl=_argpartition_impl, vjp=NONDIFFERENTIABLE)
# (np.partition itself: a gather of argpartition differs from it where NaNs are)
declare("partition", "index", abstract=_partition_abstract, vjp=_partition_vjp,
        impl=lambda x, *, kth, axis, kind: np.partition(x, list(kth), axis=axis, kind=kind))
