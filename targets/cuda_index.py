"""Index ops on the device for the ``cuda`` target: gathers (advanced
indexing, ``take_along_axis``) and ``scatter_add`` (their gradient, with
atomic adds). Index values out of range set a flag the launcher checks, and
raise ``IndexOutOfRangeError`` as NumPy raises IndexError.
"""
from __future__ import annotations

import numpy as np

from braze.errors import IndexOutOfRangeError, where
from braze.ops._util import broadcast_shape

from . import cpu_cache
from .cuda_memory import DArray, _Device, _grid, _unravel, contiguous, contiguous_copy

_TAKE_SOURCE = """import numpy as np
from numba import cuda


@cuda.jit(cache=True)
def kernel(o, x, x_o, {xstrides}i, i_o, {istrides}bad, n, {sizes}):
    e = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    st = np.int64(cuda.gridDim.x) * cuda.blockDim.x
    while e < n:
        r = e
{unravel}
        k = np.int64(i[i_o{iterms}])
        if k < 0:
            k += dx
        if k < 0 or k >= dx:
            bad[0] = 1
            k = 0
        o[e] = x[x_o{xterms} + k * xs{axis}]
        e += st
"""


def take_along_axis(dev: _Device, x: DArray, idx: DArray, axis: int, aval) -> DArray:
    """``np.take_along_axis`` on the device; an index out of range raises IndexError
    (a BrazeError), as NumPy raises."""
    out = dev.new(tuple(aval.shape), aval.dtype)
    rank = len(out.shape)
    n = out.size
    if not n:
        return out
    xs = [s if d != 1 else 0 for s, d in zip(x.strides, x.shape)]
    ist = [s if d != 1 else 0 for s, d in zip(idx.strides, idx.shape)]
    names = lambda p: "".join(f"{p}{k}, " for k in range(rank))  # noqa: E731
    src_text = _TAKE_SOURCE.format(
        xstrides=names("xs"), istrides=names("is"), sizes=", ".join(f"d{k}" for k in range(rank)) + ", dx",
        unravel=_unravel(rank), axis=axis,
        iterms="".join(f" + i{k} * is{k}" for k in range(rank)),
        xterms="".join(f" + i{k} * xs{k}" for k in range(rank) if k != axis))
    kernel = cpu_cache.load(src_text)
    bad = dev.cuda.to_device(np.zeros(1, np.int32))
    kernel[_grid(dev, n), dev.maxt](out.buf, x.buf, x.off, *xs, idx.buf, idx.off, *ist, bad, n, *out.shape,
                                    x.shape[axis])
    if (bad if isinstance(bad, np.ndarray) else bad.copy_to_host())[0]:
        raise IndexOutOfRangeError(
            f"take_along_axis: an index is out of range for axis {axis} of size {x.shape[axis]} "
            f"(array {x.dtype}{list(x.shape)}, indices {idx.dtype}{list(idx.shape)}){where()}; "
            "indices must lie in [-size, size), as NumPy requires")
    return out


def _index_kernel_source(x_rank: int, axes: tuple, b_rank: int, index_ranks: tuple, it_rank: int,
                         add: bool) -> str:
    """Source of a kernel over the elements of a gather's result (``add``: over
    the values of a scatter_add, adding them into ``o`` atomically). The
    result's dimensions are the broadcast index dimensions, where NumPy puts
    them (in place of the indexed axes when those are adjacent, else in
    front), and the other axes of ``x`` in order."""
    adjacent = list(axes) == list(range(axes[0], axes[0] + len(axes)))
    start = axes[0] if adjacent else 0
    rest = [a for a in range(x_rank) if a not in axes]
    pos = {}  # x axis -> result dimension, for the axes not indexed
    for r, a in enumerate(rest):
        pos[a] = (a if a < axes[0] else a - len(axes) + b_rank) if adjacent else b_rank + r
    lines = []
    for t, (axis, rank) in enumerate(zip(axes, index_ranks)):
        terms = "".join(f" + u{start + b_rank - rank + q} * i{t}_s{q}" for q in range(rank))
        lines += [f"k{t} = np.int64(i{t}[i{t}_o{terms}])",
                  f"if k{t} < 0:", f"    k{t} += xd{axis}",
                  f"if k{t} < 0 or k{t} >= xd{axis}:", "    bad[0] = 1", f"    k{t} = 0"]
    x_terms = "".join(f" + k{axes.index(a)} * xs{a}" if a in axes else f" + u{pos[a]} * xs{a}"
                      for a in range(x_rank))
    unravel = []
    for k in range(it_rank - 1, -1, -1):
        unravel.append(f"u{k} = r" if k == 0 else f"u{k} = r % od{k}")
        if k:
            unravel.append(f"r = r // od{k}")
    body = [f"        {line}" for line in unravel + lines]
    if add:
        body.append(f"        cuda.atomic.add(o, x_o{x_terms}, v[v_o + e])")
        head = "o, x_o, " + "".join(f"xs{a}, " for a in range(x_rank)) + "v, v_o, "
    else:
        body.append(f"        o[e] = x[x_o{x_terms}]")
        head = "o, x, x_o, " + "".join(f"xs{a}, " for a in range(x_rank))
    index_args = "".join(f"i{t}, i{t}_o, " + "".join(f"i{t}_s{q}, " for q in range(rank))
                         for t, rank in enumerate(index_ranks))
    sizes = "".join(f"od{k}, " for k in range(it_rank)) + ", ".join(f"xd{a}" for a in range(x_rank))
    return f"""import numpy as np
from numba import cuda


@cuda.jit(cache=True)
def kernel({head}{index_args}bad, n, {sizes}):
    e = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    st = np.int64(cuda.gridDim.x) * cuda.blockDim.x
    while e < n:
        r = e
{chr(10).join(body)}
        e += st
"""


def _index_args(idx: list[DArray]) -> list:
    args = []
    for i in idx:
        strides = [s if d != 1 else 0 for s, d in zip(i.strides, i.shape)]
        args += [i.buf, i.off] + strides
    return args


def gather(dev: _Device, x: DArray, idx: list[DArray], axes: tuple, aval) -> DArray:
    """``x[..., idx, ...]`` (NumPy advanced indexing on ``axes``) on the device."""
    out = dev.new(tuple(aval.shape), aval.dtype)
    if not out.size:
        _check_on_host(dev, "gather", x, idx, axes)  # no elements, but the index values must still be in range
        return out
    b_shape = broadcast_shape(*[i.shape for i in idx])
    src = _index_kernel_source(len(x.shape), tuple(axes), len(b_shape), tuple(len(i.shape) for i in idx),
                               len(out.shape), add=False)
    bad = dev.cuda.to_device(np.zeros(1, np.int32))
    xs = [s if d != 1 else 0 for s, d in zip(x.strides, x.shape)]
    cpu_cache.load(src)[_grid(dev, out.size), dev.maxt](
        out.buf, x.buf, x.off, *xs, *_index_args(idx), bad, out.size, *out.shape, *x.shape)
    _check_bad(bad, "gather", x, idx)
    return out


def scatter_add(dev: _Device, x: DArray, v: DArray, idx: list[DArray], axes: tuple, aval) -> DArray:
    """``np.add.at(copy of x, key, v)`` on the device: atomic adds, so repeated
    indices accumulate (in no fixed order: float sums may differ in the last bits)."""
    out = contiguous_copy(dev, x)
    v = contiguous(dev, v)
    if not v.size:
        _check_on_host(dev, "scatter_add", x, idx, axes)
        return out
    b_shape = broadcast_shape(*[i.shape for i in idx])
    src = _index_kernel_source(len(x.shape), tuple(axes), len(b_shape), tuple(len(i.shape) for i in idx),
                               len(v.shape), add=True)
    bad = dev.cuda.to_device(np.zeros(1, np.int32))
    cpu_cache.load(src)[_grid(dev, v.size), dev.maxt](
        out.buf, out.off, *out.strides, v.buf, v.off, *_index_args(idx), bad, v.size, *v.shape,
        *x.shape)
    _check_bad(bad, "scatter_add", x, idx)
    return out


def _check_on_host(dev: _Device, op: str, x: DArray, idx: list[DArray], axes) -> None:
    """Index values in range for their axes, checked with NumPy (for results
    without elements, where no kernel runs)."""
    for i, axis in zip(idx, axes):
        values = dev.host(i)
        if values.size and (values.min() < -x.shape[axis] or values.max() >= x.shape[axis]):
            _check_bad(np.ones(1, np.int32), op, x, idx)


def _check_bad(bad, op: str, x: DArray, idx: list[DArray]) -> None:
    if (bad if isinstance(bad, np.ndarray) else bad.copy_to_host())[0]:
        shapes = ", ".join(f"{i.dtype}{list(i.shape)}" for i in idx)
        raise IndexOutOfRangeError(
            f"{op}: an index is out of range for array {x.dtype}{list(x.shape)} (indices {shapes}){where()}; "
            "index values must lie in [-size, size) of the axis they index, as NumPy requires")
