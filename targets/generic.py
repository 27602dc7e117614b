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

from .base import Executable, SlotLayout, Target


def _program(graph: Graph):
    """The graph as steps over slots: (fn, params, input slots, output slot),
    and a function listing them (for ``source``)."""
    layout = SlotLayout(graph)
    slot = layout.slot_of
    steps, shown = [], []
    for node in graph.nodes:
        if node.op in ("input", "const", "capture"):
            continue
        n = slot[id(node)]
        params = node.kw
        if node.op == "composite":
            sub = lower_graph(params["body"])
            fn, params = _composite_runner(sub, isinstance(node.aval, tuple)), {}
        else:
            fn = NUMPY_IMPL[node.op]
        if not isinstance(node.aval, tuple) and node.aval.weak:
            fn = weakly_typed(fn, python_scalar_type(node.aval.dtype))
        steps.append((fn, params, tuple(slot[id(x)] for x in node.inputs), n))
        shown.append(node)
    out_slots = [slot[id(o)] for o in graph.outputs]

    def listing() -> list[str]:
        lines = []
        for node in shown:
            args = ", ".join(format_literal(x) if x.op == "const" else f"v{slot[id(x)]}" for x in node.inputs)
            kw = "".join(f", {k}={v!r}" for k, v in node.kw.items() if k not in ("body", "attrs"))
            lines.append(f"v{slot[id(node)]} = {node.op}({args}{kw})  # {node.aval}")
        return lines

    return layout, steps, out_slots, listing


def weakly_typed(fn, pytype):
    """Keep a weakly typed value a Python scalar, so NumPy promotes it as NEP 50 says."""
    return lambda *args, **params: pytype(fn(*args, **params))


def _composite_runner(sub: Executable, multi: bool):
    def run(*args):
        outs = sub(args)
        return tuple(outs) if multi else outs[0]

    return run


def lower_graph(graph: Graph) -> Executable:
    layout, steps, out_slots, listing = _program(graph)

    def run(inputs, outs=None):
        slots = layout.fill(inputs)
        with np.errstate(all="ignore"):  # (no target warns: a masked store computes unselected elements too)
            for fn, params, ins, out in steps:
                slots[out] = fn(*[slots[j] for j in ins], **params)
        return [slots[j] for j in out_slots]

    plan = f"generic: {len(steps)} NumPy calls, no fusion"
    return Executable(run, plan, lambda: "\n".join(listing() + [f"return {', '.join(f'v{j}' for j in out_slots)}"]))


class GenericTarget(Target):
    """Evaluate with NumPy (the reference)."""

    name = "generic"

    def describe(self) -> str:
        return f"generic: NumPy {np.__version__} evaluation, no compiler"

    def lower(self, graph: Graph, donated=frozenset(), mutable=frozenset()) -> Executable:
        return lower_graph(graph)
