"""Layout primitives: reshape, transpose, broadcast_to, view, static slices and
their updates, concatenate.

Every other NumPy shape function (squeeze, expand_dims, ravel, swapaxes,
moveaxis, stack, split, ...) is written with these in ``braze.numpy``. Layout
ops are views as in NumPy: each says how a write through it reaches its base
(``view=``) or why it is read-only, and what strides its result has
(``strides=``, see ``braze.layout``).

``slice`` and ``update_slice`` take one normalized ``(start, stop, step)``
per axis (``braze.indexing.norm_slice``: ``stop`` is None where a negative
step runs past index 0).
"""
from __future__ import annotations

import math

import numpy as np

from .. import layout
from ..aval import Aval
from ..core import bind, declare
from ..errors import ShapeError, where
from ._util import describe
from .elementwise import convert

_VIEW_FLAGS = ("layout", "recomputable", "identity")


# ---------------------------------------------------------------- binders (the other families' rules use them)

def reshape(x, shape):
    return bind("reshape", x, shape=tuple(shape))


def transpose(x, perm):
    return bind("transpose", x, perm=tuple(int(p) for p in perm))


def broadcast_to(x, shape):
    return bind("broadcast_to", x, shape=tuple(shape))


def slice_(x, slices):
    return bind("slice", x, slices=tuple(slices))


def update_slice(x, v, slices):
    return bind("update_slice", x, v, slices=tuple(slices))


def full(shape, value, dtype):
    """``value`` broadcast to ``shape`` (a constant operand, not a buffer)."""
    return broadcast_to(np.asarray(value, dtype)[()], tuple(shape))


def shape_of(x) -> tuple:
    return tuple(x.shape) if hasattr(x, "shape") else np.shape(x)


def dtype_of(x):
    return np.dtype(x.dtype) if hasattr(x, "dtype") else np.asarray(x).dtype


def inverse(perm) -> tuple:
    return tuple(int(i) for i in np.argsort(perm))


# ---------------------------------------------------------------- reshape


def _reshape_abstract(x: Aval, *, shape):
    size = math.prod(int(d) for d in shape)
    if size != x.size:
        raise ShapeError(
            f"reshape: cannot reshape {x} ({x.size} elements) into shape {shape} "
            f"({size} elements){where()}; the new shape must hold the same number of elements"
        )
    return Aval(tuple(shape), x.dtype, x.weak and not shape)


def _reshape_strides(strides, avals, params, aval):
    view = layout.reshaped(avals[0].shape, strides[0], aval.shape)
    return view if view is not None else layout.c_strides(aval.shape)


declare("reshape", "shape", abstract=_reshape_abstract, impl=lambda x, *, shape: np.reshape(x, shape),
        vjp=lambda ct, x, *, out, shape: (reshape(ct, shape_of(x)),), flags=_VIEW_FLAGS,
        view=lambda base, value, *, shape: reshape(value, shape_of(base)), strides=_reshape_strides)

# ---------------------------------------------------------------- transpose


def _transpose_abstract(x: Aval, *, perm):
    if sorted(perm) != list(range(x.ndim)):
        raise ShapeError(
            f"transpose: axes {perm} are not a permutation of the {x.ndim} axes of {x}{where()}"
        )
    return Aval(tuple(x.shape[p] for p in perm), x.dtype, x.weak and not perm)


declare("transpose", "shape", abstract=_transpose_abstract, impl=lambda x, *, perm: np.transpose(x, perm),
        vjp=lambda ct, x, *, out, perm: (transpose(ct, inverse(perm)),), flags=_VIEW_FLAGS,
        view=lambda base, value, *, perm: transpose(value, inverse(perm)),
        strides=lambda strides, avals, params, aval: layout.permuted(strides[0], params["perm"]))

# ---------------------------------------------------------------- broadcast_to


def _broadcast_to_abstract(x: Aval, *, shape):
    ok = len(shape) >= x.ndim and all(
        d == s or d == 1 for d, s in zip(x.shape[::-1], shape[::-1])
    )
    if not ok:
        raise ShapeError(
            f"broadcast_to: cannot broadcast {x} to shape {shape}{where()}; each dimension "
            "must be equal to the target's or 1, counting from the last"
        )
    return Aval(tuple(shape), x.dtype, x.weak and not shape)


declare("broadcast_to", "shape", abstract=_broadcast_to_abstract,
        impl=lambda x, *, shape: np.broadcast_to(x, shape),
        vjp=lambda ct, x, *, out, shape: (ct,),  # (the tape sums over the broadcast axes)
        flags=_VIEW_FLAGS, view="np.broadcast_to returns a read-only view",
        strides=lambda strides, avals, params, aval: layout.broadcast(strides[0], avals[0].shape, aval.shape))

# ---------------------------------------------------------------- view


def _view_impl(x, *, readonly=False):
    view = np.asarray(x).view()
    if readonly:
        view.flags.writeable = False
    return view


declare("view", "shape", abstract=lambda x, *, readonly=False: x, impl=_view_impl,
        vjp=lambda ct, x, *, out, readonly=False: (ct,), flags=_VIEW_FLAGS,
        view=lambda base, value, *, readonly=False: value,
        strides=lambda strides, avals, params, aval: strides[0])

# ---------------------------------------------------------------- slices


def slice_length(start: int, stop, step: int) -> int:
    return len(range(start, -1 if stop is None else stop, step))


def _slices(slices):
    return tuple(slice(a, b, c) for a, b, c in slices)


def _slice_abstract(x: Aval, *, slices):
    return Aval(tuple(slice_length(*s) for s in slices), x.dtype, x.weak and not slices)


def _slice_vjp(ct, x, *, out, slices):
    return (update_slice(full(shape_of(x), 0, dtype_of(ct)), ct, slices),)


declare("slice", "index", abstract=_slice_abstract, impl=lambda x, *, slices: np.asarray(x)[_slices(slices)],
        vjp=_slice_vjp, flags=("layout", "recomputable"),
        view=lambda base, value, *, slices: update_slice(base, value, slices),
        strides=lambda strides, avals, params, aval: layout.sliced(strides[0], params["slices"]))


def _update_slice_abstract(x: Aval, v: Aval, *, slices):
    expected = tuple(slice_length(*s) for s in slices)
    if v.shape != expected:
        raise ShapeError(f"update_slice: value {v} does not fit region of shape {expected} of {x}{where()}")
    return Aval(x.shape, x.dtype)


def _update_slice_impl(x, v, *, slices):
    out = np.array(x, copy=True)
    out[_slices(slices)] = v
    return out


def _update_slice_inplace(x, v, *, slices):
    x[_slices(slices)] = v
    return x


def _update_slice_vjp(ct, x, v, *, out, slices):
    region = tuple(slice_length(*s) for s in slices)
    return update_slice(ct, full(region, 0, dtype_of(ct)), slices), slice_(ct, slices)


declare("update_slice", "index", abstract=_update_slice_abstract, impl=_update_slice_impl,
        inplace=_update_slice_inplace, vjp=_update_slice_vjp,
        strides=lambda strides, avals, params, aval: strides[0])

# ---------------------------------------------------------------- concatenate


def _concatenate_abstract(*xs: Aval, axis):
    first = xs[0]
    for x in xs:
        if x.ndim != first.ndim or any(
            a != b for i, (a, b) in enumerate(zip(x.shape, first.shape)) if i != axis
        ):
            raise ShapeError(
                f"concatenate: operands {describe(xs)} must have equal shapes except along "
                f"axis {axis}{where()}"
            )
    dtype = np.result_type(*(np.array(1, x.dtype) for x in xs))
    shape = list(first.shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    return Aval(tuple(shape), dtype)


def _concatenate_vjp(ct, *xs, out, axis):
    cts, start = [], 0
    for x in xs:
        n = shape_of(x)[axis]
        slices = tuple((start, start + n, 1) if i == axis else (0, d, 1) for i, d in enumerate(shape_of(ct)))
        cts.append(slice_(ct, slices))
        start += n
    return tuple(cts)


def _concatenate_strides(strides, avals, params, aval):
    return None if any(s is None for s in strides) else layout.k_order(aval.shape, strides)


declare("concatenate", "shape", abstract=_concatenate_abstract,
        impl=lambda *xs, axis: np.concatenate(xs, axis=axis), vjp=_concatenate_vjp, strides=_concatenate_strides)


__all__ = ["reshape", "transpose", "broadcast_to", "slice_", "update_slice", "full", "convert", "slice_length"]
