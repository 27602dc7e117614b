"""A traced boolean mask after whole slices: ``x[:, mask]`` and ``a[:, mask] *= 2``.

The read is a selection (which needs its count, so ``fullgraph`` refuses it) of the mask's axes moved first and moved back (one
traced op whose count is guarded, no graph break); a store of values
elementwise in that selection is computed over the whole array and picked by
the mask (``np.where``), so nothing is selected at all."""
from __future__ import annotations

import numpy as np
import pytest

import braze

try:
    from _compare import assert_same, central_differences
except ImportError:  # tests/ imported as a package
    from tests._compare import assert_same, central_differences


def make(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * 3
    return x.astype(dtype)


READS = {
    "2-d": (lambda x: x[:, x[0] > 0], (5, 7)),
    "3-d, middle axis": (lambda x: x[:, x[0, :, 0] > 0, :], (3, 6, 4)),
    "3-d, last axis by ...": (lambda x: x[..., x[0, 0] > 0], (3, 4, 6)),
    "3-d, a 2-d mask": (lambda x: x[:, x[0] > 0], (3, 4, 5)),
    "read, then reduced": (lambda x: x[:, x[0] > 0].sum(axis=1), (5, 7)),
    "read, then elementwise": (lambda x: np.exp(x[:, x[1] < 0]) * 2 + x[:, x[1] < 0], (5, 7)),
}


@pytest.mark.parametrize("target", ["generic", "cpu"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "int64"])
@pytest.mark.parametrize("case", sorted(READS))
def test_a_mask_after_slices_reads_as_numpy_with_no_graph_break(case, dtype, target):
    fn, shape = READS[case]
    f = braze.compile(fn, target=target)
    for seed in range(3):  # another count: traced again, still right
        x = make(dtype, shape, seed)
        assert_same(f(x), fn(x))
        assert "host_call" not in {n.op for n in f.lower(x).ir.nodes}  # (NumPy's nonzero was a graph break)


def _scale(a):
    a = a.copy()
    a[:, a[0] < 0] *= 2
    return a


def _shift_sqrt(a):
    a = a.copy()
    a[:, a[0] > 0.5] = np.sqrt(np.abs(a[:, a[0] > 0.5])) + 1
    return a


def _middle_axis(a):
    a = a.copy()
    a[:, a[0, :, 0] > 0, :] -= 0.25
    return a


def _two_axes(a):
    a = a.copy()
    a[:, a[0] > 0] *= -1
    return a


STORES = {"scale": (_scale, (6, 5)), "sqrt": (_shift_sqrt, (6, 5)), "middle axis": (_middle_axis, (3, 6, 4)),
          "2-d mask": (_two_axes, (3, 4, 5))}


@pytest.mark.parametrize("target", ["generic", "cpu"])
@pytest.mark.parametrize("case", sorted(STORES))
def test_a_store_elementwise_in_its_selection_selects_nothing(case, target):
    fn, shape = STORES[case]
    f = braze.compile(fn, target=target)
    a = make("float64", shape, 1)
    assert_same(f(a), fn(a))
    ops = {n.op for n in f.lower(a).ir.nodes}
    assert not ops & {"compress", "gather", "host_call"}, ops  # computed over the whole array, picked by where
    assert "transpose" not in ops  # (in the array's own layout: the axis moved first and back cancels)
    for fill in (-1.0, 1.0, np.nan):  # none, all, NaN in the mask's row: NumPy's result each time
        b = a.copy()
        b[(0,) * (len(shape) - 1)] = fill
        b[0] = fill
        assert_same(f(b), fn(b))


@pytest.mark.parametrize("target", ["generic", "cpu"])
def test_a_store_not_elementwise_in_its_selection_is_still_numpys(target):
    def fn(a, col, v):
        a = a.copy()
        a[:, a[0] > 0] += col[:, None]  # (broadcast across the selection: stored as selected)
        a[:, a[1] > 0] = v               # (a value of the selection's shape, given)
        return a

    a, col = make("float64", (4, 6), 2), make("float64", (4,), 3)
    b = a.copy()
    b[:, b[0] > 0] += col[:, None]
    v = np.arange(4 * int((b[1] > 0).sum()), dtype=float).reshape(4, -1)
    assert v.shape[1] > 1
    assert_same(braze.compile(fn, target=target)(a, col, v), fn(a, col, v))


def test_a_mask_after_slices_differentiates():
    def loss(x):
        y = x * 1.0
        y[:, y[0] > 0] *= 3
        return (x[:, x[1] < 0] ** 2).sum() + (y ** 2).sum()

    x = make("float64", (4, 6), 4)
    g = braze.compile(braze.grad(loss), target="cpu")(x)
    fd = central_differences(loss, x)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6)  # (central differences of a loss near 1e3)
    assert np.abs(g).max() > 0
