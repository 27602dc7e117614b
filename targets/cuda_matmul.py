"""``matmul`` on the cuda target: a tiled shared-memory kernel.

Each 16x16 thread block computes a 16x16 tile of the result, stepping
along K one 16x16 tile of each operand at a time through shared memory
(every operand element is read from global memory N/16 or M/16 times
instead of N or M times; loads are coalesced along the contiguous axis
for row-major operands). Operands are read through (offset, strides), so
transposed and sliced views need no copy. Batches run along the grid's z
axis when their leading dimensions collapse to one stride per operand,
else one launch per batch index. Accumulation is in the operand dtype, as
cuBLAS does.

Where CuPy is installed (and not under the simulator), ``matmul`` goes to
cuBLAS through ``cupy.matmul`` instead, on CuPy views of the same device
memory (no copy); CuPy is not a dependency.
"""
from __future__ import annotations

import itertools

import numpy as np

from . import cpu_cache

TILE = 16
MAX_Z = 65535

_SOURCE = """import numpy as np
from numba import cuda


@cuda.jit(cache=True)
def kernel(a, a_o, a_sb, a_s0, a_s1, b, b_o, b_sb, b_s0, b_s1, o, o_o, M, N, K):
    sa = cuda.shared.array(({t}, {t}), {dt})
    sb = cuda.shared.array(({t}, {t}), {dt})
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    z = np.int64(cuda.blockIdx.z)
    row = np.int64(cuda.blockIdx.y) * {t} + ty
    col = np.int64(cuda.blockIdx.x) * {t} + tx
    abase = a_o + z * a_sb
    bbase = b_o + z * b_sb
    acc = {dt}(0)
    for t in range((K + {t} - 1) // {t}):
        k = np.int64(t) * {t} + tx
        sa[ty, tx] = a[abase + row * a_s0 + k * a_s1] if row < M and k < K else {dt}(0)
        k = np.int64(t) * {t} + ty
        sb[ty, tx] = b[bbase + k * b_s0 + col * b_s1] if k < K and col < N else {dt}(0)
        cuda.syncthreads()
        for kk in range({t}):
            acc += sa[ty, kk] * sb[kk, tx]
        cuda.syncthreads()
    if row < M and col < N:
        o[o_o + z * M * N + row * N + col] = acc
"""


def _kernel(dtype):
    return cpu_cache.load(_SOURCE.format(t=TILE, dt=f"np.{np.dtype(dtype).name}"))


def _collapse(shape, strides):
    """One stride for the flattened batch dims, or None if they do not collapse."""
    dims = [(d, s) for d, s in zip(shape, strides) if d != 1]
    for (d0, s0), (d1, s1) in zip(dims, dims[1:]):
        if s0 != s1 * d1:
            return None
    return dims[-1][1] if dims else 0


def _cupy():
    try:
        import cupy
    except ImportError:
        return None
    return cupy


def _as_cupy(cp, x):
    """A CuPy view of device value ``x`` (a DArray: buffer, offset, strides)."""
    itemsize = np.dtype(x.dtype).itemsize
    ptr = x.buf.__cuda_array_interface__["data"][0]
    nbytes = x.buf.shape[0] * itemsize
    memory = cp.cuda.UnownedMemory(ptr, nbytes, x.buf)
    return cp.ndarray(x.shape, x.dtype, cp.cuda.MemoryPointer(memory, x.off * itemsize),
                      strides=tuple(s * itemsize for s in x.strides))


def matmul(dev, a, b, aval):
    from braze.ops._util import broadcast_shape

    cp = None if dev.sim else _cupy()
    if cp is not None and a.shape and b.shape:
        return dev.put(cp.matmul(_as_cupy(cp, a), _as_cupy(cp, b)))

    a_shape, a_str = list(a.shape), list(a.strides)
    b_shape, b_str = list(b.shape), list(b.strides)
    if len(a_shape) == 1:
        a_shape, a_str = [1] + a_shape, [0] + a_str
    if len(b_shape) == 1:
        b_shape, b_str = b_shape + [1], b_str + [0]
    M, K = a_shape[-2:]
    N = b_shape[-1]
    batch = broadcast_shape(tuple(a_shape[:-2]), tuple(b_shape[:-2]))
    nb = len(batch)

    def batch_strides(shape, strides):
        lead = shape[:-2]
        st = strides[:-2]
        pad = nb - len(lead)
        lead, st = [1] * pad + lead, [0] * pad + st
        return [s if d != 1 else 0 for d, s in zip(lead, st)]

    a_b, b_b = batch_strides(a_shape, a_str), batch_strides(b_shape, b_str)
    out = dev.new(tuple(aval.shape), aval.dtype)
    nbatch = int(np.prod(batch, dtype=np.int64))
    if out.size == 0:
        return out
    if K == 0:
        zero = np.zeros(aval.shape, aval.dtype)
        return dev.put(zero)
    kernel = _kernel(aval.dtype)
    grid_xy = ((N + TILE - 1) // TILE, (M + TILE - 1) // TILE)
    ca, cb = _collapse(batch, a_b), _collapse(batch, b_b)
    common = (a_str[-2], a_str[-1])
    if ca is not None and cb is not None:
        for z0 in range(0, max(nbatch, 1), MAX_Z):
            nz = min(MAX_Z, max(nbatch, 1) - z0)
            kernel[(grid_xy[0], grid_xy[1], nz), (TILE, TILE)](
                a.buf, a.off + z0 * ca, ca, *common, b.buf, b.off + z0 * cb, cb, b_str[-2], b_str[-1],
                out.buf, z0 * M * N, M, N, K)
        return out
    for z, index in enumerate(itertools.product(*[range(d) for d in batch])):
        a_o = a.off + sum(i * s for i, s in zip(index, a_b))
        b_o = b.off + sum(i * s for i, s in zip(index, b_b))
        kernel[(grid_xy[0], grid_xy[1], 1), (TILE, TILE)](
            a.buf, a_o, 0, *common, b.buf, b_o, 0, b_str[-2], b_str[-1], out.buf, z * M * N, M, N, K)
    return out
