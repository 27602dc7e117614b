"""Target-independent graph passes, listed in order, each with a name.

``run_passes`` returns the final graph and, on request, the graph after
every stage, so ``explain`` can print any of them.
"""
from __future__ import annotations

import itertools
from typing import Callable

import numpy as np

from .aval import Aval, python_scalar_type
from .core import KIND, NUMPY_IMPL, with_flag
from .graph import Graph, Literal, Node
from .ops._util import broadcast_shape
from .ops.shape import slice_length
from .ops.linalg import parse_einsum


def rewrite(graph: Graph, fn: Callable[[Node], Node]) -> Graph:
    """Rebuild ``graph`` bottom-up, passing each node (with rewritten inputs) to ``fn``."""
    mapping: dict[int, Node] = {}  # (only the nodes that changed: most of a pass's nodes do not)
    for node in graph.nodes:
        new = node
        for i in node.inputs:
            if id(i) in mapping:
                new = node.replace([mapping.get(id(i), i) for i in node.inputs])
                break
        out = fn(new)
        if out is not node:
            mapping[id(node)] = out
    outputs = [mapping.get(id(o), o) for o in graph.outputs]
    inputs = [mapping.get(id(n), n) for n in graph.inputs]
    if all(a is b for a, b in zip(outputs, graph.outputs)) and all(a is b for a, b in zip(inputs, graph.inputs)):
        return graph  # (nothing changed: the same graph, its node order already known)
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


# The most bytes an array of constants folded by fold_constant_stores may hold.
FOLD_BYTES = 1 << 22
# Ops whose value fold_constant_stores computes from constants (a stored value, a base).
_FOLDED = frozenset({"broadcast_to", "reshape", "convert"})


def fold_constant_stores(graph: Graph) -> Graph:
    """Stores of constants into an array of constants, computed once: a table
    built by a loop over static sizes (``out[i] = (state >> 33) / 2.0 ** 31``
    with the state a Python int, a sieve over a static ``n`` whose branches a
    trace decides from constants alone) is a captured array, read-only,
    instead of one update per element on every call. A chain is computed in
    place, in order (linear in its length); arrays of more than FOLD_BYTES
    stay updates. A folded array the function returns is copied at each call
    (a result whose node is a capture: ``pipeline._mark_shared_results``), a
    new array as NumPy's is."""
    known: dict[int, np.ndarray] = {}   # id(node) -> its value (a chain's array, owned until passed on)
    users: dict[int, int] = {}
    for node in graph.nodes:
        for i in node.inputs:
            users[id(i)] = users.get(id(i), 0) + 1
    for o in graph.outputs:
        users[id(o)] = users.get(id(o), 0) + 1

    def constant(node: Node, size: int = 64):
        """The value of a constant of at most ``size`` elements computed from a
        literal by _FOLDED ops (a stored value, a base: ``np.empty(n)``), or None."""
        if node.op == "const":
            return np.asarray(node.kw["value"].value, node.aval.dtype)
        if node.op in _FOLDED and node.aval.size <= size:
            inner = constant(node.inputs[0], size)
            return None if inner is None else np.asarray(NUMPY_IMPL[node.op](inner, **node.kw))
        return None

    folded = []
    for node in graph.nodes:
        if node.op != "update_slice" or isinstance(node.aval, tuple) or \
                node.aval.size * np.dtype(node.aval.dtype).itemsize > FOLD_BYTES:
            continue
        base, value = node.inputs
        stored = constant(value, node.aval.size)
        if stored is None:
            continue
        if id(base) in known:
            array = known[id(base)] if users[id(base)] == 1 else known[id(base)].copy()
        else:
            array = constant(base, node.aval.size)
            if array is None:
                continue
            array = np.array(array, copy=True)
        array[tuple(slice(a, b, c) for a, b, c in node.kw["slices"])] = stored
        known[id(node)] = array
        folded.append(node)
    if not folded:
        return graph
    captures = list(graph.captures)
    mapping: dict[int, Node] = {}
    chained = {id(n.inputs[0]) for n in folded if id(n.inputs[0]) in known and users[id(n.inputs[0])] == 1}
    for node in folded:
        if id(node) in chained:
            continue  # (its array was passed on to the next store, and holds that one's value)
        array = known[id(node)]
        array.flags.writeable = False
        mapping[id(node)] = Node.make("capture", (), node.aval, index=len(captures))
        captures.append(array)
    for node in graph.nodes:
        if id(node) not in mapping:
            mapping[id(node)] = node.replace([mapping[id(i)] for i in node.inputs]) if node.inputs else node
    outputs = [mapping[id(o)] for o in graph.outputs]
    return Graph([mapping.get(id(n), n) for n in graph.inputs], outputs, captures, graph.input_names, graph.notes)


_IDENTITY_OPS = with_flag("identity")
_REDUCE_ANY = frozenset(op for op, kind in KIND.items() if kind == "reduce")
_REDUCTIONS = _REDUCE_ANY - {"argmax", "argmin"}


def drop_identities(graph: Graph) -> Graph:
    """Remove casts and layout ops that leave the value exactly as it was, and
    stores of what a region already holds."""

    def drop(node: Node) -> Node:
        if node.op == "update_slice" and node.inputs[0].op == "update_slice" \
                and node.inputs[0].inputs[1] is node.inputs[1] and node.inputs[0].params == node.params:
            # the region stored again with what it holds: ``A[i, k:] -= v`` updates the view,
            # which writes through, then Python stores the view back (``A[i, k:] = view``)
            return node.inputs[0]
        if node.op in _REDUCTIONS and node.kw.get("axes") == () and node.inputs[0].aval.shape == node.aval.shape:
            # a reduction over no axes (np.sum of a 0-d array) is a cast at most
            if node.inputs[0].aval.dtype == node.aval.dtype:
                return node.inputs[0]
            return Node.make("convert", node.inputs, node.aval, dtype=node.aval.dtype)
        if node.op in _IDENTITY_OPS and node.inputs[0].aval == node.aval:
            if node.op != "transpose" or node.kw["perm"] == tuple(range(node.aval.ndim)):
                return node.inputs[0]
        if node.op == "slice" and node.inputs[0].op == "concatenate":
            return _slice_of_piece(node) or node
        if node.op == "reshape" and node.inputs[0].op == "reshape" and node.inputs[0].inputs[0].aval == node.aval:
            return node.inputs[0].inputs[0]  # (an axis added, then taken away)
        return node

    return rewrite(graph, drop)


def _slice_of_piece(node: Node) -> Node | None:
    """A slice of a concatenation that lies in one of its pieces, as a slice of
    that piece (the piece itself where it is all of it): ``np.stack([...])[..., k]``
    reads the k-th array stacked, and the stacked copy need not be made."""
    cat = node.inputs[0]
    axis, slices = cat.kw["axis"], node.kw["slices"]
    start, stop, step = slices[axis]
    if step != 1 or stop is None or stop <= start:
        return None
    at = 0
    for piece in cat.inputs:
        size = piece.aval.shape[axis]
        if at <= start and stop <= at + size:
            inner = slices[:axis] + ((start - at, stop - at, 1),) + slices[axis + 1:]
            if all(s == (0, n, 1) for s, n in zip(inner, piece.aval.shape)):
                return piece
            return Node.make("slice", (piece,), node.aval, slices=inner)
        at += size
    return None


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
        if node.op == "update_slice":
            return _stored_apart(node)
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


def _stored_apart(node: Node) -> Node:
    """A store of a small vector built from scalars (``path[i + 1] = state``,
    ``state = np.array([theta, omega])``) as a store of each scalar into its
    element: the same elements written, in the same order, with no
    concatenation step between the kernel computing the scalars and the array
    (a time loop ran a concatenation and a copy per step)."""
    dst, value = node.inputs
    while value.op == "reshape":
        value = value.inputs[0]
    if value.op != "concatenate" or value.aval.ndim != 1 or not 1 < len(value.inputs) <= SMALL_VECTOR \
            or any(p.aval.shape != (1,) or p.aval.dtype != value.aval.dtype for p in value.inputs):
        return node
    slices = node.kw["slices"]
    extents = tuple(slice_length(*s) for s in slices)
    out = dst
    for flat, piece in enumerate(value.inputs):
        at = np.unravel_index(flat, extents)
        region = tuple((a + i * s, a + i * s + 1, 1) for (a, _, s), i in zip(slices, at))
        out = Node.make("update_slice", (out, _reshape(piece, (1,) * len(slices))), node.aval, slices=region)
    return out


def _reshape_under(x: Node, shape: tuple, budget: int) -> Node:
    """``x`` reshaped (to a shape of the same elements), pushed under up to
    ``budget`` cheap elementwise ops: ``(labels == k)`` as a column is
    ``labels[:, None] == k``, whose one reshaped operand all the columns share
    (fusion then compares inside the kernel reading them, and reads ``labels``
    once). The same ops on the same elements."""
    if budget <= 0 or x.op not in SINK_OPS or not all(i.aval.ndim == 0 or i.aval.shape == x.aval.shape
                                                       for i in x.inputs):
        return _reshape(x, shape)
    ins = [i if i.aval.ndim == 0 else _reshape_under(i, shape, budget - 1) for i in x.inputs]
    return Node.make(x.op, ins, Aval(shape, x.aval.dtype, x.aval.weak), **x.kw)


def _reshape(x: Node, shape: tuple) -> Node:
    if x.aval.shape == shape:
        return x
    if x.op == "reshape":
        x = x.inputs[0]
        if x.aval.shape == shape:
            return x
    return Node.make("reshape", (x,), Aval(shape, x.aval.dtype, x.aval.weak and not shape), shape=shape)


# A matmul or einsum contracting at most this many elements per result
# element is its products and sums written out (see small_contractions):
# about where a fused loop's multiply-adds per element cost what writing the
# element costs (a BLAS call's result, written whole, then read again).
SMALL_CONTRACTION = 6
# ... and a transposed right operand is read with a stride, which only a small
# result (a Kalman filter's F @ P @ F.T, 4x4) afford: its BLAS call cost more.
SMALL_STRIDED = 64
# A product with a vector operand (``L[i, :i] @ U[:i, k]``, ``A[i, i + 1:] @
# x[i + 1:]``, a small ``A @ x``) of at most this many products is a multiply
# and a sum over the contracted axis: a reduction kernel fused with the
# elementwise work around it, where a BLAS call (3-4 us, two view steps)
# computed a handful of products (Doolittle's LU at n = 30: 588 of them).
SMALL_REDUCED = 1 << 14


def small_contractions(graph: Graph) -> Graph:
    """A contraction over at most SMALL_CONTRACTION elements (``x[:, None] @
    y[None]``, a convolution written as a loop over kernel offsets whose
    ``np.einsum("nchw,fc->nfhw", patch, w[:, :, i, j])`` contracts a few
    channels) is its products and their sum written out as elementwise ops
    over broadcast slices of the operands: fusion then computes it inside the
    kernel around it (the convolution's loop becomes kernels reading the
    image's windows by offset) instead of a BLAS call that contracts almost
    nothing and writes its whole result. Sums in braze's order (one product,
    then each next added), as the numerics contract lets a matmul's; so only
    compiling targets run it (``pipeline.fused``): the generic target's
    contractions stay NumPy's, bit for bit."""

    def visit(node: Node) -> Node:
        if node.op == "matmul" and len(node.inputs) == 2:
            a, b = node.inputs
            if a.aval.ndim < 1 or b.aval.ndim < 1:
                return node
            k = a.aval.shape[-1]
            if k > SMALL_CONTRACTION and _plain_operands(node) and np.dtype(node.aval.dtype).kind == "f":
                return _reduced_product(node) or node
            if not 1 <= k <= SMALL_CONTRACTION or not _plain_operands(node) \
                    or (_strided_last(b) and node.aval.size > SMALL_STRIDED):
                return node
            terms = []
            for t in range(k):
                # (a vector operand is NumPy's: a row on the left, a column on the right)
                at = _slice_at(a, {a.aval.ndim - 1: t})
                bt = _slice_at(b, {max(b.aval.ndim - 2, 0): t})
                # A vector operand's product is in the result's shape at once (``X @ w``:
                # columns X[:, t] times scalars w[t]), so fusion reads the columns as
                # windows of X inside the kernel around it, with no reshape after.
                if b.aval.ndim == 1:
                    at, bt = _reshape(at, tuple(a.aval.shape[:-1])), _reshape(bt, ())
                elif a.aval.ndim == 1:
                    at, bt = _reshape(at, ()), _reshape(bt, tuple(b.aval.shape[:-2] + b.aval.shape[-1:]))
                shape = tuple(broadcast_shape(at.aval.shape, bt.aval.shape))
                terms.append(Node.make("multiply", (at, bt), Aval(shape, node.aval.dtype, False)))
            total = _summed(terms, terms[0].aval)
            return total if total.aval.shape == tuple(node.aval.shape) else _reshape(total, tuple(node.aval.shape))
        if node.op == "einsum":
            return _einsum_written_out(node) or node
        return node

    return rewrite(graph, visit)


def _reduced_product(node: Node) -> Node | None:
    """``a @ b`` with a vector operand and at most SMALL_REDUCED products, as
    ``(a * b).sum(axis)`` over the contracted axis (None if not such a product)."""
    a, b = node.inputs
    (m, k), (k2, n) = (a.aval.shape if a.aval.ndim == 2 else (1, a.aval.shape[0])), \
        (b.aval.shape if b.aval.ndim == 2 else (b.aval.shape[0], 1))
    if a.aval.ndim > 2 or b.aval.ndim > 2 or 2 == a.aval.ndim == b.aval.ndim or m * k * n > SMALL_REDUCED:
        return None
    dtype = node.aval.dtype
    if b.aval.ndim == 1:  # (a dot, or a matrix times a vector: the sum along each row)
        rows = a if a.aval.ndim == 1 else None
        prod = Node.make("multiply", (a, b if rows is not None else _reshape(b, (1, k))),
                         Aval(tuple(a.aval.shape), dtype, False))
        axis = a.aval.ndim - 1
    else:  # (a vector times a matrix: the sum down each column)
        prod = Node.make("multiply", (_reshape(a, (k, 1)), b), Aval((k, n), dtype, False))
        axis = 0
    return Node.make("reduce_sum", (prod,), Aval(tuple(node.aval.shape), dtype, False), axes=(axis,), keepdims=False)


def _strided_last(x: Node) -> bool:
    """Whether ``x`` (through slices) is a transpose moving its last axis: the
    loop along the result's last axis would then read it with a stride (a
    gather per element, where BLAS packs it first: ``A @ B.T`` over (1000, 3)
    points ran 3x slower written out)."""
    while x.op == "slice":
        x = x.inputs[0]
    return x.op == "transpose" and x.kw["perm"][-1] != x.aval.ndim - 1


def _plain_operands(node: Node) -> bool:
    """Operands of one dtype whose products and sums in that dtype are NumPy's
    own (float16: NumPy's matmul and einsum add in float32)."""
    dt = np.dtype(node.aval.dtype)
    return (not isinstance(node.aval, tuple) and dt.kind in "biuf" and dt != np.float16
            and all(np.dtype(i.aval.dtype) == dt for i in node.inputs))


def _slice_at(x: Node, fixed: dict) -> Node:
    """``x`` with axis ``d`` taken at ``fixed[d]`` (kept, size 1)."""
    if all(x.aval.shape[d] == 1 for d in fixed):
        return x
    slices = tuple((fixed[d], fixed[d] + 1, 1) if d in fixed else (0, n, 1) for d, n in enumerate(x.aval.shape))
    shape = tuple(1 if d in fixed else n for d, n in enumerate(x.aval.shape))
    return Node.make("slice", (x,), Aval(shape, x.aval.dtype, x.aval.weak), slices=slices)


def _summed(terms: list, aval) -> Node:
    total = terms[0]
    for t in terms[1:]:
        total = Node.make("add", (total, t), Aval(aval.shape, aval.dtype, False))
    return total


def _einsum_written_out(node: Node) -> Node | None:
    if len(node.inputs) != 2 or not _plain_operands(node):
        return None
    ins, out = parse_einsum(node.kw["subscripts"])
    if len(set(out)) != len(out) or any(len(set(spec)) != len(spec) for spec in ins):
        return None  # (diagonals: left to einsum)
    sizes = {}
    for spec, x in zip(ins, node.inputs):
        sizes.update(zip(spec, x.aval.shape))
    summed = [c for c in sizes if c not in out]
    if any(sizes[c] != 1 and not (c in ins[0] and c in ins[1]) for c in summed):
        return None  # (a sum over one operand's own axis: a reduction, left to einsum)
    count = int(np.prod([sizes[c] for c in summed], dtype=np.int64))
    if not 1 <= count <= SMALL_CONTRACTION:
        return None
    last = out[-1] if out else None
    if last is not None and any(last in spec and (spec[-1] != last or _strided_last(x))
                                for spec, x in zip(ins, node.inputs)):
        return None  # (an operand read with a stride along the result's last axis: see _strided_last)

    def aligned(x: Node, spec: str, at: dict) -> Node:
        """Operand ``x`` at the summed letters' values ``at``, its other axes
        in the output's order, size 1 where the output has a letter it lacks."""
        x = _slice_at(x, {d: at[c] for d, c in enumerate(spec) if c in at})
        rest = [c for c in spec if c not in at]
        x = _reshape(x, tuple(sizes[c] for c in rest))
        order = sorted(range(len(rest)), key=lambda d: out.index(rest[d]))
        if order != list(range(len(rest))):
            x = Node.make("transpose", (x,), Aval(tuple(x.aval.shape[d] for d in order), x.aval.dtype, x.aval.weak),
                          perm=tuple(order))
        return _reshape(x, tuple(sizes[c] if c in rest else 1 for c in out))

    terms = []
    for values in itertools.product(*[range(sizes[c]) for c in summed]):
        at = dict(zip(summed, values))
        a, b = (aligned(x, spec, at) for x, spec in zip(node.inputs, ins))
        terms.append(Node.make("multiply", (a, b), Aval(node.aval.shape, node.aval.dtype, False)))
    return _summed(terms, node.aval)


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
    if g is graph:
        return graph  # (no composite: nothing to resolve, the same graph)
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
# A value read through more slices than this (a loop's rows, each handed to a call
# of its own) is computed whole, once: sunk, it would be a small kernel per slice.
SINK_FANOUT = 16
# A slice or rotation is sunk only through values no earlier sink computed:
# the values a sink makes are recomputations (level 1), and sinking into them
# again would compose the stencils of consecutive loop iterations into one,
# recomputing more each step until the budget cuts it off at a place that
# differs from step to step (20 steps of a limiter: 19 distinct kernels). At
# level 1 each iteration's stencil is one kernel, and the iterations alike.
MAX_SINK_LEVEL = 1


class Sinks:
    """What ``sink_slices`` tells ``lift_rotations`` (one per ``run_passes``):
    the level of each value a sink made, and the values a slice was not sunk
    through because of it, which are therefore written to memory: a later sink
    reads them by offset rather than computing them again."""

    def __init__(self):
        self.levels: dict[int, tuple[Node, int]] = {}
        self.kept: dict[int, Node] = {}

    def level(self, node: Node) -> int:
        hit = self.levels.get(id(node))
        return hit[1] if hit is not None and hit[0] is node else 0

    def made(self, node: Node, level: int) -> None:
        self.levels[id(node)] = (node, max(level, self.level(node)))

    def is_kept(self, node: Node) -> bool:
        return self.kept.get(id(node)) is node

    def tree(self, node: Node) -> tuple[int, int, int]:
        """(ops, highest level, lowest level) of the cheap elementwise tree under
        ``node``, down to the values kept; the count stops past ``SINK_BUDGET``."""
        stack, seen, n, high, low = [node], set(), 0, 0, MAX_SINK_LEVEL
        while stack and n <= SINK_BUDGET:
            m = stack.pop()
            if id(m) in seen or m.op not in SINK_OPS or (m is not node and self.is_kept(m)):
                continue
            seen.add(id(m))
            n += 1
            high, low = max(high, self.level(m)), min(low, self.level(m))
            stack.extend(m.inputs)
        return n, high, low

    def may_sink(self, value: Node) -> int | None:
        """The level of the values a sink through ``value`` makes, or None when
        it may not (the value is kept in memory from now on). A tree a sink
        made, all of it, is sunk again at its level: that composes two shifts
        of the same reads (the outer roll of ``np.roll(np.roll(b, 1, 0), 1, 1)``
        through the inner one's ``astype``), no step's values computed anew."""
        if self.is_kept(value):
            return None
        ops, level, low = self.tree(value)
        if low >= MAX_SINK_LEVEL:
            return None if ops > SINK_BUDGET else level
        if level >= MAX_SINK_LEVEL:
            self.kept[id(value)] = value
            return None
        return None if ops > SINK_BUDGET else level + 1


def sink_slices(graph: Graph, sinks: Sinks | None = None) -> Graph:
    """A slice of a cheap elementwise value is that value computed from slices of
    its operands: ``dq = q[1:] - q[:-1]; dq[1:] * dq[:-1]`` reads windows of
    ``q`` only, so the stencil is one kernel reading ``q`` at offsets (fusion
    then reads the windows by offset) instead of a kernel writing ``dq`` and
    another reading two windows of it. Exactly the same operations on the same
    elements; at most ``SINK_BUDGET`` ops are recomputed per slice, only
    through operands of the value's own shape (or scalars), never through
    a value an earlier sink made (``MAX_SINK_LEVEL``, ``Sinks``), and not of a
    value read through more than ``SINK_FANOUT`` slices."""
    memo: dict[tuple, Node | None] = {}
    sinks = Sinks() if sinks is None else sinks
    made = [0]  # the level of the values the current sink makes
    fanout: dict[int, int] = {}  # per value, how many slices read it
    for n in graph.nodes:
        if n.op == "slice":
            fanout[id(n.inputs[0])] = fanout.get(id(n.inputs[0]), 0) + 1

    def sunk(node: Node, slices: tuple, shape: tuple) -> Node:
        key = (id(node), slices)
        if key in memo:
            return memo[key]
        if (node.op in SINK_OPS and not sinks.is_kept(node)
                and all(i.aval.ndim == 0 or i.aval.shape == node.aval.shape for i in node.inputs)):
            new = Node(node.op, tuple(i if i.aval.ndim == 0 else sunk(i, slices, shape) for i in node.inputs),
                       node.params, Aval(shape, node.aval.dtype, node.aval.weak))
            sinks.made(new, made[0])
        else:
            new = Node.make("slice", (node,), Aval(shape, node.aval.dtype, node.aval.weak), slices=slices)
        memo[key] = new
        return new

    def visit(node: Node) -> Node:
        value = node.inputs[0] if node.op == "slice" else None
        if (value is None or value.op not in SINK_OPS or not node.aval.size or fanout.get(id(value), 0) > SINK_FANOUT
                or not all(i.aval.ndim == 0 or i.aval.shape == value.aval.shape for i in value.inputs)):
            return node
        level = sinks.may_sink(value)
        if level is None:
            return node
        made[0] = level
        return sunk(value, node.kw["slices"], node.aval.shape)

    return rewrite(graph, visit)


def rotation(node: Node) -> tuple | None:
    """(array, axis, start) when ``node`` is the array rotated along one axis,
    ``np.roll``'s concatenation of its two slices ``[start:]`` and ``[:start]``
    (element ``i`` is the array's ``(start + i) % n``); else None."""
    if node.op != "concatenate" or len(node.inputs) != 2:
        return None
    (head, tail), ax = node.inputs, node.kw["axis"]
    if head.op != "slice" or tail.op != "slice" or head.inputs[0] is not tail.inputs[0]:
        return None
    base = head.inputs[0]
    shape = tuple(base.aval.shape)
    if shape != tuple(node.aval.shape) or base.aval.dtype != node.aval.dtype:
        return None
    n, a = shape[ax], head.kw["slices"][ax][0]
    if not 0 < a < n:
        return None
    want_head = tuple((a, n, 1) if i == ax else (0, d, 1) for i, d in enumerate(shape))
    want_tail = tuple((0, a, 1) if i == ax else (0, d, 1) for i, d in enumerate(shape))
    if tuple(map(tuple, head.kw["slices"])) != want_head or tuple(map(tuple, tail.kw["slices"])) != want_tail:
        return None
    return base, ax, a


def lift_rotations(graph: Graph, sinks: Sinks | None = None) -> Graph:
    """``np.roll`` of a cheap elementwise value (``np.roll(board.astype(int),
    1, 0)``), which ``sink_slices`` made the value computed on each of two
    slices and concatenated, is that value computed from rotations of its
    operands: the same operations on the same elements, and a rotation of an
    array is what a kernel reads by index (targets/cpu.py) rather than a
    concatenation written out. So is a rotation of such a value the slices
    were not sunk through (the outer roll of ``np.roll(np.roll(b, 1, 0), 1,
    1)``, the inner lifted first). Trees of at most SINK_BUDGET ops, and as
    ``sink_slices``, never through a value a sink made (``sinks``, from it)."""
    sinks = Sinks() if sinks is None else sinks
    made = [0]  # the level of the values the current rotation makes

    def lifted(p: Node, q: Node, ax: int, shape: tuple, budget: list) -> Node | None:
        if p.op == "slice" and q.op == "slice":
            r = Node.make("concatenate", (p, q), Aval(shape, p.aval.dtype, p.aval.weak), axis=ax)
            return r if rotation(r) is not None else None
        budget[0] -= 1
        if (budget[0] < 0 or p.op != q.op or p.params != q.params or p.op not in SINK_OPS
                or isinstance(p.aval, tuple) or p.aval.dtype != q.aval.dtype or len(p.inputs) != len(q.inputs)):
            return None
        ins = []
        for i, j in zip(p.inputs, q.inputs):
            if i.aval.ndim == 0 and i is j:
                ins.append(i)
                continue
            if i.aval.ndim != p.aval.ndim or j.aval.ndim != q.aval.ndim:
                return None
            r = lifted(i, j, ax, shape, budget)  # (recursion bounded by the budget)
            if r is None:
                return None
            ins.append(r)
        new = Node(p.op, tuple(ins), p.params, Aval(shape, p.aval.dtype, p.aval.weak))
        sinks.made(new, max(sinks.level(p), sinks.level(q)))
        return new

    def rotated(x: Node, ax: int, a: int, budget: list) -> Node:
        """``x`` rotated: a cheap elementwise value computed from its operands
        rotated (within the budget), anything else as the concatenation."""
        if x.op in SINK_OPS and not isinstance(x.aval, tuple) and budget[0] > 0 and not sinks.is_kept(x) \
                and all(i.aval.ndim == 0 or i.aval.shape == x.aval.shape for i in x.inputs):
            budget[0] -= 1
            new = Node(x.op, tuple(i if i.aval.ndim == 0 else rotated(i, ax, a, budget) for i in x.inputs),
                       x.params, x.aval)
            sinks.made(new, made[0])
            return new
        shape = tuple(x.aval.shape)
        part = [(0, d, 1) for d in shape]
        head, tail = list(part), list(part)
        head[ax], tail[ax] = (a, shape[ax], 1), (0, a, 1)
        pieces = [Node.make("slice", (x,), Aval(tuple(e - b for b, e, _ in p), x.aval.dtype, x.aval.weak),
                            slices=tuple(p)) for p in (head, tail)]
        return Node.make("concatenate", pieces, x.aval, axis=ax)

    def visit(node: Node) -> Node:
        if node.op != "concatenate" or len(node.inputs) != 2:
            return node
        rot = rotation(node)
        if rot is not None:  # a rotation of a value: of its operands, when it is cheap
            base, ax, a = rot
            level = sinks.may_sink(base) if base.op in SINK_OPS else None
            if level is None:
                return node
            made[0] = level
            return rotated(base, ax, a, [SINK_BUDGET])
        if node.inputs[0].op not in SINK_OPS:
            return node
        p, q = node.inputs
        return lifted(p, q, node.kw["axis"], tuple(node.aval.shape), [SINK_BUDGET]) or node

    return rewrite(graph, visit)


def masked_sums(graph: Graph) -> Graph:
    """The sum of the rows a mask selects (``X[labels == k].sum(0)``, and so
    ``.mean(0)``) is a sum of ``where(mask, X, 0)`` over the mask's axes: no
    rows gathered (the selection's guard is its count, a sum of the mask), and
    fusion sums several selections by masks of one array in one pass over it.
    The same values, added in another order (as a reduction may be); the sum
    of none is 0 either way."""

    def visit(node: Node) -> Node:
        if node.op != "reduce_sum" or node.inputs[0].op != "compress":
            return node
        x, mask = node.inputs[0].inputs
        if mask.aval.ndim >= x.aval.ndim or tuple(node.kw["axes"]) != (0,):
            return node
        rest = tuple(x.aval.shape[mask.aval.ndim:])
        bmask = _reshape_under(mask, tuple(mask.aval.shape) + (1,) * len(rest), SINK_BUDGET)
        zero = Node.make("const", (), Aval((), x.aval.dtype, False), value=Literal(np.dtype(x.aval.dtype).type(0)))
        picked = Node.make("where", (bmask, x, zero), Aval(x.aval.shape, x.aval.dtype, False))
        axes = tuple(range(mask.aval.ndim))
        shape = tuple(1 for _ in axes) + rest if node.kw.get("keepdims") else rest
        total = Node.make("reduce_sum", (picked,), Aval(shape, node.aval.dtype, False), **{**node.kw, "axes": axes})
        return _reshape(total, node.aval.shape)

    return rewrite(graph, visit)


# At least this many vector-matrix products of the columns (or rows) of one
# matrix with column windows of another become one matrix product, which may
# compute at most BATCH_WASTE times the elements they need (see batch_matvecs).
BATCH_MATVECS = 8
BATCH_WASTE = 4


def batch_matvecs(graph: Graph) -> Graph:
    """``cov[i, i:m] = data[:, i] @ data[:, i:m]`` in a loop over columns (a
    covariance, a Gram matrix, a correlation written as the papers do): many
    vector-matrix products whose vectors are columns of one matrix ``P``
    (``P[:, c]``; or rows, ``P[r]``) and whose matrices are column windows of
    one matrix ``Q`` (``Q[:, j0:j1]``, or ``Q``) are entries of one matrix
    product, ``P.T @ Q`` (``P @ Q``): BLAS computes it at once, at several
    times a matrix-vector product's rate, and each product is a slice of it.
    Each entry is the same sum of the same terms, in BLAS's order (as every
    matmul's is). Only where there are at least BATCH_MATVECS of them, and
    the product wastes at most BATCH_WASTE times the elements they need."""
    groups: dict[tuple, list] = {}
    for node in graph.nodes:
        if node.op == "matmul":
            found = _matvec(node)
            if found is not None:
                kind, P, Q, idx, j0, j1 = found
                groups.setdefault((kind, id(P), id(Q)), []).append((node, P, Q, idx, j0, j1))
    member: dict[int, tuple] = {}
    for key, items in groups.items():
        lo, hi = min(it[3] for it in items), max(it[3] for it in items) + 1
        jl, jh = min(it[4] for it in items), max(it[5] for it in items)
        if len(items) >= BATCH_MATVECS and (hi - lo) * (jh - jl) <= BATCH_WASTE * sum(it[5] - it[4] for it in items):
            for node, P, Q, idx, j0, j1 in items:
                member[id(node)] = (key, P, Q, (lo, hi, jl, jh), idx, j0, j1)
    if not member:
        return graph
    mapping: dict[int, Node] = {}
    products: dict[tuple, Node] = {}
    for node in graph.nodes:
        new = node.replace(mapping[id(i)] for i in node.inputs)
        m = member.get(id(node))
        if m is not None:
            key, P, Q, (lo, hi, jl, jh), idx, j0, j1 = m
            G = products.get(key)
            if G is None:
                G = products[key] = _product(key[0], mapping[id(P)], mapping[id(Q)], lo, hi, jl, jh, node.aval.dtype)
            entry = Node.make("slice", (G,), Aval((1, j1 - j0), G.aval.dtype, False),
                              slices=((idx - lo, idx - lo + 1, 1), (j0 - jl, j1 - jl, 1)))
            new = _reshape(entry, node.aval.shape)
        mapping[id(node)] = new
    outputs = [mapping[id(o)] for o in graph.outputs]
    inputs = [mapping.get(id(n), n) for n in graph.inputs]
    return Graph(inputs, outputs, graph.captures, graph.input_names, graph.notes)


def _matvec(node: Node):
    """(kind, P, Q, vector's index in P, j0, j1) of ``P[:, c] @ Q[:, j0:j1]``
    (kind "col") or ``P[r] @ Q[:, j0:j1]`` ("row"), else None."""
    a, b = node.inputs
    if a.op != "reshape" or a.aval.ndim != 1 or b.aval.ndim != 2 or a.inputs[0].op != "slice":
        return None
    sl = a.inputs[0]
    P = sl.inputs[0]
    if P.aval.ndim != 2 or P.aval.dtype != a.aval.dtype:
        return None
    (r0, r1, rs), (c0, c1, cs) = sl.kw["slices"]
    rows, cols = P.aval.shape
    if (r0, r1, rs) == (0, rows, 1) and c1 == c0 + 1:
        kind, idx = "col", c0
    elif (c0, c1, cs) == (0, cols, 1) and r1 == r0 + 1:
        kind, idx = "row", r0
    else:
        return None
    Q, j0, j1 = b, 0, b.aval.shape[1]
    if b.op == "slice" and b.inputs[0].aval.ndim == 2:
        (q0, q1, qs), (w0, w1, ws) = b.kw["slices"]
        if (q0, q1, qs) == (0, b.inputs[0].aval.shape[0], 1) and ws == 1:
            Q, j0, j1 = b.inputs[0], w0, w1
    if Q.aval.dtype != b.aval.dtype or j1 <= j0:
        return None
    return kind, P, Q, idx, j0, j1


def _product(kind: str, P: Node, Q: Node, lo: int, hi: int, jl: int, jh: int, dtype) -> Node:
    """``P[:, lo:hi].T @ Q[:, jl:jh]`` ("col") or ``P[lo:hi] @ Q[:, jl:jh]`` ("row")."""
    rows, cols = P.aval.shape
    if kind == "col":
        part = P if (lo, hi) == (0, cols) else Node.make(
            "slice", (P,), Aval((rows, hi - lo), P.aval.dtype, False), slices=((0, rows, 1), (lo, hi, 1)))
        left = Node.make("transpose", (part,), Aval((hi - lo, rows), P.aval.dtype, False), perm=(1, 0))
    else:
        left = P if (lo, hi) == (0, rows) else Node.make(
            "slice", (P,), Aval((hi - lo, cols), P.aval.dtype, False), slices=((lo, hi, 1), (0, cols, 1)))
    qrows, qcols = Q.aval.shape
    right = Q if (jl, jh) == (0, qcols) else Node.make(
        "slice", (Q,), Aval((qrows, jh - jl), Q.aval.dtype, False), slices=((0, qrows, 1), (jl, jh, 1)))
    return Node.make("matmul", (left, right), Aval((hi - lo, jh - jl), dtype, False))


# A sum over one axis of at most this many elements whose result another
# reduction reads is written out as additions (see unroll_short_sums).
SHORT_SUM = 4


def unroll_short_sums(graph: Graph) -> Graph:
    """``d = ((X[:, None, :] - C[None, :, :]) ** 2).sum(-1); d.argmin(1)``: a sum
    over one short axis (at most SHORT_SUM elements: the x, y, z of points)
    read by another reduction is its additions written out, ``0 + x0 + x1 +
    x2 + x3`` in the result's dtype (NumPy's own order: below 8 elements its
    pairwise sum is a plain loop from 0, so bitwise NumPy's), each ``xj``
    taken through the elementwise ops that make ``x`` (one op per element, as
    before). Fusion then computes ``d`` inside the kernel of the reduction that
    reads it, which never writes it out (k-means' distances and argmin: one
    kernel instead of a (n, 8, 4) reduction writing (n, 8) and a second pass)."""
    feeds = {id(i) for n in graph.nodes if n.op in _REDUCE_ANY for i in n.inputs}
    mapping: dict[int, Node] = {}
    for node in graph.nodes:
        new = node.replace(mapping[id(i)] for i in node.inputs)
        if id(node) in feeds and new.op == "reduce_sum":
            new = _unrolled_sum(new) or new
        mapping[id(node)] = new
    outputs = [mapping[id(o)] for o in graph.outputs]
    inputs = [mapping.get(id(n), n) for n in graph.inputs]
    return Graph(inputs, outputs, graph.captures, graph.input_names, graph.notes)


def _unrolled_sum(node: Node) -> Node | None:
    (x,) = node.inputs
    axes = node.kw["axes"]
    if len(axes) != 1 or x.aval.ndim < 2 or isinstance(node.aval, tuple):
        return None
    a = axes[0] % x.aval.ndim
    n = x.aval.shape[a]
    out = np.dtype(node.aval.dtype)
    if not 1 <= n <= SHORT_SUM or out.kind not in "biuf" or np.dtype(x.aval.dtype).kind not in "biuf":
        return None
    shape = tuple(d for i, d in enumerate(x.aval.shape) if i != a)
    memo: dict[tuple, Node] = {}
    budget = [SINK_BUDGET * n]

    def take(m: Node, j: int) -> Node:
        """Element ``j`` of ``m`` along axis ``a`` (``m`` of x's rank or a scalar)."""
        if m.aval.ndim == 0:
            return m
        key = (id(m), j)
        if key in memo:
            return memo[key]
        mshape = tuple(d for i, d in enumerate(m.aval.shape) if i != a)
        if m.aval.shape[a] == 1:
            new = _reshape(m, mshape)
        elif (KIND.get(m.op) == "elementwise" and budget[0] > 0 and not isinstance(m.aval, tuple)
              and all(i.aval.ndim in (0, m.aval.ndim) for i in m.inputs)):
            budget[0] -= 1
            new = Node.make(m.op, [take(i, j) for i in m.inputs], Aval(mshape, m.aval.dtype, m.aval.weak), **m.kw)
        else:
            slices = tuple((j, j + 1, 1) if i == a else (0, d, 1) for i, d in enumerate(m.aval.shape))
            one = tuple(1 if i == a else d for i, d in enumerate(m.aval.shape))
            new = _reshape(Node.make("slice", (m,), Aval(one, m.aval.dtype, m.aval.weak), slices=slices), mshape)
        memo[key] = new
        return new

    pieces = [take(x, j) for j in range(n)]
    typed = Aval(shape, out, False)

    def cast(p: Node) -> Node:
        return p if np.dtype(p.aval.dtype) == out else Node.make("convert", (p,), typed, dtype=out)

    total = cast(pieces[0])
    if out.kind == "f" and not _never_negative_zero(pieces[0]):  # (from 0, as NumPy: a sum of -0.0s is 0.0)
        zero = Node.make("const", (), Aval((), out, False), value=Literal(out.type(0)))
        total = Node.make("add", (zero, total), typed)
    for p in pieces[1:]:
        total = Node.make("add", (total, cast(p)), typed)
    return _reshape(total, node.aval.shape)


def unroll_short_extrema(graph: Graph) -> Graph:
    """``np.min([D[i - 1, j], D[i, j - 1], D[i - 1, j - 1]])``: the least (or
    greatest) of at most SHORT_EXTREMUM scalars stacked into a vector is
    ``minimum``s (``maximum``s) of them in order, NumPy's own reduction of so
    few elements (NaN propagated, the same element kept on a tie), bit for
    bit. The vector is never built: the step of a dynamic program is one
    elementwise kernel, and a loop of such steps re-rolls."""

    def unrolled(node: Node) -> Node:
        if node.op not in ("reduce_min", "reduce_max") or node.aval.shape != () or node.inputs[0].op != "concatenate":
            return node
        pieces = node.inputs[0].inputs
        dtype = node.aval.dtype
        if not 2 <= len(pieces) <= SHORT_EXTREMUM or np.dtype(dtype).kind not in "iuf" or any(
                p.aval.size != 1 or p.aval.dtype != dtype for p in pieces):
            return node
        op = "minimum" if node.op == "reduce_min" else "maximum"
        scalar = node.aval
        best = _reshape(pieces[0], ())
        for p in pieces[1:]:
            best = Node.make(op, (best, _reshape(p, ())), scalar)
        return best

    return rewrite(graph, unrolled)


# The most scalars a min or max of a stacked vector is written out for.
SHORT_EXTREMUM = 8


def _never_negative_zero(node: Node) -> bool:
    """Whether ``node`` can never be -0.0 (then ``0.0 + node`` is ``node``,
    bit for bit, NaN included): a square or an absolute value, k-means'
    squared differences."""
    if node.op in ("absolute", "square"):
        return True
    if node.op == "multiply":
        return node.inputs[0] is node.inputs[1]
    if node.op == "power":
        e = node.inputs[1]
        return e.op == "const" and e.kw["value"].value == 2
    return False


PASSES: list[tuple[str, Callable[[Graph], Graph]]] = [
    ("fold_constants", fold_constants),
    ("fold_constant_stores", fold_constant_stores),
    ("scalarize_small_vectors", scalarize_small_vectors),
    ("drop_identities", drop_identities),
    ("masked_sums", masked_sums),
    ("unroll_short_sums", unroll_short_sums),
    ("unroll_short_extrema", unroll_short_extrema),
    ("batch_matvecs", batch_matvecs),
    ("sink_slices", sink_slices),
    ("lift_rotations", lift_rotations),
    ("simplify_bodies", simplify_bodies),
    ("dce", dce),
]


# Passes that change nothing in a graph without one of these ops (skipped there:
# a pass visits every node, and a graph unrolled from a loop has 100,000).
NEEDS = {
    "masked_sums": frozenset({"compress"}),
    "unroll_short_sums": _REDUCE_ANY,
    "unroll_short_extrema": frozenset({"reduce_min", "reduce_max"}),
    "batch_matvecs": frozenset({"matmul"}),
    "lift_rotations": frozenset({"concatenate"}),
    "simplify_bodies": frozenset({"composite"}),
}


def run_passes(graph: Graph, keep_stages: bool = False):
    """(final graph, [(stage name, graph), ...] if keep_stages else [])."""
    stages = [("trace", graph)] if keep_stages else []
    sinks = Sinks()  # what sink_slices tells lift_rotations
    census = (None, frozenset())  # (the graph, the ops in it)
    for name, fn in PASSES:
        needs = NEEDS.get(name)
        if needs is not None:
            if census[0] is not graph:
                census = (graph, frozenset(n.op for n in graph.nodes))
            if census[1].isdisjoint(needs):
                if keep_stages:
                    stages.append((name, graph))
                continue
        graph = fn(graph, sinks) if fn in (sink_slices, lift_rotations) else fn(graph)
        if keep_stages:
            stages.append((name, graph))
    return graph, stages
