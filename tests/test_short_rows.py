"""Row kernels over short inner rows (unrolled) and over several outer axes
(rows in chunks, their indices counted up): every shape at the edges, against
NumPy."""
import numpy as np
import pytest

import braze

from _compare import assert_same


def distances(X, C):
    d = ((X[:, None, :] - C[None, :, :]) ** 2).sum(-1)
    return d.argmin(axis=1), d.min(axis=1), d.max(axis=1)


@pytest.mark.parametrize("n,k,c", [(1, 1, 1), (7, 3, 2), (300, 8, 4), (1025, 5, 8), (257, 9, 9), (0, 4, 3),
                                   (4, 0, 3), (33, 4, 0)])
def test_distance_rows_of_every_length(n, k, c):
    r = np.random.default_rng(n + k + c)
    X, C = r.standard_normal((n, c)), r.standard_normal((k, c))
    f = braze.compile(distances, target="cpu")
    if k == 0:
        with pytest.raises(ValueError):
            distances(X, C)
        with pytest.raises(Exception):
            f(X, C)
        return
    for got, want in zip(f(X, C), distances(X, C)):
        assert_same(got, want)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32, np.bool_])
def test_three_axis_rows_with_short_and_long_tails(dtype):
    r = np.random.default_rng(5)
    for shape in [(3, 1030, 3), (2, 3, 5), (1, 1, 1), (17, 600, 2), (5, 7, 300)]:
        # positive: a float32 sum of 300 terms that cancel differs from NumPy's
        # (pairwise) by more than a few ulps of the result, in either order
        x = (r.random(shape) * 50 - (dtype == np.int32) * 25).astype(dtype)
        y = (r.random(shape[-1:]) * 50).astype(dtype)

        def fn(x, y):
            z = x * y if dtype != np.bool_ else x & y
            low = z.min(-1, keepdims=True)
            return z.sum(-1), z.max(-1), np.argmax(z, axis=-1), (z ^ low if dtype == np.bool_ else z - low)

        f = braze.compile(fn, target="cpu")
        for got, want in zip(f(x, y), fn(x, y)):
            assert_same(got, want)


def test_short_rows_with_special_values_and_ties():
    x = np.array([[[1.0, np.nan, 3.0], [2.0, 2.0, -0.0], [np.inf, -np.inf, 1.0]],
                  [[-0.0, -0.0, -0.0], [1e300, 1e300, -1e300], [5.0, 5.0, 5.0]]])
    fns = [lambda x: x.sum(-1), lambda x: x.max(-1), lambda x: x.min(-1), lambda x: x.argmin(-1),
           lambda x: x.argmax(-1), lambda x: x.prod(-1), lambda x: x - x.mean(-1, keepdims=True)]
    for fn in fns:
        with np.errstate(all="ignore"):
            assert_same(braze.compile(fn, target="cpu")(x), fn(x), check_signed_zero=True)


def test_a_strided_non_contiguous_input_over_several_outer_axes():
    x = np.random.default_rng(6).standard_normal((20, 30, 8))[::2, ::-3, 1::2]
    fn = lambda x: np.exp(x - x.max(-1, keepdims=True)).sum(-1)  # noqa: E731
    assert_same(braze.compile(fn, target="cpu")(x), fn(x))
