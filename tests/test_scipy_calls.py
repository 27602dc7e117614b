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


def test_scipy_is_itself_again_after_a_trace(monkeypatch):
    originals = (scipy.linalg.solve_triangular, scipy.ndimage.gaussian_filter, scipy.linalg.lapack.dgtsv)
    braze.compile(tri_solve, target="generic")(np.eye(3), np.ones(3))
    assert (scipy.linalg.solve_triangular, scipy.ndimage.gaussian_filter, scipy.linalg.lapack.dgtsv) == originals
    mine = lambda L, b, lower=False: b * 0.5  # noqa: E731  (a function the user put there: theirs, kept)
    monkeypatch.setattr(scipy.linalg, "solve_triangular", mine)
    assert np.allclose(braze.compile(tri_solve, target="generic")(np.eye(3), np.ones(3)), 1.0)
    assert scipy.linalg.solve_triangular is mine


def test_a_program_of_mostly_calls_runs_as_numpy(monkeypatch):
    """More SciPy calls than MAX_HOST_CALLS, making up most of the program: it
    runs as the plain NumPy function (a compiled program would step through
    them one by one); fewer, and it is compiled."""
    from braze import pipeline

    monkeypatch.setattr(pipeline, "MAX_HOST_CALLS", 8)
    rng = np.random.default_rng(6)
    for rows, compiled in ((6, True), (12, False)):
        args = tuple(rng.random((rows, 7)) for _ in range(4))
        f = braze.compile(columns_solved, target="cpu")
        np.testing.assert_allclose(f(*args), columns_solved(*args), rtol=1e-12)
        np.testing.assert_allclose(f(*args), columns_solved(*args), rtol=1e-12)
        reasons = f.cache_info().reasons
        assert (reasons == ["first call"]) is compiled, reasons
        if not compiled:
            assert "makes 12 calls braze runs as called" in reasons[0]
            with pytest.raises(braze.UnsupportedOpError, match="runs as plain NumPy"):
                f.lower(*args)
