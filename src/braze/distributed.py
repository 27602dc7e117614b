"""Compiled functions over Dask arrays (``pip install -e ".[dask]"``).

A compiled function called with ``dask.array.Array`` arguments returns Dask
arrays whose blocks braze's compiled kernels compute, lazily. braze does not
schedule, partition or move data itself: it decides from the graph how the
program maps onto chunks and hands Dask ``blockwise`` and ``reduction`` calls.

The plan, from the program traced on the whole arrays:

* Every axis of every array argument gets a symbol; elementwise broadcasting
  joins the symbols of aligned axes (Dask then aligns their chunks).
* A matmul or einsum reading chunked data cuts the program into stages: the
  program up to it runs blockwise and returns its operands, Dask's blocked
  ``matmul``/``einsum`` multiplies them, and the next stage reads the product
  as one more argument (``_Program.stage``: the contractions ``fn`` calls are
  counted, the same in every trace). Symbols come from the whole program,
  the products' axes joined with their operands', so every stage lines up.
* An axis a step needs whole (reduced, scanned, contracted by a matmul that
  is not cut, sliced, reshaped, gathered, or met by a constant's axis) is rechunked to one
  chunk; ``explain`` says which and why. The others stay chunked: each block
  is the program on the blocks of its arguments (``blockwise``), one block
  program per result, shipped only the arrays that result reads.
* A result that is a sum/prod/max/min/any/all over chunked axes is the same
  reduction of the blocks' results: each block reduces its part (a braze
  kernel), and Dask's tree reduction combines the parts with braze kernels.
* The program traced on each distinct block shape must equal the program on
  the whole arrays up to those extents (same ops, same constants). A constant
  made from a chunked extent (``x.sum() / len(x)``) would differ per block:
  then those axes are made whole too, never a wrong answer.

Workers compile the block programs themselves, from braze's persistent
cache (``BRAZE_CACHE_DIR``: give all workers of a node the same directory).
"""
from __future__ import annotations

import itertools
import string
import threading
import uuid
import weakref
from dataclasses import dataclass, field

import numpy as np

from . import pytree
from .errors import BrazeError, where
from .graph import Graph, toposort
from .aval import is_ndarray
from .ops.linalg import parse_einsum

# ops whose result axes follow their (broadcast) operands axis for axis
_ELEMENTWISE_KINDS = ("elementwise",)
_FINAL_REDUCTIONS = {"reduce_sum": np.sum, "reduce_prod": np.prod, "reduce_max": np.max, "reduce_min": np.min,
                     "reduce_any": np.any, "reduce_all": np.all}


def is_dask_array(x) -> bool:
    return type(x).__module__.startswith("dask.array") and hasattr(x, "chunks") and hasattr(x, "dask")


def has_dask_arrays(args, kwargs) -> bool:
    return any(is_dask_array(leaf) for leaf in pytree.flatten((tuple(args), dict(kwargs)))[0])


class DaskPlanError(BrazeError):
    """A call with Dask arrays that braze cannot map onto chunks."""


# ---------------------------------------------------------------- the recipe a worker runs

_compiled: dict = {}
_compiled_lock = threading.Lock()


class _Program:
    """``fn`` with its array arguments filled in from blocks: picklable (Dask
    ships it to the workers), compiled once per process (``token``).

    A *stage* of the program (``stop``/``replaced``, when a call is cut at its
    contractions) counts the matmuls and einsums ``fn`` calls: the ones in
    ``replaced`` return extra arguments (their results, computed by Dask's
    blocked matmul or einsum), and the program ends at contraction ``stop``,
    returning its operands. Arguments in
    ``dropped`` (by position among the arguments and then the matmul results;
    the stage does not read them) are not shipped: traced zeros stand in."""

    def __init__(self, factory, fn, target, template, kwargs, stop=None, replaced=(), dropped=(), only=None):
        self.factory, self.fn, self.target = factory, fn, target  # (factory: braze.Compiled)
        self.template, self.kwargs = template, kwargs
        # dropped: (k, whole shape, dtype, per axis None or (j, axis): the extent of passed array j's axis)
        self.stop, self.replaced, self.dropped = stop, tuple(replaced), tuple(dropped)
        self.only = only  # (result ``only`` alone, when not None)
        self.token = uuid.uuid4().hex
        self._local()

    def _local(self):
        self.binds: dict = {}       # placeholder shapes -> the matmul nodes, in the order fn calls matmul
        self.counting = None        # (the list a trace appends them to)
        self.variants: dict = {}
        self.lock = threading.Lock()

    def stage(self, stop, replaced, dropped, only=None) -> "_Program":
        key = (stop, tuple(replaced), tuple(dropped), only)
        with self.lock:
            if key not in self.variants:
                self.variants[key] = _Program(self.factory, self.fn, self.target, self.template, self.kwargs, *key)
            return self.variants[key]

    def call(self, *arrays):
        out = self._call(*arrays)
        return out if self.only is None else pytree.flatten(out)[0][self.only]

    def _call(self, *arrays):
        n = sum(a is _ARRAY for a in self.template)
        if self.stop is None and not self.replaced and self.counting is None and not self.dropped:
            it = iter(arrays)
            return self.fn(*[next(it) if a is _ARRAY else a for a in self.template], **self.kwargs)
        from .core import current_context

        ctx, seen = current_context(), itertools.count()
        dropped = {k: (shape, dtype, refs) for k, shape, dtype, refs in self.dropped}
        it, values = iter(arrays), []
        for k in range(n + len(self.replaced)):
            if k in dropped:  # (a traced stand-in for a dropped array, of the block's extents: matmuls on it count)
                shape, dtype, refs = dropped[k]
                shape = tuple(arrays[r[0]].shape[r[1]] if r else d for d, r in zip(shape, refs))
                values.append(np.broadcast_to(ctx.constant(np.zeros((), dtype)), shape))
            else:
                values.append(next(it))
        it = iter(values[:n])
        args = [next(it) if a is _ARRAY else a for a in self.template]
        results = dict(zip(self.replaced, values[n:]))
        counting = self.counting

        def contraction(operands, params, record):
            j = next(seen)
            if j in results:
                return results[j].copy()  # (a copy: the program may update it in place; the block is Dask's)
            if j == self.stop:
                raise _Cut(operands)
            out = record()
            if counting is not None:
                counting.append(getattr(out, "_node", None))
            return out

        for op in _CUT_OPS:
            ctx.hooks[op] = contraction
        try:
            return self.fn(*args, **self.kwargs)
        except _Cut as cut:
            return tuple(cut.operands)
        finally:
            for op in _CUT_OPS:
                ctx.hooks.pop(op, None)

    def compiled(self, target=None):
        key = (self.token, target or self.target)
        with _compiled_lock:
            c = _compiled.get(key)
            if c is None:
                c = _compiled[key] = self.factory(self.call, target or self.target)
            return c

    def __getstate__(self):
        return {k: getattr(self, k) for k in ("factory", "fn", "target", "template", "kwargs", "token", "stop",
                                               "replaced", "dropped", "only")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._local()


# ops a call over Dask arrays is cut at, run as dask.array.matmul / dask.array.einsum
_CUT_OPS = ("matmul", "einsum")


class _Cut(BaseException):
    """The stage ends at this matmul (a BaseException: the user's ``except Exception`` lets it through)."""

    def __init__(self, operands):
        super().__init__()
        self.operands = operands


class _ArrayMarker:
    def __repr__(self):
        return "<array>"

    def __reduce__(self):
        return (_array_marker, ())


def _array_marker():
    return _ARRAY


_ARRAY = _ArrayMarker()


# ---------------------------------------------------------------- axis symbols


class _Symbols:
    """Union-find over axis symbols, with the set of symbols needed whole and why."""

    def __init__(self):
        self.parent: dict[int, int] = {}
        self.whole: dict[int, str] = {}
        self._next = itertools.count()

    def new(self) -> int:
        s = next(self._next)
        self.parent[s] = s
        return s

    def find(self, s: int) -> int:
        root = s
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[s] != root:
            self.parent[s], s = root, self.parent[s]
        return root

    def join(self, a, b):
        if a is None:
            return b
        if b is None:
            return a
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra
            why = self.whole.pop(rb, None)
            if why is not None:
                self.whole.setdefault(ra, why)
        return ra

    def need_whole(self, s, why: str) -> None:
        if s is not None:
            self.whole.setdefault(self.find(s), why)

    def is_whole(self, s) -> bool:
        return s is not None and self.find(s) in self.whole


def _analyze(graph: Graph, sy=None, given=None, cut=frozenset()):
    """Axis symbols of the inputs and outputs, the symbols needed whole, and the
    outputs that are final reductions (``{output index: (op, reduced symbols)}``).
    ``given``: the inputs' symbols in ``sy`` (by input index), from the analysis of
    the whole program; matmul nodes in ``cut`` run as Dask's blocked matmul."""
    sy = sy if sy is not None else _Symbols()
    syms: dict[int, list] = {}
    consumers: dict[int, int] = {}
    nodes = toposort(graph.outputs)
    for n in nodes:
        for i in n.inputs:
            consumers[id(i)] = consumers.get(id(i), 0) + 1
    output_ids = {id(o): k for k, o in enumerate(graph.outputs)}
    finals: dict[int, tuple] = {}
    for n in nodes:
        aval = n.aval
        if n.op == "input":
            syms[id(n)] = (list(given[n.kw["index"]]) if given is not None else
                           [None if d == 1 else sy.new() for d in aval.shape])
            continue
        ins = [syms.get(id(i), []) for i in n.inputs]
        if isinstance(aval, tuple):  # several results: whole
            for s in ins:
                for x in s:
                    sy.need_whole(x, f"{n.op} (several results)")
            syms[id(n)] = None
            continue
        nd = aval.ndim
        if n.op in ("const", "capture"):
            # a constant's axes are never chunked: an input axis meeting one is needed whole
            syms[id(n)] = [("const", n.op) if d != 1 else None for d in aval.shape]
            continue
        if n.op == "pick":
            syms[id(n)] = [None] * nd
            continue
        if id(n) in cut and n.op == "einsum":  # Dask's einsum: axes of one letter joined
            specs, out_spec = parse_einsum(n.kw["subscripts"])
            by_letter: dict = {}
            for spec, s, i in zip(specs, ins, n.inputs):
                for c, x, d in zip(spec, s, i.aval.shape):
                    if d != 1:
                        by_letter[c] = _meet(sy, by_letter.get(c), x, n.op)
            syms[id(n)] = [by_letter.get(c) for c in out_spec]
            continue
        if id(n) in cut:  # Dask's matmul: contracted axes joined (it aligns their chunks), free axes kept
            (a, b), (ash, bsh) = ins, (n.inputs[0].aval.shape, n.inputs[1].aval.shape)
            _meet(sy, a[-1], b[-2] if len(bsh) >= 2 else b[-1], n.op)
            batch = nd - (len(ash) >= 2) - (len(bsh) >= 2)
            out = _broadcast(sy, [a[:-2], b[:-2]], [ash[:-2], bsh[:-2]], aval.shape[:batch], n.op)
            syms[id(n)] = out + ([a[-2]] if len(ash) >= 2 else []) + ([b[-1]] if len(bsh) >= 2 else [])
            continue
        kind = _kind(n.op)
        if kind in _ELEMENTWISE_KINDS or n.op == "broadcast_to":
            out = _broadcast(sy, ins, [i.aval.shape for i in n.inputs], aval.shape, n.op)
            if n.op == "broadcast_to":
                for k in range(nd - len(ins[0])):
                    if aval.shape[k] != 1:
                        out[k] = ("new", n.op)
            syms[id(n)] = out
            continue
        if n.op in _FINAL_REDUCTIONS or n.op in ("argmax", "argmin", "cumsum", "cumprod"):
            axes = tuple(n.kw.get("axes", ())) or ((n.kw["axis"],) if n.kw.get("axis") is not None
                                                   else tuple(range(len(ins[0]))))  # (argmax(x): a flat index)
            reduced = [ins[0][a] for a in axes]
            final = (n.op in _FINAL_REDUCTIONS and id(n) in output_ids and consumers.get(id(n), 0) == 0
                     and all(isinstance(x, int) or x is None for x in reduced))
            if final:
                finals[output_ids[id(n)]] = (n.op, [x for x in reduced if x is not None], axes,
                                             bool(n.kw.get("keepdims", False)))
            else:
                for x in reduced:
                    _whole(sy, x, f"{n.op} along the axis")
            if n.op in ("cumsum", "cumprod"):
                syms[id(n)] = list(ins[0])
            elif n.kw.get("keepdims", False):
                syms[id(n)] = [None if k in axes else x for k, x in enumerate(ins[0])]
            else:
                syms[id(n)] = [x for k, x in enumerate(ins[0]) if k not in axes]
            continue
        if n.op == "transpose":
            syms[id(n)] = [ins[0][p] for p in n.kw["perm"]]
            continue
        if n.op == "convert":
            syms[id(n)] = list(ins[0])
            continue
        if n.op == "slice":
            out = []
            for k, ((start, stop, step), x) in enumerate(zip(n.kw["slices"], ins[0])):
                full = (start in (0, None) and step in (1, None) and (stop is None or stop >= n.inputs[0].aval.shape[k]))
                if not full:
                    _whole(sy, x, "a slice of the axis")
                out.append(x if full else ("new", "slice"))
            syms[id(n)] = out
            continue
        if n.op == "reshape" and _squeeze_only(n.inputs[0].aval.shape, aval.shape):
            it = iter(x for x, d in zip(ins[0], n.inputs[0].aval.shape) if d != 1)
            syms[id(n)] = [next(it) if d != 1 else None for d in aval.shape]
            continue
        if n.op == "matmul":
            a, b = ins
            ash, bsh = n.inputs[0].aval.shape, n.inputs[1].aval.shape
            if ash and bsh:
                _whole(sy, a[-1], "contracted by matmul")
                if len(bsh) >= 2:
                    _whole(sy, b[-2], "contracted by matmul")
                else:
                    _whole(sy, b[-1], "contracted by matmul")
            for x in a + b:  # (batch and free axes of a matmul: kept whole too, BLAS runs on the whole block)
                _whole(sy, x, "an operand axis of matmul")
            syms[id(n)] = [("new", "matmul")] * nd
            continue
        # anything else (gathers, scatters, concatenation, linear algebra, graph breaks, composites): whole
        for s in ins:
            for x in s or ():
                _whole(sy, x, f"{n.op}")
        syms[id(n)] = [("new", n.op) if d != 1 else None for d in aval.shape]
    in_syms = [syms[id(i)] if id(i) in syms else list(given[i.kw["index"]]) if given is not None else
               [None if d == 1 else sy.new() for d in i.aval.shape] for i in graph.inputs]  # (or not read)
    out_syms = [syms.get(id(o)) for o in graph.outputs]
    return sy, in_syms, out_syms, finals, syms


def _broadcast(sy, ins, shapes, shape, op) -> list:
    """The symbols of the axes of ``shape``, NumPy's broadcast of operands with
    symbols ``ins`` and shapes ``shapes`` (aligned axes joined)."""
    out = [None] * len(shape)
    for s, sh in zip(ins, shapes):
        off = len(shape) - len(s)
        for k, x in enumerate(s):
            if sh[k] == 1 and shape[off + k] != 1:
                continue  # broadcast from 1
            out[off + k] = _meet(sy, out[off + k], x, op)
    return out


def _kind(op):
    from .core import PRIMITIVES

    p = PRIMITIVES.get(op)
    return p.kind if p is not None else None


def _whole(sy, x, why):
    if isinstance(x, int):
        sy.need_whole(x, why)


def _meet(sy, a, b, op):
    """Two aligned axes: joined symbols; an input axis meeting a constant's is needed whole."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, int) and isinstance(b, int):
        return sy.join(a, b)
    for x in (a, b):
        _whole(sy, x, f"meets a constant's axis in {op}")
    return a if not isinstance(a, int) else b


def _squeeze_only(src, dst) -> bool:
    return [d for d in src if d != 1] == [d for d in dst if d != 1]


# ---------------------------------------------------------------- the plan


@dataclass
class Plan:
    """How one call maps onto Dask: which axes were made whole and why, and
    which results are tree reductions."""

    whole: dict = field(default_factory=dict)   # "argument k axis a" -> why
    reductions: list = field(default_factory=list)
    matmuls: list = field(default_factory=list)
    breaks: list = field(default_factory=list)
    verified_shapes: int = 0

    def describe(self) -> str:
        lines = ["# dask plan"]
        if self.breaks:
            lines.append("graph breaks: the whole program runs as one task on the whole arrays (results whose "
                         "extents a break decides have unknown chunk sizes until computed)")
            lines.extend(f"  {note}" for note in self.breaks)
            return "\n".join(lines)
        for where_, why in self.whole.items():
            lines.append(f"{where_}: rechunked to one chunk ({why})")
        lines.extend(self.matmuls)
        lines.extend(self.reductions)
        lines.append(f"block programs checked against the whole program: {self.verified_shapes} block shape(s)")
        return "\n".join(lines)


_last_plans: dict = {}


def call(compiled, args, kwargs):
    """``compiled(*args, **kwargs)`` with Dask arrays among ``args``: Dask arrays out."""
    import dask.array as da

    sig = compiled.signature
    statics = set(sig.static_argnames)
    for name, value in kwargs.items():
        if name not in statics and (is_dask_array(value) or is_ndarray(value)):
            raise DaskPlanError(f"{compiled.__name__}: pass arrays positionally when calling with Dask arrays "
                                f"(keyword {name!r}){where()}")
    template, arrays, names = [], [], []
    for k, a in enumerate(args):
        if k in sig.static_argnums:
            template.append(a)
        elif is_dask_array(a) or (is_ndarray(a) and a.ndim > 0):
            template.append(_ARRAY)
            arrays.append(a if is_dask_array(a) else da.from_array(a, chunks=a.shape))
            names.append(f"argument {k}")
        else:
            for leaf in pytree.flatten(a)[0]:
                if is_dask_array(leaf):
                    raise DaskPlanError(f"{compiled.__name__}: a Dask array inside argument {k} (a container); "
                                        f"pass Dask arrays as positional arguments{where()}")
            template.append(a)
    program = _program(compiled, tuple(template), dict(kwargs))
    plan = Plan()
    _, structure, traced, built = _trace(program, [_placeholder(a.shape, a.dtype) for a in arrays])
    if built.mutated:
        raise DaskPlanError(f"{compiled.__name__} writes into its argument(s) "
                            f"{', '.join(built.graph.input_names[k] for k in built.mutated)} in place; Dask arrays "
                            f"cannot be written: return the new values instead{where()}")
    if built.breaks:
        outs = _whole_program(da, program, built, arrays, plan)
        _last_plans[compiled.__name__] = plan
        return pytree.unflatten(structure, outs)
    cuts = _cuts(program, traced, arrays)
    binds = program.binds.get(_key(arrays), [])
    sy = given = None
    if cuts:  # axis symbols of the whole program, matmul results included (so stages line up their chunks)
        sy, given, _, _, node_syms = _analyze(traced, cut={id(binds[j]) for j in cuts})
        arrays = _rechunk_whole(da, arrays, given, sy, plan, names)
        given += [[x if x is None or isinstance(x, int) else sy.new() for x in node_syms[id(binds[j])]]
                  for j in cuts]  # (an axis made by a step, not an argument's: a symbol of its own)
    results, first = {}, {}
    for s in cuts:  # each matmul over chunked data: the program up to it, then Dask's blocked matmul
        node = binds[s]
        if id(node) in first:  # (the same product again: one node in the graph, one Dask matmul)
            results[s] = results[first[id(node)]]
            continue
        first[id(node)] = s
        earlier = [j for j in cuts if j < s]
        operands = _run_stage(da, program.stage(s, earlier, ()), arrays + [results[j] for j in earlier],
                              names + [_result_name(binds, j) for j in earlier], plan, compiled.__name__, sy,
                              given[:len(arrays) + len(earlier)])
        if node.op == "matmul":
            out = da.matmul(*operands)
            what = " @ ".join(str(x.shape) for x in operands)
        else:
            out = da.einsum(node.kw["subscripts"], *operands)
            what = f"{node.kw['subscripts']!r} of " + ", ".join(str(x.shape) for x in operands)
        results[s] = out if out.dtype == node.aval.dtype else out.astype(node.aval.dtype)
        plan.matmuls.append(f"{node.op} {s}: {what} as Dask's blocked {node.op} "
                            f"(chunks {' and '.join(_chunks(x) for x in operands)})")
    stage = program.stage(None, cuts, ()) if cuts else program
    outs = _run_stage(da, stage, arrays + [results[j] for j in cuts], names + [_result_name(binds, j) for j in cuts],
                      plan, compiled.__name__, sy, given)
    _last_plans[compiled.__name__] = plan
    return pytree.unflatten(structure, outs)


def _whole_program(da, program, built, arrays, plan):
    """A program with graph breaks (a branch on a traced value, a data-dependent
    shape, a call braze does not trace): one task on the whole arrays, the
    compiled function itself (re-specializing at its guards as on NumPy arrays).
    A result's extents are unknown until computed (``nan`` chunks, as Dask's own
    ``x[mask]``) when a break could change them."""
    import dask

    n = built.n_out
    results = dask.delayed(_Leaves(program, [(o.aval.ndim, o.aval.dtype) for o in built.graph.outputs[:n]]),
                           pure=True)(*arrays)
    outs = []
    for k, out in enumerate(built.graph.outputs[:n]):
        known = not built.guards and all(m.op not in ("host_call", "compress") for m in toposort([out]))
        shape = out.aval.shape if known else tuple(np.nan for _ in out.aval.shape)
        outs.append(da.from_delayed(results[k], shape=shape, dtype=out.aval.dtype,
                                    meta=np.empty((0,) * out.aval.ndim, out.aval.dtype)))
    plan.breaks = [note for note in built.graph.notes if note.startswith(("graph break", "data-dependent"))]
    return outs


class _Leaves:
    """The compiled program's results on whole arrays, checked against the ranks
    and dtypes the Dask arrays promised."""

    def __init__(self, program, expected):
        self.program, self.expected = program, expected

    def __call__(self, *arrays):
        leaves = [np.asarray(x) for x in pytree.flatten(self.program.compiled()(*arrays))[0]]
        got = [(x.ndim, x.dtype) for x in leaves]
        if got != [(nd, np.dtype(dt)) for nd, dt in self.expected]:
            raise DaskPlanError(f"the results' ranks and dtypes {got} differ from those traced "
                                f"{self.expected}: a graph break changed them; call .compute() on the "
                                "arguments and call the function on NumPy arrays")
        return leaves


def _key(arrays) -> tuple:
    return tuple((tuple(a.shape), np.dtype(a.dtype)) for a in arrays)


def _chunks(x) -> str:
    return "x".join(str(c[0]) if len(set(c)) == 1 else f"{c[0]}..{c[-1]}" for c in x.chunks)


def _result_name(binds, j) -> str:
    return f"{binds[j].op} {j} result"


def _cuts(program, graph, arrays) -> list[int]:
    """The contractions (by call order) the program is cut at: live ones reading chunked
    data (``graph``: as traced, before the passes made other nodes)."""
    live = {id(n) for n in toposort(graph.outputs)}
    cuts = []
    for j, node in enumerate(program.binds.get(_key(arrays), ())):
        if node is None or id(node) not in live:
            continue
        if node.op == "einsum" and any(len(set(spec)) < len(spec) for spec in
                                       parse_einsum(node.kw["subscripts"])[0]):
            continue  # (a diagonal: inside the block program, axes whole)
        read = [n.kw["index"] for n in toposort(node.inputs) if n.op == "input"]
        if any(np.prod(arrays[k].numblocks) > 1 for k in read if k < len(arrays)):
            cuts.append(j)
    return cuts


def _run_stage(da, program, arrays, names, plan, fn_name, sy=None, given=None):
    """The Dask arrays of ``program``'s results over ``arrays`` (``given``: their axis
    symbols in ``sy``, when the call is cut into stages). Arrays a result does not
    read are not shipped to its blocks."""
    graph, _, _, _ = _trace(program, [_placeholder(a.shape, a.dtype) for a in arrays])
    n_out = len(graph.outputs)
    if n_out > 1 and program.only is None:  # each result its own program, over the arrays it reads
        return [x for k in range(n_out)
                for x in _run_stage(da, program.stage(program.stop, program.replaced, (), only=k),
                                    arrays, names, plan, fn_name, sy, given)]
    sy, in_syms, out_syms, finals, node_syms = _analyze(graph, sy, given)
    arrays = _rechunk_whole(da, arrays, in_syms, sy, plan, names)
    for _ in range(3):  # whole axes found by comparing block programs are added, then planned again
        inds, letters = _indices(in_syms, sy)  # (one letter per joined symbol)
        chunkss, arrays = da.core.unify_chunks(*[x for a, ind in zip(arrays, inds) for x in (a, ind)])
        bad = _verify_blocks(program, graph, arrays, inds, chunkss, plan)
        if not bad:
            break
        for k, axis in bad:
            sy.need_whole(in_syms[k][axis], "a constant made from the chunked extent (the block program differs)")
        arrays = _rechunk_whole(da, arrays, in_syms, sy, plan, names)
    else:
        raise DaskPlanError(f"{fn_name}: no partitioning of these Dask arrays gives block programs "
                            f"equal to the whole program{where()}")
    read = {n.kw["index"] for n in toposort(graph.outputs) if n.op == "input"}
    kept = [k for k in range(len(arrays)) if k in read]
    block_program = program
    if len(kept) < len(arrays):  # the others: traced zeros of the block's extents stand in
        dropped = []
        for k in range(len(arrays)):
            if k not in read:
                refs = tuple(next(((p, ind.index(c)) for p, ind in enumerate(inds[i] for i in kept) if c in ind),
                                  None) for c in inds[k])
                dropped.append((k, tuple(arrays[k].shape), np.dtype(arrays[k].dtype), refs))
        block_program = program.stage(program.stop, program.replaced, dropped, program.only)
    pairs = [x for k in kept for x in (arrays[k], inds[k])]
    return _outputs(da, block_program, graph, arrays, pairs, inds, letters, out_syms, finals, sy, plan, node_syms)


# compiled function -> {(argument template, keywords): its _Program}: a call with the
# same non-array arguments reuses the program (and its compiled block programs)
_programs: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _program(compiled, template, kwargs) -> _Program:
    try:
        key = (template, tuple(sorted(kwargs.items())))
        hash(key)
    except TypeError:  # (an unhashable static argument: a program for this call alone)
        return _Program(type(compiled), compiled.fn, compiled.target.name, template, kwargs)
    with _compiled_lock:
        mine = _programs.setdefault(compiled, {})
        if key not in mine:
            mine[key] = _Program(type(compiled), compiled.fn, compiled.target.name, template, kwargs)
        return mine[key]


def _placeholder(shape, dtype):
    return np.broadcast_to(np.zeros((), dtype), tuple(int(d) for d in shape))


def _trace(program: _Program, placeholders):
    """The program's graph for arrays of these shapes, and its result structure
    (and the matmuls it calls, in ``program.binds``, when the program is not a stage)."""
    c = program.compiled("generic")
    key = _key(placeholders)
    counting = program.stop is None and not program.replaced
    with program.lock:
        if counting:
            program.counting = []
        try:
            built = c._program(c.signature.split(tuple(placeholders), {}))
        finally:
            if counting:
                if program.counting or key not in program.binds:  # (empty when this trace was cached)
                    program.binds[key] = program.counting
                program.counting = None
    return built.graph, built.out_tree, (built.stages[0][1] if built.stages else built.graph), built


def _rechunk_whole(da, arrays, in_syms, sy, plan, names):
    out = []
    for name, a, syms in zip(names, arrays, in_syms):
        axes = {ax: -1 for ax, s in enumerate(syms) if sy.is_whole(s) and len(a.chunks[ax]) > 1}
        for ax, s in enumerate(syms):
            if sy.is_whole(s):
                plan.whole.setdefault(f"{name} axis {ax}", sy.whole[sy.find(s)])
        out.append(a.rechunk(axes) if axes else a)
    return out


def _indices(in_syms, sy):
    letters: dict = {}
    pool = iter(string.ascii_letters)
    inds = []
    for syms in in_syms:
        ind = []
        for s in syms:
            if s is None:
                ind.append(next(pool))  # a size-1 axis: its own letter
            else:
                r = sy.find(s)
                if r not in letters:
                    letters[r] = next(pool)
                ind.append(letters[r])
        inds.append("".join(ind))
    return inds, letters


def _verify_blocks(program, graph, arrays, inds, chunkss, plan):
    """(argument, axis) pairs whose chunking changes the program (constants from extents)."""
    letters = sorted(chunkss)
    choices = [sorted({chunkss[c][0], chunkss[c][-1]}) for c in letters]
    bad = set()
    count = 0
    for pick in itertools.product(*choices):
        if count >= 8:
            break
        count += 1
        size = dict(zip(letters, pick))
        shapes = [tuple(size[c] for c in ind) for ind in inds]
        block, _, _, _ = _trace(program, [_placeholder(s, a.dtype) for s, a in zip(shapes, arrays)])
        if _differs(graph, block):
            for k, (s, a) in enumerate(zip(shapes, arrays)):
                for ax, d in enumerate(s):
                    if d != a.shape[ax]:
                        bad.add((k, ax))
    plan.verified_shapes += count
    return sorted(bad)


def _differs(whole: Graph, block: Graph) -> bool:
    """Whether the block program is not the whole program up to extents: other
    ops, or other constants (a value made from a chunked extent)."""
    a, b = toposort(whole.outputs), toposort(block.outputs)
    if len(a) != len(b) or len(whole.captures) != len(block.captures):
        return True
    for m, n in zip(a, b):
        if m.op != n.op or len(m.inputs) != len(n.inputs):
            return True
        if m.op == "const" and m.kw["value"] != n.kw["value"]:
            return True
        for (k1, v1), (k2, v2) in zip(m.params, n.params):
            if k1 != k2:
                return True
            if v1 != v2 and k1 not in ("shape", "slices"):  # (extents of chunked axes; const values: above)
                return True
    for c1, c2 in zip(whole.captures, block.captures):
        if c1 is not c2 and not (np.shape(c1) == np.shape(c2) and np.array_equal(c1, c2, equal_nan=True)):
            return True
    return False


def _outputs(da, program, graph, arrays, pairs, inds, letters, out_syms, finals, sy, plan, node_syms):
    pool = iter(c for c in string.ascii_letters if c not in "".join(inds))
    results = []
    for k, out in enumerate(graph.outputs):
        aval, syms = out.aval, out_syms[k]
        if out.op == "input" and k not in finals:  # (an argument returned as it is: no block program)
            results.append(arrays[out.kw["index"]])
            continue
        final = finals.get(k)
        if final is not None:
            op, reduced, axes, keepdims = final
            chunked = [s for s in reduced if not sy.is_whole(s)]
            if chunked:
                results.append(_tree_reduction(da, program, k, graph, pairs, inds, letters, sy, final, aval, plan,
                                               node_syms[id(graph.outputs[k].inputs[0])]))
                continue
        ind, new_axes = [], {}
        for d, s in zip(aval.shape, syms or [("new", "")] * aval.ndim):
            if isinstance(s, int) and sy.find(s) in letters:  # (an axis needed whole is one chunk by now)
                ind.append(letters[sy.find(s)])
            else:
                letter = next(pool)
                ind.append(letter)
                new_axes[letter] = d
        ind = "".join(ind)
        fn = _BlockResult(program, k, aval.dtype)
        results.append(da.blockwise(fn, ind, *pairs, new_axes=new_axes or None, dtype=aval.dtype,
                                    concatenate=True, meta=np.empty((0,) * aval.ndim, aval.dtype)))
    return results


class _BlockResult:
    """Result ``k`` of the compiled program on one tuple of blocks."""

    def __init__(self, program, k, dtype, keep=None):
        self.program, self.k, self.dtype, self.keep = program, k, np.dtype(dtype), keep

    def __call__(self, *blocks):
        out = self.program.compiled()(*blocks)
        leaves = pytree.flatten(out)[0]
        r = np.asarray(leaves[self.k])
        if r.dtype != self.dtype:
            raise DaskPlanError(f"a block result has dtype {r.dtype}; the whole program gives {self.dtype}")
        if self.keep is not None:  # a partial reduction: size-1 axes where it reduced
            r = r.reshape(self.keep(r.shape))
        return r


def _tree_reduction(da, program, k, graph, pairs, inds, letters, sy, final, aval, plan, src_syms):
    op, reduced, axes, keepdims = final
    src = graph.outputs[k].inputs[0]
    in_nd = src.aval.ndim
    # partial results keep every axis of the reduction's input (size 1 where it reduced)
    ind, adjust, new_axes = [], {}, {}
    pool = iter(c for c in string.ascii_letters if c not in "".join(inds))
    for ax in range(in_nd):
        s = src_syms[ax]
        if isinstance(s, int) and sy.find(s) in letters:
            letter = letters[sy.find(s)]
        else:
            letter = next(pool)
            new_axes[letter] = 1 if ax in axes else src.aval.shape[ax]
        ind.append(letter)
        if ax in axes:
            adjust[letter] = 1
    ind = "".join(ind)

    def keep(shape, axes=axes, in_nd=in_nd):
        it = iter(shape)
        return tuple(1 if (a in axes and not keepdims) else next(it) for a in range(in_nd))

    fn = _BlockResult(program, k, aval.dtype, keep=keep)
    partials = da.blockwise(fn, ind, *pairs, new_axes=new_axes or None, adjust_chunks=adjust, dtype=aval.dtype,
                            concatenate=True, meta=np.empty((0,) * in_nd, aval.dtype))
    combine = _Combine(op, program.factory, program.target, aval.dtype)
    plan.reductions.append(f"result {k}: {op} over axes {axes}: each block reduces its part (braze), Dask's tree "
                           f"reduction combines the {op} of the parts (braze)")
    return da.reduction(partials, chunk=combine, aggregate=combine, combine=combine, axis=tuple(axes),
                        keepdims=keepdims, dtype=aval.dtype, concatenate=True,
                        meta=np.empty((0,) * aval.ndim, aval.dtype))


class _Combine:
    """``op`` of the parts along the reduced axes, a compiled braze kernel, in
    the result's dtype (a sum of int8 parts wraps as the whole int8 sum does,
    one of bools is their any: NumPy's own sum of them would promote)."""

    def __init__(self, op, factory, target, dtype):
        self.op, self.factory, self.target, self.dtype = op, factory, target, np.dtype(dtype)

    def __call__(self, x, axis=None, keepdims=False, computing_meta=False, **kwargs):
        if computing_meta:
            return np.empty((0,) * (x.ndim if keepdims else 0), x.dtype)
        key = ("combine", self.op, axis, keepdims, self.target, self.dtype)
        with _compiled_lock:
            f = _compiled.get(key)
            if f is None:
                reduce = _FINAL_REDUCTIONS[self.op]
                kw = {"dtype": self.dtype} if self.op in ("reduce_sum", "reduce_prod") else {}
                f = _compiled[key] = self.factory(lambda a: reduce(a, axis=axis, keepdims=keepdims, **kw),
                                                  self.target)
        return f(np.asarray(x))


def last_plan(name: str) -> Plan | None:
    return _last_plans.get(name)
