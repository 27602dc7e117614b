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
from braze.errors import TargetError, where
from braze.fusion import Loop, Program, View
from braze.graph import Graph
from braze.pipeline import fused

from . import cpu_cache, cpu_memory
from .base import Executable, SlotLayout, Target, numpy_loop
from .cpu_codegen import const_arg, const_arg_dtype
from .cuda_codegen import MAXT, generate
from .cuda_index import gather, scatter_add, take_along_axis
from .cuda_memory import (DArray, _c_strides, _Device, _grid, _import_cuda, _sliced, assign, contiguous_copy, device,
                          overlapping_device, simulated, view)

SIMULATOR_HINT = (
    "to run the cuda target without a GPU, on numba's CUDA simulator (slow; for tests), set "
    "NUMBA_ENABLE_CUDASIM=1 before numba is imported, e.g. `NUMBA_ENABLE_CUDASIM=1 python -m pytest "
    "tests/cuda`; or use target='cpu'"
)


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
    handed back as device arrays are fresh allocations, or, for an input the
    caller donated (``donate_argnums``), that input's device memory."""

    __slots__ = ("dev", "pool", "kept", "to_host", "slots", "safe")

    def __init__(self, dev, pool, kept, to_host, slots, safe):
        self.dev, self.pool, self.kept, self.to_host = dev, pool, kept, to_host
        self.slots, self.safe = slots, safe

    def buffer(self, slot, spec, shape, dtype) -> DArray:
        if spec is not None and spec[0] == "donate":
            value = self.slots[spec[1]]
            if (self.safe and isinstance(value, DArray) and value.off == 0 and value.shape == shape
                    and value.dtype == np.dtype(dtype) and value.contiguous):
                return value
            spec = spec[2]
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
        self.bases = [slot_of[id(loop.source(leaf))] for leaf in loop.leaves]
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
            ks.consts_values = tuple(const_arg(c) for c in ks.consts)
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
    if node.op == "pick" and node.inputs[0].op == "host_call":
        def run(slots, ctx):
            slots[out] = dev.put(np.asarray(slots[ins[0]][node.kw["index"]], dtype=node.aval.dtype))

        return run, "a result of a host call, copied to the device"
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
    if node.op == "host_call":  # a graph break: on the host; its results stay there until picked
        def run(slots, ctx):
            slots[out] = fn(*[dev.host(slots[i]) for i in ins], **params)

        return run, "on the host, as called (a graph break)"

    if isinstance(node.aval, tuple):  # several results (qr, eigh, svd), each copied back
        def run(slots, ctx):
            result = fn(*[dev.host(slots[i]) for i in ins], **params)
            slots[out] = tuple(dev.put(np.asarray(r, dtype=a.dtype)) for r, a in zip(result, node.aval))

        return run, "on the host with NumPy (operands copied to the host, the results back)"

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
        return lower_program(fused(graph), frozenset(donated), frozenset(mutable))


def lower_program(program: Program, donated=frozenset(), mutable=frozenset()) -> Executable:
    """``mutable`` is accepted for the protocol: updates in place run as copy
    and write kernels here, so only ``donated`` inputs are written into."""
    dev = device()
    graph = program.graph
    layout = SlotLayout(graph)
    slot_of = layout.slot_of
    runners, sources, notes = [], [], {}  # notes: step name -> how the cuda target runs it
    memory = cpu_memory.plan(program, slot_of, donated, frozenset(), copies_elements=False)
    ninputs = len(graph.inputs)
    local = threading.local()
    for step in program.steps:
        if isinstance(step, Loop) and _on_host(step):
            run = numpy_loop(step, slot_of, dev.host, lambda v: dev.put(np.asarray(v)))
            runners.append(lambda slots, ctx, run=run: run(slots))
            notes[step.name] = _on_host(step)
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
            notes[step.name] = how
    dtypes = [None] * layout.nslots  # the dtype each filled slot (input, constant, capture) is converted to
    for node in graph.nodes:
        if id(node) in slot_of and not isinstance(node.aval, tuple):
            dtypes[slot_of[id(node)]] = np.dtype(node.aval.dtype)
    out_slots = [slot_of[id(o)] for o in graph.outputs]

    consts: dict = {}

    def run(inputs, outs=None):
        on_device = any(dev.is_device(x) for x in inputs)
        slots = layout.fill(inputs)
        if not consts:  # constants go to the device once; inputs and captures every call
            consts.update({i: dev.put(slots[i], dtypes[i]) for i, _ in layout.consts})
        for i in range(len(slots)):
            if i in consts:
                slots[i] = consts[i]
            elif slots[i] is not None:
                slots[i] = dev.put(slots[i], dtypes[i])
        pools = getattr(local, "pools", None)
        if pools is None:
            pools = local.pools = ([None] * len(memory.pool), {})
        # a donated input's memory takes a result only if no other input overlaps it
        safe = not memory.checks_inputs or not overlapping_device(dev, slots[:ninputs])
        ctx = _Ctx(dev, pools[0], pools[1], not on_device, slots, safe)
        for r in runners:
            r(slots, ctx)
        values = [slots[j] for j in out_slots]
        if on_device:
            return [dev.device(v) for v in values]
        return [dev.host(v) for v in values]

    plan = "\n".join(f"{line} ({notes[line.split(':')[0]]})" if line.split(":")[0] in notes else line
                     for line in program.describe().splitlines())
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
    sig += [from_dtype(const_arg_dtype(c)) for c in ks.consts]
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
    return tuple(loop.perm is None and tuple(leaf.aval.shape) == domain and id(leaf) not in loop.dropped
                 for leaf in loop.leaves)
