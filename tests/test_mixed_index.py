"""An integer beside traced index arrays (``psi[t + 1, path[t + 1]]``) is a view's
offset where NumPy's result is the same (all the advanced indices adjacent),
an index array otherwise: shapes and values are NumPy's either way."""
import numpy as np
import pytest

import braze

KEYS = {
    "int then scalar": lambda x, i: x[2, i[0]],
    "scalar then int": lambda x, i: x[i[1], 1],
    "int then vector": lambda x, i: x[1, i],
    "slice, int, vector": lambda x, i: x[:, 1, i],
    "vector, int, slice": lambda x, i: x[i, 0, 1:],
    "apart: vector, slice, int": lambda x, i: x[i, :, 1],
    "apart: slice, vector, slice, int": lambda x, i: x[:, i, :, 1] if x.ndim == 4 else x[:, i, 1],
    "negative int": lambda x, i: x[-1, i],
    "none between": lambda x, i: x[1, None, i],
}


@pytest.mark.parametrize("name", sorted(KEYS))
@pytest.mark.parametrize("ndim", [3, 4])
def test_integers_among_index_arrays(name, ndim):
    x = np.arange(np.prod((3, 4, 5, 6)[:ndim]), dtype=np.float64).reshape((3, 4, 5, 6)[:ndim])
    i = np.array([2, 0, 1])

    def fn(x, i):
        return KEYS[name](x, i)

    want = fn(x, i)
    got = braze.compile(fn, target="cpu")(x, i)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_an_integer_out_of_range_raises_as_numpy_does():
    x, i = np.zeros((3, 4)), np.array([1])
    with pytest.raises(IndexError):
        x[5, i]
    with pytest.raises(IndexError):
        braze.compile(lambda x, i: x[5, i], target="cpu")(x, i)
