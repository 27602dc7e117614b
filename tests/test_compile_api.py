"""The public ``braze.compile`` API: decorator forms, pytrees, static arguments,
the cache and its reasons, captures, unrolled loops, in-place write-back,
eager ``braze.numpy`` and composites.  Everything runs on the generic target.
"""

import math
import re
from collections import namedtuple

import dataclasses

import numpy as np
import pytest

import braze
import braze.numpy as bnp


def eq(got, want):
    """Same dtype, shape and values (0-d results may be NumPy scalars)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def top_level_op_lines(text):
    """Lines of the outermost graph body (two-space indent, one op each)."""
    return [ln for ln in text.splitlines() if re.match(r"^  %\S+", ln)]


X = np.arange(12, dtype=np.float32).reshape(3, 4) / 7


# ---------------------------------------------------------------------------
# decorator forms
# ---------------------------------------------------------------------------

def _poly(x):
    return x * x + 2 * x - 1


def test_compile_as_function_call():
    f = braze.compile(_poly, target="generic")
    eq(f(X), _poly(X))


def test_compile_as_bare_decorator():
    @braze.compile
    def f(x):
        return x * x + 2 * x - 1

    eq(f(X), _poly(X))
    assert hasattr(f, "cache_info") and hasattr(f, "lower")


def test_compile_as_decorator_with_arguments():
    @braze.compile(target="generic")
    def f(x):
        return x * x + 2 * x - 1

    eq(f(X), _poly(X))
    assert f.cache_info().misses == 1


def test_compile_keyword_arguments_are_accepted():
    f = braze.compile(lambda x, y: x - y, target="generic")
    eq(f(X, y=X.T[0][:, None]), X - X.T[0][:, None])
    eq(f(y=X, x=2 * X), X)


# ---------------------------------------------------------------------------
# pytrees in and out
# ---------------------------------------------------------------------------

Point = namedtuple("Point", ["x", "y"])


def test_namedtuple_in_and_out():
    f = braze.compile(lambda p: Point(p.x + p.y, p.x * p.y), target="generic")
    a, b = X, X[::-1]
    out = f(Point(a, b))
    assert type(out) is Point
    eq(out.x, a + b)
    eq(out.y, a * b)


def test_dict_in_and_out():
    def fn(d):
        return {"sum": d["a"] + d["b"], "diff": d["a"] - d["b"]}

    f = braze.compile(fn, target="generic")
    out = f({"a": X, "b": 2 * X})
    assert type(out) is dict and set(out) == {"sum", "diff"}
    eq(out["sum"], 3 * X)
    eq(out["diff"], -X)


def test_nested_lists_tuples_and_none():
    def fn(tree, nothing):
        assert nothing is None
        (a, b), (c,) = tree
        return [a + b, (c * 2, None)]

    f = braze.compile(fn, target="generic")
    out = f([[X, X + 1], (X.sum(axis=0),)], None)
    assert type(out) is list and len(out) == 2
    assert type(out[1]) is tuple and out[1][1] is None
    eq(out[0], 2 * X + 1)
    eq(out[1][0], 2 * X.sum(axis=0))


def test_scalars_in_pytrees_int_static_float_traced():
    def fn(d):
        y = d["x"]
        for _ in range(d["n"]):   # int leaf: static, drives the Python loop
            y = y * d["s"]        # float leaf: traced
        return y

    f = braze.compile(fn, target="generic")
    eq(f({"x": X, "n": 2, "s": 3.0}), X * 9)
    eq(f({"x": X, "n": 2, "s": 0.5}), X * 0.25)   # new float: no retrace
    assert f.cache_info().misses == 1
    eq(f({"x": X, "n": 3, "s": 0.5}), X * 0.125)  # new int: retrace
    info = f.cache_info()
    assert info.misses == 2 and "new static" in info.reasons[-1]


def test_scalar_result_leaf():
    f = braze.compile(lambda x: (x + 1, x.shape[0]), target="generic")
    out = f(X)
    assert type(out) is tuple
    eq(out[0], X + 1)
    assert int(np.asarray(out[1])) == 3


@pytest.mark.parametrize("target", ["generic", "cpu"])
def test_static_results_come_back_as_they_were(target):
    """Strings the function computed from static facts, returned as such."""
    def describe(x):
        return x * 2, x.dtype.name, (x + 1).dtype.str, "done", {"kind": x.dtype.kind, "n": x.ndim}

    for x in (np.arange(4.0), np.arange(3, dtype=np.int32), np.ones(2, np.float32)):
        f = braze.compile(describe, target=target)
        for _ in range(2):  # (the compiled call too)
            got, want = f(x), describe(x)
            eq(got[0], want[0])
            assert got[1:] == want[1:]


# ---------------------------------------------------------------------------
# static arguments
# ---------------------------------------------------------------------------

def _repeat(x, n):
    for _ in range(n):
        x = x + 1
    return x


def test_python_int_is_static_by_default():
    f = braze.compile(_repeat, target="generic")
    eq(f(X, 2), X + 2)
    eq(f(X, 5), X + 5)
    eq(f(X, 2), X + 2)
    info = f.cache_info()
    assert (info.misses, info.hits, info.size) == (2, 1, 2)
    assert "new static" in info.reasons[1]


def test_python_bool_is_static_by_default():
    def fn(x, negate):
        if negate:
            return -x
        return x

    f = braze.compile(fn, target="generic")
    eq(f(X, True), -X)
    eq(f(X, False), X)
    assert f.cache_info().misses == 2


def _branch_on_scale(x, scale):
    if scale > 1.0:         # Python control flow on the argument
        return x * scale
    return x - scale


def test_static_argnums_makes_a_float_static():
    f = braze.compile(_branch_on_scale, target="generic", static_argnums=(1,))
    eq(f(X, 2.0), X * 2.0)
    eq(f(X, 0.5), X - 0.5)
    eq(f(X, 2.0), X * 2.0)
    info = f.cache_info()
    assert (info.misses, info.hits) == (2, 1)
    assert "new static" in info.reasons[1]


def test_static_argnames_with_keyword_and_string():
    def fn(x, *, mode, eps):
        y = x.sum(axis=0) if mode == "sum" else x.max(axis=0)
        return y + eps

    f = braze.compile(fn, target="generic", static_argnames=("mode", "eps"))
    eq(f(X, mode="sum", eps=0.5), X.sum(axis=0) + 0.5)
    eq(f(X, mode="max", eps=0.5), X.max(axis=0) + 0.5)
    eq(f(X, mode="max", eps=0.25), X.max(axis=0) + 0.25)  # static float: retrace
    info = f.cache_info()
    assert info.misses == 3
    assert all("new static" in r for r in info.reasons[1:])


def test_python_float_is_traced_and_weakly_typed():
    f = braze.compile(lambda x, s: x * s, target="generic")
    x32 = X.astype(np.float32)
    eq(f(x32, 0.5), x32 * 0.5)      # float32 stays float32 (NEP 50 weak scalar)
    eq(f(x32, 3.25), x32 * 3.25)    # new value, same signature
    info = f.cache_info()
    assert (info.misses, info.hits, info.size) == (1, 1, 1)


def test_numpy_scalar_is_traced_and_strongly_typed():
    f = braze.compile(lambda x, s: x * s, target="generic")
    x32 = X.astype(np.float32)
    eq(f(x32, np.float32(2.0)), x32 * np.float32(2.0))
    eq(f(x32, np.float32(4.0)), x32 * np.float32(4.0))
    assert f.cache_info().misses == 1
    eq(f(x32, np.float64(2.0)), x32 * np.float64(2.0))  # float64 result
    assert f.cache_info().misses == 2
    assert "new dtype" in f.cache_info().reasons[1]


# ---------------------------------------------------------------------------
# cache_info / clear_cache
# ---------------------------------------------------------------------------

def test_cache_info_counts_and_reasons():
    f = braze.compile(lambda x: np.tanh(x) * 2, target="generic")
    info = f.cache_info()
    assert (info.hits, info.misses, info.size) == (0, 0, 0)
    assert list(info.reasons) == []

    a = np.ones((2, 8), np.float32)
    f(a)
    f(a + 1)
    f(np.ones((4, 8), np.float32))   # new shape
    f(np.ones((4, 8), np.float64))   # new dtype
    f(a)                             # first signature again: hit
    info = f.cache_info()
    assert (info.hits, info.misses, info.size) == (2, 3, 3)
    assert len(info.reasons) == 3
    assert all(isinstance(r, str) for r in info.reasons)
    assert "first call" in info.reasons[0]
    assert "new shape" in info.reasons[1]
    assert "new dtype" in info.reasons[2]
    # the shape reason names the argument and both shapes
    assert "x" in info.reasons[1] and "4" in info.reasons[1] and "2" in info.reasons[1]


def test_cache_info_new_structure():
    f = braze.compile(lambda t: sum(t[1:], t[0]), target="generic")
    eq(f((X, X)), 2 * X)
    eq(f((X, X, X)), 3 * X)
    eq(f([X, X]), 2 * X)
    info = f.cache_info()
    assert info.misses == 3
    assert "new structure" in info.reasons[1]
    assert "new structure" in info.reasons[2]


def test_cache_info_new_structure_for_dict_keys():
    f = braze.compile(lambda d: {k: v * 2 for k, v in d.items()}, target="generic")
    f({"a": X})
    out = f({"a": X, "b": X + 1})
    eq(out["b"], 2 * (X + 1))
    assert "new structure" in f.cache_info().reasons[1]


def test_clear_cache():
    f = braze.compile(lambda x: x + 1, target="generic")
    f(X)
    f(X)
    f.clear_cache()
    assert f.cache_info().size == 0
    eq(f(X), X + 1)
    assert f.cache_info().size == 1
    assert f.cache_info().misses >= 1


def test_each_compiled_function_has_its_own_cache():
    f = braze.compile(lambda x: x + 1, target="generic")
    g = braze.compile(lambda x: x + 1, target="generic")
    f(X)
    assert g.cache_info().size == 0
    g(X)
    g(X)
    assert f.cache_info().hits == 0 and g.cache_info().hits == 1


# ---------------------------------------------------------------------------
# captures: passed by reference at each call, never baked in
# ---------------------------------------------------------------------------

GLOBAL_W = np.ones(4, np.float32)


def _uses_global(x):
    return x * GLOBAL_W


def test_closure_capture_is_read_at_each_call():
    w = np.full(4, 2.0, np.float32)

    def fn(x):
        return x * w + 1

    f = braze.compile(fn, target="generic")
    eq(f(X), X * 2 + 1)
    w[:] = 3.0
    eq(f(X), X * 3 + 1)
    w[1] = -1.0
    eq(f(X), fn(X))
    info = f.cache_info()
    assert (info.misses, info.hits) == (1, 2)


def test_global_capture_is_read_at_each_call():
    old = GLOBAL_W.copy()
    try:
        f = braze.compile(_uses_global, target="generic")
        eq(f(X), X * old)
        GLOBAL_W[:] = [1, 2, 3, 4]
        eq(f(X), X * np.array([1, 2, 3, 4], np.float32))
        assert f.cache_info().misses == 1
    finally:
        GLOBAL_W[:] = old


def test_capture_is_not_a_constant_in_the_graph():
    w = np.array([11.5, 22.5, 33.5, 44.5], np.float32)
    f = braze.compile(lambda x: x + w, target="generic")
    text = f.lower(X).graph
    assert "22.5" not in text, text


# ---------------------------------------------------------------------------
# Python loops unroll
# ---------------------------------------------------------------------------

def test_loops_unroll_into_the_graph():
    def fn(x, n):
        for _ in range(n):
            x = np.exp(x) - 1
        return x

    f = braze.compile(fn, target="generic")
    x = X / 10
    eq(f(x, 3), fn(x, 3))
    text = f.lower(x, 3).graph
    assert len(re.findall(r"=\s*exp\s", text)) == 3, text


def test_loop_over_static_shape():
    def fn(x):
        acc = np.zeros_like(x[0])
        for i in range(x.shape[0]):
            acc = acc + x[i] * (i + 1)
        return acc

    eq(braze.compile(fn, target="generic")(X), fn(X))


# ---------------------------------------------------------------------------
# in-place updates of INPUT arrays are written back to the caller's arrays
# ---------------------------------------------------------------------------

def _check_inplace(fn, *args):
    ref_args = [np.copy(a) if isinstance(a, np.ndarray) else a for a in args]
    want = fn(*ref_args)
    f = braze.compile(fn, target="generic")
    got = f(*args)
    for a, r in zip(args, ref_args):
        if isinstance(a, np.ndarray):
            eq(a, r)
    return got, want


def test_inplace_iadd_on_input():
    def fn(a, b):
        a += b
        return a * 2

    a, b = X.copy(), np.ones(4, np.float32)
    got, want = _check_inplace(fn, a, b)
    eq(got, want)
    eq(a, X + 1)
    eq(b, np.ones(4, np.float32))  # untouched


def test_inplace_iadd_keeps_input_dtype():
    def fn(a, b):
        a *= b   # float32 *= float64 is allowed (same_kind) and stays float32
        return None

    a = X.copy()
    got, _ = _check_inplace(fn, a, np.full((3, 4), 0.5))
    assert got is None
    assert a.dtype == np.float32


def test_inplace_slice_setitem():
    def fn(a, v):
        a[1:-1] = v
        a[0, ::2] = -1
        return a.sum()

    a = X.copy()
    got, want = _check_inplace(fn, a, np.arange(4, dtype=np.float32))
    eq(got, want)
    assert a[1, 3] == 3 and a[0, 2] == -1


def test_inplace_mask_setitem():
    def fn(a, m):
        a[m] = 0
        a[a > 1] = 1
        return a

    a = np.linspace(-2, 2, 12).reshape(3, 4)
    m = (np.arange(12).reshape(3, 4) % 3) == 0
    got, want = _check_inplace(fn, a, m)
    eq(got, want)
    assert np.all(a[m] == 0) and a.max() == 1


def test_inplace_out_full_slice_returns_none():
    def fn(x, out):
        out[:] = np.tanh(x) * 2

    out = np.empty_like(X)
    got, _ = _check_inplace(fn, X, out)
    assert got is None
    eq(out, np.tanh(X) * 2)


def test_inplace_writeback_on_every_call():
    def fn(a):
        a[0] += 10

    f = braze.compile(fn, target="generic")
    for start in (0.0, 5.0):
        a = np.full((2, 3), start)
        f(a)
        eq(a, np.array([[start + 10] * 3, [start] * 3]))
    assert f.cache_info().hits == 1


def test_inplace_into_noncontiguous_input_view():
    def fn(a):
        a[1:] = a[:-1] * 2

    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    ref = base.copy()
    fn(ref[:, ::2])
    braze.compile(fn, target="generic")(base[:, ::2])
    eq(base, ref)


def test_inplace_uses_old_values_on_the_right():
    def fn(u):
        u[1:] = u[1:] + u[:-1]   # RHS is evaluated before the write, as in NumPy

    u = np.arange(6, dtype=np.int64)
    ref = u.copy()
    fn(ref)
    braze.compile(fn, target="generic")(u)
    eq(u, ref)


# ---------------------------------------------------------------------------
# eager use of braze.numpy
# ---------------------------------------------------------------------------

def test_braze_numpy_functions_run_eagerly_on_numpy_arrays():
    out = bnp.exp(X)
    assert isinstance(out, np.ndarray)
    eq(out, np.exp(X))
    eq(bnp.sum(X, axis=0), np.sum(X, axis=0))
    eq(bnp.matmul(X, X.T), X @ X.T)
    eq(bnp.where(X > 0.5, X, 0.0), np.where(X > 0.5, X, 0.0))
    eq(bnp.maximum(X, 0.5), np.maximum(X, 0.5))


def test_braze_numpy_erf_eager():
    x = np.linspace(-2, 2, 9)
    want = np.array([math.erf(v) for v in x])
    got = bnp.erf(x)
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    assert bnp.erf(x.astype(np.float32)).dtype == np.float32


def test_braze_numpy_inside_compile_matches_numpy_spelling():
    def with_np(x):
        return np.tanh(x).sum(axis=-1)

    def with_bnp(x):
        return bnp.sum(bnp.tanh(x), axis=-1)

    eq(braze.compile(with_bnp, target="generic")(X), with_np(X))


# ---------------------------------------------------------------------------
# composites
# ---------------------------------------------------------------------------

@braze.composite("braze.test.scale")
def scale(x, *, k=2.0):
    return x * k


@braze.composite("braze.test.clipped_scale")
def clipped_scale(x, *, k=2.0, lo=-1.0):
    if k > 1.0:   # attributes are static: Python control flow on them is fine
        x = x - 0.0
    return np.maximum(scale(x, k=k), lo)


def test_composite_records_one_node():
    def fn(x):
        return scale(x, k=3.0) + 1

    f = braze.compile(fn, target="generic")
    eq(f(X), X * 3.0 + 1)
    lines = [ln for ln in top_level_op_lines(f.lower(X).graph) if "braze.test.scale" in ln]
    assert len(lines) == 1, f.lower(X).graph
    assert "composite" in lines[0]
    assert "k=3.0" in lines[0]


def test_composite_in_braze_trace():
    g = braze.trace(lambda x: scale(x), X)
    text = str(g)
    lines = [ln for ln in top_level_op_lines(text) if "braze.test.scale" in ln]
    assert len(lines) == 1 and "composite" in lines[0], text
    assert "k=2.0" in lines[0]


def test_composite_attributes_are_part_of_the_node():
    def fn(x):
        return scale(x, k=2.0) + scale(x, k=5.0)

    f = braze.compile(fn, target="generic")
    eq(f(X), X * 7.0)
    lines = [ln for ln in top_level_op_lines(f.lower(X).graph) if "composite" in ln]
    assert len(lines) == 2
    assert any("k=2.0" in ln for ln in lines) and any("k=5.0" in ln for ln in lines)


def test_composite_eager_runs_body_on_numpy():
    out = scale(X, k=4.0)
    assert isinstance(out, np.ndarray)
    eq(out, X * 4.0)
    out = clipped_scale(X - 1, k=3.0, lo=-0.5)
    assert isinstance(out, np.ndarray)
    eq(out, np.maximum((X - 1) * 3.0, -0.5))


def test_nested_composite_is_one_outer_node():
    def fn(x):
        return clipped_scale(x, k=3.0, lo=0.25)

    f = braze.compile(fn, target="generic")
    eq(f(X), np.maximum(X * 3.0, 0.25))
    top = top_level_op_lines(f.lower(X).graph)
    composites = [ln for ln in top if "composite" in ln]
    assert len(composites) == 1, f.lower(X).graph
    assert "braze.test.clipped_scale" in composites[0]
    assert not any("braze.test.scale" in ln for ln in top)


def test_composite_result_dtype_follows_numpy():
    x64 = X.astype(np.float64)
    eq(braze.compile(lambda x: scale(x, k=0.5), target="generic")(X), X * 0.5)
    eq(braze.compile(lambda x: scale(x, k=0.5), target="generic")(x64), x64 * 0.5)


@pytest.mark.parametrize("name", ["a.b", "org.semantic.op_name", "braze.nn.softmax2"])
def test_composite_valid_names(name):
    @braze.composite(name)
    def op(x):
        return x + 1

    eq(op(X), X + 1)
    eq(braze.compile(lambda x: op(x), target="generic")(X), X + 1)


@pytest.mark.parametrize("name", ["softmax", "a..b", "1a.b", "a.", ".a", "a.b-c", "a. b", ""])
def test_composite_bad_names_fail_at_decoration(name):
    with pytest.raises(braze.CompositeError):
        @braze.composite(name)
        def op(x):
            return x


def test_a_numpy_ufunc_compiles_as_the_function_itself():
    """``braze.compile(np.tanh)``: the call passes only the arguments given (a
    ufunc refuses its own defaults, dtype= beside signature=, so every call failed)."""
    x = np.linspace(-2, 2, 9)
    for ufunc, args in ((np.tanh, (x,)), (np.add, (x, 1)), (np.maximum, (x.astype(np.int32), np.int32(1)))):
        f = braze.compile(ufunc, target="cpu")
        for _ in range(2):
            got, want = f(*args), ufunc(*args)
            assert got.dtype == want.dtype
            np.testing.assert_allclose(got, want, rtol=4e-16)  # (braze's tanh: within its ulp bound)
    out = np.empty_like(x)
    assert braze.compile(np.exp, target="cpu")(x, out=out) is out
    np.testing.assert_allclose(out, np.exp(x), rtol=4e-16)


def test_calls_with_numbers_keywords_and_defaults_take_the_fast_path(monkeypatch):
    """A call of flat arguments (arrays, Python and NumPy numbers, strings,
    keywords, defaults) seen before skips binding the signature (it cost
    ~45 us a call against ~4 us); each call still reads its own values."""
    def step(u, dt, *, c=0.5, mode="a", scale=2.0):
        return u * dt + c * scale if mode == "a" else u - dt

    f = braze.compile(step, target="cpu")
    u, v = np.ones(4), np.arange(4.0)
    calls = [((u, 0.1), {}), ((v, 0.3), {"c": 0.25}), ((u,), {"dt": np.float32(2.0), "mode": "a"}),
             ((v, np.float64(0.5)), {"mode": "b"}), ((u,), {"c": 1.5, "dt": 0.2, "scale": np.float64(3.0)})]
    for args, kwargs in calls:  # traced, then fast
        np.testing.assert_array_equal(f(*args, **kwargs), step(*args, **kwargs))
    split = braze.api.calling.Signature.split
    monkeypatch.setattr(braze.api.calling.Signature, "split",
                        lambda *a, **k: pytest.fail("the fast path bound the signature"))
    for args, kwargs in calls:
        for scale in (1.0, 3.0):  # new values of the dynamic numbers: the same program, read anew
            args = (args[0] * scale,) + tuple(a * scale if isinstance(a, float) else a for a in args[1:])
            kwargs = {k: a * scale if isinstance(a, float) else a for k, a in kwargs.items()}
            np.testing.assert_array_equal(f(*args, **kwargs), step(*args, **kwargs))
    monkeypatch.setattr(braze.api.calling.Signature, "split", split)
    for args, kwargs in (((u, 2), {}), ((u, 0.1), {"mode": "b"}), ((u, True), {}), ((u, 0.1), {"c": np.ones(4)})):
        np.testing.assert_array_equal(f(*args, **kwargs), step(*args, **kwargs))  # (new kinds: traced)


def test_the_fast_path_keeps_static_numbers_and_aliased_keywords_exact():
    f = braze.compile(lambda x, a, *, b: x * a + b, target="cpu", static_argnames=("a",))
    x = np.ones(3)
    for a in (2.0, -0.0, 0.0, 2.0, 3.5):  # (static floats: keyed by their bits, never a stale trace)
        got = f(x, a, b=1.0)
        np.testing.assert_array_equal(got, x * a + 1.0)
        assert np.array_equal(np.signbit(got), np.signbit(x * a + 1.0))

    def shift(x, y):
        x += 1.0
        return x + y

    g = braze.compile(shift, target="cpu")
    a, b = np.zeros(3), np.ones(3)
    for _ in range(2):
        np.testing.assert_array_equal(g(x=a, y=b), np.ones(3) * (a[0] + 1.0))
    a2 = np.zeros(3)
    np.testing.assert_array_equal(g(x=a2, y=a2), np.full(3, 2.0))  # (y is x: it sees the update)


def test_programs_with_guards_take_the_fast_path_and_retrace_when_a_guard_fails(monkeypatch):
    """A graph break's guard (here the number of bins a count found) is checked
    after a fast-path run; a failed one traces again, as the slow path does,
    and after MAX_RESPECIALIZATIONS the call signature runs as NumPy."""
    from braze.api import MAX_RESPECIALIZATIONS

    def counts(labels, w):
        return np.bincount(labels, weights=w) * 2.0

    f = braze.compile(counts, target="cpu")
    w = np.ones(6)
    first = np.array([0, 1, 1, 2, 2, 2])
    np.testing.assert_array_equal(f(first, w), counts(first, w))
    split = braze.api.calling.Signature.split
    monkeypatch.setattr(braze.api.calling.Signature, "split",
                        lambda *a, **k: pytest.fail("the fast path bound the signature"))
    again = np.array([2, 1, 0, 2, 1, 0])  # (the same number of bins: the guard holds)
    np.testing.assert_array_equal(f(again, w * 3), counts(again, w * 3))
    monkeypatch.setattr(braze.api.calling.Signature, "split", split)
    for k in range(4, 4 + MAX_RESPECIALIZATIONS + 2):  # a new number of bins each call
        labels = np.array([0, 1, k - 1, 2, 2, 1])
        np.testing.assert_array_equal(f(labels, w), counts(labels, w))
    assert any("re-specialized" in r for r in f.cache_info().reasons)


@dataclasses.dataclass
class _State:
    u: np.ndarray
    v: np.ndarray
    t: float = 0.0
    name: str = "s"
    history: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class _Params:
    dt: float
    nu: float
    n: int = 3


def _advance(s, p):
    u = s.u + p.dt * p.nu * s.v
    return _State(u, s.v * 0.5, s.t + p.dt, s.name[: p.n], [u.sum()])


@pytest.mark.parametrize("target", ["cpu", "generic"])
def test_dataclass_arguments_and_results_are_pytrees(target):
    """Dataclass instances (frozen or not; unhashable ones were refused as
    statics) flatten to their fields like namedtuples: arrays and floats
    traced, ints and strings static, and a returned one is rebuilt."""
    f = braze.compile(_advance, target=target)
    s, p = _State(np.ones(4), np.arange(4.0), name="abc", history=[np.float64(0.0)]), _Params(0.1, 2.0)
    for _ in range(3):
        got, want = f(s, p), _advance(s, p)
        assert type(got) is _State and type(got.t) is type(want.t) and got.name == want.name
        for a, b in ((got.u, want.u), (got.v, want.v), (got.t, want.t)):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(got.history[0], want.history[0], rtol=1e-15)  # (a sum)
        s = got
    assert f.cache_info().misses == 1
    assert f(s, _Params(0.1, 2.0, n=2)).name == "ab"  # (a static field changed: traced again)


def test_setting_a_field_of_a_dataclass_argument_runs_as_numpy():
    """The function receives a rebuilt instance; a field set on it would not
    reach the caller's, so the call runs as NumPy (and the caller's changes)."""
    def tick(s, dt):
        s.t = s.t + dt
        return s.u * 2

    f = braze.compile(tick, target="cpu")
    s = _State(np.ones(2), np.ones(2))
    for k in range(1, 3):
        np.testing.assert_array_equal(f(s, 0.5), np.full(2, 2.0))
        assert s.t == 0.5 * k


def test_ordered_and_default_dicts_come_back_as_their_own_types():
    from collections import OrderedDict, defaultdict

    def f(x, cfg):
        d = OrderedDict()
        d["b"], d["a"] = x * cfg["scale"], x + 1
        e = defaultdict(list)
        e["sum"] = x.sum()
        return d, e, cfg

    g = braze.compile(f, target="cpu")
    cfg = OrderedDict(scale=2.0)
    for _ in range(2):
        d, e, c = g(np.ones(2), cfg)
        assert type(d) is OrderedDict and list(d) == ["b", "a"] and type(c) is OrderedDict
        assert type(e) is defaultdict and e.default_factory is list and e["missing"] == []
        np.testing.assert_array_equal(d["b"], np.full(2, 2.0))
