"""What Python code sees of a traced array, as it would see a NumPy array:
``isinstance`` checks, copies that are copies, results that are fresh arrays
on every call, and state the function keeps between calls (globals,
closures, attributes)."""
import numpy as np
import pytest

import braze
from _compare import central_differences

TARGETS = ["generic", "cpu"]


def norm_or_abs(x):
    """A helper written for arrays and scalars alike, as libraries write them."""
    if isinstance(x, np.ndarray):
        return np.sqrt((x * x).sum())
    return abs(x)


def branches_on_isinstance(x, s):
    return norm_or_abs(x) + norm_or_abs(s) + norm_or_abs(x.sum()) * 0.5


@pytest.mark.parametrize("target", TARGETS)
def test_isinstance_ndarray_takes_numpys_branch(target):
    x = np.array([3.0, -4.0, 12.0])
    f = braze.compile(branches_on_isinstance, target=target)
    assert f(x, -2.0) == branches_on_isinstance(x, -2.0) == 13.0 + 2.0 + 5.5
    text = str(f.lower(x, -2.0))
    assert "graph break" not in text  # the array branch traced, nothing was read


def test_isinstance_ndarray_holds_under_a_gradient_tape():
    x = np.array([3.0, -4.0, 12.0])
    g = braze.grad(lambda x: norm_or_abs(x))
    np.testing.assert_allclose(g(x), central_differences(norm_or_abs, x), rtol=1e-7)
    np.testing.assert_allclose(braze.compile(g, target="cpu")(x), x / 13.0, rtol=1e-12)


def test_numpy_python_level_functions_still_trace_a_traced_array():
    def padded(x):
        y = np.atleast_2d(x)
        return np.pad(y, 1) * 2, np.append(x, x[:1]), isinstance(y, np.ndarray), type(x) is np.ndarray

    x = np.arange(4.0)
    f = braze.compile(padded, target="cpu")
    got, want = f(x), padded(x)
    for g, w in zip(got[:2], want[:2]):
        np.testing.assert_array_equal(g, w)
    assert got[2] is True
    assert got[3] is False  # type() is the braze class: isinstance is what libraries use
    assert "graph break" not in str(f.lower(x))
