"""Effects a traced function has on Python state, which a compiled program
would not repeat.

Tracing runs the user's Python once; the program then repeats only the
array computation. A function that also changes state outside its results
and arguments' arrays (rebinds a global or an attribute, updates a global
array or a closure's, appends to a list it was given, draws random numbers)
would do that once, at the trace, and never again: a silent wrong answer.
``Watch`` takes a snapshot of the state a function can reach by name (the
globals its code names and the arrays, lists, dicts and random generators
they hold, its closure's cells likewise, ``self``'s attributes for a method
and its arguments' (a few levels deep), NumPy's global random state) before
the trace; after it, any difference is put back as it was and raises
``SideEffectError``, and the compiled function runs that call signature as
plain NumPy (``braze.compile(fullgraph=True)`` raises instead).

Only what the function reaches by name is watched (not a module another
function it calls keeps its state in); the cost is at tracing only.
"""
from __future__ import annotations

import functools
import math
import random
import sys
import types
import zlib

import numpy as np

from .aval import is_ndarray
from .errors import UnsupportedOpError

_MISSING = object()
_COPY_LIMIT = 1 << 28  # bytes of watched arrays copied (to put back); beyond, a checksum only
_DEPTH = 4  # attributes of attributes ... watched this deep
# bytes: an array the function names but the program does not read is compared
# at every call up to this size (its bytes below BYTES_COMPARE: 0.1-4 us; above,
# an array comparison of its bits: 76 us a MiB here)
SMALL_CONTENTS = 1 << 22
BYTES_COMPARE = 1 << 16
_LIBRARIES = ("numpy", "braze", "scipy", "numba", "llvmlite", "dask")
_NOT_USERS = frozenset(_LIBRARIES) | sys.stdlib_module_names  # (a lock's, a logger's state is theirs)


class SideEffectError(UnsupportedOpError):
    """The function changed Python state a compiled program would not change
    again at each call (a global, an attribute, a list argument, a random
    generator); the call runs as NumPy instead."""


def _is_rng(value) -> bool:
    return isinstance(value, (np.random.Generator, np.random.RandomState, np.random.BitGenerator))


def _rng_state(value):
    if isinstance(value, np.random.RandomState):
        return value.get_state(legacy=False)
    if isinstance(value, np.random.Generator):
        return value.bit_generator.state
    return value.state


def _set_rng_state(value, state) -> None:
    if isinstance(value, np.random.RandomState):
        value.set_state(state)
    elif isinstance(value, np.random.Generator):
        value.bit_generator.state = state
    else:
        value.state = state


def _same_state(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same_state(a[k], b[k]) for k in a)
    if is_ndarray(a) or is_ndarray(b):
        return np.array_equal(a, b)
    return a == b


def _is_users(f: types.FunctionType) -> bool:
    """Whether ``f`` is the user's code (not a library's: its state is its own)."""
    module = getattr(f, "__module__", None) or ""
    return module.split(".")[0] not in _LIBRARIES


def _code_names(code: types.CodeType) -> set[str]:
    """The global names a code object and the functions defined in it use."""
    names, stack = set(), [code]
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return names


def _functions(fn):
    """The Python functions (and bound objects) behind ``fn``."""
    seen, stack, out = set(), [fn], []
    while stack:
        f = stack.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        if isinstance(f, functools.partial):
            stack.append(f.func)
            out.extend(("arg", a) for a in (*f.args, *f.keywords.values()))
        elif isinstance(f, types.MethodType):
            stack.append(f.__func__)
            out.append(("self", f.__self__))
        elif isinstance(f, types.FunctionType):
            out.append(("function", f))
        elif hasattr(f, "fn") and callable(f.fn):  # a braze.compile'd function
            stack.append(f.fn)
        elif callable(f) and not isinstance(f, type) and hasattr(type(f), "__call__") and \
                isinstance(getattr(type(f), "__call__", None), types.FunctionType):
            out.append(("self", f))  # a callable object: its __call__ reads self's attributes
            stack.append(type(f).__call__)
    return out


class Watch:
    """A snapshot of the state ``fn`` reaches: ``changes`` after the trace says
    what the trace changed (``restore`` puts it back); ``pins``, ``shapes`` and
    ``contents`` are what ``stale`` checks at each call."""

    def __init__(self, fn, args: tuple = (), kwargs: dict | None = None):
        self.bindings = []   # (namespace dict or cell, key, value it held, what)
        self.arrays = []     # (array, copy or None, checksum, what)
        self.rngs = []       # (generator, state, what)
        self.containers = []  # (list / dict, shallow copy, what)
        self._copied = 0
        self.seen: set[int] = set()  # ids of every object watched (arrays among them)
        self._bound: set = set()
        self._attributes: set[int] = set()  # indices of bindings that are attributes of objects
        self.names: set[str] = set()  # every name the watched functions' code uses
        self._pending = [fn]
        self._done: set[int] = set()
        self._drain()
        for k, a in enumerate(args):
            self._value(a, f"argument {k}", 0)
        for name, a in (kwargs or {}).items():
            self._value(a, f"argument {name}", 0)
        self._drain()  # (the methods and property getters of argument objects the code names)
        # The global random states, where the code names "random" (np.random.rand,
        # random.random): other threads (a Dask scheduler's) draw from them too.
        self.legacy = np.random.get_state(legacy=False) if "random" in self.names else None
        self.python_random = random.getstate() if "random" in self.names else None

    def _drain(self) -> None:
        done = self._done
        while self._pending:  # the function, then the user functions it names (a worklist, no recursion)
            f = self._pending.pop()
            if id(f) in done:
                continue
            done.add(id(f))
            for kind, part in sorted(_functions(f), key=lambda kp: kp[0] != "function"):  # (names first)
                if kind == "function" and not _is_users(part):  # a library's wrapper: what it closes over
                    self._pending.extend(c.cell_contents for c in part.__closure__ or ()
                                         if _full(c) and callable(c.cell_contents))
                elif kind == "function":
                    self._function(part)
                elif kind == "self" and (type(part).__module__ or "").split(".")[0] in _LIBRARIES:
                    attrs = getattr(part, "__dict__", {})  # (a library's object: the user's function it holds)
                    self._pending.extend(v for v in attrs.values() if isinstance(v, types.FunctionType))
                elif kind == "self":
                    self._object(part, "self", 0)
                else:
                    self._value(part, "an argument", 0)

    def _function(self, f: types.FunctionType) -> None:
        g = f.__globals__
        names = _code_names(f.__code__)
        self.names |= names
        for name in names:  # (names not bound yet too: a global the function creates)
            value = g.get(name, _MISSING)
            self._binding(g, name, value, f"the global {name}", _DEPTH - 1)
            if isinstance(value, types.ModuleType) and value.__name__.split(".")[0] not in _NOT_USERS:
                attrs = vars(value)  # the user's module: what the function reads of it (helpers.GAIN)
                for attr in names & attrs.keys():
                    self._binding(attrs, attr, attrs[attr], f"{name}.{attr}", _DEPTH - 1)
        for name, cell in zip(f.__code__.co_freevars, f.__closure__ or ()):
            try:
                value = cell.cell_contents
            except ValueError:  # (an empty cell: a name assigned later)
                value = _MISSING
            self._binding(cell, None, value, f"{name} (from an enclosing function)", _DEPTH - 1)

    # ---- snapshot
    def _binding(self, space, key, value, what: str, depth: int, attribute: bool = False) -> None:
        where = (id(space.obj) if isinstance(space, _Slots) else id(space), key)
        if where in self._bound:  # (a global several functions name: once)
            return
        self._bound.add(where)
        self.bindings.append((space, key, value, what))
        if attribute:
            self._attributes.add(len(self.bindings) - 1)
        if value is not _MISSING:
            self._value(value, what, depth)

    def _object(self, obj, what: str, depth: int) -> None:
        if isinstance(obj, (type, types.ModuleType)) or depth >= _DEPTH:
            return
        attrs = getattr(obj, "__dict__", None)
        if isinstance(attrs, dict):
            self.containers.append((attrs, attrs.copy(), f"the attributes of {what}"))  # (one added, too)
            for name, value in list(attrs.items()):
                self._binding(attrs, name, value, f"{what}.{name}", depth + 1, attribute=True)
        for name in getattr(type(obj), "__slots__", ()):
            if isinstance(name, str) and hasattr(obj, name):
                self._binding(_Slots(obj), name, getattr(obj, name), f"{what}.{name}", depth + 1, attribute=True)
        for name, value in vars(type(obj)).items():  # class attributes it reads as self.name, its methods
            if not name.startswith("__") and _pinned(value) and not (isinstance(attrs, dict) and name in attrs):
                # (read through the object: ``cfg.lr = 0.1`` on an instance shadows the class's)
                self._binding(_Slots(obj), name, value, f"{what}.{name}", _DEPTH, attribute=True)
            elif isinstance(value, (types.FunctionType, property)) and name in self.names and not (
                    isinstance(attrs, dict) and name in attrs):
                # a method the code calls (self.act.forward), a property it reads (self.weight):
                # their code's reads too, and the class's binding (B.helper = ... since: traced again)
                fns = (value,) if isinstance(value, types.FunctionType) else (value.fget, value.fset)
                users = [f for f in fns if isinstance(f, types.FunctionType) and _is_users(f)]
                if users:
                    self._pending.extend(users)
                    self._binding(vars(type(obj)), name, value, f"{what}.{name}", _DEPTH, attribute=True)

    def _value(self, value, what: str, depth: int) -> None:
        if id(value) in self.seen:
            return
        self.seen.add(id(value))
        if isinstance(value, types.FunctionType) and _is_users(value):
            self._pending.append(value)
        elif type(value).__module__ == "braze.api" and callable(getattr(value, "fn", None)):
            self._pending.append(value.fn)  # a braze.compile'd function it calls
        elif is_ndarray(value):
            if value.flags.writeable and value.size:
                self._array(value, what)
        elif _is_rng(value):
            self.rngs.append((value, _rng_state(value), what))
        elif isinstance(value, (list, dict)):
            self.containers.append((value, value.copy(), what))
            for k, v in (value.items() if isinstance(value, dict) else enumerate(value)):
                if is_ndarray(v) or _is_rng(v) or depth < _DEPTH:
                    self._value(v, f"{what}[{k!r}]", depth + 1)
        elif (type(value).__module__ or "").split(".")[0] not in _NOT_USERS:
            self._object(value, what, depth)  # a user object (self, an argument): its attributes

    def _array(self, a: np.ndarray, what: str) -> None:
        copy = None
        if self._copied + a.nbytes <= _COPY_LIMIT:
            copy = a.copy()
            self._copied += a.nbytes
        self.arrays.append((a, copy, _checksum(a) if copy is None else 0, what))

    def pins(self) -> tuple:
        """The names whose values the trace may have baked in: (namespace or
        cell, key, value, what) for each global, closure variable and attribute
        the code names (not modules; of the arguments, only the attributes of
        an object passed, ``cfg.lr``: its identity is the cache key, its
        attributes are read as the trace read them). ``stale`` says, at each
        call, whether one was rebound since (then the function is traced
        again, as NumPy would read the new value)."""
        return tuple(b for k, b in enumerate(self.bindings)
                     if b[2] is not _MISSING and not isinstance(b[2], types.ModuleType)
                     and (b[1] in self.names if k in self._attributes  # (attributes its code names)
                          else not b[3].startswith("argument")))  # (arguments are the call's own)

    def shapes(self) -> tuple:
        """The lists, dicts and attribute sets the function reaches (not its
        arguments'), with their items now: ``stale`` checks each still holds
        the same objects (``CFG["alpha"] = 0.5`` traces again)."""
        return tuple(c for c in self.containers if not c[2].startswith(("argument", "the attributes of")))

    def contents(self, small_only: bool = False, captured: frozenset = frozenset()) -> tuple:
        """The arrays the function names (globals, closure variables, ``self``'s
        and argument objects' attributes) with their values now: when the trace
        computed with NumPy on them (``0.5 * W``: NumPy's arithmetic, not
        traced, so the program holds the product), ``stale`` checks at each
        call that they still hold these values (a copy compared, or a checksum
        for arrays too big to copy). ``small_only``: those of at most
        SMALL_CONTENTS bytes that the program does not read itself (ids not in
        ``captured``), checked always: ``if P[0] > 0:`` reads an element as a
        Python value, which no node of the program shows, while a captured
        array's values are read at each call (a weight updated between calls
        is no reason to trace again)."""
        return tuple((a, None if copy is None else copy.tobytes() if copy.nbytes <= BYTES_COMPARE else copy,
                      checksum, what)
                     for a, copy, checksum, what in self.arrays
                     if not (what.startswith("argument") and "." not in what)  # (the call's own arrays)
                     and (not small_only or (a.nbytes <= SMALL_CONTENTS and id(a) not in captured)))

    # ---- after the trace
    def changes(self) -> list[str]:
        """What the function changed, in words (empty: nothing)."""
        out = []
        for space, key, value, what in self.bindings:
            now = _read(space, key)
            if now is not value:
                out.append(f"rebinds {what}")
        for a, copy, checksum, what in self.arrays:
            if (copy is not None and not np.array_equal(a, copy, equal_nan=a.dtype.kind in "fc")) or \
                    (copy is None and _checksum(a) != checksum):
                out.append(f"writes into the array {what}")
        for rng, state, what in self.rngs:
            if not _same_state(_rng_state(rng), state):
                out.append(f"draws from the random generator {what}")
        if self.legacy is not None and not _same_state(np.random.get_state(legacy=False), self.legacy):
            out.append("draws from NumPy's global random state (np.random.*)")
        for container, before, what in self.containers:
            if _changed(container, before):
                out.append(f"changes {what}" if what.startswith("the attributes") else
                           f"changes the {type(container).__name__} {what}")
        if self.python_random is not None and random.getstate() != self.python_random:
            out.append("draws from Python's random module")
        return out

    def restore(self) -> bool:
        """Put back what changed; False where an array too big to copy was written."""
        whole = True
        for space, key, value, _ in self.bindings:
            if _read(space, key) is not value:
                _write(space, key, value)
        for a, copy, checksum, _ in self.arrays:
            if copy is not None:
                if not np.array_equal(a, copy, equal_nan=a.dtype.kind in "fc"):
                    np.copyto(a, copy)
            elif _checksum(a) != checksum:
                whole = False
        for rng, state, _ in self.rngs:
            _set_rng_state(rng, state)
        if self.legacy is not None:
            np.random.set_state(self.legacy)
        if self.python_random is not None:
            random.setstate(self.python_random)
        for container, before, _ in self.containers:
            if isinstance(container, list):
                container[:] = before
            else:
                container.clear()
                container.update(before)
        return whole


_PINNED = (int, float, complex, bool, str, bytes, np.generic, np.ndarray)


def _pinned(value) -> bool:
    return isinstance(value, _PINNED) or (isinstance(value, tuple) and all(isinstance(v, _PINNED) for v in value))


def stale(pins: tuple, contents: tuple = (), shapes: tuple = ()) -> str | None:
    """The first pinned name rebound since the trace (in words), or None; with
    ``contents`` (``Watch.contents``), also the first array written since, and
    with ``shapes`` (``Watch.shapes``), the first list or dict changed."""
    for space, key, value, what in pins:
        now = _read(space, key)
        if now is not value and not (type(now) is type(value) and _pinned(value) and not is_ndarray(value)
                                     and _equal(now, value)):
            return f"{what} changed"
    for container, before, what in shapes:
        if _changed(container, before):
            return f"{what} changed"
    for a, snapshot, checksum, what in contents:  # (bytes: 0.1 us for a small array, array_equal 7)
        if snapshot is None:
            changed = _checksum(a) != checksum
        elif type(snapshot) is bytes:
            changed = a.tobytes() != snapshot
        else:  # (a larger one's bits, as unsigned integers: NaN and -0.0 as they are)
            bits = np.dtype(f"u{a.dtype.itemsize}") if a.dtype.itemsize in (1, 2, 4, 8) else None
            changed = not (np.array_equal(a.view(bits), snapshot.view(bits)) if bits is not None and a.flags.c_contiguous
                           else a.tobytes() == snapshot.tobytes())
        if changed:
            return f"the values of {what} changed"
    return None


def _equal(a, b) -> bool:
    try:
        return bool(a == b) and (not isinstance(a, float) or math.copysign(1, a) == math.copysign(1, b))
    except (TypeError, ValueError):
        return False


def _changed(container, before) -> bool:
    """Whether a list or dict holds other objects than its shallow copy ``before``."""
    if isinstance(container, list):
        return len(container) != len(before) or any(a is not b for a, b in zip(container, before))
    return container.keys() != before.keys() or any(container[k] is not before[k] for k in before)


class _Slots:
    """An object's attributes read and written by name (``__slots__``, a class's)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def get(self, key, default):
        return getattr(self.obj, key, default)

    def __setitem__(self, key, value):
        setattr(self.obj, key, value)

    def pop(self, key, default=None):
        if hasattr(self.obj, key):
            delattr(self.obj, key)


def _full(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _read(space, key):
    if key is None:  # a closure cell
        try:
            return space.cell_contents
        except ValueError:
            return _MISSING
    return space.get(key, _MISSING)


def _write(space, key, value) -> None:
    if key is None:
        if value is _MISSING:
            del space.cell_contents
        else:
            space.cell_contents = value
    elif value is _MISSING:
        space.pop(key, None)
    else:
        space[key] = value


def _checksum(a: np.ndarray) -> int:
    return zlib.crc32(memoryview(np.ascontiguousarray(a)).cast("B"))
