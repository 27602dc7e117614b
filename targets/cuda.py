"""The ``cuda`` target: the fused ``Program`` lowered to ``numba.cuda`` kernels.

Lowering is the ``cpu`` target's up to the fused program (inline composite
bodies, fuse); then each ``Loop`` becomes a kernel from ``cuda_codegen``,
each ``View`` a new (offset, strides) descriptor of the same device buffer,
``matmul`` a tiled shared-memory kernel (``cuda_matmul``); slice updates,
concatenation, gathers (advanced indexing, ``take_along_axis``) and
``scatter_add`` (their gradient; atomic adds) are device kernels, and the
gathers report out-of-range index values as NumPy does. Registered
composite kernels are called with device arrays. The remaining externs
(``scatter``, whose repeated indices NumPy resolves in order, and einsum)
run on the host with NumPy: their operands are copied to the host and the
result back. ``explain``/``lower`` name every such host step.

Data movement: NumPy inputs are copied to the device once per call and the
results copied back (NumPy out, like the other targets). If any input is a
device array (anything with ``__cuda_array_interface__``: numba device
arrays, CuPy arrays, PyTorch CUDA tensors), nothing is copied to the host
and the results are numba device arrays. Intermediates stay on the device.

Launch configuration is chosen at call time from the sizes: elementwise
kernels 256 threads per block and enough blocks to fill every SM a few
times (grid-stride beyond that); row kernels one block per row, the block
the smallest power of two >= the row length within [32, 256]; full
reductions at most ``4 * SMs`` blocks, then one.

Availability: ``numba.cuda.is_available()``; numba's CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1`` before numba is imported) counts as available,
which is how the tests run without a GPU.
"""
from __future__ import annotations

import threading

import numpy as np

from braze.core import NUMPY_IMPL
from braze.errors import IndexOutOfRangeError, TargetError, where
from braze.fusion import Loop, Program, View, fuse
from braze.graph import Graph
from braze.ops._util import broadcast_shape
from braze.passes import inline_composites, run_passes

from . import cpu_cache, cpu_memory
from .base import Executable, SlotLayout, Target
from .cuda_codegen import MAXT, generate

SIMULATOR_HINT = (
    "to run the cuda target without a GPU, on numba's CUDA simulator (slow; for tests), set "
    "NUMBA_ENABLE_CUDASIM=1 before numba is imported, e.g. `NUMBA_ENABLE_CUDASIM=1 python -m pytest "
    "tests/cuda`; or use target='cpu'"
)


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
    if bad.copy_to_host()[0]:
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


def _check_bad(bad, op: str, x: DArray, idx: list[DArray]) -> None:
    if bad.copy_to_host()[0]:
        shapes = ", ".join(f"{i.dtype}{list(i.shape)}" for i in idx)
        raise IndexOutOfRangeError(
            f"{op}: an index is out of range for array {x.dtype}{list(x.shape)} (indices {shapes}){where()}; "
            "index values must lie in [-size, size) of the axis they index, as NumPy requires")


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
    if op == "reshape":
        x = contiguous(dev, x)
        shape = tuple(kw["shape"])
        return DArray(x.buf, x.off, shape, _c_strides(shape), x.dtype)
    raise AssertionError(op)


# ---------------------------------------------------------------- loops
# A row loop runs split (several blocks per row) when it has fewer rows than
# this many per SM and rows long enough to give each block SPLIT_MIN elements.
SPLIT_ROWS_PER_SM = 2
SPLIT_MIN = 8 * MAXT


def _skeleton(dev: _Device, loop: Loop, no: int, ni: int) -> str:
    """Which kernel runs ``loop`` at these sizes: elementwise, rows (a block per
    row) or split (several blocks per row; full reductions always)."""
    if not loop.ninner:
        return "elementwise"
    if not loop.outer:
        return "split"
    return "split" if no < SPLIT_ROWS_PER_SM * dev.sms and ni >= 2 * SPLIT_MIN else "rows"


def _launch_config(dev: _Device, skeleton: str, n: int, no: int, ni: int) -> tuple[int, int, int]:
    """(blocks, threads, blocks per row) for a launch at these sizes."""
    if skeleton == "elementwise":
        return _grid(dev, n), dev.maxt, 1
    threads = 32
    while threads < min(ni, dev.maxt):
        threads *= 2
    if skeleton == "rows":
        return max(1, min(no, 1 << 20)), threads, 1
    # split: enough blocks in all to fill the GPU a few times, at most one per SPLIT_MIN elements of a row
    per_row = max(1, min(-(-ni // SPLIT_MIN), -(-dev.sms * 8 // max(no, 1))))
    return max(no, 1) * per_row, threads, per_row


class _Ctx:
    """Per-call state: where loop outputs go. Intermediates the memory plan
    pools (cpu_memory.plan: dead after their last reader) reuse this thread's
    device buffers from earlier calls; so do results when the call returns
    NumPy arrays (they are copied to the host before the call ends). Results
    handed back as device arrays are fresh allocations."""

    __slots__ = ("dev", "pool", "kept", "to_host")

    def __init__(self, dev, pool, kept, to_host):
        self.dev, self.pool, self.kept, self.to_host = dev, pool, kept, to_host

    def buffer(self, slot, spec, shape, dtype) -> DArray:
        if spec is not None and spec[0] == "pool":
            value = self.pool[spec[1]]
            if value is None:
                value = self.pool[spec[1]] = self.dev.new(shape, dtype)
            return value
        if self.to_host:
            value = self.kept.get(slot)
            if value is None:
                value = self.kept[slot] = self.dev.new(shape, dtype)
            return value
        return self.dev.new(shape, dtype)


class _LoopRunner:
    """One fused loop: picks the kernel variant for its leaves' layouts, sizes
    the launch, allocates the outputs."""

    def __init__(self, dev: _Device, loop: Loop, slot_of: dict, buffers: dict):
        self.dev, self.loop = dev, loop
        self.specs = [buffers.get(slot_of[id(o)]) for o in loop.outputs]
        self.bases = [slot_of[id(leaf.inputs[0] if leaf.op == "broadcast_to" else leaf)] for leaf in loop.leaves]
        self.out_slots = [slot_of[id(o)] for o in loop.outputs]
        self.variants: dict = {}
        self.domain = tuple(int(d) for d in loop.domain)
        self.n = int(np.prod(self.domain, dtype=np.int64))
        self.no = int(np.prod(loop.outer, dtype=np.int64))
        self.ni = int(np.prod(self.domain[len(loop.outer):], dtype=np.int64)) if loop.ninner else 1
        self.skeleton = _skeleton(dev, loop, self.no, self.ni)
        probe = generate(loop, (False,) * len(loop.leaves), self.skeleton)
        self.leaf_shapes = probe.leaf_shapes
        self.source = probe.source

    def _kernel(self, flat: tuple[bool, ...]):
        ks = self.variants.get(flat)
        if ks is None:
            ks = generate(self.loop, flat, self.skeleton)
            ks.kernel = cpu_cache.load(ks.source)
            ks.consts_values = tuple(np.asarray(c.kw["value"].value).astype(c.aval.dtype)[()] for c in ks.consts)
            self.variants[flat] = ks
        return ks

    def _leaf_args(self, k: int, value: DArray) -> tuple[list, bool]:
        """Kernel arguments for leaf k (buffer, offset, strides in loop order) and whether it is flat."""
        loop, R = self.loop, len(self.domain)
        shape, strides = list(value.shape), list(value.strides)
        if loop.perm is not None or len(shape) != len(self.leaf_shapes[k]):
            lead = len(self.leaf_shapes[k]) - len(shape)
            shape, strides = [1] * lead + shape, [0] * lead + strides
            if loop.perm is not None:
                shape, strides = [shape[p] for p in loop.perm], [strides[p] for p in loop.perm]
        flat = (loop.perm is None and tuple(shape) == self.domain and len(shape) == R
                and all(s == c or d == 1 for s, c, d in zip(strides, _c_strides(shape), shape)))
        return [value.buf, value.off] + strides, flat

    def __call__(self, slots: list, ctx: "_Ctx") -> None:
        dev = self.dev
        args, flat = [], []
        for k, slot in enumerate(self.bases):
            a, f = self._leaf_args(k, slots[slot])
            args += a
            flat.append(f)
        ks = self._kernel(tuple(flat))
        outs = []
        for o, slot, spec in zip(self.loop.outputs, self.out_slots, self.specs):
            value = ctx.buffer(slot, spec, tuple(o.aval.shape), o.aval.dtype)
            slots[slot] = value
            outs.append(value.buf)
        blocks, threads, per_row = _launch_config(dev, self.skeleton, self.n, self.no, self.ni)
        if self.skeleton == "split":
            parts = []
            for red_parts in ks.parts:
                for _sfx, dt in red_parts:
                    parts += [dev.empty(blocks, dt), dev.empty(self.no, dt)]
            sizes = [self.n, self.no, self.ni, per_row] + list(self.domain)
            common = args + outs + parts + sizes + list(ks.consts_values)
            if self.no == 0:
                return
            for p in range(1, ks.npasses + 1):
                ks.kernel[blocks, threads](p, *common)  # partials: per_row blocks per row
                ks.kernel[self.no, threads](ks.npasses + p, *common)  # a block per row combines them
            ks.kernel[_grid(dev, max(self.n, self.no)), threads](0, *common)
            return
        if self.n == 0 and not (self.skeleton == "rows" and self.no):
            return
        sizes = [self.n, self.no, self.ni] + list(self.domain)
        ks.kernel[blocks, threads](*args, *outs, *sizes, *ks.consts_values)


def _on_host(loop: Loop) -> str | None:
    """Why this loop runs on the host with NumPy, or None."""
    if any(np.dtype(n.aval.dtype) == np.float16 for n in list(loop.members) + list(loop.leaves)):
        return "float16: evaluated on the host with NumPy (no float16 kernels on cuda)"
    return None


def _host_loop_runner(dev: _Device, loop: Loop, slot_of: dict):
    plan = [(id(m), NUMPY_IMPL[m.op], [(id(i), slot_of.get(id(i)), i) for i in m.inputs], m.kw)
            for m in loop.members]
    outs = [(id(o), slot_of[id(o)]) for o in loop.outputs]

    def run(slots, ctx):
        values = {}
        for key, fn, ins, params in plan:
            # constants as the Python scalars they were (weak: NumPy's promotion keeps float16)
            args = [values[i] if i in values else (n.kw["value"].value if n.op == "const" else dev.host(slots[s]))
                    for i, s, n in ins]
            values[key] = fn(*args, **params)
        for key, slot in outs:
            slots[slot] = dev.put(np.asarray(values[key]))

    return run


# ---------------------------------------------------------------- externs
def _extern_runner(dev: _Device, node, slot_of: dict):
    ins = [slot_of[id(i)] for i in node.inputs]
    out = slot_of[id(node)]
    if node.op == "matmul" and _matmul_ok(node):
        from .cuda_matmul import matmul

        def run(slots, ctx):
            slots[out] = matmul(dev, slots[ins[0]], slots[ins[1]], node.aval)

        from .cuda_matmul import _cupy

        return run, ("cuBLAS through CuPy" if not dev.sim and _cupy() is not None
                     else "tiled shared-memory matmul kernel")
    if node.op == "kernel":
        def run(slots, ctx):
            results = NUMPY_IMPL["kernel"](*[dev.device(slots[i]) for i in ins], **node.kw)
            slots[out] = tuple(dev.put(r) for r in results) if isinstance(results, tuple) else dev.put(results)

        return run, f"registered kernel {node.kw['entry'].label}"
    if node.op == "pick":
        def run(slots, ctx):
            slots[out] = slots[ins[0]][node.kw["index"]]

        return run, "result of a multi-result kernel"
    if node.op == "update_slice":
        def run(slots, ctx):
            out_value = contiguous_copy(dev, slots[ins[0]])
            assign(dev, _sliced(out_value, node.kw["slices"]), slots[ins[1]])
            slots[out] = out_value

        return run, "copy and strided write kernels"
    if node.op == "concatenate":
        axis = node.kw["axis"]

        def run(slots, ctx):
            out_value = dev.new(tuple(node.aval.shape), node.aval.dtype)
            start = 0
            for i in ins:
                part = slots[i]
                stop = start + part.shape[axis]
                region = tuple((start, stop, 1) if d == axis else (0, n, 1) for d, n in enumerate(node.aval.shape))
                assign(dev, _sliced(out_value, region), part)
                start = stop
            slots[out] = out_value

        return run, "strided write kernels"
    if node.op == "gather" and len(node.inputs) > 1:
        axes = tuple(node.kw["axes"])

        def run(slots, ctx):
            slots[out] = gather(dev, slots[ins[0]], [slots[i] for i in ins[1:]], axes, node.aval)

        return run, "gather kernel"
    if node.op == "scatter_add" and np.dtype(node.aval.dtype) in _ATOMIC:
        axes = tuple(node.kw["axes"])

        def run(slots, ctx):
            slots[out] = scatter_add(dev, slots[ins[0]], slots[ins[1]], [slots[i] for i in ins[2:]], axes,
                                     node.aval)

        return run, "atomic scatter-add kernel"
    if node.op == "take_along_axis":
        def run(slots, ctx):
            slots[out] = take_along_axis(dev, slots[ins[0]], slots[ins[1]], node.kw["axis"], node.aval)

        return run, "gather kernel"
    fn = NUMPY_IMPL[node.op]
    params = node.kw

    def run(slots, ctx):
        result = fn(*[dev.host(slots[i]) for i in ins], **params)
        slots[out] = dev.put(np.asarray(result, dtype=node.aval.dtype))

    return run, "on the host with NumPy (operands copied to the host, the result back)"


_ATOMIC = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int32), np.dtype(np.int64))


def _matmul_ok(node) -> bool:
    a, b = node.inputs
    dt = np.dtype(node.aval.dtype)
    return dt in (np.float32, np.float64) and a.aval.ndim >= 1 and b.aval.ndim >= 1 \
        and np.dtype(a.aval.dtype) == dt and np.dtype(b.aval.dtype) == dt


# ---------------------------------------------------------------- the target
class CUDATarget(Target):
    """numba.cuda kernels, one per fused loop."""

    name = "cuda"

    def __init__(self):
        self._why: str | None | bool = False  # False: not probed yet

    def _unavailable(self) -> str | None:
        if self._why is False:
            try:
                cuda = _import_cuda()
            except ImportError as exc:
                self._why = f"numba-cuda is not installed ({exc}); pip install 'braze[cuda]'"
            else:
                try:
                    ok = cuda.is_available()
                except Exception as exc:  # a broken driver install
                    ok, detail = False, f" ({type(exc).__name__}: {exc})"
                else:
                    detail = ""
                self._why = None if ok else f"no CUDA GPU or driver is available here{detail}"
                if ok:
                    from braze.kernels import nn_cuda  # noqa: F401  (registers the cuda kernels)
        return self._why

    def is_available(self) -> bool:
        return self._unavailable() is None

    def check_available(self) -> None:
        why = self._unavailable()
        if why is not None:
            raise TargetError(f"target 'cuda' cannot run here: {why}{where()}; {SIMULATOR_HINT}")

    def describe(self) -> str:
        why = self._unavailable()
        if why is not None:
            return f"cuda: unavailable ({why})"
        dev = device()
        if dev.sim:
            return "cuda: numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1)"
        gpu = dev.cuda.get_current_device()
        return f"cuda: {gpu.name.decode() if isinstance(gpu.name, bytes) else gpu.name}, " \
               f"compute capability {gpu.compute_capability}, {dev.sms} SMs"

    def cache_key(self) -> tuple:
        return ("cuda", simulated())

    def lower(self, graph: Graph, donated=frozenset(), mutable=frozenset()) -> Executable:
        self.check_available()
        record: dict = {}
        graph, _ = run_passes(inline_composites(graph, record))
        return lower_program(fuse(graph))


def lower_program(program: Program) -> Executable:
    dev = device()
    graph = program.graph
    layout = SlotLayout(graph)
    slot_of = layout.slot_of
    runners, sources, notes = [], [], []
    memory = cpu_memory.plan(program, slot_of, frozenset(), frozenset())
    local = threading.local()
    for step in program.steps:
        if isinstance(step, Loop) and _on_host(step):
            runners.append(_host_loop_runner(dev, step, slot_of))
            notes.append(f"{step.name}: {_on_host(step)}")
        elif isinstance(step, Loop):
            runner = _LoopRunner(dev, step, slot_of, memory.buffer)
            runners.append(runner)
            sources.append(f"# {step.name}: {runner.skeleton} kernel: {', '.join(m.op for m in step.members)}\n"
                           f"{runner.source}")
        elif isinstance(step, View):
            node = step.node
            src, dst = slot_of[id(node.inputs[0])], slot_of[id(node)]
            runners.append(lambda slots, ctx, node=node, src=src, dst=dst:
                           slots.__setitem__(dst, view(dev, node, slots[src])))
        else:
            run, how = _extern_runner(dev, step.node, slot_of)
            runners.append(run)
            notes.append(f"{step.name}: extern {step.node.op}: {how}")
    dtypes = [None] * layout.nslots  # the dtype each filled slot (input, constant, capture) is converted to
    for node in graph.nodes:
        if id(node) in slot_of and not isinstance(node.aval, tuple):
            dtypes[slot_of[id(node)]] = np.dtype(node.aval.dtype)
    out_slots = [slot_of[id(o)] for o in graph.outputs]

    def run(inputs, outs=None):
        on_device = any(dev.is_device(x) for x in inputs)
        slots = layout.fill(inputs)
        for i in range(len(slots)):
            if slots[i] is not None:
                slots[i] = dev.put(slots[i], dtypes[i])
        pools = getattr(local, "pools", None)
        if pools is None:
            pools = local.pools = ([None] * len(memory.pool), {})
        ctx = _Ctx(dev, pools[0], pools[1], not on_device)
        for r in runners:
            r(slots, ctx)
        values = [slots[j] for j in out_slots]
        if on_device:
            return [dev.device(v) for v in values]
        return [dev.host(v) for v in values]

    plan = program.describe() + ("\n" + "\n".join(notes) if notes else "")
    return Executable(run, plan, "\n\n".join(sources))


# ---------------------------------------------------------------- checking without a GPU
def compile_ptx(loop: Loop, flat: tuple[bool, ...] | None = None, cc=(8, 0), skeleton: str | None = None) -> str:
    """PTX for ``loop``'s kernel, compiled for real hardware by numba.cuda and
    NVVM with the argument types a launch passes. Needs no GPU (nor the
    simulator): the tests use it to check that every generated kernel
    compiles for a device, which the simulator, running Python, cannot."""
    from numba import cuda, types
    from numba.np.numpy_support import from_dtype

    flat = (False,) * len(loop.leaves) if flat is None else tuple(flat)
    ks = generate(loop, flat, skeleton)
    split = "def kernel(phase," in ks.source
    kernel = cpu_cache.load(ks.source)

    def array(dtype):
        return types.Array(from_dtype(np.dtype(dtype)), 1, "C")

    sig = [types.int64] if split else []
    for k, leaf in enumerate(loop.leaves):
        sig += [array(leaf.aval.dtype), types.int64] + [types.int64] * len(ks.leaf_shapes[k])
    sig += [array(o.aval.dtype) for o in loop.outputs]
    if split:
        for red_parts in ks.parts:
            for _sfx, dt in red_parts:
                sig += [array(dt), array(dt)]
    sig += [types.int64] * (3 + split + len(loop.domain))
    sig += [from_dtype(np.dtype(c.aval.dtype)) for c in ks.consts]
    # numba compiles the device functions a kernel calls (cuda_runtime) for the
    # current device's compute capability, which asks the driver; without one,
    # say which capability is meant.
    from types import SimpleNamespace
    from unittest import mock

    from numba.cuda import dispatcher

    with mock.patch.object(dispatcher, "get_current_device", lambda: SimpleNamespace(compute_capability=cc)):
        ptx, _ = cuda.compile_ptx(kernel.py_func, tuple(sig), cc=cc)
    return ptx


def natural_layout(loop: Loop) -> tuple[bool, ...]:
    """The kernel variant for C-contiguous inputs: leaves shaped like the domain are flat."""
    domain = tuple(int(d) for d in loop.domain)
    return tuple(loop.perm is None and tuple(leaf.aval.shape) == domain and leaf.op != "broadcast_to"
                 for leaf in loop.leaves)
