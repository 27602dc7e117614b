"""np.nansum / nanprod / nanmean / nanmax / nanmin, np.ptp, np.average and
np.polyval traced as NumPy computes them (they were graph breaks, with no
gradient): values, dtypes and result types against NumPy on float64,
float32, integers, NaN rows and slices of NaNs only; gradients against
central differences."""
import warnings

import numpy as np
import pytest

import braze
from _compare import assert_same, central_differences

TARGETS = ["generic", "cpu"]
W = np.random.default_rng(1).random(5)


def nan_sums(a):
    return (np.nansum(a), np.nansum(a, axis=1), np.nansum(a, axis=0, keepdims=True), np.nanprod(a, axis=1),
            np.nanmean(a), np.nanmean(a, axis=1), np.nanmean(a, axis=0, keepdims=True))


def nan_extrema(a):
    return np.nanmax(a), np.nanmax(a, axis=1), np.nanmin(a, axis=0), np.nanmin(a), np.ptp(a), np.ptp(a, axis=0)


def averages(a):
    return (np.average(a), np.average(a, axis=1), np.average(a, axis=1, weights=W),
            np.average(a, axis=1, weights=W, returned=True), np.average(a, returned=True))


def polynomials(a):
    return np.polyval(a[0], 0.5), np.polyval(a[0], a[2]), np.polyval([1.0, 2.0, 3.0], a)


def _data():
    r = np.random.default_rng(0)
    x = r.standard_normal((4, 5))
    x[1, 2] = np.nan
    x[3, :] = np.nan  # a row of NaNs only
    return [x, x.astype(np.float32), r.integers(-5, 5, (4, 5)), np.nan_to_num(x)]


def _same(got, want):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
        return
    assert type(got) is type(want), (type(got), type(want))
    assert np.asarray(got).dtype == np.asarray(want).dtype
    np.testing.assert_allclose(got, want, rtol=1e-6 if np.asarray(want).dtype != np.float32 else 1e-5)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn", [nan_sums, nan_extrema, averages, polynomials])
def test_values_types_and_dtypes_as_numpy(fn, target):
    f = braze.compile(fn, target=target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (NumPy's "Mean of empty slice")
        for a in _data():
            _same(f(a.copy()), fn(a.copy()))
        assert "graph break" not in str(f.lower(_data()[0]))


def test_average_errors_as_numpy():
    f = braze.compile(lambda a: np.average(a, axis=1, weights=np.array([1.0, -1.0])), target="generic")
    with pytest.raises(ZeroDivisionError):
        f(np.ones((3, 2)))
    with pytest.raises(TypeError):
        braze.compile(lambda a: np.average(a, weights=np.ones(2)), target="generic")(np.ones((3, 2)))


@pytest.mark.parametrize("loss", [
    lambda a: np.nansum(a * a) + np.nanprod(a[0]),
    lambda a: np.nanmean(np.where(a > 0.1, a, np.nan) ** 2),
    lambda a: np.nanmax(a, axis=0).sum() - np.nanmin(a),
    lambda a: np.ptp(a, axis=1).sum(),
    lambda a: np.average(a, axis=1, weights=W).sum() + np.average(a * a),
    lambda a: np.polyval(a[0], a[1]).sum(),
], ids=["nansum", "nanmean", "nanmax", "ptp", "average", "polyval"])
def test_gradients_match_central_differences(loss):
    x = np.random.default_rng(2).standard_normal((3, 5))
    want = central_differences(loss, x)
    np.testing.assert_allclose(braze.grad(loss)(x), want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(braze.compile(braze.grad(loss), target="cpu")(x), want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("target", ["cpu", "generic"])
def test_average_with_traced_weights_is_numpys_and_guards_a_zero_sum(target):
    """Weights that are arguments (traced): NumPy's values, ``returned=``, a
    weight vector along an axis; a sum of zero raises NumPy's
    ZeroDivisionError at the first call or, guarded, a later one."""
    def f(a, w, v):
        return np.average(a, weights=w), np.average(a, axis=1, weights=v, returned=True), np.average(a, 0, w)

    r = np.random.default_rng(2)
    a, w, v = r.standard_normal((3, 4)), r.random((3, 4)) + 0.1, np.array([1.0, 2.0, 0.0, 1.0])
    g = braze.compile(f, target=target)
    for scale in (1.0, 3.0):
        assert_same(g(a, w * scale, v * scale), f(a, w * scale, v * scale))
    with pytest.raises(ZeroDivisionError):
        g(a, w, np.array([1.0, -1.0, 0.0, 0.0]))
    with pytest.raises(ZeroDivisionError):
        braze.compile(f, target=target)(a, w, np.zeros(4))
    assert_same(g(a, w, v), f(a, w, v))


def test_gradient_of_an_average_in_its_weights():
    x = np.array([1.0, 2.0, 3.0, 4.0])

    def loss(w):
        return np.average(x, weights=w) ** 2

    w = np.array([3.0, 1.0, 2.0, 5.0])
    eps = 1e-6
    fd = np.array([(loss(w + eps * e) - loss(w - eps * e)) / (2 * eps) for e in np.eye(4)])
    np.testing.assert_allclose(braze.grad(loss)(w), fd, rtol=1e-6)
    np.testing.assert_allclose(braze.compile(braze.grad(loss), target="cpu")(w), fd, rtol=1e-6)
