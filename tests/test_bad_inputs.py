"""A catalogue of bad inputs a user can pass to braze, one kind of mistake per test.

Each test checks three things:

1. the exception class (a ``braze.BrazeError`` subclass, or the warning for
   the cache cases, where braze is meant to recover and carry on);
2. the message names what is wrong (op, shapes, dtypes, argument) and
   contains a phrase saying what to do instead;
3. the next valid call of the same compiled function (or of the same API)
   still works and gives the right answer: a failed call leaves no broken
   cache entry, registries and context stacks are restored.

When this catalogue was written, 13 of its cases found bugs (raw NumPy
errors, silently ignored options, INT64_MIN // -1 == 0 on cpu, rank > 20
kernels that did not compile); all are fixed. A new case braze gets wrong
is written as the behaviour it must have and fixed before it lands: a wrong
answer is never marked xfail.

Most cases use the ``generic`` target (no numba compilation); the ``cpu``
ones keep arrays tiny, and compiled functions are shared at module level.
"""
import os
import re
import warnings

import logging

import numpy as np
import pytest
from braze.targets import cpu_cache

import braze
from braze import registry
from braze.core import context_stack, pop_context

THIS_FILE = os.path.basename(__file__)

A34 = np.arange(12.0).reshape(3, 4)
B4 = np.arange(4.0)


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

def shape_re(shape):
    """Matches a shape written as (3, 4), (3,4), [3,4], f64[3, 4], (5,) ..."""
    inner = r"\s*[,x]\s*".join(str(d) for d in shape)
    return rf"[\[(]\s*{inner}\s*,?\s*[\])]"


def assert_names_shape(msg, *shapes):
    for shape in shapes:
        assert re.search(shape_re(shape), msg), (shape, msg)


def assert_advice(msg, *phrases):
    """The message says what to do: at least one of ``phrases`` occurs in it."""
    assert any(p in msg for p in phrases), (phrases, msg)


def assert_here(msg):
    """The message points at the user's line, in this file."""
    assert THIS_FILE in msg, msg


def assert_same(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_allclose(got, want)


def fails(f, args, exc, kwargs=None):
    """Call ``f`` expecting ``exc``; a failed trace must leave no cache entry.
    Returns the message."""
    before = f.cache_info().size
    with pytest.raises(exc) as ei:
        f(*args, **(kwargs or {}))
    assert f.cache_info().size == before, "a failed call left a cache entry behind"
    return str(ei.value)


def recovers(f, args, want, kwargs=None):
    """The next valid call of the same compiled function works."""
    assert_same(f(*args, **(kwargs or {})), want)


def error_or_warning(call):
    """The text of the BrazeError ``call()`` raises, or of the warnings it emits
    ('' when it does neither: the mistake passed silently)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            call()
        except braze.BrazeError as exc:
            return str(exc)
    return " | ".join(str(w.message) for w in caught)


# ---------------------------------------------------------------------------
# shapes
# ---------------------------------------------------------------------------

def _add(x, y):
    return x + y


def _matmul(x, w):
    return x @ w


ADD_CPU = braze.compile(_add, target="cpu")
MATMUL_CPU = braze.compile(_matmul, target="cpu")
MATMUL_GENERIC = braze.compile(_matmul, target="generic")


def test_broadcast_mismatch():
    msg = fails(ADD_CPU, (A34, np.ones(5)), braze.ShapeError)
    assert "add" in msg and "broadcast" in msg
    assert_names_shape(msg, (3, 4), (5,))
    assert_here(msg)
    assert_advice(msg, "reshape one operand", "x[:, None]")
    recovers(ADD_CPU, (A34, B4), A34 + B4)


def test_matmul_contraction_mismatch():
    w = np.ones((5, 2))
    msg = fails(MATMUL_CPU, (A34, w), braze.ShapeError)
    assert "matmul" in msg and "contracts 4 with 5" in msg
    assert_names_shape(msg, (3, 4), (5, 2))
    assert_here(msg)
    assert_advice(msg, "transpose one with .T")
    recovers(MATMUL_CPU, (A34, np.ones((4, 2))), A34 @ np.ones((4, 2)))


def test_matmul_with_a_0d_operand():
    msg = fails(MATMUL_GENERIC, (A34, np.float64(2.0)), braze.ShapeError)
    assert "matmul" in msg and "at least 1-D" in msg
    assert_names_shape(msg, (3, 4))
    assert_advice(msg, "multiply by a scalar with *")
    recovers(MATMUL_GENERIC, (A34, np.ones(4)), A34 @ np.ones(4))


RESHAPE = braze.compile(lambda x: x.reshape(5, 3), target="generic")


def test_reshape_to_incompatible_size():
    msg = fails(RESHAPE, (A34,), braze.ShapeError)
    assert "reshape" in msg and "12 elements" in msg and "15 elements" in msg
    assert_names_shape(msg, (3, 4), (5, 3))
    assert_here(msg)
    assert_advice(msg, "must hold the same number of elements")
    x = np.arange(15.0)
    recovers(RESHAPE, (x,), x.reshape(5, 3))


CONCAT = braze.compile(lambda x, y: np.concatenate([x, y], axis=0), target="generic")


@pytest.mark.parametrize("other", [np.ones((2, 5)), np.ones(4)], ids=["other-dim", "other-rank"])
def test_concatenate_mismatched_operands(other):
    msg = fails(CONCAT, (A34, other), braze.ShapeError)
    assert "concatenate" in msg
    assert_names_shape(msg, (3, 4), other.shape)
    assert_here(msg)
    assert_advice(msg, "must have equal shapes except along axis 0")
    y = np.ones((2, 4))
    recovers(CONCAT, (A34, y), np.concatenate([A34, y]))


@pytest.mark.parametrize("op, fn, axis, target, valid", [
    ("sum", lambda x: x.sum(axis=-3), -3, "generic", np.ones((2, 3, 4))),
    ("max", lambda x: np.max(x, axis=5), 5, "generic", np.arange(6.0).reshape(1, 1, 1, 1, 3, 2)),
    ("softmax", lambda x: braze.nn.softmax(x, axis=2), 2, "cpu", np.arange(8.0).reshape(2, 1, 4)),
], ids=["sum-negative", "max-too-large", "softmax"])
def test_axis_out_of_range(op, fn, axis, target, valid):
    f = braze.compile(fn, target=target)
    msg = fails(f, (A34,), braze.ShapeError)
    # softmax's body reports the reduction it failed in (max); the line is the user's softmax call
    assert re.search(rf"axis {axis} is out of range", msg), msg
    assert_names_shape(msg, (3, 4))
    assert_here(msg)
    assert_advice(msg, "use an axis in [-2, 1]")
    recovers(f, (valid,), fn(valid))


# Each of these is refused by NumPy too; braze's error is a BrazeError *and* an
# instance of the class NumPy raises, so the program's own except clause still works.
NUMPY_CLASS_CASES = {
    "sum-axis": lambda a: a.sum(axis=3),
    "cumsum-axis": lambda a: np.cumsum(a, axis=-3),
    "argmax-axis": lambda a: a.argmax(axis=2),
    "concatenate-axis": lambda a: np.concatenate([a, a], axis=2),
    "transpose-axes": lambda a: a.transpose(0, 2),
    "expand_dims-axis": lambda a: np.expand_dims(a, 4),
    "moveaxis-axis": lambda a: np.moveaxis(a, 0, 3),
    "sort-axis": lambda a: np.sort(a, axis=2),
    "split-axis": lambda a: np.split(a, 2, axis=2),
    "too-many-indices": lambda a: a[0, 0, 0],
    "float-index": lambda a: a[1.0],
    "axis-a-string": lambda a: a.sum(axis="x"),
    "inv-not-square": lambda a: np.linalg.inv(a),
    "solve-not-square": lambda a: np.linalg.solve(a, a[:, 0]),
    "tile-negative": lambda a: np.tile(a, -1),
    "float-index-array": lambda a: a[np.array([0.0, 1.0])],
    "take-along-float-indices": lambda a: np.take_along_axis(a, np.array([[0.0, 1.0]]), axis=1),
    "take-along-not-broadcast": lambda a: np.take_along_axis(a, np.array([[0, 1]]), axis=0),
}


@pytest.mark.parametrize("case", list(NUMPY_CLASS_CASES))
def test_error_is_numpy_s_class(case):
    fn = NUMPY_CLASS_CASES[case]
    x = np.arange(6.0).reshape(2, 3)
    with pytest.raises(Exception) as numpy_error:
        fn(x)
    with pytest.raises(braze.BrazeError) as braze_error:
        braze.compile(fn, target="generic")(x)
    assert isinstance(braze_error.value, type(numpy_error.value)), (braze_error.value, numpy_error.value)
    assert_here(str(braze_error.value))


def test_numpy_s_own_error_with_a_setting_argument_keeps_its_class():
    """A function taking a setting (a str or None) in which NumPy refuses a value:
    braze raised its TraceError (about the setting), which the caller's
    `except ValueError` missed. It is now also NumPy's class."""
    def f(x, method, axis):
        return np.percentile(x, 150.0, method=method, axis=axis)

    x = np.arange(5.0)
    with pytest.raises(ValueError, match="Percentiles must be in the range") as ei:
        braze.compile(f, target="generic")(x, "linear", None)
    assert isinstance(ei.value, braze.TraceError) and "not an array" in str(ei.value)
    with pytest.raises(TypeError):  # (np.tanh of a str: NumPy's TypeError)
        braze.compile(lambda x, s: np.tanh(s) + x, target="generic")(x, "hello")


INDEX10 = braze.compile(lambda x: x[10] * 2.0, target="cpu")


def test_static_index_out_of_range():
    msg = fails(INDEX10, (np.arange(3.0),), braze.ShapeError)
    assert "getitem" in msg and "index 10" in msg and "size 3" in msg
    assert_here(msg)
    assert_advice(msg, "use an index in [-3, 2]")
    x = np.arange(11.0)
    recovers(INDEX10, (x,), x[10] * 2.0)


@pytest.mark.parametrize("target", ["generic", "cpu"])
def test_rank_32_elementwise_works(target):
    """NumPy 2 allows 64 dimensions; 32 unit dimensions must compile and be exact."""
    f = braze.compile(lambda x: x * 2.0 + 1.0, target=target)
    x = np.full((1,) * 32, 3.0)
    assert_same(f(x), x * 2.0 + 1.0)
    recovers(f, (B4,), B4 * 2.0 + 1.0)


def test_rank_32_full_reduction_on_cpu():
    f = braze.compile(lambda x: x.sum(), target="cpu")
    x = np.ones((1,) * 32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got = f(x)
        except braze.BrazeError as exc:  # erroring clearly would be fine too
            assert "32" in str(exc) and "dim" in str(exc), str(exc)
        else:
            assert_same(got, x.sum())
    # a freshly generated kernel is not a corrupt cache entry
    assert not [w for w in caught if "corrupt" in str(w.message)], [str(w.message) for w in caught]
    recovers(f, (np.ones(3),), 3.0)


def test_rank_33_elementwise():
    f = braze.compile(lambda x: x * 2.0 + 1.0, target="generic")
    x = np.full((1,) * 33, 3.0)
    try:
        got = f(x)
    except braze.BrazeError as exc:  # erroring clearly would be fine too
        assert "33" in str(exc), str(exc)
    else:
        assert_same(got, x * 2.0 + 1.0)
    recovers(f, (B4,), B4 * 2.0 + 1.0)


# ---------------------------------------------------------------------------
# dtypes
# ---------------------------------------------------------------------------

DOUBLE_GENERIC = braze.compile(lambda x: x * 2, target="generic", fullgraph=True)
DOUBLE_CPU = braze.compile(lambda x: x * 2, target="cpu", fullgraph=True)


@pytest.mark.parametrize("bad, dtype_text, advice, f", [
    (np.array(["a", "bc"]), "<U2", "pass strings and objects as static arguments", DOUBLE_GENERIC),
    (np.array([1, None], dtype=object), "object", "pass strings and objects as static arguments",
     DOUBLE_GENERIC),
    (np.array(["2020-01-01"], dtype="datetime64[D]"), "datetime64[D]", "convert it with .astype(np.float64)",
     DOUBLE_GENERIC),
    (np.zeros(2, dtype=[("a", "f8"), ("b", "i4")]), "('a', '<f8')", "pass strings and objects as static",
     DOUBLE_GENERIC),
    (np.ones(3, dtype=np.complex128), "complex128", "pass the real and imaginary parts as two float arrays",
     DOUBLE_CPU),
], ids=["str", "object", "datetime64", "structured", "complex-on-cpu"])
def test_unsupported_argument_dtype(bad, dtype_text, advice, f):
    """With ``fullgraph=True`` (no graph breaks), an argument of a dtype braze does
    not compile is an error saying which and what to do."""
    msg = fails(f, (bad,), braze.UnsupportedDTypeError)
    assert "argument x" in msg and dtype_text in msg, msg
    assert "Supported: bool" in msg
    assert_here(msg)
    assert_advice(msg, advice)
    recovers(f, (B4,), B4 * 2)


@pytest.mark.parametrize("target", ["generic", "cpu"])
def test_an_argument_of_a_dtype_braze_does_not_compile_runs_the_call_as_numpy(target, caplog):
    """Complex, string, object and datetime arguments are valid NumPy: the call
    runs as NumPy (a warning says why, once), NumPy's answer or NumPy's error;
    the next call of supported dtypes is compiled."""
    f = braze.compile(lambda x: np.abs(x * 2).sum() if x.dtype.kind in "cfiu" else x[::-1], target=target)
    z = np.array([3 + 4j, -1j, np.nan + 0j])
    with caplog.at_level(logging.WARNING, logger="braze"):
        for _ in range(2):
            got = f(z)
            assert type(got) is np.float64 and np.isnan(got)
            assert f(z[:2]) == 12.0
        assert np.array_equal(f(np.array(["a", "bc"])), np.array(["bc", "a"]))
        days = np.array(["2020-01-01", "2021-06-30"], dtype="datetime64[D]")
        assert np.array_equal(f(days), days[::-1])
    assert caplog.text.count("complex arrays are not compiled yet") == 1, caplog.text
    assert "run as plain NumPy" in caplog.text
    with pytest.raises(TypeError):  # NumPy's own refusal of str * int
        braze.compile(lambda x: x * 2, target=target)(np.array(["a"]))
    assert f(np.arange(3.0)) == 6.0 and f.cache_info().misses == 1  # (only the float call traced)


TAKE = braze.compile(lambda x, i: np.take_along_axis(x, i, axis=1), target="generic")


def test_take_along_axis_with_float_indices():
    msg = fails(TAKE, (A34, np.zeros((3, 1))), braze.DTypeError)
    assert "take_along_axis" in msg
    assert "f64[3,1]" in msg
    assert_here(msg)
    assert_advice(msg, "must be integers")
    idx = np.array([[3], [0], [2]])
    recovers(TAKE, (A34, idx), np.take_along_axis(A34, idx, axis=1))


# ---------------------------------------------------------------------------
# arguments
# ---------------------------------------------------------------------------

TANH = braze.compile(lambda x: np.tanh(x) * 2.0, target="generic")


def test_ragged_nested_list_argument():
    msg = fails(TANH, ([[1.0, 2.0], [3.0]],), braze.BrazeError)
    assert "argument x" in msg and "list" in msg, msg
    assert_advice(msg, "np.asarray(x)", "pass an array", "pass a NumPy array")
    recovers(TANH, (B4,), np.tanh(B4) * 2.0)


ADD_GENERIC = braze.compile(_add, target="generic")

_SIG_ADVICE = ("(x, y)", "takes 2 positional arguments")


@pytest.mark.parametrize("args, kwargs, names", [
    ((A34,), {}, "missing a required argument: 'y'"),
    pytest.param((A34, A34, A34), {}, "too many positional arguments"),
    pytest.param((A34, A34), {"z": A34}, "unexpected keyword argument 'z'"),
], ids=["missing", "too-many", "unknown-keyword"])
def test_wrong_arguments_to_compiled_function(args, kwargs, names):
    msg = fails(ADD_GENERIC, args, braze.BrazeError, kwargs)
    assert "_add" in msg and names in msg, msg
    assert_here(msg)
    if "missing" not in names:  # 'missing y' says what to pass; the others must show the signature
        assert_advice(msg, *_SIG_ADVICE)
    recovers(ADD_GENERIC, (A34, B4), A34 + B4)


@pytest.mark.parametrize("bad", [
    pytest.param("hello"),
    pytest.param(None),
], ids=["str", "None"])
def test_non_array_where_array_expected(bad):
    msg = fails(TANH, (bad,), braze.BrazeError)
    assert "argument x" in msg and type(bad).__name__ in msg, msg
    assert_advice(msg, "static", "pass an array", "np.asarray")
    recovers(TANH, (B4,), np.tanh(B4) * 2.0)


def test_compile_a_non_callable():
    with pytest.raises(braze.BrazeError) as ei:
        braze.compile([1, 2, 3], target="generic")
    msg = str(ei.value)
    assert "got list" in msg
    assert_here(msg)
    assert_advice(msg, "needs a function")
    f = braze.compile(lambda x: x - 1.0, target="generic")
    assert_same(f(B4), B4 - 1.0)


# ---------------------------------------------------------------------------
# static arguments, donation
# ---------------------------------------------------------------------------

def _scale(x, s):
    return x * s


SCALE_STATIC = braze.compile(_scale, target="generic", static_argnums=(1,))


@pytest.mark.parametrize("s", [[1, 2], {"a": 1}], ids=["list", "dict"])
def test_unhashable_static_argument(s):
    msg = fails(SCALE_STATIC, (A34, s), braze.BrazeError)
    assert "static argument s" in msg and "not hashable" in msg
    assert_here(msg)
    assert_advice(msg, "pass a tuple instead of a list", "remove it from static_argnums")
    recovers(SCALE_STATIC, (A34, 3), A34 * 3)


def test_static_arguments_are_keyed_by_type_and_bits():
    """A NaN static hits the cache (keyed by its bits); values that compare equal
    but compute differently are other keys: -0.0 and 0.0, (2,) and (2.0,)."""
    f = braze.compile(lambda x, s: 1.0 / (x * s[0]) + s[1], target="cpu", static_argnums=(1,))
    x = np.array([1, 3], np.int8)
    with np.errstate(divide="ignore", invalid="ignore"):
        for s in ((2, 0), (2.0, 0), (0.0, 1), (-0.0, 1), (1, float("nan")), (1, float("nan"))):
            got, want = f(x, s), 1.0 / (x * s[0]) + s[1]
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
    assert f.cache_info().hits == 1  # (the second NaN)
    g = braze.compile(lambda x, t: x * t[0], target="cpu", static_argnums=(1,))
    assert g(x, (2,)).dtype == np.int8 and g(x, (2.0,)).dtype == np.float64


@pytest.mark.parametrize("option, value, word", [
    ("static_argnums", (3,), "3"),
    ("static_argnames", ("scale",), "scale"),
    ("donate_argnums", (3,), "3"),
], ids=["static_argnums-out-of-range", "static_argnames-unknown", "donate_argnums-out-of-range"])
def test_argument_options_naming_no_parameter(option, value, word):
    target = "cpu" if option == "donate_argnums" else "generic"
    text = error_or_warning(lambda: braze.compile(_scale, target=target, **{option: value})(A34, 2.0))
    assert option in text and word in text, text
    assert_advice(text, "(x, s)", "2 positional", "parameters are")
    f = braze.compile(_scale, target=target)
    assert_same(f(A34, 2.0), A34 * 2.0)


# ---------------------------------------------------------------------------
# targets
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["tpu", "CPU", None, 3], ids=["unknown", "wrong-case", "None", "int"])
def test_unknown_target(name):
    with pytest.raises(braze.TargetError) as ei:
        braze.compile(_add, target=name)
    msg = str(ei.value)
    assert repr(name) in msg
    assert_here(msg)
    assert_advice(msg, "available targets: auto, generic, cpu")
    f = braze.compile(_add, target="generic")
    assert_same(f(A34, B4), A34 + B4)


def test_cuda_target_without_a_gpu():
    try:
        braze.compile(_add, target="cuda")
    except braze.TargetError as exc:
        msg = str(exc)
    else:
        pytest.skip("a CUDA target is available on this machine")
    assert "cuda" in msg
    assert_here(msg)
    assert_advice(msg, "no CUDA GPU", "numba-cuda is not installed")
    assert "NUMBA_ENABLE_CUDASIM=1" in msg and "target='cpu'" in msg  # says how to run it anyway
    f = braze.compile(_add, target="auto")  # "auto" falls back to what this machine has
    assert_same(f(A34, B4), A34 + B4)


# ---------------------------------------------------------------------------
# Python control flow on traced values
# ---------------------------------------------------------------------------

def _if(x, t):
    if t > 0:
        return x
    return -x


def _float(x, s):
    return x * float(s)


def _int(x, n):
    return x[:, : int(n)]


def _bool(x, flag):
    return x * bool(flag)


def _index(x, i):
    return x * [10.0, 20.0, 30.0][i]


@pytest.mark.parametrize("fn, traced, static, what", [
    (_if, np.float64(1.0), 1, "used as a Python bool"),
    (_float, np.float64(2.0), 2, "converted with float()"),
    (_int, np.int64(2), 2, "converted with int()"),
    (_bool, np.bool_(True), True, "used as a Python bool"),
    (_index, np.int64(1), 1, "used as a Python index"),
], ids=["if", "float", "int", "bool", "list-index"])
def test_concretizing_a_traced_value(fn, traced, static, what):
    f = braze.compile(fn, target="generic", fullgraph=True)  # (without it: a graph break, test_graph_breaks)
    msg = fails(f, (A34, traced), braze.ConcretizationError)
    assert what in msg, msg
    assert_here(msg)
    assert_advice(msg, "np.where(cond, a, b)")
    assert_advice(msg, "make the deciding argument static")
    # the same compiled function, with the deciding value static (a Python int/bool)
    recovers(f, (A34, static), fn(A34, static))


# ---------------------------------------------------------------------------
# NumPy functions and keywords braze cannot trace
# ---------------------------------------------------------------------------

_OUT_BUFFER = np.empty((3, 4))

_UNSUPPORTED = {
    "eig": lambda x: np.linalg.eig(x)[1],
    "fft": lambda x: np.fft.fft(x).real,
    "percentile": lambda x: np.percentile(x, 30, axis=-1),
    "mean": lambda x: np.var(x, mean=x.mean(keepdims=True)),
    "out": lambda x: np.exp(x, out=_OUT_BUFFER),
}


def _maybe_unsupported(x, which):
    return _UNSUPPORTED[which](x) if which else x + 1.0


MAYBE = braze.compile(_maybe_unsupported, target="generic", fullgraph=True)  # (else: graph breaks)


@pytest.mark.parametrize("which, names, advice", [
    ("eig", "numpy.linalg.eig is not supported", "define it as a braze.composite and register a kernel"),
    ("fft", "numpy.fft.fft is not supported", "define it as a braze.composite and register a kernel"),
    ("percentile", "numpy.percentile is not supported", "define it as a braze.composite and register a kernel"),
    ("mean", "numpy.var: argument mean=", "leave it out"),
    ("out", "numpy.exp: out= must be a traced array", "assign the result instead"),
])
def test_unsupported_function_or_keyword(which, names, advice):
    msg = fails(MAYBE, (A34, which), braze.UnsupportedOpError)
    assert names in msg, msg
    assert_here(msg)
    assert_advice(msg, advice)
    recovers(MAYBE, (A34, ""), A34 + 1.0)


# ---------------------------------------------------------------------------
# composites
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["badname", 3, "braze.nn."], ids=["one-part", "not-a-string", "trailing-dot"])
def test_composite_name_breaks_the_naming_rule(name):
    with pytest.raises(braze.CompositeError) as ei:
        braze.composite(name)
    msg = str(ei.value)
    assert f"composite name {name!r} breaks the naming rule" in msg
    assert_here(msg)
    assert_advice(msg, "like 'org.semantic.opname'")
    triple = braze.composite("braze.test.bad_inputs.triple")(lambda x: x * 3.0)
    assert_same(braze.compile(lambda x: triple(x) + 1.0, target="generic")(B4), B4 * 3.0 + 1.0)


@braze.composite("braze.test.bad_inputs.shift")
def shift(x, *, by=1.0):
    return x + by


SHIFT = braze.compile(lambda x, **kw: shift(x, **kw), target="generic")


def test_composite_unknown_attribute():
    msg = fails(SHIFT, (A34,), braze.CompositeError, {"nope": 2})
    assert "braze.test.bad_inputs.shift" in msg and "unknown attribute(s) ['nope']" in msg
    assert_here(msg)
    assert_advice(msg, "its attributes (keyword-only parameters) are ['by']")
    recovers(SHIFT, (A34,), A34 + 2, {"by": 2})


# ---------------------------------------------------------------------------
# registered kernels
# ---------------------------------------------------------------------------

COMP = "braze.test.bad_inputs.double"


@braze.composite(COMP)
def double(x):
    return x * 2.0


KDOUBLE = braze.compile(lambda x: double(x) + 1.0, target="generic")


def _unregister_all():
    for entry in registry.kernels(COMP):
        registry.unregister(entry)


def test_register_kernel_bad_name(restore_registry):
    with pytest.raises(braze.CompositeError) as ei:
        braze.register_kernel("double", "generic")(lambda x: x * 2.0)
    msg = str(ei.value)
    assert "'double' breaks the naming rule" in msg
    assert_here(msg)
    assert_advice(msg, "like 'org.semantic.opname'")
    braze.register_kernel(COMP, "generic")(lambda x: x + x)
    assert_same(KDOUBLE(A34), A34 * 2.0 + 1.0)


def test_register_kernel_target_not_a_string(restore_registry):
    with pytest.raises(braze.CompositeError) as ei:
        braze.register_kernel(COMP, None)(lambda x: x * 2.0)
    msg = str(ei.value)
    assert COMP in msg and "got None" in msg
    assert_here(msg)
    assert_advice(msg, "target must be a target name like 'cpu'")
    assert registry.kernels(COMP) == []
    assert_same(KDOUBLE(A34), A34 * 2.0 + 1.0)


def test_register_kernel_for_unknown_target(restore_registry):
    text = error_or_warning(lambda: braze.register_kernel(COMP, "tpu")(lambda x: x * 2.0))
    assert "tpu" in text and COMP in text, text
    assert_advice(text, "available targets", "generic, cpu")
    _unregister_all()

    @braze.register_kernel(COMP, "generic")
    def double_generic(x):
        return x + x

    assert_same(KDOUBLE(A34), A34 * 2.0 + 1.0)
    assert "double_generic" in braze.explain(KDOUBLE, A34)


def _boom(x):
    raise ZeroDivisionError("kernel bug")


def _bad_when(x):
    return x.no_such_attribute > 0


@pytest.mark.parametrize("kernel, opts, exc, says, advice", [
    (lambda x: (x * 2.0)[:2], {}, (braze.KernelError, braze.CompositeError),
     ("returned (f64[2,4])", "returns (f64[3,4])"), "a kernel must return exactly what the body does"),
    (lambda x: (x * 2.0).astype(np.float32), {}, (braze.KernelError, braze.CompositeError),
     ("returned (f32[3,4])", "returns (f64[3,4])"), "a kernel must return exactly what the body does"),
    (lambda x: None, {}, (braze.KernelError, braze.CompositeError),
     ("returned (object[])", "returns (f64[3,4])"), "a kernel must return exactly what the body does"),
    (_boom, {}, braze.KernelError,
     ("kernel _boom", "raised ZeroDivisionError: kernel bug"), f"braze.disable_kernels({COMP!r})"),
    (lambda x: x * 2.0, {"when": _bad_when}, braze.CompositeError,
     ("when= predicate", "raised AttributeError", "(f64[3,4])"), "make it return True or False"),
    (lambda x: (x * 2.0)[:2], {"abstract": lambda x: ((2, 4), np.float64)}, braze.CompositeError,
     ("declares results (f64[2,4])", "returns (f64[3,4])"), "a kernel must return exactly what the body does"),
], ids=["wrong-shape", "wrong-dtype", "returns-None", "raises", "when-raises", "abstract-wrong"])
def test_bad_kernel(restore_registry, kernel, opts, exc, says, advice):
    assert_same(KDOUBLE(A34), A34 * 2.0 + 1.0)  # compiled before the kernel exists
    braze.register_kernel(COMP, "generic", **opts)(kernel)
    with pytest.raises(exc) as ei:
        KDOUBLE(A34)
    msg = str(ei.value)
    assert COMP in msg and THIS_FILE in msg  # the composite, and where the kernel was registered
    for part in says:
        assert part in msg, (part, msg)
    assert_advice(msg, advice)
    _unregister_all()
    assert_same(KDOUBLE(A34), A34 * 2.0 + 1.0)  # the body again, on the same compiled function
    braze.register_kernel(COMP, "generic")(lambda x: x + x)
    assert_same(KDOUBLE(A34), A34 * 2.0 + 1.0)  # and a good kernel is picked up


KDOUBLE_CPU = braze.compile(lambda x: double(x) + 1.0, target="cpu")


def test_kernel_that_raises_on_cpu(restore_registry):
    braze.register_kernel(COMP, "cpu")(_boom)
    with pytest.raises(braze.KernelError) as ei:
        KDOUBLE_CPU(A34)
    msg = str(ei.value)
    assert COMP in msg and "on target cpu" in msg and "ZeroDivisionError" in msg
    assert_advice(msg, f"braze.verify({COMP!r})")
    _unregister_all()
    assert_same(KDOUBLE_CPU(A34), A34 * 2.0 + 1.0)


# ---------------------------------------------------------------------------
# the kernel cache directory
# ---------------------------------------------------------------------------

@pytest.fixture
def fresh_kernels(monkeypatch):
    """As in a fresh process: no kernel loaded in memory yet (restored afterwards)."""
    monkeypatch.setattr(cpu_cache, "_loaded", {})
    monkeypatch.setattr(cpu_cache, "_modules", {})
    return monkeypatch


def _check_fallback(cache_dir, monkeypatch, fn, x):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(cache_dir))
    f = braze.compile(fn, target="cpu")
    with pytest.warns(RuntimeWarning, match="cannot write the kernel cache") as rec:
        got = f(x)
    msg = " ".join(str(w.message) for w in rec)
    assert str(cache_dir) in msg
    assert_advice(msg, "Set BRAZE_CACHE_DIR to a writable directory")
    assert_same(got, fn(x))
    assert_same(f(x + 1.0), fn(x + 1.0))  # and again


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="running as root: chmod cannot make a directory unwritable for root "
                           "(test_cache_dir_unusable_falls_back covers the fallback root-proof)")
def test_read_only_cache_dir_falls_back(tmp_path, fresh_kernels):
    ro = tmp_path / "ro"
    ro.mkdir()
    os.chmod(ro, 0o500)
    try:
        _check_fallback(ro, fresh_kernels, lambda x: np.sqrt(x) * x - 0.5, np.arange(1.0, 5.0))
    finally:
        os.chmod(ro, 0o700)


def test_cache_dir_unusable_falls_back(tmp_path, fresh_kernels):
    """A cache directory that cannot be created (its parent is a file): even root cannot write it."""
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory\n")
    _check_fallback(blocker / "cache", fresh_kernels, lambda x: np.log1p(x) * x + 0.25, np.arange(1.0, 5.0))


def test_corrupt_cache_entry_is_rebuilt(tmp_path, fresh_kernels):
    fresh_kernels.setenv("BRAZE_CACHE_DIR", str(tmp_path))
    fn = lambda x: np.expm1(x) * x - x
    x = np.arange(1.0, 5.0)
    first = braze.compile(fn, target="cpu")
    assert_same(first(x), fn(x))
    modules = sorted(tmp_path.glob("braze_k_*.py"))
    assert modules
    for m in modules:
        m.write_text("# braze kernel garbage\nthis is not python (\n")
    fresh_kernels.setattr(cpu_cache, "_loaded", {})  # a new process finds the damaged entries
    fresh_kernels.setattr(cpu_cache, "_modules", {})
    second = braze.compile(fn, target="cpu")
    with pytest.warns(RuntimeWarning, match="rebuilt corrupt cache entry") as rec:
        got = second(x)
    msg = " ".join(str(w.message) for w in rec)
    assert str(modules[0]) in msg or any(str(m) in msg for m in modules)
    assert "does not match its name" in msg
    assert_same(got, fn(x))
    assert_same(first(x * 2), fn(x * 2))  # the function compiled before still works
    assert "not python" not in modules[0].read_text()  # and the entry was rewritten


# ---------------------------------------------------------------------------
# gradients
# ---------------------------------------------------------------------------

def _sumsq(x):
    return (x * x).sum()


def test_non_persistent_tape_used_twice():
    with braze.GradientTape() as tape:
        x = tape.watch(B4)
        y = (x * x).sum()
    assert_same(tape.gradient(y, x), 2 * B4)
    with pytest.raises(braze.GradientError) as ei:
        tape.gradient(y, x)
    msg = str(ei.value)
    assert "already computed a gradient" in msg
    assert_advice(msg, "braze.GradientTape(persistent=True)")
    with braze.GradientTape(persistent=True) as tape2:
        x = tape2.watch(B4)
        y = (x * x).sum()
    assert_same(tape2.gradient(y, x), 2 * B4)
    assert_same(tape2.gradient(y, x), 2 * B4)


def test_tape_entered_twice():
    tape = braze.GradientTape()
    with tape:
        pass
    with pytest.raises(braze.GradientError) as ei, tape:
        pass
    assert "can be entered once" in str(ei.value)
    assert_advice(str(ei.value), "make a new tape for each `with` block")
    assert len(context_stack()) == 1


def test_tape_watch_outside_its_block():
    tape = braze.GradientTape()
    with pytest.raises(braze.GradientError) as ei:
        tape.watch(B4)
    assert "tape.watch" in str(ei.value)
    assert_advice(str(ei.value), "inside the tape's `with` block")
    with tape:
        x = tape.watch(B4)
        y = np.sum(np.sin(x))
    assert_same(tape.gradient(y, x), np.cos(B4))


def test_tapes_exited_out_of_order():
    outer, inner = braze.GradientTape(), braze.GradientTape()
    depth = len(context_stack())
    outer.__enter__()
    inner.__enter__()
    try:
        with pytest.raises(braze.TraceError) as ei:
            outer.__exit__(None, None, None)
        msg = str(ei.value)
        assert "exited out of order" in msg
        assert_advice(msg, "exit nested `with` blocks in the reverse order")
        inner.__exit__(None, None, None)  # what the message says to do
        outer.__exit__(None, None, None)
    finally:
        while len(context_stack()) > depth:  # never leave tapes on the stack for other tests
            pop_context(context_stack()[-1])
    assert len(context_stack()) == depth
    hits = ADD_GENERIC.cache_info().hits
    recovers(ADD_GENERIC, (A34, B4), A34 + B4)  # eager again: a compiled call, not an inlined one
    assert ADD_GENERIC.cache_info().hits > hits


GRAD_SUMSQ = braze.compile(braze.grad(_sumsq), target="generic")


@pytest.mark.parametrize("bad", [np.arange(3), np.array([True, False])], ids=["int", "bool"])
def test_gradient_with_respect_to_integer_input(bad):
    msg = fails(GRAD_SUMSQ, (bad,), braze.GradientError)
    assert f"dtype {bad.dtype}" in msg and "shape (" in msg
    assert_here(msg)
    assert_advice(msg, "cast with .astype(np.float64)")
    recovers(GRAD_SUMSQ, (np.arange(3.0),), 2 * np.arange(3.0))


def test_grad_of_non_scalar_output():
    g = braze.grad(lambda x: (x * x).sum(axis=-1))
    with pytest.raises(braze.GradientError) as ei:
        g(A34)
    msg = str(ei.value)
    assert "must return a scalar" in msg
    assert_names_shape(msg, (3,))
    assert_here(msg)
    assert_advice(msg, "reduce it (e.g. .sum() or .mean())", "use braze.vjp")
    assert_same(g(B4), 2 * B4)  # 1-D input: a scalar output, fine


def test_grad_argnums_out_of_range():
    g = braze.grad(lambda x, y: (x * y).sum(), argnums=2)
    with pytest.raises(braze.GradientError) as ei:
        g(B4, B4)
    msg = str(ei.value)
    assert "argnums=2" in msg and "2 positional argument(s)" in msg
    assert_here(msg)
    g1 = braze.grad(lambda x, y: (x * y).sum(), argnums=1)
    assert_same(g1(B4, 3 * B4), B4)


def test_has_aux_function_not_returning_a_pair():
    g = braze.grad(lambda x, aux: ((x * x).sum(), x.max()) if aux else (x * x).sum(), has_aux=True)
    with pytest.raises(braze.GradientError) as ei:
        g(B4, False)
    msg = str(ei.value)
    assert "has_aux=True" in msg
    assert_here(msg)
    assert_advice(msg, "must return (value, aux)")
    grads, aux = g(B4, True)
    assert_same(grads, 2 * B4)
    assert aux == 3.0


def test_vjp_cotangent_with_wrong_shape():
    _, back = braze.vjp(lambda x: np.tanh(x) * 2.0, A34)
    with pytest.raises(braze.GradientError) as ei:
        back(np.ones(3))
    msg = str(ei.value)
    assert "cotangent of shape (3,)" in msg
    assert_names_shape(msg, (3, 4))
    assert_here(msg)
    assert_advice(msg, "cotangents have the shape of the outputs")
    (got,) = back(np.ones((3, 4)))  # the same vjp function still works
    assert_same(got, 2 * (1 - np.tanh(A34) ** 2))


def test_vjp_cotangent_with_wrong_structure():
    _, back = braze.vjp(lambda x: x * 2.0, B4)
    with pytest.raises(braze.GradientError) as ei:
        back((np.ones(4), np.ones(4)))
    msg = str(ei.value)
    assert "structure (*, *)" in msg and "returned *" in msg
    assert_here(msg)
    (got,) = back(np.ones(4))
    assert_same(got, np.full(4, 2.0))


COMPILED_LOSS = braze.compile(lambda x: np.sum(np.tanh(x)), target="generic")


def test_compiled_vjp_cotangent_with_wrong_shape():
    _, back = COMPILED_LOSS.vjp(B4)
    with pytest.raises(braze.GradientError) as ei:
        back(np.ones(3))
    msg = str(ei.value)
    assert "cotangent of shape (3,)" in msg and "result of shape ()" in msg
    assert_here(msg)
    assert_advice(msg, "cotangents have the shape of the results")
    (got,) = back(1.0)
    assert_same(got, 1 - np.tanh(B4) ** 2)


# ---------------------------------------------------------------------------
# f.into(out)
# ---------------------------------------------------------------------------

INTO = braze.compile(lambda x: x * 2.0, target="generic")


def _into_recovers():
    buf = np.empty((3, 4))
    assert INTO.into(buf)(A34) is buf
    assert_same(buf, A34 * 2.0)


def test_into_wrong_structure():
    with pytest.raises(braze.BrazeError) as ei:
        INTO.into((np.empty((3, 4)), np.empty(3)))(A34)
    msg = str(ei.value)
    assert "into" in msg and "structure (*, *)" in msg and "returns *" in msg
    assert_here(msg)
    assert_advice(msg, "pass NumPy arrays shaped like the results")
    _into_recovers()


def test_into_wrong_shape():
    with pytest.raises(braze.ShapeError) as ei:
        INTO.into(np.empty((4, 3)))(A34)
    msg = str(ei.value)
    assert "into" in msg
    assert_names_shape(msg, (4, 3), (3, 4))
    assert_advice(msg, "shaped like the results")
    _into_recovers()


def test_into_wrong_dtype():
    with pytest.raises(braze.DTypeError) as ei:
        INTO.into(np.empty((3, 4), np.int64))(A34)
    msg = str(ei.value)
    assert "into" in msg and "int64" in msg and "float64" in msg
    assert_advice(msg, "shaped like the results", "dtype")
    _into_recovers()


# ---------------------------------------------------------------------------
# integer arithmetic edge cases, read-only inputs
# ---------------------------------------------------------------------------

def _divs(x, y):
    return x // y, x % y, np.fmod(x, y)


DIVS_CPU = braze.compile(_divs, target="cpu")


@pytest.mark.parametrize("dtype", [np.int64, np.int8, np.uint16, np.float64])
def test_division_by_zero_matches_numpy(dtype):
    signed = np.dtype(dtype).kind != "u"
    x = np.array([7, -7 if signed else 6, 0, 5, 9], dtype)
    y = np.array([0, 0, 0, 2, -4 if signed else 4], dtype)
    with np.errstate(all="ignore"):
        want = _divs(x, y)
        got = DIVS_CPU(x, y)  # no crash, no trap: NumPy's answer (integers: 0; floats: inf/nan)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
        assert g.dtype == w.dtype
    x2, y2 = np.array([8, -9, 3]), np.array([3, 2, -2])
    for g, w in zip(DIVS_CPU(x2, y2), _divs(x2, y2)):
        assert_same(g, w)


FLOORDIV_CPU = braze.compile(lambda x, y: x // y, target="cpu")


def test_int64_min_floor_divided_by_minus_one_matches_numpy():
    x = np.array([np.iinfo(np.int64).min, 7])
    y = np.array([-1, -1])
    with np.errstate(all="ignore"):
        want = x // y
        got = FLOORDIV_CPU(x, y)
    assert_same(got, want)
    recovers(FLOORDIV_CPU, (np.array([7, -7]), np.array([2, 2])), np.array([3, -4]))


def _update_first(x):
    x[0] = 5.0
    return x * 2.0


@pytest.mark.parametrize("target", ["generic", "cpu"])
def test_in_place_update_of_read_only_input(target):
    f = braze.compile(_update_first, target=target)
    ro = np.arange(4.0)
    ro.flags.writeable = False
    with pytest.raises(braze.BrazeError) as ei:
        f(ro)
    msg = str(ei.value)
    assert re.search(r"\bx\b", msg) and "read-only" in msg, msg
    assert_advice(msg, "copy", "writeable", "writable")
    assert_same(ro, np.arange(4.0))  # untouched
    w = np.arange(4.0)
    assert_same(f(w), np.array([10.0, 2.0, 4.0, 6.0]))
    assert_same(w, np.array([5.0, 1.0, 2.0, 3.0]))  # the caller's array is updated, as in NumPy


@pytest.mark.parametrize("target", ["cpu", "generic"])
def test_index_arrays_that_do_not_broadcast_raise_numpys_index_error(target):
    """``a[i, mask]`` whose index lengths differ: an IndexError as NumPy's (it
    was a bare ValueError from deep inside), a BrazeError naming the shapes."""
    a, i, m = np.ones((3, 4)), np.array([0, 2]), np.array([True, False, True, True])
    with pytest.raises(IndexError):
        a[i, m]
    with pytest.raises(IndexError, match=r"\(2,\) \(3,\)") as info:
        braze.compile(lambda a, i, m: a[i, m], target=target)(a, i, m)
    assert isinstance(info.value, braze.BrazeError)


@pytest.mark.parametrize("key", [1, -3, (0, 5)], ids=["past the end", "before the start", "second axis"])
def test_an_index_out_of_bounds_when_traced_is_an_index_error(key):
    """x[1] of a one-row array: NumPy's IndexError (it was a ShapeError, which
    ``except IndexError`` in the function did not catch)."""
    def first_or_zero(x):
        try:
            return x[key] * 2
        except IndexError:
            return np.zeros(())

    x = np.ones((1, 3))
    got, want = braze.compile(first_or_zero, target="cpu")(x), first_or_zero(x)
    np.testing.assert_array_equal(got, want)
    with pytest.raises(IndexError, match="out of bounds") as info:
        braze.compile(lambda x: x[key], target="cpu")(x)
    assert isinstance(info.value, braze.ShapeError)


@pytest.mark.parametrize("make", [lambda x, s: np.zeros(int(s)) + x.sum(), lambda x, s: np.ones((2, int(s))) * x[0],
                                  lambda x, s: np.full(int(s), 1.0) * x[0]], ids=["zeros", "ones", "full"])
def test_a_negative_dimension_from_a_value_raises_and_the_next_call_works(make):
    """``np.zeros(int(s))`` with s = -1.5 re-specialized on -1 and kept that
    program: every later call raised NumPy's ValueError before its guard could
    send it back to tracing. Now the shape is refused when traced, as NumPy's
    ValueError, and later calls give NumPy's values."""
    f, x = braze.compile(make, target="cpu"), np.arange(1.0, 5.0)
    np.testing.assert_array_equal(f(x, 2.5), make(x, 2.5))
    with pytest.raises(ValueError, match="negative dimensions") as info:
        f(x, -1.5)
    assert isinstance(info.value, braze.ShapeError)
    for s in (2.5, 0.5, 4.0):
        np.testing.assert_array_equal(f(x, s), make(x, s))


def test_a_program_that_raises_at_its_first_run_is_traced_again(monkeypatch):
    """Whatever made a new program's first run raise, it is not kept: the
    next call traces again rather than meeting the same error."""
    from braze import pipeline

    f, x = braze.compile(lambda x, s: x * int(s), target="cpu"), np.arange(3.0)
    real = pipeline.run

    def failing(*args, **kwargs):
        raise ValueError("a failure the program carries")

    monkeypatch.setattr(pipeline, "run", failing)
    with pytest.raises(ValueError, match="carries"):
        f(x, 2.0)
    monkeypatch.setattr(pipeline, "run", real)
    np.testing.assert_array_equal(f(x, 2.0), x * 2)
    np.testing.assert_array_equal(f(x, 2.0), x * 2)  # (the fast path)
    assert f.cache_info().misses == 2, f.cache_info()
