"""Primitives (each with every rule it has, declared in one place) and the
context stack that ``bind`` consults.

An op is one ``Primitive``: its kind, its shape/dtype rule, its NumPy
evaluation, its vector-Jacobian product, the scalar code the numba targets
emit for it (elementwise ops), and the facts fusion, layout tracking and
memory planning need (flags). ``braze/ops/*.py`` declare them, one block per
op; op groups (layout ops, recomputable ops, ...) are derived from the flags.
``check_rules`` (run when braze is imported) fails loudly when an op lacks a
rule some layer needs.

``bind(op, *args, **params)`` hands the call to the innermost active
context: the eager context evaluates with NumPy now, a graph context records
a node, a tape context (autodiff) evaluates and remembers. No op knows which
one runs it.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

# A vjp rule value: no gradient flows through this op (comparisons, floor, argmax).
NONDIFFERENTIABLE = "nondifferentiable"

# Flags an op may carry (the layers that read them):
FLAGS = frozenset({
    "layout",          # fusion: a layout op, made with strides (a View step), never leads a kernel
    "recomputable",    # paired programs: recomputed in the backward program rather than saved
    "identity",        # passes: dropped when the result's aval equals the operand's
    "int_checked",     # tracing: a Python int out of an integer operand's range is NumPy's OverflowError
    "comparison",      # tracing: ... and settles a comparison instead
    "custom_scalar",   # codegen: the scalar rule takes (args, in_avals, out_dtype), not loop-dtype operands
    "cheap",           # passes, fusion: exact and a cycle or so: recomputing it where it is read costs
                       # less than a write and a read of its value (sink_slices, rematerialization)
})


@dataclass(frozen=True)
class Primitive:
    """Everything braze knows about one op."""

    name: str
    kind: str                         # elementwise | reduce | scan | shape | index | linalg | source | call
    abstract: Callable                # (*avals, **params) -> Aval | tuple[Aval, ...]
    impl: Callable                    # (*arrays, **params) -> ndarray | tuple: NumPy evaluation
    vjp: Any = None                   # (ct, *args, out=, **params) -> cotangents | NONDIFFERENTIABLE
    wants: bool = False               # the vjp rule takes wants= (which cotangents are needed)
    scalar: Callable | None = None    # elementwise: numba scalar code, (*operands, loop dtype) -> expression
    flags: frozenset = frozenset()
    view: Any = None                  # view ops: write rule (base, value, **params) -> new base, or a
                                      # read-only reason (str)
    strides: Callable | None = None   # layout: (operand strides, operand avals, params, aval) -> strides
    inplace: Callable | None = None   # update ops: impl writing into its first operand


PRIMITIVES: dict[str, Primitive] = {}
# Views of PRIMITIVES by concern (filled by declare), for the hot paths.
KIND: dict[str, str] = {}
ABSTRACT: dict[str, Callable] = {}
NUMPY_IMPL: dict[str, Callable] = {}
VJP: dict[str, Any] = {}


def declare(name: str, kind: str, *, abstract: Callable, impl: Callable, vjp=None, wants: bool = False,
            scalar: Callable | None = None, flags=(), view=None, strides=None, inplace=None) -> Primitive:
    """Declare a primitive with every rule it has (see ``Primitive``)."""
    if name in PRIMITIVES:
        raise RuntimeError(f"primitive {name!r} declared twice")
    unknown = set(flags) - FLAGS
    if unknown:
        raise RuntimeError(f"primitive {name!r}: unknown flags {sorted(unknown)}")
    prim = Primitive(name, kind, abstract, impl, vjp, wants, scalar, frozenset(flags), view, strides, inplace)
    PRIMITIVES[name] = prim
    KIND[name], ABSTRACT[name], NUMPY_IMPL[name] = kind, abstract, impl
    if vjp is not None:
        VJP[name] = vjp
    return prim


def with_flag(flag: str) -> frozenset:
    """The names of the ops carrying ``flag``."""
    return frozenset(n for n, p in PRIMITIVES.items() if flag in p.flags)


# Kinds whose ops are called by the tape like any other (a vjp rule, or
# NONDIFFERENTIABLE, is required); "call" ops (composite, kernel, pick) and
# "source" ops get their gradients from elsewhere.
_NEEDS_VJP = {"elementwise", "reduce", "scan", "shape", "index", "linalg"}


def missing_rules() -> list[tuple[str, str]]:
    """(op, rule) pairs where a declared op lacks a rule a layer needs; empty when complete."""
    missing = []
    for name, p in PRIMITIVES.items():
        if not callable(p.abstract):
            missing.append((name, "abstract"))
        if not callable(p.impl):
            missing.append((name, "numpy"))
        if p.kind in _NEEDS_VJP and p.vjp is None:
            missing.append((name, "vjp (or NONDIFFERENTIABLE)"))
        if p.kind == "elementwise" and p.scalar is None:
            missing.append((name, "scalar code"))
        if "layout" in p.flags and p.view is None:
            missing.append((name, "view rule (write-through or read-only reason)"))
    return missing


def check_rules() -> None:
    """Fail loudly (at import) when an op lacks a rule some layer needs."""
    missing = missing_rules()
    if missing:
        raise RuntimeError("braze: ops lack rules: " + ", ".join(f"{op} ({rule})" for op, rule in missing))


# ---------------------------------------------------------------- contexts


class EagerContext:
    """Evaluates every op with NumPy immediately."""

    def process(self, op: str, args: tuple, params: dict[str, Any]):
        return NUMPY_IMPL[op](*args, **params)


class _ContextStack(threading.local):
    def __init__(self):
        self.stack: list = [EagerContext()]


_contexts = _ContextStack()


def current_context():
    return _contexts.stack[-1]


def push_context(ctx) -> None:
    _contexts.stack.append(ctx)


def pop_context(ctx) -> None:
    """Pop ``ctx``, which must be the innermost context (contexts nest strictly)."""
    stack = _contexts.stack
    if len(stack) < 2 or stack[-1] is not ctx:
        from .errors import TraceError

        raise TraceError(
            "contexts exited out of order: the innermost active context is "
            f"{type(stack[-1]).__name__}, not {type(ctx).__name__}; exit nested "
            "`with` blocks in the reverse order of entering them"
        )
    stack.pop()


def context_stack() -> tuple:
    return tuple(_contexts.stack)


def bind(op: str, *args, **params):
    """Apply primitive ``op`` in whatever context is active."""
    return _contexts.stack[-1].process(op, args, params)
