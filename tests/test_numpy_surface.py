"""Every public NumPy function and ``ndarray`` method, called on traced arrays,
either works (and returns what NumPy returns) or raises a ``braze.BrazeError``:
never an AttributeError, TypeError or IndexError from braze's insides.

Each callable is tried with a few argument patterns on a float and an int
array. Where NumPy itself raises for a pattern, braze must raise too (a
BrazeError, or NumPy's own exception type).
"""
import warnings

import numpy as np
import pytest

import braze

X = np.arange(12.0).reshape(3, 4) / 7 + 0.5
XI = np.arange(12).reshape(3, 4)

FUNCTION_PATTERNS = {
    "f(x)": lambda f, x: f(x),
    "f(x, x)": lambda f, x: f(x, x),
    "f(x, 2)": lambda f, x: f(x, 2),
    "f(x, axis=0)": lambda f, x: f(x, axis=0),
}
METHOD_PATTERNS = {
    "m()": lambda m, x: m(),
    "m(0)": lambda m, x: m(0),
    "m(x)": lambda m, x: m(x),
    "m(axis=0)": lambda m, x: m(axis=0),
}

# Functions with side effects on files, global state or the process, and
# iterator/class factories that take no arrays: not array functions.
NOT_ARRAY_FUNCTIONS = {
    "save", "savez", "savez_compressed", "savetxt", "load", "loadtxt", "genfromtxt", "fromfile", "memmap",
    "seterr", "seterrcall", "setbufsize", "set_printoptions", "printoptions", "info", "test", "show_config",
    "show_runtime", "get_include", "add_newdoc", "add_docstring", "add_newdoc_ufunc", "from_dlpack",
    "asmatrix", "bmat", "nditer", "nested_iters", "broadcast", "ndenumerate", "ndindex", "errstate",
    "vectorize", "frompyfunc", "piecewise", "apply_along_axis", "apply_over_axes", "fromfunction",
}
# NumPy's own Python code accepts a traced array where it refuses an ndarray:
# np.dtype(obj) takes any object's .dtype attribute (np.issubdtype(x, x)).
NUMPY_ACCEPTS_DTYPE_ATTRIBUTE = {"issubdtype", "asarray_chkfinite", "require"}
NOT_METHODS = {"dump", "dumps", "tofile", "setflags", "resize", "byteswap", "ctypes", "base", "data", "__deepcopy__"}

FUNCTIONS = sorted(n for n in dir(np) if not n.startswith("_") and callable(getattr(np, n))
                   and not isinstance(getattr(np, n), type) and n not in NOT_ARRAY_FUNCTIONS)
METHODS = sorted(n for n in dir(np.ndarray) if (not n.startswith("__") or n in (
    "__lshift__", "__rshift__", "__ilshift__", "__irshift__", "__divmod__", "__abs__", "__invert__", "__neg__",
    "__pos__", "__matmul__", "__copy__", "__len__", "__iter__", "__contains__", "__round__", "__floordiv__",
    "__mod__", "__pow__", "__array__", "__index__", "__float__", "__int__", "__bool__")) and n not in NOT_METHODS)


def _outcome(run, arr):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            want, numpy_error = run(arr.copy()), None
        except Exception as exc:
            want, numpy_error = None, exc
        try:
            got = braze.compile(run, target="generic")(arr.copy())
        except braze.BrazeError:
            return "braze error", numpy_error, want, None
        except Exception as exc:
            if numpy_error is not None and isinstance(exc, type(numpy_error)):
                return "numpy's error", numpy_error, want, None
            return f"escaped {type(exc).__name__}: {exc}", numpy_error, want, None
    return "works", numpy_error, want, got


UNSPECIFIED_VALUES = ("np.empty", "np.empty_like")  # (their contents are unspecified: shape and dtype only)


def _check(what, run):
    for arr in (X, XI):
        outcome, numpy_error, want, got = _outcome(run, arr)
        assert not outcome.startswith("escaped"), f"{what} on {arr.dtype}: {outcome}"
        if outcome == "works":
            assert numpy_error is None, f"{what} on {arr.dtype}: NumPy raises {numpy_error!r}, braze returned {got!r}"
            if isinstance(want, (np.ndarray, np.generic)):
                if what.startswith(UNSPECIFIED_VALUES):
                    assert (np.shape(got), np.asarray(got).dtype) == (np.shape(want), np.asarray(want).dtype), what
                    continue
                np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=f"{what} on {arr.dtype}")
                assert np.asarray(got).dtype == np.asarray(want).dtype, f"{what} on {arr.dtype}"


@pytest.mark.parametrize("pattern", sorted(FUNCTION_PATTERNS))
@pytest.mark.parametrize("name", FUNCTIONS)
def test_every_numpy_function_works_or_raises_a_braze_error(name, pattern):
    if name in NUMPY_ACCEPTS_DTYPE_ATTRIBUTE and pattern == "f(x, x)":
        return
    call = FUNCTION_PATTERNS[pattern]
    _check(f"np.{name} as {pattern}", lambda a: call(getattr(np, name), a))  # looked up at call time


@pytest.mark.parametrize("pattern", sorted(METHOD_PATTERNS))
@pytest.mark.parametrize("name", METHODS)
def test_every_ndarray_method_works_or_raises_a_braze_error(name, pattern):
    call = METHOD_PATTERNS[pattern]

    def run(a):
        attr = getattr(a, name)
        return call(attr, a) if callable(attr) else attr

    _check(f"ndarray.{name} as {pattern}", run)
