"""Layout primitives: reshape, transpose, broadcast_to, concatenate.

Every other NumPy shape function (squeeze, expand_dims, ravel, swapaxes,
moveaxis, stack, hstack, split, ...) is written with these in ``braze.numpy``.
"""
from __future__ import annotations

import numpy as np

from ..aval import Aval
from ..core import declare
from ..errors import ShapeError, where
from ._util import describe


def _reshape_abstract(x: Aval, *, shape):
    size = int(np.prod(shape, dtype=np.int64))
    if size != x.size:
        raise ShapeError(
            f"reshape: cannot reshape {x} ({x.size} elements) into shape {shape} "
            f"({size} elements){where()}; the new shape must hold the same number of elements"
        )
    return Aval(tuple(shape), x.dtype, x.weak and not shape)


def _reshape_impl(x, *, shape):
    return np.reshape(x, shape)


def _transpose_abstract(x: Aval, *, perm):
    if sorted(perm) != list(range(x.ndim)):
        raise ShapeError(
            f"transpose: axes {perm} are not a permutation of the {x.ndim} axes of {x}{where()}"
        )
    return Aval(tuple(x.shape[p] for p in perm), x.dtype, x.weak and not perm)


def _transpose_impl(x, *, perm):
    return np.transpose(x, perm)


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


def _broadcast_to_impl(x, *, shape):
    return np.broadcast_to(x, shape)


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


def _concatenate_impl(*xs, axis):
    return np.concatenate(xs, axis=axis)


def _view_abstract(x: Aval, *, readonly=False):
    return x


def _view_impl(x, *, readonly=False):
    view = np.asarray(x).view()
    if readonly:
        view.flags.writeable = False
    return view


def _diagonal_abstract(x: Aval, *, offset, axis1, axis2):
    n1, n2 = x.shape[axis1], x.shape[axis2]
    length = max(0, min(n1, n2 - offset) if offset >= 0 else min(n1 + offset, n2))
    rest = tuple(d for i, d in enumerate(x.shape) if i not in (axis1, axis2))
    return Aval(rest + (length,), x.dtype)


def _diagonal_impl(x, *, offset, axis1, axis2):
    return np.diagonal(x, offset, axis1, axis2)  # a read-only view, as NumPy's


declare("reshape", "shape", abstract=_reshape_abstract, impl=_reshape_impl)
declare("diagonal", "shape", abstract=_diagonal_abstract, impl=_diagonal_impl)
declare("view", "shape", abstract=_view_abstract, impl=_view_impl)
declare("transpose", "shape", abstract=_transpose_abstract, impl=_transpose_impl)
declare("broadcast_to", "shape", abstract=_broadcast_to_abstract, impl=_broadcast_to_impl)
declare("concatenate", "shape", abstract=_concatenate_abstract, impl=_concatenate_impl)
