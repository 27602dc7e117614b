"""The cpu's re-rolled loops (``braze.reroll``): one numba function per template.

The template (one iteration: a value computed from windows of arrays at
offsets) is fused like any program; when it is one kernel, the rolled loop is
generated around that kernel's serial variant: per iteration, the windows
are sliced at the table row's offsets, the kernel writes the value into a
scratch buffer, and the buffer is stored into the region. Independent
iterations run in parallel chunks (``prange``), each chunk with its own
scratch buffer; the others run in order. The module holds the kernel and the
loop, so it is cached on disk like any kernel (``cpu_cache``).
"""
from __future__ import annotations

import re

import numpy as np

from braze.fusion import MAX_KERNEL_READS, Extern, Loop, View, fuse
from braze.reroll import Rolled

from . import cpu_cache
from .cpu_codegen import FASTMATH, FLAGS, HEADER, PARALLEL_MIN, KernelSource, const_arg, generate, needs_numpy
from .scalar import cast

CHUNKS = 64  # parallel chunks of an independent loop (each takes one scratch buffer)
# Elements an in-order iteration may compute and still be re-rolled: one that
# computes more is a kernel call of its own, multi-threaded, writing straight
# into its region (cpu_memory's direct writes), and a call's dispatch (about
# a microsecond) is small beside its work.
SERIAL_MAX = 1 << 14


def compile_template(spec: Rolled, leaves, iterations: int) -> object | None:
    """``runner(dst, leaves, rows)`` for ``spec`` run ``iterations`` times, or None when its template is not
    one kernel this loop can call (then the run stays unrolled). A carried value's runner returns the last.

    A loop whose extents differ from one iteration to the next (``spec.varying``) reads them from the
    table; its code is written for its first iteration and for its last (``spec.last``), both deciding
    threads by the larger one's work, and must come out the same: what fusion and code generation
    decide by an extent (a short row written out, a size-1 axis indexed) is then decided alike at both
    ends, and every extent between lies between them."""
    if spec.last is None:
        return _compile(spec, leaves, iterations)
    ends = [_compile(s, leaves, iterations) for s in (spec, spec.last)]
    if None in ends:
        return None
    work = max(end.work for end in ends)
    ends = [_compile(s, leaves, iterations, work) for s in (spec, spec.last)]
    if None in ends or ends[0].source != ends[1].source:
        return None
    return ends[0]


def _compile(spec: Rolled, leaves, iterations: int, work: int | None = None) -> object | None:
    """``compile_template`` of one template (``work``: the elements an iteration computes, to decide
    threads by, if not its own)."""
    # a stepped iteration's reads are mostly its carried scalars, and its values may not share
    # any: all of them go to one kernel if they can
    program = fuse(spec.template, max_reads=MAX_KERNEL_READS + len(spec.template.inputs) * bool(spec.carried),
                   one_kernel=bool(spec.carried))
    nwin = len(spec.windows)
    # template inputs: (the carried value: -1; a stepped loop's values: -len..-1), the windows
    # 0..nwin-1, the leaves
    first = len(spec.carried) if spec.carried else int(spec.carry)
    inputs = {id(n): k - first for k, n in enumerate(spec.template.inputs)}
    views = {id(s.node): s.node for s in program.steps if isinstance(s, View)}
    outs = []  # the values stored (one per array of a lockstep loop): a kernel's outputs or a window, reshaped
    for out in spec.template.outputs:
        while out.op == "reshape":
            out = out.inputs[0]
        outs.append(out)
    out = outs[0]
    loops = [s for s in program.steps if isinstance(s, Loop)]
    # a row or column of a leaf picked by an index the iteration reads (``log_b[:, obs[t]]``)
    gathers = [s.node for s in program.steps if isinstance(s, Extern) and _picks_by_scalar(s.node)]
    if len(outs) == 1 and inputs.get(id(out), nwin) < nwin and not spec.carry:
        ks, loop, kernels = None, None, []  # a copy of a window
    elif (loops or gathers) and all(isinstance(s, (Loop, View)) or isinstance(s, Extern) and s.node in gathers
                                    for s in program.steps) and (
            len(loops) == 1 and sorted(map(id, loops[0].outputs)) == sorted(set(map(id, outs)))  # (each its own)
            or len(loops) != 1 and not spec.carry and not spec.carried
            and {id(o) for o in outs} <= {id(o) for lp in loops for o in lp.outputs} | {id(g) for g in gathers}):
        if any(lp.compact or needs_numpy(lp) for lp in loops):
            return None
        # several loops (a lockstep iteration storing a row and an element, ``A[i, k:] -= f *
        # A[k, k:]; b[i] -= f * b[k]``): one kernel each, called in turn, named apart
        kernels = [generate(lp) if len(loops) == 1 else generate(lp, name=f"kernel{j}") for j, lp in enumerate(loops)]
        if (len(kernels) > 1 or gathers) and any(k.has_trig or not k.source.startswith(HEADER) for k in kernels):
            return None
        # (no loop: the values stored are rows an index picks, ``path[t] = psi[t + 1, path[t + 1]]``)
        ks, loop = (kernels[0], loops[0]) if loops else (KernelSource(HEADER, [], [], [], []), None)
    else:
        return None
    named = {id(o): f"o{g}" for g, o in enumerate([o for lp in loops for o in lp.outputs]
                                                 + [g for g in gathers if g in outs])} if ks is not None else {}
    cols = np.cumsum([0] + [len(ext) for _, ext, _ in spec.windows])
    # extents are parameters of the loop (z0, z1, ...), not literals: the runs of a loop
    # nest whose windows shrink (``A[i, k:]`` for each k) are one compiled function
    sizes: dict[int, str] = {}
    column = dict(spec.varying)  # (an extent that differs between iterations: the row's)

    def sized(v) -> str:
        v = int(v)
        if v in column:
            return f"p[{column[v]}]"
        if v <= 1 or spec.carry or spec.carried:
            return str(v)  # (0 and 1 shape the code: a 1 is indexed, not looped)
        return sizes.setdefault(v, f"z{len(sizes)}")

    def bound(shape: tuple) -> str:
        """A scratch buffer's length: the most elements any iteration stores in it."""
        if not any(int(d) in column for d in shape):
            return sized(np.prod(shape, dtype=np.int64))
        return " * ".join(f"m{column[int(d)]}" if int(d) in column else sized(d) for d in shape)

    def window(w: int, drop: bool = False) -> str:
        """Window ``w`` at row ``p``'s offsets; ``drop``: its size-1 dimensions indexed
        by an integer (the reshape dropping them, as NumPy's ``x[:, j]`` makes it)."""
        which, extents, steps = spec.windows[w]
        base = f"l{which}" if which >= 0 else "c" if spec.carry else _dst(spec, -1 - which)
        index = [f"p[{cols[w] + d}]" if drop and e == 1 else _slice(f"p[{cols[w] + d}]", e, s, sized(e))
                 for d, (e, s) in enumerate(zip(extents, steps))]
        return f"{base}[{', '.join(index)}]"

    extents, steps = spec.region or (tuple(spec.template.outputs[0].aval.shape), ())
    size = int(np.prod(extents, dtype=np.int64))
    store, col = [], cols[-1]  # each array's region, from the scratch buffer of the kernel output it stores
    regions = spec.regions if spec.carried else [spec.region, *spec.lockstep, *spec.stores] \
        if spec.region is not None else []
    for j, (ext, st) in enumerate(regions):
        src = "o0" if ks is None else named[id(outs[j])]
        store += _store(ext, st, col, "dst" if spec.carried else _dst(spec, j), src, sized)
        col += len(ext)
    if ks is None:  # (copied first: the window may overlap the region)
        step = [f"o0 = {window(inputs[id(out)])}.copy().reshape({sized(size)})", *store]
        consts, own, scratch = [], size, []
    else:
        call, consts = [], []
        picked = {id(g): f"g{j}" for j, g in enumerate(gathers)}

        def value(src) -> str | None:
            """The expression of a scalar or array ``src`` the iteration computed
            or reads whole: a scratch buffer, a gathered row, an element of a window."""
            made = _made_before(src, views, named)
            if made is not None:  # (an earlier loop's output: its scratch buffer, flat)
                if src.aval.ndim == 0:
                    return f"{named[id(made)]}[0]"
                if src.aval.ndim == 1:
                    return named[id(made)]
                if any(int(d) in column for d in src.aval.shape):
                    return None
                return f"{named[id(made)]}.reshape({tuple(int(d) for d in src.aval.shape)!r})"
            if id(src) in picked:
                return picked[id(src)]
            w = inputs.get(id(src.inputs[0]), nwin) if src.op == "reshape" and id(src) in views else nwin
            if 0 <= w < nwin:
                kept = tuple(e for e in spec.windows[w][1] if e != 1)
                if kept == src.aval.shape:
                    return window(w, drop=True)  # a column, a row, an element: one index
                order = _moved_ones(spec.windows[w][1], src.aval.shape)
                if order is not None:  # (``delta[t - 1][:, None]``: its size-1 axis moved)
                    return f"{window(w)}.transpose({order!r})"
            if id(src) in inputs and nwin <= inputs[id(src)] < nwin + len(leaves):
                return f"l{inputs[id(src)] - nwin}"
            return None

        for step_ in program.steps:
            if isinstance(step_, Extern):  # a gather: checked and wrapped as NumPy's indexing is
                g = step_.node
                j, axis = gathers.index(g), g.kw["axes"][0]
                source, index = value(g.inputs[0]), value(g.inputs[1])
                if source is None or index is None:
                    return None
                size = g.inputs[0].aval.shape[axis]
                call += [f"i{j} = {index}", f"if i{j} < 0:", f"    i{j} += {size}",
                         f"if i{j} < 0 or i{j} >= {size}:",
                         f"    raise IndexError('index out of bounds for axis {axis} with size {size}')",
                         f"g{j} = {source}[{':, ' * axis}i{j}]"]
                if id(g) in named:  # (stored: into its scratch buffer, as a kernel's output is)
                    if g.aval.ndim > 1:
                        return None
                    call.append(f"{named[id(g)]}[{'0' if g.aval.ndim == 0 else ':'}] = g{j}")
                continue
            if not isinstance(step_, Loop):
                continue
            lp = step_
            kernel = kernels[loops.index(lp)]
            args = []
            for leaf in kernel.leaves:
                src = lp.reads(leaf)
                if lp.perm is not None and src.aval.ndim != len(lp.domain):
                    return None  # (the driver's reshape to the loop's rank first: not done here)
                got = value(src)
                if got is not None:
                    args.append(got)
                elif id(src) in inputs and 0 <= inputs[id(src)] < nwin and src.aval.ndim:
                    args.append(window(inputs[id(src)]))
                elif spec.carried and -first <= inputs.get(id(src), 0) < 0:
                    args.append(f"v{inputs[id(src)] + first}")  # a stepped loop's value
                elif inputs.get(id(src)) == -1:
                    args.append("c")  # the carried value, whole
                elif inputs.get(id(src), -1) >= nwin + len(leaves):  # a constant this iteration's own
                    args.append(cast(f"q[{inputs[id(src)] - nwin - len(leaves)}]", src.aval.dtype))
                else:
                    return None  # another view of a window (a transpose, a reshape): not sliced here
                if lp.perm is not None:  # (read in the loop's order, as the driver passes it)
                    args[-1] = f"{args[-1]}.transpose({tuple(lp.perm)!r})"
            args += [named[id(o)] for o in lp.outputs] + [sized(d) for d in lp.domain] \
                + [f"c{len(consts) + k}" for k in range(len(kernel.consts))]
            consts += [const_arg(c) for c in kernel.consts]
            name = "kernel" if len(kernels) == 1 else f"kernel{loops.index(lp)}"
            call.append(f"{name}_serial({', '.join(args)})")
        dtype = np.dtype(loop.outputs[0].aval.dtype).name if loop is not None else None
        if ks.has_trig:  # a sin/cos argument beyond the vector range: this iteration again, with libm
            flagged = call[0][:-1] + ", tf)"
            call = [flagged, "if tf[0]:", "    tf[0] = 0", "    " + flagged.replace("kernel_serial(", "kernel_exact(", 1)]
        step = [*call, *store]
        own = sum(int(np.prod(lp.domain, dtype=np.int64)) for lp in loops) + sum(g.aval.size for g in gathers)
        scratch = [f"        {named[id(o)]} = np.empty({bound(o.aval.shape)}, np.{np.dtype(o.aval.dtype).name})"
                   for o in [o for lp in loops for o in lp.outputs] + [g for g in gathers if id(g) in named]]
    work = own if work is None else work
    if not spec.independent and work >= SERIAL_MAX:
        return None  # each step of a time loop big enough for threads: stays unrolled
    trig = ["tf = np.zeros(1, np.int8)"] if ks is not None and ks.has_trig else []
    if (spec.carried or spec.carry) and (ks is None or loop is None):
        return None  # (a value that is a window or a gather: not a kernel's)
    if spec.carried:
        return _stepped_runner(spec, ks, step, consts, loop.outputs, outs[len(regions):], len(leaves), trig)
    if spec.carry:
        return _carry_runner(ks, call, consts, extents, dtype, len(leaves), trig)
    parallel = spec.independent and iterations * work >= PARALLEL_MIN
    params = ", ".join([_dst(spec, j) for j in range(1 + len(spec.lockstep))] + [f"l{k}" for k in range(len(leaves))]
                       + ["table", "consts"] + [f"c{k}" for k in range(len(consts))] + list(sizes.values()))
    extent_values = tuple(sizes)

    def loop(name: str, threads: bool) -> str:
        body = [
            *(f"    m{c} = table[:, {c}].max()" for _, c in spec.varying
              if any(re.search(rf"\bm{c}\b", line) for line in scratch)),
            "    n = table.shape[0]",
            f"    nch = min(n, {CHUNKS})" if threads else "    nch = min(n, 1)",
            f"    for c in {'prange' if threads else 'range'}(nch):",
            *scratch,
            *("        " + line for line in trig),
            "        for k in range(c * n // nch, (c + 1) * n // nch):",
            "            p = table[k]",
            "            q = consts[k]",
            *("            " + line for line in step),
        ]
        return _function(name, params, body, threads)

    # a parallel loop is tiered as a kernel is: its first call runs the serial
    # variant while the parallel one compiles in the background (cpu_cache)
    kernel_source = HEADER + "".join(k.source[len(HEADER):] for k in kernels) if len(kernels) > 1 \
        else ks.source if ks else HEADER
    source = kernel_source + loop("rolled", parallel) \
        + (loop("rolled_serial", False) if parallel else "")
    scalar = [leaf.aval.ndim == 0 for leaf in leaves]
    fn = []

    def runner(dst, values, rows, crows):
        args = (*(dst if spec.lockstep else (dst,)),
                *[np.asarray(v)[()] if s else np.asarray(v) for v, s in zip(values, scalar)], rows, crows, *consts,
                *extent_values)
        tier = parallel and not fn and not cpu_cache.has_parallel(source)
        if cpu_cache.noted(source, ("rolled_serial", "rolled") if tier else ("rolled",), args):
            return  # (a dry run: see cpu_workers)
        if fn:
            fn[0](*args)
            return
        serial = cpu_cache.load(source, "rolled_serial" if tier else "rolled")
        serial(*args)
        fn.append(serial)
        if tier:
            cpu_cache.compile_parallel_later(source, serial, lambda threads: fn.__setitem__(0, threads), "rolled")

    runner.source = source
    runner.work = own
    return runner


def _picks_by_scalar(node) -> bool:
    """A gather of one row, column, ... of an array by a 0-d index (``log_b[:, obs[t]]``)."""
    return node.op == "gather" and len(node.inputs) == 2 and len(node.kw["axes"]) == 1 \
        and node.inputs[1].aval.shape == () and np.dtype(node.inputs[1].aval.dtype).kind in "iu"


def _moved_ones(extents: tuple, shape: tuple) -> tuple | None:
    """The axes order that makes a window of ``extents`` the array of ``shape`` of
    the same rank by moving its size-1 axes (a (1, n) row as an (n, 1) column),
    the other axes in order; None when it is not one."""
    if len(extents) != len(shape) or sorted(extents) != sorted(shape):
        return None
    ones = [d for d, e in enumerate(extents) if e == 1]
    rest = [d for d, e in enumerate(extents) if e != 1]
    order = [rest.pop(0) if n != 1 else ones.pop(0) for n in shape]
    return tuple(order) if [extents[d] for d in order] == list(shape) else None


def _made_before(src, views: dict, named: dict):
    """The output of one of the template's loops that ``src`` is (or a reshape
    of, a view), or None."""
    while id(src) not in named and src.op == "reshape" and id(src) in views:
        src = src.inputs[0]
    return src if id(src) in named else None


def _carry_runner(ks, call: list, consts: list, shape: tuple, dtype: str, nleaves: int, trig: list):
    """``runner(init, leaves, rows) -> the last value`` of a loop carrying a
    value: the iteration's kernel reads it (``c``) and writes the next into a
    scratch buffer, which then holds it; an array value swaps two buffers (a
    vector without a reshape: numba compiles its reshape in 0.4 s, once a
    process)."""
    if len(shape) == 1:
        head = ["    c = init.copy()", f"    o0 = np.empty({shape[0]}, np.{dtype})"]
        turn = ["        t = c", "        c = o0", "        o0 = t"]
    elif shape:
        size = int(np.prod(shape, dtype=np.int64))
        head = ["    c = init.copy()", f"    o0 = np.empty({size}, np.{dtype})"]
        turn = ["        t = c", f"        c = o0.reshape({shape!r})", f"        o0 = t.reshape({size})"]
    else:
        head = ["    c = init", f"    o0 = np.empty(1, np.{dtype})"]
        turn = ["        c = o0[0]"]
    params = ", ".join(["init"] + [f"l{k}" for k in range(nleaves)] + ["table", "consts"]
                       + [f"c{k}" for k in range(len(consts))])
    body = head + ["    " + line for line in trig] + _ROWS + ["        " + line for line in call] + turn \
        + ["    return c"]
    source = ks.source + _function("rolled", params, body)
    rolled = _loaded(source)

    def runner(init, values, rows, crows):
        init = np.asarray(init, dtype)
        first = np.ascontiguousarray(init) if shape else init[()]
        args = (first, *[np.asarray(v)[()] if np.ndim(v) == 0 else np.asarray(v) for v in values], rows, crows,
                *consts)
        if cpu_cache.noted(source, ("rolled",), args):
            return init.copy()  # (a dry run: see cpu_workers)
        return np.asarray(rolled(*args), dtype)

    runner.source = source
    return runner


def _stepped_runner(spec: Rolled, ks, step: list, consts: list, outputs: list, nexts: list, nleaves: int,
                    trig: list):
    """``runner(dst, values, leaves, rows, crows) -> the last values`` of a
    stepped loop (``Rolled.carried``): per iteration the kernel reads the
    values (``v0``, ``v1``, ...) and writes the stored ones and the next ones
    into scratch buffers; the stores go into ``dst`` and the next values
    become the values."""
    ids = [id(o) for o in outputs]
    dtypes = [np.dtype(a.dtype) for a in spec.carried]
    head = [f"    v{r} = i{r}" for r in range(len(dtypes))]
    head += [f"    o{j} = np.empty({max(int(np.prod(o.aval.shape, dtype=np.int64)), 1)}, "
             f"np.{np.dtype(o.aval.dtype).name})" for j, o in enumerate(outputs)]
    turn = [f"        v{r} = o{ids.index(id(n))}[0]" for r, n in enumerate(nexts)]
    values = ", ".join(f"v{r}" for r in range(len(dtypes)))
    params = ", ".join(["dst"] * bool(spec.regions) + [f"i{r}" for r in range(len(dtypes))]
                       + [f"l{k}" for k in range(nleaves)]
                       + ["table", "consts"] + [f"c{k}" for k in range(len(consts))])
    body = head + ["    " + line for line in trig] + _ROWS + ["        " + line for line in step] + turn \
        + [f"    return ({values},)"]
    source = ks.source + _function("rolled", params, body)
    rolled = _loaded(source)

    def runner(dst, values, leaves, rows, crows):
        args = (*(dst,) * bool(spec.regions), *[np.asarray(v, d)[()] for v, d in zip(values, dtypes)],
                *[np.asarray(v)[()] if np.ndim(v) == 0 else np.asarray(v) for v in leaves], rows, crows, *consts)
        if cpu_cache.noted(source, ("rolled",), args):
            return tuple(np.asarray(v, d) for v, d in zip(values, dtypes))  # (a dry run: see cpu_workers)
        return tuple(np.asarray(v, d) for v, d in zip(rolled(*args), dtypes))

    runner.source = source
    return runner


# An in-order loop's head: one table row of offsets and one of constants an iteration.
_ROWS = ["    for k in range(table.shape[0]):", "        p = table[k]", "        q = consts[k]"]


def _function(name: str, params: str, body: list, parallel: bool = False) -> str:
    """The source of a numba function of the rolled loop's module."""
    return f"\n\n@njit(parallel={parallel}, fastmath={FASTMATH}, {FLAGS})\ndef {name}({params}):\n" \
        + "\n".join(body) + "\n"


def _loaded(source: str):
    """``rolled`` of ``source``'s module, loaded (or compiled) on its first call."""
    fn = []

    def call(*args):
        if not fn:
            fn.append(cpu_cache.load(source, "rolled"))
        return fn[0](*args)

    return call


def _dst(spec: Rolled, j: int) -> str:
    """The name of the array a rolled loop updates (``j``: which of a lockstep loop's)."""
    return f"dst{j}" if spec.lockstep else "dst"


def _store(extents: tuple, steps: tuple, col: int, dst: str = "dst", src: str = "o0", sized=str) -> list[str]:
    """Lines storing the flat scratch buffer ``src`` into the region of ``dst``
    at row ``p``'s offsets (columns from ``col``): a loop per dimension longer
    than one, element by element. (numba's ``dst[a:b, c:d] = o0.reshape(...)``,
    a broadcasting slice assignment, took 3.3 s to compile, each rolled loop.)"""
    if not extents:
        return [f"{dst}[()] = {src}[0]"]
    lines, flat, indent = [], "0", ""
    index = []
    for d, (e, st) in enumerate(zip(extents, steps)):
        if e == 1:
            index.append(f"p[{col + d}]")
            continue
        lines.append(f"{indent}for e{d} in range({sized(e)}):")
        indent += "    "
        index.append(f"p[{col + d}] + {st} * e{d}" if st != 1 else f"p[{col + d}] + e{d}")
        flat = f"e{d}" if flat == "0" else f"{flat} * {sized(e)} + e{d}"
    lines.append(f"{indent}{dst}[{', '.join(index)}] = {src}[{flat}]")
    return lines


def _slice(start: str, extent: int, step: int, size: str | None = None) -> str:
    """``start`` to ``extent`` elements on by ``step``; ``size``: the extent's name in the source."""
    if size is not None and size != str(extent):
        stop = f"{start} + {size}" if step == 1 else f"{start} + ({size} - 1) * {step} + 1"
        return f"{start}:{stop}" + (f":{step}" if step != 1 else "")
    stop = f"{start} + {(extent - 1) * step + 1}" if extent else start
    return f"{start}:{stop}" + (f":{step}" if step != 1 else "")
