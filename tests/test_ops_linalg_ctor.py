"""Contractions (matmul, dot, outer, einsum) and array constructors used inside
a traced function, through `braze.compile(..., target="generic")` vs NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest

import braze

try:
    from _compare import assert_same, check
except ImportError:  # tests/ imported as a package
    from tests._compare import assert_same, check

LIN_DTYPES = ["float32", "float64", "int32"]


def make(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        return np.asarray(rng.integers(-4, 5, size=shape).astype(dt))
    if dt == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    return np.asarray(rng.uniform(-1, 1, size=shape).astype(dt))


# Contractions sum K products; scale float32's tolerance with K (K <= 7 here).
def _check_lin(fn, *args):
    dt = np.result_type(*args)
    rtol = 5e-5 if dt == np.float32 else None
    return check(fn, *args, rtol=rtol)


# ---------------------------------------------------------------- matmul

MATMUL_SHAPES = {
    "1d_1d": ((4,), (4,)),
    "1d_2d": ((4,), (4, 3)),
    "2d_1d": ((3, 4), (4,)),
    "2d_2d": ((3, 4), (4, 5)),
    "3d_3d": ((2, 3, 4), (2, 4, 5)),
    "3d_2d": ((2, 3, 4), (4, 5)),
    "2d_3d": ((3, 4), (2, 4, 5)),
    "bcast_batch": ((2, 1, 3, 4), (5, 4, 2)),
    "3d_1d": ((2, 3, 4), (4,)),
    "1d_3d": ((4,), (2, 4, 5)),
    "k_zero": ((3, 0), (0, 2)),
    "m_zero": ((0, 4), (4, 2)),
    "ones": ((1, 1), (1, 1)),
}


@pytest.mark.parametrize("dtype", LIN_DTYPES)
@pytest.mark.parametrize("case", list(MATMUL_SHAPES))
@pytest.mark.parametrize("form", ["operator", "np.matmul"])
def test_matmul(form, case, dtype):
    sa, sb = MATMUL_SHAPES[case]
    a, b = make(dtype, sa, 1), make(dtype, sb, 2)
    fn = (lambda a, b: a @ b) if form == "operator" else (lambda a, b: np.matmul(a, b))
    _check_lin(fn, a, b)


@pytest.mark.parametrize("dta,dtb", [("float32", "float64"), ("int32", "float32"), ("int32", "int64")])
def test_matmul_mixed_dtypes(dta, dtb):
    _check_lin(lambda a, b: a @ b, make(dta, (3, 4), 1), make(dtb, (4, 2), 2))


def test_matmul_noncontiguous_and_chained():
    def fn(a, b):
        return (a.T @ b) @ b.T, a[::2] @ b[::-1].T, np.matmul(a.T[:, ::-1], b)

    check(fn, make("float64", (4, 3), 1), make("float64", (4, 3), 2))


def test_matmul_with_constant_operand():
    w = make("float32", (4, 3), 5)

    def fn(x):
        return x @ w, w.T @ x.T

    _check_lin(fn, make("float32", (2, 4), 6))


def test_matmul_shape_mismatch_raises():
    def fn(a, b):
        return a @ b

    a, b = make("float64", (3, 4)), make("float64", (5, 2))
    with pytest.raises(ValueError):
        fn(a, b)
    with pytest.raises(Exception):
        braze.compile(fn, target="generic")(a, b)


def test_matmul_rejects_0d_like_numpy():
    def fn(a, b):
        return a @ b

    a, b = np.array(2.0), make("float64", (3,))
    with pytest.raises(ValueError):
        fn(a, b)
    with pytest.raises(Exception):
        braze.compile(fn, target="generic")(a, b)


# ---------------------------------------------------------------- dot / outer

DOT_SHAPES = {
    "1d_1d": ((5,), (5,)),
    "2d_2d": ((3, 5), (5, 2)),
    "2d_1d": ((3, 5), (5,)),
    "1d_2d": ((3,), (3, 4)),
    "3d_2d": ((2, 3, 4), (4, 5)),  # N-D: sum over last of a and second-to-last of b
    "3d_3d": ((2, 3, 4), (3, 4, 2)),
    "2d_3d": ((3, 4), (2, 4, 5)),
    "scalar_2d": ((), (3, 4)),
}


@pytest.mark.parametrize("dtype", LIN_DTYPES)
@pytest.mark.parametrize("case", list(DOT_SHAPES))
@pytest.mark.parametrize("form", ["np.dot", "method"])
def test_dot(form, case, dtype):
    sa, sb = DOT_SHAPES[case]
    a, b = make(dtype, sa, 3), make(dtype, sb, 4)
    fn = (lambda a, b: np.dot(a, b)) if form == "np.dot" else (lambda a, b: a.dot(b))
    _check_lin(fn, a, b)


@pytest.mark.parametrize("dtype", LIN_DTYPES)
@pytest.mark.parametrize("shapes", [((3,), (4,)), ((2, 2), (3,)), ((0,), (2,))])
def test_outer(dtype, shapes):
    a, b = make(dtype, shapes[0], 5), make(dtype, shapes[1], 6)
    check(lambda a, b: np.outer(a, b), a, b)


# ---------------------------------------------------------------- einsum

EINSUM = {
    "ij,jk->ik": ((3, 4), (4, 5)),
    "bij,bjk->bik": ((2, 3, 4), (2, 4, 5)),
    "ij->ji": ((3, 4),),
    "i,i->": ((6,), (6,)),
    "ij,j->i": ((3, 4), (4,)),
    "ij,kj->ik": ((3, 4), (5, 4)),
    "ij,jk": ((3, 4), (4, 2)),  # implicit output
    "i,j->ij": ((3,), (4,)),
}


@pytest.mark.parametrize("dtype", LIN_DTYPES)
@pytest.mark.parametrize("spec", list(EINSUM))
def test_einsum(spec, dtype):
    operands = [make(dtype, s, 7 + k) for k, s in enumerate(EINSUM[spec])]

    def fn(*ops):
        return np.einsum(spec, *ops)

    _check_lin(fn, *operands)


# ---------------------------------------------------------------- constructors inside the trace

CTORS = {
    "zeros_shape": lambda x: np.zeros(x.shape) + x,
    "zeros_dtype": lambda x: np.zeros(x.shape, dtype=x.dtype) + x,
    "zeros_int_shape": lambda x: np.zeros(x.shape[-1], np.float32) * x,
    "ones": lambda x: np.ones((x.shape[0], 1)) * x,
    "ones_dtype": lambda x: x - np.ones(x.shape, x.dtype),
    "full": lambda x: np.full(x.shape, 2.5) * x,
    "full_int": lambda x: x + np.full((1, x.shape[1]), 3, dtype=np.int32),
    "full_typed_fill": lambda x: x * np.full(x.shape, np.float32(0.5)),
    "zeros_like": lambda x: np.zeros_like(x) + x * 2,
    "ones_like": lambda x: np.ones_like(x) - x,
    "ones_like_dtype": lambda x: np.ones_like(x, dtype=np.float64) / (np.abs(x) + 1),
    "full_like": lambda x: np.full_like(x, 7) * x,
    "full_like_float_fill": lambda x: np.full_like(x, 1.5) + x,
    "arange_n": lambda x: np.arange(x.shape[1]) * x,
    "arange_start_stop_step": lambda x: x + np.arange(1, 2 * x.shape[1] + 1, 2),
    "arange_float": lambda x: x * np.arange(0.0, 1.0, 1.0 / x.shape[1])[: x.shape[1]],
    "arange_dtype": lambda x: x + np.arange(x.shape[1], dtype=np.float32),
    "eye": lambda x: np.eye(x.shape[0]) @ x,
    "eye_rect_k": lambda x: x * np.eye(x.shape[0], x.shape[1], k=1),
    "eye_dtype": lambda x: x + np.eye(x.shape[0], x.shape[1], dtype=np.int32),
    "tri": lambda x: np.tri(x.shape[0], x.shape[1]) * x,
    "tri_k_dtype": lambda x: x * np.tri(x.shape[0], x.shape[1], k=-1, dtype=np.int32),
    "linspace": lambda x: np.linspace(0, 1, x.shape[1]) * x,
    "linspace_float32_dtype": lambda x: x + np.linspace(-1, 1, x.shape[1], dtype=np.float32),
    "linspace_no_endpoint": lambda x: x - np.linspace(0.0, 2.0, x.shape[1], endpoint=False),
    "mask_from_tri": lambda x: np.where(np.tri(x.shape[0], x.shape[1], dtype=bool), x, 0),
}


@pytest.mark.parametrize("dtype", LIN_DTYPES)
@pytest.mark.parametrize("name", list(CTORS))
def test_constructor_in_trace(name, dtype):
    check(CTORS[name], make(dtype, (3, 4), 9))


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_empty_and_empty_like_shape_dtype(dtype):
    """`np.empty*` contents are undefined: only shape and dtype are compared."""
    def fn(x):
        return np.empty_like(x), np.empty(x.shape, x.dtype), np.empty((2, x.shape[0])), np.empty_like(x, dtype=np.float32)

    x = make(dtype, (3, 4), 10)
    expected = fn(x)
    actual = braze.compile(fn, target="generic")(x)
    assert isinstance(actual, (tuple, list)) and len(actual) == len(expected)
    for a, e in zip(actual, expected):
        a = np.asarray(a)
        assert (a.shape, a.dtype) == (e.shape, e.dtype)


def test_constructor_with_static_int_argument():
    def fn(x, n):
        return np.zeros((n, x.shape[0])) + np.arange(n)[:, None] + x

    f = braze.compile(fn, target="generic")
    x = make("float32", (4,), 11)
    for n in (1, 3):
        assert_same(f(x, n), fn(x, n))


def test_constructor_only_output():
    """A function whose output does not depend on the traced input at all."""
    def fn(x):
        return np.arange(x.shape[0], dtype=np.int64), np.eye(2), np.full((2,), 3.0)

    check(fn, make("float64", (5,), 12))


# ---------------------------------------------------------------- allocate then fill

def _alloc_static(x, n, m):
    out = np.zeros((n, m))
    out[0] = x
    out[1:] = x * 2
    return out


def _alloc_from_shape(x):
    n, m = 3, x.shape[0]
    out = np.zeros((n, m))
    out[0] = x
    out[1:] = x * 2
    return out


def _alloc_empty_fill(x):
    buf = np.empty(x.shape, x.dtype)
    buf[...] = np.exp(x)
    return buf


def _alloc_rows_loop(x):
    out = np.zeros((x.shape[0], x.shape[1]), dtype=x.dtype)
    for i in range(x.shape[0]):
        out[i] = x[i] * (i + 1)
    return out


def _alloc_cumulative_loop(x):
    out = np.zeros_like(x)
    acc = np.zeros(x.shape[1], x.dtype)
    for i in range(x.shape[0]):
        acc = acc + x[i]
        out[i] = acc
    return out


def _alloc_ones_partial(x):
    out = np.ones((x.shape[0] + 2, x.shape[1]), dtype=np.float64)
    out[1:-1] = x
    out[:, 0] = -1
    return out


@pytest.mark.parametrize("dtype", LIN_DTYPES)
def test_allocate_then_fill_static_dims(dtype):
    x = make(dtype, (4,), 13)
    f = braze.compile(_alloc_static, target="generic")
    for n, m in ((3, 4), (1, 4)):
        assert_same(f(x, n, m), _alloc_static(x, n, m))


@pytest.mark.parametrize("dtype", LIN_DTYPES)
def test_allocate_then_fill_dims_from_shape(dtype):
    check(_alloc_from_shape, make(dtype, (4,), 14))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_allocate_empty_then_fill_ellipsis(dtype):
    check(_alloc_empty_fill, make(dtype, (3, 4), 15))


@pytest.mark.parametrize("fn", [_alloc_rows_loop, _alloc_cumulative_loop, _alloc_ones_partial],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", LIN_DTYPES)
def test_allocate_then_fill_patterns(fn, dtype):
    check(fn, make(dtype, (4, 3), 16))


def test_allocate_then_fill_with_braze_numpy():
    """The same pattern written with braze.numpy constructors (runs eagerly on NumPy input)."""
    bnp = braze.numpy

    def fn(x):
        out = bnp.zeros((3, x.shape[0]))
        out[0] = x
        out[1:] = x * 2
        return out

    x = make("float32", (4,), 17)
    expected = _alloc_from_shape(x)
    actual = braze.compile(fn, target="generic")(x)
    assert_same(actual, expected)


def test_matmul_hands_blas_dense_operands(monkeypatch):
    """``A @ np.ones(n)`` traces the ones as a broadcast constant (a zero
    stride), which BLAS cannot read (NumPy's own loop ran 8x slower): matmul
    makes such an operand dense before calling NumPy."""
    from braze.ops import linalg

    seen = []
    real = np.matmul

    def spy(a, b):
        seen.append((a.strides, b.strides))
        return real(a, b)

    monkeypatch.setattr(linalg.np, "matmul", spy)
    A = np.arange(40_000.0).reshape(200, 200)  # (more products than passes.SMALL_REDUCED: BLAS calls)
    f = braze.compile(lambda A: A @ np.ones(A.shape[1]) + np.ones(200) @ A, target="cpu")
    np.testing.assert_allclose(f(A), A @ np.ones(200) + np.ones(200) @ A)
    assert seen and all(0 not in sa and 0 not in sb for sa, sb in seen), seen


# ---------------------------------------------------------------- contractions written out


SMALL = [  # (name, fn, shapes, written out)
    ("matmul K=1 outer", lambda a, b: a @ b, ((5, 1), (1, 4)), True),
    ("matmul K=3 batch broadcast", lambda a, b: a @ b, ((2, 1, 4, 3), (3, 3, 5)), True),
    ("matmul K=6 transposed operand", lambda a, b: a.T @ b, ((6, 4), (6, 5)), True),
    ("einsum conv channels", lambda a, b: np.einsum("nchw,fc->nfhw", a, b), ((2, 3, 4, 5), (6, 3)), True),
    ("einsum size-1 own axis", lambda a, b: np.einsum("ijz,jk->ik", a, b), ((3, 2, 1), (2, 4)), True),
    ("einsum two letters", lambda a, b: np.einsum("iab,abj->ij", a, b), ((3, 2, 3), (2, 3, 4)), True),
    ("matrix @ vector", lambda a, b: a @ b, ((5, 3), (3,)), True),
    ("vector @ matrix", lambda a, b: a @ b, ((3,), (3, 4)), True),
    ("vector @ vector", lambda a, b: a @ b, ((4,), (4,)), True),
    ("batched matrices @ vector", lambda a, b: a @ b, ((2, 5, 3), (3,)), True),
    # a small result read with a stride (a Kalman filter's F @ P @ F.T): written out too
    ("small transposed right operand", lambda a, b: a @ b.T, ((4, 4), (4, 4)), True),
    # a larger one: left to BLAS (see passes._strided_last, SMALL_STRIDED)
    ("matmul of a transposed right operand", lambda a, b: a @ b.T, ((50, 3), (40, 3)), False),
    ("einsum output order", lambda a, b: np.einsum("ij,jk->ki", a, b), ((4, 2), (2, 5)), False),
]


@pytest.mark.parametrize("fn", [lambda a, b: a @ b, lambda a, b: np.einsum("ik,kj->ij", a, b)], ids=["matmul", "einsum"])
def test_small_float16_contractions_add_in_float32_as_numpy(fn):
    """NumPy's float16 matmul and einsum add in float32: written out in float16
    they rounded at every step (3x NumPy's error), so they stay NumPy's."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((40, 6)).astype(np.float16)
    b = rng.standard_normal((6, 30)).astype(np.float16)
    f = braze.compile(fn, target="cpu")
    exact = a.astype(np.float64) @ b.astype(np.float64)
    for _ in range(2):  # (NumPy's einsum adds otherwise than its matmul: as accurate, or more)
        got = f(a, b)
        assert got.dtype == np.float16
        assert np.abs(got - exact).max() <= np.abs(fn(a, b) - exact).max()


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.bool_])
@pytest.mark.parametrize("name,fn,shapes,written", SMALL, ids=[s[0] for s in SMALL])
def test_small_contractions_are_written_out_and_match_numpy(name, fn, shapes, written, dtype):
    """A contraction over at most SMALL_CONTRACTION elements is products and
    sums (passes.small_contractions): no BLAS call left, NumPy's values (ints
    and bools exactly; floats to the order of their sum), dtype and shape,
    with NaN and inf and non-contiguous operands."""
    rng = np.random.default_rng(3)
    a, b = ((rng.standard_normal(s) * 3).astype(dtype) if dtype != np.bool_ else rng.random(s) < 0.5
            for s in shapes)
    if dtype in (np.float64, np.float32):
        a.flat[0], b.flat[-1] = np.nan, np.inf
        a = np.asfortranarray(a)
    f = braze.compile(fn, target="cpu")
    got, want = f(a, b), fn(a, b)
    assert got.dtype == want.dtype and got.shape == want.shape
    if dtype in (np.float64, np.float32):
        np.testing.assert_allclose(got, want, rtol=8 * np.finfo(dtype).eps, atol=8 * np.finfo(dtype).eps)
    else:
        np.testing.assert_array_equal(got, want)
    plan = f.lower(a, b).plan
    assert ("matmul" not in plan and "einsum" not in plan) == written, plan


VECTOR_PRODUCTS = [  # (name, fn, shapes)
    ("dot", lambda a, b: a @ b, ((40,), (40,))),
    ("dot of strided slices, then an update", lambda a, b: a[1, 3:] @ b[3:, 2] - a[2, 2], ((30, 30), (30, 30))),
    ("matrix @ vector", lambda a, b: a @ b, ((30, 30), (30,))),
    ("transposed matrix @ vector", lambda a, b: a.T @ b, ((30, 20), (30,))),
    ("vector @ matrix", lambda a, b: a @ b, ((30,), (30, 25))),
    ("np.dot of vectors", lambda a, b: np.dot(a, b) * 2.0, ((100,), (100,))),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name,fn,shapes", VECTOR_PRODUCTS, ids=[s[0] for s in VECTOR_PRODUCTS])
def test_small_products_with_a_vector_operand_are_sums_in_a_kernel(name, fn, shapes, dtype):
    """``L[i, :i] @ U[:i, k]``, a small ``A @ x``: at most SMALL_REDUCED products,
    a multiply and a sum in one kernel with what is around them, no BLAS call
    and no view steps for its operands; NumPy's values to the order of the
    sum, with NaN and inf, and its dtype and shape."""
    rng = np.random.default_rng(6)
    a, b = ((rng.standard_normal(s) * 3).astype(dtype) for s in shapes)
    a.flat[1], b.flat[-2] = np.nan, np.inf
    f = braze.compile(fn, target="cpu")
    got, want = f(a, b), fn(a, b)
    assert np.asarray(got).dtype == np.asarray(want).dtype and np.shape(got) == np.shape(want)
    k = shapes[0][-1]
    np.testing.assert_allclose(got, want, rtol=4 * k * np.finfo(dtype).eps, atol=4 * k * np.finfo(dtype).eps * 9)
    assert "matmul" not in f.lower(a, b).plan


def test_longer_contractions_and_diagonals_stay_blas_and_einsum():
    from braze.passes import SMALL_CONTRACTION

    x = np.random.default_rng(4).standard_normal((5, SMALL_CONTRACTION + 1))
    f = braze.compile(lambda a: (a @ a.T, np.einsum("ii->i", a[:, :5]), np.einsum("ij->i", a[:, :3])), target="cpu")
    plan = f.lower(x).plan
    assert "matmul" in plan
    for g, w in zip(f(x), (x @ x.T, np.einsum("ii->i", x[:, :5]), np.einsum("ij->i", x[:, :3]))):
        np.testing.assert_allclose(g, w, rtol=1e-13)


def test_gradient_through_a_written_out_contraction():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((4, 3)), rng.standard_normal((3, 5))

    def loss(a, b):
        return np.sum(np.tanh(np.einsum("ij,jk->ik", a, b)) ** 2) + np.sum((a @ b[:, :2]) ** 3)

    ga = braze.compile(braze.grad(loss), target="cpu")(a, b)
    eps = 1e-6
    for i, j in [(0, 0), (3, 2), (1, 1)]:
        d = np.zeros_like(a)
        d[i, j] = eps
        np.testing.assert_allclose(ga[i, j], (loss(a + d, b) - loss(a - d, b)) / (2 * eps), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("target", ["cpu", "generic"])
@pytest.mark.parametrize("dtype", [np.int8, np.bool_, np.float32, np.int64])
def test_vdot_is_a_dot_in_the_operands_dtype(target, dtype):
    """np.vdot wraps int8 and is any-of-ands for bools, as a dot product (it
    was summed as a reduction: int64, and a count for bools)."""
    a = np.full((2, 3), 100).astype(dtype)
    b = np.ones(6).astype(dtype)
    f = braze.compile(lambda a, b: np.vdot(a, b), target=target)
    got, want = f(a, b), np.vdot(a, b)
    assert type(got) is type(want) and got == want


@pytest.mark.parametrize("spec,shapes", [("i,i", [(3,), (3,)]), ("ij,ij->", [(3, 4), (3, 4)]),
                                         ("i,i,i->", [(3,), (3,), (3,)]), ("ij->", [(3, 4)])])
@pytest.mark.parametrize("optimize", [False, True, "greedy"])
def test_einsum_to_a_scalar_returns_what_numpy_returns(spec, shapes, optimize):
    """A full contraction is a NumPy scalar, except through NumPy's optimized
    path (two operands or more), which gives a 0-d array."""
    ops = [np.arange(np.prod(s), dtype=float).reshape(s) for s in shapes]
    fn = lambda *xs: np.einsum(spec, *xs, optimize=optimize)  # noqa: E731
    got, want = braze.compile(fn, target="cpu")(*ops), fn(*ops)
    assert type(got) is type(want) and got == want
