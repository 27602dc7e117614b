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

import dataclasses
import os

import numpy as np  # noqa: E402

from braze.fusion import Extern, Loop, Program, View  # noqa: E402
from braze.graph import Graph, collector_paused  # noqa: E402
from braze.passes import rotation  # noqa: E402
from braze.pipeline import fused, unfused  # noqa: E402

import time  # noqa: E402

from . import cpu_cache, cpu_driver, cpu_memory, cpu_tiered, cpu_workers  # noqa: E402
from .base import Executable, SlotLayout, Target  # noqa: E402
from .cpu_codegen import PARALLEL_MIN, generate, needs_numpy  # noqa: E402
from .cpu_reroll import compile_template  # noqa: E402


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
        donated, mutable = frozenset(donated), frozenset(mutable)
        if not cpu_tiered.enabled():
            return _lower_now(graph, donated, mutable)
        steps = unfused(graph)  # (composites inlined: kernels chosen inside their bodies show)
        if any(step.node.op == "kernel" for step in steps.steps):
            return _lower_now(graph, donated, mutable)  # a kernel registered for cpu runs once a call, compiled
        key = None
        if len(steps.steps) >= cpu_workers.PRESTART_STEPS:
            # (not for a program built before: its kernels load from the disk
            # cache, and workers warming up would take cores from its calls)
            key = cpu_cache.program_key(steps.steps)
            if not cpu_cache.program_built(key):
                cpu_workers.prestart()
        first = _lower_numpy(steps, donated, mutable)  # NumPy, op by op, updates in place
        # (a dry run never runs a host call: it would hand the user's code garbage)
        dry = not any(step.node.op == "host_call" for step in steps.steps)
        return cpu_tiered.Tiered(first, lambda: _lower_now(graph, donated, mutable), donated | mutable, dry,
                                 on_built=key and (lambda: cpu_cache.mark_program_built(key)))


def _lower_now(graph: Graph, donated=frozenset(), mutable=frozenset()) -> Executable:
    record: dict = {}
    t0 = time.perf_counter()
    with collector_paused():  # (also in the tiered target's background thread)
        program = fused(graph, record, compact=True, roll=compile_template)
        t1 = time.perf_counter()
        executable = lower_program(program, donated, mutable)
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


def _fold_views(program: Program) -> None:
    """Views that are one NumPy index, made at the step that reads them.

    A kernel's argument that is a slice of an array (``a[1:-1]``, ``b[:, 2:]``:
    a stencil's shifted windows) is read from that array at the slice's offsets,
    so one argument serves every window and no view is made per call (see
    Loop.windows). A kernel's scalar argument that is one element of an array (``a[i, i]``,
    ``s[0]``: a slice of ones reshaped to a scalar, what a loop over elements
    traces to) is read as ``array[index]`` when the kernel is called; a column
    or row (``x[:, i]``: a slice then a reshape dropping its size-1 dimension)
    is one index with an integer there. A rotation (``np.roll``: two slices
    concatenated) is read from its array by an index that wraps around
    (Loop.wraps), through rotations of rotations. View steps (and
    concatenations) no longer read are dropped: a loop unrolled over elements
    or columns made two view steps per element, a roll a copy per call."""
    for step in program.steps:
        if not isinstance(step, Loop) or step.perm is not None or needs_numpy(step):
            continue
        for leaf in step.leaves:
            if leaf.op == "slice" and id(leaf) not in step.dropped and _window(leaf) is not None:
                step.windows[id(leaf)] = _window_of(leaf)
                continue
            kept = _squeezed_axes(leaf) if id(leaf) not in step.dropped else None
            if kept is not None:  # a column x[:, i], a row: read from x at the slice's offsets
                step.windows[id(leaf)] = _window_of(leaf.inputs[0])
                step.squeezed[id(leaf)] = kept
                continue
            if id(leaf) not in step.dropped and rotation(leaf) is not None:
                base, starts, wraps = _rotated_of(leaf)
                step.windows[id(leaf)] = (base, starts, (1,) * len(starts))
                step.wraps[id(leaf)] = wraps
                continue
            if leaf.op != "reshape" or leaf.aval.shape != () or id(leaf) in step.dropped:
                continue
            sl = leaf.inputs[0]
            if sl.op == "slice" and all(d == 1 for d in sl.aval.shape) and all(a >= 0 for a, _, _ in sl.kw["slices"]):
                step.elements[id(leaf)] = (sl.inputs[0], tuple(int(a) for a, _, _ in sl.kw["slices"]))
    uses: dict[int, int] = {}

    def use(node, k=1):
        uses[id(node)] = uses.get(id(node), 0) + k

    for step in program.steps:
        for i in _step_reads(step):
            use(i)
    returned: dict[int, int] = {}
    for o in program.graph.outputs:
        use(o)
        returned[id(o)] = returned.get(id(o), 0) + 1
    # A reshape dropping the size-1 dimensions of a slice only it reads (a column
    # x[:, i], a row, an element) is one NumPy index with integers there.
    for step in program.steps:
        node = step.node if isinstance(step, View) else None
        if node is None or node.op != "reshape" or node.inputs[0].op != "slice" or uses.get(id(node.inputs[0])) != 1:
            continue
        sl = node.inputs[0]
        if ((node.aval.ndim == 0 and uses.get(id(node)) != returned.get(id(node)))
                # (all integers give a NumPy scalar: an element only returned, as a guard's
                # value checked after the run is, a copy as cpu_memory.copied has it)
                or tuple(d for d in sl.aval.shape if d != 1) != tuple(node.aval.shape)
                or any(a < 0 for a, _, _ in sl.kw["slices"])):
            continue
        step.base = sl.inputs[0]
        step.index = tuple(int(a) if d == 1 else slice(a, b, c) for d, (a, b, c) in zip(sl.aval.shape, sl.kw["slices"]))
        use(sl, -1)
        use(step.base)
    # An update storing one constant (``a[i * i::i] = False``) stores the
    # constant itself; NumPy broadcasts it (np.broadcast_to cost 3 us a call).
    for step in program.steps:
        if isinstance(step, Extern) and step.node.op == "update_slice":
            value = step.node.inputs[1]
            if value.op == "broadcast_to" and value.inputs[0].op == "const" and value.inputs[0].aval.shape == ():
                step.fill = value.inputs[0]
                use(value, -1)
    keep = []
    for step in reversed(program.steps):
        # (a concatenation is dropped when kernels read it as a rotation of its array)
        pure = isinstance(step, View) or isinstance(step, Extern) and step.node.op == "concatenate"
        if pure and not uses.get(id(step.node)):
            for i in _step_reads(step):
                use(i, -1)
            continue
        keep.append(step)
    program.steps[:] = keep[::-1]


def _memory_expr(writer, k: int, memory: tuple, aval) -> str:
    """The array a rebased update (cpu_memory._rebased_writes) writes its result
    into: the argument's own, or the pool buffer paired with it."""
    if memory[0] == "input":
        return f"inputs[{memory[1]}]"
    d = writer.bind(f"RD{k}", np.dtype(aval.dtype))
    return f"(pool[{memory[1]}] or _pool_set(pool, {memory[1]}, {tuple(aval.shape)!r}, {d}))[0]"


def _out_windows(loop: Loop, slot_of: dict, direct: dict, program: Program) -> dict:
    """Output index -> steps, for the outputs of ``loop`` written straight into a
    window of the array an in-place update stores them in (``u[1:-1, 1:-1] =
    ...``: a region no flat buffer can be, cpu_memory._direct_writes)."""
    wins = {}
    for k, o in enumerate(loop.outputs):
        if slot_of[id(o)] not in direct:
            continue
        key = direct[slot_of[id(o)]][1]
        if (o.aval.ndim and len(key) == o.aval.ndim and all(sl.start is not None and sl.start >= 0 and sl.step for sl in key)
                and tuple(len(range(sl.start, sl.stop if sl.stop is not None else -1, sl.step)) for sl in key)
                == tuple(o.aval.shape)):
            wins[k] = tuple(sl.step for sl in key)
    return wins


def _anchor_windows(program: Program, kernel_of: dict, out_windows) -> None:
    """Kernels reading several windows of one array (a stencil) read them at
    literal offsets from the first (``generate``'s ``anchored``) where every
    kernel of the program sharing their source reads them at the same offsets
    (a time loop's steps): one compiled kernel still serves them all. Where the
    offsets differ between uses (lags ``x[k:] * x[:-k]`` for k in a loop) the
    starts stay arguments, so the loop still compiles once."""
    groups: dict = {}
    for index, ks in kernel_of.items():
        if ks.deltas:
            groups.setdefault(ks.source, []).append(index)
    for indices in groups.values():
        if len({kernel_of[index].deltas for index in indices}) != 1:
            continue
        step = program.steps[indices[0]]
        anchored = generate(step, out_windows=out_windows(step), anchored=True)
        for index in indices:
            kernel_of[index] = dataclasses.replace(kernel_of[index], source=anchored.source, packed=anchored.packed,
                                                   anchored=anchored.anchored)


# An elementwise kernel whose last axis is at most this long (an RGB image's
# 3, an (n, 3) position array) runs over the last two axes as one.
MERGE_TAIL = 16


def _merge_short_tail(loop: Loop) -> None:
    """Merge an elementwise kernel's short last axis into the one before it, when
    every argument allows: its last two axes are the domain's (read as one
    axis of their product: a NumPy reshape, a view for arrays contiguous there,
    which windows' arrays are when they span the whole last axis) or both
    broadcast. A (1536, 1532, 3) image kernel becomes (1536, 4596): one inner
    loop numba vectorizes, not a loop of 3 per pixel. Outputs are flat buffers."""
    dom = tuple(int(d) for d in loop.domain)
    if (loop.tail_merged or loop.ninner or loop.perm is not None or loop.compact or len(dom) < 2 or dom[-1] > MERGE_TAIL
            or dom[-1] <= 1 or needs_numpy(loop) or loop.wraps):
        return
    merged, windows = {}, {}
    for leaf in loop.leaves:
        if id(leaf) in loop.elements:
            continue
        window = loop.windows.get(id(leaf))
        source = loop.source(leaf)
        shape = tuple(int(d) for d in source.aval.shape)
        if len(shape) < 2:
            if any(d != 1 for d in shape):
                return
            continue  # (right-aligned against the merged domain: still a broadcast)
        tail = shape[-2:]
        if tail == (1, 1) and window is None:
            merged[id(leaf)] = (shape[:-1], shape[:-1])
        elif tail == dom[-2:] and window is None:
            merged[id(leaf)] = (shape[:-2] + (tail[0] * tail[1],),) * 2
        elif tail == dom[-2:] and window is not None:
            base, starts, steps = window
            full = tuple(int(d) for d in base.aval.shape)
            if len(full) != len(shape) or full[-1] != tail[1] or starts[-1] != 0 or steps[-1] != 1 or steps[-2] != 1:
                return
            merged[id(leaf)] = (shape[:-2] + (tail[0] * tail[1],), full[:-2] + (full[-2] * full[-1],))
            windows[id(leaf)] = (base, starts[:-2] + (starts[-2] * full[-1],), steps[:-1])
        else:
            return
    loop.merged.update(merged)
    loop.windows.update(windows)
    loop.domain = dom[:-2] + (dom[-2] * dom[-1],)
    loop.tail_merged = True


def _squeezed_axes(leaf) -> tuple | None:
    """For a reshape that drops size-1 axes of a window (``x[:, i]``, ``x[i]``:
    a slice, then the reshape NumPy's integer index makes), the slice's axes
    that are the reshape's, in order; None for any other leaf."""
    if leaf.op != "reshape" or leaf.aval.ndim == 0 or leaf.inputs[0].op != "slice" or _window(leaf.inputs[0]) is None:
        return None
    src, dst = tuple(leaf.inputs[0].aval.shape), tuple(leaf.aval.shape)
    kept, j = [], 0
    for i, d in enumerate(src):
        if j < len(dst) and d == dst[j]:
            kept.append(i)
            j += 1
        elif d != 1:
            return None
    return tuple(kept) if j == len(dst) else None


def _window(sl) -> tuple | None:
    """(starts, steps) of a slice a kernel reads from its array by offset, or None."""
    slices = sl.kw["slices"]
    if len(slices) != sl.aval.ndim or any(a < 0 or c == 0 for a, _, c in slices):
        return None
    return tuple(int(a) for a, _, _ in slices), tuple(int(c) for _, _, c in slices)


def _window_of(sl) -> tuple:
    """(array, starts, steps): a slice read from its array, through slices of slices."""
    base, (starts, steps) = sl.inputs[0], _window(sl)
    while base.op == "slice" and _window(base) is not None:
        outer_starts, outer_steps = _window(base)
        starts = tuple(a + c * b for a, c, b in zip(outer_starts, outer_steps, starts))
        steps = tuple(c * d for c, d in zip(outer_steps, steps))
        base = base.inputs[0]
    return base, starts, steps


def _rotated_of(node) -> tuple:
    """(array, starts, wraps): a rotation read from its array, through rotations
    of rotations (``np.roll(np.roll(b, 1, 0), -1, 1)``): per axis the start
    and the extent its index wraps around (0: it does not)."""
    starts, wraps = [0] * node.aval.ndim, [0] * node.aval.ndim
    while rotation(node) is not None:
        node, ax, a = rotation(node)
        n = node.aval.shape[ax]
        starts[ax], wraps[ax] = (starts[ax] + a) % n, n
    return node, tuple(starts), tuple(wraps)


def _step_reads(step) -> tuple:
    """The values a step reads: a kernel's per leaf, a view's (folded or not), an op's inputs."""
    if isinstance(step, Loop):
        return tuple(step.reads(leaf) for leaf in step.leaves)
    return step.reads if isinstance(step, View) else step.node.inputs


def _dead_after(program: Program, slot_of: dict) -> dict[int, list[int]]:
    """Step index -> the slots computed by the program that no later step reads
    and the program does not return."""
    keep = {slot_of[id(o)] for o in program.graph.outputs}
    last, made = {}, set()
    for k, step in enumerate(program.steps):
        if isinstance(step, Loop):
            made.update(slot_of[id(o)] for o in step.outputs)
        else:
            made.add(slot_of[id(step.node)])
        reads = [slot_of[id(i)] for i in _step_reads(step)]
        for r in reads:
            last[r] = k
    dead: dict[int, list[int]] = {}
    for slot, k in last.items():
        if slot in made and slot not in keep:
            dead.setdefault(k, []).append(slot)
    return dead


def _lower_numpy(program: Program, donated, mutable) -> Executable:
    """An executable running ``program``'s op steps with NumPy, one by one, with
    the memory plan's in-place updates (``cpu_tiered``: the first calls)."""
    layout = SlotLayout(program.graph)
    memory = cpu_memory.plan(program, layout.slot_of, donated, mutable)
    run = cpu_driver.interpreter(program.steps, layout, [layout.slot_of[id(o)] for o in program.graph.outputs],
                                 memory.inplace, _dead_after(program, layout.slot_of),
                                 memory.checks_inputs)
    return Executable(run, f"NumPy, op by op: {len(program.steps)} steps")


def lower_program(program: Program, donated=frozenset(), mutable=frozenset()) -> Executable:
    graph = program.graph
    layout = SlotLayout(graph)
    slot_of = layout.slot_of
    _fold_views(program)
    memory = cpu_memory.plan(program, slot_of, donated, mutable)
    writer = cpu_driver.Writer()
    sources, kernel_sources, rolled = [], [], 0
    dead = _dead_after(program, slot_of)
    # kernel output slot -> (the array an in-place update stores it in: a slot, or the
    # expression of the memory a rebased update writes, and the update's key)
    direct, rebased = {}, {}
    for slot, k in memory.direct.items():
        node = program.steps[k].node
        key = tuple(slice(a, b, c) for a, b, c in node.kw["slices"])
        direct[slot] = (slot_of[id(node.inputs[0])], key)
        if k in memory.rebased:
            direct[slot] = (_memory_expr(writer, k, memory.rebased[k], node.inputs[0].aval), key)
            rebased[k] = (direct[slot][0], cpu_memory.complement(node.kw["slices"], node.inputs[0].aval.shape))
    direct_updates = set(memory.direct.values())
    kernel_of = {}
    for index, step in enumerate(program.steps):
        if isinstance(step, Loop) and not needs_numpy(step):
            if not any(slot_of[id(o)] in direct for o in step.outputs):
                _merge_short_tail(step)
            kernel_of[index] = generate(step, out_windows=_out_windows(step, slot_of, direct, program))
    _anchor_windows(program, kernel_of, lambda step: _out_windows(step, slot_of, direct, program))
    for index, step in enumerate(program.steps):
        if isinstance(step, Loop) and needs_numpy(step):
            cpu_driver.numpy_loop_step(writer, index, step, slot_of)
            sources.append(f"# {step.name}: {needs_numpy(step)}")
        elif isinstance(step, Loop):
            ks = kernel_of[index]
            work = int(np.prod(step.domain, dtype=np.int64))
            parallel = work >= PARALLEL_MIN
            if parallel and cpu_cache.has_parallel(ks.source):
                kernel = cpu_cache.load(ks.source, "kernel")
                parallel = False  # already compiled: no tiering needed
            else:
                kernel = cpu_cache.load(ks.source, "kernel_serial")
            cpu_driver.loop_step(writer, index, step, slot_of, ks, kernel, memory.buffer, tier_up=parallel,
                                 direct=direct)
            sources.append(f"# {step.name}: {', '.join(m.op for m in step.members)}\n{ks.source}")
            kernel_sources.append(ks.source)
        else:
            if step.node.op == "rolled":  # (its module: the iteration's kernel and the loop over the table)
                spec, table = step.node.kw["spec"], step.node.kw["table"]
                sources.append(f"# {step.name}: rolled loop, {table.rows.shape[0]} iterations, "
                               f"{'independent' if spec.independent else 'in order'}\n{spec.runner.source}")
                rolled += 1
            cpu_driver.op_step(writer, index, step.node, slot_of, index in memory.inplace,
                               direct=index in direct_updates, rebased=rebased.get(index),
                               fold=(step.base, step.index) if isinstance(step, View) and step.base is not None
                               else None, fill=step.fill if isinstance(step, Extern) else None)
        writer.release(dead.get(index))
    run = cpu_driver.finish(writer, layout, [slot_of[id(o)] for o in graph.outputs], len(memory.pool),
                            memory.checks_inputs, program.steps[0].name if program.steps else "empty")
    executable = Executable(run, program.describe(), "\n\n".join(sources))
    executable.driver = run.source
    executable.counts = {"steps": len(program.steps), "kernels": len(kernel_sources), "rebased updates": len(rebased),
                         "distinct kernels": len(set(kernel_sources)), "rolled loops": rolled}
    return executable
