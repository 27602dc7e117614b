"""The ``generic`` target: evaluates a graph op by op with NumPy.

No compiler, always available, and the reference every other target is
tested against. It evaluates each node with the same NumPy rule table
(``braze.core.NUMPY_IMPL``) the eager context uses, so eager and compiled
results agree by construction.
"""
from __future__ import annotations

import numpy as np

from braze.aval import python_scalar_type
from braze.core import NUMPY_IMPL
from braze.graph import Graph, format_literal

from .base import Executable, Target


def _program(graph: Graph):
    """Flatten the graph into slots and steps: (fn, params, in slots, out slot)."""
    slot: dict[int, int] = {}
    consts: list[tuple[int, object]] = []
    captures: list[tuple[int, int]] = []
    steps = []
    lines = []
    for i, node in enumerate(graph.inputs):
        slot[id(node)] = i
    n = len(graph.inputs)
    for node in graph.nodes:
        if id(node) in slot:
            continue
        slot[id(node)] = n
        if node.op == "const":
            consts.append((n, node.kw["value"].value))
        elif node.op == "capture":
            captures.append((n, node.kw["index"]))
        elif node.op == "input":
            raise AssertionError("input node not among the graph's inputs")
        else:
            params = node.kw
            if node.op == "composite":
                body = params["body"]
                sub = lower_graph(body)
                fn, params = _composite_runner(sub, isinstance(node.aval, tuple)), {}
            else:
                fn = NUMPY_IMPL[node.op]
            if not isinstance(node.aval, tuple) and node.aval.weak:
                fn = _weak(fn, python_scalar_type(node.aval.dtype))
            steps.append((fn, params, tuple(slot[id(x)] for x in node.inputs), n))
            args = ", ".join(
                format_literal(x) if x.op == "const" else f"v{slot[id(x)]}" for x in node.inputs
            )
            kw = "".join(f", {k}={v!r}" for k, v in node.kw.items() if k not in ("body", "attrs"))
            lines.append(f"v{n} = {node.op}({args}{kw})  # {node.aval}")
        n += 1
    out_slots = [slot[id(o)] for o in graph.outputs]
    return n, consts, captures, steps, out_slots, lines


def _weak(fn, pytype):
    """Keep a weakly typed value a Python scalar, so NumPy promotes it as NEP 50 says."""
    return lambda *args, **params: pytype(fn(*args, **params))


def _composite_runner(sub: Executable, multi: bool):
    def run(*args):
        outs = sub(args)
        return tuple(outs) if multi else outs[0]

    return run


def lower_graph(graph: Graph) -> Executable:
    nslots, consts, captures, steps, out_slots, lines = _program(graph)
    graph_captures = graph.captures
    ninputs = len(graph.inputs)

    def run(inputs, outs=None):
        slots = [None] * nslots
        slots[:ninputs] = inputs
        for i, value in consts:
            slots[i] = value
        for i, k in captures:
            slots[i] = graph_captures[k]
        for fn, params, ins, out in steps:
            slots[out] = fn(*[slots[j] for j in ins], **params)
        return [slots[j] for j in out_slots]

    plan = f"generic: {len(steps)} NumPy calls, no fusion"
    source = "\n".join(lines + [f"return {', '.join(f'v{j}' for j in out_slots)}"])
    return Executable(run, plan, source)


class GenericTarget(Target):
    """Evaluate with NumPy (the reference)."""

    name = "generic"

    def describe(self) -> str:
        return f"generic: NumPy {np.__version__} evaluation, no compiler"

    def lower(self, graph: Graph, donated=frozenset(), mutable=frozenset()) -> Executable:
        return lower_graph(graph)
