"""``braze.compile``, ``braze.trace`` and the compiled-function object.

A call splits its arguments into *static* values (Python ints, bools,
strings and other hashable non-arrays, plus whatever ``static_argnums`` /
``static_argnames`` name) and *dynamic* leaves (arrays, NumPy scalars,
Python floats). The cache key is the pytree structure, the static values,
the dynamic leaves' shapes/dtypes, and the target. A miss traces the
function once, runs the graph passes, lowers for the target and stores
the result; a hit runs the stored executable.
"""
from __future__ import annotations

import collections
import functools
import inspect
import logging
import math
import os
import time
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from . import calling, pytree
from .aval import Aval, aval_of_value, is_device_array
from .core import EagerContext, current_context
from .errors import BrazeError, ConcretizationError, DTypeError, ShapeError, TargetError, TraceError, where
from .graph import Graph
from . import registry
from .log import logger
from .passes import run_passes
from .select import select
from .tracing import trace_flat


class _Static:
    """A static leaf's value in the cache key (NaN-safe, type-exact; a slice,
    unhashable before Python 3.12, by its bounds)."""

    __slots__ = ("value", "_key")

    def __init__(self, value):
        self.value = value
        self._key = (type(value), (value.start, value.stop, value.step) if isinstance(value, slice) else value)

    def __eq__(self, other):
        return isinstance(other, _Static) and self._key == other._key

    def __hash__(self):
        return hash(self._key)

    def __repr__(self):
        return repr(self.value)


_DYNAMIC = (np.ndarray, np.generic, float, complex)


@dataclass
class CacheInfo:
    """Hits, misses and the reason for each miss of one compiled function."""

    hits: int = 0
    misses: int = 0
    size: int = 0
    reasons: list[str] = field(default_factory=list)  # the latest ``MAX_REASONS``
    evictions: int = 0


MAX_REASONS = 100
DEFAULT_CACHE_SIZE = 256  # traces kept per compiled function (compile(cache_size=...))


@dataclass
class _Entry:
    key: tuple
    graph: Graph
    stages: list
    executable: Any
    out_tree: tuple
    n_out: int
    mutated: list[int]  # dynamic-leaf indices whose arrays the function updated in place
    choices: list = field(default_factory=list)   # the selection pass's decisions
    versions: tuple = ()                          # (composite name, registry version) it depended on
    registry_version: int = 0
    donated: tuple = ()
    outputs: list = field(default_factory=list)   # an OutputSpec per result (calling.finish)


@dataclass
class _Call:
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
    aliases: Any = calling.NO_ALIASES             # leaves that share memory (calling.AliasPlan)

    @property
    def inputs(self) -> list:
        """The executable's inputs: alias buffers, then the leaves not aliased."""
        return self.aliases.inputs(self.dynamic) if self.aliases else self.dynamic


class Lowered:
    """What ``f.lower(*args)`` returns: the graph and the target's program."""

    def __init__(self, entry: _Entry, target):
        self.ir = entry.graph
        self.graph = str(entry.graph)
        self.stages = entry.stages
        sites = entry.executable.sites
        selection = "\n".join([c.describe(sites.get(c.site)) for c in entry.choices] + list(entry.graph.notes))
        self.choices = entry.choices
        self.plan = (selection + "\n\n" if selection else "") + entry.executable.plan
        self.source = entry.executable.source
        self.target = target

    def __str__(self):
        return f"{self.graph}\n\n# plan ({self.target.name})\n{self.plan}\n\n# source\n{self.source}"


class Compiled:
    """A function compiled for a target. Call it like the original."""

    def __init__(self, fn, target, static_argnums=(), static_argnames=(), donate_argnums=(),
                 cache_size=DEFAULT_CACHE_SIZE):
        from braze.targets import resolve

        if not callable(fn):
            raise BrazeError(f"braze.compile needs a function, got {type(fn).__name__}{where()}")
        self.fn = fn
        self.target = resolve(target)
        functools.update_wrapper(self, fn, updated=())  # never copy fn.__dict__ over our own
        try:
            self._sig = inspect.signature(fn)
        except (TypeError, ValueError):
            self._sig = None
        self._static_argnums = _as_tuple(static_argnums)
        self._static_argnames = _as_tuple(static_argnames)
        from .composite import Composite

        if isinstance(fn, Composite):  # a composite's attributes are static by definition
            self._static_argnames += tuple(n for n in fn.attr_names if n not in self._static_argnames)
        self._donate_argnums = _as_tuple(donate_argnums)
        self._check_argument_options()
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 1:
            raise BrazeError(f"braze.compile: cache_size must be a positive integer, got {cache_size!r}{where()}")
        self.cache_size = cache_size
        self._cache: collections.OrderedDict[tuple, _Entry] = collections.OrderedDict()  # least recent first
        self._vjp_cache: dict[tuple, Any] = {}
        self._fast: dict[tuple, tuple] = {}
        self._lock = threading.Lock()
        self._info = CacheInfo()
        self._last_call: _Call | None = None
        _COMPILED.add(self)

    def _check_argument_options(self) -> None:
        """static_argnums/static_argnames/donate_argnums must name parameters of fn."""
        if self._sig is None:
            return
        params = list(self._sig.parameters.values())
        kinds = {p.kind for p in params}
        positional = [p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                                           inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        names = {p.name for p in params if p.kind is not inspect.Parameter.VAR_POSITIONAL}
        for option, nums in (("static_argnums", self._static_argnums), ("donate_argnums", self._donate_argnums)):
            for n in nums:
                if isinstance(n, bool) or not isinstance(n, int) or n < 0 or (
                        n >= len(positional) and inspect.Parameter.VAR_POSITIONAL not in kinds):
                    raise BrazeError(
                        f"braze.compile({getattr(self.fn, '__name__', self.fn)}): {option} has {n!r}, but the "
                        f"function{self._sig} has {len(positional)} positional parameters{where()}; "
                        f"use indices 0..{len(positional) - 1}")
        if inspect.Parameter.VAR_KEYWORD not in kinds:
            for name in self._static_argnames:
                if name not in names:
                    raise BrazeError(
                        f"braze.compile({getattr(self.fn, '__name__', self.fn)}): static_argnames has {name!r}, "
                        f"which is not a parameter of {self._sig}{where()}; use one of {', '.join(sorted(names))}")

    # ---- calling
    def __call__(self, *args, **kwargs):
        if not kwargs:
            # Fast path: plain positional ndarrays whose shapes and dtypes were seen.
            try:
                fast = self._fast.get(tuple([(a.shape, a.dtype, a.strides) for a in args if type(a) is np.ndarray]))
            except AttributeError:
                fast = None
            if (fast is not None and fast[1] == len(args) and type(current_context()) is EagerContext
                    and fast[2].registry_version == registry.VERSION[0] and not registry.disabled_state()
                    and (len(args) < 2 or calling.distinct_owners(args))):
                self._info.hits += 1
                try:
                    self._cache.move_to_end(fast[2].key)
                except KeyError:  # evicted by another thread just now
                    pass
                return fast[0](list(args))
        if not isinstance(current_context(), EagerContext):
            return self.fn(*args, **kwargs)  # inside another trace or under a gradient tape: inline
        call = self._split(args, kwargs)
        entry = self._lookup(call.key)
        if entry is None:
            entry = self._compile(call)
        else:
            entry = self._fresh(entry)
            self._info.hits += 1
        if (not kwargs and len(call.dynamic) == len(args) and not registry.disabled_state() and not call.aliases
                and all(type(a) is np.ndarray and a is d for a, d in zip(args, call.dynamic))):
            self._fast[tuple((a.shape, a.dtype, a.strides) for a in args)] = (self._runner(entry), len(args), entry)
        return self._run(entry, call)

    def _runner(self, entry: _Entry):
        """A closure running ``entry`` on a list of arrays, with as little work as possible."""
        run, mutated, tree = entry.executable.run, entry.mutated, entry.out_tree
        general = lambda dynamic: self._run(entry, dynamic)  # noqa: E731
        if CHECK_RESULTS:
            return general
        # (a registry change replaces entry.executable and clears the fast path)
        spec = entry.outputs[0] if entry.outputs else None
        if (not mutated and tree == pytree.LEAF and spec is not None and spec.view is None and not spec.readonly
                and spec.perm is None):
            finish = calling.finish

            c_order = spec.c_order

            def single(dynamic):
                out = run(dynamic)[0]
                if type(out) is np.ndarray and out.ndim:
                    flags = out.flags
                    if flags.writeable and (flags.c_contiguous or not c_order):
                        return out
                return finish(out, spec, dynamic)
            return single
        return general

    def _run(self, entry: _Entry, call, outs=None):
        """Run ``entry`` for a ``_Call`` (or a plain list of leaves that share no
        memory) and finish its results as NumPy returns them."""
        dynamic, inputs = (call.dynamic, call.inputs) if isinstance(call, _Call) else (call, call)
        raw = self._run_raw(entry, inputs, outs)
        specs = entry.outputs or [None] * entry.n_out
        results = [calling.finish(o, spec, dynamic) for o, spec in zip(raw[: entry.n_out], specs)]
        return pytree.unflatten(entry.out_tree, results)

    def into(self, out):
        """A callable that runs this function writing its results into ``out``
        (an array, or a pytree of arrays shaped like the results), and returns
        ``out``. Kernels write straight into arrays that fit (C-contiguous,
        right shape and dtype, not overlapping an input); others are copied.

        >>> import numpy as np, braze
        >>> f = braze.compile(lambda x: x * 2.0, target="generic")
        >>> buf = np.empty(3)
        >>> f.into(buf)(np.ones(3)) is buf
        True
        """
        leaves, tree = pytree.flatten(out)

        def call(*args, **kwargs):
            c = self._split(args, kwargs)
            entry = self._lookup(c.key)
            entry = self._fresh(entry) if entry is not None else self._compile(c)
            if tree != entry.out_tree or not all(isinstance(a, np.ndarray) for a in leaves):
                raise BrazeError(
                    f"{self.__name__}.into: out has structure {pytree.describe(tree)} but the function "
                    f"returns {pytree.describe(entry.out_tree)}{where()}; pass NumPy arrays shaped like the results"
                )
            for k, (buf, node) in enumerate(zip(leaves, entry.graph.outputs)):
                want = node.aval
                if buf.shape != tuple(want.shape):
                    raise ShapeError(f"{self.__name__}.into: result {k} has shape {tuple(want.shape)} but out "
                                     f"leaf {k} has shape {buf.shape}{where()}; pass arrays shaped like the results")
                if not np.can_cast(want.dtype, buf.dtype, casting="same_kind") or not buf.flags.writeable:
                    raise DTypeError(f"{self.__name__}.into: result {k} is {want.dtype} but out leaf {k} is "
                                     f"{'a read-only ' if not buf.flags.writeable else ''}{buf.dtype}{where()}; "
                                     f"pass writeable arrays of a dtype {want.dtype} casts to (same kind)")
            results = self._run_raw(entry, c.inputs, leaves + [None] * len(entry.mutated))
            for buf, value in zip(leaves, results[: entry.n_out]):
                if value is not buf:
                    np.copyto(buf, value, casting="same_kind")
            return out

        return call

    def _run_raw(self, entry: _Entry, dynamic: list, outs=None):
        """Run ``entry``; write back inputs the function updated in place; return the raw results."""
        for leaf in entry.mutated:
            target = dynamic[leaf]
            if isinstance(target, np.ndarray) and not target.flags.writeable:
                name = entry.graph.input_names[leaf]
                raise BrazeError(f"{self.__name__}: the function writes into argument {name} in place, but the "
                                 f"array passed is read-only{where()}; pass a writeable copy (np.array(...)) or "
                                 "return a new array instead of updating it")
        results = entry.executable.run(dynamic) if outs is None else entry.executable.run(dynamic, outs)
        if CHECK_RESULTS:
            check_results(self.__name__, self.target.name, entry.graph, results)
        for leaf, value in zip(entry.mutated, results[entry.n_out:]):
            target = dynamic[leaf]
            if isinstance(target, np.ndarray) and value is not target:
                np.copyto(target, value, casting="unsafe")
            elif hasattr(value, "copy_to_host") and value is not target:
                _write_device(target, value)  # an input updated in place on the device
        return results

    def lower(self, *args, **kwargs) -> Lowered:
        """Trace (or reuse) and lower for these arguments; see ``Lowered``."""
        call = self._split(args, kwargs)
        entry = self._lookup(call.key)
        entry = self._fresh(entry) if entry is not None else self._compile(call)
        return Lowered(entry, self.target)

    # ---- paired forward / backward
    def vjp(self, *args, **kwargs):
        """``(out, vjp_fn)``: run the compiled *forward* program now, which returns
        the results and saves the residuals the backward needs; ``vjp_fn(ct)``
        runs the compiled *backward* program on them and a cotangent shaped
        like ``out``, and returns one cotangent per positional argument (with
        its structure; None for integer and static leaves).

        >>> import numpy as np, braze
        >>> f = braze.compile(lambda x: np.sum(np.tanh(x)), target="generic")
        >>> out, back = f.vjp(np.zeros(3))
        >>> back(1.0)
        (array([1., 1., 1.]),)
        """
        from .paired import run_vjp

        return run_vjp(self, args, kwargs)

    def lower_vjp(self, *args, **kwargs) -> "LoweredVJP":
        """Both programs of ``vjp`` for these arguments, and the residuals saved."""
        from .paired import lower_vjp

        return lower_vjp(self, args, kwargs)

    def cache_info(self) -> CacheInfo:
        info = self._info
        return CacheInfo(info.hits, info.misses, len(self._cache), list(info.reasons), info.evictions)

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()
            self._vjp_cache.clear()
            self._fast.clear()
            self._info = CacheInfo()
            self._last_call = None

    def __repr__(self):
        return f"<braze.compile {getattr(self.fn, '__qualname__', self.fn)} target={self.target.name}>"

    def __get__(self, obj, objtype=None):
        return self if obj is None else functools.partial(self, obj)

    # ---- arguments
    def _split(self, args, kwargs) -> _Call:
        if self._sig is not None:
            try:
                bound = self._sig.bind(*args, **kwargs)
            except TypeError as exc:
                raise BrazeError(f"{self.__name__}{self._sig}: {exc}{where()}; call it with the arguments "
                                 f"of that signature ({len(args)} positional given"
                                 + (f", keywords {', '.join(kwargs)}" if kwargs else "") + ")") from None
            bound.apply_defaults()
            items = list(bound.arguments.items())
            kinds = {p.name: p.kind for p in self._sig.parameters.values()}
        else:
            items = [(f"arg{i}", a) for i, a in enumerate(args)] + list(kwargs.items())
            kinds = {}
        key_parts, dynamic, avals, names, statics, donated, specs = [], [], [], [], [], [], []
        odd = []
        for position, (name, value) in enumerate(items):
            if position in self._static_argnums or name in self._static_argnames:
                static = _static_value(name, value)
                key_parts.append(("static", name, static))
                statics.append((name, value))
                continue
            if value is None or isinstance(value, (str, bytes)) or (
                    isinstance(value, (list, tuple)) and any(
                        isinstance(v, (int, float, complex, list)) for v in value)):  # data given as a list
                odd.append((name, value))
            leaves, treedef = pytree.flatten(value)
            paths = _leaf_paths(name, value)
            leaf_kinds = []
            donate = position in self._donate_argnums
            for path, leaf in zip(paths, leaves):
                if _is_dynamic(leaf):
                    if is_device_array(leaf) and self.target.name != "cuda":
                        raise TargetError(
                            f"{self.__name__}: argument {path} is a GPU array, but this function is compiled "
                            f"for target {self.target.name!r}{where()}; compile it with target='cuda', or "
                            "copy the array to the host first (.copy_to_host(), .get(), .cpu().numpy())")
                    aval = aval_of_value(leaf, f"argument {path}")
                    if donate:
                        donated.append(len(dynamic))
                    lkey = calling.leaf_key(leaf, aval)
                    specs.append(calling.input_spec(leaf, aval, lkey))
                    dynamic.append(leaf)
                    avals.append(aval)
                    names.append(path)
                    leaf_kinds.append(lkey)
                else:
                    static = _static_value(path, leaf)
                    leaf_kinds.append(("static", static))
                    statics.append((path, leaf))
            key_parts.append((name, treedef, tuple(leaf_kinds)))
        aliases = calling.plan_aliases(dynamic, names)
        if aliases:
            donated = []  # donation only lets braze reuse memory; with shared memory it may not
        key = (tuple(key_parts), self.target.cache_key(), registry.disabled_state(), aliases.key)

        def rebuild(tracers):
            it = iter(tracers)
            pos, kw = [], {}
            for position, (name, value) in enumerate(items):
                if not (position in self._static_argnums or name in self._static_argnames):
                    leaves, treedef = pytree.flatten(value)
                    leaves = [next(it) if _is_dynamic(leaf) else leaf for leaf in leaves]
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

        return _Call(key, dynamic, avals, names, statics, rebuild, tuple(donated), tuple(odd), specs, aliases)

    # ---- tracing and lowering
    def _compile(self, call: _Call) -> _Entry:
        with self._lock:
            entry = self._cache.get(call.key)
            if entry is not None:  # another thread finished it while we waited
                self._info.hits += 1
                return entry
            out_tree = []

            def flat_fn(*tracers):
                pos, kw = call.rebuild(tracers)
                leaves, treedef = pytree.flatten(self.fn(*pos, **kw))
                out_tree.append(treedef)
                return leaves

            reason = self._miss_reason(call)
            t0 = time.perf_counter()
            try:
                taken = {m[0] for g in call.aliases.groups for m in g[2]} | set(call.aliases.same)
                input_names = [f"alias{k}" for k in range(len(call.aliases.groups))] + \
                    [n for i, n in enumerate(call.names) if i not in taken]
                traced = trace_flat(flat_fn, call.avals, input_names, target=self.target.name,
                                    specs=call.aliases.specs(call.specs), buffers=call.aliases.buffers())
                graph, mutated = traced.graph, traced.mutated
            except (TypeError, ValueError, AttributeError, ConcretizationError) as exc:
                if not call.odd or (isinstance(exc, BrazeError) and not isinstance(exc, ConcretizationError)):
                    raise
                name, value = call.odd[0]
                shown = repr(value) if len(repr(value)) < 60 else repr(value)[:57] + "..."
                kind = type(value).__name__
                advice = (f"a {kind} is a pytree whose elements are traced one by one; pass "
                          f"np.asarray({name}), a NumPy array" if isinstance(value, (list, tuple)) else
                          f"pass a NumPy array, or declare {name} static (static_argnames=({name!r},)) "
                          "if it is a setting")
                raise TraceError(
                    f"{self.__name__}: tracing failed ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); "
                    f"argument {name} is {shown} ({kind}), not an array{where()}. braze traces array "
                    f"arguments: {advice}") from exc
            n_out = len(graph.outputs) - len(mutated)
            t1 = time.perf_counter()
            graph, stages = run_passes(graph, keep_stages=True)
            t2 = time.perf_counter()
            entry = _Entry(call.key, graph, stages, None, out_tree[0], n_out, mutated, donated=call.donated,
                           outputs=traced.outputs)
            self._select_and_lower(entry)
            t3 = time.perf_counter()
            if logger.isEnabledFor(logging.INFO):
                logger.info("%s: traced for %s (%s): trace %.1f ms, passes %.1f ms, select+lower %.1f ms, "
                            "%d nodes", self.__name__, self.target.name, reason, (t1 - t0) * 1e3,
                            (t2 - t1) * 1e3, (t3 - t2) * 1e3, len(graph.nodes))
            self._info.reasons.append(reason)
            del self._info.reasons[:-MAX_REASONS]
            self._info.misses += 1
            self._cache[call.key] = entry
            self._last_call = call
            while len(self._cache) > self.cache_size:
                self._evict()
            return entry

    def _lookup(self, key) -> _Entry | None:
        entry = self._cache.get(key)
        if entry is not None:
            try:
                self._cache.move_to_end(key)
            except KeyError:  # evicted by another thread just now: still usable for this call
                pass
        return entry

    def _evict(self) -> None:
        """Drop the least recently used trace (called with the lock held)."""
        key, entry = self._cache.popitem(last=False)
        self._vjp_cache.pop(key, None)
        for shapes, fast in list(self._fast.items()):
            if fast[2] is entry:
                self._fast.pop(shapes, None)
        self._info.evictions += 1
        logger.info("%s: evicted the least recently used trace (%s) to keep %d (compile(cache_size=...)); "
                    "%d evictions so far: many distinct shapes or static values retrace",
                    self.__name__, ", ".join(str(a) for a in entry.graph.inputs) or "no array inputs",
                    self.cache_size, self._info.evictions)

    def _select_and_lower(self, entry: _Entry) -> None:
        version = registry.VERSION[0]
        selected, choices = select(entry.graph, self.target.name)
        entry.choices = choices
        entry.versions = tuple(sorted({(c.name, registry.version(c.name)) for c in choices}))
        entry.registry_version = version
        entry.executable = self.target.lower(selected, donated=frozenset(entry.donated),
                                             mutable=frozenset(entry.mutated))

    def _fresh(self, entry: _Entry) -> _Entry:
        """``entry``, re-selected and re-lowered if kernels it could use changed."""
        if entry.registry_version == registry.VERSION[0]:
            return entry
        if all(registry.version(name) == v for name, v in entry.versions):
            entry.registry_version = registry.VERSION[0]
            return entry
        with self._lock:
            self._select_and_lower(entry)
            self._fast.clear()
            self._info.reasons.append("registry changed: re-selected kernels for " +
                                      ", ".join(sorted({n for n, _ in entry.versions})))
        return entry

    def _miss_reason(self, call: _Call) -> str:
        last = self._last_call
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


_COMPILED: "weakref.WeakSet[Compiled]" = weakref.WeakSet()

# When set (BRAZE_CHECK_RESULTS=1; the test suite sets it), every call checks
# that each raw result has the shape and dtype of the graph's output aval: a
# target that disagrees with the graph is a braze bug, caught where it happens.
CHECK_RESULTS = os.environ.get("BRAZE_CHECK_RESULTS") == "1"


def check_results(name: str, target: str, graph: Graph, results) -> None:
    """Each raw result has the shape and dtype of the graph's output aval (CHECK_RESULTS)."""
    for k, (value, node) in enumerate(zip(results, graph.outputs)):
        want = node.aval
        dtype = np.dtype(getattr(value, "dtype", None) or np.asarray(value).dtype)
        shape = tuple(getattr(value, "shape", np.shape(value)))
        if dtype != want.dtype or shape != tuple(want.shape):
            raise AssertionError(
                f"braze internal error: {name} on target {target} returned "
                f"{dtype}{list(shape)} for output {k}, whose graph aval is {want}")


def cache_info() -> dict:
    """braze's caches: traced signatures of every live compiled function (in
    memory) and the CPU target's kernel cache (in memory and on disk).

    >>> import braze
    >>> sorted(braze.cache_info())[:3]
    ['cpu_kernels', 'functions', 'hits']
    """
    infos = [f.cache_info() for f in list(_COMPILED)]
    from braze.targets import cpu_cache

    return {
        "functions": len(infos),
        "traces": sum(i.size for i in infos),
        "hits": sum(i.hits for i in infos),
        "misses": sum(i.misses for i in infos),
        "cpu_kernels": cpu_cache.info(),
    }


def clear_cache() -> None:
    """Forget every trace and kernel, in memory and in the on-disk kernel cache."""
    for f in list(_COMPILED):
        f.clear_cache()
    from braze.targets import cpu_cache, cpu_memory

    cpu_cache.clear()
    cpu_memory.outputs.clear()


def _same(a, b) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


def _is_dynamic(leaf) -> bool:
    return isinstance(leaf, _DYNAMIC) or is_device_array(leaf)


def _static_value(name: str, value) -> _Static:
    try:
        hash(value if not isinstance(value, slice) else (value.start, value.stop, value.step))
    except TypeError:
        raise BrazeError(
            f"static argument {name} = {value!r:.60} is not hashable{where()}; static arguments "
            "are part of the cache key: pass a tuple instead of a list, or make it a traced "
            "array (remove it from static_argnums)"
        ) from None
    if isinstance(value, float) and math.isnan(value):
        raise BrazeError(
            f"static argument {name} is NaN{where()}; NaN != NaN, so it could never hit the "
            "cache: pass it as a traced value instead"
        )
    return _Static(value)


def _leaf_paths(name: str, value) -> list[str]:
    paths: list[str] = []
    _walk_paths(value, name, paths)
    return paths


def _walk_paths(node, path: str, paths: list) -> None:  # not a closure: no reference cycle per call
    if node is None:
        return
    if isinstance(node, tuple) and hasattr(node, "_fields"):
        for f, c in zip(node._fields, node):
            _walk_paths(c, f"{path}.{f}", paths)
    elif isinstance(node, (tuple, list)):
        for i, c in enumerate(node):
            _walk_paths(c, f"{path}[{i}]", paths)
    elif isinstance(node, dict):
        for k in pytree._sorted_keys(node):
            _walk_paths(node[k], f"{path}[{k!r}]", paths)
    else:
        paths.append(path)


def _write_device(target, value) -> None:
    """Copy device result ``value`` into the caller's device array ``target``."""
    from numba import cuda

    dst = target if hasattr(target, "copy_to_device") else cuda.as_cuda_array(target)
    dst.copy_to_device(value)


def _finish(value):
    """Outputs as NumPy returns them: 0-d results as NumPy scalars, never read-only."""
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return value[()]
        if not value.flags.writeable:
            return value.copy()
        return value
    if isinstance(value, np.generic):
        return value
    if hasattr(value, "copy_to_host"):  # a device array (the cuda target, given device inputs)
        return value
    return np.asarray(value)[()]


def _as_tuple(x) -> tuple:
    if x is None:
        return ()
    if isinstance(x, (int, str)):
        return (x,)
    return tuple(x)


def compile(fn=None, *, target="auto", static_argnums=(), static_argnames=(), donate_argnums=(),  # noqa: A001
            cache_size=DEFAULT_CACHE_SIZE):
    """Compile a NumPy function for ``target`` ("auto", "cpu", "cuda", "generic").

    Works as ``braze.compile(fn, ...)`` and as a decorator, with or without
    arguments. ``donate_argnums`` names arguments whose arrays the caller
    gives up: braze may write results into them (as in JAX), and their
    contents are unspecified after the call. ``cache_size`` bounds the traces
    kept (one per distinct shapes, dtypes and static values); the least
    recently used is dropped beyond it, and each eviction is logged
    (``BRAZE_LOG=compile``) and counted in ``cache_info()``.

    >>> import numpy as np, braze
    >>> @braze.compile(target="generic")
    ... def f(x):
    ...     return np.tanh(x) * 2.0
    >>> f(np.zeros(3, np.float32)).dtype
    dtype('float32')
    """
    if fn is None:
        return lambda f: Compiled(f, target, static_argnums, static_argnames, donate_argnums, cache_size)
    return Compiled(fn, target, static_argnums, static_argnames, donate_argnums, cache_size)


def trace(fn, *args, static_argnums=(), static_argnames=(), **kwargs) -> Graph:
    """The graph of ``fn`` for these arguments (after the graph passes), like a jaxpr.

    >>> import numpy as np, braze
    >>> print(braze.trace(lambda x: x + 1.0, np.zeros(2)))
    graph(%x: f64[2]) {
      %0: f64[2] = add %x, 1.0
      return %0
    }
    """
    compiled = Compiled(fn, "generic", static_argnums, static_argnames)
    return compiled.lower(*args, **kwargs).ir
