"""The graph IR: one immutable, hash-consed node type, a graph of them, and its text form.

A node is ``(op, inputs, params, aval)``, interned at construction: building a
node equal to one that exists (same op, the *same* input objects, equal params
and aval) returns the existing object. So equality is identity, hashing is
O(1), a rewrite that changes nothing returns the very node it was given, and
common subexpressions are shared as they are built (no pass merges them).
Nothing compares graphs recursively; every walk uses an explicit stack.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import threading
import weakref
from typing import Any, Callable, Iterable

import numpy as np

from .aval import short_dtype


class Literal:
    """A scalar constant, compared by its bits so -0.0 != 0.0 and NaN == NaN."""

    __slots__ = ("value", "_key")

    def __init__(self, value):
        value = value if isinstance(value, (bool, int, float)) else np.asarray(value)[()]
        self.value = value
        bits = np.asarray(value).tobytes() if not isinstance(value, int) else str(value).encode()
        self._key = (type(value).__name__, bits)

    def __eq__(self, other):
        return isinstance(other, Literal) and self._key == other._key

    def __hash__(self):
        return hash(self._key)

    def __repr__(self):
        return repr(self.value)


class Node:
    """One operation: ``op`` applied to ``inputs`` with static ``params``.

    ``params`` is a tuple of ``(name, value)`` pairs sorted by name; values
    are hashable. ``aval`` is an :class:`Aval`, or a tuple of them for ops with
    several results (read with ``pick`` nodes). Nodes are interned: ``Node(...)``
    returns the existing node equal to the one asked for, if any.
    """

    __slots__ = ("op", "inputs", "params", "aval", "_hash", "__weakref__")

    # (op, ids of the inputs, params, aval) -> a weak reference to the node. Inputs
    # are kept alive by the nodes that use them, so an id in a live key always
    # names a live node. (A plain dict of weak references, not a
    # WeakValueDictionary: its Python-level get and set were a sixth of tracing.)
    _table: "dict[tuple, weakref.ref]" = {}
    _lock = threading.RLock()  # (re-entrant: a node dying inside __new__ forgets itself under it)

    def __new__(cls, op: str, inputs: tuple, params: tuple, aval):
        inputs = tuple(inputs)
        key = (op, tuple(map(id, inputs)), params, aval)
        ref = cls._table.get(key)
        node = ref() if ref is not None else None
        if node is not None:
            return node
        with cls._lock:
            ref = cls._table.get(key)
            node = ref() if ref is not None else None
            if node is None:
                node = object.__new__(cls)
                node.op, node.inputs, node.params, node.aval = op, inputs, params, aval
                node._hash = hash(key)
                cls._table[key] = weakref.ref(node, functools.partial(_forget, key))
        return node

    @classmethod
    def make(cls, op: str, inputs: Iterable["Node"], aval, **params) -> "Node":
        return cls(op, tuple(inputs), tuple(sorted(params.items())), aval)

    @property
    def kw(self) -> dict[str, Any]:
        return dict(self.params)

    def replace(self, inputs) -> "Node":
        """This node with other inputs (itself when they are the same objects)."""
        inputs = tuple(inputs)
        if inputs == self.inputs:  # (the same objects: tuples compare items by identity first, in C)
            return self  # (the commonest case in a pass: no table lookup)
        return Node(self.op, inputs, self.params, self.aval)

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    def __reduce__(self):
        return (Node, (self.op, self.inputs, self.params, self.aval))

    def __repr__(self):
        return f"Node({self.op}, {len(self.inputs)} inputs, {self.aval})"


def _forget(key: tuple, ref: weakref.ref) -> None:
    """A node died: its entry goes, unless a new node took its key meanwhile."""
    with Node._lock:
        if Node._table.get(key) is ref:
            del Node._table[key]


# Compiling allocates millions of small objects (nodes, avals, tuples) that live
# as long as the graph; CPython's cycle collector re-traverses all of them each
# time a generation fills, which made every pass over a 100,000-node graph
# several times slower than the pass itself (toposort of a 30,000-node chain:
# 18 ms without collections, 70-100 ms with). No cycle a compile creates must
# be freed before it ends, so the collector pauses while any thread compiles.
_gc_pause = {"depth": 0, "was_enabled": False}
_gc_lock = threading.Lock()


@contextlib.contextmanager
def collector_paused():
    """Pause CPython's cycle collector for a compile (re-entrant, any thread);
    it resumes, if it was running, when the outermost compile ends."""
    with _gc_lock:
        if _gc_pause["depth"] == 0:
            _gc_pause["was_enabled"] = gc.isenabled()
            gc.disable()
        _gc_pause["depth"] += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pause["depth"] -= 1
            if _gc_pause["depth"] == 0 and _gc_pause["was_enabled"]:
                gc.enable()


def toposort(outputs: Iterable[Node], known: Callable[[Node], bool] | None = None) -> list[Node]:
    """Every node the outputs depend on, each after its inputs (iterative DFS);
    with ``known``, not the nodes it says are known, nor past them."""
    order, seen = [], set()
    for root in outputs:
        if id(root) in seen or (known is not None and known(root)):
            continue
        stack = [(root, iter(root.inputs))]
        seen.add(id(root))
        while stack:
            node, it = stack[-1]
            for child in it:
                if id(child) not in seen and (known is None or not known(child)):
                    seen.add(id(child))
                    stack.append((child, iter(child.inputs)))
                    break
            else:
                stack.pop()
                order.append(node)
    return order


class Graph:
    """A traced function: input nodes, output nodes, and captured arrays.

    ``captures[k]`` is the array a ``capture`` node with ``index=k`` reads; it
    is held by reference and passed anew at every call.
    """

    __slots__ = ("inputs", "outputs", "captures", "input_names", "notes", "_hash", "_order")

    def __init__(self, inputs, outputs, captures=(), input_names=None, notes=()):
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self.captures = tuple(captures)
        self.input_names = tuple(input_names or (f"in{i}" for i in range(len(self.inputs))))
        self.notes = tuple(notes)  # decisions made while tracing (gradients), shown by explain
        self._hash = hash((self.inputs, self.outputs))
        self._order = None

    @property
    def nodes(self) -> list[Node]:
        """Every node, each after its inputs (computed once: a graph never changes)."""
        if self._order is None:
            self._order = tuple(toposort(self.outputs))
        return list(self._order)

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return (
            isinstance(other, Graph)
            and self._hash == other._hash
            and self.inputs == other.inputs
            and self.outputs == other.outputs
        )

    def __str__(self):
        return format_graph(self)

    def __repr__(self):
        return f"<braze.Graph {len(self.inputs)} inputs, {len(self.nodes)} nodes, {len(self.outputs)} outputs>"


# ---------------------------------------------------------------- printing


def _format_param(value) -> str:
    if isinstance(value, np.dtype):
        return value.name
    if isinstance(value, type) and issubclass(value, np.generic):
        return np.dtype(value).name
    if isinstance(value, Graph):
        return "{...}"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def format_literal(node: Node) -> str:
    value = node.kw["value"].value
    value = value.item() if isinstance(value, np.generic) else value
    if node.aval.weak:
        return repr(value)
    return f"{value!r}:{short_dtype(node.aval.dtype)}"


def format_graph(graph: Graph, indent: str = "") -> str:
    names: dict[int, str] = {}
    used = set()
    for node, name in zip(graph.inputs, graph.input_names):
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "in"
        unique, k = base, 1
        while unique in used:
            unique, k = f"{base}_{k}", k + 1
        used.add(unique)
        names[id(node)] = f"%{unique}"
    header = ", ".join(f"{names[id(n)]}: {n.aval}" for n in graph.inputs)
    lines = [f"{indent}graph({header}) {{"]
    counter = 0

    def ref(node: Node) -> str:
        if node.op == "const":
            return format_literal(node)
        return names[id(node)]

    for node in graph.nodes:
        if node.op == "input":
            continue
        if node.op == "const":
            continue
        if node.op == "capture":
            names[id(node)] = f"%c{node.kw['index']}"
            lines.append(f"{indent}  {names[id(node)]}: {node.aval} = capture")
            continue
        names[id(node)] = f"%{counter}"
        counter += 1
        params = node.kw
        body = params.pop("body", None)
        params.pop("site", None)
        label = node.op
        if node.op == "composite":
            label = f"composite[{params.pop('name')}"
            label += "".join(f", {k}={_format_param(v)}" for k, v in params.pop("attrs"))
            label += "]"
        elif params:
            label += "[" + ", ".join(f"{k}={_format_param(v)}" for k, v in params.items()) + "]"
        aval = node.aval
        aval_text = f"({', '.join(map(str, aval))})" if isinstance(aval, tuple) else str(aval)
        args = ", ".join(ref(i) for i in node.inputs)
        lines.append(f"{indent}  {names[id(node)]}: {aval_text} = {label}{' ' if args else ''}{args}")
        if body is not None:
            lines.append(format_graph(body, indent + "    "))
    outs = ", ".join(ref(o) for o in graph.outputs)
    lines.append(f"{indent}  return {outs}")
    lines.append(f"{indent}}}")
    return "\n".join(lines)
