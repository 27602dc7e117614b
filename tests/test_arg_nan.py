"""argmax / argmin over float values find the first NaN (NumPy's answer) in a
second reading of the row or chunk that saw one: the first reading compares
only (cpu_codegen's ``_nan_rerun``). NaN anywhere in a row, in several rows,
in one chunk of many, beside infinities, ties and signed zeros, in rows read
unrolled (short) and looped, fused with the computation of the values and
with a min/max of the same values beside it, against NumPy."""
import numpy as np
import pytest

import braze
from braze.targets.cpu_codegen import CHUNK

from _compare import assert_same


def rows(X, C):
    d = ((X[:, None, :] - C[None, :, :]) ** 2).sum(-1)
    return d.argmin(axis=1), d.min(axis=1), (d - 1.0).argmax(axis=1)


def whole(x):
    return x.argmin(), (x * 2.0).argmax(), np.argmax(x)


ROWS = braze.compile(rows, target="cpu")
WHOLE = braze.compile(whole, target="cpu")


def _place(a, where, value):
    a = a.copy()
    for i in where:
        a.flat[i] = value
    return a


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("k", [3, 8, 40])  # 3: a short row, unrolled; 8, 40: looped
def test_rows_with_nan_anywhere(dtype, k):
    r = np.random.default_rng(k)
    X = r.standard_normal((50, 2)).astype(dtype)
    C = r.standard_normal((k, 2)).astype(dtype)
    cases = [[], [0], [C.size - 1], [1, C.size - 2], list(range(C.size))]
    for where in cases:
        Cn = _place(C, where, np.nan)  # a NaN center: that column of every row is NaN
        for got, want in zip(ROWS(X, Cn), rows(X, Cn)):
            assert_same(got, want)
    Xn = _place(X, [0, 7, 8, 99], np.nan)  # NaN rows among rows without
    for got, want in zip(ROWS(Xn, C), rows(Xn, C)):
        assert_same(got, want)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_rows_with_infinities_ties_and_zeros(dtype):
    X = np.zeros((6, 1), dtype)
    X[1, 0], X[2, 0], X[3, 0], X[4, 0] = np.inf, -np.inf, 1.0, np.nan
    C = np.array([[1.0], [-1.0], [1.0], [np.inf], [0.0], [-0.0]], dtype)
    for got, want in zip(ROWS(X, C), rows(X, C)):
        assert_same(got, want)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_whole_array_nan_in_one_chunk_of_many(dtype):
    n = 3 * CHUNK + 17
    x = np.random.default_rng(1).standard_normal(n).astype(dtype)
    places = [[], [0], [n - 1], [CHUNK + 5], [2 * CHUNK + 1, CHUNK - 1], [CHUNK, 5, n - 2]]
    for where in places:
        xn = _place(x, where, np.nan)
        for got, want in zip(WHOLE(xn), whole(xn)):
            assert_same(got, want)
    for value in (np.inf, -np.inf):
        xi = _place(x, [4, CHUNK + 2], value)
        for got, want in zip(WHOLE(xi), whole(xi)):
            assert_same(got, want)
    same = np.full(n, 2.5, dtype)
    for got, want in zip(WHOLE(same), whole(same)):
        assert_same(got, want)


@pytest.mark.parametrize("n", [1, 255, 256, 257, 513, CHUNK + 300])
def test_whole_array_lanes_ties_and_edges(n):
    """Whole blocks of 256 elements go to 256 lanes, the rest one at a time:
    equal extremes in different lanes and in the rest keep NumPy's first
    index; -0.0 and 0.0 are equal."""
    r = np.random.default_rng(n)
    x = np.round(r.standard_normal(n) * 3)  # many ties
    for got, want in zip(WHOLE(x), whole(x)):
        assert_same(got, want)
    z = np.zeros(n)
    z[n // 2:] = -0.0
    for got, want in zip(WHOLE(z), whole(z)):
        assert_same(got, want)
    t = np.zeros(n)
    t[[n - 1, n // 3]] = -5.0  # the same extreme twice: the smaller index
    t[[n // 2, n // 5]] = 5.0
    for got, want in zip(WHOLE(t), whole(t)):
        assert_same(got, want)
    t[n - 1] = np.nan
    for got, want in zip(WHOLE(t), whole(t)):
        assert_same(got, want)


@pytest.mark.parametrize("k, blocks", [(3, 5), (8, 5), (40, 5), (8, 19)])
def test_rows_in_lanes_with_nan_ties_and_a_partial_block(k, blocks):
    """At least 2 * ROW_LANES rows of at most ROW_LANES_MAX elements computed
    from row and column values (k-means' distances) run ROW_LANES rows at a
    time in lanes, ROW_LANES_GROUP blocks a task: NaN rows in any block (a
    block with one reads all its rows again), the last block partial, ties,
    and with 19 blocks, three tasks."""
    from braze.targets.cpu_codegen import ROW_LANES, ROW_REGISTERS_MAX

    n = blocks * ROW_LANES + 37
    r = np.random.default_rng(k)
    X = np.round(r.standard_normal((n, 3)) * 2)  # ties between centers
    C = np.round(r.standard_normal((k, 3)) * 2)
    X[[0, ROW_LANES - 1, ROW_LANES, 3 * ROW_LANES + 5, n - 1], 1] = np.nan
    src = braze.explain(ROWS, X, C)
    assert "for cb in prange" in src
    # rows of up to ROW_REGISTERS_MAX elements accumulate in registers, longer ones in lanes
    assert (f"for j0 in range({k}):" in src) == (k <= ROW_REGISTERS_MAX) != ("Lacc0_w[r]" in src)
    for got, want in zip(ROWS(X, C), rows(X, C)):
        assert_same(got, want)
    Cn = C.copy()
    Cn[k // 2, 0] = np.nan  # a NaN center: the first NaN of every row is at k // 2
    for got, want in zip(ROWS(X, Cn), rows(X, Cn)):
        assert_same(got, want)
    Xf = X.astype(np.float32)
    for got, want in zip(ROWS(Xf, C.astype(np.float32)), rows(Xf, C.astype(np.float32))):
        assert_same(got, want)
