"""Hand-written ``cuda`` kernels, with backward pairs, for three ``braze.nn``
composites: ``softmax`` (last axis), ``layer_norm`` and ``softmax_cross_entropy``.

The kernels (``nn_cuda_kernels``) work one row per thread block, grid-striding
over rows when there are more than ``MAX_GRID``, with a power-of-two block
of 32..256 threads chosen here from the row length, shared-memory tree
reductions and float64 sums. Rows of up to ``CACHE_ELEMS`` elements stay in
dynamic shared memory between passes; longer rows are re-read.

Kernels take and return numba device arrays; NumPy inputs (from
``braze.verify`` and the pair-signature probe) are copied to the device
first. numba.cuda is imported, and kernels are compiled, on first use: importing
this module needs neither numba-cuda nor a GPU.

Anything a kernel's ``when=`` rejects runs the composite's body, which the
cuda target fuses itself.
"""
from __future__ import annotations

import functools

import numpy as np

from braze.registry import register_kernel

MAX_GRID = 65535  # blocks per launch; further rows are grid-strided
CACHE_ELEMS = 2048  # row values kept in shared memory between passes (16 KiB of float64)
LN_ROWS_PER_BLOCK = 64  # layer_norm's dgamma/dbeta: rows summed per block before the blocks are summed

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


@functools.cache
def _cuda():
    from numba import cuda

    return cuda


@functools.cache
def _kernels():
    from braze.kernels import nn_cuda_kernels

    return nn_cuda_kernels


def _on_device(a, dtype=None):
    """A device array as it is; anything else copied to the device (C order, ``dtype`` if given)."""
    if hasattr(a, "copy_to_host"):
        return a
    a = np.asarray(a) if dtype is None else np.asarray(a, dtype)
    return _cuda().to_device(np.ascontiguousarray(a))


def _block(n: int) -> int:
    """Threads per block for rows of ``n`` elements: a power of two, 32..256."""
    k = _kernels()
    t = k.MIN_BLOCK
    while t < n and t < k.MAX_BLOCK:
        t *= 2
    return t


def _grid(rows: int) -> int:
    return max(1, min(rows, MAX_GRID))


def _cached(n: int, arrays: int = 1) -> bool:
    return arrays * n <= CACHE_ELEMS


def _launch(name, dtype, grid, block, shared_elems, *args):
    T = block if isinstance(block, int) else block[0]
    shared = shared_elems * np.dtype(dtype).itemsize
    _kernels().kernel(name, T, dtype)[grid, block, 0, shared](*args)


# ---------------------------------------------------------------- host side: the pairs

def _rows_of(shape) -> tuple[int, int]:
    """(rows, row length) of an array reduced over its last axis."""
    shape = tuple(shape)  # the simulator's shapes take no negative index
    return int(np.prod(shape[:-1], dtype=np.int64)), shape[-1]


def _is_float(a) -> bool:
    return np.dtype(a.dtype) in _FLOATS


def _softmax_when(x, *, axis=-1):
    return x.ndim >= 1 and _is_float(x) and axis in (-1, x.ndim - 1)


def softmax_forward(x, *, axis=-1):
    """``braze.nn.softmax`` over the last axis; residuals: ``(y,)``."""
    x = _on_device(x)
    y = _cuda().device_array(x.shape, x.dtype)
    rows, n = _rows_of(x.shape)
    if rows and n:
        cache = _cached(n)
        T = _block(n)
        _launch("softmax_rows", x.dtype, _grid(rows), T, n if cache else 0,
                x.reshape(rows, n), y.reshape(rows, n), cache)
    return y, (y,)


def softmax_backward(residuals, g, *, axis=-1):
    (y,) = residuals
    g = _on_device(np.broadcast_to(g, y.shape) if not hasattr(g, "copy_to_host") else g, y.dtype)
    dx = _cuda().device_array(y.shape, y.dtype)
    rows, n = _rows_of(y.shape)
    if rows and n:
        cache = _cached(n, 2)
        T = _block(n)
        _launch("softmax_grad_rows", y.dtype, _grid(rows), T, 2 * n if cache else 0,
                y.reshape(rows, n), g.reshape(rows, n), dx.reshape(rows, n), cache)
    return (dx,)


def _layer_norm_when(x, gamma, beta, *, eps=1e-5):
    return (x.ndim >= 1 and _is_float(x) and np.dtype(gamma.dtype) == np.dtype(x.dtype) == np.dtype(beta.dtype)
            and tuple(gamma.shape) == tuple(beta.shape) == (x.shape[-1],))


def layer_norm_forward(x, gamma, beta, *, eps=1e-5):
    """``braze.nn.layer_norm``; residuals: ``(x, gamma, mean, rstd)``, the last two per row."""
    cuda = _cuda()
    x, gamma, beta = _on_device(x), _on_device(gamma), _on_device(beta)
    rows, n = _rows_of(x.shape)
    y = cuda.device_array(x.shape, x.dtype)
    if not n:  # no elements to normalize: the body's mean is NaN
        nan = cuda.to_device(np.full(rows, np.nan, x.dtype))
        return y, (x, gamma, nan, nan)
    mean, rstd = cuda.device_array(rows, x.dtype), cuda.device_array(rows, x.dtype)
    if rows:
        cache = _cached(n)
        T = _block(n)
        _launch("layer_norm_rows", x.dtype, _grid(rows), T, n if cache else 0, x.reshape(rows, n),
                gamma, beta, np.dtype(x.dtype).type(eps), y.reshape(rows, n), mean, rstd, cache)
    return y, (x, gamma, mean, rstd)


def layer_norm_backward(residuals, g, *, eps=1e-5):
    cuda = _cuda()
    x, gamma, mean, rstd = residuals
    dtype = np.dtype(x.dtype)
    g = _on_device(np.broadcast_to(g, x.shape) if not hasattr(g, "copy_to_host") else g, dtype)
    rows, n = _rows_of(x.shape)
    dx = cuda.device_array(x.shape, dtype)
    if not (rows and n):
        zeros = cuda.to_device(np.zeros(n, dtype))
        return dx, zeros, cuda.to_device(np.zeros(n, dtype))
    x2, g2 = x.reshape(rows, n), g.reshape(rows, n)
    cache = _cached(n, 2)
    T = _block(n)
    _launch("layer_norm_grad_rows", dtype, _grid(rows), T, 2 * n if cache else 0,
            x2, g2, gamma, mean, rstd, dx.reshape(rows, n), cache)
    parts = max(1, min(-(-rows // LN_ROWS_PER_BLOCK), MAX_GRID))
    part_g, part_gx = cuda.device_array((parts, n), np.float64), cuda.device_array((parts, n), np.float64)
    _launch("layer_norm_grad_columns", dtype, (-(-n // 32), parts), (32, _kernels().LN_ROWS), 0,
            x2, g2, mean, rstd, part_g, part_gx)
    dgamma, dbeta = cuda.device_array(n, dtype), cuda.device_array(n, dtype)
    T = _kernels().MAX_BLOCK
    _launch("column_totals", dtype, -(-n // T), T, 0, part_g, part_gx, dgamma, dbeta)
    return dx, dgamma, dbeta


def _xent_when(logits, labels):
    return (logits.ndim == 2 and _is_float(logits) and labels.ndim == 1
            and np.dtype(labels.dtype).kind in "iu" and labels.shape[0] == logits.shape[0])


def xent_forward(logits, labels):
    """``braze.nn.softmax_cross_entropy``: the mean loss as a 0-d device array;
    residuals: ``(logits, labels, row max, row log-sum-exp minus max)``."""
    cuda = _cuda()
    x, labels = _on_device(logits), _on_device(labels)
    dtype = np.dtype(x.dtype)
    rows, n = tuple(x.shape)
    mx, logsum = cuda.device_array(rows, dtype), cuda.device_array(rows, dtype)
    if not (rows and n):  # the mean of nothing, as NumPy: NaN
        return cuda.to_device(np.array(np.nan, dtype)), (x, labels, mx, logsum)
    loss = cuda.device_array(rows, np.float64)
    cache = _cached(n)
    T = _block(n)
    _launch("xent_rows", dtype, _grid(rows), T, n if cache else 0, x, labels, loss, mx, logsum, cache)
    out = cuda.device_array(1, dtype)
    _launch("mean_all", dtype, 1, _block(rows), 0, loss, out)
    return out.reshape(()), (x, labels, mx, logsum)


def xent_backward(residuals, g):
    cuda = _cuda()
    x, labels, mx, logsum = residuals
    dtype = np.dtype(x.dtype)
    g = g.reshape(1) if hasattr(g, "copy_to_host") else _on_device(np.reshape(g, 1), dtype)
    rows, n = tuple(x.shape)
    dx = cuda.device_array(x.shape, dtype)
    if rows and n:
        _launch("xent_grad_rows", dtype, _grid(rows), _block(n), 0, x, labels, mx, logsum, g, dx)
    return dx, None


def _same(x, *_, **__):
    return tuple(x.shape), x.dtype


register_kernel("braze.nn.softmax", "cuda", fn=softmax_forward, when=_softmax_when,
               backward=softmax_backward, abstract=_same)
register_kernel("braze.nn.layer_norm", "cuda", fn=layer_norm_forward, when=_layer_norm_when,
               backward=layer_norm_backward, abstract=_same)
register_kernel("braze.nn.softmax_cross_entropy", "cuda", fn=xent_forward, when=_xent_when,
               backward=xent_backward, abstract=lambda logits, labels: ((), logits.dtype))

