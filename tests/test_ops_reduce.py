"""Reductions through `braze.compile(..., target="generic")` vs NumPy.

Each reduction is called both as `np.func(x, ...)` and as the method
`x.func(...)`, over axis None / int / negative int / tuple, keepdims on and
off, five dtypes, and shapes with size-1 and size-0 dimensions. Where NumPy
raises (e.g. `max` of an empty axis) braze must raise as well.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import braze

try:
    from _compare import check
except ImportError:  # tests/ imported as a package
    from tests._compare import check

DTYPES = ["float32", "float64", "int32", "int64", "bool"]
REDUCTIONS = ["sum", "prod", "max", "min", "mean", "var", "std", "argmax", "argmin", "any", "all"]
INT_AXIS_ONLY = {"argmax", "argmin"}

SHAPES = [(), (5,), (3, 4), (2, 3, 4), (1, 4), (3, 1), (0,), (2, 0, 3)]


def make(dtype, shape, seed=0, *, nan=False):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return np.asarray(rng.random(shape) < 0.6)
    if dt.kind in "iu":
        # small magnitudes keep int prod exact and free of overflow
        return np.asarray(rng.integers(-3, 4, size=shape).astype(dt))
    a = rng.uniform(-2.0, 2.0, size=shape).astype(dt)
    if nan and a.size:
        flat = a.reshape(-1)
        flat[rng.integers(0, a.size, size=max(1, a.size // 4))] = np.nan
    return np.asarray(a)


def axis_options(ndim, name):
    opts = [None]
    opts += list(range(ndim))
    if ndim:
        opts.append(-1)
    if ndim >= 3:
        opts.remove(1)
        opts.append(-ndim)
    if name not in INT_AXIS_ONLY:
        if ndim == 2:
            opts += [(0, 1), (-1, 0)]
        if ndim >= 3:
            opts += [(0, 2), (-1, -2)]
        if ndim >= 1:
            opts.append(())
    return opts


def _reduce_fn(name, axis, keepdims, style):
    """`keepdims="both"` returns the (keepdims=False, keepdims=True) pair."""
    if keepdims == "both":
        f0, f1 = _reduce_fn(name, axis, False, style), _reduce_fn(name, axis, True, style)

        def fn(x):
            return f0(x), f1(x)
    elif style == "function":
        op = getattr(np, name)

        def fn(x):
            return op(x, axis=axis, keepdims=keepdims)
    else:
        def fn(x):
            return getattr(x, name)(axis=axis, keepdims=keepdims)
    fn.__name__ = f"{style}_{name}"
    return fn


def _numpy_outcome(fn, x):
    """'ok' or the exception class NumPy raises."""
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            fn(x)
    except Exception as e:  # noqa: BLE001 - we record what NumPy does
        return type(e)
    return "ok"


def _axid(axis):
    if axis is None:
        return "None"
    if isinstance(axis, tuple):
        return "t" + "_".join(map(str, axis)) if axis else "t"
    return str(axis)


def _cases():
    cases = []
    for name in REDUCTIONS:
        for dt in DTYPES:
            for shape in SHAPES:
                for axis in axis_options(len(shape), name):
                    sid = "x".join(map(str, shape)) or "0d"
                    cases.append(pytest.param(name, dt, shape, axis, id=f"{name}-{dt}-{sid}-ax{_axid(axis)}"))
    return cases


def _assert_matches_or_raises(fn, x):
    outcome = _numpy_outcome(fn, x)
    if outcome == "ok":
        check(fn, x)
    else:
        # NumPy raises here (e.g. max of an empty axis): braze must raise too.
        with pytest.raises(Exception), warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            braze.compile(fn, target="generic")(x)


@pytest.mark.parametrize("style", ["function", "method"])
@pytest.mark.parametrize("name,dtype,shape,axis", _cases())
def test_reduction(name, dtype, shape, axis, style):
    """keepdims False and True are both returned by one traced function."""
    x = make(dtype, shape, seed=len(shape))
    _assert_matches_or_raises(_reduce_fn(name, axis, "both", style), x)


@pytest.mark.parametrize("name", REDUCTIONS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("axis", [None, 0, -1])
def test_reduction_with_nan(name, dtype, axis):
    x = make(dtype, (4, 5), seed=7, nan=True)
    fn = _reduce_fn(name, axis, False, "function")
    out = check(fn, x)
    if name in ("sum", "max", "min", "mean") and axis is None:
        assert np.isnan(np.asarray(out))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_reduction_with_inf(dtype):
    x = np.array([[np.inf, 1.0, -np.inf], [2.0, np.inf, 3.0], [-0.0, 0.0, -1.0]], dtype=dtype)

    def fn(x):
        return (x.sum(axis=0), x.max(axis=1), x.min(), np.argmax(x, axis=0), np.argmin(x),
                x.mean(axis=1), x.prod(axis=1), x.any(axis=0), x.all(axis=1))

    check(fn, x)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool"])
@pytest.mark.parametrize("ddof", [0, 1, 2])
@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 1)])
@pytest.mark.parametrize("func", ["var", "std"])
def test_var_std_ddof(func, ddof, axis, dtype):
    x = make(dtype, (3, 5), seed=3)

    def fn(x):
        return getattr(np, func)(x, axis=axis, ddof=ddof), getattr(x, func)(axis=axis, ddof=ddof, keepdims=True)

    check(fn, x)


@pytest.mark.parametrize("func", ["var", "std"])
def test_var_std_ddof_equal_to_n(func):
    """ddof == N divides by zero: NumPy gives inf/nan (with a warning)."""
    x = make("float64", (2, 3), seed=3)

    def fn(x):
        return getattr(np, func)(x, axis=0, ddof=2)

    check(fn, x)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "bool"])
@pytest.mark.parametrize("axis", [None, 0, -1, (0, 1)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_amax_amin(dtype, axis, keepdims):
    x = make(dtype, (3, 4), seed=9)

    def fn(x):
        return np.amax(x, axis=axis, keepdims=keepdims), np.amin(x, axis=axis, keepdims=keepdims)

    check(fn, x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reductions_without_keywords(dtype):
    """Positional axis and default arguments."""
    x = make(dtype, (3, 4), seed=11)

    def fn(x):
        return (np.sum(x), np.sum(x, 0), x.sum(1), x.max(0), np.min(x, 1), x.mean(), x.argmax(),
                np.argmin(x, 0), x.any(), np.all(x, 1), x.prod(-1), np.var(x), x.std(0))

    check(fn, x)


@pytest.mark.parametrize("name", ["sum", "prod", "any", "all", "mean"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis", [((0,), None), ((0,), 0), ((2, 0), 1), ((2, 0), 0), ((0, 3), None)])
def test_empty_reductions_with_identity(name, dtype, shape, axis):
    """Reductions with an identity (or mean's NaN) on empty inputs: compare values."""
    x = make(dtype, shape)
    check(_reduce_fn(name, axis, False, "function"), x)


@pytest.mark.parametrize("name", ["max", "min", "argmax", "argmin", "amax", "amin"])
@pytest.mark.parametrize("shape,axis", [((0,), None), ((0,), 0), ((2, 0), 1), ((0, 3), 0)])
def test_empty_reductions_without_identity_raise(name, shape, axis):
    x = make("float64", shape)
    op = getattr(np, name)

    def fn(x):
        return op(x, axis=axis)

    with pytest.raises(ValueError):
        fn(x)
    with pytest.raises(Exception):
        braze.compile(fn, target="generic")(x)


@pytest.mark.parametrize("dtype", ["int32", "bool", "float32"])
def test_sum_prod_accumulator_dtype(dtype):
    """NumPy sums int32/bool into int64 and keeps float32 as float32."""
    x = make(dtype, (4, 6), seed=13)

    def fn(x):
        return x.sum(), np.sum(x, axis=0), x.prod(axis=1), np.mean(x, axis=1)

    out = check(fn, x)
    if dtype in ("int32", "bool"):
        assert np.asarray(out[0]).dtype == np.int64


@pytest.mark.parametrize("dtype", ["int32", "float32", "float64"])
def test_reduction_dtype_argument(dtype):
    x = make(dtype, (3, 4), seed=15)

    def fn(x):
        return np.sum(x, axis=0, dtype=np.float64), x.mean(dtype=np.float64), np.prod(x, axis=1, dtype=np.int64)

    check(fn, x)


@pytest.mark.parametrize("layout", ["T", "step", "neg"])
@pytest.mark.parametrize("name", ["sum", "max", "argmax", "mean", "var", "all"])
def test_reduction_noncontiguous_input(layout, name):
    base = make("float64", (6, 4), seed=17)
    x = {"T": base.T, "step": base[::2], "neg": base[::-1, ::-1]}[layout]
    for axis in (None, 0, 1):
        check(_reduce_fn(name, axis, False, "method"), x)


def test_argmax_ties_take_first_index():
    x = np.array([[1, 3, 3], [2, 2, 0], [5, 5, 5]], dtype=np.int32)

    def fn(x):
        return np.argmax(x, axis=1), np.argmin(x, axis=1), x.argmax(), x.argmin(axis=0)

    out = check(fn, x)
    assert list(np.asarray(out[0])) == [1, 0, 0]


def test_reduction_of_expression():
    """A reduction fused after elementwise work, and a reduction's result reused."""
    x = make("float32", (4, 5), seed=19)

    def fn(x):
        m = x.max(axis=-1, keepdims=True)
        e = np.exp(x - m)
        s = e.sum(axis=-1, keepdims=True)
        return e / s, (x * x).mean(axis=0), np.abs(x).sum() / x.size

    check(fn, x)


def test_reduction_over_python_list_of_axes_is_rejected_like_numpy():
    """NumPy takes only int or tuple for axis; a list raises TypeError."""
    x = make("float64", (3, 4))

    def fn(x):
        return np.sum(x, axis=[0, 1])

    with pytest.raises(TypeError):
        fn(x)
    with pytest.raises(Exception):
        braze.compile(fn, target="generic")(x)


@pytest.mark.parametrize("axis", [2, -3, (0, 0)])
def test_reduction_bad_axis_raises(axis):
    x = make("float64", (3, 4))

    def fn(x):
        return x.sum(axis=axis)

    with pytest.raises(Exception):
        fn(x)
    with pytest.raises(Exception):
        braze.compile(fn, target="generic")(x)

