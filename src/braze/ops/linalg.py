"""Contractions: ``matmul`` (NumPy's rules, batch broadcasting) and ``einsum``.

``dot``, ``outer``, ``tensordot``-style calls are written with these in
``braze.numpy``. Targets call BLAS for them.
"""
from __future__ import annotations

import functools

import numpy as np

from ..aval import Aval
from ..core import declare
from ..errors import ShapeError, where
from ._util import dtype_error


@functools.lru_cache(maxsize=256)
def _matmul_dtype(a, b):
    return np.matmul(np.array([[1]], a), np.array([[1]], b)).dtype


def _matmul_abstract(a: Aval, b: Aval):
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(
            f"matmul: operands {a} and {b} must be at least 1-D{where()}; multiply by a scalar with *"
        )
    ashape = (1,) + a.shape if a.ndim == 1 else a.shape
    bshape = b.shape + (1,) if b.ndim == 1 else b.shape
    if ashape[-1] != bshape[-2]:
        raise ShapeError(
            f"matmul: contraction dimensions differ: {a} @ {b} contracts {ashape[-1]} with "
            f"{bshape[-2]}{where()}; the last axis of the left operand must equal the "
            "second-to-last of the right (transpose one with .T?)"
        )
    try:
        batch = tuple(np.broadcast_shapes(ashape[:-2], bshape[:-2]))
    except ValueError:
        raise ShapeError(f"matmul: batch dimensions of {a} and {b} do not broadcast{where()}") from None
    shape = batch + (ashape[-2],) * (a.ndim > 1) + (bshape[-1],) * (b.ndim > 1)
    try:
        dtype = _matmul_dtype(a.dtype, b.dtype)
    except TypeError as exc:
        raise dtype_error("matmul", (a, b), exc) from None
    return Aval(shape, dtype)


def parse_einsum(subscripts: str) -> tuple[list[str], str]:
    lhs, out = subscripts.split("->")
    return lhs.split(","), out


def _einsum_abstract(*xs: Aval, subscripts):
    ins, out = parse_einsum(subscripts)
    sizes: dict[str, int] = {}
    for spec, x in zip(ins, xs):
        if len(spec) != x.ndim:
            raise ShapeError(f"einsum: subscripts {spec!r} do not match operand {x}{where()}")
        for letter, dim in zip(spec, x.shape):
            if sizes.setdefault(letter, dim) != dim:
                raise ShapeError(
                    f"einsum {subscripts!r}: index {letter!r} has sizes {sizes[letter]} and {dim} "
                    f"in operands {', '.join(map(str, xs))}{where()}"
                )
    samples = [np.array(1, x.dtype).reshape((1,) * x.ndim) for x in xs]
    try:
        dtype = np.einsum(subscripts, *samples).dtype
    except TypeError as exc:
        raise dtype_error("einsum", xs, exc) from None
    return Aval(tuple(sizes[c] for c in out), dtype)


def _einsum_impl(*xs, subscripts):
    return np.einsum(subscripts, *xs, optimize=True)


declare("matmul", "linalg", abstract=_matmul_abstract, impl=np.matmul)
declare("einsum", "linalg", abstract=_einsum_abstract, impl=_einsum_impl)
