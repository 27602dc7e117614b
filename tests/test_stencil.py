"""Stencils on the cpu target: a kernel reads shifted windows of an array
(``a[1:-1, :-2]``) from the array itself at offsets, and writes a region it
updates in place (``b[1:-1, 1:-1] = ...``) straight into that array."""
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import braze

from _compare import assert_same
from programs.sims import minmod_advection


def jacobi_2d(A, B, tsteps):
    for _ in range(1, tsteps):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])


def _grid(shape, dtype=np.float64, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.fixture(scope="module")
def jacobi():
    return braze.compile(jacobi_2d, target="cpu", static_argnames=("tsteps",))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_jacobi_reads_windows_by_offset_and_writes_the_interior_in_place(jacobi, dtype):
    A, B = _grid((40, 30), dtype), _grid((40, 30), dtype, 1)
    A0, B0 = A.copy(), B.copy()
    jacobi(A, B, tsteps=4)
    jacobi_2d(A0, B0, 4)
    assert_same(A, A0)  # bit for bit: the same additions in the same order
    assert_same(B, B0)
    lowered = jacobi.lower(A, B, tsteps=4)
    assert "view" not in lowered.plan  # no view made per window per call
    assert "w0_0 + i0" in lowered.source and "o0[np.uint64(t0_0 + i0)" in lowered.source
    assert lowered.counts["distinct kernels"] == 1


def test_jacobi_with_both_arguments_the_same_array(jacobi):
    A = _grid((12, 9))
    A0 = A.copy()
    jacobi(A, A, tsteps=3)
    jacobi_2d(A0, A0, 3)
    assert_same(A, A0)


def test_non_contiguous_and_fortran_grids(jacobi):
    for make in (lambda g: np.asfortranarray(g), lambda g: _grid((50, 60))[::2, 1::2], lambda g: g.T):
        A, B = make(_grid((25, 30))), make(_grid((25, 30), seed=3))
        A0, B0 = A.copy(), B.copy()
        jacobi(A, B, tsteps=3)
        jacobi_2d(A0, B0, 3)
        assert_same(A, A0)
        assert_same(B, B0)


def test_in_place_stencil_reads_the_old_values():
    def smooth(u):
        u[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
        return u

    u = _grid((20, 17))
    expected = smooth(u.copy())
    assert_same(braze.compile(smooth, target="cpu")(u), expected)
    assert_same(u, expected)  # the write reached the caller's array


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32, np.bool_])
def test_strided_reversed_and_nested_windows(dtype):
    def f(x, y):
        a = x[::2, 1::3] * y[::2, 2::3]
        b = x[::-1, :][1:, 2:][::2, :] * y[:4, :10]  # slices of slices, one reversed
        return a, b, x[1:, 1:] + y[0, :-1]  # a window of lower rank, broadcast

    x, y = (np.random.default_rng(s).integers(-3, 4, (9, 12)).astype(dtype) for s in (0, 1))
    g = braze.compile(f, target="cpu")
    for got, expected in zip(g(x, y), f(x, y)):
        assert_same(got, expected)
    assert "w0_0 + -2 * i0" in g.lower(x, y).source  # x read from row 7 backwards, every other row


def test_empty_and_size_one_windows():
    def f(x):
        return x[3:3, 1:] * 2.0, x[1:2, 1:] + x[:1, :-1], x[:, 2:3] - x[:, :1]

    x = _grid((5, 4))
    got = braze.compile(f, target="cpu")(x)
    for g, e in zip(got, f(x)):
        assert_same(g, e)


def test_windows_with_special_values():
    def f(u):
        out = np.empty_like(u)
        out[0], out[-1] = u[0], u[-1]
        out[1:-1] = np.where(u[2:] > u[:-2], u[2:] - u[1:-1], u[1:-1] - u[:-2])
        return out

    u = np.array([1e30, -1e-30, np.nan, np.inf, -np.inf, 0.0, -0.0, 3e-308, 1e308, 2.0])
    assert_same(braze.compile(f, target="cpu")(u), f(u))


def test_strided_region_update_is_written_in_place():
    def f(u, v):
        u[::2, 1:] = np.tanh(v[1:, :-1]) + v[:-1, 1:]
        return u

    u, v = _grid((10, 8)), _grid((6, 8), seed=2)
    expected = f(u.copy(), v)
    g = braze.compile(f, target="cpu")
    assert_same(g(u, v), expected)
    assert_same(u, expected)
    assert "t0_0 + 2 * i0" in g.lower(u, v).source


def test_loop_over_offsets_shares_one_kernel():
    def running(x):
        out = np.zeros(x.shape[0] - 4)
        for k in range(5):
            out = out + x[k:x.shape[0] - 4 + k] * (k + 1.0)
        return out

    x = _grid(40)
    g = braze.compile(running, target="cpu")
    assert_same(g(x), running(x))


# ---------------------------------------------------------------- rotations (np.roll)


def life(board, steps):
    for _ in range(steps):
        n = sum(np.roll(np.roll(board, i, 0), j, 1) for i in (-1, 0, 1) for j in (-1, 0, 1) if (i, j) != (0, 0))
        board = ((n == 3) | ((board == 1) & (n == 2))).astype(board.dtype)
    return board


def test_rolls_are_read_by_wrapped_index_in_one_kernel_per_step():
    board = (np.random.default_rng(0).random((37, 70)) < 0.3).astype(np.int64)
    f = braze.compile(life, target="cpu", static_argnames=("steps",))
    got = f(board, steps=3)
    assert_same(got, life(board, 3))
    lowered = f.lower(board, steps=3)
    assert "concatenate" not in lowered.plan and lowered.counts["kernels"] == 3, lowered.plan
    # rows wrap per row; along a row, the segments between where its reads wrap
    assert ">= d0 else" in lowered.source and ">= d1 else" not in lowered.source
    assert "bp.sort()" in lowered.source and "for j0 in range(js, je):" in lowered.source


def test_rolls_along_rows_at_every_shift_split_the_row_where_they_wrap():
    """A roll along the innermost axis is read at ``w + j`` or ``w - n + j``
    inside segments of the row cut where one wraps (a branch per element kept
    the row scalar: Game of Life on int8 ran at 0.35x NumPy): every shift,
    negative, zero, past the row's length, several rolls cutting one row
    (rows of at least SPLIT_MIN elements)."""
    x = (np.random.default_rng(2).standard_normal((5, 66)) * 50).astype(np.int8)
    for s in (-67, -66, -65, -34, -1, 0, 1, 2, 31, 33, 64, 65, 66, 67, 131):
        def fn(x, s=s):
            return np.roll(x, s, 1) + np.roll(x, -2 * s, 1) * np.int8(2) - np.roll(np.roll(x, 1, 0), s + 3, 1)

        f = braze.compile(fn, target="cpu")
        assert_same(f(x), fn(x))
        assert_same(f(x[:, ::-1]), fn(x[:, ::-1]))
    assert "bp.sort()" in f.lower(x).source

    def cross(a, b):  # rows of 3: branches cost less than segments (SPLIT_MIN)
        return np.roll(a, -1, 1) * np.roll(b, -2, 1) - np.roll(a, -2, 1) * np.roll(b, -1, 1)

    a, b = _grid((50, 3)), _grid((50, 3))[::-1]
    f = braze.compile(cross, target="cpu")
    assert_same(f(a, b), cross(a, b))
    assert "bp.sort()" not in f.lower(a, b).source


def test_rolls_of_a_1d_array_split_its_loop_where_they_wrap():
    """An elementwise kernel over a 1-D array reading it rolled (rule 30's
    ``np.roll(cells, 1)``, a ring of particles) runs segments cut where each
    roll wraps, as a row does: every shift, uint8 and float64, a strided input,
    the parallel variant's prange over each segment."""
    for dtype in (np.uint8, np.float64):
        x = (np.random.default_rng(5).random(200) * 100).astype(dtype)
        for s in (-201, -200, -7, -1, 0, 1, 3, 100, 199, 200, 401):
            def fn(x, s=s):
                return (np.roll(x, s) ^ (x | np.roll(x, -2 * s))) if dtype == np.uint8 else \
                    np.roll(x, s) - 2 * x + np.roll(x, -2 * s)

            f = braze.compile(fn, target="cpu")
            assert_same(f(x), fn(x))
            assert_same(f(x[::-2]), fn(x[::-2]))
        assert "bp.sort()" in f.lower(x).source
    from braze.targets.cpu_codegen import PARALLEL_MIN
    big = np.arange(PARALLEL_MIN + 5, dtype=np.float64)
    f = braze.compile(lambda x: np.roll(x, 3) * 2 - np.roll(x, -5), target="cpu")
    assert_same(f(big), np.roll(big, 3) * 2 - np.roll(big, -5))
    assert "prange(js, je)" in f.lower(big).source


def _periodic(u, c):  # rolls of every sign, of an elementwise value, several axes at once, a shift past n
    lap = np.roll(u, 1, 0) + np.roll(u, -1, 0) + np.roll(u, 1, 1) + np.roll(u, -1, 1) - 4 * u
    v = u + c * lap
    return v + np.roll(v * 2, (3, -2), axis=(0, 1)) - np.roll(np.tanh(u), u.shape[1] + 1, axis=1) \
        + np.roll(u, 2)  # (axis None: the flat array rotated)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_periodic_stencils_match_numpy(dtype):
    f = braze.compile(_periodic, target="cpu")
    for u in (_grid((9, 7), dtype), _grid((14, 9), dtype).T, _grid((20, 16), dtype)[::2, 1::2],
              np.asfortranarray(_grid((6, 5), dtype))):
        u = u.copy() if u.base is None else u
        u[0, 0], u[1, 2] = np.nan, np.inf
        got = f(u, dtype(0.1))
        want = _periodic(u, dtype(0.1))
        assert got.dtype == want.dtype
        # (tanh: braze's, within 2 ulp of terms near 1, then sums that cancel)
        np.testing.assert_allclose(got, want, rtol=4 * np.finfo(dtype).eps, atol=8 * np.finfo(dtype).eps)


def test_rolls_of_size_one_and_empty_axes_and_bools():
    def fn(a, m):
        return np.roll(a, 1, 0) * 2 + np.roll(a, -3, 1), np.roll(m, 1, 1) & m

    f = braze.compile(fn, target="cpu")
    for shape in ((1, 5), (4, 1), (0, 3), (3, 0), (1, 1)):
        a = _grid(shape)
        m = a > 0
        for g, w in zip(f(a, m), fn(a, m)):
            assert_same(g, w)


def test_a_rolled_array_updated_in_place_reads_its_old_values():
    def shift_in_place(u):
        u[1:] = np.roll(u, 1)[1:] + np.roll(u, -1)[1:]  # reads u wrapped while writing it
        return u

    u = _grid(50)
    want = shift_in_place(u.copy())
    got = braze.compile(shift_in_place, target="cpu")(u)
    assert_same(got, want)
    assert_same(u, want)


def test_gradient_through_rolls_matches_finite_differences():
    def loss(u):
        return np.sum(np.tanh(np.roll(u, 1, 0) - np.roll(u * u, -2, 1)) ** 2)

    u = _grid((6, 5))
    g = braze.compile(braze.grad(loss), target="cpu")(u)
    eps = 1e-6
    for i, j in [(0, 0), (5, 4), (2, 3)]:
        d = np.zeros_like(u)
        d[i, j] = eps
        num = (loss(u + d) - loss(u - d)) / (2 * eps)
        np.testing.assert_allclose(g[i, j], num, rtol=1e-6, atol=1e-9)


def test_windows_of_one_array_are_one_argument_read_at_offsets_from_the_first():
    """A 5-point stencil reads ``u`` through 5 windows: the kernel takes ``u``
    once (numba types and unboxes each argument at every call: ~0.1 us an
    array, ~30 ns an int) and the first window's starts; the others are read
    at literal offsets from it, so the same element is one load."""
    def step(u, c):
        return u[1:-1, 1:-1] + c * (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4 * u[1:-1, 1:-1])

    u = _grid((30, 40))
    f = braze.compile(step, target="cpu")
    for v in (u, u[::-1], _grid((7, 9))):
        assert_same(f(v, 0.1), step(v, 0.1))
    source = f.lower(u, 0.1).source
    (head,) = [line for line in source.splitlines() if line.startswith("def kernel(")]
    params = head[len("def kernel("):-2].split(", ")
    assert len([p for p in params if p.startswith("a")]) == 2, head  # (u and c)
    assert [p for p in params if p.startswith("w")] == ["w0_0", "w0_1"], head
    reads = set(re.findall(r"a0\[np\.uint64\(([^)]*)\), np\.uint64\(([^)]*)\)\]", source))

    def delta(expr: str, start: str, index: str) -> int:  # "w0_0 - 2 + i0" -> -2
        return int(expr.replace(start, "").replace(index, "").replace(" ", "").rstrip("+") or 0)

    offsets = [(delta(a, "w0_0", "i0"), delta(b, "w0_1", "j0")) for a, b in reads]
    center = tuple(sum(o[k] for o in offsets) // len(offsets) for k in (0, 1))
    assert sorted((a - center[0], b - center[1]) for a, b in offsets) == [(-1, 0), (0, -1), (0, 0), (0, 1), (1, 0)], reads


def test_windows_of_one_array_at_offsets_that_change_between_uses_take_their_starts():
    """Lags ``x[k:] * x[:-k]`` for k in a loop: each use reads the windows at
    other offsets from each other, so offsets in the source would compile a
    kernel per lag; the starts stay arguments and the loop compiles one."""
    def autocorrelation(x):
        return [np.sum(x[k:] * x[:-k]) for k in range(1, 6)]

    x = _grid(400)
    f = braze.compile(autocorrelation, target="cpu")
    for g, w in zip(f(x), autocorrelation(x)):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    lowered = f.lower(x)
    assert lowered.counts["distinct kernels"] == 1, lowered.counts
    assert " + 1 + " not in lowered.source and " - 1 + " not in lowered.source


def test_anchored_windows_of_a_time_loop_share_one_kernel():
    """Every step of a time loop reads its windows at the same offsets from
    each other: one kernel, anchored, for all of them."""
    def steps(u, c):
        for _ in range(4):
            u = u.copy()
            u[1:-1] = u[1:-1] + c * (u[2:] - 2 * u[1:-1] + u[:-2])
        return u

    u = _grid(300)
    f = braze.compile(steps, target="cpu")
    for v in (u, u[::-1], u[::2]):
        np.testing.assert_allclose(f(v, 0.2), steps(v, 0.2), rtol=1e-14)
    lowered = f.lower(u, 0.2)
    assert lowered.counts["distinct kernels"] == 1, lowered.counts
    assert " - 1 + " in lowered.source or " + 1 + " in lowered.source, lowered.source


def test_time_steps_of_rolled_stencils_compile_alike():
    """Each step's rolls are read by index from the step's input, never computed
    again from the step before it: sinking a roll into the previous step's
    values recomputed more each step until the budget stopped it at a different
    place each time (20 steps: 19 distinct kernels, 4x slower than now)."""
    u = np.exp(-((np.arange(300) - 100) / 15.0) ** 2)
    f = braze.compile(minmod_advection, target="cpu", static_argnames=("steps",))
    assert_same(f(u, 0.4, steps=12), minmod_advection(u, 0.4, 12))
    few, many = f.lower(u, 0.4, steps=3).counts, f.lower(u, 0.4, steps=12).counts
    assert many["distinct kernels"] == few["distinct kernels"] <= 3, (few, many)
    per_step = (many["kernels"] - few["kernels"]) / 9  # (one kernel computes 0.5 * (1 - c) once)
    assert per_step <= 2 and few["kernels"] == 1 + 3 * per_step, (few, many)


@settings(max_examples=20, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_windows_of_one_array_at_any_offsets_match_numpy(data):
    """Two to four windows of one array at any starts (the first window
    anywhere among them, so offsets from it of either sign), of any extent
    (empty too), of a contiguous or a strided array, read over steps of a
    time loop whose windows keep their offsets (anchored) and, in the same
    program, once more at other offsets of the same shape (not anchored)."""
    dtype = data.draw(st.sampled_from([np.float64, np.float32, np.int64]), "dtype")
    n0, n1 = data.draw(st.integers(2, 9), "n0"), data.draw(st.integers(2, 9), "n1")
    e0, e1 = data.draw(st.integers(0, n0 - 1), "e0"), data.draw(st.integers(0, n1), "e1")
    corner = st.tuples(st.integers(0, n0 - e0), st.integers(0, n1 - e1))
    starts = data.draw(st.lists(corner, min_size=2, max_size=4), "starts")
    other = data.draw(st.lists(corner, min_size=len(starts), max_size=len(starts)), "other starts")
    strided = data.draw(st.booleans(), "strided")

    def combine(u, corners):
        w = [u[a:a + e0, b:b + e1] for a, b in corners]
        out = w[0] * 2 + w[1]
        for v in w[2:]:
            out = out - v * w[0]
        return out

    def fn(u):
        for _ in range(3):
            u = u.copy()
            u[1:1 + e0, :e1] = combine(u, starts)
        return u, combine(u, other)

    base = (np.random.default_rng(1).standard_normal((2 * n0, 2 * n1)) * 4).astype(dtype)
    u = base[::2, ::-2] if strided else base[:n0, :n1].copy()
    got = braze.compile(fn, target="cpu")(u)
    want = fn(u)
    for g, w in zip(got, want):
        assert_same(g, w)
