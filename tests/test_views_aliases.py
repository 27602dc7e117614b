"""Views, aliases, dtype= and slices as NumPy has them, on the generic and cpu
targets (the cuda target runs the same cases in ``tests/cuda``). NumPy is the
oracle; see ``numpy_semantics`` for what is compared."""
import itertools

import numpy as np
import pytest

import braze
from _compare import central_differences
from numpy_semantics import (ALIAS_FUNCTIONS, ALIAS_PATTERNS, DTYPE_INPUTS, DTYPE_REDUCTIONS, DTYPES,
                             VIEW_FUNCTIONS, _arr, alias_args, check, read_after_base_write, write_through)

TARGETS = ("generic", "cpu")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(VIEW_FUNCTIONS))
def test_writes_through_every_view_reach_the_base(name, target):
    check(write_through(VIEW_FUNCTIONS[name]), _arr, target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(VIEW_FUNCTIONS))
def test_views_read_after_the_base_changed_see_the_change(name, target):
    check(read_after_base_write(VIEW_FUNCTIONS[name]), _arr, target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("layout", ["C", "F", "strided"])
@pytest.mark.parametrize("name", ["reshape", "ravel", "T_ravel_copy", "reshape_F", "view_of_view", "ravel_F_copy"])
def test_reshape_is_a_view_exactly_where_numpys_is(name, layout, target):
    """Whether a reshape copies depends on the argument's strides (part of the cache key)."""
    def make():
        a = np.arange(6.0).reshape(2, 3)
        return ({"C": a, "F": np.asfortranarray(a), "strided": np.repeat(a, 2, axis=1)[:, ::2]}[layout],)

    check(write_through(VIEW_FUNCTIONS[name]), make, target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("pattern", sorted(ALIAS_PATTERNS))
@pytest.mark.parametrize("fn", sorted(ALIAS_FUNCTIONS))
def test_arguments_that_share_memory(fn, pattern, target):
    check(ALIAS_FUNCTIONS[fn], alias_args(pattern), target)


@pytest.mark.parametrize("target", TARGETS)
def test_an_aliasing_pattern_is_part_of_the_cache_key(target):
    f = braze.compile(ALIAS_FUNCTIONS["double_and_add"], target=target)
    a, b = np.arange(4.0), np.arange(4.0)
    assert np.array_equal(f(a, a), [0.0, 4.0, 8.0, 12.0])     # y sees x's update
    assert np.array_equal(f(b, np.arange(4.0)), [0.0, 3.0, 6.0, 9.0])
    a = np.arange(4.0)
    assert np.array_equal(f(a, a), [0.0, 4.0, 8.0, 12.0])     # not the unaliased trace
    assert f.cache_info().misses == 2


def _dtype_cases():
    """Every (reduction, input, dtype) on generic; on cpu, where each is a
    compile, two dtypes per input, rotating so that each reduction meets every
    dtype (220 compiled cases were a minute of a cold CI run)."""
    for name in sorted(DTYPE_REDUCTIONS):
        for k, data in enumerate(sorted(DTYPE_INPUTS)):
            for j, dtype in enumerate(DTYPES):
                targets = ["generic"] + (["cpu"] if j in (k % 5, (k + 2) % 5) else [])
                for target in targets:
                    yield pytest.param(name, data, dtype, target,
                                       id=f"{name}-{data}-{getattr(dtype, '__name__', dtype)}-{target}")


@pytest.mark.parametrize("name, data, dtype, target", list(_dtype_cases()))
def test_reductions_and_scans_honour_dtype(name, data, dtype, target):
    fn = DTYPE_REDUCTIONS[name]
    check(lambda a: fn(a, dtype), lambda: (DTYPE_INPUTS[data](),), target)


KEYWORDS = {
    "sum_initial": lambda a: np.sum(a, initial=10.0),
    "sum_where": lambda a: np.sum(a, axis=1, where=a > 2),
    "max_initial_where": lambda a: np.max(a, axis=0, initial=-1.0, where=a < 4),
    "max_initial_empty": lambda a: np.max(a[:, :0], axis=1, initial=3.0),
    "mean_where": lambda a: np.mean(a, axis=1, where=a != 1),
    "var_where_ddof": lambda a: np.var(a, where=a > 0, ddof=1),
    "any_where": lambda a: np.any(a > 4, axis=0, where=a < 5),
    "sum_keepdims_out": lambda a: (lambda o: (np.sum(a, axis=1, keepdims=True, out=o), o)[1])(np.zeros((2, 1))),
    "ufunc_dtype_loop": lambda a: np.add(a.astype(np.int8) * 60, a.astype(np.int8) * 60, dtype=np.int16),
    "ufunc_out_where": lambda a: (lambda o: (np.multiply(a, 2.0, out=o, where=a > 2), o)[1])(np.ones((2, 3))),
    "ufunc_casting_no": lambda a: np.add(a, np.float32(1), casting="no"),
    "ufunc_order_F": lambda a: np.exp(a, order="F"),
    "astype_casting_safe": lambda a: a.astype(np.int32, casting="safe"),
    "astype_copy_false": lambda a: a.astype(np.float64, copy=False) is a,
    "reshape_copy_false_ok": lambda a: a.reshape(3, 2, copy=False),
    "reshape_copy_false_bad": lambda a: a.T.reshape(6, copy=False),
    "concatenate_dtype": lambda a: np.concatenate([a, a], dtype=np.float32),
    "concatenate_casting": lambda a: np.concatenate([a, a], dtype=np.int32),
    "take_wrap": lambda a: np.take(a, np.array([7, -8]), mode="wrap"),
    "clip_a_min_only": lambda a: np.clip(a, 1.0),
    "divmod_out": lambda a: (lambda q, r: (np.divmod(a, 4.0, out=(q, r)), q, r)[1:])(np.empty((2, 3)), np.empty((2, 3))),
    "zeros_like_F": lambda a: np.zeros_like(np.asfortranarray(a)),
    "full_order_F": lambda a: np.full((2, 3), 2.0, order="F") + a,
    "shift": lambda a: (a.astype(np.int64) << 3) >> np.int64(1),
    "shift_inplace": lambda a: (lambda b: (b.__ilshift__(2), b.__irshift__(1), b)[-1])(a.astype(np.int16)),
    "tril_1d": lambda a: np.tril(a[0]),
    "triu_1d_k": lambda a: np.triu(a[1], -1),
    "broadcast_arrays_0d": lambda a: np.broadcast_arrays(a.sum(), np.float64(2.0)),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(KEYWORDS))
def test_keywords_are_honoured_or_refused(name, target):
    check(KEYWORDS[name], _arr, target)


SCALARS = {
    "reduction_is_scalar": lambda a: a.sum(),
    "element_is_scalar": lambda a: a[1, 2],
    "ellipsis_index_is_0d_array": lambda a: a[0][..., 1],
    "reshape_to_0d_is_array": lambda a: a[:1, :1].reshape(()),
    "scalar_pow_half_is_c_pow": lambda a: (-np.inf * a[0, 1]) ** 0.5,
    "array_pow_half_is_sqrt": lambda a: (-np.inf * a[:1, 1:2]) ** 0.5,
    "element_inplace_rebinds": lambda a: _element_plus_five(a),
    "np_array_of_scalar_is_0d": lambda a: np.array(a.sum()),
    "numpy_scalar_constant_is_strong": lambda a: a.astype(np.float32) * np.float64(2.0),
    "python_scalar_is_weak": lambda a: a.astype(np.float32) * 2.0,
    "0d_argument_comes_back_0d": lambda a: np.asarray(a[0, 0]),
}


def _element_plus_five(a):
    s = a[0, 0]
    s += 5.0  # a NumPy scalar: rebinds s, never writes into a
    return a, s


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(SCALARS))
def test_numpy_scalars_and_0d_arrays(name, target):
    check(SCALARS[name], _arr, target)


@pytest.mark.parametrize("target", TARGETS)
def test_scalar_and_0d_arguments(target):
    f = lambda x, s: (x * s, s * 2, x[..., 0])  # noqa: E731
    for s in (np.float64(2.5), np.array(2.5), 2.5, np.float32(2.5), np.int64(3)):
        check(f, lambda s=s: (np.arange(3.0, dtype=np.float32), s), target)


# ---------------------------------------------------------------- slices

N = 10
BOUNDS = [0, 2, N - 2, N, N + 1, N + 3, -2, -N + 2, -N, -N - 1, -N - 3]
STEPS = [1, 2, -1, -2]


def _read(x, lo, hi, st):
    return x[lo:hi:st] * 1.0


def _write(x, lo, hi, st):
    x[lo:hi:st] = -1.0
    return x


def _inplace(x, lo, hi, st):
    x[lo:hi:st] += 5.0
    return x


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind", ["read", "write", "inplace"])
def test_every_slice_combination(kind, target):
    """968 (start, stop, step) combinations per kind, bounds as static arguments
    (Python ints) and, where NumPy integer scalars are passed, the same."""
    fn = {"read": _read, "write": _write, "inplace": _inplace}[kind]
    f = braze.compile(fn, target=target, static_argnums=(1, 2, 3))
    for lo, hi, st in itertools.product(BOUNDS, BOUNDS, STEPS):
        x_np, x_bz = np.arange(float(N)), np.arange(float(N))
        want = fn(x_np, lo, hi, st)
        got = f(x_bz, lo, hi, st)
        assert got.shape == want.shape and np.array_equal(got, want), (kind, lo, hi, st, got, want)
        assert np.array_equal(x_bz, x_np), (kind, lo, hi, st)


def test_slice_objects_are_static_arguments():
    f = braze.compile(lambda x, s: x[s], target="generic")
    x = np.arange(5.0)
    assert np.array_equal(f(x, slice(1, -1, 2)), x[1:-1:2])
    assert np.array_equal(f(x, slice(None, None, -1)), x[::-1])
    assert f(x, None).shape == (1, 5) and np.array_equal(f(x, Ellipsis), x)
    f(x, slice(1, -1, 2))
    assert f.cache_info().misses == 4


# ---------------------------------------------------------------- the alias check's cost


def test_alias_check_is_exact():
    """The per-call guard (one memory owner per argument; its cost is measured
    in bench/test_dispatch.py) and the exact overlap check behind it."""
    from braze.calling import distinct_owners, plan_aliases

    base = np.arange(100.0)
    args = [np.ones(4) for _ in range(8)]
    assert distinct_owners(args) and not plan_aliases(args, [str(i) for i in range(8)])
    assert not distinct_owners([base[1:], base[:-1]])
    assert not plan_aliases([base[::2], base[1::2]], ["a", "b"])  # same owner, no shared element
    assert plan_aliases([base[1:], base[:-1]], ["a", "b"])


# ---------------------------------------------------------------- gradients through writes into views


def _write_then_sum(view_fn):
    def f(a):
        a = a * 1.0
        v = view_fn(a)
        v[(0,) * v.ndim] = 5.0 * v[(-1,) * v.ndim]
        return (a * a).sum()
    return f


@pytest.mark.parametrize("name", ["T", "reshape", "ravel", "T_ravel_copy", "basic_slice", "negative_step",
                                  "view_of_view", "squeeze", "swapaxes", "split_piece", "reshape_F"])
def test_gradients_through_writes_into_views(name):
    """The tape follows views as tracing does: eagerly and compiled, the gradient
    of a function that writes through a view matches finite differences."""
    f = _write_then_sum(VIEW_FUNCTIONS[name])
    x = np.arange(1.0, 7.0).reshape(2, 3)
    want = central_differences(f, x)
    np.testing.assert_allclose(braze.grad(f)(x), want, atol=1e-5)
    for target in TARGETS:
        np.testing.assert_allclose(braze.compile(braze.grad(f), target=target)(x), want, atol=1e-5)


def _scale_first(a, w):
    a *= 2
    return w.sum(axis=-1)


def _bump(a, b):
    a += 1
    return a + b


@pytest.mark.parametrize("make", [
    lambda x: np.asarray(memoryview(x)),
    lambda x: np.asarray(memoryview(x))[::-1][::-1],
    lambda x: np.lib.stride_tricks.as_strided(x, x.shape, x.strides),
    lambda x: np.frombuffer(x, dtype=x.dtype),
], ids=["memoryview", "view_of_a_memoryview_array", "as_strided", "frombuffer"])
def test_arguments_sharing_memory_through_another_owner_are_aliases(make):
    """Arrays made from another's memory through a memoryview, a buffer or
    ``as_strided`` have another ``.base`` (no ndarray owns their memory):
    they were taken as separate memory, and a write through one was not seen
    through the other, on the first call and on the fast path after an
    unrelated one. Their memory is now compared."""
    f = braze.compile(_bump, target="cpu")
    f(np.zeros(6), make(np.zeros(6)))  # (unrelated arrays first: the fast path's entry)
    for _ in range(2):
        x, y = np.arange(6.0), np.arange(6.0)
        got, want = f(x, make(x)), _bump(y, make(y))
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(x, y)
    windows = braze.compile(_scale_first, target="cpu")
    x, y = np.arange(6.0), np.arange(6.0)
    view = np.lib.stride_tricks.sliding_window_view
    np.testing.assert_array_equal(windows(x, view(x, 3)), _scale_first(y, view(y, 3)))
