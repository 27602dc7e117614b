"""``np.median`` along a short axis is a sorting network of minimum/maximum
(no graph break), exactly NumPy's values, dtypes, NaNs and scalar-ness; and a
slice of a concatenation that lies in one piece reads that piece (the window
stack of a running median is never built)."""
from __future__ import annotations

import numpy as np
import pytest

import braze

try:
    from _compare import central_differences
except ImportError:  # tests/ imported as a package
    from tests._compare import central_differences


def _same(got, want):
    assert type(got) is type(want) or (isinstance(got, np.ndarray) and isinstance(want, np.ndarray)), \
        (type(got), type(want))
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_array_equal(got, want)  # (NaN where NumPy's is NaN)


def _ops(f, *args, **kwargs):
    return {n.op for n in f.lower(*args, **kwargs).ir.nodes}


def _data(dtype, shape, seed):
    x = np.random.default_rng(seed).standard_normal(shape) * 3
    x = x.round() if dtype != "bool" else x  # (ties)
    x = x.astype(dtype)
    if x.dtype.kind == "f":
        x.reshape(-1)[::7] = np.nan
        x.reshape(-1)[3::11] = np.inf
        x.reshape(-1)[5::13] = -np.inf
    return x


MEDIANS = {
    "axis 1": lambda x: np.median(x, axis=1),
    "last axis, kept": lambda x: np.median(x, axis=-1, keepdims=True),
    "a vector's (a scalar)": lambda x: np.median(x[1, :, 0]),
    "whole, small": lambda x: np.median(x[0, :2, :2]),
    "whole, kept": lambda x: np.median(x[:1, :3, :1], keepdims=True),
}


@pytest.mark.parametrize("target", ["generic", "cpu"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "int8", "bool"])
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 8, 9])
def test_median_of_a_short_axis_is_numpys_with_no_graph_break(m, dtype, target):
    x = _data(dtype, (3, m, 4), m)
    for name, fn in MEDIANS.items():
        f = braze.compile(fn, target=target)
        _same(f(x), fn(x))
        assert "host_call" not in _ops(f, x), name


@pytest.mark.parametrize("target", ["generic", "cpu"])
def test_median_of_a_long_axis_is_numpys_call(target):
    x = _data("float64", (4, 30), 1)
    for fn in (lambda x: np.median(x, axis=1), lambda x: np.median(x), lambda x: np.median(x, axis=(0, 1))):
        f = braze.compile(fn, target=target)
        _same(f(x), fn(x))
        assert "host_call" in _ops(f, x)


@pytest.mark.parametrize("target", ["generic", "cpu"])
def test_a_running_median_of_stacked_windows_builds_no_stack(target):
    def running_median(x, k):
        n = x.shape[1] - k + 1
        windows = np.stack([x[:, j:j + n] for j in range(k)], axis=-1)
        return np.median(windows, axis=-1)

    x = _data("float64", (6, 40), 2)
    f = braze.compile(running_median, target=target, static_argnames=("k",))
    _same(f(x, k=5), running_median(x, k=5))
    assert "concatenate" not in _ops(f, x, k=5)


@pytest.mark.parametrize("target", ["generic", "cpu"])
def test_slices_of_a_concatenation(target):
    def pieces(a, b):
        c = np.concatenate([a, b, a * 2], axis=1)
        return c[:, 1:3], c[:, 4:8], c[:, 3:6], c[1:, ::2], c[:, 4:4]

    a, b = _data("float64", (3, 4), 3), _data("float64", (3, 5), 4)
    f = braze.compile(pieces, target=target)
    for got, want in zip(f(a, b), pieces(a, b)):
        _same(got, want)


def test_median_differentiates():
    def loss(x):
        return (np.median(x, axis=1) ** 2).sum() + np.median(x[:, :4], axis=1).sum()

    x = np.random.default_rng(5).standard_normal((3, 5))  # (no ties: a derivative everywhere)
    g = braze.compile(braze.grad(loss), target="cpu")(x)
    np.testing.assert_allclose(g, central_differences(loss, x), rtol=1e-6, atol=1e-8)
    assert np.count_nonzero(g) >= 6  # (each row's middle one or two)
