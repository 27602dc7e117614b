"""Primitives, their rule tables, and the context stack that ``bind`` consults.

An op is declared once, with one rule per concern kept in a table keyed by
the op's name. ``bind(op, *args, **params)`` hands the call to the innermost
active context: the eager context evaluates with NumPy now, a graph context
records a node, a tape context (autodiff) evaluates and remembers. No op
knows which one runs it.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

# op name -> rule. One table per concern; later layers add their own tables
# (vjp rules, per-target scalar code) keyed the same way.
KIND: dict[str, str] = {}                 # elementwise | reduce | shape | index | linalg | source | call
ABSTRACT: dict[str, Callable] = {}        # (*avals, **params) -> Aval | tuple[Aval, ...]
NUMPY_IMPL: dict[str, Callable] = {}      # (*arrays, **params) -> ndarray | tuple

REQUIRED_TABLES = {"abstract": ABSTRACT, "numpy": NUMPY_IMPL}


def declare(name: str, kind: str, *, abstract: Callable, impl: Callable) -> str:
    """Register a primitive with its shape/dtype rule and NumPy evaluation."""
    if name in KIND:
        raise RuntimeError(f"primitive {name!r} declared twice")
    KIND[name] = kind
    ABSTRACT[name] = abstract
    NUMPY_IMPL[name] = impl
    return name


def missing_rules() -> list[tuple[str, str]]:
    """(op, table) pairs where a declared op lacks a rule; empty when complete."""
    return [(op, table) for op in KIND for table, rules in REQUIRED_TABLES.items() if op not in rules]


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
