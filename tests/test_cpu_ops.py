"""The ``cpu`` target against the ``generic`` target and NumPy.

numba takes 0.2-0.7 s per kernel here, so each test traces *bundles*: one
function computing many ops at once fuses into one kernel, and that one
compilation checks every op in it. Results are compared output by output.
"""
import warnings

import numpy as np
import pytest

import braze
import braze.numpy as bnp
from braze.ops.elementwise import BINARY, UNARY

from _compare import assert_same

DTYPES = ["float32", "float64", "int32", "int64", "bool"]


def values(dtype, shape, seed=0):
    """Test data with the special values of each dtype mixed in."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        base = rng.uniform(-3, 3, n)
        special = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e30, -1e-30, 0.5, 1.0, -1.0, 88.0, -100.0]
        base[: min(n, len(special))] = special[: min(n, len(special))]
        rng.shuffle(base)
        return base.astype(dtype).reshape(shape)
    if dtype.kind == "b":
        return (rng.integers(0, 2, n) == 1).reshape(shape)
    base = rng.integers(-20, 20, n)
    return base.astype(dtype).reshape(shape)


def run_all(fn, *args, **kw):
    """(cpu result, generic result, NumPy result), with NumPy's warnings silenced."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = fn(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
        ref = braze.compile(fn, target="generic", **kw)(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
        got = braze.compile(fn, target="cpu", **kw)(*args)
    return got, ref, want


def check(fn, *args, names=None, rtol=None, **kw):
    got, ref, want = run_all(fn, *args, **kw)
    assert_same(ref, want, rtol=rtol)
    if names is None:
        assert_same(got, want, rtol=rtol)
        return
    for name, g, w in zip(names, got, want):
        assert_same(g, w, rtol=rtol, path=name)


def accepted(names, *samples):
    ok = []
    for name in names:
        try:
            with np.errstate(all="ignore"):
                getattr(np, name)(*samples)
            ok.append(name)
        except TypeError:
            pass
    return ok


def erf_or_ufunc(name):
    return bnp.erf if name == "erf" else getattr(np, name)


@pytest.mark.parametrize("dtype", DTYPES)
def test_unary_ops(dtype):
    x = values(dtype, (7, 9))
    names = accepted(UNARY, x[:1, :1]) + (["erf"] if dtype != "bool" else [])
    fns = [erf_or_ufunc(n) for n in names]
    check(lambda x: tuple(f(x) for f in fns), x, names=names, rtol=2e-5 if dtype == "float32" else None)


PAIRS = [("float32", "float32"), ("float64", "float64"), ("int32", "int32"), ("int64", "int64"),
         ("bool", "bool"), ("int32", "float32"), ("int64", "float64"), ("bool", "int32")]


@pytest.mark.parametrize("dt1,dt2", PAIRS)
def test_binary_ops(dt1, dt2):
    x, y = values(dt1, (6, 8), 1), values(dt2, (6, 8), 2)
    names = accepted(BINARY, x[:1, :1], y[:1, :1])
    if np.dtype(dt2).kind in "iu":
        y = np.abs(y) % 5  # integer powers need non-negative exponents
        y = y.astype(dt2)
    fns = [getattr(np, n) for n in names]
    check(lambda x, y: tuple(f(x, y) for f in fns), x, y, names=names, rtol=2e-5 if "float32" in (dt1, dt2) else None)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_weak_scalars_where_clip_and_casts(dtype):
    x = values(dtype, (5, 4), 3)

    def f(x, s):
        return (x * 2.0, x + 1, 2 - x, x / 3, x * s, s * 2.0 + x, np.where(x > 0, x, -1),
                np.clip(x, -1, 2), np.maximum(x, 0.5), x.astype(np.float32), x.astype(np.int16),
                x.astype(bool), (x > 1) & (x < 3), ~(x > 0))

    check(f, x, 1.5)


@pytest.mark.parametrize("shape_x,shape_y", [
    ((), ()), ((0,), (0,)), ((1,), (5,)), ((4, 1), (1, 5)), ((2, 0, 3), (3,)), ((3, 1, 4), (2, 1)),
    ((2, 3, 4, 5), (5,)),
])
def test_broadcasting_and_edge_shapes(shape_x, shape_y):
    x, y = values("float32", shape_x, 4), values("float32", shape_y, 5)
    check(lambda x, y: (np.tanh(x) * y + 1.0, np.maximum(x, y)), x, y)


@pytest.mark.parametrize("view", ["transposed", "strided", "negative", "sliced_2d"])
def test_non_contiguous_inputs(view):
    base = values("float64", (8, 10), 6)
    x = {"transposed": base.T, "strided": base[::2, 1::3], "negative": base[::-1, ::-2],
         "sliced_2d": base[1:-1, 2:7]}[view]
    check(lambda x: (np.exp(x) + x.sum(axis=-1, keepdims=True), x.max(axis=0)), x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [None, -1, 0, (0, 2)])
def test_reductions(dtype, axis):
    x = values(dtype, (3, 4, 5), 7)

    def f(x):
        out = [np.sum(x, axis=axis), np.prod(x, axis=axis, keepdims=True), np.max(x, axis=axis),
               np.min(x, axis=axis, keepdims=True), np.any(x, axis=axis), np.all(x, axis=axis)]
        if not isinstance(axis, tuple):
            out += [np.argmax(x, axis=axis), np.argmin(x, axis=axis)]
        if dtype != "bool":
            out += [np.mean(x, axis=axis), np.var(x, axis=axis, keepdims=True), np.std(x, axis=axis)]
        return tuple(out)

    check(f, x, rtol=1e-4 if dtype == "float32" else None)


def test_reductions_of_empty_and_size_one_axes():
    x = np.ones((3, 0), np.float32)
    check(lambda x: (x.sum(axis=1), x.prod(axis=1), x.any(axis=-1), x.all(axis=-1), x.sum()), x)
    y = values("float64", (1, 6), 8)
    check(lambda y: (y.max(axis=0), y.argmin(axis=0), y.mean(axis=0)), y)


ROWS = {
    "softmax": lambda x: np.exp(x - x.max(-1, keepdims=True)) / np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True),
    "log_softmax": lambda x: (x - x.max(-1, keepdims=True)) - np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)),
    "logsumexp": lambda x: x.max(-1) + np.log(np.exp(x - x.max(-1)[:, None]).sum(-1)),
    "layer_norm": lambda x: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5),
    "rms_norm": lambda x: x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(ROWS))
def test_row_kernels(name, dtype):
    x = np.random.default_rng(9).standard_normal((33, 70)).astype(dtype) * 4
    x[3, 5] = np.nan
    x[4, :] = -np.inf
    fn = ROWS[name]
    check(fn, x, rtol=1e-5 if dtype == "float32" else 1e-11)
    assert braze.compile(fn, target="cpu").lower(x).plan.count("kernel") == 1


def test_cross_entropy_and_matmul_extern():
    rng = np.random.default_rng(10)
    x, w = rng.standard_normal((16, 8)), rng.standard_normal((8, 5))
    y = rng.integers(0, 5, 16)

    def loss(x, w, y):
        z = np.tanh(x @ w)
        m = z.max(-1, keepdims=True)
        lse = np.log(np.exp(z - m).sum(-1, keepdims=True)) + m
        return (lse - np.take_along_axis(z, y[:, None], -1)).mean()

    check(loss, x, w, y)


def test_layout_views_slices_and_inplace_updates():
    x = values("float64", (6, 7), 11)

    def f(x, u):
        u[1:-1] = 0.5 * (u[:-2] + u[2:])
        return x.T[::2] * 2.0, x[:, ::-1] - x, x.reshape(7, 6) + 1.0, np.concatenate([x, x * 2], axis=1)

    u1, u2 = np.linspace(0, 1, 9), np.linspace(0, 1, 9)
    with np.errstate(all="ignore"):
        want = f(x, u1)
        got = braze.compile(f, target="cpu")(x, u2)
    assert_same(got, want)
    assert_same(u2, u1)


def test_gelu_mlp_block():
    rng = np.random.default_rng(12)
    x, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((32, 16), (16, 24), (24, 4)))

    def mlp(x, w1, w2):
        h = x @ w1
        h = 0.5 * h * (1 + np.tanh(0.7978845608 * (h + 0.044715 * h ** 3)))
        return h @ w2

    check(mlp, x, w1, w2, rtol=1e-4)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int8, np.uint8, np.uint32, np.uint64])
@pytest.mark.parametrize("op", ["floor_divide", "remainder", "fmod"])
def test_integer_division_at_the_extremes_matches_numpy(dtype, op):
    """MIN // -1 wraps to MIN and MIN % -1 is 0 (the division overflows in
    hardware); uint64 values above 2**63 keep every bit (a zero written as
    ``a * 0`` once made the helper return float64 and lose them)."""
    info = np.iinfo(dtype)
    if info.min < 0:
        x = np.array([info.min, info.max, -7, 7, 0, 1, info.min], dtype)
        y = np.array([-1, -1, 2, -3, 5, 0, 1], dtype)
    else:
        x = np.array([info.max, info.max, 7, 7, 0, 1, 9], dtype)
        y = np.array([1, info.max, 2, 3, 5, 0, 4], dtype)
    fn = getattr(np, op)
    with np.errstate(all="ignore"):
        want = fn(x, y)
    got = braze.compile(lambda a, b: fn(a, b), target="cpu")(x, y)
    assert got.dtype == want.dtype and np.array_equal(got, want), (got, want)
