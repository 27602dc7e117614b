"""The ``cpu`` target: fused, multi-threaded SIMD kernels generated for numba.

Lowering: inline composite bodies, fuse the graph into a ``Program``
(``braze.fusion``), generate one numba kernel per ``Loop``
(``cpu_codegen``), load it through the disk cache (``cpu_cache``), and
build a runner that takes outputs from ``cpu_memory`` (pooled
intermediates, recycled large outputs), makes views with strides, calls BLAS
for ``matmul``/``einsum`` and NumPy for the other externs.

Threading: numba's OpenMP layer with ``OMP_WAIT_POLICY=PASSIVE`` unless the
user set it (set when ``braze`` is imported, so it holds even when the first
parallel kernel of the process is not braze's: a parallel numba kernel run
before that, with the default policy, made the MLP gradient 1.9x slower). The default OpenMP pool spin-waits after each kernel and
fights the BLAS threads for the cores (an MLP of BLAS matmuls plus numba
kernels ran 2.6x slower that way); numba's ``workqueue`` layer does not spin
but aborts when two threads launch kernels at once. Thread count follows
numba (``NUMBA_NUM_THREADS``, ``numba.set_num_threads``).
"""
from __future__ import annotations

import os

import numpy as np  # noqa: E402

from braze.core import NUMPY_IMPL, PRIMITIVES  # noqa: E402
from braze.errors import GuardFailed  # noqa: E402
from braze.fusion import Loop, Program  # noqa: E402
from braze.graph import Graph  # noqa: E402
from braze.pipeline import fused  # noqa: E402

import logging  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

from . import cpu_cache, cpu_memory  # noqa: E402
from .cpu_memory import fits, outputs, overlapping  # noqa: E402
from .base import Executable, SlotLayout, Target, numpy_loop  # noqa: E402
from .cpu_codegen import PARALLEL_MIN, generate  # noqa: E402


def _leaf_getter(leaf, slot_of, perm, rank, loop):
    """A function reading a kernel argument for ``leaf`` from the slots."""
    base = loop.source(leaf)
    slot = slot_of[id(base)]
    ndim = base.aval.ndim
    if perm is not None:
        lead = (1,) * (rank - ndim)

        def get(slots):
            a = np.asarray(slots[slot])
            return a.reshape(lead + a.shape).transpose(perm)

        return get
    if ndim == 0:
        return lambda slots: np.asarray(slots[slot])[()]
    return lambda slots: slots[slot]


class _Call:
    """Per-call state the runners share: slots, this thread's pool, outputs, inputs."""

    __slots__ = ("slots", "pool", "outs", "inputs", "safe")


def _buffer(spec, shape, dtype, call: _Call):
    """The array a kernel output is written into (see cpu_memory)."""
    if spec is None:
        return outputs.empty(shape, dtype)
    kind = spec[0]
    if kind == "pool":
        buf = call.pool[spec[1]]
        if buf is None:
            buf = call.pool[spec[1]] = np.empty(shape, dtype)
        return buf
    if kind == "donate":
        a = call.inputs[spec[1]]
        if call.safe and fits(a, shape, dtype):
            return a
        return _buffer(spec[2], shape, dtype, call)
    if kind == "out" and call.outs is not None:
        a = call.outs[spec[1]]
        if a is not None and call.safe and fits(a, shape, dtype):
            return a
    return outputs.empty(shape, dtype)


def _loop_runner(loop: Loop, slot_of: dict, kernel, ks, buffers: dict, tier_up: bool = False):
    """The kernel call for one loop. With ``tier_up``, the first call runs the
    serial kernel (fast to compile) and starts compiling the parallel one in the
    background; later calls use it once it is ready."""
    getters = [_leaf_getter(leaf, slot_of, loop.perm, len(loop.domain), loop) for leaf in ks.leaves]
    out_specs = [(slot_of[id(o)], tuple(o.aval.shape), np.dtype(o.aval.dtype), buffers.get(slot_of[id(o)]))
                 for o in ks.outputs]
    sizes = tuple(int(d) for d in loop.domain)
    consts = tuple(np.asarray(c.kw["value"].value).astype(c.aval.dtype)[()] for c in ks.consts)

    trig = ks.has_trig
    length = loop.compact[0].kw["length"] if loop.compact else None

    def run(call: _Call):
        nonlocal kernel
        slots = call.slots
        args = [g(slots) for g in getters]
        flats = []
        for slot, shape, dtype, spec in out_specs:
            out = _buffer(spec, shape, dtype, call)
            slots[slot] = out
            flats.append(out.reshape(-1))
        extra = (np.zeros(1, np.int8),) if trig else ((np.zeros(1, np.int64),) if length is not None else ())
        first = pending[1]
        if first:
            pending[1] = False
            hits, t0 = sum(kernel.stats.cache_hits.values()), time.perf_counter()
        try:
            kernel(*args, *flats, *sizes, *consts, *extra)
        except Exception as exc:  # a corrupt numba cache entry: rebuilt once, then rerun
            kernel = cpu_cache.recover(kernel, exc)
            kernel(*args, *flats, *sizes, *consts, *extra)
        if first and cpu_cache.logger.isEnabledFor(logging.INFO):
            how = "loaded from numba's disk cache" if sum(kernel.stats.cache_hits.values()) > hits \
                else "compiled by numba"
            cpu_cache.logger.info("%s (%s): %s in %.1f ms", loop.name, kernel.py_func.__name__, how,
                                  (time.perf_counter() - t0) * 1e3)
        if length is not None and extra[0][0] != length:  # the mask selected another number of elements
            raise GuardFailed(f"a boolean mask selected {int(extra[0][0])} elements; traced with {length}")
        if trig and extra[0][0]:  # a sin/cos argument beyond the vector range: exact rerun
            cpu_cache.load(ks.source, "kernel_exact")(*args, *flats, *sizes, *consts, *extra)
        if pending[0]:
            pending[0] = False
            cpu_cache.compile_parallel_later(ks.source, kernel, swap)

    pending = [tier_up, True]  # [tier up after the next call, next call is the first]

    def swap(parallel):
        nonlocal kernel
        kernel = parallel

    return run


# Generated kernels nest one Python loop per dimension, and Python allows 20
# nested blocks: loops of higher rank (many size-1 dimensions, in practice)
# are evaluated with NumPy instead.
MAX_KERNEL_RANK = 16


def _needs_numpy(loop: Loop) -> str | None:
    """Why this loop is evaluated with NumPy rather than a generated kernel, or None."""
    nodes = list(loop.members) + list(loop.leaves)
    if any(np.dtype(n.aval.dtype) == np.float16 for n in nodes):
        return "float16, evaluated with NumPy (numba has no float16 arrays)"
    if max([len(loop.domain)] + [n.aval.ndim for n in nodes]) > MAX_KERNEL_RANK:
        return f"rank above {MAX_KERNEL_RANK}, evaluated with NumPy (kernels nest a loop per dimension)"
    return None


def _direct_view(node):
    """For the commonest views, the NumPy method call with its arguments made
    once (a loop unrolled into thousands of slices pays this per step)."""
    if node.op == "slice":
        key = tuple(slice(a, b, c) for a, b, c in node.kw["slices"])
        return lambda x: x[key] if type(x) is np.ndarray else np.asarray(x)[key]
    if node.op == "reshape":
        shape = tuple(node.kw["shape"])
        return lambda x: x.reshape(shape) if type(x) is np.ndarray else np.reshape(x, shape)
    if node.op == "transpose":
        perm = tuple(node.kw["perm"])
        return lambda x: x.transpose(perm) if type(x) is np.ndarray else np.transpose(x, perm)
    return None


def _op_runner(node, slot_of, inplace: bool):
    fn = NUMPY_IMPL[node.op]
    ins = tuple(slot_of[id(i)] for i in node.inputs)
    out = slot_of[id(node)]
    params = node.kw
    direct = None if inplace else _direct_view(node)
    if direct is not None:
        source = ins[0]

        def run_view(call):
            slots = call.slots
            slots[out] = direct(slots[source])

        return run_view
    if inplace:  # write the update into the destination (see cpu_memory)
        fn = PRIMITIVES[node.op].inplace

    def run(call):
        slots = call.slots
        if inplace and not call.safe:
            slots[out] = NUMPY_IMPL[node.op](*[slots[i] for i in ins], **params)
        else:
            slots[out] = fn(*[slots[i] for i in ins], **params)

    return run




class CPUTarget(Target):
    """numba ``njit(parallel=True)`` kernels, one per fused loop."""

    name = "cpu"

    def is_available(self) -> bool:
        return True

    def describe(self) -> str:
        import numba

        return (f"cpu: numba {numba.__version__}, {numba.get_num_threads()} threads "
                f"({os.environ.get('NUMBA_THREADING_LAYER', 'default')} threading layer), "
                f"cache {cpu_cache.cache_dir()}")

    def lower(self, graph: Graph, donated=frozenset(), mutable=frozenset()) -> Executable:
        record: dict = {}
        t0 = time.perf_counter()
        program = fused(graph, record, compact=True)
        t1 = time.perf_counter()
        executable = lower_program(program, frozenset(donated), frozenset(mutable))
        executable.times = {"fuse": t1 - t0, "codegen": time.perf_counter() - t1}
        executable.sites = _kernels_of_sites(program, record)
        return executable


def _kernels_of_sites(program: Program, record: dict) -> dict:
    """Site path of each inlined composite -> the loop computing its result."""
    where = {}
    for step in program.steps:
        if isinstance(step, Loop):
            for m in step.members:
                where.setdefault(m, step.name)
    return {site: where[outs[0]] for site, outs in record.items() if outs and outs[0] in where}


def lower_program(program: Program, donated=frozenset(), mutable=frozenset()) -> Executable:
    graph = program.graph
    layout = SlotLayout(graph)
    slot_of = layout.slot_of
    memory = cpu_memory.plan(program, slot_of, donated, mutable)
    runners, sources, kernel_sources = [], [], []
    for index, step in enumerate(program.steps):
        if isinstance(step, Loop) and _needs_numpy(step):
            runners.append(lambda call, run=numpy_loop(step, slot_of): run(call.slots))
            sources.append(f"# {step.name}: {_needs_numpy(step)}")
        elif isinstance(step, Loop):
            ks = generate(step)
            work = int(np.prod(step.domain, dtype=np.int64))
            parallel = work >= PARALLEL_MIN
            if parallel and cpu_cache.has_parallel(ks.source):
                kernel = cpu_cache.load(ks.source, "kernel")
                parallel = False  # already compiled: no tiering needed
            else:
                kernel = cpu_cache.load(ks.source, "kernel_serial")
            runners.append(_loop_runner(step, slot_of, kernel, ks, memory.buffer, tier_up=parallel))
            sources.append(f"# {step.name}: {', '.join(m.op for m in step.members)}\n{ks.source}")
            kernel_sources.append(ks.source)
        else:
            runners.append(_op_runner(step.node, slot_of, index in memory.inplace))
    out_slots = [slot_of[id(o)] for o in graph.outputs]
    local = threading.local()
    npool = len(memory.pool)
    checks = memory.checks_inputs

    def run(inputs, outs=None):
        call = _Call()
        call.slots = slots = layout.fill(inputs)
        pool = getattr(local, "pool", None)
        if pool is None:
            pool = local.pool = [None] * npool
        call.pool = pool
        call.outs = outs
        call.inputs = inputs
        call.safe = not ((checks or outs is not None) and overlapping(list(inputs) + list(outs or ())))
        for r in runners:
            r(call)
        return [slots[j] for j in out_slots]

    executable = Executable(run, program.describe(), "\n\n".join(sources))
    executable.counts = {"steps": len(program.steps), "kernels": len(kernel_sources),
                         "distinct kernels": len(set(kernel_sources))}
    return executable
