"""sink_slices: a slice of a cheap elementwise value is computed from slices of
its operands, so stencils over computed differences read their arrays by
offset in one kernel. Same operations on the same elements: results bitwise
NumPy's."""
import numpy as np
import pytest

import braze
from braze.fusion import Loop, fuse
from braze.passes import inline_composites, run_passes, sink_slices

from _compare import assert_same


def limited_slope(q):
    dq = q[1:] - q[:-1]
    up, dn = dq[:-1], dq[1:]
    lap = q[2:] - 2.0 * q[1:-1] + q[:-2]
    return np.where(np.abs(dn) > 1e-12, up / np.where(np.abs(dn) > 1e-12, dn, 1.0), 0.0) + lap


def kernels(fn, *args):
    graph, _ = run_passes(inline_composites(braze.trace(fn, *args)))
    return [s for s in fuse(graph).steps if isinstance(s, Loop)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_stencil_over_computed_differences_is_one_kernel_and_bitwise_numpy(dtype):
    q = np.random.default_rng(0).standard_normal((50, 7)).astype(dtype)
    q[3, 2], q[10, :] = np.nan, np.inf
    (k,) = kernels(limited_slope, q)
    assert all(m.op != "slice" or m.inputs[0].op in ("input", "slice") for m in k.leaves)
    with np.errstate(all="ignore"):
        assert_same(braze.compile(limited_slope, target="cpu")(q), limited_slope(q), rtol=0)


def test_a_value_also_read_whole_is_still_computed_once_for_that():
    def f(q):
        d = q[1:] - q[:-1]
        return d, d[1:] * d[:-1]

    q = np.random.default_rng(1).standard_normal(40)
    for got, want in zip(braze.compile(f, target="cpu")(q), f(q)):
        assert_same(got, want, rtol=0)


def test_expensive_or_broadcasting_values_are_not_recomputed():
    def expensive(q):
        e = np.exp(q) * 2.0
        return e[1:] - e[:-1]

    def long_chain(q):
        v = q
        for _ in range(SINK := 12):
            v = v * 1.5 + 1.0
        return v[1:] - v[:-1]

    def broadcasting(q, row):
        s = q - row
        return s[1:] + s[:-1]

    q, row = np.random.default_rng(2).standard_normal((20, 5)), np.arange(5.0)
    for fn, args, op in [(expensive, (q,), "exp"), (long_chain, (q,), "multiply"), (broadcasting, (q, row), "subtract")]:
        graph = braze.trace(fn, *args)
        sunk = sink_slices(graph)
        assert [n.op for n in sunk.nodes].count(op) == [n.op for n in graph.nodes].count(op), fn.__name__
        assert_same(braze.compile(fn, target="cpu")(*args), fn(*args))  # (exp: within the contract's ulps)
    # the cheap multiply over exp's value is recomputed per slice, exp itself is not
    assert [n.op for n in sink_slices(braze.trace(expensive, q)).nodes].count("multiply") == 2


def test_reversed_strided_and_integer_slices():
    def f(q):
        d = q[::-1] * 3 - q
        return d[:-1:2] + d[1::2], (d[1:, ::-1][:, 1:] - d[:-1, 1:])

    q = np.random.default_rng(3).integers(-50, 50, (17, 6))
    for got, want in zip(braze.compile(f, target="cpu")(q), f(q)):
        assert_same(got, want, rtol=0)


def test_gradient_through_sunk_slices_matches_finite_differences():
    def loss(q):
        dq = q[1:] - q[:-1]
        return ((dq[1:] * dq[:-1]) ** 2).sum()

    q = np.random.default_rng(4).standard_normal(12)
    g = braze.compile(braze.grad(loss), target="cpu")(q)
    eps, num = 1e-6, np.zeros_like(q)
    for i in range(q.size):
        e = np.zeros_like(q)
        e[i] = eps
        num[i] = (loss(q + e) - loss(q - e)) / (2 * eps)
    np.testing.assert_allclose(g, num, rtol=1e-6, atol=1e-8)
    assert np.abs(g).max() > 0


def test_slices_of_a_where_and_a_conversion_are_sunk_too():
    """``where``, comparisons and dtype conversions are as cheap (the ``cheap`` flag): a
    limiter computed with np.where over the whole array, then read at two
    offsets, becomes windows of its operands; int32 data converted to float."""
    def f(q, k):
        lim = np.where(q > 0.0, q, 0.5 * q)
        kf = k.astype(np.float64)
        return lim[2:] * lim[:-2] + kf[2:] - kf[:-2]

    r = np.random.default_rng(4)
    q, k = r.standard_normal(60), r.integers(-9, 9, 61).astype(np.int32)[:60]
    q[5] = np.nan
    (kern,) = kernels(f, q, k)
    assert all(m.op != "slice" or m.inputs[0].op in ("input", "slice") for m in kern.leaves)
    assert_same(braze.compile(f, target="cpu")(q, k), f(q, k), rtol=0)


def test_a_value_read_row_by_row_by_calls_is_computed_once():
    """A value whose rows a loop hands to a SciPy call each (more slices than
    SINK_FANOUT) is one kernel, not a small kernel per row."""
    import scipy.linalg

    from braze.passes import SINK_FANOUT

    def rows(a, c, L):
        b = 1 - a - c
        out = np.empty_like(a)
        for i in range(a.shape[0]):
            out[i] = scipy.linalg.solve_triangular(L, b[i])
        return out

    rng = np.random.default_rng(1)
    a, c, L = rng.random((SINK_FANOUT + 8, 4)), rng.random((SINK_FANOUT + 8, 4)), np.triu(rng.random((4, 4))) + 2
    f = braze.compile(rows, target="cpu")
    assert_same(f(a, c, L), rows(a, c, L))
    assert f.lower(a, c, L).counts["kernels"] <= 2
