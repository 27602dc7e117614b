"""NumPy's memory model for traced and watched arrays: which results are views
of which arrays, how a write through a view reaches its base, and what
strides NumPy would give each result.

The rules are the ops' own (``Primitive.view``, ``Primitive.strides``, see
``braze/ops``); tracing (``braze.tracing``) and the gradient tape
(``braze.autodiff``) both apply them through this module, so a traced and a
watched array behave alike.
"""
from __future__ import annotations

import functools


from . import layout
from .core import KIND, PRIMITIVES
from .aval import is_ndarray
from .errors import BrazeError, ConcretizationError, where


class ReadOnlyError(BrazeError, ValueError):
    """A write through a read-only view (``broadcast_to``, ``diagonal``), as NumPy refuses it."""


class View:
    """How an array views its ``base``: the op (and params) that reads it from the
    base, whether writing through it is refused (the reason), and whether
    NumPy's choice between a view and a copy was unknown (then reading it
    after its base changed, or writing through it, raises instead of guessing)."""

    __slots__ = ("base", "op", "params", "readonly", "uncertain")

    def __init__(self, base, op: str, params: dict, readonly: str | None = None, uncertain: bool = False):
        self.base, self.op, self.params = base, op, params
        self.readonly, self.uncertain = readonly, uncertain

    def write(self, value):
        """The base's new value when ``value`` is written into this view."""
        if self.readonly:
            raise ReadOnlyError(f"assignment destination is read-only: {self.readonly}{where()}; "
                                "write into a copy (.copy()) instead")
        if self.uncertain:
            raise uncertain_error("writing through")
        return PRIMITIVES[self.op].view(self.base, value, **self.params)


def uncertain_error(what: str) -> ConcretizationError:
    return ConcretizationError(
        f"{what} a reshape of an array whose memory layout braze does not model (the result of an "
        f"advanced-indexing gather, an einsum, ...){where()}: NumPy returns a view or a copy there "
        "depending on strides, so the result would be a guess. Make the reshape explicit with "
        ".copy() (a copy) or write through the original array instead")


def refresh(view_array, reread) -> None:
    """Bring a view (a traced or watched array with ``_view``) up to date with
    the array that owns its data, down the chain of views from the top, without
    recursion (a loop may make thousands: ``x = x[1:]``). ``reread(t, view,
    base)`` reads ``t`` again from its base, which changed."""
    chain, t = [], view_array
    while t._view is not None:
        chain.append(t)
        t = t._view.base
    for t in reversed(chain):
        view = t._view
        base = view.base
        if base._version != t._base_version:
            if view.uncertain:
                raise uncertain_error("reading, after its base was written,")
            reread(t, view, base)
            t._base_version = base._version
            t._version += 1


def is_view_op(op: str) -> bool:
    prim = PRIMITIVES.get(op)
    return prim is not None and prim.view is not None


def make_view(op: str, params: dict, base, base_strides, base_shape, shape) -> View | None:
    """The ``View`` a result of view op ``op`` on ``base`` is, or None where NumPy
    makes a copy (a reshape that cannot be a view of these strides)."""
    view = PRIMITIVES[op].view
    readonly = view if isinstance(view, str) else (params.get("readonly") and "a read-only array (as NumPy's)")
    uncertain = False
    if op == "reshape":
        if base_strides is None:
            uncertain = True
        elif layout.reshaped(tuple(base_shape), base_strides, tuple(shape)) is None:
            return None
    return View(base, op, params, readonly or None, uncertain)


def result_strides(op: str, operand_strides, operand_avals, params, aval):
    """The element strides NumPy would give ``op``'s result (None: not modelled)."""
    if aval.ndim == 0:
        return ()
    rule = PRIMITIVES[op].strides if op in PRIMITIVES else None
    if rule is not None:
        if any(s is None for s, a in zip(operand_strides[:1], operand_avals[:1]) if a.ndim):
            return None
        return rule(operand_strides, operand_avals, params, aval)
    if KIND.get(op) == "elementwise":  # NumPy's ufuncs: order 'K' over the operands
        operands = []
        for s, a in zip(operand_strides, operand_avals):
            if a.ndim:
                if s is None:
                    return None
                operands.append((tuple(s), a.shape))
        return _k_order_of(aval.shape, tuple(operands))
    return None  # not modelled: gathers, einsum, kernels, composites


@functools.lru_cache(maxsize=4096)
def _k_order_of(shape: tuple, operands: tuple):
    """The strides of an elementwise result of ``shape`` from ``operands``
    ((strides, shape) of each array operand). Cached: an unrolled loop asks
    the same question at every op of every iteration."""
    if any(len(a) > len(shape) for _, a in operands):
        return None
    return layout.k_order(shape, [layout.broadcast(s, a, shape) for s, a in operands])


def strides_of(value):
    """The element strides of an operand: a traced array's, a NumPy array's, a scalar's."""
    strides = getattr(value, "_strides", False)
    if strides is not False:
        return strides
    if is_ndarray(value):
        return layout.of_array(value)
    return ()
