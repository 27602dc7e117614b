"""NumPy calls that never reach ``__array_function__``, intercepted while braze
traces or records a gradient tape.

Two groups of NumPy functions cannot see braze's arrays through NumPy's
protocols:

* **Constructors** ``np.empty``/``np.zeros``/``np.ones``/``np.full`` called
  with no array argument. Inside a *trace* they return a traced array (a
  broadcast constant), so ``out = np.zeros(...); out[1:] = f(x)`` becomes a
  functional update. Under a *tape* a float buffer is watched (as a
  constant), so writing watched values into it is recorded: ``out[i] = w``
  into a plain NumPy array would drop ``w``'s gradient.
* **Converters** ``np.array``/``np.asarray``/``np.asanyarray``/
  ``np.ascontiguousarray`` and the index builders ``np.r_``/``np.c_``, given
  a traced or watched array, or a (nested) list of them. NumPy would call
  ``__array__`` on each and build a plain array: a silent loss of the
  gradient under a tape. While a trace or a tape is active they build the
  array with braze ops instead (``np.array([x, y])`` is a stack), so the
  result is traced and carries its gradient.

While at least one thread traces or records, these names in the ``numpy``
module are replaced by wrappers, under a lock and reference counted. A
wrapper acts only in a thread whose innermost context is a trace or a tape,
and only for calls from code outside NumPy, SciPy, numba and braze (NumPy's
own Python code calls ``np.empty`` internally; a SciPy function converting
its argument must get NumPy's behaviour). Everywhere else it calls NumPy's
own function unchanged.

Limits (documented in the README):

* Code that bound the functions before tracing (``from numpy import zeros``)
  keeps NumPy's originals.
* ``np.empty`` is traced as ``np.zeros`` (its contents are unspecified).
* ``np.eye``/``np.identity``/``np.tri`` inside a trace return their NumPy
  value as a traced constant (under a tape, a float one is watched as
  ``np.zeros``' buffer is). Other constructors (``arange``, ``linspace``,
  ...) return NumPy arrays as usual and become captured constants where
  traced values meet them.
* A ``numba.njit`` function compiled *in another thread while a trace runs*
  that calls one of these functions sees the wrapper and fails to type it.

Python's builtins ``min`` and ``max`` given traced scalars of one aval
(``min(D[i - 1, j], D[i, j - 1], D[i - 1, j - 1])``, a dynamic program's
step) are replaced too, in a trace, from user code: Python's own would
compare them, and a comparison used as a Python bool specializes the
program on its outcome (a guard, and a new trace whenever the data
choose otherwise: a DTW on new data traced on every call). Traced, each
comparison is Python's (``item < best``, the first of equal items kept, a
NaN compared as Python compares it) and selects with ``where``. Items of
different dtypes or weakness keep Python's builtin: which one it returns
would decide the result's type.

SciPy's functions (``scipy.linalg.solve_triangular``, ``scipy.ndimage.
gaussian_filter``, LAPACK's ``scipy.linalg.lapack.dgtsv``, ...) called from
user code in a trace with a traced argument are replaced too, among the
SciPy modules already imported (``HOST_MODULES``): each call is a graph
break, run on the values at every call (``host_call``). Unreplaced, SciPy
converted the traced arrays itself, which specializes the program on their
values: a guard on every element, and a new trace whenever the data change.
A call whose results are not arrays and numbers (an ``OptimizeResult``)
keeps that behaviour. SciPy's ufuncs (``scipy.special.erf``) reach braze
through NumPy's protocol and are not replaced.
"""
from __future__ import annotations

import builtins
import contextlib
import dis
import functools
import importlib
import linecache
import operator
import re
import sys
import threading

import numpy

from . import numpy as bnp
from . import pytree
from .core import current_context
from .errors import UnsupportedOpError

CONSTRUCTORS = ("empty", "zeros", "ones", "full")
# Matrix constructors whose result a program indexes with traced values (the
# one-hot idiom ``np.eye(n)[labels]``): NumPy's array, made a traced constant
# so the indexing is braze's (a gather) and not a conversion of the labels.
# (``arange`` stays NumPy's: programs iterate over it for loop counters.)
MATRIX_CONSTRUCTORS = ("eye", "identity", "tri")
CONVERTERS = ("array", "asarray", "asanyarray", "ascontiguousarray", "asfortranarray", "require", "frombuffer", "fromiter",
              "fromstring")
INDEX_BUILDERS = ("r_", "c_")
# Functions a program calls on a list of traced scalars (``np.min([D[i - 1, j],
# D[i, j - 1]])``): NumPy converts the list before any dispatch, which is a
# graph break per call; given a list or tuple holding braze arrays they get
# the list as a braze array (``np.array``'s rule), and dispatch as usual.
LIST_FUNCTIONS = ("min", "max", "amin", "amax", "sum", "prod", "mean", "std", "var", "median", "average",
                  "argmin", "argmax", "any", "all", "ptp", "nanmin", "nanmax", "nansum", "nanmean", "cumsum",
                  "cumprod", "sort")
# ``np.errstate(all="raise")`` asks NumPy to raise on floating-point errors,
# which compiled kernels do not check: the call runs as NumPy (sideeffects).
ERRSTATE = ("errstate",)
# Functions of dtypes that NumPy refuses arrays for (it reads a traced array's
# ``dtype`` attribute as a dtype-like): refused for traced arrays too.
DTYPE_FUNCTIONS = ("promote_types",)
NAMES = CONSTRUCTORS + MATRIX_CONSTRUCTORS + CONVERTERS + INDEX_BUILDERS + ERRSTATE + DTYPE_FUNCTIONS + LIST_FUNCTIONS

# Callers inside these packages always get NumPy's own functions.
_LIBRARIES = ("numpy", "scipy", "braze", "numba", "llvmlite")

_lock = threading.Lock()
_active = 0
_originals = {name: getattr(numpy, name) for name in NAMES}
BUILTINS = ("min", "max")
_builtin_originals = {name: getattr(builtins, name) for name in BUILTINS}


def _context_kind() -> str | None:
    """"trace" or "tape" when the calling thread's innermost context is one (contexts
    say so with their ``intercepts`` attribute)."""
    return getattr(current_context(), "intercepts", None)


def _from_user_code(depth: int = 2) -> bool:
    return not sys._getframe(depth).f_globals.get("__name__", "").startswith(_LIBRARIES)


def _named_on_callers_line(name: str, depth: int = 2) -> bool:
    """Whether the user's line that led here names ``name`` (``np.zeros(...)``).
    Compiled code (NumPy's Cython random generators) calls ``np.empty`` with no
    Python frame of its own: the frame above is the user's ``rng.uniform(...)``
    line, which must get NumPy's array."""
    frame = sys._getframe(depth)
    return name in _names_on_line(frame.f_code, frame.f_lineno)


@functools.lru_cache(maxsize=4096)
def _names_on_line(code, line: int) -> frozenset:
    return frozenset(ins.argval for ins in dis.get_instructions(code)
                     if ins.opname in ("LOAD_ATTR", "LOAD_METHOD", "LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF")
                     and ins.positions is not None and ins.positions.lineno is not None
                     and ins.positions.lineno <= line <= (ins.positions.end_lineno or ins.positions.lineno))


def _holds_braze_array(value) -> bool:
    """Whether ``value`` is, or a (nested) list/tuple holds, a traced or watched array."""
    from .surface import ArrayMethods

    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, ArrayMethods):
            return True
        if isinstance(v, (list, tuple)):
            stack.extend(v)
    return False


def _constructor(name: str):
    original = _originals[name]
    traced = getattr(bnp, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        kind = _context_kind()
        if kind is None or kwargs.get("like") or not _from_user_code() or not _named_on_callers_line(name):
            return original(*args, **kwargs)
        if kind == "trace":
            return traced(*args, **kwargs)
        tape = current_context()  # a buffer made under a tape: watched, so writes into it are recorded
        if any(_holds_braze_array(a) for a in (*args, *kwargs.values())):
            return traced(*args, **kwargs)  # (np.full(shape, w) of a watched w: recorded, w's gradient kept)
        value = traced(*args, **kwargs) if getattr(tape._parent, "intercepts", None) == "trace" else \
            original(*args, **kwargs)
        return tape.buffer(value) if value.dtype.kind in "fc" else value

    return wrapper


def _matrix_constructor(name: str):
    original = _originals[name]

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        kind = _context_kind()
        if kind is None or kwargs.get("like") or not _from_user_code() or not _named_on_callers_line(name):
            return original(*args, **kwargs)
        value = original(*args, **kwargs)
        if kind == "trace":
            return current_context().constant(value)
        # under a tape, a float matrix is watched as np.zeros' buffer is: ``L = np.eye(n);
        # L[k, i] = w`` is recorded (else NumPy's setitem converted w, refused: no gradient)
        tape = current_context()
        if getattr(tape._parent, "intercepts", None) == "trace":
            value = tape._parent.constant(value)
        return tape.buffer(value) if value.dtype.kind in "fc" else value

    return wrapper


def _converter(name: str):
    original = _originals[name]
    build = getattr(bnp, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if (args and not kwargs.get("like") and _holds_braze_array(args[0])
                and _context_kind() is not None and _from_user_code()):
            return build(*args, **kwargs)
        return original(*args, **kwargs)

    return wrapper


def _list_function(name: str):
    original = _originals[name]

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if (args and type(args[0]) in (list, tuple) and _context_kind() is not None and _holds_braze_array(args[0])
                and _from_user_code()):
            return original(bnp.array(args[0]), *args[1:], **kwargs)
        return original(*args, **kwargs)

    return wrapper


class _IndexBuilder:
    """``np.r_`` / ``np.c_``: braze's concatenation for traced items, NumPy's otherwise."""

    def __init__(self, name: str):
        self._name = name
        self._original = _originals[name]

    def __getitem__(self, key):
        items = key if isinstance(key, tuple) else (key,)
        if _holds_braze_array(list(items)) and _context_kind() is not None:
            return getattr(bnp, self._name)[key]
        return self._original[key]

    def __len__(self):
        return len(self._original)

    def __getattr__(self, attr):
        return getattr(self._original, attr)


def _errstate(*args, **kwargs):
    """``np.errstate``; in a trace, raising (or calling back) on floating-point
    errors is a ``SideEffectError``: the function runs as NumPy, which raises."""
    if (_context_kind() == "trace" and _from_user_code()
            and ("call" in kwargs or any(v in ("raise", "call") for v in kwargs.values()))):
        from .errors import where
        from .sideeffects import SideEffectError

        settings = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        raise SideEffectError(f"np.errstate({settings}){where()} asks NumPy to raise on floating-point errors, "
                              "which compiled kernels do not check; the function runs as plain NumPy")
    return _originals["errstate"](*args, **kwargs)


_bit_generator = importlib.import_module("numpy.random.bit_generator")
_randbits = _bit_generator.randbits


_LEGACY_SEEDED = re.compile(r"RandomState\(\s*(seed\s*=\s*)?\d+\s*\)")


def _literal_legacy_seed() -> bool:
    """Whether the user's line is ``RandomState(42)``: its __init__ seeds a fresh
    MT19937 before seeding it with 42, which is deterministic all the same."""
    frame = sys._getframe(2)
    return bool(_LEGACY_SEEDED.search(linecache.getline(frame.f_code.co_filename, frame.f_lineno)))


def _fresh_entropy(bits: int):
    """NumPy's source of fresh entropy (``SeedSequence()`` with no entropy: what
    ``default_rng()``, ``RandomState()``, ``PCG64()`` and the other generators
    made without a seed draw, however their names were imported); in a trace,
    a ``SideEffectError`` (the function runs as NumPy): a trace would bake the
    numbers of one call into every call."""
    if _context_kind() == "trace" and _from_user_code() and not _literal_legacy_seed():
        from .errors import where
        from .sideeffects import SideEffectError

        raise SideEffectError(f"a random generator seeded from fresh entropy{where()} (np.random.default_rng(), "
                              "RandomState(), PCG64(), ... with no seed) draws other numbers at each call; the "
                              "function runs as plain NumPy (pass the generator, or a seed, as an argument to "
                              "compile it)")
    return _randbits(bits)


def _dtype_function(name: str):
    original = _originals[name]

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        from .surface import ArrayMethods

        for a in (*args, *kwargs.values()):
            if isinstance(a, ArrayMethods) and not a._is_scalar():
                raise TypeError(f"Cannot interpret an array of shape {tuple(a.shape)} as a data type "
                                f"(numpy.{name}); pass x.dtype")
        return original(*args, **kwargs)

    return wrapper


def _python_extremum(name: str):
    """Python's ``min``/``max`` of traced scalars of one aval, as ``where``s (see the module's doc)."""
    original = _builtin_originals[name]
    better = operator.lt if name == "min" else operator.gt  # (Python's: ``item < best`` replaces best)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if kwargs or not args:
            return original(*args, **kwargs)
        items = args if len(args) > 1 else args[0]
        if type(items) not in (tuple, list) or len(items) < 2 or not _alike_scalars(items) \
                or _context_kind() != "trace" or not _from_user_code():
            return original(*args, **kwargs)
        best = items[0]
        for item in items[1:]:
            best = bnp.where(better(item, best), item, best)
        return best

    return wrapper


def _alike_scalars(items) -> bool:
    """Whether ``items`` are all traced 0-d arrays of one aval (dtype and weakness)."""
    from .surface import ArrayMethods

    first = items[0]
    if not isinstance(first, ArrayMethods) or getattr(first, "aval", None) is None or first.aval.shape != ():
        return False
    return all(isinstance(v, ArrayMethods) and getattr(v, "aval", None) == first.aval for v in items)


_wrappers = {name: _constructor(name) for name in CONSTRUCTORS}
_wrappers.update({name: _dtype_function(name) for name in DTYPE_FUNCTIONS})
_wrappers["errstate"] = _errstate
_wrappers.update({name: _matrix_constructor(name) for name in MATRIX_CONSTRUCTORS})
_wrappers.update({name: _converter(name) for name in CONVERTERS})
_wrappers.update({name: _IndexBuilder(name) for name in INDEX_BUILDERS})
_wrappers.update({name: _list_function(name) for name in LIST_FUNCTIONS})
_builtin_wrappers = {name: _python_extremum(name) for name in BUILTINS}


# SciPy modules whose functions a trace replaces (those already imported; see the module docstring)
HOST_MODULES = ("scipy.linalg", "scipy.linalg.lapack", "scipy.linalg.blas", "scipy.ndimage", "scipy.signal",
                "scipy.special", "scipy.stats", "scipy.spatial.distance", "scipy.interpolate", "scipy.integrate",
                "scipy.fft", "scipy.optimize", "scipy.sparse.linalg")
_ROUTINE_MODULES = ("scipy.linalg.lapack", "scipy.linalg.blas")  # (their routines are not in __all__: dir())
_host_entries: dict[str, list] = {}  # module name -> [(name, original, wrapper)], made once


def _host_function(label: str, original):
    def wrapper(*args, **kwargs):
        if _context_kind() == "trace" and _from_user_code():
            from .surface import ArrayMethods

            leaf = next((v for v in pytree.flatten((args, kwargs))[0] if isinstance(v, ArrayMethods)), None)
            if leaf is not None and leaf._can_break():
                try:
                    return leaf._untraced(original, label, args, kwargs, "a SciPy function, run as called", None)
                except UnsupportedOpError:
                    pass  # (results braze cannot hold, an OptimizeResult: SciPy converts the arrays)
        return original(*args, **kwargs)

    try:
        return functools.wraps(original)(wrapper)
    except (AttributeError, TypeError):  # (a Fortran routine has a name and a docstring, not all of a function's)
        wrapper.__name__, wrapper.__doc__ = getattr(original, "__name__", "wrapper"), getattr(original, "__doc__", None)
        return wrapper


def _host_functions() -> list:
    """(module, its entries) for each imported module of HOST_MODULES."""
    import types

    found = []
    for modname in HOST_MODULES:
        module = sys.modules.get(modname)
        if module is None:
            continue
        entries = _host_entries.get(modname)
        if entries is None:
            names = dir(module) if modname in _ROUTINE_MODULES else getattr(module, "__all__", ())
            entries = []
            for name in names:
                fn = getattr(module, name, None)
                if (name.startswith("_") or not callable(fn) or isinstance(fn, (type, types.ModuleType, numpy.ufunc))
                        or getattr(fn, "__module__", "") == __name__):
                    continue
                entries.append((name, fn, _host_function(f"{modname}.{name}", fn)))
            _host_entries[modname] = entries
        found.append((module, entries))
    return found


_installed_host: list = []


def acquire() -> None:
    """Install the wrappers (reference counted: one acquire per trace or tape)."""
    global _active
    with _lock:
        if _active == 0:
            for name in NAMES:
                setattr(numpy, name, _wrappers[name])
            for name in BUILTINS:
                setattr(builtins, name, _builtin_wrappers[name])
            _bit_generator.randbits = _fresh_entropy
            for module, entries in _host_functions():
                for name, original, wrapper in entries:
                    if getattr(module, name, None) is original:  # (one the user replaced stays theirs)
                        setattr(module, name, wrapper)
                        _installed_host.append((module, name, original))
        _active += 1


def release() -> None:
    global _active
    with _lock:
        _active -= 1
        if _active == 0:
            for name in NAMES:
                setattr(numpy, name, _originals[name])
            for name in BUILTINS:
                setattr(builtins, name, _builtin_originals[name])
            _bit_generator.randbits = _randbits
            for module, name, original in _installed_host:
                setattr(module, name, original)
            _installed_host.clear()


@contextlib.contextmanager
def intercepted():
    """The wrappers installed for the duration of a ``with`` block."""
    acquire()
    try:
        yield
    finally:
        release()
