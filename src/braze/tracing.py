"""Tracing: the graph context, the tracer objects it hands out, and ``trace``.

A ``Tracer`` is a mutable *reference* to a graph node, the way a NumPy
variable refers to a buffer: an in-place operation (``a += b``,
``a[1:] = v``) points the same tracer object at a new node, so every Python
name bound to it sees the update. A basic-indexing result (``v = a[1:]``)
is a *view*: writing through it updates ``a``, and reading it after ``a``
changed reads the new values, as in NumPy.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import indexing
from .aval import Aval, aval_of_value, check_dtype
from .core import ABSTRACT, NUMPY_IMPL, bind, pop_context, push_context
from .errors import ConcretizationError, TraceError, UnsupportedOpError, user_frame, where
from .graph import Graph, Literal, Node, toposort
from .surface import ArrayMethods

# op name -> rule(ctx, input nodes, params) -> (params, aval), for ops whose
# result comes from tracing a sub-graph (composites) rather than an ABSTRACT rule.
TRACE_RULES: dict[str, Callable] = {}


class Tracer(ArrayMethods):
    """A traced array: shape and dtype are known, values are not."""

    __slots__ = ("_ctx", "_node_", "_version", "_base", "_key", "_base_version", "_element")

    def __init__(self, ctx: "GraphContext", node: Node, base: "Tracer | None" = None, key=None):
        self._ctx = ctx
        self._node_ = node
        self._version = 0
        self._base = base
        self._key = key
        self._base_version = base._version if base is not None else 0
        self._element = False  # x[i, j]: a NumPy scalar (a copy), not a view

    @property
    def _node(self) -> Node:
        base = self._base
        if base is not None:
            _ = base._node  # bring a chain of views up to date first
            if base._version != self._base_version:
                self._node_ = self._ctx.lift(indexing.getitem(base, self._key))
                self._base_version = base._version
                self._version += 1
        return self._node_

    @property
    def aval(self) -> Aval:
        return self._node.aval

    @property
    def weak(self) -> bool:
        return self._node.aval.weak

    def _known_value(self, max_size: int = 1 << 20):
        """The value, when it depends on no input or capture (a traced np.zeros(...)
        or arithmetic on constants); else None."""
        node = self._node
        if node.aval.size > max_size:
            return None
        order = toposort([node])
        if any(n.op in ("input", "capture") for n in order):
            return None
        values = {}
        with np.errstate(all="ignore"):
            for n in order:
                if n.op == "const":
                    values[id(n)] = n.kw["value"].value
                else:
                    values[id(n)] = NUMPY_IMPL[n.op](*(values[id(i)] for i in n.inputs), **n.kw)
        return np.asarray(values[id(node)])

    @property
    def shape(self) -> tuple[int, ...]:
        return self._node_.aval.shape

    @property
    def dtype(self) -> np.dtype:
        return self._node_.aval.dtype

    def __getitem__(self, key):
        result = indexing.getitem(self, key)
        if _is_element(key, len(self.shape)):  # NumPy gives a scalar: a copy
            element = Tracer(self._ctx, self._ctx.lift(result))
            element._element = True
            return element
        if indexing.is_basic(key):
            return Tracer(self._ctx, self._ctx.lift(result), base=self, key=key)
        return result

    def _update(self, value) -> None:
        node = self._ctx.lift(value)
        if self._base is not None:
            self._base[self._key] = Tracer(self._ctx, node)
            self._base_version = self._base._version
        self._node_ = node
        self._version += 1

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


def _is_element(key, ndim: int) -> bool:
    """Whether ``x[key]`` picks one element with integers only (NumPy returns a
    scalar; with an Ellipsis, a slice or None it is a 0-d view instead)."""
    key = key if isinstance(key, tuple) else (key,)
    return len(key) == ndim and all(
        isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)) for k in key)


class GraphContext:
    """Records each op as a node; common subexpressions are shared as recorded."""

    def __init__(self, target: str | None = None):
        self.target = target  # the compile target, when known (kernel pairs for gradients)
        self.notes: list[str] = []  # gradient decisions, for explain
        self.captures: list[np.ndarray] = []
        self._capture_nodes: dict[int, Node] = {}
        self._interned: dict[Node, Node] = {}
        self._sites = 0

    def next_site(self) -> int:
        """A number for each composite call in this trace (explain follows it)."""
        self._sites += 1
        return self._sites - 1

    def intern(self, node: Node) -> Node:
        return self._interned.setdefault(node, node)

    def new_input(self, index: int, aval: Aval) -> Tracer:
        return Tracer(self, self.intern(Node.make("input", (), aval, index=index)))

    def emit(self, op: str, inputs, aval, **params):
        """Record a node with known avals; a tracer for its result (a tuple of them
        for several results, read through ``pick`` nodes)."""
        node = self.intern(Node.make(op, tuple(inputs), aval, **params))
        if isinstance(aval, tuple):
            return tuple(Tracer(self, self.intern(Node.make("pick", (node,), a, index=i))) for i, a in enumerate(aval))
        return Tracer(self, node)

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
        if isinstance(value, (bool, int, float, np.generic)):
            aval = aval_of_value(value, "constant")
            return self.intern(Node.make("const", (), aval, value=Literal(value)))
        if isinstance(value, (list, tuple)):
            if any(isinstance(v, ArrayMethods) for v in _flatten_list(value)):
                raise UnsupportedOpError(
                    "a list containing traced arrays cannot become an array; use np.stack(list) "
                    "or np.concatenate(list)"
                )
            value = np.asarray(value)
        if isinstance(value, np.ndarray):
            return self._capture(value)
        if hasattr(value, "_tape"):
            raise TraceError(
                f"an array watched by a gradient tape ({value.aval}) was used where the tape cannot see "
                f"it{where()}: stored into an array the tape does not watch, or passed to a function "
                "traced separately. Build arrays from watched values with np.where / np.stack / "
                "np.concatenate, and call traced functions inside the tape's scope"
            )
        raise TraceError(f"cannot use a {type(value).__name__} as an array operand")

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
        inputs = tuple(self.lift(a) for a in args)
        if op in TRACE_RULES:
            params, aval = TRACE_RULES[op](self, inputs, params)
        else:
            aval = ABSTRACT[op](*(n.aval for n in inputs), **params)
        return self.emit(op, inputs, aval, **params)


def _flatten_list(value):
    for v in value:
        if isinstance(v, (list, tuple)):
            yield from _flatten_list(v)
        else:
            yield v


def trace_flat(fn: Callable, avals: list[Aval], names: list[str] | None = None, target: str | None = None):
    """Trace ``fn(*tracers)`` whose arguments are the flat inputs.

    ``fn`` receives one tracer per aval and returns a flat list of outputs.
    Returns ``(graph, out_nodes_after, input_tracers)``: the graph's outputs
    are the function's outputs followed by the final value of every input
    that the function updated in place; ``mutated`` lists those inputs.
    """
    from . import intercept

    ctx = GraphContext(target)
    tracers = [ctx.new_input(i, a) for i, a in enumerate(avals)]
    originals = [t._node_ for t in tracers]
    push_context(ctx)
    try:
        with intercept.intercepted():
            outs = fn(*tracers)
            out_nodes = [ctx.lift(o) for o in outs]
            final = [t._node for t in tracers]
    finally:
        pop_context(ctx)
    mutated = [i for i, (a, b) in enumerate(zip(originals, final)) if a is not b]
    graph = Graph(
        [ctx.intern(n) for n in originals],
        out_nodes + [final[i] for i in mutated],
        ctx.captures,
        names,
        notes=ctx.notes,
    )
    return graph, mutated


__all__ = ["Tracer", "GraphContext", "trace_flat", "TRACE_RULES", "bind"]
