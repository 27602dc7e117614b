"""Paired forward/backward programs: ``braze.compile(f).vjp(*args)``.

The function is traced once into a *joint* graph: its outputs, and the
gradient of every floating-point input for a cotangent that enters as an
extra input. The joint graph splits along that dependence: nodes that do
not depend on the cotangent form the **forward** program, the others the
**backward** program. Forward values the backward reads are *residuals*,
returned by the forward program and passed to the backward one.

Before splitting, cheap elementwise residuals are moved into the backward
program (recomputed there from what they were computed from) whenever that
saves bytes: a layer norm then saves its input (by reference, no copy) and
two per-row statistics instead of its normalized activations.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import calling, intercept, pipeline, pytree, registry
from .autodiff import GradientError, GradientTape, Watched, differentiable, primal_parts
from .aval import Aval
from .core import pop_context, push_context, with_flag
from .errors import where
from .graph import Graph, Node, collector_paused
from .log import logger
from .passes import run_passes
from .tracing import GraphContext

# Ops recomputed in the backward program rather than saved, when that saves bytes.
_RECOMPUTABLE = with_flag("recomputable")
_RECOMPUTABLE_VIEWS = _RECOMPUTABLE & with_flag("layout")


@dataclass
class Residual:
    name: str
    aval: Aval
    op: str
    kind: str  # "saved" (a new array), "input" (a primal input, by reference), "output" (also returned)

    @property
    def nbytes(self) -> int:
        return 0 if self.kind == "input" else self.aval.size * self.aval.dtype.itemsize

    def __str__(self):
        extra = {"input": "an input, kept by reference", "output": "also an output"}.get(self.kind, "saved")
        return f"{self.name}: {self.aval} from {self.op} ({extra}, {self.nbytes:,} bytes)"


@dataclass
class Split:
    forward: Graph
    backward: Graph
    residuals: list            # Residual per backward input before the cotangents
    residual_sources: list     # ("fwd", k): forward output k; ("arg", i): dynamic input i
    recomputed: list = field(default_factory=list)  # descriptions of forward values recomputed
    n_out: int = 0
    ct_avals: list = field(default_factory=list)
    grad_leaves: list = field(default_factory=list)  # dynamic-leaf index of each backward output
    notes: tuple = ()


def trace_joint(fn, call, target: str):
    """The joint graph of ``fn`` and its vjp, for the arguments of ``call``."""
    ctx = GraphContext(target)
    tracers = [ctx.new_input(i, a, strides=s.strides, scalar=s.scalar) for i, (a, s) in enumerate(zip(call.avals, call.specs))]
    push_context(ctx)
    try:
        with intercept.intercepted():
            tape = GradientTape(persistent=True)
            with tape:
                watched = [tape._watch_leaf(t) if differentiable(t.dtype) else t for t in tracers]
                pos, kw = call.rebuild(watched)
                out = fn(*pos, **kw)
            changed = [i for i, (w, t) in enumerate(zip(watched, tracers))
                       if (w._id != w._origin if isinstance(w, Watched) else t._version)]
            if changed:
                raise GradientError(
                    f"{getattr(fn, '__name__', 'fn')}.vjp: the function updates argument(s) "
                    f"{[call.names[i] for i in changed]} in place{where()}; a function differentiated "
                    "with vjp must not modify its inputs (copy them first)"
                )
            out_leaves, out_tree = pytree.flatten(out)
            values = [ctx.lift(primal_parts(o, tape)[0]) for o in out_leaves]
            ct_index = [k for k, v in enumerate(values) if differentiable(v.aval.dtype)]
            cts = [ctx.new_input(len(tracers) + j, Aval(values[k].aval.shape, values[k].aval.dtype))
                   for j, k in enumerate(ct_index)]
            sources = [w for w in watched if isinstance(w, Watched)]
            grad_leaves = [i for i, w in enumerate(watched) if isinstance(w, Watched)]
            targets = [out_leaves[k] for k in ct_index]
            grads = tape.gradient(targets, sources, cts) if sources and targets else []
            if sources and not targets:
                grads = [np.zeros(t.shape, t.dtype) for t in sources]
            grad_nodes = [ctx.lift(g) for g in grads]
    finally:
        pop_context(ctx)
    inputs = [t._node_ for t in tracers] + [c._node_ for c in cts]
    names = list(call.names) + [f"ct{j}" for j in range(len(cts))]
    graph = Graph(inputs, values + grad_nodes, ctx.captures, names, notes=ctx.notes)
    return graph, out_tree, len(values), ct_index, grad_leaves


def partition(graph: Graph, n_primal: int, n_out: int) -> Split:
    """Split a joint graph (inputs: primals then cotangents; outputs: results
    then gradients) into forward and backward programs."""
    graph, _ = run_passes(graph)
    primal_inputs = {id(n) for n in graph.inputs[:n_primal]}
    ct_inputs = {id(n) for n in graph.inputs[n_primal:]}
    order = graph.nodes
    backward = set(ct_inputs)
    for node in order:
        if any(id(i) in backward for i in node.inputs):
            backward.add(id(node))
    users: dict[int, list] = {}
    for node in order:
        for i in node.inputs:
            users.setdefault(id(i), []).append(node)
    free = lambda n: n.op in ("const", "capture") or id(n) in primal_inputs  # noqa: E731
    outs, grads = graph.outputs[:n_out], graph.outputs[n_out:]

    # The boundary: forward values the backward program reads.
    boundary: dict[int, Node] = {}
    for node in order:
        if id(node) in backward:
            for i in node.inputs:
                if id(i) not in backward and not free(i):
                    boundary[id(i)] = i
    for g in grads:
        if id(g) not in backward and not free(g):
            boundary[id(g)] = g

    # Recompute cheap elementwise values instead of saving them, when that saves bytes.
    recompute: dict[int, Node] = {}
    out_ids = {id(o) for o in outs}
    recomputable = lambda n: n.op in _RECOMPUTABLE  # noqa: E731

    def closure(node):
        """The recomputable values ``node`` needs, and the frontier they are computed from."""
        members, frontier, seen, stack = [], {}, set(), [node]
        while stack:
            m = stack.pop()
            if id(m) in seen:
                continue
            seen.add(id(m))
            if m is not node and (free(m) or id(m) in boundary or id(m) in out_ids or not recomputable(m)):
                if not free(m):
                    frontier[id(m)] = m
                continue
            members.append(m)
            stack.extend(m.inputs)
        return members, frontier

    # Residuals computed from the same new values are decided together: the
    # four elementwise pieces of a GELU's derivative all come from its input.
    changed = True
    while changed:
        changed = False
        groups: dict[frozenset, list] = {}
        for key, node in boundary.items():
            if key in out_ids or not recomputable(node):
                continue
            members, frontier = closure(node)
            new = {k: f for k, f in frontier.items() if k not in boundary and k not in out_ids}
            groups.setdefault(frozenset(new), []).append((key, node, members, new))
        for group in groups.values():
            cost = sum(_nbytes(f.aval) for f in group[0][3].values())
            gain = sum(_nbytes(node.aval) for _, node, _, _ in group)
            views = all(node.op in _RECOMPUTABLE_VIEWS for _, node, _, _ in group)
            if cost < gain or (cost == gain and views):
                for key, node, members, new in group:
                    boundary.pop(key, None)
                    for m in members:
                        recompute[id(m)] = m
                        boundary.pop(id(m), None)
                    boundary.update(new)
                changed = True
                break

    residual_nodes = list(boundary.values())
    used_inputs = [n for n in graph.inputs[:n_primal] if any(
        id(u) in backward or id(u) in recompute for u in users.get(id(n), ()))
        or any(g is n for g in grads)]
    # The forward program: results, then saved residuals.
    fwd_outputs = list(outs) + [n for n in residual_nodes if id(n) not in out_ids]
    forward = Graph(graph.inputs[:n_primal], fwd_outputs, graph.captures, graph.input_names[:n_primal])
    forward, _ = run_passes(forward)  # keep only what the results and residuals need

    # The backward program: residuals and used primal inputs as inputs, then the cotangents.
    memo: dict[int, Node] = {}
    captures: list = []
    capture_map: dict[int, Node] = {}
    bwd_inputs, residuals, sources = [], [], []
    for k, n in enumerate(residual_nodes):
        memo[id(n)] = Node.make("input", (), n.aval, index=len(bwd_inputs))
        bwd_inputs.append(memo[id(n)])
        kind = "output" if id(n) in out_ids else "saved"
        residuals.append(Residual(f"r{k}", n.aval, _describe(n), kind))
        sources.append(("out", [i for i, o in enumerate(outs) if o is n][0]) if kind == "output"
                       else ("fwd", n_out + [m for m in residual_nodes if id(m) not in out_ids].index(n)))
    for n in used_inputs:
        memo[id(n)] = Node.make("input", (), n.aval, index=len(bwd_inputs))
        bwd_inputs.append(memo[id(n)])
        residuals.append(Residual(graph.input_names[graph.inputs.index(n)], n.aval, "input", "input"))
        sources.append(("arg", graph.inputs.index(n)))
    ct_nodes = list(graph.inputs[n_primal:])
    for n in ct_nodes:
        memo[id(n)] = Node.make("input", (), n.aval, index=len(bwd_inputs))
        bwd_inputs.append(memo[id(n)])

    def clone(node: Node) -> Node:
        stack = [(node, False)]
        while stack:
            sub, ready = stack.pop()
            if id(sub) in memo:
                continue
            if not ready:
                stack.append((sub, True))
                stack.extend((i, False) for i in sub.inputs if id(i) not in memo)
                continue
            if sub.op == "capture":
                new = capture_map.get(sub.kw["index"])
                if new is None:
                    new = Node.make("capture", (), sub.aval, index=len(captures))
                    captures.append(graph.captures[sub.kw["index"]])
                    capture_map[sub.kw["index"]] = new
            elif sub.op == "input":
                raise AssertionError(f"forward input {sub.kw} reached the backward program unmapped")
            else:
                new = sub.replace([memo[id(i)] for i in sub.inputs])
            memo[id(sub)] = new
        return memo[id(node)]

    bwd_outputs = [clone(g) for g in grads]
    names = [r.name for r in residuals] + [f"ct{j}" for j in range(len(ct_nodes))]
    backward_graph = Graph(bwd_inputs, bwd_outputs, captures, names)
    recomputed = [f"{_describe(n)} -> {n.aval}" for n in recompute.values()]
    return Split(forward, backward_graph, residuals, sources, recomputed, n_out,
                 [n.aval for n in ct_nodes], notes=graph.notes)


def _nbytes(aval: Aval) -> int:
    return aval.size * aval.dtype.itemsize


def _describe(node: Node) -> str:
    if node.op == "composite":
        return f"composite {node.kw['name']}"
    if node.op == "kernel":
        return f"kernel {node.kw['entry'].label}"
    if node.op == "pick" and node.inputs and node.inputs[0].op in ("kernel", "composite"):
        return f"{_describe(node.inputs[0])}[{node.kw['index']}]"
    return node.op


# ---------------------------------------------------------------- compiled pairs


class Pair:
    """A function's forward and backward programs for one call signature.

    Tracing the joint graph already chose kernel pairs for composites on the
    gradient tape, so the pair is rebuilt (``refresh``) when the registry
    version of any composite name it met changes."""

    def __init__(self, split: Split, forward: pipeline.Program, backward: pipeline.Program, ct_index, grad_leaves,
                 names: frozenset):
        self.split, self.forward, self.backward = split, forward, backward
        self.out_tree, self.ct_index, self.grad_leaves = forward.out_tree, ct_index, grad_leaves
        self.versions = tuple(sorted((n, registry.version(n)) for n in names))
        self.registry_version = registry.VERSION[0]

    def current(self) -> bool:
        if self.registry_version == registry.VERSION[0]:
            return True
        if all(registry.version(n) == v for n, v in self.versions):
            self.registry_version = registry.VERSION[0]
            return True
        return False


def refresh(pair: Pair) -> Pair | None:
    """The cache's freshness rule for pairs: the pair, or None to rebuild it."""
    return pair if pair.current() else None


def _composite_names(graph: Graph) -> set:
    return {n.kw["name"] if n.op == "composite" else n.kw["entry"].name
            for n in graph.nodes if n.op in ("composite", "kernel")}


def build(fn, call: calling.Call, target, name: str) -> Pair:
    with collector_paused():
        return _build(fn, call, target, name)


def _build(fn, call: calling.Call, target, name: str) -> Pair:
    joint, out_tree, n_out, ct_index, grad_leaves = trace_joint(fn, call, target.name)
    names = _composite_names(joint)
    split = partition(joint, len(call.avals), n_out)
    forward = pipeline.lower_graph(split.forward, target, out_tree, split.n_out)
    backward = pipeline.lower_graph(split.backward, target)
    split.forward, split.backward = forward.graph, backward.graph
    names |= {n for n, _ in forward.versions + backward.versions}
    logger.info("%s.vjp: forward and backward programs for %s; residuals %s", name, target.name,
                ", ".join(str(r) for r in split.residuals) or "none")
    return Pair(split, forward, backward, ct_index, grad_leaves, frozenset(names))


def run_vjp(name: str, target, pair: Pair, call: calling.Call, n_args: int):
    split = pair.split
    results = pipeline.run(pair.forward, call.dynamic, f"{name} (forward)", target.name)
    outs = [calling.finish(o, None, call.dynamic) for o in results[: split.n_out]]
    saved = []
    for kind, k in split.residual_sources:
        saved.append(results[k] if kind != "arg" else call.dynamic[k])
    out = pytree.unflatten(pair.out_tree, outs)

    def vjp_fn(cotangent):
        leaves, tree = pytree.flatten(cotangent)
        if tree != pair.out_tree:
            if pair.out_tree == pytree.LEAF or len(leaves) != len(outs):
                raise GradientError(
                    f"{name} vjp_fn: the cotangent has structure {pytree.describe(tree)} but "
                    f"the function returned {pytree.describe(pair.out_tree)}{where()}"
                )
        cts = []
        for k in pair.ct_index:
            ct, aval = leaves[k], split.ct_avals[len(cts)]
            arr = np.asarray(ct)
            if arr.shape != aval.shape:
                try:
                    arr = np.broadcast_to(arr, aval.shape)
                except ValueError:
                    raise GradientError(
                        f"{name} vjp_fn: a cotangent of shape {arr.shape} for a result of "
                        f"shape {aval.shape}{where()}; cotangents have the shape of the results"
                    )
            cts.append(np.asarray(arr, dtype=aval.dtype))
        grads = pipeline.run(pair.backward, saved + cts, f"{name} (backward)", target.name)
        per_leaf = [None] * len(call.dynamic)
        for leaf, g in zip(pair.grad_leaves, grads):
            per_leaf[leaf] = calling.finish(g, None, call.dynamic)
        return call.positional(per_leaf, n_args)

    return out, vjp_fn


class LoweredVJP:
    """What ``compiled.lower_vjp(*args)`` returns: both programs and the residuals."""

    def __init__(self, pair: Pair, target):
        split = pair.split
        self.forward = pipeline.Lowered(pair.forward, target)
        self.backward = pipeline.Lowered(pair.backward, target)
        self.residuals = split.residuals
        self.recomputed = split.recomputed
        self.notes = split.notes
        self.residual_bytes = sum(r.nbytes for r in split.residuals)

    def __str__(self):
        lines = ["# forward program (returns the results, then the saved residuals)", str(self.forward), "",
                 "# backward program (residuals and inputs, then the cotangents)", str(self.backward), "",
                 f"# residuals ({self.residual_bytes:,} bytes saved)"]
        lines += [f"  {r}" for r in self.residuals] or ["  none"]
        lines.append("# recomputed in the backward program instead of saved")
        lines += [f"  {r}" for r in self.recomputed] or ["  none"]
        if self.notes:
            lines.append("# gradients of composites")
            lines += [f"  {n}" for n in self.notes]
        return "\n".join(lines)
