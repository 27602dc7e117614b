"""The NumPy-semantics cases of ``tests/test_views_aliases.py`` on the cuda
target (the simulator: a sample of each family, tiny arrays)."""
import numpy as np
import pytest

from tests.numpy_semantics import (ALIAS_FUNCTIONS, DTYPE_INPUTS, DTYPE_REDUCTIONS, VIEW_FUNCTIONS, _arr,
                                   alias_args, check, read_after_base_write, write_through)

VIEWS = ["T", "reshape", "ravel", "T_ravel_copy", "squeeze", "basic_slice", "negative_step", "view_of_view",
         "broadcast_to", "diagonal", "split_piece"]


@pytest.mark.parametrize("name", VIEWS)
def test_writes_through_views(name):
    check(write_through(VIEW_FUNCTIONS[name]), _arr, "cuda")


@pytest.mark.parametrize("name", ["T", "reshape", "basic_slice"])
def test_views_read_after_the_base_changed(name):
    check(read_after_base_write(VIEW_FUNCTIONS[name]), _arr, "cuda")


@pytest.mark.parametrize("pattern", ["same_array", "overlapping", "reversed", "interleaved_disjoint"])
@pytest.mark.parametrize("fn", ["double_and_add", "stencil_step"])
def test_arguments_that_share_memory(fn, pattern):
    check(ALIAS_FUNCTIONS[fn], alias_args(pattern), "cuda")


@pytest.mark.parametrize("name,data,dtype", [("sum", "int32", np.int32), ("sum", "bool", np.int32),
                                             ("prod", "int8", np.int16), ("mean", "float32", np.float64),
                                             ("cumsum", "int8", None), ("var", "float32", np.float64)])
def test_reductions_honour_dtype(name, data, dtype):
    fn = DTYPE_REDUCTIONS[name]
    check(lambda a: fn(a, dtype), lambda: (DTYPE_INPUTS[data](),), "cuda")


@pytest.mark.parametrize("lo,hi,st", [(-11, 0, -1), (8, 2, -2), (None, None, -1), (2, 100, 3), (-3, -1, 1)])
def test_slices(lo, hi, st):
    def f(x):
        x[lo:hi:st] += 5.0
        return x[lo:hi:st] * 2.0

    check(f, lambda: (np.arange(10.0),), "cuda")


def test_writes_into_two_device_arguments_read_what_came_in():
    """b's new value is a's as it came in: written before a is cleared."""
    import braze
    from numba import cuda

    def copy_then_clear(a, b):
        b[:] = a
        a[:] = 0

    f = braze.compile(copy_then_clear, target="cuda")
    a, b = np.array([1.0, 2.0, 3.0]), np.zeros(3)
    f(a, b)
    np.testing.assert_array_equal(b, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(a, 0.0)
    da, db = cuda.to_device(np.array([1.0, 2.0, 3.0])), cuda.to_device(np.zeros(3))
    f(da, db)
    np.testing.assert_array_equal(db.copy_to_host(), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(da.copy_to_host(), 0.0)
