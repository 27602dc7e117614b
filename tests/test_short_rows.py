"""Row kernels over short inner rows (unrolled) and over several outer axes
(a loop per axis when the first is long, else rows in chunks with their indices
counted up): every shape at the edges, against NumPy."""
import numpy as np
import pytest

import braze

from _compare import assert_same


def distances(X, C):
    d = ((X[:, None, :] - C[None, :, :]) ** 2).sum(-1)
    return d.argmin(axis=1), d.min(axis=1), d.max(axis=1)


@pytest.mark.parametrize("n,k,c", [(1, 1, 1), (7, 3, 2), (300, 8, 4), (1025, 5, 8), (257, 9, 9), (0, 4, 3),
                                   (4, 0, 3), (33, 4, 0)])
def test_distance_rows_of_every_length(n, k, c):
    r = np.random.default_rng(n + k + c)
    X, C = r.standard_normal((n, c)), r.standard_normal((k, c))
    f = braze.compile(distances, target="cpu")
    if k == 0:
        with pytest.raises(ValueError):
            distances(X, C)
        with pytest.raises(Exception):
            f(X, C)
        return
    for got, want in zip(f(X, C), distances(X, C)):
        assert_same(got, want)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32, np.bool_])
def test_three_axis_rows_with_short_and_long_tails(dtype):
    r = np.random.default_rng(5)
    for shape in [(3, 1030, 3), (2, 3, 5), (1, 1, 1), (17, 600, 2), (5, 7, 300)]:
        # positive: a float32 sum of 300 terms that cancel differs from NumPy's
        # (pairwise) by more than a few ulps of the result, in either order
        x = (r.random(shape) * 50 - (dtype == np.int32) * 25).astype(dtype)
        y = (r.random(shape[-1:]) * 50).astype(dtype)

        def fn(x, y):
            z = x * y if dtype != np.bool_ else x & y
            low = z.min(-1, keepdims=True)
            return z.sum(-1), z.max(-1), np.argmax(z, axis=-1), (z ^ low if dtype == np.bool_ else z - low)

        f = braze.compile(fn, target="cpu")
        for got, want in zip(f(x, y), fn(x, y)):
            assert_same(got, want)


def test_short_rows_with_special_values_and_ties():
    x = np.array([[[1.0, np.nan, 3.0], [2.0, 2.0, -0.0], [np.inf, -np.inf, 1.0]],
                  [[-0.0, -0.0, -0.0], [1e300, 1e300, -1e300], [5.0, 5.0, 5.0]]])
    fns = [lambda x: x.sum(-1), lambda x: x.max(-1), lambda x: x.min(-1), lambda x: x.argmin(-1),
           lambda x: x.argmax(-1), lambda x: x.prod(-1), lambda x: x - x.mean(-1, keepdims=True)]
    for fn in fns:
        with np.errstate(all="ignore"):
            assert_same(braze.compile(fn, target="cpu")(x), fn(x), check_signed_zero=True)


def test_a_strided_non_contiguous_input_over_several_outer_axes():
    x = np.random.default_rng(6).standard_normal((20, 30, 8))[::2, ::-3, 1::2]
    fn = lambda x: np.exp(x - x.max(-1, keepdims=True)).sum(-1)  # noqa: E731
    assert_same(braze.compile(fn, target="cpu")(x), fn(x))


# ---------------------------------------------------------------- a short last axis merged into the one before

def blur_rows(img):
    return 0.25 * img[:, :-2] + 0.5 * img[:, 1:-1] + 0.25 * img[:, 2:]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_an_rgb_kernel_runs_over_the_last_two_axes_as_one(dtype):
    img = (np.random.default_rng(7).random((40, 50, 3)) * 100).astype(dtype)
    f = braze.compile(blur_rows, target="cpu")
    assert_same(f(img), blur_rows(img), rtol=0)
    assert "elementwise kernel over 40x144" in f.lower(img).plan, f.lower(img).plan


@pytest.mark.parametrize("layout", ["fortran", "strided", "reversed", "transposed"])
def test_merged_axes_read_any_layout(layout):
    base = np.random.default_rng(8).random((30, 40, 3))
    img = {"fortran": np.asfortranarray(base), "strided": base[::2, ::3],
           "reversed": base[:, ::-1], "transposed": base.transpose(1, 0, 2)}[layout]
    for fn in (blur_rows, lambda x: np.sqrt(x) * 2.0 + x[::-1]):
        assert_same(braze.compile(fn, target="cpu")(img), fn(img), rtol=0)


def test_arguments_that_cannot_merge_keep_the_three_axes():
    r = np.random.default_rng(9)
    img, gain, bias = r.random((20, 30, 3)), r.random(3), r.random((20, 1, 1))
    cases = [
        (lambda x, g, b: x * g + 1.0, "20x30x3"),                 # a per-channel vector
        (lambda x, g, b: x[:, :, 1:] * 2.0 - x[:, :, :-1], "20x30x2"),  # windows of the last axis
        (lambda x, g, b: x[:, ::-1] * 2.0 + x[:, :], "20x30x3"),   # reversed pixels keep their channels
        (lambda x, g, b: x * b + b, "20x90"),                       # both last axes broadcast
    ]
    for fn, domain in cases:
        f = braze.compile(fn, target="cpu")
        assert_same(f(img, gain, bias), fn(img, gain, bias), rtol=0)
        assert f"over {domain}" in f.lower(img, gain, bias).plan, f.lower(img, gain, bias).plan


def test_regions_updated_in_place_merge_only_through_a_buffer():
    """An update reading the array it writes goes through a flat buffer (merged,
    then copied in); one written straight into another array's region (a window
    the kernel indexes with three axes) keeps its axes. Both NumPy's values."""
    def in_place(u):
        u[1:-1, 1:-1] = 0.5 * (u[:-2, 1:-1] + u[2:, 1:-1])
        return u

    def into_other(u, v):
        v[1:-1, 1:-1] = 0.5 * (u[:-2, 1:-1] + u[2:, 1:-1])
        return v

    r = np.random.default_rng(10)
    u, v = r.random((12, 14, 3)), r.random((12, 14, 3))
    for fn, args, domain in [(in_place, (u,), "10x36"), (into_other, (u, v), "10x12x3")]:
        want = fn(*[a.copy() for a in args])
        f = braze.compile(fn, target="cpu")
        assert_same(f(*[a.copy() for a in args]), want, rtol=0)
        plan = f.lower(*[a.copy() for a in args]).plan
        assert f"elementwise kernel over {domain}," in plan, plan


def test_bool_and_special_values_through_merged_axes():
    x = np.array([[[np.nan, np.inf, -0.0], [1.0, -np.inf, 2.0]], [[0.0, 3.0, np.nan], [-1.0, 1e-30, 1e30]]])
    fns = [lambda x: np.where(np.isnan(x), -0.0, x * 2.0), lambda x: (x > 0) & ~np.isinf(x),
           lambda x: np.maximum(x, 0.5) - x]
    for fn in fns:
        with np.errstate(all="ignore"):
            assert_same(braze.compile(fn, target="cpu")(x), fn(x), check_signed_zero=True, rtol=0)


def _kernel_sources(f, *args):
    return braze.explain(f, *args).split("# source", 1)[1]


@pytest.mark.parametrize("shape", [(64, 3, 4, 5), (63, 3, 4, 5), (200, 1, 7, 3), (70, 5, 0, 4), (1, 130, 2, 9)])
def test_four_axis_stencils_and_reductions_nest_or_chunk_their_rows(shape):
    from braze.targets.cpu_codegen import NEST_MIN

    r = np.random.default_rng(sum(shape))
    u = r.standard_normal(shape)
    v = np.zeros(shape)

    def step(u, v):
        v[:, :, :, 1:-1] = u[:, :, :, 1:-1] + 0.25 * (u[:, :, :, 2:] - 2.0 * u[:, :, :, 1:-1] + u[:, :, :, :-2])
        return v, (u * u).sum(-1), u.max(-1) - u.min(-1), np.argmin(u * 1.5, axis=-1)

    f = braze.compile(step, target="cpu")
    want = step(u.copy(), v.copy())
    v2 = v.copy()
    got = f(u.copy(), v2)
    for g, w in zip(got, want):
        assert_same(g, w)
    assert_same(v2, want[0])  # (the write through the argument)
    if shape[2]:
        src = _kernel_sources(f, u, v)
        nested = "for i0 in prange(d0):" in src
        assert nested == (shape[0] >= NEST_MIN), src
        assert ("ostart" in src) == (shape[0] < NEST_MIN)


def accelerations(pos, mass):
    d = pos[None, :, :] - pos[:, None, :]
    inv_r3 = ((d ** 2).sum(-1) + 0.01) ** -1.5
    return (d * (mass[None, :, None] * inv_r3[:, :, None])).sum(1), inv_r3


@pytest.mark.parametrize("layout", ["C", "F", "every other row", "columns of a wider array", "transposed"])
@pytest.mark.parametrize("n", [1, 5, 70])
def test_point_clouds_of_every_layout(layout, n):
    """(n, 3) points: the short rows are read through flat views (copies of the
    non-contiguous arrays), the transposed sum's strided columns through a copy
    in loop order; the same values as NumPy's from every layout."""
    r = np.random.default_rng(n)
    base = r.standard_normal((2 * n, 7))
    pos = {"C": np.ascontiguousarray(base[:n, :3]), "F": np.asfortranarray(base[:n, :3]),
           "every other row": base[::2, :3], "columns of a wider array": base[:n, 2:5],
           "transposed": r.standard_normal((3, n)).T}[layout]
    mass = r.random(n) + 0.5
    f = braze.compile(accelerations, target="cpu")
    for got, want in zip(f(pos, mass), accelerations(pos, mass)):
        assert_same(got, want)
    if n == 70 and layout == "C":
        assert "a0f = a0.ravel()" in _kernel_sources(f, pos, mass)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.bool_, np.float32])
def test_short_rows_read_flat_across_dtypes_and_broadcasts(dtype):
    r = np.random.default_rng(3)
    x = (r.random((9, 70, 4)) * 20).astype(dtype)
    y = (r.random((70, 4)) * 20).astype(dtype)[::-1]  # (negative strides: copied flat)
    z = (r.random((9, 1, 4)) * 20).astype(dtype)

    def fn(x, y, z):
        t = x * y | z if dtype == np.bool_ else x * y - z
        return t.sum(-1), t.max(-1), np.argmin(t, axis=-1)

    f = braze.compile(fn, target="cpu")
    for got, want in zip(f(x, y, z), fn(x, y, z)):
        assert_same(got, want)


def _logistic(X, w, y):
    p = 1.0 / (1.0 + np.exp(-(X @ w + 0.5)))
    return p - y, np.mean(p - y)


def _columns(X, w):
    z = X[:, 0] * w[0] + X[:, 1] * w[1] - X[:, 2] * w[2]
    return np.exp(-z).sum(), X[1] * 2, X[:, 2] * 3


@pytest.mark.parametrize("layout", ["C", "F", "rows strided", "columns strided"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_columns_of_short_rows_are_read_inside_the_kernel(layout, dtype):
    """``X @ w`` of (n, 3) points written out, and columns ``X[:, i]`` a program
    takes itself, are read from X at their offsets inside the kernel around
    them (fusion.Loop.squeezed): no view per column, no kernel writing the
    product first, and the loads at a literal stride (vectorized; a copy for
    layouts other than C), with NumPy's values whatever X's layout."""
    r = np.random.default_rng(11)
    base = (r.standard_normal((2 * 1001, 6)) * 3).astype(dtype)
    X = {"C": np.ascontiguousarray(base[:1001, :3]), "F": np.asfortranarray(base[:1001, :3]),
         "rows strided": base[::2, :3], "columns strided": base[:1001, ::2]}[layout]
    X[5, 1], X[7, 2] = np.nan, -np.inf
    w, y = np.array([0.5, -1.5, 2.0], dtype), r.random(1001).astype(dtype)
    for fn, args in ((_logistic, (X, w, y)), (_columns, (X, w))):
        f = braze.compile(fn, target="cpu")
        for got, want in zip(f(*args), fn(*args)):
            assert_same(got, want)
        lowered = f.lower(*args)
        assert "view" not in lowered.plan and "matmul" not in lowered.plan, lowered.plan
    assert lowered.counts["kernels"] == 2  # the sum with its columns, and the row X[1]'s kernel
    assert ".ravel()" in braze.explain(braze.compile(_logistic, target="cpu"), X, w, y)
