"""Comparison helpers shared by the op test suites.

`assert_same(actual, expected)` is the one question every op test asks: does
the braze result have the same dtype, shape and values as NumPy's? Integers
and booleans must match exactly; floats match to a tolerance scaled to their
dtype, with NaN in the same places and infinities equal (same sign).
Sequences (lists / tuples, e.g. from `np.split`) and dicts are compared
element by element.
"""

from __future__ import annotations

import warnings

import numpy as np

# Relative tolerance per floating dtype: a few ulps at float32 (transcendentals
# and reassociated sums may differ in the last bits), tight at float64.
_RTOL = {
    np.dtype(np.float16): 2e-3,
    np.dtype(np.float32): 1e-5,
    np.dtype(np.float64): 1e-12,
    np.dtype(np.complex64): 1e-5,
    np.dtype(np.complex128): 1e-12,
}


def float_rtol(dtype) -> float:
    """The relative tolerance assert_same uses for `dtype`."""
    return _RTOL.get(np.dtype(dtype), 0.0)


def _describe(x) -> str:
    a = np.asarray(x)
    return f"{type(x).__name__}(dtype={a.dtype}, shape={a.shape})"


def assert_same(actual, expected, *, rtol=None, atol=None, check_signed_zero=False, path="result"):
    """Assert `actual` has the same dtype, shape and values as `expected`.

    0-d results may be NumPy scalars or 0-d arrays on either side; both go
    through `np.asarray`. `rtol`/`atol` override the per-dtype float defaults
    (`atol` defaults to `rtol`, i.e. an absolute tolerance relative to 1).
    """
    if isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)), (
            f"{path}: expected a {type(expected).__name__} of {len(expected)}, got {type(actual).__name__}"
        )
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != expected {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, rtol=rtol, atol=atol, check_signed_zero=check_signed_zero, path=f"{path}[{i}]")
        return
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: expected a dict, got {type(actual).__name__}"
        assert set(actual) == set(expected), f"{path}: keys {sorted(actual)} != {sorted(expected)}"
        for k in expected:
            assert_same(actual[k], expected[k], rtol=rtol, atol=atol,
                        check_signed_zero=check_signed_zero, path=f"{path}[{k!r}]")
        return

    assert isinstance(actual, (np.ndarray, np.generic)), (
        f"{path}: expected a NumPy array or scalar, got {type(actual).__module__}.{type(actual).__name__}"
    )
    exp = np.asarray(expected)
    act = np.asarray(actual)
    assert act.dtype == exp.dtype, f"{path}: dtype {act.dtype} != expected {exp.dtype} ({_describe(actual)})"
    assert act.shape == exp.shape, f"{path}: shape {act.shape} != expected {exp.shape} ({_describe(actual)})"

    kind = exp.dtype.kind
    if kind in "biuSUV":
        if not np.array_equal(act, exp):
            bad = np.argwhere(act != exp) if act.ndim else np.zeros((1, 0), int)
            first = tuple(bad[0]) if len(bad) else ()
            raise AssertionError(
                f"{path}: values differ ({len(bad)} of {exp.size}); first at {first}: "
                f"{act[first]!r} != expected {exp[first]!r}\nactual={act!r}\nexpected={exp!r}"
            )
        return
    if kind == "M" or kind == "m":
        assert np.array_equal(act, exp, equal_nan=True), f"{path}: {act!r} != {exp!r}"
        return
    if kind not in "fc":
        raise AssertionError(f"{path}: unexpected dtype {exp.dtype} in comparison")

    r = float_rtol(exp.dtype) if rtol is None else rtol
    a_tol = r if atol is None else atol
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        a_nan, e_nan = np.isnan(act), np.isnan(exp)
        if not np.array_equal(a_nan, e_nan):
            raise AssertionError(
                f"{path}: NaN positions differ\nactual={act!r}\nexpected={exp!r}"
            )
        a_inf, e_inf = np.isinf(act), np.isinf(exp)
        if not np.array_equal(a_inf, e_inf) or not np.array_equal(act[e_inf], exp[e_inf]):
            raise AssertionError(
                f"{path}: infinities differ\nactual={act!r}\nexpected={exp!r}"
            )
        finite = ~(e_nan | e_inf)
        af, ef = act[finite], exp[finite]
        close = np.abs(af - ef) <= a_tol + r * np.abs(ef)
        if not np.all(close):
            i = int(np.argmin(close))
            raise AssertionError(
                f"{path}: values differ beyond rtol={r:g} atol={a_tol:g} "
                f"({int((~close).sum())} of {ef.size}); e.g. {af[i]!r} vs expected {ef[i]!r}"
                f"\nactual={act!r}\nexpected={exp!r}"
            )
        if check_signed_zero:
            zero = finite & (exp == 0)
            if not np.array_equal(np.signbit(act[zero]), np.signbit(exp[zero])):
                raise AssertionError(f"{path}: signs of zeros differ\nactual={act!r}\nexpected={exp!r}")


def run_both(fn, *args, target="generic", **kwargs):
    """Evaluate `fn` with NumPy and through `braze.compile(fn, target=...)`.

    Returns `(actual, expected)`. Floating-point warnings and RuntimeWarnings
    (e.g. "mean of empty slice") are silenced on both sides alike.
    """
    import braze

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = fn(*args, **kwargs)
    compiled = braze.compile(fn, target=target)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        actual = compiled(*args, **kwargs)
    return actual, expected


def check(fn, *args, rtol=None, atol=None, check_signed_zero=False, target="generic", **kwargs):
    """Assert `braze.compile(fn)(*args)` is the same as `fn(*args)` on NumPy."""
    actual, expected = run_both(fn, *args, target=target, **kwargs)
    assert_same(actual, expected, rtol=rtol, atol=atol, check_signed_zero=check_signed_zero)
    return actual


def numpy_accepts(fn, *args, **kwargs) -> bool:
    """True if NumPy evaluates `fn(*args)` without raising (used to filter
    parametrizations: a combination NumPy rejects is not a test case)."""
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            fn(*args, **kwargs)
    except Exception:
        return False
    return True


def central_differences(f, x, eps=1e-6):
    """The gradient of scalar ``f`` at float64 array ``x`` by central differences."""
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        grad[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return grad
