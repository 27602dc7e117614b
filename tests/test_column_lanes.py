"""Reductions over the leading axis that keep 8 or more columns run with the
columns in lanes (cpu_codegen's ``_columns_body``: chunks of rows in
parallel, one accumulator per column, the chunks combined in order): every
dtype, NaN and infinities in any row or chunk, signed zeros, strided and
transposed arguments, row values after the reduction, against NumPy."""
import numpy as np
import pytest

import braze
from braze.targets.cpu_codegen import COLUMN_CHUNK, COLUMN_MIN_LANES

from _compare import assert_same


def columns(x):
    m = np.abs(x).max(axis=0)
    return m, x.min(axis=0), (x > 0).any(axis=0), (x != 0).all(axis=0), m + x.min(axis=0), \
        np.maximum(x, 0).max(axis=0, keepdims=True)


F = braze.compile(columns, target="cpu")


def _data(shape, dtype, seed):
    r = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return (r.standard_normal(shape) * 10).astype(dtype)
    if np.dtype(dtype) == np.bool_:
        return r.random(shape) > 0.5
    return r.integers(-100, 100, shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32, np.int8, np.bool_])
@pytest.mark.parametrize("shape", [(3000, COLUMN_MIN_LANES), (2 * COLUMN_CHUNK + 5, 9), (17, 2000), (40, 33)])
def test_columns_match_numpy(shape, dtype):
    x = _data(shape, dtype, shape[0])
    for got, want in zip(F(x), columns(x)):
        assert_same(got, want)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_columns_with_nan_inf_and_signed_zeros(dtype):
    n = 2 * COLUMN_CHUNK + 3
    x = _data((n, 10), dtype, 1)
    x[5, 0] = np.nan  # early in the first chunk
    x[n - 1, 1] = np.nan  # the last row of the last chunk
    x[COLUMN_CHUNK, 2] = np.inf
    x[:, 3] = -np.inf
    x[:, 4] = 0.0
    x[::2, 4] = -0.0
    x[:, 5] = np.nan  # a column of NaNs only
    for got, want in zip(F(x), columns(x)):
        assert_same(got, want)


def test_columns_of_strided_and_transposed_arguments():
    x = _data((40, 3000), np.float64, 2)
    for arg in (x.T, x.T[::2], np.asfortranarray(x.T), x.T[:, ::3]):
        for got, want in zip(F(arg), columns(arg)):
            assert_same(got, want)


def test_column_lanes_are_what_the_kernel_runs():
    x = _data((3000, 12), np.float64, 3)
    assert "for c in prange(nch)" in braze.explain(F, x)
