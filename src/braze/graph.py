"""The graph IR: one immutable node type, a graph of them, and its text form.

A node is ``(op, inputs, params, aval)``. Nodes hash and compare structurally
(the hash is computed once, at construction), so common-subexpression
elimination is a dictionary lookup and a graph's hash is a cache key.
"""
from __future__ import annotations

from typing import Any, Iterable

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
    several results (read with ``pick`` nodes).
    """

    __slots__ = ("op", "inputs", "params", "aval", "_hash")

    def __init__(self, op: str, inputs: tuple, params: tuple, aval):
        self.op = op
        self.inputs = tuple(inputs)
        self.params = params
        self.aval = aval
        self._hash = hash((op, self.inputs, params, aval))

    @classmethod
    def make(cls, op: str, inputs: Iterable["Node"], aval, **params) -> "Node":
        return cls(op, tuple(inputs), tuple(sorted(params.items())), aval)

    @property
    def kw(self) -> dict[str, Any]:
        return dict(self.params)

    def replace(self, inputs) -> "Node":
        inputs = tuple(inputs)
        if inputs == self.inputs and all(a is b for a, b in zip(inputs, self.inputs)):
            return self
        return Node(self.op, inputs, self.params, self.aval)

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        if self is other:
            return True
        return (
            isinstance(other, Node)
            and self._hash == other._hash
            and self.op == other.op
            and self.params == other.params
            and self.aval == other.aval
            and self.inputs == other.inputs
        )

    def __repr__(self):
        return f"Node({self.op}, {len(self.inputs)} inputs, {self.aval})"


def toposort(outputs: Iterable[Node]) -> list[Node]:
    """Every node the outputs depend on, each after its inputs (iterative DFS)."""
    order, seen = [], set()
    for root in outputs:
        if id(root) in seen:
            continue
        stack = [(root, iter(root.inputs))]
        seen.add(id(root))
        while stack:
            node, it = stack[-1]
            for child in it:
                if id(child) not in seen:
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

    __slots__ = ("inputs", "outputs", "captures", "input_names", "notes", "_hash")

    def __init__(self, inputs, outputs, captures=(), input_names=None, notes=()):
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self.captures = tuple(captures)
        self.input_names = tuple(input_names or (f"in{i}" for i in range(len(self.inputs))))
        self.notes = tuple(notes)  # decisions made while tracing (gradients), shown by explain
        self._hash = hash((self.inputs, self.outputs))

    @property
    def nodes(self) -> list[Node]:
        return toposort(self.outputs)

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
