"""The generated call path of a CPU program (TorchInductor's wrapper codegen).

``lower_program`` writes one Python function per program at lowering time:
straight-line code that makes each view, takes each output buffer and calls
each kernel, BLAS routine or NumPy function in order, with every shape,
slot, size and constant written into the source or bound as a global of the
generated module. A call runs that code: no interpreter loop over steps, no
closure per kernel argument, no buffer-spec lookup.

Values live in one list ``s`` (a slot per graph node, ``SlotLayout``): the
code indexes it with literal slot numbers. Programs of many steps are split
into functions of at most ``PART`` steps each (CPython compiles a function in
time that grows faster than its length), called in turn.

Kernels are called through a global name: it first names a wrapper that logs
how the kernel was obtained (compiled or loaded), recovers from a corrupt
numba cache entry and, for tiered kernels, starts the parallel variant's
background compile; the wrapper then rebinds the name to the kernel itself,
and the background compile rebinds it to the parallel kernel when ready.
"""
from __future__ import annotations

import functools
import itertools
import logging
import os
import re
import threading
import time

import numpy as np

from braze.aval import python_scalar_type
from braze.core import NUMPY_IMPL, PRIMITIVES
from braze.errors import GuardFailed
from braze.fusion import Loop

from . import cpu_cache, cpu_host
from .base import numpy_loop
from .generic import weakly_typed
from .cpu_codegen import const_arg
from .cpu_memory import copied, fits, outputs, overlapping

PART = 256  # steps per generated function

_ids = itertools.count()


def buffer(spec, shape, dtype, inputs, outs, safe, pool):
    """The array a kernel output is written into, for the specs the generated
    code does not inline (an argument donated, an array the caller passed)."""
    kind = spec[0]
    if kind == "pool":
        return (pool[spec[1]] or _pool_set(pool, spec[1], shape, dtype))[0]
    if kind == "donate":
        a = inputs[spec[1]]
        if safe and fits(a, shape, dtype):
            return a
        return buffer(spec[2], shape, dtype, inputs, outs, safe, pool) if spec[2] is not None \
            else outputs.empty(shape, dtype)
    if kind == "out" and outs is not None:
        a = outs[spec[1]]
        if a is not None and safe and fits(a, shape, dtype):
            return a
    return outputs.empty(shape, dtype)


def _view_fn(node):
    """The fallback of a view step for a value that is not an ndarray (a NumPy scalar)."""
    fn = NUMPY_IMPL[node.op]
    params = node.kw
    return lambda x: fn(np.asarray(x), **params)


def _view_expr(node, g: str, x: str) -> str | None:
    """Source for the commonest views, with their arguments made once."""
    if node.op == "slice":
        return f"{x}[{g}]", tuple(slice(a, b, c) for a, b, c in node.kw["slices"])
    if node.op == "reshape":
        return f"{x}.reshape({g})", tuple(node.kw["shape"])
    if node.op == "transpose":
        return f"{x}.transpose({g})", tuple(node.kw["perm"])
    return None


class Writer:
    """The generated module's source lines and globals."""

    def __init__(self):
        self.ns: dict = {"np": np, "_nd": np.ndarray, "_empty": np.empty, "_zeros": np.zeros,
                         "_asarray": np.asarray, "_buffer": buffer, "_GuardFailed": GuardFailed,
                         "_outputs": outputs}
        self.parts: list[list[str]] = [[]]
        self.nsteps = 0
        # BRAZE_PROFILE=1 when the program is lowered: every step is timed into
        # a Profile (``PROFILES``), by kind (kernel, BLAS, copy, NumPy, view)
        self.profile = Profile() if os.environ.get("BRAZE_PROFILE") else None
        if self.profile is not None:
            self.ns["_perf"] = time.perf_counter
            self.ns["_prof"] = self.profile

    def bind(self, name: str, value) -> str:
        self.ns[name] = value
        return name

    def release(self, slots) -> None:
        """Drop the program's references to values no later step reads (NumPy
        frees a temporary as soon as it is dead; so must a long program)."""
        if slots:
            self.parts[-1].append(" = ".join(f"s[{k}]" for k in slots) + " = None")

    def step(self, lines: list[str], kind: str = "NumPy op") -> None:
        if self.nsteps and self.nsteps % PART == 0:
            self.parts.append([])
        if self.profile is not None:
            k = self.profile.add(kind)
            lines = ["_t = _perf()", *lines, f"_prof.seconds[{k}] += _perf() - _t"]
        self.parts[-1].extend(lines)
        self.nsteps += 1


class Profile:
    """Seconds spent in each step of a program (BRAZE_PROFILE=1), and its calls."""

    def __init__(self):
        self.kinds: list[str] = []
        self.seconds: list[float] = []
        self.calls = 0
        self.total = 0.0
        PROFILES.append(self)

    def reset(self) -> None:
        """Forget the calls so far (a warm-up's)."""
        self.seconds = [0.0] * len(self.seconds)
        self.calls, self.total = 0, 0.0

    def add(self, kind: str) -> int:
        self.kinds.append(kind)
        self.seconds.append(0.0)
        return len(self.kinds) - 1

    def by_kind(self) -> dict[str, float]:
        """Kind -> seconds per call; ``dispatch`` is the rest of the call's time."""
        out: dict[str, float] = {}
        for kind, sec in zip(self.kinds, self.seconds):
            out[kind] = out.get(kind, 0.0) + sec / max(self.calls, 1)
        out["dispatch and allocation"] = max(self.total / max(self.calls, 1) - sum(out.values()), 0.0)
        return out


PROFILES: list[Profile] = []  # every program lowered with BRAZE_PROFILE=1, in order

# What an op step is, for the profile.
BLAS_OPS = frozenset({"matmul", "dot", "einsum", "tensordot", "solve", "cholesky", "inv", "lstsq", "svd", "eigh",
                      "qr", "det", "slogdet"})
COPY_OPS = frozenset({"update_slice", "concatenate", "copy", "astype", "stack", "pad"})


def _kind(node) -> str:
    if node.op in BLAS_OPS:
        return "BLAS/LAPACK"
    if node.op in COPY_OPS:
        return "copy"
    if node.op == "rolled":
        return "kernel"
    return "NumPy op"


# Element dtypes a kernel takes as Python numbers (``.item``): numba gives them
# the same type, and a Python float's typing costs a third less per call than
# an np.float64's (a loop of element reads is mostly such calls).
_PYTHON_SCALARS = frozenset({np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.bool_)})


# A transposed loop copies a leaf it reads with a stride along its innermost
# axis when the loop has at least this many times the leaf's elements.
SMALL_LEAF = 16


def _leaf_expr(w: Writer, loop: Loop, leaf, slot_of, j: int, k: int) -> str:
    base = loop.reads(leaf)
    x = f"s[{slot_of[id(base)]}]"
    if id(leaf) in loop.elements:
        index = loop.elements[id(leaf)][1]
        if np.dtype(base.aval.dtype) in _PYTHON_SCALARS:  # (numba types a Python float as it does
            return f"{x}.item{index!r}"                 # np.float64, and reads it faster)
        return f"{x}[{index!r}]"
    ndim = base.aval.ndim
    if loop.perm is not None:
        lead = (1,) * (len(loop.domain) - ndim)
        perm = tuple(loop.perm)
        aligned = lead + tuple(base.aval.shape)
        # A small leaf read along the loop's innermost axis with a stride (an (n, 3)
        # array's column under a transposed sum over n) is copied into that order
        # once per call: strided loads do not vectorize, and the copy is a
        # fraction of the reads.
        small = int(np.prod(aligned)) * SMALL_LEAF <= int(np.prod(loop.domain))
        strided = perm[-1] != len(aligned) - 1 and aligned[perm[-1]] != 1
        if small and strided:
            g = w.bind(f"P{j}_{k}", lambda v, lead=lead, perm=perm: (
                lambda a: np.ascontiguousarray(a.reshape(lead + a.shape).transpose(perm)))(np.asarray(v)))
        else:
            g = w.bind(f"P{j}_{k}", lambda v, lead=lead, perm=perm: (
                lambda a: a.reshape(lead + a.shape).transpose(perm))(np.asarray(v)))
        return f"{g}({x})"
    if ndim == 0:
        return f"_asarray({x})[()]"
    if id(leaf) in loop.merged:  # the last two axes as one (a view; a copy if they do not merge)
        return f"{x}.reshape({loop.merged[id(leaf)][1]!r})"
    return x


def _out_expr(w: Writer, spec, shape, dtype, j: int, k: int) -> str:
    d = w.bind(f"D{j}_{k}", np.dtype(dtype))
    if spec is not None and spec[0] == "pool":  # (the buffer and its flat view, made once)
        return f"pool[{spec[1]}] or _pool_set(pool, {spec[1]}, {shape!r}, {d})"
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    fresh = f"_empty({shape!r}, {d})" if nbytes < outputs.MIN_BYTES else f"_outputs.empty({shape!r}, {d})"
    if spec is None:
        return fresh
    sp = w.bind(f"B{j}_{k}", spec)
    call = f"_buffer({sp}, {shape!r}, {d}, inputs, outs, safe, pool)"
    return call if spec[0] == "donate" else f"({fresh} if outs is None else {call})"


def _pool_set(pool, k, shape, dtype):
    """A pool buffer: (the array, its flat view), kept for the thread's later calls."""
    buf = np.empty(shape, dtype)
    pool[k] = pair = (buf, buf.reshape(-1))
    return pair


class _KernelSlot:
    """The kernel behind one global name of the generated code, and its first call."""

    def __init__(self, ns: dict, name: str, loop: Loop, ks, kernel, tier_up: bool):
        self.ns, self.name, self.loop, self.ks = ns, name, loop, ks
        self.kernel, self.tier_up = kernel, tier_up
        ns[name] = self.first

    def first(self, *args):
        kernel = self.kernel
        names = (kernel.py_func.__name__, "kernel") if self.tier_up else (kernel.py_func.__name__,)
        if cpu_cache.noted(self.ks.source, names, args):
            return  # (a dry run: see cpu_workers)
        hits, t0 = sum(kernel.stats.cache_hits.values()), time.perf_counter()
        try:
            kernel(*args)
        except Exception as exc:  # a corrupt numba cache entry: rebuilt once, then rerun
            kernel = self.kernel = cpu_cache.recover(kernel, exc)
            kernel(*args)
        if cpu_cache.logger.isEnabledFor(logging.INFO):
            how = "loaded from numba's disk cache" if sum(kernel.stats.cache_hits.values()) > hits \
                else "compiled by numba"
            cpu_cache.logger.info("%s (%s): %s in %.1f ms", self.loop.name, kernel.py_func.__name__, how,
                                  (time.perf_counter() - t0) * 1e3)
        if self.ns.get(self.name) == self.first:
            self.ns[self.name] = kernel
        if self.tier_up:
            self.tier_up = False
            cpu_cache.compile_parallel_later(self.ks.source, kernel, self.swap)

    def swap(self, parallel):
        self.kernel = parallel
        self.ns[self.name] = parallel


def _exact(source: str):
    """The exact (scalar sin/cos) kernel of ``source``, loaded on its first use."""
    kernel = []

    def run(*args):
        if not kernel:
            kernel.append(cpu_cache.load(source, "kernel_exact"))
        kernel[0](*args)

    return run


def loop_step(w: Writer, j: int, loop: Loop, slot_of: dict, ks, kernel, buffers: dict, tier_up: bool,
              direct: dict | None = None) -> None:
    """Lines running the kernel of ``loop``. ``direct``: output slot -> (slot of
    the array an in-place update stores it in, the update's key)."""
    direct = direct or {}
    name = f"K{j}"
    _KernelSlot(w.ns, name, loop, ks, kernel, tier_up)
    lines = [f"# {loop.name}"]
    args = [_leaf_expr(w, loop, ks.leaves[k], slot_of, j, k) for k in (ks.params or range(len(ks.leaves)))]
    for k, o in enumerate(ks.outputs):
        slot = slot_of[id(o)]
        spec = buffers.get(slot)
        buf = _out_expr(w, spec, tuple(o.aval.shape), o.aval.dtype, j, k)
        pooled = spec is not None and spec[0] == "pool"
        made = [f"o{k}, f{k} = {buf}"] if pooled else [f"o{k} = {buf}", f"f{k} = o{k}.reshape(-1)"]
        if k in ks.out_windows:  # the kernel writes into an array at a window's offsets
            dst, key = direct[slot]
            starts = tuple(sl.start for sl in key)
            zeros = (0,) * len(key)
            lines.append(f"m = {_memory(dst)}")
            lines.append(f"r = m[{w.bind(f'R{j}_{k}', key)}] if safe else None")
            lines.append(f"if r is not None: o{k} = r; f{k} = m; t{k} = {starts!r}")
            lines.append("else:")
            lines.extend("    " + m for m in made[:1] + [f"f{k} = o{k}", f"t{k} = {zeros!r}"])
            lines.append(f"s[{slot}] = o{k}")
            args.append(f"f{k}")
            continue
        if slot in direct:  # written straight into the region an in-place update stores it in
            dst, key = direct[slot]
            lines.append(f"r = {_memory(dst)}[{w.bind(f'R{j}_{k}', key)}] if safe else None")
            lines.append(f"if r is not None and r.flags.c_contiguous: o{k} = r; f{k} = r.reshape(-1)")
            lines.append("else:")
            made = ["    " + m for m in made]
        lines.extend(made)
        lines.append(f"s[{slot}] = o{k}")
        args.append(f"f{k}")
    args += [str(int(d)) for d in loop.domain]
    for k, c in enumerate(ks.consts):
        args.append(w.bind(f"C{j}_{k}", const_arg(c)))
    starts = [int(a) for k, leaf in enumerate(ks.leaves) if id(leaf) in loop.windows and k not in ks.anchored
              for a in loop.windows[id(leaf)][1]]  # (an anchored window's start is its anchor's and a literal)
    if ks.packed:  # the windows' starts (Loop.windows), one array
        args.append(w.bind(f"WV{j}", np.array(starts, np.int64)))
    else:
        args.extend(str(a) for a in starts)
    args.extend(f"*t{k}" for k in ks.out_windows)
    length = loop.compact[0].kw["length"] if loop.compact else None
    if ks.has_trig:
        lines.append("flag = _zeros(1, np.int8)")
        args.append("flag")
    elif length is not None:
        lines.append("flag = _zeros(1, np.int64)")
        args.append("flag")
    if ks.has_trig:  # a sin/cos argument beyond the vector range: exact rerun
        lines.append(f"a = ({', '.join(args)},)")
        lines.append(f"{name}(*a)")
        lines.append(f"if flag[0]: {w.bind(f'X{j}', _exact(ks.source))}(*a)")
    else:
        lines.append(f"{name}({', '.join(args)})")
    if length is not None:  # the mask selected another number of elements
        lines.append(f"if flag[0] != {int(length)}: raise _GuardFailed("
                     f"f'a boolean mask selected {{int(flag[0])}} elements; traced with {int(length)}')")
    w.step(lines, "kernel")


def _memory(dst) -> str:
    """A direct write's destination: a slot, or the expression of a rebased update's memory."""
    return f"s[{dst}]" if isinstance(dst, int) else dst


def numpy_loop_step(w: Writer, j: int, loop: Loop, slot_of: dict) -> None:
    w.step([f"{w.bind(f'N{j}', numpy_loop(loop, slot_of))}(s)  # {loop.name}: NumPy"], "NumPy op")


def op_step(w: Writer, j: int, node, slot_of: dict, inplace: bool, direct: bool = False, fold=None,
            rebased=None, fill=None) -> None:
    """Lines running one op step; ``direct``: an in-place update whose value a
    kernel may have written into place already (``cpu_memory._direct_writes``);
    ``fold``: (base node, index): the view is ``base[index]``; ``rebased``: (the
    memory expression, the complement's keys) of an update whose result goes
    to the other of two memories (``cpu_memory._rebased_writes``); ``fill``:
    the constant an update stores, broadcast by NumPy (``Extern.fill``)."""
    ins = [f"s[{slot_of[id(i)]}]" for i in node.inputs]
    if fill is not None:
        ins[1] = f"s[{slot_of[id(fill)]}]"
    out = slot_of[id(node)]
    if fold is not None:
        base, index = fold
        key = w.bind(f"V{j}", index)
        fb = w.bind(f"W{j}", lambda x, index=index: np.asarray(x)[index])
        w.step([f"x = s[{slot_of[id(base)]}]", f"s[{out}] = x[{key}] if type(x) is _nd else {fb}(x)"], "view")
        return
    if node.op == "broadcast_to" and node.inputs[0].op == "const" and node.aval.shape:
        # (np.ones(n), a constant broadcast: made once here, read-only, as at every call)
        made = NUMPY_IMPL["broadcast_to"](node.inputs[0].kw["value"].value, **node.kw)
        w.step([f"s[{out}] = {w.bind(f'B{j}', made)}  # broadcast_to, a constant"], "view")
        return
    view = None if inplace else _view_expr(node, f"V{j}", "x")
    if view is not None:
        expr, key = view
        w.bind(f"V{j}", key)
        fb = w.bind(f"W{j}", _view_fn(node))
        if not isinstance(node.aval, tuple) and node.aval.shape == () and node.op != "broadcast_to":
            expr += ".copy()"  # (cpu_memory.copied: an element, not a view keeping its array from updates)
        w.step([f"x = {ins[0]}", f"s[{out}] = {expr} if type(x) is _nd else {fb}(x)"], "view")
        return
    fn = w.bind(f"F{j}", cpu_host.impl(node.op))
    if not isinstance(node.aval, tuple) and node.aval.weak:  # a Python scalar, as NEP 50 promotes it
        fn = w.bind(f"F{j}", weakly_typed(cpu_host.impl(node.op), python_scalar_type(node.aval.dtype)))
    kw = ", **" + w.bind(f"Q{j}", dict(cpu_host.faster(node.kw))) if node.kw else ""
    call = f"({', '.join(ins)}{kw})"
    if inplace and node.op == "update_slice":  # (the commonest update, written out)
        key = w.bind(f"V{j}", tuple(slice(a, b, c) for a, b, c in node.kw["slices"]))
        store = [f"    x[{key}] = {ins[1]}"]
        if direct:  # the kernel computing the value wrote it into x[key] unless its own buffer has no base
            store = [f"    v = {ins[1]}", f"    if v.base is None: x[{key}] = v"]
        head = [f"    x = {ins[0]}"]
        if rebased is not None:  # into the other memory: the complement comes across, the region is there
            memory, rest = rebased
            head = [f"    x = {memory}", f"    t = {ins[0]}"]
            for n, c in enumerate(rest):
                ck = w.bind(f"V{j}_{n}", c)
                head.append(f"    x[{ck}] = t[{ck}]")
        w.step(["if safe:", *head, *store, f"    s[{out}] = x",
                f"else: s[{out}] = {fn}{call}  # update_slice, in place"], "copy")
        return
    if inplace:  # write the update into the destination (see cpu_memory)
        fi = w.bind(f"I{j}", PRIMITIVES[node.op].inplace)
        w.step([f"s[{out}] = {fi}{call} if safe else {fn}{call}  # {node.op}, in place"], _kind(node))
    else:
        w.step([f"s[{out}] = {fn}{call}  # {node.op}"], _kind(node))


def _copy_of(fn, *args, **kw):
    value = fn(*args, **kw)
    return value.copy() if type(value) is np.ndarray else value


def interpreter(steps, layout, out_slots: list[int], inplace: set, dead: dict, checks: bool):
    """``run(inputs, outs=None)`` for a program of op steps only (no kernels),
    interpreted: NumPy's work dominates such a program, and generating code
    for it would cost more than running it once (the first call runs it)."""
    plan = []
    for j, step in enumerate(steps):
        node = step.node
        fn = cpu_host.impl(node.op)
        if j in inplace:
            fn = _inplace_or_copy(PRIMITIVES[node.op].inplace, fn)
        elif copied(step):  # (an element: a copy, as op_step makes it)
            fn = functools.partial(_copy_of, fn)
        elif not isinstance(node.aval, tuple) and node.aval.weak:
            fn = weakly_typed(fn, python_scalar_type(node.aval.dtype))
        ins = tuple(layout.slot_of[id(i)] for i in node.inputs)
        plan.append((fn, ins, layout.slot_of[id(node)], cpu_host.faster(node.kw), tuple(dead.get(j, ())), j in inplace))

    def run(inputs, outs=None):
        s = layout.fill(inputs)
        safe = not ((checks or outs is not None) and overlapping(list(inputs) + list(outs or ())))
        with np.errstate(all="ignore"):  # (as the compiled tier: no floating-point warnings, see generic)
            for fn, ins, out, kw, release, inplace_step in plan:
                args = [s[i] for i in ins]
                s[out] = fn(safe, *args, **kw) if inplace_step else fn(*args, **kw)
                for r in release:
                    s[r] = None
        return [s[j] for j in out_slots]

    return run


def _inplace_or_copy(inplace, copy):
    return lambda safe, *args, **kw: (inplace if safe else copy)(*args, **kw)


_SLOT = re.compile(r"\bs\[(\d+)\]")
_WHOLE = re.compile(r"[(,]\s*s\s*[,)]")  # (the slot list itself passed to a helper)


def _localized(parts: list[list[str]], keep: set) -> list[list[str]]:
    """The parts with each slot that only one of them uses (and that is no
    input, constant, capture or result) made a local variable of that
    function: a local costs one bytecode to read or write, a list slot three."""
    used: dict[int, set] = {}
    for p, lines in enumerate(parts):
        for line in lines:
            for m in _SLOT.finditer(line):
                used.setdefault(int(m.group(1)), set()).add(p)
    out = []
    for p, lines in enumerate(parts):
        local = {k for k, where_used in used.items() if where_used == {p} and k not in keep}
        if not local or any(_WHOLE.search(line) for line in lines):
            out.append(lines)
            continue
        out.append([_SLOT.sub(lambda m: f"_s{m.group(1)}" if int(m.group(1)) in local else m.group(0), line)
                    for line in lines])
    return out


def finish(w: Writer, layout, out_slots: list[int], npool: int, checks: bool, label: str):
    """Compile the generated module; its ``run(inputs, outs=None)``."""
    w.ns["_pool_set"] = _pool_set
    w.ns["_overlapping"] = overlapping
    w.ns["_local"] = threading.local()
    w.ns["_captures"] = layout.graph_captures
    src = []
    keep = set(range(layout.ninputs)) | {i for i, _ in layout.consts} | {i for i, _ in layout.captures} | set(out_slots)
    for p, lines in enumerate(_localized(w.parts, keep)):
        src.append(f"def part{p}(s, inputs, outs, safe, pool):")
        src.extend("    " + line for line in lines)
        src.append("    return\n")
    src.append("def run(inputs, outs=None):")
    src.append(f"    s = [None] * {layout.nslots}")
    src.append(f"    s[:{layout.ninputs}] = inputs")
    for i, value in layout.consts:
        src.append(f"    s[{i}] = {w.bind(f'L{i}', value)}")
    for i, k in layout.captures:
        src.append(f"    s[{i}] = _captures[{k}]")
    if npool:
        src.append("    pool = getattr(_local, 'pool', None)")
        src.append(f"    if pool is None: pool = _local.pool = [None] * {npool}")
    else:
        src.append("    pool = None")
    if checks:
        src.append("    safe = not _overlapping(list(inputs) + list(outs or ()))")
    else:
        src.append("    safe = outs is None or not _overlapping(list(inputs) + list(outs))")
    for p in range(len(w.parts)):
        src.append(f"    part{p}(s, inputs, outs, safe, pool)")
    if w.profile is not None:  # the call's time, from entry (calls and total)
        src.insert(src.index("def run(inputs, outs=None):") + 1, "    _t_run = _perf()")
        src.append("    _prof.calls += 1; _prof.total += _perf() - _t_run")
    src.append(f"    return [{', '.join(f's[{j}]' for j in out_slots)}]")
    text = "\n".join(src) + "\n"
    code = compile(text, f"<braze driver {label} {next(_ids)}>", "exec")
    exec(code, w.ns)
    run = w.ns["run"]
    run.source = text
    return run
