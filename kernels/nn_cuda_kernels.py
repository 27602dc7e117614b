"""The numba.cuda kernels behind ``braze.kernels.nn_cuda`` (device code only).

Every kernel works one row per thread block, grid-striding over rows
(``r += gridDim.x``), with a power-of-two block of ``T`` threads fixed when
the kernel is built. Thread ``t`` handles elements ``t, t+T, ...`` so every
pass over a row is coalesced; every reduction is a shared-memory tree over
the block (``log2(T)`` barriers; the simulator has no warp shuffles). Rows
flagged ``cache`` are kept in dynamic shared memory between passes: each
thread reads back only the elements it wrote, so the cache needs no barrier.
Sums accumulate in float64 (also for float32 data); everything else is
computed in the data's dtype, in the order of the composite's body, so NaN
and inf come out as NumPy gives them. Results of ``math`` functions are cast
back to the dtype: the simulator's ``math.exp`` returns a Python float.

Importing this module imports numba.cuda (``braze.kernels.nn_cuda`` imports
it on first use). ``cuda`` must stay a module global: the simulator swaps
the globals that name numba.cuda for its fake module while a kernel runs.
"""
from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda

MIN_BLOCK, MAX_BLOCK = 32, 256
LN_ROWS = 8  # layer_norm's dgamma/dbeta kernel: blocks of 32 columns x LN_ROWS rows

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_KERNELS: dict = {}


@functools.cache
def _reducers(T: int):
    """Block-wide reductions over a shared float64 array of ``T`` (``red2``: a second
    one, for two sums in one tree). Each ends with a barrier, so the arrays can be
    reused at once."""

    @cuda.jit(device=True)
    def block_max(red, t, v):
        red[t] = v
        cuda.syncthreads()
        s = T // 2
        while s > 0:
            if t < s:
                a, b = red[t], red[t + s]
                red[t] = b if (b > a or math.isnan(b)) else a  # NaN wins, as in NumPy's max
            cuda.syncthreads()
            s //= 2
        r = red[0]
        cuda.syncthreads()
        return r

    @cuda.jit(device=True)
    def block_sum(red, t, v):
        red[t] = v
        cuda.syncthreads()
        s = T // 2
        while s > 0:
            if t < s:
                red[t] += red[t + s]
            cuda.syncthreads()
            s //= 2
        r = red[0]
        cuda.syncthreads()
        return r

    @cuda.jit(device=True)
    def block_sum2(red, red2, t, v, w):
        red[t] = v
        red2[t] = w
        cuda.syncthreads()
        s = T // 2
        while s > 0:
            if t < s:
                red[t] += red[t + s]
                red2[t] += red2[t + s]
            cuda.syncthreads()
            s //= 2
        r, r2 = red[0], red2[0]
        cuda.syncthreads()
        return r, r2

    return block_max, block_sum, block_sum2


def _types(dtype):
    from numba import from_dtype, types

    dtype = np.dtype(dtype)
    return from_dtype(dtype), dtype.type, types.float64, dtype.type(-np.inf)


@functools.cache
def _row_max(T: int, dtype):
    """The first pass of softmax and cross-entropy: the max of row ``r`` (NaN
    wins, as in NumPy's max), the row stored in ``row`` when ``cache``."""
    block_max, _, _ = _reducers(T)
    _, cast, _, neg_inf = _types(dtype)

    @cuda.jit(device=True)
    def row_max(x, r, row, cache, red, t):
        n = x.shape[1]
        m = neg_inf
        i = t
        while i < n:
            v = x[r, i]
            if cache:
                row[i] = v
            if v > m or math.isnan(v):
                m = v
            i += T
        return cast(block_max(red, t, m))

    return row_max


def _softmax_rows(T, dtype):
    """y[r] = softmax(x[r]); ``cache``: the row fits in the dynamic shared memory."""
    _, block_sum, _ = _reducers(T)
    row_max = _row_max(T, np.dtype(dtype))
    nbtype, cast, f64, _ = _types(dtype)

    def softmax_rows(x, y, cache):
        red = cuda.shared.array(T, f64)
        row = cuda.shared.array(0, nbtype)
        t = np.int64(cuda.threadIdx.x)
        rows, n = x.shape
        r = np.int64(cuda.blockIdx.x)
        while r < rows:
            m = row_max(x, r, row, cache, red, t)
            s = 0.0
            i = t
            while i < n:
                e = cast(math.exp((row[i] if cache else x[r, i]) - m))
                if cache:
                    row[i] = e
                s += e
                i += T
            total = cast(block_sum(red, t, s))
            i = t
            while i < n:
                e = row[i] if cache else cast(math.exp(x[r, i] - m))
                y[r, i] = e / total
                i += T
            r += cuda.gridDim.x

    return softmax_rows


def _softmax_grad_rows(T, dtype):
    """dx[r] = y[r] * (g[r] - sum(g[r] * y[r])); the cache holds y then g."""
    _, block_sum, _ = _reducers(T)
    nbtype, cast, f64, _ = _types(dtype)

    def softmax_grad_rows(y, g, dx, cache):
        red = cuda.shared.array(T, f64)
        row = cuda.shared.array(0, nbtype)
        t = np.int64(cuda.threadIdx.x)
        rows, n = y.shape
        r = np.int64(cuda.blockIdx.x)
        while r < rows:
            s = 0.0
            i = t
            while i < n:
                yv, gv = y[r, i], cast(g[r, i])
                if cache:
                    row[i] = yv
                    row[n + i] = gv
                s += yv * gv
                i += T
            dot = cast(block_sum(red, t, s))
            i = t
            while i < n:
                if cache:
                    yv, gv = row[i], row[n + i]
                else:
                    yv, gv = y[r, i], cast(g[r, i])
                dx[r, i] = yv * (gv - dot)
                i += T
            r += cuda.gridDim.x

    return softmax_grad_rows


def _layer_norm_rows(T, dtype):
    """y[r] = (x[r] - mu) / sqrt(var + eps) * gamma + beta, two-pass mean and
    variance as the body; saves mu and rstd = 1 / sqrt(var + eps) per row."""
    _, block_sum, _ = _reducers(T)
    nbtype, cast, f64, _ = _types(dtype)

    def layer_norm_rows(x, gamma, beta, eps, y, mean, rstd, cache):
        red = cuda.shared.array(T, f64)
        row = cuda.shared.array(0, nbtype)
        t = np.int64(cuda.threadIdx.x)
        rows, n = x.shape
        r = np.int64(cuda.blockIdx.x)
        while r < rows:
            s = 0.0
            i = t
            while i < n:
                v = x[r, i]
                if cache:
                    row[i] = v
                s += v
                i += T
            mu = cast(block_sum(red, t, s) / n)
            q = 0.0
            i = t
            while i < n:
                d = (row[i] if cache else x[r, i]) - mu
                q += d * d
                i += T
            den = cast(math.sqrt(cast(block_sum(red, t, q) / n) + eps))
            i = t
            while i < n:
                v = row[i] if cache else x[r, i]
                y[r, i] = (v - mu) / den * gamma[i] + beta[i]
                i += T
            if t == 0:
                mean[r] = mu
                rstd[r] = cast(1.0) / den
            r += cuda.gridDim.x

    return layer_norm_rows


def _layer_norm_grad_rows(T, dtype):
    """dx[r] = rstd * (dxh - mean(dxh) - xh * mean(dxh * xh)) with xh the
    normalized row and dxh = g * gamma; the cache holds xh then dxh."""
    _, _, block_sum2 = _reducers(T)
    nbtype, cast, f64, _ = _types(dtype)

    def layer_norm_grad_rows(x, g, gamma, mean, rstd, dx, cache):
        red = cuda.shared.array(T, f64)
        red2 = cuda.shared.array(T, f64)
        row = cuda.shared.array(0, nbtype)
        t = np.int64(cuda.threadIdx.x)
        rows, n = x.shape
        r = np.int64(cuda.blockIdx.x)
        while r < rows:
            mu, rs = mean[r], rstd[r]
            a = 0.0
            b = 0.0
            i = t
            while i < n:
                xh = (x[r, i] - mu) * rs
                dxh = cast(g[r, i]) * gamma[i]
                if cache:
                    row[i] = xh
                    row[n + i] = dxh
                a += dxh
                b += dxh * xh
                i += T
            a, b = block_sum2(red, red2, t, a, b)
            ma, mb = cast(a / n), cast(b / n)
            i = t
            while i < n:
                if cache:
                    xh, dxh = row[i], row[n + i]
                else:
                    xh, dxh = (x[r, i] - mu) * rs, cast(g[r, i]) * gamma[i]
                dx[r, i] = rs * (dxh - ma - xh * mb)
                i += T
            r += cuda.gridDim.x

    return layer_norm_grad_rows


def _layer_norm_grad_columns(T, dtype):
    """Partial column sums of g and g * xh over a slice of rows: block (32,
    LN_ROWS) covers 32 columns, coalesced along each row; blockIdx.y picks the
    slice (rows by, by + gridDim.y, ... in steps of LN_ROWS)."""
    _, cast, f64, _ = _types(dtype)
    R = LN_ROWS

    def layer_norm_grad_columns(x, g, mean, rstd, part_g, part_gx):
        red = cuda.shared.array((R, 32), f64)
        red2 = cuda.shared.array((R, 32), f64)
        tx, ty = np.int64(cuda.threadIdx.x), np.int64(cuda.threadIdx.y)
        rows, n = x.shape
        c = np.int64(cuda.blockIdx.x) * 32 + tx
        sg = 0.0
        sgx = 0.0
        if c < n:
            r = np.int64(cuda.blockIdx.y) * R + ty
            while r < rows:
                gv = cast(g[r, c])
                sg += gv
                sgx += gv * ((x[r, c] - mean[r]) * rstd[r])
                r += np.int64(cuda.gridDim.y) * R
        red[ty, tx] = sg
        red2[ty, tx] = sgx
        cuda.syncthreads()
        s = R // 2
        while s > 0:
            if ty < s:
                red[ty, tx] += red[ty + s, tx]
                red2[ty, tx] += red2[ty + s, tx]
            cuda.syncthreads()
            s //= 2
        if ty == 0 and c < n:
            part_g[cuda.blockIdx.y, c] = red[0, tx]
            part_gx[cuda.blockIdx.y, c] = red2[0, tx]

    return layer_norm_grad_columns


def _column_totals(T, dtype):
    """dbeta[c] = sum of part_g[:, c], dgamma[c] = sum of part_gx[:, c]; a thread per column."""
    _, cast, _, _ = _types(dtype)

    def column_totals(part_g, part_gx, dgamma, dbeta):
        c = np.int64(cuda.blockIdx.x) * T + np.int64(cuda.threadIdx.x)
        parts, n = part_g.shape
        if c < n:
            sg = 0.0
            sgx = 0.0
            for p in range(parts):
                sg += part_g[p, c]
                sgx += part_gx[p, c]
            dbeta[c] = cast(sg)
            dgamma[c] = cast(sgx)

    return column_totals


def _xent_rows(T, dtype):
    """Per row: m = max, logs = log(sum(exp(x - m))), loss = logs + m - x[label]
    (float64, for the mean). A label outside [-C, C) gives NaN (NumPy raises)."""
    _, block_sum, _ = _reducers(T)
    row_max = _row_max(T, np.dtype(dtype))
    nbtype, cast, f64, _ = _types(dtype)

    def xent_rows(x, labels, loss, mx, logsum, cache):
        red = cuda.shared.array(T, f64)
        row = cuda.shared.array(0, nbtype)
        t = np.int64(cuda.threadIdx.x)
        rows, n = x.shape
        r = np.int64(cuda.blockIdx.x)
        while r < rows:
            m = row_max(x, r, row, cache, red, t)
            s = 0.0
            i = t
            while i < n:
                s += cast(math.exp((row[i] if cache else x[r, i]) - m))
                i += T
            lg = cast(math.log(cast(block_sum(red, t, s))))
            if t == 0:
                label = np.int64(labels[r])
                if label < 0:
                    label += n
                picked = x[r, label] if label >= 0 and label < n else cast(np.nan)
                loss[r] = (lg + m) - picked
                mx[r] = m
                logsum[r] = lg
            r += cuda.gridDim.x

    return xent_rows


def _mean_all(T, dtype):
    """out[0] = mean(v) over a float64 vector, by one block."""
    _, block_sum, _ = _reducers(T)
    _, cast, f64, _ = _types(dtype)

    def mean_all(v, out):
        red = cuda.shared.array(T, f64)
        t = np.int64(cuda.threadIdx.x)
        n = v.shape[0]
        s = 0.0
        i = t
        while i < n:
            s += v[i]
            i += T
        s = block_sum(red, t, s)
        if t == 0:
            out[0] = cast(s / n)

    return mean_all


def _xent_grad_rows(T, dtype):
    """dx[r, i] = (exp(x - m - logs) - [i == label]) * g / N."""
    _, cast, _, _ = _types(dtype)

    def xent_grad_rows(x, labels, mx, logsum, g, dx):
        t = np.int64(cuda.threadIdx.x)
        rows, n = x.shape
        scale = cast(cast(g[0]) / rows)
        r = np.int64(cuda.blockIdx.x)
        while r < rows:
            label = np.int64(labels[r])
            if label < 0:
                label += n
            m, lg = mx[r], logsum[r]
            i = t
            while i < n:
                p = cast(math.exp((x[r, i] - m) - lg))
                dx[r, i] = (p - cast(1.0) if i == label else p) * scale
                i += T
            r += cuda.gridDim.x

    return xent_grad_rows


_BUILDERS = {
    "softmax_rows": _softmax_rows,
    "softmax_grad_rows": _softmax_grad_rows,
    "layer_norm_rows": _layer_norm_rows,
    "layer_norm_grad_rows": _layer_norm_grad_rows,
    "layer_norm_grad_columns": _layer_norm_grad_columns,
    "column_totals": _column_totals,
    "xent_rows": _xent_rows,
    "mean_all": _mean_all,
    "xent_grad_rows": _xent_grad_rows,
}


def kernel(name: str, T: int, dtype):
    """The jitted kernel ``name`` for blocks of ``T`` threads and data of ``dtype`` (built once)."""
    key = (name, T, np.dtype(dtype).str)
    if key not in _KERNELS:
        _KERNELS[key] = cuda.jit(_BUILDERS[name](T, np.dtype(dtype)))
    return _KERNELS[key]




def ptx_signatures():
    """``(label, python function, signature)`` for every kernel in float32 and
    float64 with the largest block (the block size changes no types): what
    a PTX compile for real hardware must accept."""
    from numba import from_dtype, types

    out = []
    for dtype in _FLOATS:
        f = from_dtype(dtype)
        m2, v1 = types.Array(f, 2, "C"), types.Array(f, 1, "C")
        d2, d1 = types.Array(types.float64, 2, "C"), types.Array(types.float64, 1, "C")
        lab = types.Array(types.int64, 1, "C")
        sigs = {
            "softmax_rows": (m2, m2, types.boolean),
            "softmax_grad_rows": (m2, m2, m2, types.boolean),
            "layer_norm_rows": (m2, v1, v1, f, m2, v1, v1, types.boolean),
            "layer_norm_grad_rows": (m2, m2, v1, v1, v1, m2, types.boolean),
            "layer_norm_grad_columns": (m2, m2, v1, v1, d2, d2),
            "column_totals": (d2, d2, v1, v1),
            "xent_rows": (m2, lab, d1, v1, v1, types.boolean),
            "mean_all": (d1, v1),
            "xent_grad_rows": (m2, lab, v1, v1, v1, m2),
        }
        for name, args in sigs.items():
            out.append((f"{name}[{MAX_BLOCK}, {dtype.name}]", _BUILDERS[name](MAX_BLOCK, dtype), types.void(*args)))
    return out


