"""Every braze error class, triggered by a real bad input.

For trace-time errors the message must name the op / shapes / dtypes involved
and point at the offending line of *this* file; afterwards the same compiled
function must still work on a valid call (a failing trace leaves no cache
entry behind).  Offending lines carry a ``# <marker>`` comment and
``line_of(marker)`` finds their number, so editing this file cannot silently
break the line checks.
"""

import os
import re

import numpy as np
import pytest

import braze

THIS_FILE = os.path.basename(__file__)


def line_of(marker):
    with open(__file__) as fh:
        hits = [i for i, ln in enumerate(fh, 1) if ln.rstrip().endswith(f"# <{marker}>")]
    assert len(hits) == 1, marker
    return hits[0]


def assert_points_at(msg, marker):
    lineno = line_of(marker)
    assert re.search(rf"{re.escape(THIS_FILE)}\D{{0,12}}\b{lineno}\b", msg), (lineno, msg)


def shape_re(shape):
    """Matches a shape written as (3, 4), (3,4), [3,4], [3, 4], (5,) ..."""
    inner = r"\s*[,x]\s*".join(str(d) for d in shape)
    return rf"[\[(]\s*{inner}\s*,?\s*[\])]"


def assert_names_shape(msg, shape):
    assert re.search(shape_re(shape), msg), (shape, msg)


def assert_recovers(f, *args, want):
    """The next valid call works and the failed trace left no entry."""
    got = f(*args)
    np.testing.assert_allclose(np.asarray(got), want)
    assert np.asarray(got).dtype == np.asarray(want).dtype
    assert f.cache_info().size == 1


A34 = np.arange(12.0).reshape(3, 4)
B4 = np.arange(4.0)
B5 = np.arange(5.0)


# ---------------------------------------------------------------------------
# hierarchy
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", [
    "ConcretizationError", "ShapeError", "DTypeError", "UnsupportedOpError",
    "TargetError", "CompositeError",
])
def test_error_classes_derive_from_braze_error(name):
    cls = getattr(braze, name)
    assert issubclass(cls, braze.BrazeError) and cls is not braze.BrazeError
    assert issubclass(braze.BrazeError, Exception)


# ---------------------------------------------------------------------------
# ShapeError
# ---------------------------------------------------------------------------

def _bad_add(x, y):
    z = x * 2
    return z + y  # <broadcast>


def test_broadcast_mismatch_is_shape_error():
    f = braze.compile(_bad_add, target="generic")
    with pytest.raises(braze.ShapeError) as ei:
        f(A34, B5)
    msg = str(ei.value)
    assert "add" in msg
    assert_names_shape(msg, (3, 4))
    assert_names_shape(msg, (5,))
    assert_points_at(msg, "broadcast")
    assert_recovers(f, A34, B4, want=_bad_add(A34, B4))


def _bad_matmul(x, w):
    h = np.tanh(x)
    return h @ w  # <matmul>


def test_matmul_mismatch_is_shape_error():
    f = braze.compile(_bad_matmul, target="generic")
    with pytest.raises(braze.ShapeError) as ei:
        f(A34, np.ones((5, 2)))
    msg = str(ei.value)
    assert "matmul" in msg
    assert_names_shape(msg, (3, 4))
    assert_names_shape(msg, (5, 2))
    assert_points_at(msg, "matmul")
    assert_recovers(f, A34, np.ones((4, 2)), want=_bad_matmul(A34, np.ones((4, 2))))


def _bad_reshape(x):
    return x.reshape(5, 3) + 1  # <reshape>


def test_reshape_to_incompatible_size_is_shape_error():
    f = braze.compile(_bad_reshape, target="generic")
    with pytest.raises(braze.ShapeError) as ei:
        f(A34)
    msg = str(ei.value)
    assert "reshape" in msg
    assert_names_shape(msg, (3, 4))
    assert_names_shape(msg, (5, 3))
    assert_points_at(msg, "reshape")
    assert_recovers(f, np.arange(15.0), want=_bad_reshape(np.arange(15.0)))


def _bad_axis(x):
    return x.sum(axis=2)  # <axis>


def test_out_of_range_axis():
    f = braze.compile(_bad_axis, target="generic")
    with pytest.raises(braze.BrazeError) as ei:
        f(A34)
    msg = str(ei.value)
    assert "axis" in msg and "2" in msg
    assert "sum" in msg
    assert_points_at(msg, "axis")
    x3 = np.ones((2, 3, 4))
    assert_recovers(f, x3, want=_bad_axis(x3))


def _bad_concat(x, y):
    return np.concatenate([x, y], axis=0)  # <concat>


def test_concatenate_mismatch_is_shape_error():
    f = braze.compile(_bad_concat, target="generic")
    with pytest.raises(braze.ShapeError) as ei:
        f(A34, np.ones((2, 5)))
    msg = str(ei.value)
    assert "concatenate" in msg
    assert_names_shape(msg, (3, 4))
    assert_names_shape(msg, (2, 5))
    assert_points_at(msg, "concat")
    assert_recovers(f, A34, np.ones((2, 4)), want=_bad_concat(A34, np.ones((2, 4))))


# ---------------------------------------------------------------------------
# ConcretizationError
# ---------------------------------------------------------------------------

def _branch(x):
    if x.sum() > 0:  # <if>
        return x
    return -x


def _loop(x):
    while x.max() > 1:  # <while>
        x = x / 2
    return x


def _to_bool(x):
    return x * bool(x[0, 0])  # <bool>


def _to_int(x):
    return x[:, : int(x[0, 1])]  # <int>


def _to_float(x, s):
    return x * float(s)  # <float>


@pytest.mark.parametrize("fn, marker, args", [
    (_branch, "if", (A34,)),
    (_loop, "while", (A34,)),
    (_to_bool, "bool", (A34,)),
    (_to_int, "int", (A34,)),
    (_to_float, "float", (A34, np.float64(2.0))),
])
def test_concretization_errors(fn, marker, args):
    f = braze.compile(fn, target="generic", fullgraph=True)
    with pytest.raises(braze.ConcretizationError) as ei:
        f(*args)
    msg = str(ei.value)
    assert_points_at(msg, marker)
    assert "np.where" in msg
    assert "static" in msg


def test_concretization_error_then_static_argument_works():
    f = braze.compile(_to_float, target="generic", fullgraph=True)
    with pytest.raises(braze.ConcretizationError):
        f(A34, np.float64(2.0))
    g = braze.compile(_to_float, target="generic", static_argnums=(1,))
    assert_recovers(g, A34, 2.0, want=A34 * 2.0)


def test_failed_trace_leaves_no_entry_then_valid_signature_works():
    f = braze.compile(_branch, target="generic", fullgraph=True)
    with pytest.raises(braze.ConcretizationError):
        f(A34)
    assert f.cache_info().size == 0
    with pytest.raises(braze.ConcretizationError):
        f(A34)  # still an error, not a half-built cache entry


# ---------------------------------------------------------------------------
# UnsupportedOpError
# ---------------------------------------------------------------------------

def _eig(x):
    return np.linalg.eig(x)[0] + 1  # <eig>


def _histogram(x):
    return np.histogram(x, bins=3)[0]  # <histogram>


def _percentile(x):
    return np.percentile(x, 30, axis=-1) * 2  # <percentile>


@pytest.mark.parametrize("fn, marker, name", [
    (_eig, "eig", "eig"),
    (_histogram, "histogram", "histogram"),
    (_percentile, "percentile", "percentile"),
])
def test_unsupported_numpy_function(fn, marker, name):
    f = braze.compile(fn, target="generic", fullgraph=True)
    x = np.eye(3) * 2
    with pytest.raises(braze.UnsupportedOpError) as ei:
        f(x)
    msg = str(ei.value)
    assert re.search(rf"\b{name}\b", msg), msg
    assert_points_at(msg, marker)


def _add_where(x, m):
    return np.add(x, 1.0, where=m)  # <where_kw>


def test_unsupported_keyword_where():
    """where= without out= leaves NumPy's masked-out elements unset: refused, pointing at the call."""
    f = braze.compile(_add_where, target="generic", fullgraph=True)
    with pytest.raises(braze.UnsupportedOpError) as ei:
        f(A34, A34 > 3)
    msg = str(ei.value)
    assert re.search(r"\bwhere=", msg) and "add" in msg
    assert_points_at(msg, "where_kw")


OUT_BUF = np.empty((3, 4))


def _add_out(x, y):
    return np.add(x, y, out=OUT_BUF)  # <out_kw>


def test_unsupported_keyword_out_with_numpy_array():
    f = braze.compile(_add_out, target="generic", fullgraph=True)
    with pytest.raises(braze.UnsupportedOpError) as ei:
        f(A34, B4)
    msg = str(ei.value)
    assert re.search(r"\bout\b", msg) and "add" in msg
    assert_points_at(msg, "out_kw")


def _mask_getitem(x):
    return x[x > 3] * 2  # <mask>


def test_traced_boolean_mask_getitem_is_unsupported():
    f = braze.compile(_mask_getitem, target="generic", fullgraph=True)
    with pytest.raises(braze.UnsupportedOpError) as ei:
        f(A34)
    msg = str(ei.value)
    assert "np.where" in msg
    assert_points_at(msg, "mask")


# ---------------------------------------------------------------------------
# DTypeError: arguments braze cannot trace
# ---------------------------------------------------------------------------

def _double(x):
    return x * 2


@pytest.mark.parametrize("bad, words", [
    (np.array(["a", "bc"]), ("<U", "str", "unicode", "U2")),
    (np.array([1, None], dtype=object), ("object",)),
    (np.ones(3, dtype=np.complex128), ("complex",)),
])
def test_unsupported_argument_dtype(bad, words):
    f = braze.compile(_double, target="generic", fullgraph=True)  # (else the call runs as NumPy)
    with pytest.raises(braze.DTypeError) as ei:
        f(bad)
    msg = str(ei.value)
    assert any(w in msg for w in words), msg
    assert_recovers(f, B4, want=B4 * 2)


def test_unsupported_dtype_inside_pytree():
    f = braze.compile(lambda d: d["a"] + d["b"], target="generic", fullgraph=True)
    with pytest.raises(braze.DTypeError) as ei:
        f({"a": B4, "b": np.ones(4, np.complex64)})
    assert "complex" in str(ei.value)
    assert_recovers(f, {"a": B4, "b": B4}, want=2 * B4)


# ---------------------------------------------------------------------------
# TargetError
# ---------------------------------------------------------------------------

def test_unknown_target_lists_available_targets():
    with pytest.raises(braze.TargetError) as ei:
        f = braze.compile(_double, target="tpu")
        f(B4)
    msg = str(ei.value)
    assert "tpu" in msg
    assert "generic" in msg


def test_unknown_target_in_decorator_form():
    with pytest.raises(braze.TargetError) as ei:
        @braze.compile(target="tpu")
        def f(x):
            return x

        f(B4)
    assert "generic" in str(ei.value)


# ---------------------------------------------------------------------------
# CompositeError
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["softmax", "a..b", "1a.b", "nn.soft max", "nn.soft-max"])
def test_bad_composite_name(name):
    with pytest.raises(braze.CompositeError) as ei:
        @braze.composite(name)
        def op(x):
            return x

    assert name in str(ei.value)


@braze.composite("braze.test.errors.shift")
def shift(x, *, by=1.0):
    return x + by


def _shift_unhashable(x):
    return shift(x, by=[1.0, 2.0])  # <attr>


def test_unhashable_composite_attribute():
    f = braze.compile(_shift_unhashable, target="generic")
    with pytest.raises(braze.CompositeError) as ei:
        f(A34)
    msg = str(ei.value)
    assert "braze.test.errors.shift" in msg
    assert re.search(r"\bby\b", msg)
    ok = braze.compile(lambda x: shift(x, by=2.0), target="generic")
    assert_recovers(ok, A34, want=A34 + 2.0)


# ---------------------------------------------------------------------------
# unhashable static arguments
# ---------------------------------------------------------------------------

class Unhashable:
    __hash__ = None


def _static_user(x, cfg):
    return x + 1


@pytest.mark.parametrize("cfg", [np.ones(3), Unhashable()], ids=["ndarray", "object"])
def test_unhashable_static_argument(cfg):
    f = braze.compile(_static_user, target="generic", static_argnums=(1,))
    with pytest.raises(braze.BrazeError) as ei:
        f(A34, cfg)
    assert "hash" in str(ei.value).lower()
    assert_recovers(f, A34, 3, want=A34 + 1)


def test_unhashable_static_argname():
    f = braze.compile(lambda x, *, cfg: x + 1, target="generic", static_argnames=("cfg",))
    with pytest.raises(braze.BrazeError) as ei:
        f(A34, cfg=Unhashable())
    msg = str(ei.value)
    assert "cfg" in msg and "hash" in msg.lower()
    got = f(A34, cfg="ok")
    np.testing.assert_allclose(got, A34 + 1)
    assert f.cache_info().size == 1
