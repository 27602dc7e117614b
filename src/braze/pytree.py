"""Pytrees: nested tuples, lists, dicts, namedtuples, dataclass instances and
None around leaves.

A tree flattens to its leaves and a hashable *treedef* that rebuilds it.
Dicts flatten in sorted key order, as in JAX, and are rebuilt in the order
their keys were inserted (a function's dict result keeps its order, as in
NumPy; the order is part of the treedef).
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any

import numpy as np

LEAF = ("*",)
# types that are always leaves (arrays and numbers), told apart first
_LEAVES = frozenset({np.ndarray, float, int, bool, complex, str, np.float64, np.float32, np.int64, np.int32,
                     np.bool_})


def _sorted_keys(d: dict) -> list:
    try:
        return sorted(d)
    except TypeError:
        return sorted(d, key=repr)


def flatten(tree: Any) -> tuple[list, tuple]:
    """(leaves, treedef) of ``tree``."""
    leaves: list = []
    return leaves, _walk(tree, leaves)


# Module-level recursion, not closures: a recursive closure is a reference cycle
# (function -> cell -> function) that keeps the leaves it saw, input and
# output arrays included, alive until the cyclic garbage collector runs.
def _walk(node, leaves: list):
    if type(node) in _LEAVES:  # (most nodes: a parameter tree's arrays, checked first)
        leaves.append(node)
        return LEAF
    if node is None:
        return ("None",)
    if isinstance(node, tuple) and hasattr(node, "_fields"):
        return ("namedtuple", type(node), tuple(_walk(c, leaves) for c in node))
    if isinstance(node, tuple):
        return ("tuple", len(node), tuple(_walk(c, leaves) for c in node))
    if isinstance(node, list):
        return ("list", len(node), tuple(_walk(c, leaves) for c in node))
    if isinstance(node, dict):
        keys = _sorted_keys(node)
        order = tuple(node) if list(node) != keys else None
        kind = type(node) if type(node) is not dict else None  # (an OrderedDict, a defaultdict: rebuilt as one)
        if isinstance(node, defaultdict):
            kind = (defaultdict, node.default_factory)
        return ("dict", tuple(keys), tuple(_walk(node[k], leaves) for k in keys), order, kind)
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        # (every field, in order; rebuilt without __init__ / __post_init__, as the
        # object was: a field computed from others is a field like them)
        names = tuple(f.name for f in dataclasses.fields(node))
        return ("dataclass", type(node), tuple(_walk(getattr(node, n), leaves) for n in names), names)
    leaves.append(node)
    return LEAF


def unflatten(treedef: tuple, leaves) -> Any:
    """The tree of ``treedef`` with ``leaves`` in flattening order."""
    return _build(treedef, iter(leaves))


def _build(td: tuple, it):
    kind = td[0]
    if kind == "*":
        return next(it)
    if kind == "None":
        return None
    children = [_build(c, it) for c in td[2]]
    if kind == "namedtuple":
        return td[1](*children)
    if kind == "dataclass":
        obj = td[1].__new__(td[1])
        for name, value in zip(td[3], children):
            object.__setattr__(obj, name, value)  # (a frozen one's too)
        return obj
    if kind == "tuple":
        return tuple(children)
    if kind == "list":
        return children
    built = dict(zip(td[1], children))
    built = built if td[3] is None else {k: built[k] for k in td[3]}
    kind = td[4] if len(td) > 4 else None
    if kind is None:
        return built
    if isinstance(kind, tuple):
        return kind[0](kind[1], built)
    try:
        return kind(built)
    except TypeError:  # (a dict subclass built otherwise: a plain dict of its items)
        return built


def map_leaves(fn, tree: Any) -> Any:
    """``tree`` with each leaf replaced by ``fn(leaf)``."""
    leaves, treedef = flatten(tree)
    return unflatten(treedef, [fn(leaf) for leaf in leaves])


def describe(treedef: tuple) -> str:
    """A short human-readable form of a treedef, for error messages and logs."""
    kind = treedef[0]
    if kind == "*":
        return "*"
    if kind == "None":
        return "None"
    inner = ", ".join(describe(c) for c in treedef[2])
    if kind == "dict":
        inner = ", ".join(f"{k!r}: {describe(c)}" for k, c in zip(treedef[1], treedef[2]))
        return "{" + inner + "}"
    if kind == "list":
        return f"[{inner}]"
    if kind == "namedtuple":
        return f"{treedef[1].__name__}({inner})"
    if kind == "dataclass":
        return f"{treedef[1].__name__}(" + ", ".join(f"{n}={describe(c)}" for n, c in zip(treedef[3], treedef[2])) + ")"
    return f"({inner}{',' if len(treedef[2]) == 1 else ''})"
