"""The compile pipeline, and the caches that keep what it builds.

    trace (tracing) -> passes -> select (registry) -> target.lower
                                                     (compiling targets: fused(): inline, passes, fuse;
                                                      then their own code generation)

``build`` runs it for one call of a function and returns a ``Program``;
``lower`` runs the back half for a graph already traced (the paired
forward/backward programs); ``fused`` is the front of every compiling
target's ``lower``. A ``Cache`` keeps programs by call key (least recently
used dropped beyond its size). One invalidation rule serves every cached
program: it records the registry version of each composite name it
depended on, and is re-selected and re-lowered (or, for a trace that chose
kernels itself, rebuilt) when one of those changes.
"""
from __future__ import annotations

import collections
import functools
import logging
import math
import operator
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from . import calling, pytree, registry, sideeffects
from .aval import is_ndarray
from .errors import (BrazeError, ConcretizationError, GuardFailed, TraceAttributeError, TraceError, TraceTypeError,
                     TraceValueError, UnsupportedOpError, where)
from .fusion import Program as Fused
from .fusion import fuse
from .fusion import unfused as one_step_per_op
from .core import PRIMITIVES, current_context
from .graph import Graph, Node, collector_paused
from .log import logger
from .passes import inline_composites, run_passes, small_contractions
from .reroll import reroll
from .select import select
from .sideeffects import SideEffectError
from .tracing import trace_flat
from .views import is_view_op

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


# ---------------------------------------------------------------- programs


@dataclass
class Program:
    """One lowered graph and what the caller needs to run it."""

    key: tuple
    graph: Graph
    stages: list
    executable: Any
    out_tree: tuple
    n_out: int
    mutated: list[int]  # dynamic-leaf indices whose arrays the function updated in place
    choices: list = field(default_factory=list)   # the selection pass's decisions
    versions: tuple = ()                          # (composite name, registry version) selection depended on
    registry_version: int = 0
    donated: tuple = ()
    outputs: list = field(default_factory=list)   # an OutputSpec per result (calling.finish)
    times: dict = field(default_factory=dict)     # seconds per compile stage (trace, passes, fuse, ...)
    guards: list = field(default_factory=list)    # (value traced with, what) per guard output (graph breaks)
    breaks: bool = False                          # graph breaks: guards or calls run between regions
    rebuilds: int = 0                             # re-specializations of this call key so far
    pins: tuple = ()                              # names whose values the trace read (sideeffects.stale)
    contents: tuple = ()                          # arrays whose values it holds what NumPy computed of
    shapes: tuple = ()                            # lists, dicts, attribute sets it read (sideeffects.stale)
    proven: bool = False                          # it has run once without an error (api: else dropped on one)
    flags: tuple | None = None                    # (positions, values) of the 0-d bool/int guards (check_guards)

    def current(self) -> bool:
        """Whether no kernel registration since lowering could change the selection."""
        if self.registry_version == registry.VERSION[0]:
            return True
        if all(registry.version(name) == v for name, v in self.versions):
            self.registry_version = registry.VERSION[0]
            return True
        return False


def lower(program: Program, target) -> Program:
    """Select kernels for ``program.graph`` and lower it for ``target`` (in place)."""
    version = registry.VERSION[0]
    selected, choices = select(program.graph, target.name)
    program.choices = choices
    program.versions = tuple(sorted({(c.name, registry.version(c.name)) for c in choices}))
    program.registry_version = version
    # A program with graph breaks may find at a guard that it must be traced again
    # and rerun: it never writes into its arguments before it has finished.
    program.executable = target.lower(selected, donated=frozenset(() if program.breaks else program.donated),
                                      mutable=frozenset(() if program.breaks else _updatable(program, selected)))
    return program


def _updatable(program: Program, graph: Graph) -> list[int]:
    """The mutated inputs a target may update in place: not one a result holds
    a value of from before its last update (``x[0] = 5; y = x.copy(); x[1] = 7;
    return y``: y is x's first update, which in place would be x's memory, and
    the second update, written back into x, would show through y)."""
    n_out = program.n_out
    results = set()
    for node in graph.outputs[:n_out]:
        while is_view_op(node.op):
            node = node.inputs[0]
        results.add(id(node))
    keep = []
    for j, i in enumerate(program.mutated):
        node, earlier = graph.outputs[n_out + j], False
        while node.op != "input" and node.inputs and PRIMITIVES[node.op].inplace is not None and not earlier:
            node = node.inputs[0]
            earlier = node.op != "input" and id(node) in results  # (the input itself: the plan sees it)
        if not earlier:
            keep.append(i)
    return keep


def lower_graph(graph: Graph, target, out_tree=pytree.LEAF, n_out: int | None = None) -> Program:
    """A program for a graph already traced (passes, selection, lowering)."""
    with collector_paused():
        graph, stages = run_passes(graph)
        n = len(graph.outputs) if n_out is None else n_out
        return lower(Program((), graph, stages, None, out_tree, n, []), target)


def build(fn: Callable, call: calling.Call, target, name: str, strict: bool = False) -> tuple[Program, dict]:
    """Trace ``fn`` for ``call``, run the passes, select and lower; the
    program and the time each stage took (seconds). Tracing sees the call's
    values, so what it cannot trace becomes a graph break (unless ``strict``)."""
    with collector_paused():
        return _build(fn, call, target, name, strict)


def _build(fn: Callable, call: calling.Call, target, name: str, strict: bool) -> tuple[Program, dict]:
    out_tree, pins = [], []

    def flat_fn(*tracers):
        pos, kw = call.rebuild(tracers)
        raising = sorted(k for k, v in np.geterr().items() if v in ("raise", "call"))
        if raising:
            raise SideEffectError(f"np.seterr asks NumPy to raise on floating-point errors ({', '.join(raising)}), "
                                  f"which compiled kernels do not check; {name} runs as plain NumPy")
        watch = sideeffects.Watch(fn, pos, kw)
        current_context().known = watch.seen
        try:
            result = fn(*pos, **kw)
        except BaseException:
            if watch.changes():
                watch.restore()
            raise
        pins.append((watch.pins(), watch))
        changes = watch.changes()
        if changes:
            whole = watch.restore()
            raise SideEffectError(
                f"{name} {'; '.join(changes)} while it is traced: a compiled program repeats the array "
                "computation at each call, not that" +
                ("" if whole else " (the array was too big to copy and keeps what the trace wrote into it)") +
                f"{where()}; it runs as plain NumPy instead (return the new values, or pass the state as "
                "arguments, to compile it)")
        leaves, treedef = pytree.flatten(result)
        out_tree.append(treedef)
        return leaves

    t0 = time.perf_counter()
    try:
        taken = {m[0] for g in call.aliases.groups for m in g[2]} | set(call.aliases.same)
        input_names = [f"alias{k}" for k in range(len(call.aliases.groups))] + \
            [n for i, n in enumerate(call.names) if i not in taken]
        traced = trace_flat(flat_fn, call.avals, input_names, target=target.name,
                            specs=call.aliases.specs(call.specs), buffers=call.aliases.buffers(),
                            concrete=list(call.inputs), strict=strict)
    except (TypeError, ValueError, AttributeError, ConcretizationError) as exc:
        if not call.odd or (isinstance(exc, BrazeError) and not isinstance(exc, ConcretizationError)):
            raise
        raise _odd_argument_error(name, call, exc) from exc
    t1 = time.perf_counter()
    graph, stages = run_passes(traced.graph, keep_stages=True)
    t2 = time.perf_counter()
    _refuse_mostly_calls(graph, name)
    n_out = len(graph.outputs) - len(traced.mutated) - len(traced.guards)
    _mark_shared_results(graph.outputs[:n_out], traced.outputs, graph.outputs[n_out:n_out + len(traced.mutated)])
    program = Program(call.key, graph, stages, None, out_tree[0], n_out, traced.mutated, donated=call.donated,
                      outputs=traced.outputs, guards=traced.guards,
                      breaks=bool(traced.guards) or any(n.op == "host_call" for n in graph.nodes))
    if pins:
        program.pins, watch = pins[-1]
        program.shapes = watch.shapes()
        if any(id(a) not in watch.seen for a in traced.graph.captures) or any(
                n.op == "const" and type(n.kw["value"].value) not in (bool, int, float) for n in traced.graph.nodes):
            # an array or NumPy scalar NumPy computed while traced (not a tracer's op:
            # 0.5 * W, G.sum()) may come from a global's values: the program holds
            # it, so it checks at each call that they still hold
            program.contents = watch.contents()
        else:
            program.contents = watch.contents(small_only=True,
                                              captured=frozenset(id(a) for a in traced.graph.captures))
    lower(program, target)
    t3 = time.perf_counter()
    program.times = {"trace": t1 - t0, "passes": t2 - t1, "lower": t3 - t2, **program.executable.times}
    return program, program.times


# A program of more graph breaks than this, making up at least 1/CALL_SHARE of its
# ops, runs as the plain NumPy function: a loop calling SciPy per column.
MAX_HOST_CALLS = 256
CALL_SHARE = 16


def _refuse_mostly_calls(graph: Graph, name: str) -> None:
    """Refuse (UnsupportedOpError: the call signature runs as NumPy) a program
    that is mostly calls braze runs as called: each is a step of its own
    between kernels, with its arguments and results checked, and thousands of
    them (``lapack.dgtsv`` per water column) ran 10x slower than the loop in
    NumPy, which the compiled parts around them cannot win back."""
    calls, ops = 0, 0
    for node in graph.nodes:
        if node.op == "host_call":
            calls += 1
        if node.op not in ("input", "const", "capture", "pick"):
            ops += 1
    if calls > MAX_HOST_CALLS and calls * CALL_SHARE >= ops:
        first = next((n.kw["call"] for n in graph.nodes if n.op == "host_call"), None)
        raise UnsupportedOpError(
            f"{name} makes {calls} calls braze runs as called (graph breaks such as {first.name}{first.where}; "
            f"more than {MAX_HOST_CALLS}, among {ops} ops): a compiled program would run them one by one "
            "between its kernels, slower than NumPy runs the loop; so it runs as plain NumPy (to compile "
            "it, give braze the loop's work in whole arrays)")


def _mark_shared_results(outputs: list[Node], specs: list, written: list[Node] = ()) -> None:
    """A traced result that is not a view of an argument in NumPy but whose
    node is an argument, a capture or a constant, or the value an argument
    updated in place ends with (or a view of one: ``a.copy()`` is ``a`` in a
    graph of values, and ``x[0] = 5; return x.copy()`` the update a target
    may run in the caller's array) is copied at each call, after the arguments
    are written back: a new array, as NumPy's, never the caller's memory, a
    global's, or the constant another call returns."""
    results: dict[int, int] = {}
    finals = {id(n) for n in written}
    for i, (node, spec) in enumerate(zip(outputs, specs)):
        if spec is None or not spec.traced or spec.view is not None:
            continue
        if results.setdefault(id(node), i) != i and spec.same is None:
            spec.copy = True  # two results NumPy made apart (x * 2, x * 2), one node: a copy for the later
            continue
        while is_view_op(node.op):
            node = node.inputs[0]
        spec.copy = node.op in ("input", "capture", "const") or id(node) in finals


def _odd_argument_error(name: str, call: calling.Call, exc: Exception) -> TraceError:
    """Tracing failed and an argument was data that is not an array: say so, in
    an error that is also NumPy's class (np.percentile(x, 150.0, method=m) is a
    ValueError whatever m is: the caller's `except ValueError` must catch it)."""
    arg, value = call.odd[0]
    shown = repr(value) if len(repr(value)) < 60 else repr(value)[:57] + "..."
    kind = type(value).__name__
    advice = (f"a {kind} is a pytree whose elements are traced one by one; pass "
              f"np.asarray({arg}), a NumPy array" if isinstance(value, (list, tuple)) else
              f"pass a NumPy array, or declare {arg} static (static_argnames=({arg!r},)) "
              "if it is a setting")
    cls = next((c for base, c in ((ValueError, TraceValueError), (TypeError, TraceTypeError),
                                  (AttributeError, TraceAttributeError)) if isinstance(exc, base)), TraceError)
    return cls(
        f"{name}: tracing failed ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); "
        f"argument {arg} is {shown} ({kind}), not an array{where()}. braze traces array "
        f"arguments: {advice}")


def fused(graph: Graph, record: dict | None = None, compact: bool = False, roll=None) -> Fused:
    """The front half of a compiling target's ``lower``: composites left by
    selection inlined (``record``: site -> the nodes computing its results),
    the passes rerun over the inlined bodies, short contractions written out
    (``passes.small_contractions``), runs of alike loop iterations
    re-rolled (``roll``: the target's ``compile_template``, see ``reroll``),
    the graph fused into loops (``compact``: the target has count-then-fill
    kernels, see ``fuse``)."""
    graph = small_contractions(_inlined(graph, record))
    if roll is not None:
        graph = reroll(graph, roll)
    return fuse(graph, compact)


def unfused(graph: Graph) -> Fused:
    """``fused`` without fusion: composites inlined, passes run, one step per op."""
    return one_step_per_op(_inlined(graph))


def _inlined(graph: Graph, record: dict | None = None) -> Graph:
    """``graph`` (already through the passes) with its composites inlined and
    the passes rerun over their bodies; with none, ``graph`` itself (the
    passes again would cost as much as the first time: a 10,000-op loop ran
    them three times, 0.35 s each)."""
    inlined = inline_composites(graph, record if record is not None else {})
    if inlined is graph:
        return graph
    graph, _ = run_passes(inlined)
    return graph


def run(program: Program, inputs: list, name: str, target: str, outs=None) -> list:
    """Run ``program`` on the executable's inputs; write back the arguments the
    function updated in place; return the raw results."""
    calling.check_writeable(program.mutated, inputs, program.graph.input_names, name)
    results = program.executable.run(inputs) if outs is None else program.executable.run(inputs, outs)
    if program.guards:
        check_guards(program, results[program.n_out + len(program.mutated):])
    if CHECK_RESULTS:
        check_results(name, target, program.graph, results)
    for i, spec in enumerate(program.outputs[: program.n_out]):
        if spec is not None and spec.copy and is_ndarray(results[i]):
            results[i] = np.array(results[i], order="K")
        if spec is not None and spec.same is not None:
            results[i] = results[spec.same]  # (return y, y: one object twice)
    calling.write_back(program.mutated, inputs, results[program.n_out:])
    return results


def check_guards(program: Program, values: list) -> None:
    """Raise GuardFailed if a value the program was specialized on changed.
    The 0-d bool and integer guards (counts, flags, elements a branch read: a
    loop's ``if a[i]:`` makes one per iteration) are compared first as one
    tuple; where that finds a change, or cannot, each guard is checked."""
    if program.flags is None:
        at = tuple(k for k, (e, _) in enumerate(program.guards) if e is not None and e.ndim == 0 and e.dtype.kind in "biu")
        rest = tuple(k for k in range(len(program.guards)) if k not in set(at))
        pick = operator.itemgetter(*at) if len(at) > 1 else (lambda v, k=at: tuple(v[j] for j in k))
        program.flags = (pick, tuple(program.guards[k][0][()] for k in at), rest)
    pick, want, rest = program.flags
    # (NumPy scalars against NumPy scalars: np.True_ is one object, integers compare in
    # NumPy's scalar math; a 0-d array's comparison is a NumPy bool too)
    at = rest if pick(values) == want else range(len(program.guards))
    for k in at:
        (expected, what), value = program.guards[k], values[k]
        if expected is None:
            continue  # a call run for its effect
        if expected.ndim == 0 and expected.dtype.kind in "biuf" and (
                type(value) is np.ndarray and value.ndim == 0 or isinstance(value, np.generic)):
            # (the common guard, a count, a flag or an element read by a branch: 0.3 us, not 10)
            v, e = value.item(), expected.item()
            if expected.dtype.kind == "f":
                same = v != v and e != e or v == e and math.copysign(1.0, v) == math.copysign(1.0, e)
            else:
                same = v == e
            if not same:
                raise GuardFailed(f"a value the program was specialized on changed: {what}")
            continue
        value = np.asarray(value.copy_to_host() if hasattr(value, "copy_to_host") else value)
        if value.shape != expected.shape or not np.array_equal(value, expected, equal_nan=expected.dtype.kind in "fc") \
                or (expected.dtype.kind == "f" and not np.array_equal(np.signbit(value), np.signbit(expected))):
            # (-0.0 == 0.0, but math.copysign and 1 / x tell them apart)
            raise GuardFailed(f"a value the program was specialized on changed: {what}")


# ---------------------------------------------------------------- caches


@dataclass
class CacheInfo:
    """Hits, misses and the reason for each miss of one compiled function."""

    hits: int = 0
    misses: int = 0
    size: int = 0
    reasons: list[str] = field(default_factory=list)  # the latest ``MAX_REASONS``
    evictions: int = 0


MAX_REASONS = 100
DEFAULT_CACHE_SIZE = 256  # programs kept per compiled function (compile(cache_size=...))


class Cache:
    """Built values (programs, paired programs) by call key, least recently
    used first; at most ``size`` kept, each eviction logged and counted.

    ``refresh(value)`` is asked on every hit: it returns the value to use
    (itself, or re-lowered in place) or None when it must be rebuilt.
    """

    def __init__(self, name: str, size: int, refresh: Callable, on_evict: Callable | None = None):
        self.name, self.size = name, size
        self.refresh, self.on_evict = refresh, on_evict
        self.entries: collections.OrderedDict[tuple, Any] = collections.OrderedDict()
        self.lock = threading.RLock()
        self.info = CacheInfo()

    def peek(self, key):
        """The value for ``key`` without checking it is current (the call fast path)."""
        value = self.entries.get(key)
        if value is not None:
            try:
                self.entries.move_to_end(key)
            except KeyError:  # evicted by another thread just now: still usable for this call
                pass
        return value

    def get(self, key, build: Callable[[], Any], reason: Callable[[], str]):
        """The current value for ``key``, built (once, under the lock) on a miss."""
        value = self.peek(key)
        if value is not None:
            fresh = self.refresh(value)
            if fresh is not None:
                self.info.hits += 1
                return fresh
        with self.lock:
            value = self.entries.get(key)
            if value is not None:  # another thread finished (or refreshed) it while we waited
                fresh = self.refresh(value)
                if fresh is not None:
                    self.info.hits += 1
                    return fresh
                why = "registry changed: rebuilt for the kernels now registered"
            else:
                why = reason()
            value = build()
            self.info.reasons.append(why)
            del self.info.reasons[:-MAX_REASONS]
            self.info.misses += 1
            self.entries[key] = value
            while len(self.entries) > self.size:
                self._evict()
            return value

    def note(self, reason: str) -> None:
        self.info.reasons.append(reason)
        del self.info.reasons[:-MAX_REASONS]

    def _evict(self) -> None:
        key, value = self.entries.popitem(last=False)
        self.info.evictions += 1
        if self.on_evict is not None:
            self.on_evict(value)
        graph = getattr(value, "graph", None) or value.forward.graph
        logger.info("%s: evicted the least recently used trace (%s) to keep %d (compile(cache_size=...)); "
                    "%d evictions so far: many distinct shapes or static values retrace", self.name,
                    ", ".join(str(a) for a in graph.inputs) or "no array inputs", self.size, self.info.evictions)

    def snapshot(self) -> CacheInfo:
        info = self.info
        return CacheInfo(info.hits, info.misses, len(self.entries), list(info.reasons), info.evictions)

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
            self.info = CacheInfo()


def log_build(name: str, target: str, reason: str, times: dict, graph: Graph) -> None:
    if logger.isEnabledFor(logging.INFO):
        logger.info("%s: traced for %s (%s): %s; %d nodes", name, target, reason, describe_times(times),
                    len(graph.nodes))


def describe_times(times: dict) -> str:
    """``trace 1.0 ms, passes 2.0 ms, lower 3.0 ms (fuse 1.0 ms, codegen 1.5 ms)``."""
    main = ", ".join(f"{k} {times[k] * 1e3:.1f} ms" for k in ("trace", "passes", "lower") if k in times)
    inner = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in times.items() if k not in ("trace", "passes", "lower"))
    return main + (f" ({inner})" if inner else "")


def _counted(notes) -> list[str]:
    """Each note once, in order, with how many times it was made (a loop's graph
    break, one per iteration, is one line)."""
    counts: dict[str, int] = {}
    for note in notes:
        counts[note] = counts.get(note, 0) + 1
    return [note if n == 1 else f"{note} (x{n})" for note, n in counts.items()]


class Lowered:
    """What ``f.lower(*args)`` returns: the graph and the target's program."""

    def __init__(self, program: Program, target):
        self.ir = program.graph
        self.stages = program.stages
        sites = program.executable.sites
        selection = "\n".join([c.describe(sites.get(c.site)) for c in program.choices] + _counted(program.graph.notes))
        self.choices = program.choices
        self.plan = (selection + "\n\n" if selection else "") + program.executable.plan
        self.source = program.executable.source
        self.target = target
        self.times = dict(program.times)
        self.counts = dict(program.executable.counts)
        self.times.update(program.executable.times)  # (a tiered target's, known once it built)

    @functools.cached_property
    def graph(self) -> str:
        """The graph as text (formatted when read: a 100,000-node graph takes a
        second to format, which ``f.lower`` need not pay)."""
        return str(self.ir)

    def __str__(self):
        counts = ", ".join(f"{v} {k}" for k, v in self.counts.items())
        stats = f"# compile: {describe_times(self.times)}" + (f"; {counts}" if counts else "")
        return f"{self.graph}\n\n# plan ({self.target.name})\n{self.plan}\n\n{stats}\n\n# source\n{self.source}"
