"""A SciPy function given traced arrays by user code is a graph break run on
the values at every call (``host_call``), not a conversion that specializes
the program on the values (which traced again whenever the data changed)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import scipy.linalg.lapack
import scipy.ndimage
import scipy.special
import scipy.stats

import braze


def tri_solve(A, b):
    L = np.tril(A) + 4 * np.eye(A.shape[0])
    return scipy.linalg.solve_triangular(L, b, lower=True) * 2


def smoothed(img):
    return scipy.ndimage.gaussian_filter(img * 2, sigma=1.0) + 1


def standardized(x):
    return scipy.stats.zscore(x, axis=0) * 2, scipy.special.logsumexp(x, axis=1)


def columns_solved(a, b, c, d):
    out = np.empty_like(d)
    for i in range(d.shape[0]):
        _, _, _, x, info = scipy.linalg.lapack.dgtsv(a[i, 1:], b[i] + 4, c[i, :-1], d[i])
        out[i] = x
    return out


CASES = {
    "scipy.linalg": (tri_solve, lambda rng: (rng.standard_normal((5, 5)), rng.standard_normal(5))),
    "scipy.ndimage": (smoothed, lambda rng: (rng.random((8, 9)),)),
    "scipy.stats and scipy.special": (standardized, lambda rng: (rng.random((6, 4)),)),
    "LAPACK in a loop": (columns_solved, lambda rng: tuple(rng.random((5, 7)) for _ in range(4))),
}


@pytest.mark.parametrize("target", ["generic", "cpu"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_scipy_call_is_run_at_each_call_not_specialized(case, target):
    fn, make = CASES[case]
    f = braze.compile(fn, target=target)
    rng = np.random.default_rng(4)
    for _ in range(3):  # new data each call: one trace
        args = make(rng)
        got, want = f(*args), fn(*args)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)
    assert f.cache_info().reasons == ["first call"]
    assert "host_call" in {n.op for n in f.lower(*args).ir.nodes}


def test_scipy_is_itself_again_after_a_trace():
    originals = (scipy.linalg.solve_triangular, scipy.ndimage.gaussian_filter, scipy.linalg.lapack.dgtsv)
    braze.compile(tri_solve, target="generic")(np.eye(3), np.ones(3))
    assert (scipy.linalg.solve_triangular, scipy.ndimage.gaussian_filter, scipy.linalg.lapack.dgtsv) == originals
