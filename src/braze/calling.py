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
  Arguments the function updated in place are written back.

``Signature.split`` turns one call's arguments into a ``Call``: *static*
values (Python ints, bools, strings and other hashable non-arrays, plus
whatever ``static_argnums`` / ``static_argnames`` name) and *dynamic* leaves
(arrays, NumPy scalars, Python floats). The cache key is the pytree
structure, the static values, each dynamic leaf's ``leaf_key``, the target
and the alias pattern.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from . import layout, pytree, registry
from .aval import Aval, aval_of_value, is_device_array, is_ndarray
from .composite import Composite
from .core import NUMPY_IMPL
from .errors import BrazeError, TargetError, where
from .tracing import InputSpec, OutputSpec
from .views import ReadOnlyError


class AliasError(BrazeError, ValueError):
    """Arguments share memory in a way braze cannot trace (different dtypes)."""


def leaf_key(value, aval: Aval) -> tuple:
    """The cache-key part of one dynamic leaf: shape, dtype, weak type, NumPy
    scalar or array, and strides when not C order."""
    scalar = isinstance(value, (np.generic, bool, int, float, complex))
    strides = None
    if is_ndarray(value) and value.ndim and not value.flags.c_contiguous:
        strides = layout.of_array(value)
    return (aval.shape, aval.dtype.str, aval.weak, scalar, strides)


def input_spec(value, aval: Aval, key: tuple) -> InputSpec:
    strides = key[4]
    if strides is None and is_ndarray(value):
        strides = layout.c_strides(aval.shape)
    return InputSpec(aval, strides=strides, scalar=key[3])


# ---------------------------------------------------------------- aliasing


def _owner(a: np.ndarray):
    """The array owning ``a``'s memory (NumPy collapses chains of views to it),
    or None where the memory comes from something else: a memoryview, a
    buffer, ``as_strided``'s stand-in (``sliding_window_view``), an mmap.
    Arrays with different owners share no memory; others may share it with
    any array."""
    if a.base is None:
        return a
    base = a.base
    return base if type(base) is np.ndarray and base.base is None else None


def distinct_owners(arrays) -> bool:
    """The per-call fast check: no two arrays have the same memory owner, and
    each has one (else ``plan_aliases`` compares their memory)."""
    seen = set()
    for a in arrays:
        base = a.base
        if base is not None and (type(base) is not np.ndarray or base.base is not None):
            return False
        k = id(a if base is None else base)
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
    foreign = []  # (arrays whose memory no array owns: compared with every other one)
    for i, a in arrays:
        owner = _owner(a)
        if owner is None:
            foreign.append((i, a))
        else:
            by_owner.setdefault(id(owner), []).append((i, a))
    same: dict[int, int] = {}
    pairs = [(members[x], members[y]) for members in by_owner.values() for x in range(len(members))
             for y in range(x)]
    strays = {i for i, _ in foreign}
    pairs += [((i, a), (j, b)) for i, a in foreign for j, b in arrays if j != i and (j not in strays or j < i)]
    for (i, a), (j, b) in pairs:
        if i < j:
            (i, a), (j, b) = (j, b), (i, a)
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


def view_of(base, ops, value, spec: OutputSpec):
    """Result ``value`` as NumPy returns it when it is a view (``ops``) of
    another result, ``base``: that view of ``base`` (so a write into one is
    seen in the other), or ``value`` where ``base`` is no array."""
    if not is_ndarray(base):
        return value
    for op, params in ops:
        base = NUMPY_IMPL[op](base, **params)
    if spec.scalar and base.ndim == 0:
        return base[()]
    return base


def finish(value, spec: OutputSpec | None, leaves: list):
    """One result as NumPy returns it (see the module docstring)."""
    if spec is not None and spec.const is not None:
        return spec.const
    if spec is not None and spec.fresh:
        return np.array(value, copy=True)
    if spec is not None and spec.python is not None:
        return spec.python(np.asarray(value)[()])
    if spec is not None and spec.view is not None:
        k, ops = spec.view
        value = leaves[k]
        for op, params in ops:
            value = NUMPY_IMPL[op](value, **params)
        if spec.scalar and is_ndarray(value) and value.ndim == 0:
            return value[()]
        return value
    if is_ndarray(value):
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


def write_back(mutated: list[int], inputs: list, values: list) -> None:
    """Copy the new values of arguments the function updated in place into
    them. A new value that is (a view of) another argument written here
    (``b[:] = a; a[:] = 0``: b's new value is the caller's ``a`` as it came
    in) is copied before any is written."""
    if len(mutated) > 1:
        targets = [inputs[leaf] for leaf in mutated]
        values = [_apart(v) if any(t is not inputs[leaf] and _may_share(v, t) for t in targets) else v
                  for leaf, v in zip(mutated, values)]
    for leaf, value in zip(mutated, values):
        target = inputs[leaf]
        if is_ndarray(target) and value is not target:
            np.copyto(target, value, casting="unsafe")
        elif value is not target and (hasattr(value, "copy_to_host") or hasattr(target, "copy_to_device")
                                      or hasattr(target, "__cuda_array_interface__")):
            _write_device(target, value)  # an input updated in place on the device


def _may_share(a, b) -> bool:
    """Whether arrays ``a`` and ``b`` (host, or device: by their address ranges;
    numba's CUDA simulator's arrays hold a host array) may overlap."""
    a, b = getattr(a, "_ary", a), getattr(b, "_ary", b)
    if is_ndarray(a) and is_ndarray(b):
        return np.may_share_memory(a, b)
    ia, ib = getattr(a, "__cuda_array_interface__", None), getattr(b, "__cuda_array_interface__", None)
    if ia is None or ib is None:
        return False
    (pa, _), (pb, _) = ia["data"], ib["data"]
    na, nb = getattr(a, "nbytes", 0), getattr(b, "nbytes", 0)
    return pa < pb + nb and pb < pa + na


def _apart(value):
    """A copy of ``value`` that no argument's write can change (a device value comes to the host)."""
    return value.copy_to_host() if hasattr(value, "copy_to_host") else np.array(value, copy=True)


def check_writeable(mutated: list[int], inputs: list, names: list[str], fn_name: str) -> None:
    for leaf in mutated:
        target = inputs[leaf]
        if is_ndarray(target) and not target.flags.writeable:
            raise ReadOnlyError(f"{fn_name}: the function writes into argument {names[leaf]} in place, but the "
                                f"array passed is read-only{where()}; pass a writeable copy (np.array(...)) or "
                                "return a new array instead of updating it")  # (NumPy's ValueError)


def _write_device(target, value) -> None:
    """Copy device result ``value`` into the caller's device array ``target``."""
    from numba import cuda  # (only reached with device arrays: numba-cuda is installed)

    dst = target if hasattr(target, "copy_to_device") else cuda.as_cuda_array(target)
    dst.copy_to_device(value)


# ---------------------------------------------------------------- arguments


def _exact_key(value):
    """``value`` as a key equal only to a value the function cannot tell from
    it: type-exact inside containers too (``(2,)`` and ``(2.0,)`` hash and
    compare equal, but ``x_int8 * t[0]`` is int8 for one and float64 for the
    other), floats by their bits (``0.0 == -0.0``, but ``1 / (x * s)`` is inf
    for one and -inf for the other; NaN equal to itself), a slice (unhashable
    before Python 3.12) by its bounds."""
    if isinstance(value, (tuple, list, frozenset)):
        items = tuple(_exact_key(v) for v in value)
        return (type(value), frozenset(items) if isinstance(value, frozenset) else items)
    if isinstance(value, (float, np.floating)):
        return (type(value), float(value).hex())
    if isinstance(value, slice):
        return (slice, _exact_key((value.start, value.stop, value.step)))
    return (type(value), value)


class Static:
    """A static leaf's value in the cache key (type- and bit-exact: ``_exact_key``)."""

    __slots__ = ("value", "_key")

    def __init__(self, value):
        self.value = value
        self._key = _exact_key(value)

    def __eq__(self, other):
        return isinstance(other, Static) and self._key == other._key

    def __hash__(self):
        return hash(self._key)

    def __repr__(self):
        return repr(self.value)


_DYNAMIC = (np.generic, float, complex)  # and NumPy arrays (is_ndarray)


def is_dynamic(leaf) -> bool:
    return is_ndarray(leaf) or isinstance(leaf, _DYNAMIC) or is_device_array(leaf)


def static_value(name: str, value) -> Static:
    try:
        hash(value if not isinstance(value, slice) else (value.start, value.stop, value.step))
    except TypeError:
        raise BrazeError(
            f"static argument {name} = {value!r:.60} is not hashable{where()}; static arguments "
            "are part of the cache key: pass a tuple instead of a list, or make it a traced "
            "array (remove it from static_argnums)"
        ) from None
    return Static(value)  # (keyed by its bits: a NaN hits the cache, -0.0 is not 0.0)


@functools.lru_cache(maxsize=512)
def _leaf_paths(name: str, treedef: tuple) -> tuple[str, ...]:
    """A readable path per leaf of a pytree (``params['w']``, ``xs[2]``), from its
    treedef (the same for every call with that structure: computed once), iteratively."""
    paths: list[str] = []
    stack = [(treedef, name)]
    while stack:
        td, path = stack.pop()
        kind = td[0]
        if kind == "*":
            paths.append(path)
        elif kind == "namedtuple":
            stack.extend(reversed([(c, f"{path}.{f}") for f, c in zip(td[1]._fields, td[2])]))
        elif kind in ("tuple", "list"):
            stack.extend(reversed([(c, f"{path}[{i}]") for i, c in enumerate(td[2])]))
        elif kind == "dict":
            stack.extend(reversed([(c, f"{path}[{k!r}]") for k, c in zip(td[1], td[2])]))
        elif kind == "dataclass":
            stack.extend(reversed([(c, f"{path}.{f}") for f, c in zip(td[3], td[2])]))
    return tuple(paths)


@dataclass
class Call:
    """One call's arguments, split into the cache key and the dynamic leaves."""

    key: tuple
    dynamic: list
    avals: list[Aval]
    names: list[str]
    statics: list[tuple[str, Any]]
    rebuild: Callable
    donated: tuple = ()
    odd: tuple = ()  # (name, value) of arguments that are None or strings without being declared static
    specs: list = field(default_factory=list)     # an InputSpec per dynamic leaf
    aliases: Any = NO_ALIASES                     # leaves that share memory (AliasPlan)
    sources: tuple | None = None                  # where each dynamic leaf came from (Signature.fast_key)

    @property
    def inputs(self) -> list:
        """The executable's inputs: alias buffers, then the leaves not aliased."""
        return self.aliases.inputs(self.dynamic) if self.aliases else self.dynamic

    def positional(self, per_leaf: list, n_args: int) -> tuple:
        """Values per dynamic leaf rebuilt into the structure of the first
        ``n_args`` positional arguments (None for static leaves)."""
        pos, _ = self.rebuild([_Slot(i) for i in range(len(per_leaf))])
        fill = lambda leaf: per_leaf[leaf.index] if isinstance(leaf, _Slot) else None  # noqa: E731
        return tuple(pytree.map_leaves(fill, p) for p in pos[:n_args])


class _Slot:
    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


def _as_tuple(x) -> tuple:
    if x is None:
        return ()
    if isinstance(x, (int, str)):
        return (x,)
    return tuple(x)


def _defaults_of(fn) -> tuple:
    """``fn``'s default values as bound now: its ``__defaults__`` tuple and a
    copy of its keyword-only defaults."""
    kw = getattr(fn, "__kwdefaults__", None)
    return getattr(fn, "__defaults__", None), (dict(kw) if kw else None), kw


def _same_defaults(saved: tuple, fn) -> bool:
    kw = getattr(fn, "__kwdefaults__", None)
    return getattr(fn, "__defaults__", None) is saved[0] and kw is saved[2] and (
        not kw or (kw.keys() == saved[1].keys() and all(kw[k] is saved[1][k] for k in kw)))


class Signature:
    """How a compiled function's arguments are split (``split``): its Python
    signature, which arguments are static and which are donated."""

    def __init__(self, fn, name: str, target, static_argnums=(), static_argnames=(), donate_argnums=()):
        self.fn, self.name, self.target = fn, name, target
        try:
            self.sig = inspect.signature(fn)
        except (TypeError, ValueError):
            self.sig = None
        self._defaults = _defaults_of(fn)
        self.static_argnums = _as_tuple(static_argnums)
        self.static_argnames = _as_tuple(static_argnames)
        if isinstance(fn, Composite):  # a composite's attributes are static by definition
            self.static_argnames += tuple(n for n in fn.attr_names if n not in self.static_argnames)
        self.donate_argnums = _as_tuple(donate_argnums)
        self._check_options()
        self._static_positions, self._static_names = self._statics_by_place()

    def _statics_by_place(self) -> tuple:
        """(positions, names) of the static parameters, for ``fast_key``; None
        where a call's places do not tell (``*args``, no signature)."""
        if self.sig is None or any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in self.sig.parameters.values()):
            return None, None
        positional = [p.name for p in self.sig.parameters.values()
                      if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        positions = set(self.static_argnums) | {i for i, n in enumerate(positional) if n in self.static_argnames}
        names = set(self.static_argnames) | {positional[i] for i in self.static_argnums if i < len(positional)}
        return frozenset(positions), frozenset(names)

    def fast_key(self, args, kwargs) -> tuple | None:
        """The key of a call whose arguments are all flat (arrays, Python and
        NumPy numbers, strings, None) for the compiled function's fast path: its
        arrays' shapes, dtypes and strides, its numbers' types, its other
        values themselves. None for any other call (pytrees, static numbers)."""
        positions = self._static_positions
        parts = []
        for i, a in enumerate(args):
            t = type(a)
            if t is np.ndarray:
                parts.append((a.shape, a.dtype, a.strides))
            elif t is int or t is bool or t is str or a is None:
                parts.append((t, a))
            elif (t is float or isinstance(a, np.generic)) and positions is not None and i not in positions:
                parts.append(t)
            else:
                return None
        if kwargs:
            names = self._static_names
            for k, a in kwargs.items():
                t = type(a)
                if t is np.ndarray:
                    parts.append((k, a.shape, a.dtype, a.strides))
                elif t is int or t is bool or t is str or a is None:
                    parts.append((k, t, a))
                elif (t is float or isinstance(a, np.generic)) and names is not None and k not in names:
                    parts.append((k, t))
                else:
                    return None
        return tuple(parts)

    def _check_options(self) -> None:
        """static_argnums/static_argnames/donate_argnums must name parameters of fn."""
        if self.sig is None:
            return
        params = list(self.sig.parameters.values())
        kinds = {p.kind for p in params}
        positional = [p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                                           inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        names = {p.name for p in params if p.kind is not inspect.Parameter.VAR_POSITIONAL}
        fname = getattr(self.fn, "__name__", self.fn)
        for option, nums in (("static_argnums", self.static_argnums), ("donate_argnums", self.donate_argnums)):
            for n in nums:
                if isinstance(n, bool) or not isinstance(n, int) or n < 0 or (
                        n >= len(positional) and inspect.Parameter.VAR_POSITIONAL not in kinds):
                    raise BrazeError(
                        f"braze.compile({fname}): {option} has {n!r}, but the function{self.sig} has "
                        f"{len(positional)} positional parameters{where()}; use indices 0..{len(positional) - 1}")
        if inspect.Parameter.VAR_KEYWORD not in kinds:
            for name in self.static_argnames:
                if name not in names:
                    raise BrazeError(
                        f"braze.compile({fname}): static_argnames has {name!r}, which is not a parameter of "
                        f"{self.sig}{where()}; use one of {', '.join(sorted(names))}")

    def split(self, args, kwargs) -> Call:
        if self.sig is not None and not _same_defaults(self._defaults, self.fn):
            # (``fn.__defaults__ = (5,)`` since: the signature binds the new ones)
            self.sig, self._defaults = inspect.signature(self.fn), _defaults_of(self.fn)
        if self.sig is not None:
            try:
                bound = self.sig.bind(*args, **kwargs)
            except TypeError as exc:
                raise BrazeError(f"{self.name}{self.sig}: {exc}{where()}; call it with the arguments "
                                 f"of that signature ({len(args)} positional given"
                                 + (f", keywords {', '.join(kwargs)}" if kwargs else "") + ")") from None
            if not isinstance(self.fn, np.ufunc):  # (a ufunc refuses its own defaults: dtype= with signature=)
                bound.apply_defaults()
            items = list(bound.arguments.items())
            kinds = {p.name: p.kind for p in self.sig.parameters.values()}
        else:
            items = [(f"arg{i}", a) for i, a in enumerate(args)] + list(kwargs.items())
            kinds = {}
        key_parts, dynamic, avals, names, statics, donated, specs = [], [], [], [], [], [], []
        odd = []
        sources: list | None = []  # per dynamic leaf: (0, position) / (1, keyword) / (2, default value)
        target = self.target.name
        for position, (name, value) in enumerate(items):
            if position in self.static_argnums or name in self.static_argnames:
                key_parts.append(("static", name, static_value(name, value)))
                statics.append((name, value))
                continue
            if value is None or isinstance(value, (str, bytes)) or (
                    isinstance(value, (list, tuple)) and any(
                        isinstance(v, (int, float, complex, list)) for v in value)):  # data given as a list
                odd.append((name, value))
            leaves, treedef = pytree.flatten(value)
            paths = _leaf_paths(name, treedef)
            leaf_kinds = []
            donate = position in self.donate_argnums
            for path, leaf in zip(paths, leaves):
                if is_dynamic(leaf):
                    if is_device_array(leaf) and target != "cuda":
                        raise TargetError(
                            f"{self.name}: argument {path} is a GPU array, but this function is compiled "
                            f"for target {target!r}{where()}; compile it with target='cuda', or "
                            "copy the array to the host first (.copy_to_host(), .get(), .cpu().numpy())")
                    aval = aval_of_value(leaf, f"argument {path}")
                    if sources is not None:
                        if leaf is not value:  # (inside a pytree: the slow path's)
                            sources = None
                        elif name in kwargs:
                            sources.append((1, name))
                        elif position < len(args) and kinds.get(name, inspect.Parameter.POSITIONAL_ONLY) in (
                                inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
                            sources.append((0, position))
                        else:
                            sources.append((2, value))
                    if donate:
                        donated.append(len(dynamic))
                    lkey = leaf_key(leaf, aval)
                    specs.append(input_spec(leaf, aval, lkey))
                    dynamic.append(leaf)
                    avals.append(aval)
                    names.append(path)
                    leaf_kinds.append(lkey)
                else:
                    leaf_kinds.append(("static", static_value(path, leaf)))
                    statics.append((path, leaf))
            key_parts.append((name, treedef, tuple(leaf_kinds)))
        aliases = plan_aliases(dynamic, names)
        if aliases:
            donated = []  # donation only lets braze reuse memory; with shared memory it may not
        key = (tuple(key_parts), self.target.cache_key(), registry.disabled_state(), aliases.key)
        static_argnums, static_argnames = self.static_argnums, self.static_argnames

        def rebuild(tracers):
            it = iter(tracers)
            pos, kw = [], {}
            for position, (name, value) in enumerate(items):
                if not (position in static_argnums or name in static_argnames):
                    leaves, treedef = pytree.flatten(value)
                    leaves = [next(it) if is_dynamic(leaf) else leaf for leaf in leaves]
                    value = pytree.unflatten(treedef, leaves)
                kind = kinds.get(name)
                if kind is inspect.Parameter.VAR_POSITIONAL:
                    pos.extend(value)
                elif kind is inspect.Parameter.VAR_KEYWORD:
                    kw.update(value)
                elif kind is inspect.Parameter.KEYWORD_ONLY or (not kinds and not name.startswith("arg")):
                    kw[name] = value
                else:
                    pos.append(value)
            return pos, kw

        return Call(key, dynamic, avals, names, statics, rebuild, tuple(donated), tuple(odd), specs, aliases,
                    None if sources is None else tuple(sources))


def miss_reason(last: Call | None, call: Call) -> str:
    """Why ``call`` missed the cache, compared with the previous miss ``last``."""
    if last is None:
        return "first call"
    if [p[:2] for p in last.key[0]] != [p[:2] for p in call.key[0]]:
        return "new structure: the arguments' pytree structure changed"
    if last.statics != call.statics and [n for n, _ in last.statics] == [n for n, _ in call.statics]:
        diffs = [f"{n}={v!r} (was {w!r})" for (n, v), (_, w) in zip(call.statics, last.statics) if not _same(v, w)]
        if diffs:
            return "new static value: " + ", ".join(diffs)
    for name, new, old in zip(call.names, call.avals, last.avals):
        if new.dtype != old.dtype or new.weak != old.weak:
            return f"new dtype: argument {name} {new} (was {old})"
    for name, new, old in zip(call.names, call.avals, last.avals):
        if new.shape != old.shape:
            return f"new shape: argument {name} {new} (was {old})"
    if len(call.avals) != len(last.avals):
        return "new structure: a different number of array arguments"
    return "new static value"


def _same(a, b) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False
