"""The ``cpu`` target: fused, multi-threaded SIMD kernels generated for numba.

Lowering: inline composite bodies, fuse the graph into a ``Program``
(``braze.fusion``), generate one numba kernel per ``Loop``
(``cpu_codegen``), load it through the disk cache (``cpu_cache``), and
build a runner that allocates outputs with NumPy (large NumPy allocations
get huge pages; numba's do not), makes views with strides, calls BLAS for
``matmul``/``einsum`` and NumPy for the other externs.

Threading: numba's OpenMP layer with ``OMP_WAIT_POLICY=PASSIVE`` unless the
user set it. The default OpenMP pool spin-waits after each kernel and
fights the BLAS threads for the cores (an MLP of BLAS matmuls plus numba
kernels ran 2.6x slower that way); numba's ``workqueue`` layer does not spin
but aborts when two threads launch kernels at once. Thread count follows
numba (``NUMBA_NUM_THREADS``, ``numba.set_num_threads``).
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before numba starts its OpenMP pool

import numpy as np  # noqa: E402

from braze.core import NUMPY_IMPL  # noqa: E402
from braze.fusion import Extern, Loop, Program, View, fuse  # noqa: E402
from braze.graph import Graph  # noqa: E402
from braze.passes import inline_composites, run_passes  # noqa: E402

from . import cpu_cache  # noqa: E402
from .base import Executable, Target  # noqa: E402
from .cpu_codegen import PARALLEL_MIN, generate  # noqa: E402


def _leaf_getter(leaf, slot_of, perm, rank):
    """A function reading a kernel argument for ``leaf`` from the slots."""
    base = leaf.inputs[0] if leaf.op == "broadcast_to" else leaf
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


def _loop_runner(loop: Loop, slot_of: dict, kernel, ks):
    getters = [_leaf_getter(leaf, slot_of, loop.perm, len(loop.domain)) for leaf in ks.leaves]
    out_specs = [(slot_of[id(o)], o.aval.shape, np.dtype(o.aval.dtype)) for o in ks.outputs]
    sizes = tuple(int(d) for d in loop.domain)
    consts = tuple(np.asarray(c.kw["value"].value).astype(c.aval.dtype)[()] for c in ks.consts)

    def run(slots):
        nonlocal kernel
        args = [g(slots) for g in getters]
        flats = []
        for slot, shape, dtype in out_specs:
            out = np.empty(shape, dtype)
            slots[slot] = out
            flats.append(out.reshape(-1))
        try:
            kernel(*args, *flats, *sizes, *consts)
        except Exception as exc:  # a corrupt numba cache entry: rebuilt once, then rerun
            kernel = cpu_cache.recover(kernel, exc)
            kernel(*args, *flats, *sizes, *consts)

    return run


def _numpy_loop_runner(loop: Loop, slot_of: dict):
    """Evaluate a loop's ops with NumPy (float16, which numba cannot hold in arrays)."""
    plan = [(id(m), NUMPY_IMPL[m.op], [(id(i), slot_of.get(id(i)), i) for i in m.inputs], m.kw)
            for m in loop.members]
    outs = [(id(o), slot_of[id(o)]) for o in loop.outputs]

    def run(slots):
        values = {}
        for key, fn, ins, params in plan:
            args = [values[i] if i in values else (slots[s] if s is not None else n.kw["value"].value)
                    for i, s, n in ins]
            values[key] = fn(*args, **params)
        for key, slot in outs:
            slots[slot] = values[key]

    return run


def _needs_numpy(loop: Loop) -> bool:
    nodes = list(loop.members) + list(loop.leaves)
    return any(np.dtype(n.aval.dtype) == np.float16 for n in nodes)


def _op_runner(node, slot_of):
    fn = NUMPY_IMPL[node.op]
    ins = tuple(slot_of[id(i)] for i in node.inputs)
    out = slot_of[id(node)]
    params = node.kw

    def run(slots):
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

    def lower(self, graph: Graph) -> Executable:
        graph, _ = run_passes(inline_composites(graph))
        program = fuse(graph)
        return lower_program(program)


def lower_program(program: Program) -> Executable:
    graph = program.graph
    slot_of: dict[int, int] = {}
    for i, node in enumerate(graph.inputs):
        slot_of[id(node)] = i
    consts, captures = [], []
    n = len(graph.inputs)
    for node in graph.nodes:
        if id(node) in slot_of:
            continue
        slot_of[id(node)] = n
        if node.op == "const":
            consts.append((n, node.kw["value"].value))
        elif node.op == "capture":
            captures.append((n, node.kw["index"]))
        n += 1
    runners, sources = [], []
    for step in program.steps:
        if isinstance(step, Loop) and _needs_numpy(step):
            runners.append(_numpy_loop_runner(step, slot_of))
            sources.append(f"# {step.name}: float16, evaluated with NumPy (numba has no float16 arrays)")
        elif isinstance(step, Loop):
            ks = generate(step)
            work = int(np.prod(step.domain, dtype=np.int64))
            kernel = cpu_cache.load(ks.source, "kernel" if work >= PARALLEL_MIN else "kernel_serial")
            runners.append(_loop_runner(step, slot_of, kernel, ks))
            sources.append(f"# {step.name}: {', '.join(m.op for m in step.members)}\n{ks.source}")
        else:
            runners.append(_op_runner(step.node, slot_of))
    nslots, ninputs = n, len(graph.inputs)
    graph_captures = graph.captures
    out_slots = [slot_of[id(o)] for o in graph.outputs]

    def run(inputs):
        slots = [None] * nslots
        slots[:ninputs] = inputs
        for i, value in consts:
            slots[i] = value
        for i, k in captures:
            slots[i] = graph_captures[k]
        for r in runners:
            r(slots)
        return [slots[j] for j in out_slots]

    return Executable(run, program.describe(), "\n\n".join(sources))
