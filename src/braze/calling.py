"""The calling convention: how a call's arrays enter a trace and results leave it.

* **Layouts and scalars.** Each array argument's element strides (when not C
  order) and whether it is a NumPy scalar are part of the cache key: NumPy's
  view-or-copy choices and ``s ** 0.5`` depend on them (``braze.tracing``).
* **Aliasing.** Arguments that share memory (``f(a, a)``, ``f(a[1:],
  a[:-1])``) must behave as in NumPy: a write through one is seen through
  the other. ``plan_aliases`` finds them (cheaply: one memory owner per
  argument; exact overlap only where owners coincide), and the trace gets
  them as views of one flat *alias buffer* spanning their memory (or the
  same tracer twice when the very same array is passed twice). The alias
  pattern (offsets and strides within the buffer) is part of the cache key.
* **Finishing.** A result comes back as NumPy returns it: a NumPy scalar or
  a 0-d array, read-only where NumPy's is (``broadcast_to``), and, when
  NumPy's result is a view of an argument, that view of the caller's array.
"""
from __future__ import annotations

import numpy as np

from . import layout
from .aval import Aval
from .errors import BrazeError, where
from .tracing import InputSpec, OutputSpec


class AliasError(BrazeError, ValueError):
    """Arguments share memory in a way braze cannot trace (different dtypes)."""


def leaf_key(value, aval: Aval) -> tuple:
    """The cache-key part of one dynamic leaf: shape, dtype, weak type, NumPy
    scalar or array, and strides when not C order."""
    scalar = isinstance(value, (np.generic, bool, int, float, complex))
    strides = None
    if isinstance(value, np.ndarray) and value.ndim and not value.flags.c_contiguous:
        strides = layout.of_array(value)
    return (aval.shape, aval.dtype.str, aval.weak, scalar, strides)


def input_spec(value, aval: Aval, key: tuple) -> InputSpec:
    strides = key[4]
    if strides is None and isinstance(value, np.ndarray):
        strides = layout.c_strides(aval.shape)
    return InputSpec(aval, strides=strides, scalar=key[3])


# ---------------------------------------------------------------- aliasing


def _owner(a: np.ndarray):
    """The object owning ``a``'s memory (NumPy collapses chains of views)."""
    return a if a.base is None else a.base


def distinct_owners(arrays) -> bool:
    """The per-call fast check: no two arrays have the same memory owner."""
    seen = set()
    for a in arrays:
        k = id(a if a.base is None else a.base)
        if k in seen:
            return False
        seen.add(k)
    return True


def _extent(a: np.ndarray) -> tuple[int, int]:
    """[first byte, last byte + 1) of the memory ``a`` addresses."""
    start = a.__array_interface__["data"][0]
    lo = hi = start
    for d, s in zip(a.shape, a.strides):
        if d == 0:
            return start, start
        if s < 0:
            lo += (d - 1) * s
        else:
            hi += (d - 1) * s
    return lo, hi + a.itemsize


class AliasPlan:
    """Which flat leaves share memory, and how the trace and each call see them.

    ``groups``: per alias buffer, the member leaves with (offset, strides) in
    elements and the buffer length; ``same``: leaf -> the earlier leaf that is
    the very same array. ``key`` describes both (part of the cache key).
    """

    __slots__ = ("groups", "same", "key")

    def __init__(self, groups, same):
        self.groups = groups  # [(dtype, n, [(leaf, offset, strides), ...]), ...]
        self.same = same      # {leaf: earlier leaf}
        self.key = (tuple((g[0].str, g[1], tuple(m for m in g[2])) for g in groups), tuple(sorted(same.items())))

    def __bool__(self):
        return bool(self.groups or self.same)

    def buffers(self) -> list[Aval]:
        return [Aval((n,), dtype) for dtype, n, _ in self.groups]

    def specs(self, specs: list[InputSpec]) -> list[InputSpec]:
        """The argument specs with aliased members marked."""
        specs = list(specs)
        for k, (_, _, members) in enumerate(self.groups):
            for leaf, offset, strides in members:
                s = specs[leaf]
                specs[leaf] = InputSpec(s.aval, strides=s.strides, scalar=s.scalar, alias=(k, offset, strides))
        for leaf, first in self.same.items():
            specs[leaf] = InputSpec(specs[leaf].aval, same=first)
        return specs

    def inputs(self, leaves: list) -> list:
        """The executable's inputs for a call: the alias buffers (views spanning
        the members' memory), then every leaf that is not aliased."""
        out = []
        for dtype, n, members in self.groups:
            first_leaf, first_offset, _ = members[0]
            out.append(_buffer_view(leaves[first_leaf], first_offset, n))
        taken = {m[0] for g in self.groups for m in g[2]} | set(self.same)
        out.extend(leaf for i, leaf in enumerate(leaves) if i not in taken)
        return out


NO_ALIASES = AliasPlan([], {})


def _buffer_view(member: np.ndarray, offset: int, n: int) -> np.ndarray:
    """A flat array of ``n`` elements over the memory that starts ``offset``
    elements before ``member``'s element (0, ..., 0), keeping ``member`` alive."""

    class _Memory:
        pass

    memory = _Memory()
    start = member.__array_interface__["data"][0] - offset * member.itemsize
    memory.__array_interface__ = {"data": (start, not member.flags.writeable), "shape": (n,),
                                  "typestr": member.dtype.str, "version": 3}
    memory.owner = member
    return np.asarray(memory)


def plan_aliases(leaves: list, names: list[str]) -> AliasPlan:
    """Find arguments that share memory (exactly); see ``AliasPlan``."""
    arrays = [(i, a) for i, a in enumerate(leaves) if type(a) is np.ndarray and a.size]
    if len(arrays) < 2 or distinct_owners(a for _, a in arrays):
        return NO_ALIASES
    parent = {i: i for i, _ in arrays}

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    by_owner: dict[int, list] = {}
    for i, a in arrays:
        by_owner.setdefault(id(_owner(a)), []).append((i, a))
    same: dict[int, int] = {}
    for members in by_owner.values():
        for x in range(len(members)):
            for y in range(x):
                (i, a), (j, b) = members[x], members[y]
                if a is b:
                    if i not in same:
                        same[i] = j if j not in same else same[j]
                    continue
                if np.may_share_memory(a, b) and np.shares_memory(a, b):
                    parent[find(i)] = find(j)
    groups_by_root: dict[int, list] = {}
    for i, a in arrays:
        if i in same:
            continue
        groups_by_root.setdefault(find(i), []).append((i, a))
    groups = []
    for members in groups_by_root.values():
        if len(members) < 2:
            continue
        dtypes = {a.dtype for _, a in members}
        item = members[0][1].itemsize
        extents = {i: _extent(a) for i, a in members}
        lo = min(e[0] for e in extents.values())
        hi = max(e[1] for e in extents.values())
        bad = len(dtypes) > 1 or any(s % item for _, a in members for s in a.strides) or \
            any((a.__array_interface__["data"][0] - lo) % item for _, a in members)
        if bad:
            shown = ", ".join(f"{names[i]} ({a.dtype}, strides {a.strides})" for i, a in members)
            raise AliasError(
                f"arguments {shown} share memory with different dtypes or unaligned strides{where()}; "
                "braze traces arguments that share memory as views of one buffer of one dtype: "
                "pass a copy of one of them (np.array(x))")
        spec = [(i, (a.__array_interface__["data"][0] - lo) // item, tuple(s // item for s in a.strides))
                for i, a in sorted(members)]
        groups.append((members[0][1].dtype, (hi - lo) // item, spec))
    groups.sort(key=lambda g: g[2][0][0])
    return AliasPlan(groups, same)


# ---------------------------------------------------------------- results


def finish(value, spec: OutputSpec | None, leaves: list):
    """One result as NumPy returns it (see the module docstring)."""
    if spec is not None and spec.const is not None:
        return spec.const
    if spec is not None and spec.python is not None:
        return spec.python(np.asarray(value)[()])
    if spec is not None and spec.view is not None:
        from .core import NUMPY_IMPL

        k, ops = spec.view
        value = leaves[k]
        for op, params in ops:
            value = NUMPY_IMPL[op](value, **params)
        if spec.scalar and isinstance(value, np.ndarray) and value.ndim == 0:
            return value[()]
        return value
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return value[()] if spec is None or spec.scalar else value.copy()
        if spec is not None and spec.readonly:
            if value.flags.writeable:
                value = value.view()
                value.flags.writeable = False
            return value
        perm = spec.perm if spec is not None else None
        if perm is not None and value.size > 1 and not value.transpose(perm).flags.c_contiguous:
            # NumPy's order='K': a new array dense in its inputs' memory order (Fortran, say)
            return np.ascontiguousarray(value.transpose(perm)).transpose(np.argsort(perm))
        if not value.flags.writeable or (spec is not None and spec.c_order and not value.flags.c_contiguous):
            return np.array(value, order="C" if perm is None else "K")
        return value
    if isinstance(value, np.generic):
        if spec is not None and not spec.scalar:
            return np.array(value)
        return value
    if hasattr(value, "copy_to_host"):  # a device array (the cuda target, given device inputs)
        return value
    value = np.asarray(value)
    return value[()] if spec is None or spec.scalar else value
