"""Tracing: the graph context, the tracer objects it hands out, and ``trace_flat``.

A ``Tracer`` is a mutable *reference* to a graph node, the way a NumPy
variable refers to a buffer: an in-place operation (``a += b``,
``a[1:] = v``) points the same tracer object at a new node, so every Python
name bound to it sees the update.

**Views.** Every op NumPy documents as returning a view (basic indexing,
transposes, ``reshape``/``ravel`` when no copy is needed, ``squeeze``,
``expand_dims``, ``broadcast_to``, ...) gives a tracer that remembers its
base and how to read itself from it and write itself back (``View``). A
write through a view is a write to its base (a functional update of the
base's node), and a view read after its base changed reads the new values:
NumPy's semantics, by construction. Whether a reshape needs a copy depends
on memory layout, so each tracer also carries the element strides NumPy
would give its value (``braze.layout``). Read-only views (``broadcast_to``,
``diagonal``) refuse writes as NumPy does.

**Scalars.** A 0-d result of a ufunc, a reduction or integer indexing is a
NumPy *scalar* (immutable: ``s += 1`` rebinds ``s``; ``s ** 0.5`` is C's
``pow``), while a 0-d array (``x[..., 0]`` of a 1-d ``x``, ``reshape(())``)
is an array. Tracers know which they are, and results come back the same
way.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import indexing, layout, pytree
from .aval import Aval, aval_of_value, check_dtype, is_ndarray, python_scalar_type
from .core import ABSTRACT, KIND, NUMPY_IMPL, PRIMITIVES, bind, pop_context, push_context, with_flag
from .errors import (ConcretizationError, PythonIntOverflowError, RefusedTypeError, RefusedValueError, TraceError,
                     UnsupportedOpError, user_frame, where)
from .graph import Graph, Literal, Node, toposort
from .surface import ArrayMethods
from .views import ReadOnlyError, View, is_view_op, make_view, refresh, result_strides, strides_of

# op name -> rule(ctx, input nodes, params) -> (params, aval), for ops whose
# result comes from tracing a sub-graph (composites) rather than an ABSTRACT rule.
TRACE_RULES: dict[str, Callable] = {}


# ---------------------------------------------------------------- the tracer


def _writes_untraced(name: str, loc: str):
    from .sideeffects import SideEffectError

    return SideEffectError(
        f"{name}{loc} writes into a NumPy array the function did not get as an argument (a global, a closure's, "
        "an attribute's): a compiled program would not write it again at each call; it runs as plain NumPy "
        "instead (pass the array as an argument to compile it)")


def _reread_node(t: "Tracer", view: View, base: "Tracer") -> None:
    t._node_ = t._ctx.record(view.op, (base._node_,), view.params)


class Tracer(ArrayMethods):
    """A traced array: shape and dtype are known, values are not."""

    __slots__ = ("_ctx", "_node_", "_version", "_view", "_base_version", "_scalar", "_strides")

    def __init__(self, ctx: "GraphContext", node: Node, view: View | None = None,
                 scalar: bool = False, strides=None):
        self._ctx = ctx
        self._node_ = node
        self._version = 0
        self._view = view
        self._base_version = view.base._version if view is not None else 0
        self._scalar = scalar
        self._strides = strides if strides is not None or node.aval.ndim else ()

    @property
    def _node(self) -> Node:
        if self._view is not None:
            refresh(self, _reread_node)
        return self._node_

    @property
    def aval(self) -> Aval:
        return self._node.aval

    @property
    def weak(self) -> bool:
        return self._node.aval.weak

    def _is_scalar(self) -> bool:
        return self._scalar

    def _known_value(self, max_size: int = 1 << 20):
        """The value, when it depends on no input or capture (a traced np.zeros(...)
        or arithmetic on constants); else None."""
        node = self._node
        if node.aval.size > max_size or self._ctx.reads_inputs(node):
            return None
        return np.asarray(self._ctx.value(node))

    @property
    def shape(self) -> tuple[int, ...]:
        node = self._node_
        if self._ctx.counted and id(node) in self._ctx.counted:
            self._ctx.observe(node)
        return node.aval.shape

    @property
    def ndim(self) -> int:
        return self._node_.aval.ndim  # (not through ``shape``: a selection's length unread)

    @property
    def dtype(self) -> np.dtype:
        return self._node_.aval.dtype

    @property
    def flags(self):
        return _Flags(self)

    def _relayout(self, order: str, like: "Tracer | None" = None) -> None:
        """A new array (a copy) laid out in ``order`` ('C', 'F', or 'A' and 'K' like
        ``like``, default this array's own strides), as NumPy's copies are."""
        shape = self.shape
        ref = like._strides if isinstance(like, Tracer) else (layout.of_array(like) if is_ndarray(like)
                                                              else self._strides)
        if order == "K":
            self._strides = layout.k_order(shape, [ref]) if ref is not None else None
            return
        if order == "A":
            order = "F" if layout.is_f_contiguous(shape, ref) and not layout.is_c_contiguous(shape, ref) else "C"
        rev = tuple(reversed(shape))
        self._strides = layout.c_strides(shape) if order == "C" else tuple(reversed(layout.c_strides(rev)))

    def __getitem__(self, key):
        result = indexing.getitem(self, key)
        if _is_element(key, len(self.shape)) and isinstance(result, Tracer):
            # NumPy gives a scalar: a copy, not a view
            return Tracer(self._ctx, result._node, scalar=True)
        return result

    def _update(self, value) -> None:
        """Point this tracer at ``value``; through a view, the write goes down the
        chain of views to the array that owns the data (a loop, not recursion)."""
        node = self._ctx.lift(value)
        _ = self._node  # the whole chain current
        written, t = [], self
        while True:
            view = t._view
            base_node = None if view is None else self._ctx.lift(view.write(Tracer(self._ctx, node)))
            t._node_ = node
            t._version += 1
            written.append(t)
            if view is None:
                break
            t, node = view.base, base_node
        for t in written[:-1]:  # each view is now current with its (rewritten) base
            t._base_version = t._view.base._version

    def _can_break(self) -> bool:
        return self._ctx.can_break()

    def _owner(self):
        return self._ctx

    def _concretize(self, convert: Callable, what: str):
        """A Python value of this traced value (a graph break: the trace is
        specialized on it, and a guard checks it at each call), or, where the
        trace has no values (``braze.trace``, ``fullgraph=True``), a
        ConcretizationError."""
        if not self._ctx.can_break():
            raise self._concrete_error(what)
        return self._ctx.specialize(self, convert, what)

    def _concrete_error(self, what: str) -> ConcretizationError:
        loc = user_frame()
        at = f" at {loc[0]}:{loc[1]} (in {loc[2]})" if loc else ""
        return ConcretizationError(
            f"a traced value {self.aval} was {what}{at}. Its value is unknown while tracing. "
            "For a choice between values use np.where(cond, a, b); for Python control flow "
            "make the deciding argument static (a Python int/bool, or static_argnums=...)"
        )

    def __repr__(self):
        return f"Tracer<{self.aval}>"


class _Flags:
    """``x.flags`` of a traced array: what NumPy's would say."""

    _NAMES = {"C": "c_contiguous", "CONTIGUOUS": "c_contiguous", "C_CONTIGUOUS": "c_contiguous",
              "F": "f_contiguous", "FORTRAN": "f_contiguous", "F_CONTIGUOUS": "f_contiguous",
              "W": "writeable", "WRITEABLE": "writeable", "O": "owndata", "OWNDATA": "owndata",
              "A": "aligned", "ALIGNED": "aligned", "X": "writebackifcopy", "WRITEBACKIFCOPY": "writebackifcopy",
              "FNC": "fnc", "FORC": "forc", "B": "behaved", "BEHAVED": "behaved", "CA": "carray",
              "CARRAY": "carray", "FA": "farray", "FARRAY": "farray"}

    def __init__(self, t: Tracer):
        self.writeable = not _read_only(t)
        self.c_contiguous = layout.is_c_contiguous(t.shape, t._strides)
        self.f_contiguous = layout.is_f_contiguous(t.shape, t._strides)
        self.owndata = t._view is None
        self.aligned, self.writebackifcopy = True, False
        self.fnc = self.f_contiguous and not self.c_contiguous
        self.forc = self.f_contiguous or self.c_contiguous
        self.behaved = self.aligned and self.writeable
        self.carray, self.farray = self.behaved and self.c_contiguous, self.behaved and self.fnc

    def __getitem__(self, key):
        return getattr(self, self._NAMES[key.upper()])

    def __repr__(self):
        return "\n".join(f"  {k.upper()} : {getattr(self, k)}" for k in
                         ("c_contiguous", "f_contiguous", "owndata", "writeable", "aligned", "writebackifcopy"))


def _read_only(t: Tracer) -> bool:
    view = t._view
    while view is not None:
        if view.readonly:
            return True
        view = view.base._view
    return False


def _is_element(key, ndim: int) -> bool:
    """Whether ``x[key]`` picks one element with integers only (NumPy returns a
    scalar; with an Ellipsis, a slice or None it is a 0-d view instead)."""
    key = key if isinstance(key, tuple) else (key,)
    return len(key) == ndim and all(
        isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)) for k in key)


_INT_CHECKED = with_flag("int_checked")

# ---------------------------------------------------------------- scalars

# ops whose 0-d results are NumPy scalars (as ufuncs, reductions and products give)
_SCALAR_KINDS = {"elementwise", "reduce", "linalg"}
# The most elementwise nodes of a masked store's value computed again over whole
# arrays (``GraphContext.unselected``).
MAX_UNSELECTED = 64


# ---------------------------------------------------------------- the graph context


def _unknown_upstream(root: Node, memo: dict) -> list[Node]:
    """The nodes ``root`` depends on that ``memo`` (id -> (node, ...)) lacks,
    each after its inputs; the walk stops at the nodes it holds, so asking of
    node after node of a growing graph visits each node once."""
    def known(n):
        hit = memo.get(id(n))
        return hit is not None and hit[0] is n

    return toposort([root], known)


def _deterministic(fn) -> bool:
    """Whether ``fn`` is one of NumPy's functions that compute their results from
    their arguments alone (not ``numpy.random``'s)."""
    module = getattr(fn, "__module__", None) or ""
    return module.split(".")[0] == "numpy" and not module.startswith("numpy.random")


class GraphContext:
    """Records each op as a node (nodes are interned: common subexpressions are
    one node as they are recorded, see ``braze.graph``)."""

    intercepts = "trace"  # braze.intercept: NumPy's constructors and converters give traced arrays

    def __init__(self, target: str | None = None):
        self.target = target  # the compile target, when known (kernel pairs for gradients)
        self.notes: list[str] = []  # gradient decisions, for explain
        self.captures: list[np.ndarray] = []
        self._capture_nodes: dict[int, Node] = {}
        self._sites = 0
        # Graph breaks: the values of the graph's inputs in the call being traced
        # (None: values unknown, a break is an error), and the guards recorded.
        self.concrete: list | None = None
        self.strict = False  # compile(fullgraph=True): no breaks
        self.guards: list[tuple[Node, np.ndarray, str]] = []  # (node, value traced with, what)
        self._values: dict[int, tuple] = {}  # id(node) -> (node, its value)
        self._reads: dict[int, tuple] = {}  # id(node) -> (node, whether it depends on an input or capture)
        self._alike: dict[int, tuple] = {}  # id(node) -> (node, whether computed_alike)
        self.converted = False  # a traced value was converted to a NumPy array (``__array__``)
        self.known = None  # ids of the NumPy arrays the function could reach before (sideeffects.Watch)
        # Selections whose length nothing has read yet (``zr[mask] ** 2``, stored back
        # through the mask): id(node) -> (node, the mask's node); ids of the masks whose count was read
        self.counted: dict[int, tuple] = {}
        self.observed: set[int] = set()
        # op -> hook(args, params, record): stands in for recording ``op`` (``record()`` records
        # it as usual); braze.distributed cuts programs at matmuls with one
        self.hooks: dict[str, Callable] = {}

    def can_break(self) -> bool:
        return self.concrete is not None and not self.strict

    def value(self, node: Node):
        """The value of ``node`` in the call being traced (NumPy, memoized).

        The memo holds each node with its value: keyed by ``id`` alone, a node
        that died (a temporary of a loop) could pass its value to a new node
        given the same address."""
        values = self._values
        hit = values.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        with np.errstate(all="ignore"):
            for n in _unknown_upstream(node, values):
                if n.op == "input":
                    v = self.concrete[n.kw["index"]]
                elif n.op == "capture":
                    v = self.captures[n.kw["index"]]
                elif n.op == "const":
                    v = n.kw["value"].value
                else:
                    v = NUMPY_IMPL[n.op](*(values[id(i)][1] for i in n.inputs), **n.kw)
                values[id(n)] = (n, v)
        return values[id(node)][1]

    def reads_inputs(self, node: Node) -> bool:
        """Whether ``node`` depends on an input or a capture (else it is a
        constant: its value is known while tracing). Memoized as ``value`` is:
        asked at every traced index (``log_b[:, obs[t]]`` in a loop), a walk of
        the whole graph each time made tracing quadratic (a Viterbi decoder of
        400 steps traced in 9.8 s)."""
        memo = self._reads
        for n in _unknown_upstream(node, memo):
            memo[id(n)] = (n, n.op in ("input", "capture") or any(memo[id(i)][1] for i in n.inputs))
        return memo[id(node)][1]

    def computed_alike(self, node: Node) -> bool:
        """Whether ``node`` is computed from literals by braze's ops alone, with no
        input, capture or host call upstream (a host call may read what changes
        between calls), so every call computes the same value: a Python bool or
        number made of it needs no guard. Memoized as ``reads_inputs`` is."""
        memo = self._alike
        for n in _unknown_upstream(node, memo):
            memo[id(n)] = (n, n.op not in ("input", "capture", "host_call") and all(memo[id(i)][1] for i in n.inputs))
        return memo[id(node)][1]

    def specialize(self, tracer: "Tracer", convert: Callable, what: str):
        """``convert`` of the traced value's concrete value, and a guard on it."""
        node = tracer._node
        value = np.array(self.value(node), copy=True)
        loc = where()
        self.converted |= convert is np.asarray
        # The code given the value gets a read-only view: the guard keeps the value
        # traced with (a LAPACK call that overwrote its argument changed it, and every
        # call then failed the guard), and a write meant for the traced array fails
        # loudly instead of going to a copy the program never reads.
        given = self._as_laid_out(tracer, node, value)
        given.flags.writeable = False
        try:
            result = convert(value[()] if tracer._is_scalar() else given)
        except (TypeError, ValueError) as exc:  # as NumPy would refuse it (bool of many elements, ...)
            refused = RefusedValueError if isinstance(exc, ValueError) else RefusedTypeError
            raise refused(f"a traced value {node.aval} was {what}{loc}, which NumPy refuses for "
                          f"this value: {type(exc).__name__}: {exc}") from exc
        if self.computed_alike(node):  # (from literals by braze's ops alone: every call computes the same)
            return result
        shown = repr(result) if len(repr(result)) < 40 else repr(result)[:37] + "..."
        self.guards.append((node, value, f"{what}{loc}"))
        self.notes.append(f"graph break: a traced {node.aval} was {what}{loc}; specialized on "
                          f"{shown} (a guard re-traces when it changes)")
        return result

    def _as_laid_out(self, tracer: "Tracer", node: Node, value: np.ndarray) -> np.ndarray:
        """A view of the concrete value with the strides the traced array says it
        has (``x.strides`` of a strided argument): code reading memory by strides
        (``as_strided(x, ..., x.strides)``) reads what NumPy's would."""
        strides = tracer._strides
        if strides is None or value.ndim == 0 or layout.is_c_contiguous(value.shape, strides):
            return value.view()
        real = self._argument_view(tracer)  # (the caller's memory, unchanged so far)
        if real is not None and layout.of_array(real) == tuple(strides):
            return real.view()
        laid = layout.laid_out(value, strides)
        if laid is None:
            raise ConcretizationError(
                f"a traced {node.aval} with strides {tuple(s * value.itemsize for s in strides)} was converted to a "
                f"NumPy array{where()}, which braze cannot lay out with those strides; copy it first "
                "(np.ascontiguousarray(x)) if the code reads its memory by strides")
        return laid.view()

    def _argument_view(self, tracer: "Tracer"):
        """The caller's array ``tracer`` is (a view of) while no write changed it, else None."""
        ops, t = [], tracer
        while t._view is not None and not t._view.uncertain:
            ops.append((t._view.op, t._view.params))
            t = t._view.base
        node = t._node
        if node.op != "input" or self.concrete is None:
            return None
        real = self.concrete[node.kw["index"]]
        if not is_ndarray(real):
            return None
        for op, params in reversed(ops):
            real = NUMPY_IMPL[op](real, **params)
        return real if is_ndarray(real) else None

    def select(self, x, mask) -> "Tracer":
        """``x[mask]`` for a traced boolean mask of ``x``'s shape: a ``compress``
        node with the length this call selects. It stays in the program as a
        guard (the length may have been read into Python), and a call selecting
        another number of elements traces again."""
        from .ops.index import compress
        from .ops.reduce import reduce_sum

        node = self.lift(mask)
        length = int(np.count_nonzero(self.value(node)))
        loc = where()
        out = compress(x, mask, length=length)
        traced = out
        while not isinstance(traced, Tracer):  # watched by a gradient tape: the value it records
            traced = traced._value_
        expected = None  # (the compress raises GuardFailed itself)
        if node.aval.ndim < traced._node.inputs[0].aval.ndim:
            # rows: the guard is the count alone, so a selection only reduced
            # (X[labels == k].mean(0): passes.masked_sums) never gathers its
            # rows; a sum of the mask, which fuses with the kernels beside it
            # (k-means' eight counts: one pass over the labels, no masks written),
            # checked against the length after the run (check_guards)
            traced = reduce_sum(mask, axes=tuple(range(node.aval.ndim)))
            while not isinstance(traced, Tracer):
                traced = traced._value_
            expected = np.array(length, dtype=traced._node.aval.dtype)
        if type(out) is Tracer and expected is None:
            self.counted[id(out._node_)] = (out._node_, node)
        if any(g is traced._node for g, _, _ in self.guards[-8:]):
            return out  # the same selection again (one node): guarded once
        self.guards.append((traced._node, expected, f"x[mask]{loc}"))
        self.notes.append(f"data-dependent length: x[mask]{loc} selected {length} of "
                          f"{int(np.prod(node.aval.shape))} elements (a guard re-traces when the count changes)")
        return out

    def observe(self, node: Node) -> None:
        """The length of a selection (``node`` is one, or elementwise in one) was
        read: a program that does not compute the selection still guards its count."""
        self.observed.add(id(self.counted[id(node)][1]))

    def unselected(self, x, mask, value, rest: tuple, at: int = 0):
        """``value``, elementwise in selections by ``mask`` (``2 * zr[mask] * zi[mask]
        + ci[mask]``) and in values that broadcast along ``rest``, computed over the
        arrays selected from instead (``2 * zr * zi + ci``), or None. NumPy's store
        ``x[mask] = value`` is then ``np.where(mask, that, x)``: each selected
        element gets the same ops on the same operands, and no selection is made
        (a compaction per operand, and a gather in selection order, otherwise).
        It holds for any count (none, one, all), so the value's length is not
        read (``observe``). Only where nothing in it is watched by a gradient
        tape (plain tracers). The selection's axis is ``value``'s axis ``at``
        (``a[:, mask]``'s is 1), the mask's axes the whole value's."""
        if not all(type(t) is Tracer and t._ctx is self for t in (x, mask, value)):
            return None
        m, shape = mask._node, tuple(value._node.aval.shape)
        if len(shape) != len(rest) + 1:
            return None  # (not one value per selected element: NumPy broadcasts it, another path)
        # (every node of the value's rank is checked to come from the selection, through
        # elementwise ops of operands of its shape: a selection of one is one per element too)
        nd, k = len(shape), m.aval.ndim
        # each node's whole-array value, and where its selection axis is: a transpose
        # moves it (``a[:, mask] *= 2`` selects the mask's axis moved first, and moves it back)
        made: dict[int, tuple] = {}
        stack = [(value._node, False)]
        while stack:
            n, ready = stack.pop()
            if id(n) in made:
                continue
            if n.aval.ndim < nd:
                made[id(n)] = (Tracer(self, n), None)  # (broadcast along its trailing axes only: checked below)
            elif n.aval.ndim != nd or len(made) > MAX_UNSELECTED:
                return None
            elif n.op == "compress" and n.inputs[1] is m:
                made[id(n)] = (Tracer(self, n.inputs[0]), 0)
            elif n.op != "transpose" and KIND.get(n.op) != "elementwise":
                return None
            elif not ready:
                stack.append((n, True))
                stack.extend((i, False) for i in n.inputs if id(i) not in made)
            elif n.op == "transpose":
                whole, axis = made[id(n.inputs[0])]
                if axis is None:
                    return None
                perm = n.kw["perm"]
                wide = [q for p in perm for q in ((range(p, p + k)) if p == axis else (p + k - 1 if p > axis else p,))]
                if whole._node.op == "transpose":  # (the one moving the axis first, undone)
                    wide = [whole._node.kw["perm"][p] for p in wide]
                    whole = Tracer(self, whole._node.inputs[0])
                if wide != list(range(len(wide))):
                    whole = bind("transpose", whole, perm=tuple(wide))
                made[id(n)] = (whole, perm.index(axis))
            else:
                axes = {made[id(i)][1] for i in n.inputs if i.aval.ndim == nd}
                if len(axes) != 1 or None in axes:
                    return None
                (axis,) = axes
                if any(i.aval.ndim == nd and tuple(i.aval.shape) != tuple(n.aval.shape)
                       or i.aval.ndim < nd and i.aval.ndim > nd - 1 - axis for i in n.inputs):
                    return None  # (an operand broadcast along the selection, or across it)
                made[id(n)] = (bind(n.op, *[made[id(i)][0] for i in n.inputs], **n.kw), axis)
        whole, axis = made[id(value._node)]
        return whole if axis == at else None

    def whole_selection(self, a):
        """``a``, a selection by a mask of its array's shape or elementwise in
        such (``x[m]``, ``x[m] * w[m]``), as (the values over the whole arrays,
        the mask), or None: a sum or mean of it is NumPy's ``where=`` reduction
        of those, which reads no length (a new count runs the same program)."""
        entry = self.counted.get(id(a._node_)) if type(a) is Tracer and a._ctx is self else None
        if entry is None:
            return None
        mask = Tracer(self, entry[1])
        whole = self.unselected(a, mask, a, ())
        return None if whole is None else (whole, mask)

    def same_selection(self, a, b) -> bool:
        """Whether ``a`` and ``b`` are selections by one mask (or elementwise in
        them) of one shape: equal in length whatever the count, which comparing
        them need not read."""
        if type(a) is not Tracer or type(b) is not Tracer or a._ctx is not self or b._ctx is not self:
            return False
        ca, cb = self.counted.get(id(a._node_)), self.counted.get(id(b._node_))
        return ca is not None and cb is not None and ca[1] is cb[1] and a._node_.aval.shape == b._node_.aval.shape

    def _count_through(self, op: str, inputs: tuple, out) -> None:
        """An elementwise op of selections by one mask, of the same shape (not one
        element: it would broadcast), beside operands that broadcast along them
        (fewer axes), is a selection by that mask too; any other op reading one
        (a slice, a reshape, a reduction) read its length."""
        counted = [self.counted[id(n)] for n in inputs if id(n) in self.counted]
        if not counted:
            return
        masks = {id(m) for _, m in counted}
        shape = counted[0][0].aval.shape
        if (KIND.get(op) == "elementwise" and type(out) is Tracer and len(masks) == 1 and shape[0] != 1
                and all(c.aval.shape == shape for c, _ in counted)
                and all(id(n) in self.counted or n.aval.ndim < len(shape) for n in inputs)):
            self.counted[id(out._node_)] = (out._node_, counted[0][1])
        else:
            self.observed.update(masks)

    def count_unread_selections(self, roots: list) -> None:
        """Each selection guard (``x[mask]``) that the program's results, and the
        other guards, do not read becomes a guard on its mask's count instead:
        the same condition, checked after the run, without compacting the
        elements (a masked store computed over whole arrays, ``zi[mask] = 2 *
        zr[mask] * zi[mask] + ci[mask]``, read its selections only to trace);
        or no guard at all where nothing read its length either (Python, or
        braze shaping something else by it: ``observe``), so that a new count
        runs the same program instead of tracing again."""
        from .graph import toposort
        from .ops.reduce import reduce_sum

        flat = [k for k, (n, expected, _) in enumerate(self.guards) if n.op == "compress" and expected is None
                and n.inputs[1].aval.shape == n.inputs[0].aval.shape]
        if not flat:
            return
        chosen = set(flat)
        live = {id(n) for n in toposort(list(roots) + [g for k, (g, _, _) in enumerate(self.guards)
                                                         if k not in chosen])}
        guards, counted = [], set()
        for k, (node, expected, what) in enumerate(self.guards):
            if k in chosen and id(node) not in live:
                mask = node.inputs[1]
                if not self.converted and id(node) in self.counted and id(mask) not in self.observed:
                    self.notes.append(f"{what}: its length was never read, and the program does not select: "
                                      "no guard (any count runs this program)")
                    continue
                count = reduce_sum(Tracer(self, mask), axes=tuple(range(mask.aval.ndim)))
                while not isinstance(count, Tracer):  # (watched by a gradient tape: the value it records)
                    count = count._value_
                if id(count._node) in counted:
                    continue  # (selections by one mask: one count)
                counted.add(id(count._node))
                node, expected = count._node, np.array(node.aval.shape[0], dtype=count._node.aval.dtype)
            guards.append((node, expected, what))
        self.guards = guards

    def host_call(self, fn: Callable, name: str, args: tuple, kwargs: dict, why: str):
        """``fn(*args, **kwargs)`` as a graph break: run on the concrete values now,
        recorded as one ``host_call`` node the program runs (NumPy, SciPy, whatever
        ``fn`` is) between compiled regions; results come back as tracers, and
        arrays ``fn`` writes into are updated (their tracers point at the result)."""
        from .ops.call import HostCall, _read_only, is_read_only_write, reads_only

        leaves, treedef = pytree.flatten((tuple(args), dict(kwargs)))
        slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, Tracer)]
        traced = [leaves[i] for i in slots]
        static = [None if isinstance(leaf, Tracer) else leaf for leaf in leaves]
        nodes = tuple(t._node for t in traced)
        loc = where()
        call = HostCall(fn, name, treedef, static, slots, loc, pure=reads_only(fn, kwargs))
        call.weak = tuple(python_scalar_type(n.aval.dtype) if n.aval.weak and n.aval.ndim == 0 else None
                          for n in nodes)
        values = [self.value(n) for n in nodes]
        if not call.pure:  # (NumPy arrays it was given that are not traced: read-only, to see it write them)
            call.static = [_read_only(leaf) if is_ndarray(leaf) else leaf for leaf in static]
        if isinstance(getattr(fn, "__self__", None), np.ufunc) and getattr(fn, "__name__", None) == "at":
            # np.subtract.at(z, idx, v) writes into z, read-only or not (NumPy does not check the
            # flag): given copies, which it writes, from the start
            if args and not isinstance(args[0], Tracer):
                raise _writes_untraced(name, loc)
            call.writes = True
        with np.errstate(all="ignore"):
            try:
                result, given = call.call(values, writable=call.writes)
            except Exception as exc:
                if not is_read_only_write(exc):
                    raise
                call.writes = True
                try:
                    result, given = call.call(values, writable=True)
                except Exception as exc:
                    if not is_read_only_write(exc):
                        raise
                    raise _writes_untraced(name, loc) from None
            finally:
                call.static = static
        out_leaves, out_tree = pytree.flatten(result)
        arrays = []
        for leaf in out_leaves:
            a = np.asarray(leaf)
            if a.dtype == object or a.dtype.kind not in "biuf":
                raise UnsupportedOpError(
                    f"{name}{loc} gave a {type(leaf).__name__} of dtype {a.dtype}; braze runs a call it does not "
                    "trace between compiled regions when its results are arrays or numbers of the dtypes braze "
                    "supports (bool, integers, floats). Call it outside the compiled function, or take its "
                    "real part inside a function you call on NumPy arrays")
            arrays.append(a)
        written = list(given) if call.writes else []
        if not written and call.pure and _deterministic(fn) and all(is_ndarray(leaf) for leaf in out_leaves) \
                and all(self.computed_alike(n) for n in nodes):
            # NumPy's function of values every call computes alike (``np.nonzero`` of a sieve
            # over a static n): its results are constants of the program, computed now
            return pytree.unflatten(out_tree, [self.constant(a) for a in arrays])
        call.out_tree = out_tree
        # (a Python number it returned is weak, as in NumPy: np.allclose gives a bool)
        weak = [type(leaf) in (bool, int, float) for leaf in out_leaves] + [False] * len(written)
        call.avals = tuple(Aval(a.shape, a.dtype, w) for a, w in zip(arrays + written, weak))
        wrote = f", writing into {len(written)} of its arguments" if written else ""
        self.notes.append(f"graph break: {name}{loc} ({why}); run as called, between compiled regions{wrote}")
        if not call.avals:  # no results: run for its effect, kept in the graph as an unchecked guard
            call.dummy = True
            call.avals = (Aval((0,), np.dtype(np.bool_)),)
            node = Node.make("host_call", nodes, call.avals, call=call)
            self.guards.append((Node.make("pick", (node,), call.avals[0], index=0), None, name))
            return pytree.unflatten(out_tree, [])
        node = Node.make("host_call", nodes, call.avals, call=call)
        self._values[id(node)] = (node, tuple(arrays + written))
        picks = []
        for k, a in enumerate(arrays + written):
            pick = Node.make("pick", (node,), node.aval[k], index=k)
            self._values[id(pick)] = (pick, a)
            picks.append(pick)
        # The call runs in every call of the program, even when no result reaches
        # an output: the code may have read its results' shapes into Python numbers
        # (``len(x[mask])``), and running it is what checks they still hold.
        self.guards.append((picks[0], None, name))
        outs = [Tracer(self, p, scalar=not is_ndarray(leaf)) for p, leaf in zip(picks, out_leaves)]
        for t, p in zip(traced, picks[len(arrays):]):
            t._update(Tracer(self, p))
        return pytree.unflatten(out_tree, outs)

    def next_site(self) -> int:
        """A number for each composite call in this trace (explain follows it)."""
        self._sites += 1
        return self._sites - 1

    def new_input(self, index: int, aval: Aval, strides=None, scalar: bool = False) -> Tracer:
        node = Node.make("input", (), aval, index=index)
        return Tracer(self, node, scalar=scalar, strides=strides if strides is not None else
                      layout.c_strides(aval.shape))

    def emit(self, op: str, inputs, aval, **params):
        """Record a node with known avals; a tracer for its result (a tuple of them
        for several results, read through ``pick`` nodes)."""
        node = Node.make(op, tuple(inputs), aval, **params)
        if isinstance(aval, tuple):
            return tuple(Tracer(self, Node.make("pick", (node,), a, index=i)) for i, a in enumerate(aval))
        return Tracer(self, node)

    def record(self, op: str, inputs: tuple, params: dict) -> Node:
        """The node of ``op`` on these input nodes (no tracer, no view: re-reading a view)."""
        aval = ABSTRACT[op](*(n.aval for n in inputs), **params)
        return Node.make(op, inputs, aval, **params)

    def lift(self, value: Any) -> Node:
        """The node for an operand: a tracer's node, a capture, or a literal."""
        if isinstance(value, Tracer):
            if value._ctx is not self:
                raise TraceError(
                    f"a traced value {value.aval} from another trace was used here; it escaped "
                    "the function that traced it (stored in a global, a closure or an attribute?). "
                    "Pass arrays into traced functions and composites as arguments"
                )
            return value._node
        if isinstance(value, (complex, np.complexfloating)):  # (NumPy computes it: the call runs as NumPy)
            raise UnsupportedOpError(
                f"a complex scalar {value!r} is an operand{where()}; braze compiles bool, integer and float arrays")
        if isinstance(value, (bool, int, float, np.generic)):
            aval = aval_of_value(value, "constant")
            return Node.make("const", (), aval, value=Literal(value))
        if isinstance(value, (list, tuple)):
            if any(isinstance(v, ArrayMethods) for v in _flatten_list(value)):
                from . import numpy as bnp

                return self.lift(bnp.array(value, copy=None))
            value = np.asarray(value)
        if is_ndarray(value):
            return self._capture(value)
        if hasattr(value, "_tape"):
            raise TraceError(
                f"an array watched by a gradient tape ({value.aval}) was used where the tape cannot see "
                f"it{where()}: stored into an array the tape does not watch, or passed to a function "
                "traced separately. Build arrays from watched values with np.where / np.stack / "
                "np.concatenate, and call traced functions inside the tape's scope"
            )
        raise TraceError(f"cannot use a {type(value).__name__} as an array operand")

    def constant(self, array: np.ndarray) -> "Tracer":
        """A traced array holding ``array`` (made by NumPy during the trace, never
        written by anyone else: a constant of the program)."""
        array = np.ascontiguousarray(array)
        return Tracer(self, self._capture(array), strides=layout.c_strides(array.shape))

    def _capture(self, array: np.ndarray) -> Node:
        """Arrays from closures, globals or NumPy calls: held by reference, read at each call."""
        node = self._capture_nodes.get(id(array))
        if node is None:
            check_dtype(array.dtype, "captured array")
            aval = Aval(tuple(array.shape), array.dtype)
            node = Node.make("capture", (), aval, index=len(self.captures))
            self.captures.append(array)
            self._capture_nodes[id(array)] = node
        return node

    def process(self, op: str, args: tuple, params: dict):
        hook = self.hooks.get(op)
        if hook is not None:
            return hook(args, params, lambda: self._process(op, args, params))
        return self._process(op, args, params)

    def _process(self, op: str, args: tuple, params: dict):
        if op in _INT_CHECKED and any(type(a) is int for a in args):
            settled = _python_ints(op, args)
            if settled is not None:
                return settled
        inputs = tuple(self.lift(a) for a in args)
        if op in TRACE_RULES:
            params, aval = TRACE_RULES[op](self, inputs, params)
        else:
            aval = ABSTRACT[op](*(n.aval for n in inputs), **params)
        out = self.emit(op, inputs, aval, **params)
        if isinstance(out, Tracer):
            self._annotate(out, op, args, inputs, params)
        if self.counted:
            self._count_through(op, inputs, out)
        return out

    def _annotate(self, out: Tracer, op: str, args, inputs, params) -> None:
        """NumPy's scalar-ness, strides and view-ness of an op's result."""
        aval = out._node_.aval
        if aval.ndim == 0:
            if op == "convert":  # x.astype(...) / x.copy() keep what x was
                first = args[0]
                out._scalar = first._scalar if isinstance(first, Tracer) else not is_ndarray(first)
            else:  # (x[i] by a 0-d index array, as by an int, is a NumPy scalar)
                out._scalar = KIND.get(op) in _SCALAR_KINDS or op == "gather"
        out._strides = result_strides(op, [strides_of(a) for a in args], [n.aval for n in inputs], params, aval)
        if is_view_op(op) and isinstance(args[0], Tracer) and not args[0]._scalar:  # (a scalar is immutable)
            out._view = make_view(op, params, args[0], args[0]._strides, inputs[0].aval.shape, aval.shape)
            out._base_version = args[0]._version


# NEP 50: a Python int meets an integer array as the array's dtype, and one out
# of that dtype's range is an OverflowError in NumPy (x_int8 + 1000), except in
# comparisons, which NumPy answers exactly (x_int8 < 1000 is all True). Codegen
# would wrap the constant instead: a silent wrong answer. np.where wraps, as NumPy.
# (Ops flagged "int_checked" and "comparison" in braze/ops.)


def _python_ints(op: str, args):
    """None, or the result of a comparison that an out-of-range Python int settles;
    raises NumPy's OverflowError for other ops."""
    dtypes = [np.dtype(a.dtype) for a in args if hasattr(a, "dtype") and not getattr(a, "weak", False)]
    ints = [d for d in dtypes if d.kind in "iu"]
    if not ints or any(d.kind not in "iub" for d in dtypes):
        return None
    info = np.iinfo(np.result_type(*ints))
    wild = [a for a in args if type(a) is int and not info.min <= a <= info.max]
    if not wild:
        return None
    if "comparison" not in PRIMITIVES[op].flags:
        raise PythonIntOverflowError(
            f"{op}: Python integer {wild[0]} out of bounds for {np.result_type(*ints)}{where()}, as NumPy says "
            "(NEP 50: a Python int takes the array's dtype); cast the array first (x.astype(np.int64))")
    # every value of the array lies in [min, max]: NumPy's exact comparison is one constant
    from . import numpy as bnp

    ends = np.array([info.min, info.max], np.result_type(*ints))
    samples = [ends if hasattr(a, "dtype") else a for a in args]
    answer = np.asarray(NUMPY_IMPL[op](*samples))
    if answer.min() != answer.max():
        return None
    shape = np.broadcast_shapes(*(tuple(a.shape) for a in args if hasattr(a, "shape")))
    return bnp.full(shape, bool(answer[0]), bool)


def _flatten_list(value):
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, (list, tuple)):
            stack.extend(v)
        else:
            yield v


# ---------------------------------------------------------------- tracing a function


class InputSpec:
    """How one flat argument enters a trace: its abstract value, the strides of
    the array passed (None: C order), whether it is a NumPy scalar, and, for an
    argument that shares memory with others, the alias buffer it is a view of
    (``alias = (buffer index, offset, strides)``) or the earlier argument it is
    (``same = index``)."""

    __slots__ = ("aval", "strides", "scalar", "alias", "same")

    def __init__(self, aval: Aval, strides=None, scalar: bool = False, alias=None, same=None):
        self.aval, self.strides, self.scalar, self.alias, self.same = aval, strides, scalar, alias, same


class OutputSpec:
    """How one flat result leaves a trace: a NumPy scalar or an array, read-only
    or not, and, when NumPy's result is a view of an argument, the argument and
    the view ops (``view = (argument index, ((op, params), ...))``): then the
    result is that view of the caller's own array, as in NumPy."""

    __slots__ = ("scalar", "readonly", "view", "const", "perm", "c_order", "python", "fresh", "traced", "copy", "same",
                 "result_view")

    def __init__(self, scalar: bool, readonly: bool = False, view=None, const=None, perm=None, c_order=False):
        self.scalar, self.readonly, self.view = scalar, readonly, view
        self.const = const  # a Python scalar or a string returned as such (x.ndim, len(x), x.dtype.name)
        self.perm = perm    # a new array NumPy lays out densely in this axis order (slowest first), not C
        self.c_order = c_order  # NumPy's result is C-contiguous (a copy of a Fortran array, say)
        self.fresh = False  # a NumPy array the function made from values (a graph break): a new copy per call
        self.python = None  # the Python type of a weak result (s * 2 for a float argument s)
        self.traced = False  # a traced value (not an object the function returned as it was)
        self.copy = False  # set by the pipeline: the graph's result is memory the caller or braze owns
        self.same = None  # the first result that is this same traced object (``return y, y``), else None
        self.result_view = None  # (k, view ops): NumPy's result is a view of result k (``return y, y[1:]``)


class Trace:
    """What ``trace_flat`` returns: the graph (its outputs are the function's
    results followed by the final value of every mutated input), the indices
    of the mutated inputs, and an ``OutputSpec`` per result."""

    __slots__ = ("graph", "mutated", "outputs", "guards")

    def __init__(self, graph: Graph, mutated: list[int], outputs: list[OutputSpec], guards=()):
        self.graph, self.mutated, self.outputs = graph, mutated, outputs
        self.guards = list(guards)  # (value traced with, what) per guard output, after the mutated ones

    def __iter__(self):  # graph, mutated = trace_flat(...)
        return iter((self.graph, self.mutated))


def _argument_tracers(ctx: GraphContext, specs: list[InputSpec], buffers: list[Aval]):
    """(graph inputs, one tracer per flat argument). Arguments sharing memory
    are views of one buffer input (``strided_view``), or the same tracer."""
    inputs, tracers = [], []
    buffer_tracers = []
    for k, aval in enumerate(buffers):
        t = ctx.new_input(k, aval)
        inputs.append(t)
        buffer_tracers.append(t)
    for spec in specs:
        if spec.same is not None:
            tracers.append(tracers[spec.same])
            continue
        if spec.alias is not None:
            buf, offset, strides = spec.alias
            params = {"offset": offset, "shape": tuple(spec.aval.shape), "strides": tuple(strides)}
            view = bind("strided_view", buffer_tracers[buf], **params)
            tracers.append(view)
            continue
        t = ctx.new_input(len(inputs), spec.aval, strides=spec.strides, scalar=spec.scalar)
        inputs.append(t)
        tracers.append(t)
    return inputs, tracers


def _static_output(value) -> bool:
    """A result that is no number or array, returned as it was (a string:
    ``x.dtype.name``, a dtype: ``x.dtype``, what the function computed from
    static facts; ``np.promote_types(x, x)``, which NumPy refuses for arrays,
    is refused by ``intercept``)."""
    return isinstance(value, (str, bytes, np.dtype)) or value is Ellipsis


def _output_spec(value, tracers, converted: bool = False, known=None) -> OutputSpec:
    if not isinstance(value, Tracer):
        const = value if type(value) in (bool, int, float, complex) or _static_output(value) else None
        spec = OutputSpec(scalar=not is_ndarray(value), const=const)
        # An array the function made with NumPy while traced (np.arange(3.0), or
        # holding a traced value it converted): NumPy would make it anew at each
        # call, so braze returns a copy; a global array comes back itself.
        spec.fresh = is_ndarray(value) and (converted or (known is not None and id(value) not in known))
        return spec
    spec = OutputSpec(scalar=value._scalar and value.aval.ndim == 0, readonly=_read_only(value),
                      perm=_dense_order(value), c_order=layout.is_c_contiguous(value.shape, value._strides))
    spec.traced = True
    if value.aval.weak and value.aval.ndim == 0:  # arithmetic on Python scalars gives a Python scalar
        spec.python = python_scalar_type(value.dtype)
    # an argument, or a view (chain) of one: rebuilt from the caller's array
    ops, t = [], value
    position = {id(arg): k for k, arg in enumerate(tracers)}
    while True:
        k = position.get(id(t))
        if k is not None and (t._view is None or t._view.op == "strided_view" or ops == []):
            spec.view = (k, tuple(reversed(ops)))
            break
        view = t._view
        if view is None or view.uncertain:
            break
        _ = t._node  # current with its base
        ops.append((view.op, view.params))
        t = view.base
    return spec


def _view_of_result(t: Tracer, first: dict, k: int):
    """(j, view ops) when ``t`` is a view (chain) of result ``j`` before
    result ``k`` (NumPy returns it as a view of that result), else None."""
    ops = []
    while t._view is not None and not t._view.uncertain and t._view.op != "strided_view":
        _ = t._node  # current with its base
        ops.append((t._view.op, t._view.params))
        t = t._view.base
        j = first.get(id(t))
        if j is not None and j < k:
            return j, tuple(reversed(ops))
    return None


def _dense_order(t: Tracer):
    """The axis order (slowest first) of a tracer NumPy lays out densely but not
    in C order (an elementwise result of Fortran-ordered inputs: order 'K')."""
    shape, strides = t.shape, t._strides
    if strides is None or len(shape) < 2 or layout.is_c_contiguous(shape, strides):
        return None
    if layout.k_order(shape, [strides]) != tuple(strides) and not layout.is_f_contiguous(shape, strides):
        return None  # not dense (a view's strides): it comes back as a view anyway
    return tuple(sorted(range(len(shape)), key=lambda i: (-(0 if shape[i] == 1 else strides[i]), i)))


def trace_flat(fn: Callable, avals: list[Aval], names: list[str] | None = None, target: str | None = None,
               specs: list[InputSpec] | None = None, buffers: list[Aval] = (), concrete: list | None = None,
               strict: bool = False) -> Trace:
    """Trace ``fn(*tracers)`` whose arguments are the flat inputs.

    ``fn`` receives one tracer per argument and returns a flat list of
    outputs. ``specs`` (default: C-order arrays of ``avals``) say how each
    argument enters, ``buffers`` the avals of alias buffers (graph inputs
    first). The graph's inputs are the buffers, then each argument that is
    not a view of one; see ``Trace``.
    """
    from . import intercept

    specs = specs if specs is not None else [InputSpec(a) for a in avals]
    ctx = GraphContext(target)
    ctx.concrete, ctx.strict = concrete, strict
    push_context(ctx)
    try:
        with intercept.intercepted():
            inputs, tracers = _argument_tracers(ctx, specs, list(buffers))
            originals = [t._node_ for t in inputs]
            outs = fn(*tracers)
            out_nodes = [ctx.lift(0) if _static_output(o) else ctx.lift(o) for o in outs]  # (a static's: unread)
            out_specs = [_output_spec(o, tracers, ctx.converted, ctx.known) for o in outs]
            first: dict[int, int] = {}
            for k, (o, spec) in enumerate(zip(outs, out_specs)):
                if isinstance(o, Tracer) and first.setdefault(id(o), k) != k:
                    spec.same = first[id(o)]
                elif isinstance(o, Tracer) and spec.view is None:
                    spec.result_view = _view_of_result(o, first, k)
            final = [t._node for t in inputs]
            ctx.count_unread_selections(out_nodes + [f for f, o in zip(final, originals) if f is not o])
    finally:
        pop_context(ctx)
    mutated = [i for i, (a, b) in enumerate(zip(originals, final)) if a is not b]
    graph = Graph(
        list(originals),
        out_nodes + [final[i] for i in mutated] + [node for node, _, _ in ctx.guards],
        ctx.captures,
        names,
        notes=ctx.notes,
    )
    return Trace(graph, mutated, out_specs, [(value, what) for _, value, what in ctx.guards])


__all__ = ["Tracer", "GraphContext", "trace_flat", "TRACE_RULES", "bind", "InputSpec", "OutputSpec", "Trace",
           "ReadOnlyError"]
