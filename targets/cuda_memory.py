"""Values on the device for the ``cuda`` target: a flat buffer with an element
offset, shape and strides (``DArray``), so that views (slices, transposes,
broadcasts) are new descriptors of the same buffer; moving values to and
from the host and external device arrays; one strided-copy kernel
(``assign``) for every copy between layouts.
"""
from __future__ import annotations

import threading

import numpy as np

from . import cpu_cache
from .cuda_codegen import MAXT

def _import_cuda():
    from numba import cuda

    return cuda


def simulated() -> bool:
    from numba import config

    return bool(config.ENABLE_CUDASIM)


class DArray:
    """A value on the device: a flat buffer, an element offset, a shape and
    element strides (views share the buffer)."""

    __slots__ = ("buf", "off", "shape", "strides", "dtype")

    def __init__(self, buf, off, shape, strides, dtype):
        self.buf, self.off, self.shape, self.strides, self.dtype = buf, off, tuple(shape), tuple(strides), dtype

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def contiguous(self) -> bool:
        return all(s == c or d == 1 for s, c, d in zip(self.strides, _c_strides(self.shape), self.shape))


def _c_strides(shape) -> tuple[int, ...]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(int(d), 1)
    return tuple(reversed(strides))


class _Device:
    """What a call needs from numba.cuda, looked up once."""

    def __init__(self):
        cuda = _import_cuda()
        self.cuda = cuda
        self.sim = simulated()
        try:
            self.sms = int(cuda.get_current_device().MULTIPROCESSOR_COUNT)
        except Exception:  # the simulator
            self.sms = 1
        # The simulator runs a Python thread per GPU thread: smaller blocks
        # (still powers of two, so the same reduction code runs) keep it usable.
        self.maxt = 32 if self.sim else MAXT

    def empty(self, size: int, dtype) -> object:
        return self.cuda.device_array(max(int(size), 1), dtype=np.dtype(dtype))

    def new(self, shape, dtype) -> DArray:
        return DArray(self.empty(int(np.prod(shape, dtype=np.int64)), dtype), 0, shape, _c_strides(shape),
                      np.dtype(dtype))

    def is_device(self, value) -> bool:
        if hasattr(value, "__cuda_array_interface__"):
            return True
        return self.sim and type(value).__name__ == "FakeCUDAArray"

    def put(self, value, dtype=None) -> DArray:
        """A device value for an input, constant or capture."""
        if isinstance(value, DArray):
            return value
        if self.is_device(value):
            arr = value if self.sim else self.cuda.as_cuda_array(value)
            shape, dt = tuple(arr.shape), np.dtype(arr.dtype)
            if not _is_c_contiguous(arr):
                return _copy_strided(self, arr)
            n = int(np.prod(shape, dtype=np.int64))
            flat = arr.reshape(n) if n else self.empty(1, dt)
            return DArray(flat, 0, shape, _c_strides(shape), dt)
        host = np.asarray(value, dtype=dtype)
        if not host.flags.c_contiguous:  # (np.ascontiguousarray would make 0-d values 1-d)
            host = host.copy(order="C")
        buf = self.cuda.to_device(host.reshape(-1) if host.size else np.zeros(1, host.dtype))
        return DArray(buf, 0, host.shape, _c_strides(host.shape), host.dtype)

    def host(self, value: DArray) -> np.ndarray:
        value = contiguous(self, value)
        out = np.empty(value.shape, value.dtype)
        if value.size:
            value.buf[value.off: value.off + value.size].copy_to_host(out.reshape(-1))
        return out

    def device(self, value: DArray):
        """A numba device array (C-contiguous) holding ``value``."""
        value = contiguous(self, value)
        if value.size == 0:
            return self.cuda.device_array(value.shape, dtype=value.dtype)
        return value.buf[value.off: value.off + value.size].reshape(value.shape)


def overlapping_device(dev: _Device, values) -> bool:
    """Whether any two of these device values may share memory (unknown counts as yes)."""
    extents = []
    for v in values:
        if not isinstance(v, DArray):
            continue
        buf = v.buf
        if dev.sim:
            ary = getattr(buf, "_ary", None)
            if ary is None:
                return True
            lo, hi = np.lib.array_utils.byte_bounds(ary)
        else:
            cai = getattr(buf, "__cuda_array_interface__", None)
            if cai is None:
                return True
            lo = cai["data"][0]
            hi = lo + int(np.prod(cai["shape"], dtype=np.int64)) * np.dtype(cai["typestr"]).itemsize
        extents.append((lo, hi))
    extents.sort()
    return any(b[0] < a[1] for a, b in zip(extents, extents[1:]))


def _is_c_contiguous(arr) -> bool:
    if hasattr(arr, "is_c_contiguous"):
        return bool(arr.is_c_contiguous())
    return bool(arr.flags["C_CONTIGUOUS"])


_DEVICE: list = []
_DEVICE_LOCK = threading.Lock()


def device() -> _Device:
    if not _DEVICE:
        with _DEVICE_LOCK:
            if not _DEVICE:
                _DEVICE.append(_Device())
    return _DEVICE[0]


# ---------------------------------------------------------------- copies
_NDCOPY_SOURCE = """import numpy as np
from numba import cuda


@cuda.jit(cache=True)
def kernel(a, o, n, {sizes}):
    e = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    st = np.int64(cuda.gridDim.x) * cuda.blockDim.x
    while e < n:
        r = e
{unravel}
        o[e] = a[{index}]
        e += st
"""


def _unravel(rank: int) -> str:
    lines = []
    for k in range(rank - 1, -1, -1):
        if k == 0:
            lines.append("        i0 = r")
        else:
            lines.append(f"        i{k} = r % d{k}")
            lines.append(f"        r = r // d{k}")
    return "\n".join(lines) or "        pass"


def _grid(dev: _Device, n: int) -> int:
    return max(1, min((n + dev.maxt - 1) // dev.maxt, dev.sms * 32))


def contiguous(dev: _Device, value: DArray) -> DArray:
    """``value`` itself if it is C-contiguous, else a contiguous copy (a kernel)."""
    return value if value.contiguous else contiguous_copy(dev, value)


def _copy_strided(dev: _Device, arr) -> DArray:
    """A contiguous device copy of a strided external device array (numba indexes its strides)."""
    rank = arr.ndim
    if rank == 0:
        return dev.put(arr.copy_to_host())
    src = _NDCOPY_SOURCE.format(sizes=", ".join(f"d{k}" for k in range(rank)), unravel=_unravel(rank),
                                index=", ".join(f"i{k}" for k in range(rank)))
    kernel = cpu_cache.load(src)
    out = dev.new(tuple(arr.shape), arr.dtype)
    n = out.size
    if n:
        kernel[_grid(dev, n), dev.maxt](arr, out.buf, n, *arr.shape)
    return out


_ASSIGN_SOURCE = """import numpy as np
from numba import cuda


@cuda.jit(cache=True)
def kernel(o, o_o, {ostrides}a, a_o, {astrides}n, {sizes}):
    e = np.int64(cuda.blockIdx.x) * cuda.blockDim.x + cuda.threadIdx.x
    st = np.int64(cuda.gridDim.x) * cuda.blockDim.x
    while e < n:
        r = e
{unravel}
        o[o_o{oterms}] = a[a_o{aterms}]
        e += st
"""


def assign(dev: _Device, dst: DArray, src: DArray) -> None:
    """``dst[...] = src`` on the device, both strided (same shape; the store casts)."""
    rank = len(dst.shape)
    n = dst.size
    if not n:
        return
    names = lambda p: "".join(f"{p}{k}, " for k in range(rank))  # noqa: E731
    src_text = _ASSIGN_SOURCE.format(
        ostrides=names("os"), astrides=names("as"), sizes=", ".join(f"d{k}" for k in range(rank)) or "_",
        unravel=_unravel(rank), oterms="".join(f" + i{k} * os{k}" for k in range(rank)),
        aterms="".join(f" + i{k} * as{k}" for k in range(rank)))
    kernel = cpu_cache.load(src_text)
    sizes = list(dst.shape) or [1]
    kernel[_grid(dev, n), dev.maxt](dst.buf, dst.off, *dst.strides, src.buf, src.off, *src.strides, n, *sizes)


# ---------------------------------------------------------------- views
def _sliced(x: DArray, slices) -> DArray:
    """The (start, stop, step) region of ``x``, as strides over its buffer."""
    off, shape, strides = x.off, [], []
    for (start, stop, step), d, s in zip(slices, x.shape, x.strides):
        r = range(*slice(start, stop, step).indices(d))
        if len(r):
            off += r.start * s
        shape.append(len(r))
        strides.append(s * r.step)
    return DArray(x.buf, off, shape, strides, x.dtype)


def contiguous_copy(dev: _Device, value: DArray) -> DArray:
    """A new C-contiguous buffer holding ``value`` (never ``value``'s own buffer)."""
    out = dev.new(value.shape, value.dtype)
    assign(dev, out, value)
    return out


def view(dev: _Device, node, x: DArray) -> DArray:
    """A layout op as a new descriptor of the same buffer (reshape of a
    non-contiguous value copies first)."""
    op, kw = node.op, node.kw
    if op == "transpose":
        perm = kw["perm"]
        return DArray(x.buf, x.off, [x.shape[p] for p in perm], [x.strides[p] for p in perm], x.dtype)
    if op == "broadcast_to":
        shape = tuple(kw["shape"])
        lead = len(shape) - len(x.shape)
        strides = [0] * lead + [s if d != 1 else 0 for s, d in zip(x.strides, x.shape)]
        return DArray(x.buf, x.off, shape, strides, x.dtype)
    if op == "slice":
        return _sliced(x, kw["slices"])
    if op == "diagonal":
        a1, a2, k = kw["axis1"], kw["axis2"], kw["offset"]
        off = x.off + (k * x.strides[a2] if k >= 0 else -k * x.strides[a1])
        keep = [i for i in range(len(x.shape)) if i not in (a1, a2)]
        n = max(0, min(x.shape[a1], x.shape[a2] - k) if k >= 0 else min(x.shape[a1] + k, x.shape[a2]))
        return DArray(x.buf, off, [x.shape[i] for i in keep] + [n],
                      [x.strides[i] for i in keep] + [x.strides[a1] + x.strides[a2]], x.dtype)
    if op == "strided_view":  # of a flat buffer (arguments sharing memory)
        step = x.strides[0]
        return DArray(x.buf, x.off + kw["offset"] * step, list(kw["shape"]), [s * step for s in kw["strides"]],
                      x.dtype)
    if op == "reshape":
        x = contiguous(dev, x)
        shape = tuple(kw["shape"])
        return DArray(x.buf, x.off, shape, _c_strides(shape), x.dtype)
    raise AssertionError(op)
