"""Target-independent graph passes, listed in order, each with a name.

``run_passes`` returns the final graph and, on request, the graph after
every stage, so ``explain`` can print any of them.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .aval import Aval, python_scalar_type
from .core import KIND, NUMPY_IMPL, with_flag
from .graph import Graph, Literal, Node


def rewrite(graph: Graph, fn: Callable[[Node], Node]) -> Graph:
    """Rebuild ``graph`` bottom-up, passing each node (with rewritten inputs) to ``fn``."""
    mapping: dict[int, Node] = {}
    for node in graph.nodes:
        new = node.replace(mapping[id(i)] for i in node.inputs)
        mapping[id(node)] = fn(new)
    outputs = [mapping[id(o)] for o in graph.outputs]
    inputs = [mapping.get(id(n), n) for n in graph.inputs]
    return Graph(inputs, outputs, graph.captures, graph.input_names, graph.notes)


def fold_constants(graph: Graph) -> Graph:
    """Evaluate elementwise ops whose operands are all scalar literals."""

    def fold(node: Node) -> Node:
        if KIND.get(node.op) != "elementwise" or not node.inputs:
            return node
        if not all(i.op == "const" for i in node.inputs):
            return node
        args = [i.kw["value"].value for i in node.inputs]
        with np.errstate(all="ignore"):
            value = np.asarray(NUMPY_IMPL[node.op](*args, **node.kw)).astype(node.aval.dtype)[()]
        if node.aval.weak:
            value = python_scalar_type(node.aval.dtype)(value)
        return Node.make("const", (), node.aval, value=Literal(value))

    return rewrite(graph, fold)


_IDENTITY_OPS = with_flag("identity")
_REDUCTIONS = frozenset(op for op, kind in KIND.items() if kind == "reduce" and op not in ("argmax", "argmin"))


def drop_identities(graph: Graph) -> Graph:
    """Remove casts and layout ops that leave the value exactly as it was."""

    def drop(node: Node) -> Node:
        if node.op in _REDUCTIONS and node.kw.get("axes") == () and node.inputs[0].aval.shape == node.aval.shape:
            # a reduction over no axes (np.sum of a 0-d array) is a cast at most
            if node.inputs[0].aval.dtype == node.aval.dtype:
                return node.inputs[0]
            return Node.make("convert", node.inputs, node.aval, dtype=node.aval.dtype)
        if node.op in _IDENTITY_OPS and node.inputs[0].aval == node.aval:
            if node.op != "transpose" or node.kw["perm"] == tuple(range(node.aval.ndim)):
                return node.inputs[0]
        return node

    return rewrite(graph, drop)


# Vectors built from scalars (``np.array([x, y, z])``) of at most this many elements
# are taken apart again: see scalarize_small_vectors.
SMALL_VECTOR = 8


def scalarize_small_vectors(graph: Graph) -> Graph:
    """Elementwise work over a small vector built from scalars becomes scalar work.

    A time step written with a state vector (``state = np.array([x, y, z])``,
    ``state + dt * k``, ``x, y, z = s[0], s[1], s[2]``) traces to
    concatenations of scalars, elementwise ops over 3 elements and slices that
    take the scalars out again: each a step of its own, so the program ran
    slower than NumPy (lorenz_rk4). Here an elementwise op over a 1-d vector of
    at most ``SMALL_VECTOR`` elements, one of whose operands is such a
    concatenation, is computed element by element (the same op on the same
    values: NumPy's results bit for bit) and concatenated once; an element taken
    out of a concatenation is the scalar that went in. The scalar ops then fuse.
    """

    def element(x: Node, i: int) -> Node:
        """Element ``i`` of a 1-d ``x`` as a 0-d node (a 0-d ``x`` broadcasts)."""
        if x.aval.ndim == 0:
            return x
        if x.aval.shape == (1,):
            return _reshape(x, ())
        if x.op == "concatenate" and all(p.aval.shape == (1,) for p in x.inputs):
            return _reshape(x.inputs[i], ())
        if x.op == "broadcast_to" and x.inputs[0].aval.size == 1:
            return _reshape(x.inputs[0], ())
        part = Node.make("slice", (x,), Aval((1,), x.aval.dtype, False), slices=((i, i + 1, 1),))
        return _reshape(part, ())

    def visit(node: Node) -> Node:
        if node.op == "slice" and node.inputs[0].op == "concatenate" and node.aval.shape == (1,):
            (start, _, _), = node.kw["slices"]
            pieces = node.inputs[0].inputs
            if all(p.aval.shape == (1,) for p in pieces):
                return pieces[start]
        if node.op == "reshape" and node.inputs[0].op == "reshape":
            inner = node.inputs[0].inputs[0]
            return inner if inner.aval.shape == node.aval.shape else _reshape(inner, node.aval.shape)
        if (KIND.get(node.op) != "elementwise" or isinstance(node.aval, tuple) or node.aval.ndim != 1
                or not 1 < node.aval.shape[0] <= SMALL_VECTOR):
            return node
        n = node.aval.shape[0]
        if not any(i.op == "concatenate" and all(p.aval.shape == (1,) for p in i.inputs) for i in node.inputs):
            return node
        if not all(i.aval.ndim == 0 or i.aval.shape in ((1,), (n,)) for i in node.inputs):
            return node
        scalar = Aval((), node.aval.dtype, False)
        pieces = [_reshape(Node.make(node.op, [element(x, k) for x in node.inputs], scalar, **node.kw), (1,))
                  for k in range(n)]
        return Node.make("concatenate", pieces, node.aval, axis=0)

    return rewrite(graph, visit)


def _reshape(x: Node, shape: tuple) -> Node:
    if x.aval.shape == shape:
        return x
    if x.op == "reshape":
        x = x.inputs[0]
        if x.aval.shape == shape:
            return x
    return Node.make("reshape", (x,), Aval(shape, x.aval.dtype, x.aval.weak), shape=shape)


def simplify_bodies(graph: Graph) -> Graph:
    """Run the passes inside every composite's body too."""

    def visit(node: Node) -> Node:
        if node.op != "composite":
            return node
        params = node.kw
        params["body"] = run_passes(params["body"])[0]
        return Node.make(node.op, node.inputs, node.aval, **params)

    return rewrite(graph, visit)


def inline_composites(graph: Graph, record: dict | None = None, prefix: tuple = (),
                      _bodies: dict | None = None) -> Graph:
    """Replace every composite node by its body's nodes (the body is the
    reference implementation; fusion then compiles it with its neighbours).
    ``record`` maps each call's site path to its inlined result nodes."""

    bodies = {} if _bodies is None else _bodies

    def splice(node: Node) -> Node:
        if node.op != "composite":
            return node
        body = node.kw["body"]
        site = prefix + (node.kw.get("site"),)
        body = inline_composites(body, record, site, bodies)
        bodies[id(body)] = body
        mapping = {id(i): a for i, a in zip(body.inputs, node.inputs)}
        captured = {}
        for n in body.nodes:
            if n.op == "input":
                continue
            if n.op == "capture":
                if isinstance(n.kw["index"], tuple):  # from a deeper body, already keyed
                    captured[id(n)] = n
                else:
                    captured[id(n)] = Node.make("capture", (), n.aval, index=("body", id(body), n.kw["index"]))
                continue
            mapping[id(n)] = n.replace(mapping.get(id(i), captured.get(id(i), i)) for i in n.inputs)
        outs = [mapping.get(id(o), captured.get(id(o), o)) for o in body.outputs]
        if record is not None:
            record[site] = outs
        if isinstance(node.aval, tuple):
            return Node.make("composite_outputs", outs, node.aval)
        return outs[0]

    g = rewrite(graph, splice)
    if _bodies is not None:
        return g  # the outermost call resolves captures and picks
    return _resolve_inlined(g, graph, bodies)


def _resolve_inlined(g: Graph, original: Graph, bodies: dict) -> Graph:
    """Turn ``pick(composite_outputs(...))`` into the picked node and number the
    captures that inlined bodies brought in after the graph's own."""
    captures = list(original.captures)
    new_index = {}

    def visit(node: Node) -> Node:
        if node.op == "pick" and node.inputs[0].op == "composite_outputs":
            return node.inputs[0].inputs[node.kw["index"]]
        if node.op == "capture" and isinstance(node.kw["index"], tuple):
            _, body_id, k = node.kw["index"]
            key = (body_id, k)
            if key not in new_index:
                new_index[key] = len(captures)
                captures.append(bodies[body_id].captures[k])
            return Node.make("capture", (), node.aval, index=new_index[key])
        return node

    out = rewrite(g, visit)
    return Graph(out.inputs, out.outputs, captures, out.input_names, original.notes)


def dce(graph: Graph) -> Graph:
    """Dead-code elimination: keep only captures the outputs still read."""
    used = sorted({n.kw["index"] for n in graph.nodes if n.op == "capture"})
    if used == list(range(len(graph.captures))):
        return graph
    renumber = {old: new for new, old in enumerate(used)}

    def visit(node: Node) -> Node:
        if node.op == "capture":
            return Node.make("capture", (), node.aval, index=renumber[node.kw["index"]])
        return node

    g = rewrite(graph, visit)
    return Graph(g.inputs, g.outputs, [graph.captures[i] for i in used], graph.input_names, graph.notes)


# Ops a slice is moved under (``sink_slices``: the cheap ones, as fusion
# recomputes), and the most ops one slice recomputes that way.
SINK_OPS = with_flag("cheap")
SINK_BUDGET = 8


def sink_slices(graph: Graph) -> Graph:
    """A slice of a cheap elementwise value is that value computed from slices of
    its operands: ``dq = q[1:] - q[:-1]; dq[1:] * dq[:-1]`` reads windows of
    ``q`` only, so the stencil is one kernel reading ``q`` at offsets (fusion
    then reads the windows by offset) instead of a kernel writing ``dq`` and
    another reading two windows of it. Exactly the same operations on the same
    elements; at most ``SINK_BUDGET`` ops are recomputed per slice, and only
    through operands of the value's own shape (or scalars)."""
    memo: dict[tuple, Node | None] = {}

    def cost(node: Node, seen: set) -> int:
        """Ops in the cheap elementwise tree under ``node`` (past the budget: stop)."""
        stack, n = [node], 0
        while stack and n <= SINK_BUDGET:
            m = stack.pop()
            if id(m) in seen or m.op not in SINK_OPS:
                continue
            seen.add(id(m))
            n += 1
            stack.extend(m.inputs)
        return n

    def sunk(node: Node, slices: tuple, shape: tuple) -> Node:
        key = (id(node), slices)
        if key in memo:
            return memo[key]
        if node.op in SINK_OPS and all(i.aval.ndim == 0 or i.aval.shape == node.aval.shape for i in node.inputs):
            new = Node(node.op, tuple(i if i.aval.ndim == 0 else sunk(i, slices, shape) for i in node.inputs),
                       node.params, Aval(shape, node.aval.dtype, node.aval.weak))
        else:
            new = Node.make("slice", (node,), Aval(shape, node.aval.dtype, node.aval.weak), slices=slices)
        memo[key] = new
        return new

    def visit(node: Node) -> Node:
        value = node.inputs[0] if node.op == "slice" else None
        if (value is None or value.op not in SINK_OPS or not node.aval.size
                or not all(i.aval.ndim == 0 or i.aval.shape == value.aval.shape for i in value.inputs)
                or cost(value, set()) > SINK_BUDGET):
            return node
        return sunk(value, node.kw["slices"], node.aval.shape)

    return rewrite(graph, visit)


PASSES: list[tuple[str, Callable[[Graph], Graph]]] = [
    ("fold_constants", fold_constants),
    ("scalarize_small_vectors", scalarize_small_vectors),
    ("drop_identities", drop_identities),
    ("sink_slices", sink_slices),
    ("simplify_bodies", simplify_bodies),
    ("dce", dce),
]


def run_passes(graph: Graph, keep_stages: bool = False):
    """(final graph, [(stage name, graph), ...] if keep_stages else [])."""
    stages = [("trace", graph)] if keep_stages else []
    for name, fn in PASSES:
        graph = fn(graph)
        if keep_stages:
            stages.append((name, graph))
    return graph, stages
