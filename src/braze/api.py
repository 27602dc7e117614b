"""``braze.compile``, ``braze.trace`` and the compiled-function object.

A call is split into its cache key and dynamic leaves by ``braze.calling``;
a miss builds a program with ``braze.pipeline`` (trace, passes, selection,
lowering) and keeps it in the function's cache; a hit runs the stored
executable. Results are finished as NumPy returns them (``calling.finish``).
"""
from __future__ import annotations

import contextlib
import functools
import weakref
from typing import Any, Callable, NamedTuple

import numpy as np

from . import calling, distributed, paired, pipeline, pytree, registry
from .core import EagerContext, current_context
from .errors import BrazeError, DTypeError, GuardFailed, ShapeError, UnsupportedOpError, where
from .graph import Graph
from .log import logger
from .pipeline import DEFAULT_CACHE_SIZE, CacheInfo, Lowered, Program
from .sideeffects import SideEffectError, stale
from .aval import is_ndarray
from .targets import resolve

# Times one call signature may be traced again because a value it was
# specialized on at a graph break changed; past it, that signature runs as NumPy.
MAX_RESPECIALIZATIONS = 8


def _same_items(d: dict, items: tuple) -> bool:
    """Whether dict ``d`` still holds the very objects ``items`` recorded (a
    keyword-only default set in place: ``fn.__kwdefaults__["by"] = 2.0``)."""
    return len(d) == len(items) and all(d.get(k, _same_items) is v for k, v in items)


class Compiled:
    """A function compiled for a target. Call it like the original."""

    def __init__(self, fn, target, static_argnums=(), static_argnames=(), donate_argnums=(),
                 cache_size=DEFAULT_CACHE_SIZE, fullgraph=False):
        if not callable(fn):
            raise BrazeError(f"braze.compile needs a function, got {type(fn).__name__}{where()}")
        self.fn = fn
        self.target = resolve(target)
        functools.update_wrapper(self, fn, updated=())  # never copy fn.__dict__ over our own
        if not hasattr(self, "__name__"):  # a functools.partial, a callable object
            inner = getattr(fn, "func", fn)
            self.__name__ = getattr(inner, "__name__", type(inner).__name__)
            self.__qualname__ = getattr(inner, "__qualname__", self.__name__)
        self.signature = calling.Signature(fn, self.__name__, self.target, static_argnums, static_argnames,
                                           donate_argnums)
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 1:
            raise BrazeError(f"braze.compile: cache_size must be a positive integer, got {cache_size!r}{where()}")
        self.cache_size = cache_size
        self.fullgraph = bool(fullgraph)
        self._eager_keys: set = set()  # call keys re-specialized past MAX_RESPECIALIZATIONS: run as NumPy
        self._eager_kinds: set = set()  # keys whose static random generators count by type (_kind_of): NumPy
        self._numpy_arguments: set = set()  # why arguments made calls run as NumPy (each said once)
        self._changed_state: set = set()  # call keys whose trace changed Python state once (run as NumPy)
        self._programs = pipeline.Cache(self.__name__, cache_size, self._refresh, on_evict=self._forget_fast)
        self._pairs = pipeline.Cache(f"{self.__name__}.vjp", cache_size, paired.refresh)
        self._fast: dict[tuple, tuple] = {}
        self._last_call: calling.Call | None = None
        _COMPILED.add(self)

    # ---- calling
    def __call__(self, *args, **kwargs):
        # Fast path: flat arguments (arrays, numbers, strings) whose kinds were seen
        fast = self._fast.get(self.signature.fast_key(args, kwargs)) if self._fast else None
        if (fast is not None and type(current_context()) is EagerContext
                and getattr(self.fn, "__defaults__", None) is fast.defaults
                and getattr(self.fn, "__kwdefaults__", None) is fast.kwdefaults
                and (fast.kwdefaults is None or _same_items(fast.kwdefaults, fast.kwdefault_items))
                and fast.program.registry_version == registry.VERSION[0] and not registry.disabled_state()
                and (not fast.program.pins or stale(fast.program.pins, fast.program.contents,
                                                    fast.program.shapes) is None)):
            program = fast.program
            dynamic = [args[j] if k == 0 else kwargs[j] if k == 1 else j for k, j in fast.sources]
            if fast.arrays and not calling.distinct_owners([dynamic[i] for i in fast.arrays]):
                pass  # (arrays sharing memory: the slow path plans their aliases)
            elif fast.reads_captures and _updates_a_capture(program, dynamic):
                return self.fn(*args, **kwargs)  # (an argument updated is a global it reads, as below)
            else:
                self._programs.info.hits += 1
                self._programs.peek(program.key)
                try:
                    try:
                        return fast.run(dynamic)
                    except GuardFailed as exc:  # (a graph break's guard: traced again, as the slow path would)
                        call = self.signature.split(args, kwargs)
                        with self._unproven_dropped_on_error(call.key):
                            return self._run_guarded(program, call, args, kwargs, failed=str(exc))
                except _RUNTIME_ERRORS as exc:
                    return self._as_numpy_after_error(program, exc, args, kwargs)
        if not isinstance(current_context(), EagerContext):
            return self.fn(*args, **kwargs)  # inside another trace or under a gradient tape: inline
        if distributed.has_dask_arrays(args, kwargs):  # Dask arrays in, Dask arrays out (braze.distributed)
            return distributed.call(self, args, kwargs)
        try:
            call = self.signature.split(args, kwargs)
        except UnsupportedOpError as exc:  # an argument braze does not trace (a complex or a string array)
            if self.fullgraph:
                raise
            said = str(exc).replace(where(), "")  # (said once, wherever the call is)
            if said not in self._numpy_arguments:
                self._numpy_arguments.add(said)
                logger.warning("%s; calls with such an argument run as plain NumPy", exc)
            return self.fn(*args, **kwargs)
        if call.key in self._eager_keys or (self._eager_kinds and _kind_of(call.key) in self._eager_kinds):
            return self.fn(*args, **kwargs)
        program = self._program(call)
        if program is None:  # (its state changes: runs as NumPy)
            return self.fn(*args, **kwargs)
        if _reads_what_it_updates(program) and _updates_a_capture(program, call.dynamic):
            return self.fn(*args, **kwargs)  # (an argument updated is a global it reads: NumPy's order)
        fast_key = self.signature.fast_key(args, kwargs) if call.sources is not None else None
        if fast_key is not None and not registry.disabled_state() and not call.aliases:
            # (with the defaults it binds: ``fn.__defaults__ = (5,)`` since is another call)
            arrays = tuple(i for i, d in enumerate(call.dynamic) if type(d) is np.ndarray)
            kwdefaults = getattr(self.fn, "__kwdefaults__", None)
            self._fast[fast_key] = _FastEntry(self._runner(program), call.sources, program,
                                              getattr(self.fn, "__defaults__", None), kwdefaults,
                                              arrays if len(arrays) > 1 else (),
                                              None if kwdefaults is None else tuple(kwdefaults.items()),
                                              _reads_what_it_updates(program))
        with self._unproven_dropped_on_error(call.key):
            try:
                if program.breaks:
                    return self._run_guarded(program, call, args, kwargs)
                return self._run(program, call)
            except _RUNTIME_ERRORS as exc:
                return self._as_numpy_after_error(program, exc, args, kwargs)

    @contextlib.contextmanager
    def _unproven_dropped_on_error(self, key):
        """Where a call raises, the program cached for its key is forgotten unless
        it has run once (``np.zeros(int(s))`` re-specialized on s = -1.5 raises
        NumPy's ValueError at every run: kept, it would fail every later call,
        whatever its guards would say). The next call traces again."""
        try:
            yield
        except Exception:
            with self._programs.lock:
                program = self._programs.entries.get(key)
                if program is not None and not program.proven:
                    del self._programs.entries[key]
                    self._forget_fast(program)
            raise

    def _as_numpy_after_error(self, program: Program, error: Exception, args, kwargs):
        """A program raised what NumPy raises for these values (a singular matrix,
        an index out of range): the function runs as NumPy for this call, so that
        its own ``try: ... except LinAlgError:`` decides, as it would in NumPy (the
        trace never saw the error). Where NumPy raises too, braze's error (which
        names the op and the shapes) is raised; and where the program may have
        written into an argument already, that error without a rerun."""
        if program.mutated:
            raise error
        try:
            return self.fn(*args, **kwargs)
        except _RUNTIME_ERRORS:
            raise error from None

    def _program(self, call: calling.Call, numpy_ok: bool = True) -> Program | None:
        """The program for ``call``, traced if new; None where the function changes
        Python state, so that the call runs as NumPy (unless not ``numpy_ok``)."""
        def build():
            program, times = pipeline.build(self.fn, call, self.target, self.__name__, strict=self.fullgraph)
            pipeline.log_build(self.__name__, self.target.name, reason(), times, program.graph)
            self._last_call = call
            return program

        reason = functools.partial(calling.miss_reason, self._last_call, call)
        try:
            program = self._programs.get(call.key, build, reason)
            changed = stale(program.pins, program.contents, program.shapes) if program.pins else None
            if changed is not None:  # a global (closure variable, attribute) the trace read was rebound
                with self._programs.lock:
                    if self._programs.entries.get(call.key) is program:
                        del self._programs.entries[call.key]
                    self._forget_fast(program)
                return self._programs.get(call.key, build, lambda: f"{changed} since it was traced")
            return program
        except UnsupportedOpError as exc:
            if self.fullgraph or not numpy_ok:
                raise
            self._run_as_numpy(call, exc)
            return None

    def _run_as_numpy(self, call: calling.Call, error: UnsupportedOpError) -> None:
        """Run this call as the plain NumPy function, and from now on, unless the
        cause was state the function changed for the first time for this
        signature (lazy initialization, ``if self.W is None: self.W = ...``,
        changes state once): then the next call traces again."""
        kind = _kind_of(call.key) if isinstance(error, SideEffectError) else None
        if kind is not None and kind not in self._changed_state:
            self._changed_state.add(kind)
            self._programs.note(f"ran as NumPy once: {error}")
            logger.warning("%s; this call runs as plain NumPy (the next one is traced again)", error)
            return
        self._eager_keys.add(call.key)
        if kind is not None:  # (a new generator at each call, rng=np.random.default_rng(seed), is one kind)
            self._eager_kinds.add(kind)
        self._programs.note(f"runs as NumPy: {error}")
        logger.warning("%s; this call signature runs as plain NumPy from now on", error)

    def _refresh(self, program: Program) -> Program:
        """``program``, re-selected and re-lowered if kernels it could use changed."""
        if program.current():
            return program
        with self._programs.lock:
            if not program.current():
                pipeline.lower(program, self.target)
                self._fast.clear()
                self._programs.note("registry changed: re-selected kernels for " +
                                    ", ".join(sorted({n for n, _ in program.versions})))
        return program

    def _forget_fast(self, program: Program) -> None:
        for shapes, fast in list(self._fast.items()):
            if fast.program is program:
                self._fast.pop(shapes, None)

    def _runner(self, program: Program):
        """A closure running ``program`` on a list of arrays, with as little work as possible."""
        run, mutated, tree = program.executable.run, program.mutated, program.out_tree
        general = lambda dynamic: self._run(program, dynamic)  # noqa: E731
        if pipeline.CHECK_RESULTS or program.guards:  # (guards are checked after the run: pipeline.run)
            return general
        # (a registry change replaces program.executable and clears the fast path)
        spec = program.outputs[0] if program.outputs else None
        if (not mutated and tree == pytree.LEAF and spec is not None and spec.view is None and not spec.readonly
                and spec.perm is None and not spec.copy and spec.traced):  # (else an object the trace returned)
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

    def _run_guarded(self, program: Program, call, args, kwargs, failed: str | None = None):
        """Run a program with graph breaks; where a guard finds a value it was
        specialized on changed, trace again for this call (at most
        ``MAX_RESPECIALIZATIONS`` times per call signature, then run NumPy).
        ``failed``: the reason a run of this call just failed its guard (the fast path's)."""
        while True:
            if failed is None:
                try:
                    return self._run(program, call)
                except GuardFailed as exc:
                    reason = str(exc)
            else:
                reason, failed = failed, None
            self._forget_fast(program)  # (replaced below, or NumPy's from now)
            rebuilds = program.rebuilds + 1
            if rebuilds > MAX_RESPECIALIZATIONS:
                self._eager_keys.add(call.key)
                self._programs.note(f"re-specialized {MAX_RESPECIALIZATIONS} times ({reason}): runs as NumPy from now")
                logger.warning("%s: re-specialized %d times at graph breaks (latest: %s); this call signature "
                               "runs as plain NumPy from now on", self.__name__, MAX_RESPECIALIZATIONS, reason)
                return self.fn(*args, **kwargs)
            with self._programs.lock:
                try:
                    program, times = pipeline.build(self.fn, call, self.target, self.__name__,
                                                    strict=self.fullgraph)
                except UnsupportedOpError as exc:
                    if self.fullgraph:
                        raise
                    self._run_as_numpy(call, exc)
                    return self.fn(*args, **kwargs)
                program.rebuilds = rebuilds
                self._programs.entries[call.key] = program
                self._programs.note(f"re-specialized: {reason}")
                pipeline.log_build(self.__name__, self.target.name, f"re-specialized: {reason}", times,
                                   program.graph)

    def _run(self, program: Program, call, outs=None):
        """Run ``program`` for a ``Call`` (or a plain list of leaves that share no
        memory) and finish its results as NumPy returns them."""
        dynamic, inputs = (call.dynamic, call.inputs) if isinstance(call, calling.Call) else (call, call)
        raw = pipeline.run(program, inputs, self.__name__, self.target.name, outs)
        specs = program.outputs or [None] * program.n_out
        results = [calling.finish(o, spec, dynamic) for o, spec in zip(raw[: program.n_out], specs)]
        for k, spec in enumerate(specs):
            if spec is not None and spec.result_view is not None:
                results[k] = calling.view_of(results[spec.result_view[0]], spec.result_view[1], results[k], spec)
        program.proven = True
        return pytree.unflatten(program.out_tree, results)

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
            c = self.signature.split(args, kwargs)
            program = self._program(c, numpy_ok=False)
            if tree != program.out_tree or not all(is_ndarray(a) for a in leaves):
                raise BrazeError(
                    f"{self.__name__}.into: out has structure {pytree.describe(tree)} but the function "
                    f"returns {pytree.describe(program.out_tree)}{where()}; pass NumPy arrays shaped like the results"
                )
            for k, (buf, node) in enumerate(zip(leaves, program.graph.outputs)):
                want = node.aval
                if buf.shape != tuple(want.shape):
                    raise ShapeError(f"{self.__name__}.into: result {k} has shape {tuple(want.shape)} but out "
                                     f"leaf {k} has shape {buf.shape}{where()}; pass arrays shaped like the results")
                if not np.can_cast(want.dtype, buf.dtype, casting="same_kind") or not buf.flags.writeable:
                    raise DTypeError(f"{self.__name__}.into: result {k} is {want.dtype} but out leaf {k} is "
                                     f"{'a read-only ' if not buf.flags.writeable else ''}{buf.dtype}{where()}; "
                                     f"pass writeable arrays of a dtype {want.dtype} casts to (same kind)")
            if program.breaks or c.key in self._eager_keys:  # (may trace again: computed, then copied)
                value = self.fn(*args, **kwargs) if c.key in self._eager_keys else \
                    self._run_guarded(program, c, args, kwargs)
                for buf, v in zip(leaves, pytree.flatten(value)[0]):
                    np.copyto(buf, v, casting="same_kind")
                return out
            results = pipeline.run(program, c.inputs, self.__name__, self.target.name,
                                   leaves + [None] * len(program.mutated))
            for buf, value in zip(leaves, results[: program.n_out]):
                if value is not buf:
                    np.copyto(buf, value, casting="same_kind")
            return out

        return call

    def lower(self, *args, **kwargs) -> Lowered:
        """Trace (or reuse) and lower for these arguments; see ``Lowered``."""
        return Lowered(self._program(self.signature.split(args, kwargs), numpy_ok=False), self.target)

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
        call = self.signature.split(args, kwargs)
        return paired.run_vjp(self.__name__, self.target, self._pair(call), call, len(args))

    def lower_vjp(self, *args, **kwargs) -> paired.LoweredVJP:
        """Both programs of ``vjp`` for these arguments, and the residuals saved."""
        return paired.LoweredVJP(self._pair(self.signature.split(args, kwargs)), self.target)

    def _pair(self, call: calling.Call) -> paired.Pair:
        return self._pairs.get(call.key, lambda: paired.build(self.fn, call, self.target, self.__name__),
                               lambda: "first vjp call for these arguments")

    def cache_info(self) -> CacheInfo:
        return self._programs.snapshot()

    def clear_cache(self) -> None:
        with self._programs.lock:
            self._programs.clear()
            self._pairs.clear()
            self._fast.clear()
            self._last_call = None

    def __repr__(self):
        return f"<braze.compile {getattr(self.fn, '__qualname__', self.fn)} target={self.target.name}>"

    def __get__(self, obj, objtype=None):
        return self if obj is None else functools.partial(self, obj)


class _FastEntry(NamedTuple):
    """What the fast path of ``Compiled.__call__`` keeps per argument kinds."""

    run: Callable          # the program's runner, on the dynamic arguments
    sources: tuple         # where each dynamic argument comes from: (0, position) / (1, keyword) / (2, value)
    program: Program
    defaults: Any          # fn.__defaults__ when it was bound (the same object, or the slow path)
    kwdefaults: Any        # fn.__kwdefaults__ likewise
    arrays: tuple          # positions of the dynamic arrays, checked for shared memory (two or more)
    kwdefault_items: Any   # kwdefaults' items when bound (a dict changed in place is another call)
    reads_captures: bool   # it updates an argument and reads captured arrays (_updates_a_capture)


def _reads_what_it_updates(program: Program) -> bool:
    return bool(program.mutated and (program.graph.captures or program.pins))


def _updates_a_capture(program: Program, dynamic) -> bool:
    """Whether an argument the function updates in place shares memory with an
    array the program captured (``step(P, g)`` where ``step`` updates its first
    argument and reads the global ``P``): the program reads captures as they
    were before its updates are written back, where NumPy reads the updated
    memory, so such a call runs as NumPy."""
    captured = [c for c in program.graph.captures if is_ndarray(c)] + \
        [pin[2] for pin in program.pins if is_ndarray(pin[2])]  # (and arrays NumPy read while traced)
    return any(np.may_share_memory(dynamic[k], c) for k in program.mutated if is_ndarray(dynamic[k])
               for c in captured)


# Errors a program raises at a call that the function's Python may catch (see _as_numpy_after_error)
_RUNTIME_ERRORS = (np.linalg.LinAlgError, IndexError)

_COMPILED: "weakref.WeakSet[Compiled]" = weakref.WeakSet()


def cache_info() -> dict:
    """braze's caches: traced signatures of every live compiled function (in
    memory) and the CPU target's kernel cache (in memory and on disk).

    >>> import braze
    >>> sorted(braze.cache_info())[:3]
    ['cpu_kernels', 'functions', 'hits']
    """
    from .targets import cpu_cache  # (imports numba: only when asked)

    infos = [f.cache_info() for f in list(_COMPILED)]
    return {
        "functions": len(infos),
        "traces": sum(i.size for i in infos),
        "hits": sum(i.hits for i in infos),
        "misses": sum(i.misses for i in infos),
        "cpu_kernels": cpu_cache.info(),
    }


def clear_cache() -> None:
    """Forget every trace and kernel, in memory and in the on-disk kernel cache."""
    from .targets import cpu_cache, cpu_memory  # (imports numba: only when asked)

    for f in list(_COMPILED):
        f.clear_cache()
    cpu_cache.clear()
    cpu_memory.outputs.clear()


def _kind_of(key):
    """A call key with each static random generator as its type: a function
    that draws from a generator argument changes its state at any call,
    whichever generator it is given (a new one per call: the same case)."""
    if isinstance(key, tuple):
        return tuple(_kind_of(k) for k in key)
    value = getattr(key, "value", None) if isinstance(key, calling.Static) else None
    if isinstance(value, (np.random.Generator, np.random.RandomState, np.random.BitGenerator)):
        return ("random generator", type(value).__name__)
    return key


def compile(fn=None, *, target="auto", static_argnums=(), static_argnames=(), donate_argnums=(),  # noqa: A001
            cache_size=DEFAULT_CACHE_SIZE, fullgraph=False):
    """Compile a NumPy function for ``target`` ("auto", "cpu", "cuda", "generic").

    Works as ``braze.compile(fn, ...)`` and as a decorator, with or without
    arguments. ``donate_argnums`` names arguments whose arrays the caller
    gives up: braze may write results into them (as in JAX), and their
    contents are unspecified after the call. ``cache_size`` bounds the traces
    kept (one per distinct shapes, dtypes and static values); the least
    recently used is dropped beyond it, and each eviction is logged
    (``BRAZE_LOG=compile``) and counted in ``cache_info()``.

    What braze cannot trace (a NumPy or SciPy function without a rule, a
    data-dependent shape such as ``x[mask]``, ``if x.sum() > 0``, ``float(x)``)
    is a *graph break*: that step runs as called, on the values, between
    compiled regions, and the program is specialized on values Python
    branched on (a guard traces again when they change; see the README).
    ``fullgraph=True`` raises at the first break instead.

    >>> import numpy as np, braze
    >>> @braze.compile(target="generic")
    ... def f(x):
    ...     return np.tanh(x) * 2.0
    >>> f(np.zeros(3, np.float32)).dtype
    dtype('float32')
    """
    if fn is None:
        return lambda f: Compiled(f, target, static_argnums, static_argnames, donate_argnums, cache_size, fullgraph)
    return Compiled(fn, target, static_argnums, static_argnames, donate_argnums, cache_size, fullgraph)


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
