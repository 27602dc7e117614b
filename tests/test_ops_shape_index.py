"""Shape manipulation, indexing and setitem through `braze.compile(..., target="generic")`.

Every case is one Python function run on NumPy and through braze; results
(arrays, or lists of arrays for `np.split`) must match in dtype, shape and
values.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

import braze

try:
    from _compare import assert_same, check, numpy_accepts
except ImportError:  # tests/ imported as a package
    from tests._compare import assert_same, check, numpy_accepts

DTYPES = ["float32", "float64", "int32", "int64", "bool"]


def make(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    if dt.kind in "iu":
        return np.asarray(rng.integers(-9, 10, size=shape).astype(dt))
    return np.asarray(rng.uniform(-3, 3, size=shape).astype(dt))


def ar(shape, dtype="float64"):
    """Distinct values 0..n-1: every misplaced element shows."""
    return np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)


# ---------------------------------------------------------------- shape ops (one input)

SHAPE_OPS = {
    "reshape_tuple": (lambda x: x.reshape((4, 6)), (2, 3, 4)),
    "reshape_args": (lambda x: x.reshape(6, 4), (2, 3, 4)),
    "reshape_neg1": (lambda x: x.reshape(-1, 4), (2, 3, 4)),
    "reshape_neg1_mid": (lambda x: x.reshape(2, -1, 2), (2, 3, 4)),
    "reshape_flat": (lambda x: x.reshape(-1), (2, 3, 4)),
    "np_reshape": (lambda x: np.reshape(x, (3, 8)), (2, 3, 4)),
    "reshape_to_0d": (lambda x: x.reshape(()), (1, 1)),
    "reshape_empty": (lambda x: x.reshape(0, 5), (2, 0, 3)),
    "reshape_then_math": (lambda x: x.reshape(4, 6) * 2 + x.reshape(4, 6)[::-1], (2, 3, 4)),
    "transpose": (lambda x: x.transpose(), (2, 3, 4)),
    "transpose_axes": (lambda x: x.transpose(1, 2, 0), (2, 3, 4)),
    "transpose_axes_tuple": (lambda x: x.transpose((2, 0, 1)), (2, 3, 4)),
    "np_transpose": (lambda x: np.transpose(x), (3, 4)),
    "np_transpose_axes": (lambda x: np.transpose(x, (0, 2, 1)), (2, 3, 4)),
    "np_transpose_neg_axes": (lambda x: np.transpose(x, (-1, 0, 1)), (2, 3, 4)),
    "dotT": (lambda x: x.T, (2, 3, 4)),
    "dotT_1d": (lambda x: x.T, (5,)),
    "dotT_plus": (lambda x: x.T + 1, (3, 4)),
    "swapaxes": (lambda x: x.swapaxes(0, 2), (2, 3, 4)),
    "np_swapaxes_neg": (lambda x: np.swapaxes(x, -1, 0), (2, 3, 4)),
    "moveaxis": (lambda x: np.moveaxis(x, 0, -1), (2, 3, 4)),
    "moveaxis_multi": (lambda x: np.moveaxis(x, [0, 1], [2, 0]), (2, 3, 4)),
    "broadcast_to": (lambda x: np.broadcast_to(x, (3, 2, 4)), (2, 4)),
    "broadcast_to_from_1": (lambda x: np.broadcast_to(x, (5, 3)) + 1, (1, 3)),
    "broadcast_to_0d": (lambda x: np.broadcast_to(x, (2, 3)), ()),
    "expand_dims0": (lambda x: np.expand_dims(x, 0), (3, 4)),
    "expand_dims_neg": (lambda x: np.expand_dims(x, -1), (3, 4)),
    "expand_dims_tuple": (lambda x: np.expand_dims(x, (0, 2)), (3, 4)),
    "squeeze": (lambda x: x.squeeze(), (1, 3, 1, 4)),
    "squeeze_axis": (lambda x: x.squeeze(axis=2), (1, 3, 1, 4)),
    "squeeze_axis_tuple": (lambda x: np.squeeze(x, axis=(0, -2)), (1, 3, 1, 4)),
    "squeeze_to_0d": (lambda x: np.squeeze(x), (1, 1)),
    "ravel": (lambda x: x.ravel(), (2, 3, 4)),
    "np_ravel": (lambda x: np.ravel(x), (3, 4)),
    "flatten": (lambda x: x.flatten(), (2, 3, 4)),
    "ravel_T": (lambda x: x.T.ravel(), (3, 4)),
    "flatten_T": (lambda x: x.T.flatten(), (3, 4)),
    "reshape_T": (lambda x: x.T.reshape(-1), (3, 4)),
    "shape_attrs": (lambda x: x.reshape(x.shape[0] * x.shape[1], x.shape[-1]) * (x.size + x.ndim), (2, 3, 4)),
    "newaxis_math": (lambda x: x[:, None] - x[None, :], (4,)),
}


@pytest.mark.parametrize("name,dtype", [
    (name, dt) for name in SHAPE_OPS for dt in ["float32", "int64", "bool"]
    if numpy_accepts(SHAPE_OPS[name][0], make(dt, SHAPE_OPS[name][1], 1))  # bool - bool is no NumPy op
])
def test_shape_op(name, dtype):
    fn, shape = SHAPE_OPS[name]
    check(fn, make(dtype, shape, 1))


@pytest.mark.parametrize("layout", ["T", "step", "neg"])
@pytest.mark.parametrize("name", ["reshape_flat", "ravel", "flatten", "transpose", "swapaxes",
                                  "moveaxis", "expand_dims0", "dotT"])
def test_shape_op_noncontiguous_input(name, layout):
    fn, _ = SHAPE_OPS[name]
    base = ar((4, 6, 2))
    x = {"T": base.transpose(1, 2, 0), "step": base[::2, ::3], "neg": base[::-1, :, ::-1]}[layout]
    check(fn, x)


# ---------------------------------------------------------------- joining and splitting

JOIN_OPS = {
    "concat0": (lambda a, b: np.concatenate([a, b]), (2, 3), (4, 3)),
    "concat1": (lambda a, b: np.concatenate((a, b), axis=1), (2, 3), (2, 5)),
    "concat_neg": (lambda a, b: np.concatenate([a, b, a], axis=-1), (2, 3), (2, 1)),
    "concat_none": (lambda a, b: np.concatenate([a, b], axis=None), (2, 3), (4,)),
    "concat_empty": (lambda a, b: np.concatenate([a, b], axis=0), (0, 3), (2, 3)),
    "concat_1d": (lambda a, b: np.concatenate([a, b, a]), (3,), (2,)),
    "stack0": (lambda a, b: np.stack([a, b]), (2, 3), (2, 3)),
    "stack1": (lambda a, b: np.stack([a, b], axis=1), (2, 3), (2, 3)),
    "stack_neg": (lambda a, b: np.stack((a, b, a), axis=-1), (2, 3), (2, 3)),
    "hstack_1d": (lambda a, b: np.hstack([a, b]), (3,), (4,)),
    "hstack_2d": (lambda a, b: np.hstack([a, b]), (2, 3), (2, 1)),
    "vstack_1d": (lambda a, b: np.vstack([a, b]), (3,), (3,)),
    "vstack_2d": (lambda a, b: np.vstack([a, b]), (2, 3), (1, 3)),
    "concat_with_const": (lambda a, b: np.concatenate([a, np.ones((1, 3), a.dtype), b]), (2, 3), (1, 3)),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(JOIN_OPS))
def test_join(name, dtype):
    fn, sa, sb = JOIN_OPS[name]
    check(fn, make(dtype, sa, 1), make(dtype, sb, 2))


@pytest.mark.parametrize("name", ["concat0", "stack0", "hstack_2d", "vstack_2d"])
def test_join_mixed_dtypes_promote(name):
    fn, sa, sb = JOIN_OPS[name]
    out = check(fn, make("int32", sa, 1), make("float32", sb, 2))
    assert np.asarray(out).dtype == np.float64


SPLIT_OPS = {
    "split_int": (lambda x: np.split(x, 3), (6, 2)),
    "split_int_axis1": (lambda x: np.split(x, 2, axis=1), (3, 4)),
    "split_indices": (lambda x: np.split(x, [1, 4]), (6, 2)),
    "split_indices_neg_axis": (lambda x: np.split(x, [2, 3], axis=-1), (2, 5)),
    "split_indices_out_of_range": (lambda x: np.split(x, [2, 10]), (5,)),
    "split_indices_unsorted": (lambda x: np.split(x, [3, 1]), (5,)),
    "array_split_uneven": (lambda x: np.array_split(x, 3), (7,)),
    "array_split_more_than_len": (lambda x: np.array_split(x, 4), (2, 3)),
    "array_split_indices": (lambda x: np.array_split(x, [1, 2], axis=1), (2, 4)),
    "split_then_math": (lambda x: [p * (i + 1) for i, p in enumerate(np.split(x, 2))], (4, 3)),
}


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
@pytest.mark.parametrize("name", list(SPLIT_OPS))
def test_split(name, dtype):
    fn, shape = SPLIT_OPS[name]
    x = make(dtype, shape, 3)
    if name == "split_then_math" and dtype == "bool":
        x = x.astype(np.int64)
    actual = check(fn, x)
    assert isinstance(actual, (list, tuple)), type(actual)


def test_split_uneven_int_sections_raises_like_numpy():
    def fn(x):
        return np.split(x, 3)

    x = ar((7,))
    with pytest.raises(ValueError):
        fn(x)
    with pytest.raises(Exception):
        braze.compile(fn, target="generic")(x)


# ---------------------------------------------------------------- basic indexing

BASIC_INDEX = {
    "int": lambda x: x[1],
    "neg_int": lambda x: x[-1],
    "int_int": lambda x: x[1, 2],
    "neg_int_int": lambda x: x[-2, -1],
    "chained": lambda x: x[1][2],
    "slice": lambda x: x[1:3],
    "slice_step": lambda x: x[::2],
    "slice_step3": lambda x: x[1::3],
    "slice_neg_step": lambda x: x[::-1],
    "slice_neg_step2": lambda x: x[::-2],
    "slice_neg_bounds": lambda x: x[-3:-1],
    "slice_neg_step_bounds": lambda x: x[3:0:-2],
    "slice_out_of_range": lambda x: x[2:100],
    "slice_out_of_range_low": lambda x: x[-100:2],
    "slice_out_of_range_both": lambda x: x[-100:100:3],
    "slice_neg_step_out_of_range": lambda x: x[100:-100:-3],
    "slice_empty": lambda x: x[3:1],
    "slice_empty_neg": lambda x: x[1:3:-1],
    "slice_2d": lambda x: x[1:, ::-2],
    "slice_int_mix": lambda x: x[:, 1],
    "slice_int_mix_neg": lambda x: x[::-1, -1],
    "none_front": lambda x: x[None],
    "none_middle": lambda x: x[:, None, 1:],
    "none_end": lambda x: x[..., None],
    "ellipsis": lambda x: x[...],
    "ellipsis_int": lambda x: x[..., 0],
    "ellipsis_slice": lambda x: x[..., ::-1],
    "int_ellipsis": lambda x: x[1, ...],
    "ellipsis_none_int": lambda x: x[None, ..., 2],
    "full_slice": lambda x: x[:, :],
    "slice_then_math": lambda x: x[1:] - x[:-1],
    "empty_dim_slice": lambda x: x[:0],
}


def _basic_input(shape, dtype):
    return make(dtype, shape, 4) if dtype != "float64" else ar(shape)


@pytest.mark.parametrize("name,shape,dtype", [
    (name, shape, dt)
    for name in BASIC_INDEX for shape in [(5, 4), (6, 3, 2)] for dt in ["float64", "int32", "bool"]
    if numpy_accepts(BASIC_INDEX[name], _basic_input(shape, dt))  # bool - bool is no NumPy op
])
def test_basic_indexing(name, shape, dtype):
    check(BASIC_INDEX[name], _basic_input(shape, dtype))


@pytest.mark.parametrize("idx", [0, -1, slice(None, None, -1), (), Ellipsis, None])
def test_indexing_1d_and_0d(idx):
    def fn(x):
        return x[idx]

    check(fn, ar((5,)))
    if idx in ((), Ellipsis, None):
        check(fn, np.array(3.5))


def test_int_index_out_of_bounds_raises():
    def fn(x):
        return x[5]

    x = ar((5, 2))
    with pytest.raises(IndexError):
        fn(x)
    with pytest.raises(Exception):
        braze.compile(fn, target="generic")(x)


# ---------------------------------------------------------------- advanced indexing

I1 = np.array([3, 0, -1, 2, 0])
I2 = np.array([[0, 1], [-1, 2]])
J1 = np.array([1, 0, 2, 2, -3])

ADV_CONST = {
    "gather1": lambda x: x[I1],
    "gather_2d_index": lambda x: x[I2],
    "gather_list": lambda x: x[[0, 2, -1]],
    "gather_axis1": lambda x: x[:, J1[:3]],
    "two_adjacent": lambda x: x[I1, J1],
    "two_adjacent_bcast": lambda x: x[I1[:, None], J1[None, :3]],
    "adv_then_slice": lambda x: x[I1, 1:],
    "slice_then_adv": lambda x: x[1:, J1],
    "adv_int": lambda x: x[I1, 2],
    "int_adv": lambda x: x[1, J1],
    "non_adjacent": lambda x: x[I1, :, J1[:5] % 2],
    "non_adjacent_2d": lambda x: x[I2, :, np.array([[0, 1], [1, 0]])],
    "adjacent_after_slice": lambda x: x[:, J1 % 3, np.array([0, 1, 1, 0, 1])],
    "adv_ellipsis": lambda x: x[..., np.array([1, 0, 1])],
    "adv_none": lambda x: x[None, I1],
    "adv_then_math": lambda x: x[I1] * 2 + x[I1[::-1]],
}


def _adv_shape(name):
    return (4, 3, 2) if name in ("non_adjacent", "non_adjacent_2d", "adjacent_after_slice", "adv_ellipsis") else (4, 3)


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
@pytest.mark.parametrize("name", list(ADV_CONST))
def test_advanced_indexing_constant_indices(name, dtype):
    fn = ADV_CONST[name]
    x = make(dtype, _adv_shape(name), 5)
    if name == "adv_then_math" and dtype == "bool":
        x = x.astype(np.int64)
    if not numpy_accepts(fn, x):
        raise AssertionError(f"bad test case {name}")
    check(fn, x)


ADV_TRACED = {
    "gather1": lambda x, i, j: x[i],
    "gather_axis1": lambda x, i, j: x[:, j % 3],
    "two_adjacent": lambda x, i, j: x[i, j % 3],
    "non_adjacent": lambda x, i, j: x[i, :, j % 2],
    "adv_slice_int": lambda x, i, j: x[i, 1:, 0],
    "neg_indices": lambda x, i, j: x[-1 - i],
}


@pytest.mark.parametrize("idx_dtype", ["int32", "int64"])
@pytest.mark.parametrize("name", list(ADV_TRACED))
def test_advanced_indexing_traced_indices(name, idx_dtype):
    fn = ADV_TRACED[name]
    x = ar((4, 3, 2), "float32")
    i = np.array([3, 0, -1, 2], dtype=idx_dtype)
    j = np.array([1, 0, 2, -2], dtype=idx_dtype)
    check(fn, x, i, j)


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("traced", [False, True])
def test_take(axis, traced):
    x = ar((4, 5), "float32")
    idx = np.array([[0, 3], [-1, 2]])

    if traced:
        def fn(x, idx):
            return np.take(x, idx, axis=axis) + 0
        check(fn, x, idx)
    else:
        def fn(x):
            return np.take(x, idx, axis=axis), np.take(x, [1, -2], axis=axis)
        check(fn, x)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("traced", [False, True])
def test_take_along_axis(axis, traced):
    x = make("float64", (4, 5), 6)
    idx = np.argsort(x, axis=axis)[(slice(None, 3),) if axis == 0 else (slice(None), slice(None, 3))]
    if traced:
        def fn(x, idx):
            return np.take_along_axis(x, idx, axis=axis)
        check(fn, x, idx)
    else:
        def fn(x):
            return np.take_along_axis(x, idx, axis=axis)
        check(fn, x)


def test_take_along_axis_with_traced_argmax():
    def fn(x):
        i = np.argmax(x, axis=1)
        return np.take_along_axis(x, i[:, None], axis=1)[:, 0]

    check(fn, make("float32", (5, 4), 7))


MASK_1D = np.array([True, False, True, True, False])
MASK_2D = np.array([[True, False, True], [False, False, True], [True, True, False], [False, True, False], [True, False, False]])


@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
@pytest.mark.parametrize("case", ["1d", "rows", "full2d", "after_slice", "all_false", "then_math"])
def test_boolean_mask_constant_getitem(case, dtype):
    fns = {
        "1d": (lambda x: x[MASK_1D], (5,)),
        "rows": (lambda x: x[MASK_1D], (5, 3)),
        "full2d": (lambda x: x[MASK_2D], (5, 3)),
        "after_slice": (lambda x: x[:, MASK_1D[:3]], (5, 3)),
        "all_false": (lambda x: x[np.zeros(5, bool)], (5, 3)),
        "then_math": (lambda x: x[MASK_1D].astype(np.float64) * 2, (5,)),
    }
    fn, shape = fns[case]
    check(fn, make(dtype, shape, 8))


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_np_where_three_arg(dtype):
    def fn(x, y):
        return np.where(x > 0, x, y), np.where(x[:, :1] > y[:1], x * 2, 0)

    check(fn, make(dtype, (3, 4), 9), make(dtype, (3, 4), 10))


# ---------------------------------------------------------------- setitem

def _set_slice(x, v):
    y = x.copy()
    y[1:-1] = v[1:-1]
    return y


def _set_traced_mask(x, v):
    y = x.copy()
    y[x > 0] = 0
    return y


def _set_traced_mask_from_other(x, v):
    y = x.copy()
    y[v > 0] = -1
    return y


def _set_const_idx(x, v):
    y = x.copy()
    y[np.array([0, 3, -1])] = v[:3]
    return y


def _set_int_row(x, v):
    y = x.copy()
    y[2] = v[0]
    return y


def _set_scalar(x, v):
    y = x.copy()
    y[0, 1] = 7
    y[-1] = 3
    return y


def _set_ellipsis_iadd(x, v):
    y = x.copy()
    y[..., 0] += 1
    return y


def _set_step_slice(x, v):
    y = x.copy()
    y[::2, ::-1] = v[: (x.shape[0] + 1) // 2]
    return y


def _set_none_slice(x, v):
    y = x.copy()
    y[:, 1:3] = v[:, :2] * 2
    return y


def _set_zeros_like(x, v):
    out = np.zeros_like(x)
    out[:] = x * 2
    return out


def _set_twice_read_between(x, v):
    y = x.copy()
    y[0] = 5
    z = y.sum(axis=0)  # reads the first update
    y[1] = z
    return y


def _set_on_view_through_copy(x, v):
    y = x.copy()
    y[1:, :][0] = v[0]
    return y


def _set_broadcast_column(x, v):
    y = x.copy()
    y[:, 0:1] = v[:, :1]
    return y


def _set_bool_const_mask_traced_value(x, v):
    y = x.copy()
    y[np.array([True, False, True, False, True])] = v[:3]
    return y


SETITEM = {
    "slice": _set_slice,
    "traced_mask": _set_traced_mask,
    "traced_mask_other": _set_traced_mask_from_other,
    "const_idx_array": _set_const_idx,
    "int_row": _set_int_row,
    "scalar": _set_scalar,
    "ellipsis_iadd": _set_ellipsis_iadd,
    "step_slice": _set_step_slice,
    "partial_cols": _set_none_slice,
    "zeros_like_fill": _set_zeros_like,
    "twice_read_between": _set_twice_read_between,
    "broadcast_column": _set_broadcast_column,
    "const_bool_mask": _set_bool_const_mask_traced_value,
}


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("name", list(SETITEM))
def test_setitem(name, dtype):
    fn = SETITEM[name]
    x = make(dtype, (5, 4), 11)
    v = make(dtype, (5, 4), 12)
    check(fn, x, v)
    # The caller's arrays are never mutated by the compiled function.
    x0, v0 = x.copy(), v.copy()
    braze.compile(fn, target="generic")(x, v)
    assert np.array_equal(x, x0) and np.array_equal(v, v0)


def test_setitem_through_view_of_copy_matches_numpy_or_raises():
    """NumPy writes through a basic-indexing view into the copy. braze must give
    NumPy's answer or refuse with a BrazeError -- never a silently different one."""
    fn = _set_on_view_through_copy
    x, v = ar((5, 4)), ar((5, 4)) * 10
    try:
        actual = braze.compile(fn, target="generic")(x, v)
    except braze.BrazeError:
        return
    assert_same(actual, fn(x, v))


@pytest.mark.parametrize("idx_dtype", ["int32", "int64"])
def test_setitem_traced_index_array(idx_dtype):
    def fn(x, idx, v):
        y = x.copy()
        y[idx] = v
        return y

    x = ar((6, 3))
    idx = np.array([4, 0, -1], dtype=idx_dtype)  # distinct targets: the result is well defined
    v = np.arange(9.0).reshape(3, 3) + 100
    check(fn, x, idx, v)


def test_setitem_traced_scalar_value_with_traced_mask():
    def fn(x, s):
        y = x.copy()
        y[y < 0] = s
        return y

    check(fn, make("float64", (4, 4), 13), 0.5)


def test_setitem_casts_like_numpy():
    """Assigning float values into an int array truncates (NumPy casts unsafely on setitem)."""
    def fn(x, v):
        y = x.copy()
        y[:2] = v[:2] * 1.7
        return y

    check(fn, make("int32", (4, 3), 14), make("float64", (4, 3), 15))


def test_setitem_iadd_on_advanced_index():
    def fn(x):
        y = x.copy()
        y[np.array([0, 2]), 1] += 10
        return y

    check(fn, ar((3, 3)))


def test_setitem_shape_mismatch_raises():
    def fn(x, v):
        y = x.copy()
        y[1:3] = v
        return y

    x, v = ar((5, 4)), ar((3, 4))
    with pytest.raises(ValueError):
        fn(x, v)
    with pytest.raises(Exception):
        braze.compile(fn, target="generic")(x, v)



@pytest.mark.parametrize("target", ["generic", "cpu"])
def test_one_index_array_gathers_rows_and_columns_as_numpy(target):
    """One index array (the gather np.take serves): rows, columns, a 2-d
    index, negative indices, a non-contiguous operand, and an index out of
    range raising IndexError (a BrazeError) instead of reading past the end."""
    x = ar((6, 5), "float64")[::-1]
    for fn, idx in [(lambda x, i: x[i] * 2.0, np.array([0, -1, 3, 3])),
                    (lambda x, i: x[:, i] + 1.0, np.array([[4, -5], [0, 2]], dtype=np.int32)),
                    (lambda x, i: x[i], np.array([], dtype=np.intp))]:
        assert_same(braze.compile(fn, target=target)(x, idx), fn(x, idx))
    f = braze.compile(lambda x, i: x[:, i], target=target)
    with pytest.raises(IndexError, match="out of bounds|index"):
        f(x, np.array([0, 5]))
    with pytest.raises(braze.BrazeError):
        f(x, np.array([-6]))


@pytest.mark.parametrize("target", ["generic", "cpu"])
def test_take_reads_booleans_as_positions_and_a_0d_boolean_index_adds_an_axis(target):
    """np.take casts a boolean index to positions 0 and 1 (it was taken as a
    mask: 3 elements where NumPy gives 7); x[np.array(True)] is x with a new
    leading axis of length 1, x[np.array(False)] of length 0 (it recursed
    without end)."""
    a, m = np.arange(7) * 10, np.array([True, False, True, False, False, False, True])
    A = np.arange(24.0).reshape(4, 6)
    cases = [(lambda a, m: np.take(a, m), (a, m)),
             (lambda A, m: np.take(A, m[:6], axis=1), (A, m)),
             (lambda A, m: np.take(A, m, axis=1, mode="clip"), (A, m)),
             (lambda A: np.take(A, [True, False]), (A,))]
    for b in (True, False):
        cases += [(lambda A, b: A[b], (A, np.array(b))), (lambda A, b: A[b] * 2.0, (A, np.bool_(b)))]
    cases += [(lambda A: A[True] + 1.0, (A,)), (lambda A: A[np.False_], (A,))]
    for fn, args in cases:
        got, want = braze.compile(fn, target=target)(*args), fn(*args)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


# A traced mask among slices and ints: ``a[mask, 1:] = v``, ``a[0, mask] = v``,
# ``a[:, mask] *= 2``. Each traced whole (fullgraph: no run as NumPy).
INNER_MASK_UPDATES = {
    "mask, slice = scalar": lambda a: a.__setitem__((a[:, 0] > 0, slice(1, None)), -1),
    "int, mask = scalar": lambda a: a.__setitem__((0, a[0] > 0), 7),
    "mask, int = scalar": lambda a: a.__setitem__((a[:, 0] > 0, 2), 7),
    "mask, slice = row": lambda a: a.__setitem__((a[:, 0] > 0, slice(1, None)), np.array([1, 2, 3], a.dtype)),
    "slice, mask = column": lambda a: a.__setitem__((slice(None), a[0] > 0), np.arange(6, dtype=a.dtype)[:, None]),
    "slice, mask = scalar, strided": lambda a: a.__setitem__((slice(1, 5, 2), a[0] > 0), 3),
    "slice, mask *= 2": lambda a: a.__setitem__((slice(None), a[0] > 0), a[:, a[0] > 0] * 2),
    "mask, slice += row": lambda a: a.__setitem__((a[:, 0] > 0, slice(None, 2)),
                                                  a[a[:, 0] > 0, :2] + np.array([1, 2], a.dtype)),
    "nothing selected": lambda a: a.__setitem__((slice(None), a[0] > 100), a[:, a[0] > 100] - 1),
}


@pytest.mark.parametrize("target", ["generic", "cpu"])
@pytest.mark.parametrize("dtype", ["float32", "int64"])
@pytest.mark.parametrize("case", sorted(INNER_MASK_UPDATES))
def test_setitem_with_a_mask_among_slices_and_ints_is_traced(case, dtype, target, caplog):
    update = INNER_MASK_UPDATES[case]

    def fn(a):
        a = a.copy()
        update(a)
        return a

    f = braze.compile(fn, target=target)
    with caplog.at_level(logging.WARNING, logger="braze"):
        for seed in range(2):  # another mask count: traced again, still right
            a = make(dtype, (6, 4), 40 + seed)
            assert_same(f(a), fn(a))
    assert "plain NumPy" not in caplog.text  # (a read a[mask, :2] is a graph break; the store is traced)


@pytest.mark.parametrize("target", ["generic", "cpu"])
def test_setitem_with_a_mask_inside_a_3d_index(target):
    def fn(a):
        b = np.stack([a, a * 2, a * 3])
        b[1:, b[0, :, 0] > 0, ::2] = np.array([-1.0, -2.0])
        b[..., b[0, :, 0] > 1, 1] = 0
        b[1, b[0] > 0] = -5  # a 2-d mask after an int
        return b

    assert_same(braze.compile(fn, target=target, fullgraph=True)(make("float64", (6, 4), 3)),
                fn(make("float64", (6, 4), 3)))


def test_setitem_with_a_mask_among_slices_differentiates():
    def loss(a):
        b = a * 1.0
        b[b[:, 0] > 0, 1:] *= 3
        b[:, b[0] > 0] = 0.5
        return (b ** 2).sum()

    a = make("float64", (6, 4), 5)
    g = braze.compile(braze.grad(loss), target="cpu")(a)
    fd = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        e = np.zeros_like(a)
        e[i] = 1e-6
        fd[i] = (loss(a + e) - loss(a - e)) / 2e-6
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)
    assert np.abs(g).max() > 0


def test_setitem_with_a_mask_among_slices_wrong_count_raises_as_numpy():
    def fn(a, v):
        a = a.copy()
        a[a[:, 0] > 0, 1:] = v
        return a

    a, v = make("float64", (6, 4), 41), np.ones((7, 3))  # 7 rows given, fewer selected
    with pytest.raises(ValueError):
        fn(a, v)
    with pytest.raises(ValueError, match="cannot assign 7 input values"):
        braze.compile(fn, target="generic")(a, v)


@pytest.mark.parametrize("target", ["generic", "cpu"])
def test_a_list_index_holding_a_traced_scalar_is_traced_not_a_guard(target):
    """``A[[k, p]] = A[[p, k]]`` with p an argmax (partial pivoting): the list is
    an index array braze builds, so new data with other pivots runs the same
    program, where converting the list guarded every pivot's value."""
    def swap(A, b):
        A = A.copy()
        p = np.argmax(np.abs(A[:, 0]))
        A[[0, p]] = A[[p, 0]]
        return A, A[[p, 1], 2] * b[[1, p]], A[[[p], [0]], [1, 3]]

    f = braze.compile(swap, target=target)
    for seed in range(4):
        A = make("float64", (5, 4), 60 + seed)
        for got, want in zip(f(A, np.arange(5.0)), swap(A, np.arange(5.0))):
            assert_same(got, want)
    assert f.cache_info().reasons == ["first call"], f.cache_info().reasons  # (no re-specializing)
