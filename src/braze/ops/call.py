"""Ops that carry a sub-graph or pick one result of a multi-result op.

``composite`` records a named composite op: eagerly it runs the composite's
Python body; in a graph it is one node whose ``body`` param is the traced
sub-graph (see ``braze.composite``). ``pick`` reads result ``index`` of a
node with several results.
"""
from __future__ import annotations

import numpy as np

from .. import pytree
from ..core import declare
from ..aval import is_ndarray
from ..errors import GuardFailed


class HostCall:
    """A call braze does not trace, run on the concrete values (a graph break).

    ``fn(*args, **kwargs)`` with the traced leaves of ``(args, kwargs)`` left
    out (``slots``: where each goes among the leaves, ``static``: the others).
    Its results are flattened; tracing saw ``avals`` (shapes and dtypes), and a
    call whose results differ raises ``GuardFailed`` (the program is traced
    again). Compared by identity: two calls are never one node.
    """

    __slots__ = ("fn", "name", "treedef", "static", "slots", "out_tree", "avals", "where", "writes", "dummy",
                 "pure", "weak", "_flat", "_expected")

    def __init__(self, fn, name, treedef, static, slots, where, pure: bool = False):
        self.fn, self.name, self.treedef, self.static, self.slots = fn, name, treedef, static, slots
        self.out_tree, self.avals, self.where = None, (), where
        self.writes = False  # fn writes into its array arguments (np.fill_diagonal, np.copyto, ...)
        self.dummy = False   # fn returns nothing: one empty result stands in (a graph output keeps it)
        self.pure = pure     # a NumPy function that never writes its arguments (see ``reads_only``)
        # per traced leaf, the Python type of a weak scalar (a Python float argument), else None: fn
        # gets a Python number, as the caller gave it (a 0-d float64 array would promote float32 data)
        self.weak: tuple = (None,) * len(slots)
        self._flat = _flat_call(treedef)  # (positional count, keyword names) where no argument nests
        self._expected = None  # the results' (shape, dtype) pairs, once the avals are known

    def call(self, arrays, writable: bool):
        """``fn`` on these values of the traced leaves: its result, as it returned
        it, and the arrays it was given. They are read-only views unless
        ``writable`` (then copies, which the caller reads back) or ``fn`` is
        pure (then the arrays themselves)."""
        given = [np.array(a, copy=True) if writable else (np.asarray(a) if self.pure else _read_only(a))
                 for a in arrays]
        leaves = list(self.static)
        for slot, a, weak in zip(self.slots, given, self.weak):
            leaves[slot] = a if weak is None else weak(a)
        if self._flat is not None:  # (a loop's thousand calls: no tree to rebuild)
            n, keys = self._flat
            return self.fn(*leaves[:n], **dict(zip(keys, leaves[n:]))), given
        args, kwargs = pytree.unflatten(self.treedef, leaves)
        return self.fn(*args, **kwargs), given

    def run(self, arrays) -> tuple:
        """The flat results (then the written arguments, if ``fn`` writes)."""
        try:
            result, given = self.call(arrays, self.writes)
        except Exception as exc:  # the specialization may not hold any more: trace again to know
            raise GuardFailed(f"{self.name}{self.where} raised {type(exc).__name__}: {exc}") from exc
        leaves, tree = pytree.flatten(result)
        out = tuple(np.asarray(leaf) for leaf in leaves) + (tuple(given) if self.writes else ())
        if self.dummy:
            out += (np.zeros(0, np.bool_),)
        if self._expected is None:
            self._expected = [(a.shape, np.dtype(a.dtype)) for a in self.avals]
        if tree != self.out_tree or [(a.shape, a.dtype) for a in out] != self._expected:
            raise GuardFailed(f"{self.name}{self.where} returned {_describe(out)}; traced with "
                              f"{', '.join(str(a) for a in self.avals)}")
        return out

    def __repr__(self):
        return f"<{self.name}{self.where}>"


# NumPy functions that write into an argument, or call code of the caller's
# that could (a callback given views of an argument).
_NUMPY_WRITERS = frozenset({"copyto", "fill_diagonal", "place", "put", "putmask", "put_along_axis", "shuffle",
                            "apply_along_axis", "apply_over_axes", "piecewise", "vectorize", "frompyfunc"})


def reads_only(fn, kwargs: dict) -> bool:
    """Whether ``fn`` is a NumPy function that never writes into its arguments
    (``overwrite_input=True``: median, percentile, quantile and their nan forms may).
    Other calls get read-only views, which is how a write is caught; but NumPy's
    C functions copy a read-only input before reading it (``np.bincount`` of
    two read-only arrays took 3.8 ms, of the arrays themselves 1.4 ms)."""
    module = getattr(fn, "__module__", None) or ""
    return (module == "numpy" or (module.startswith("numpy.") and not module.startswith("numpy.random"))) \
        and getattr(fn, "__name__", None) not in _NUMPY_WRITERS and "out" not in kwargs \
        and not kwargs.get("overwrite_input") and not isinstance(fn, (type, np.vectorize))


def _flat_call(treedef):
    """(number of positional arguments, keyword names) of a call's ``(args, kwargs)``
    treedef where every argument is a leaf, else None."""
    if treedef[0] != "tuple" or len(treedef[2]) != 2:
        return None
    args, kwargs = treedef[2]
    if args[0] != "tuple" or kwargs[0] != "dict" or kwargs[3] is not None or kwargs[4] is not None:
        return None
    if any(c != pytree.LEAF for c in args[2] + kwargs[2]):
        return None
    return args[1], kwargs[1]


def _read_only(a):
    view = np.asarray(a).view()
    view.flags.writeable = False
    return view


def is_read_only_write(exc: BaseException) -> bool:
    """Whether ``exc`` is NumPy refusing a write into a read-only array."""
    return isinstance(exc, ValueError) and "read-only" in str(exc)


def _describe(values) -> str:
    return ", ".join(f"{a.dtype}{list(a.shape)}" for a in values)


def _host_call_abstract(*avals, **params):
    raise AssertionError("host_call nodes get their avals from running the call while tracing")


def _host_call_impl(*arrays, call):
    return call.run(arrays)


def _composite_abstract(*avals, **params):
    raise AssertionError("composite nodes get their avals from tracing the body")


def _composite_impl(*args, composite, attrs):
    return composite.fn(*args, **dict(attrs))


def _pick_abstract(x, *, index):
    return x[index]


def _pick_impl(x, *, index):
    return x[index]


declare("composite", "call", abstract=_composite_abstract, impl=_composite_impl)
declare("pick", "call", abstract=_pick_abstract, impl=_pick_impl)
declare("host_call", "call", abstract=_host_call_abstract, impl=_host_call_impl)


def _rolled_abstract(dst, *leaves, spec, table, consts=None):
    if spec.arrayless:  # (a stepped loop storing nothing: the last values; ``dst`` is the first)
        return spec.carried
    if spec.carried:  # (a stepped loop: the array and the last values)
        return (dst, *leaves[:len(spec.carried)])
    if spec.lockstep:  # (several arrays updated in lockstep: the tuple of them)
        return (dst, *leaves[:len(spec.lockstep)])
    return dst


def _rolled_impl(dst, *leaves, spec, table, consts=None):
    if spec.arrayless:
        return spec.run(None, (dst, *leaves), table, consts)
    if spec.carried:
        return spec.run(np.array(dst, copy=True), leaves, table, consts)
    if spec.lockstep:
        n = len(spec.lockstep)
        dsts = tuple(np.array(d, copy=True) for d in (dst, *leaves[:n]))
        return spec.run(dsts, leaves[n:], table, consts)
    return spec.run(np.array(dst, copy=True), leaves, table, consts)


def _rolled_inplace(dst, *leaves, spec, table, consts=None):
    if spec.lockstep or spec.carried:  # (its result is a tuple: cpu_memory never plans it in place)
        return _rolled_impl(dst, *leaves, spec=spec, table=table, consts=consts)
    leaves = tuple(np.array(leaf) if is_ndarray(leaf) and np.may_share_memory(dst, leaf) else leaf
                   for leaf in leaves)  # (a leaf sharing memory with dst reads it as it was)
    return spec.run(dst, leaves, table, consts)


# A loop's iterations re-rolled (``braze.reroll``): ``spec`` runs them over ``table``.
declare("rolled", "call", abstract=_rolled_abstract, impl=_rolled_impl, inplace=_rolled_inplace)
