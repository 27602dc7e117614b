"""``scipy.special.expit`` is traced (SciPy's formula, ``1 / (1 + exp(-x))``, in
its loops' dtypes), not a graph break per call: a fit with the sigmoid in its
loop is one compiled program."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.special

import braze


@pytest.mark.parametrize("target", ["generic", "cpu"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "int64", "bool"])
def test_expit_is_scipys(dtype, target):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(500) * 30).astype(dtype)
    if x.dtype.kind == "f":
        x[:7] = [np.nan, np.inf, -np.inf, -800, 800, 0.0, -0.0]
    f = braze.compile(lambda x: scipy.special.expit(x) * 2, target=target)
    with np.errstate(over="ignore"):
        got, want = f(x), scipy.special.expit(x) * 2
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    if got.dtype == np.float64 and target == "generic":
        np.testing.assert_array_equal(got, want)  # (SciPy's formula with NumPy's exp: bit for bit)
    else:  # (the cpu's exp is braze's, within an ulp of NumPy's; SciPy's float32 loop calls C's expf)
        ulp = np.spacing(np.abs(want).astype(got.dtype)).astype(np.float64)
        assert np.nanmax(np.abs(got.astype(np.float64) - want) / ulp) <= 4
    assert "host_call" not in {n.op for n in f.lower(x).ir.nodes}


def test_a_fit_with_expit_in_its_loop_is_one_program_and_differentiates():
    import sys
    import os
    sys.path.insert(0, os.path.dirname(__file__))
    from programs import with_scipy

    fn, make, static, small, _ = with_scipy.EXAMPLES["logistic_fit"]
    X, y = make(small)
    f = braze.compile(fn, target="cpu", static_argnames=tuple(static))
    got, want = f(X, y, **static), fn(X, y, **static)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    assert "graph break" not in str(f.lower(X, y, **static))

    def loss(w):
        return np.log(scipy.special.expit(X @ w)).sum()

    w = np.random.default_rng(2).standard_normal(X.shape[1])
    g = braze.compile(braze.grad(loss), target="cpu")(w)
    np.testing.assert_allclose(g, X.T @ (1 - scipy.special.expit(X @ w)), rtol=1e-9)
