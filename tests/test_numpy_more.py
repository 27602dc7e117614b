"""NumPy functions braze writes as compositions of its ops (``braze.numpy``):
values, dtype and shape equal to NumPy's on generic and cpu, in-place
writes through the views some of them return, and gradients against
finite differences for the differentiable ones (eager and compiled)."""
import numpy as np
import pytest

import braze
from _compare import central_differences

RNG = np.random.default_rng(11)
X = RNG.standard_normal((4, 5))
V = RNG.standard_normal(5)
XI = np.arange(20).reshape(4, 5) % 7
XB = X > 0
X3 = RNG.standard_normal((2, 3, 4))

CASES = {
    "flip": (lambda x: np.flip(x), [X]),
    "flip_axis": (lambda x: np.flip(x, axis=1), [X]),
    "flip_tuple": (lambda x: np.flip(x, (0, 2)), [X3]),
    "flipud": (np.flipud, [X]),
    "fliplr": (np.fliplr, [X]),
    "rot90": (np.rot90, [X]),
    "rot90_k2": (lambda x: np.rot90(x, 2), [X]),
    "rot90_k3_axes": (lambda x: np.rot90(x, -1, axes=(1, 2)), [X3]),
    "roll": (lambda x: np.roll(x, 2), [X]),
    "roll_axis": (lambda x: np.roll(x, -1, axis=1), [X]),
    "roll_tuple": (lambda x: np.roll(x, (1, 7), axis=(0, 1)), [X]),
    "convolve_full": (lambda v: np.convolve(v, v[:3]), [V]),
    "convolve_same_swapped": (lambda v: np.convolve(v[:2], v, mode="same"), [V]),
    "convolve_valid_int": (lambda x: np.convolve(x[0], [1, -2, 1], mode="valid"), [XI]),
    "convolve_moving_average": (lambda v: np.convolve(v, np.ones(4) / 4, mode="valid"), [V]),
    "convolve_bool_scalar": (lambda x: np.convolve(x[1], True), [XB]),
    "insert_front": (lambda v: np.cumsum(np.insert(v, 0, 0.0)), [V]),
    "insert_values_cast": (lambda x: np.insert(x, -1, [2.7, -1.5]), [XI]),
    "insert_axis1": (lambda x: np.insert(x, 2, x[:, 0], axis=1), [X]),
    "insert_column_values": (lambda x: np.insert(x, 1, [[1.0], [2.0]], axis=1), [X3[0]]),
    "insert_flat_end": (lambda x: np.insert(x, x.size, True), [XB]),
    "diff": (np.diff, [X]),
    "diff_n2_axis0": (lambda x: np.diff(x, n=2, axis=0), [X]),
    "diff_bool": (np.diff, [XB]),
    "diff_int": (np.diff, [XI]),
    "diff_prepend": (lambda x: np.diff(x, prepend=0.0, append=x[:, :1]), [X]),
    "trace": (np.trace, [X]),
    "trace_offset_dtype": (lambda x: np.trace(x, 1, dtype=np.float32), [X]),
    "diag_of_vector": (np.diag, [V]),
    "diag_k": (lambda v: np.diag(v, 2), [V]),
    "diag_negative_k": (lambda v: np.diag(v, -1), [V]),
    "diag_of_matrix": (lambda x: np.diag(x, 1), [X]),
    "diagflat": (lambda x: np.diagflat(x[:2]), [X]),
    "repeat": (lambda x: np.repeat(x, 2), [X]),
    "repeat_axis": (lambda x: np.repeat(x, 3, axis=1), [X]),
    "repeat_counts": (lambda x: np.repeat(x, [1, 0, 2, 1], axis=0), [X]),
    "tile": (lambda x: np.tile(x, 2), [V]),
    "tile_2d": (lambda x: np.tile(x, (2, 1, 3)), [X]),
    "pad_constant": (lambda x: np.pad(x, 2), [X]),
    "pad_constant_values": (lambda x: np.pad(x, ((1, 0), (2, 3)), constant_values=((7, 8), (9, 1))), [X]),
    "pad_edge": (lambda x: np.pad(x, (2, 3), mode="edge"), [X]),
    "pad_reflect": (lambda x: np.pad(x, (3, 2), mode="reflect"), [X]),
    "pad_symmetric": (lambda x: np.pad(x, (3, 4), mode="symmetric"), [X]),
    "pad_wrap": (lambda x: np.pad(x, (4, 6), mode="wrap"), [X]),
    "pad_int": (lambda x: np.pad(x, 1, mode="reflect"), [XI]),
    "nan_to_num": (np.nan_to_num, [np.array([np.nan, np.inf, -np.inf, 1.5, -0.0])]),
    "nan_to_num_f32_fills": (lambda x: np.nan_to_num(x, nan=-1.0, posinf=9.0),
                             [np.array([np.nan, np.inf, -np.inf, 2.0], np.float32)]),
    "nan_to_num_int": (np.nan_to_num, [XI]),
    "select": (lambda x: np.select([x < -0.5, x > 0.5], [x * 2, x ** 2], default=-1.0), [X]),
    "select_int_choices": (lambda x: np.select([x > 3], [x], 0), [XI]),
    "cross": (np.cross, [RNG.standard_normal((4, 3)), RNG.standard_normal((4, 3))]),
    "cross_axis0": (lambda a, b: np.cross(a, b, axis=0), [RNG.standard_normal((3, 2)), RNG.standard_normal((3, 2))]),
    "kron": (np.kron, [X[:2, :3], X[:3, :2]]),
    "kron_mixed_ndim": (np.kron, [V[:3], X[:2, :2]]),
    "column_stack": (lambda a, b: np.column_stack((a, b)), [V, V[::-1]]),
    "column_stack_2d": (lambda a, b: np.column_stack((a, b)), [X, X[:, :2]]),
    "rollaxis": (lambda x: np.rollaxis(x, 2), [X3]),
    "rollaxis_start": (lambda x: np.rollaxis(x, 0, 3), [X3]),
    "sinc": (np.sinc, [np.array([0.0, 0.5, -1.25, 3.0])]),
    "real_imag_angle": (lambda x: (np.real(x), np.imag(x), np.angle(x), np.angle(x, deg=True)), [V]),
    "linspace": (lambda a, b: np.linspace(a, b, 7), [np.float64(0.5), np.float64(2.0)]),
    "linspace_arrays": (lambda a, b: np.linspace(a, b, 4, endpoint=False, axis=1), [V[:2], V[2:4]]),
    "linspace_retstep": (lambda a, b: np.linspace(a, b, 5, retstep=True)[0], [np.float64(-1), np.float64(1)]),
    "gradient": (np.gradient, [V]),
    "gradient_2d_spacing": (lambda x: np.gradient(x, 0.5), [X]),
    "gradient_edge_order2": (lambda x: np.gradient(x, 2.0, axis=1, edge_order=2), [X]),
    "gradient_int": (np.gradient, [np.array([1, 4, 9, 16, 25])]),
    # axes in the order given, each with its own spacing; float32 stays float32 whatever the spacing's dtype
    "gradient_axes_reversed": (lambda x: np.gradient(x, 1.0, 3.0, axis=(1, 0)), [X]),
    "gradient_axes_negative": (lambda x: np.gradient(x, axis=(-1, 0)), [X3]),
    "gradient_f32_f64_spacing": (lambda x: np.gradient(x, np.float64(0.5)), [X.astype(np.float32)]),
    "maximum_accumulate": (lambda x: np.maximum.accumulate(x, axis=1), [X]),
    "minimum_accumulate_nan": (np.minimum.accumulate, [np.array([3.0, 1.0, np.nan, 0.0, -np.inf])]),
    "maximum_accumulate_int_out": (lambda x: np.maximum.accumulate(x, axis=0, out=np.empty_like(x)), [XI]),
    "drawdown": (lambda p: (np.maximum.accumulate(p) - p) / np.maximum.accumulate(p), [np.cumsum(np.abs(V))]),
    # coordinates: NumPy's formula for uneven spacing, or its scalar one where the differences are all equal
    "gradient_coordinates": (lambda y, x: np.gradient(y, x), [V, np.cumsum(np.abs(V) + 0.1)]),
    "gradient_coordinates_even": (lambda y, x: np.gradient(y, x, edge_order=2), [V, np.arange(len(V)) * 0.25]),
    "gradient_coordinates_axis": (lambda y, x: np.gradient(y, 2.0, x, edge_order=2),
                                  [X, np.cumsum(np.abs(X[0]) + 0.1)]),
    "gradient_int_coordinates": (lambda y, x: np.gradient(y, x), [V[:5], np.array([0, 1, 3, 4, 7])]),
    "trapezoid": (lambda y, x: np.trapezoid(y, x), [V, np.cumsum(np.abs(V))]),
    "trapezoid_dx_axis0": (lambda y: np.trapezoid(y, dx=0.3, axis=0), [X]),
    "trapezoid_2d_x": (lambda y, x: np.trapezoid(y, x, axis=1), [X, np.cumsum(np.abs(X), axis=1)]),
    # NumPy 2's sinc: a zero is the dtype's eps (1e-20 underflowed to 0 in float16: NaN at 0)
    "sinc_f16_zeros": (np.sinc, [np.array([0.0, -0.0, 0.5, 3.0], np.float16)]),
    "nan_to_num_0d_scalar": (np.nan_to_num, [np.array(np.nan)]),
    "nan_to_num_0d_int": (np.nan_to_num, [np.array(3)]),
    "cov_dtype_f32": (lambda x: np.cov(x, dtype=np.float32), [X]),
    # a float array's var in an integer dtype: float deviations from the mean stored as an int
    "var_int_dtype": (lambda x: np.var(x * 3, axis=1, dtype=np.int32), [X]),
    "sort": (lambda x: np.sort(x, axis=0), [X]),
    "sort_flat_ties_nan": (lambda x: np.sort(x, axis=None), [np.array([[2.0, np.nan, 1.0], [2.0, -0.0, 0.0]])]),
    "argsort": (lambda x: np.argsort(x, axis=1), [XI]),
    "argsort_stable": (lambda x: np.argsort(x, kind="stable"), [XI]),
    "argsort_0d": (lambda x: np.argsort(x[0, 0]) + np.argsort(x[0, 1], axis=None), [X]),
    "sort_method": (lambda x: (x.sort(axis=0), x)[1], [X]),
    "partition": (lambda x: np.partition(x, 2), [X]),
    "partition_kths_axis0": (lambda x: np.partition(x, (0, -1), axis=0), [X]),
    "partition_nan_ties": (lambda x: np.partition(x, [1, 4], axis=None),
                           [np.array([[0.5, np.nan, 0.5, -0.0], [0.0, 0.5, 2.0, -1.0]])]),
    "partition_method": (lambda x: (x.partition(3), x)[1], [X]),
    "argpartition": (lambda x: np.argpartition(x, 1, axis=0), [XI]),
    "cov": (np.cov, [X]),
    "cov_rowvar_bias": (lambda x: np.cov(x, rowvar=False, bias=True), [X]),
    "cov_y": (lambda x, y: np.cov(x, y), [V, V[::-1] * 2]),
    "corrcoef": (np.corrcoef, [X]),
}


def _same(got, want):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        assert type(g) is type(w), (type(g), type(w))
        assert np.asarray(g).dtype == np.asarray(w).dtype, (np.asarray(g).dtype, np.asarray(w).dtype)
        assert np.shape(g) == np.shape(w)
        # (float32: a sum or a product's accumulation may add in another order)
        tight = np.asarray(w).dtype != np.float32
        np.testing.assert_allclose(g, w, rtol=1e-12 if tight else 1e-6, atol=1e-14 if tight else 1e-7)


@pytest.mark.parametrize("target", ["generic", "cpu"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_numpy(name, target):
    fn, args = CASES[name]
    want = fn(*args)
    f = braze.compile(fn, target=target, fullgraph=True)  # a rule, not a graph break
    _same(f(*args), want)


def test_nan_to_num_of_a_0d_array_in_place_writes_it_and_returns_a_scalar():
    f = braze.compile(lambda x: np.nan_to_num(x, copy=False), target="cpu")
    for _ in range(2):
        mine, theirs = np.array(np.nan), np.array(np.nan)
        _same(f(mine), np.nan_to_num(theirs, copy=False))
        assert mine == theirs == 0.0


def test_nanmean_of_floats_in_an_integer_dtype_raises_as_numpy():
    with pytest.raises(TypeError):
        np.nanmean(X, dtype=np.int32)
    with pytest.raises(TypeError):
        braze.compile(lambda x: np.nanmean(x, dtype=np.int32), target="cpu")(X)


def test_sort_is_numpys_own_sort_bit_for_bit():
    """``np.sort`` runs NumPy's sort (a gather of argsort was 3.5-7.7x slower and
    ordered -0.0 and 0.0 otherwise than np.sort's SIMD sort does)."""
    x = np.zeros(64)
    x[::3] = -0.0
    x[5], x[9] = np.nan, -np.inf
    f = braze.compile(lambda x: np.sort(x) * 1.0, target="cpu")
    for _ in range(2):
        got, want = f(x), np.sort(x) * 1.0
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
        np.testing.assert_array_equal(got, want)
    plan = f.lower(x).plan
    assert "extern sort" in plan and "argsort" not in plan, plan


@pytest.mark.parametrize("decimals", [309, 400, -309, -400])
def test_round_past_floats_range_of_decimals_is_numpys_nan(decimals):
    """NumPy's scale 10**decimals is inf there (its C pow): NaN results, no error."""
    a = np.array([1.234, -5.5, 0.0, np.inf])
    f = braze.compile(lambda a: np.round(a, decimals), target="cpu")
    with np.errstate(all="ignore"):
        for x in (a, a.astype(np.float32)):
            np.testing.assert_array_equal(f(x), np.round(x, decimals))


def test_gradient_of_bools_raises_as_numpy():
    with pytest.raises(TypeError):
        np.gradient(XB[0])
    with pytest.raises(TypeError):
        braze.compile(np.gradient, target="cpu")(XB[0])


@pytest.mark.parametrize("name", ["median", "percentile", "nanquantile", "nanmedian"])
def test_overwrite_input_writes_only_what_numpy_writes(name):
    """``overwrite_input=True`` lets NumPy reorder its argument: a copy made
    first must be kept (the caller's array was scrambled), and an argument given
    itself is reordered as NumPy reorders it."""
    call = {"median": lambda a: np.median(a, overwrite_input=True),
            "percentile": lambda a: np.percentile(a, 50, overwrite_input=True),
            "nanquantile": lambda a: np.nanquantile(a, 0.5, overwrite_input=True),
            "nanmedian": lambda a: np.nanmedian(a, overwrite_input=True)}[name]
    for fn in (lambda a: call(a.copy()), lambda a: call(np.copy(a)) + 1, call):
        f = braze.compile(fn, target="cpu")
        for seed in range(3):  # (the first call traces, the others run the program)
            a = np.random.default_rng(seed).standard_normal(9)
            a[[1, 4]] = np.nan if name.startswith("nan") else a[[1, 4]]
            mine, theirs = a.copy(), a.copy()
            _same(f(mine), fn(theirs))
            np.testing.assert_array_equal(mine, theirs)


def test_convolve_with_a_long_kernel_is_a_graph_break_and_bad_input_raises_as_numpy():
    from braze.numpy import CONVOLVE_TAPS

    x = np.random.default_rng(2).standard_normal(3 * CONVOLVE_TAPS)
    f = braze.compile(lambda a: np.convolve(a, a[:CONVOLVE_TAPS + 1], mode="same"), target="cpu")
    np.testing.assert_allclose(f(x), np.convolve(x, x[:CONVOLVE_TAPS + 1], mode="same"), rtol=1e-12)
    assert "host_call" in f.lower(x).plan
    for fn, message in [(lambda a: np.convolve(a, a, mode="wide"), "mode must be one of"),
                        (lambda a: np.convolve(a[:0], a), "a cannot be empty"),
                        (lambda a: np.convolve(a, a[:0]), "v cannot be empty"),
                        (lambda a: np.convolve(a.reshape(2, -1), a), "object too deep")]:
        with pytest.raises(ValueError, match=message):
            fn(x)  # (NumPy's own)
        with pytest.raises(ValueError, match=message):
            braze.compile(fn, target="cpu", fullgraph=True)(x)


def test_insert_elsewhere_is_a_graph_break_and_bad_indices_raise_as_numpy():
    fn = braze.compile(lambda v: np.insert(v, [1, 3], -1.0), target="cpu")
    np.testing.assert_array_equal(fn(V), np.insert(V, [1, 3], -1.0))
    assert "host_call" in fn.lower(V).plan
    for index in (6, -6):
        with pytest.raises(IndexError, match=f"index {index} is out of bounds for axis 0 with size 5"):
            braze.compile(lambda v: np.insert(v, index, 0.0), target="cpu")(V)


def test_pad_modes_match_numpy_for_widths_beyond_the_axis():
    x = np.arange(4.0)
    for mode in ("edge", "reflect", "symmetric", "wrap"):
        for lo, hi in ((0, 1), (3, 0), (5, 9), (11, 2)):
            want = np.pad(x, (lo, hi), mode=mode)
            got = braze.compile(lambda a: np.pad(a, (lo, hi), mode=mode), target="generic", fullgraph=True)(x)
            np.testing.assert_array_equal(got, want, err_msg=f"{mode} {lo} {hi}")


def test_flip_is_a_view_that_writes_through():
    def f(a):
        b = np.flip(a, 0)
        b[0] = -1.0
        return a.sum()

    a, b = X.copy(), X.copy()
    np.testing.assert_allclose(braze.compile(f, target="cpu")(a), f(b), rtol=1e-14)  # (sums: braze's order)
    np.testing.assert_array_equal(a, b)


DIFFERENTIABLE = ["insert_axis1", "convolve_full", "convolve_same_swapped", "sort", "partition", "partition_kths_axis0",
                  "flip_axis", "rot90", "roll_tuple", "diff_n2_axis0", "trace", "diag_k", "diag_of_matrix",
                  "maximum_accumulate", "drawdown", "gradient_coordinates", "trapezoid",
                  "trapezoid_2d_x", "repeat_counts", "tile_2d", "pad_reflect", "pad_constant", "select", "cross", "kron",
                  "column_stack", "rollaxis", "sinc", "gradient_edge_order2", "cov", "corrcoef",
                  "linspace_arrays"]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_gradient_matches_finite_differences(name, compiled):
    fn, args = CASES[name]
    weights = np.random.default_rng(5).standard_normal(np.shape(fn(*args)))

    def loss(*xs):
        return (fn(*xs) * weights).sum()

    grad = braze.grad(loss, argnums=0)
    if compiled:
        grad = braze.compile(grad, target="cpu")
    x0 = np.array(args[0], dtype=np.float64)
    fd = central_differences(lambda x: loss(x, *args[1:]), x0)
    np.testing.assert_allclose(grad(x0, *args[1:]), fd, rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------- numpy.linalg
SPD = (lambda m: m @ m.T + 4 * np.eye(4))(np.random.default_rng(2).standard_normal((4, 4)))
GEN = np.random.default_rng(3).standard_normal((4, 4)) + 3 * np.eye(4)
BATCH = np.random.default_rng(4).standard_normal((2, 3, 3)) + 2 * np.eye(3)
RHS = np.arange(4.0) - 1.5

LINALG = {
    "inv": (np.linalg.inv, [GEN]),
    "inv_batched": (np.linalg.inv, [BATCH]),
    "solve_vector": (lambda a: np.linalg.solve(a, RHS), [GEN]),
    "solve_matrix_rhs": (lambda b: np.linalg.solve(GEN, b), [X[:, :3]]),
    "det": (np.linalg.det, [GEN]),
    "det_batched": (np.linalg.det, [BATCH]),
    "slogdet": (lambda a: np.linalg.slogdet(a).logabsdet * np.linalg.slogdet(a).sign, [GEN]),
    "cholesky": (np.linalg.cholesky, [SPD]),
    "cholesky_upper": (lambda a: np.linalg.cholesky(a, upper=True), [SPD]),
    "norm": (np.linalg.norm, [X]),
    "norm_axis": (lambda x: np.linalg.norm(x, axis=0), [X]),
    "norm_ord3_keepdims": (lambda x: np.linalg.norm(x, 3, axis=1, keepdims=True), [X]),
    "norm_matrix_1": (lambda x: np.linalg.norm(x, 1), [X]),
    "norm_matrix_inf": (lambda x: np.linalg.norm(x, -np.inf), [X]),
    "norm_fro_axes": (lambda x: np.linalg.norm(x, "fro", axis=(2, 0)), [X3]),
    "norm_2": (lambda x: np.linalg.norm(x, 2), [X]),
    "norm_nuc_axes": (lambda x: np.linalg.norm(x, "nuc", axis=(2, 1)), [X3]),
    "qr": (np.linalg.qr, [X.T]),
    "qr_wide": (np.linalg.qr, [X]),
    "qr_r": (lambda a: np.linalg.qr(a, mode="r"), [X.T]),
    "qr_complete_square": (lambda a: np.linalg.qr(a, mode="complete"), [GEN]),
    "qr_batched": (np.linalg.qr, [BATCH]),
    "eigh": (np.linalg.eigh, [SPD]),
    "eigh_upper": (lambda a: np.linalg.eigh(a, UPLO="U"), [GEN]),
    "eigvalsh": (np.linalg.eigvalsh, [GEN]),
    "svd": (lambda a: np.linalg.svd(a, full_matrices=False), [X]),
    "svd_tall": (lambda a: np.linalg.svd(a, full_matrices=False), [X.T]),
    "svd_square_full": (np.linalg.svd, [GEN]),
    "svd_values": (lambda a: np.linalg.svd(a, compute_uv=False), [BATCH]),
}


@pytest.mark.parametrize("target", ["generic", "cpu"])
@pytest.mark.parametrize("name", sorted(LINALG))
def test_linalg_matches_numpy(name, target):
    fn, args = LINALG[name]
    _same(braze.compile(fn, target=target, fullgraph=True)(*args), fn(*args))


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("name", sorted(set(LINALG) - {"norm_matrix_inf"}))
def test_linalg_gradient_matches_finite_differences(name, compiled):
    fn, args = LINALG[name]
    outs = fn(*args) if isinstance(fn(*args), tuple) else (fn(*args),)
    weights = [np.random.default_rng(6).standard_normal(np.shape(o)) for o in outs]

    def loss(x):  # (every result of a decomposition, weighted)
        got = fn(x)
        return sum((g * w).sum() for g, w in zip(got if isinstance(got, tuple) else (got,), weights))

    grad = braze.grad(loss)
    if compiled:
        grad = braze.compile(grad, target="cpu")
    x0 = np.array(args[0], dtype=np.float64)
    np.testing.assert_allclose(grad(x0), central_differences(loss, x0), rtol=1e-5, atol=1e-6)


LSTSQ_A = np.random.default_rng(7).standard_normal((6, 3))
LSTSQ = {  # (a graph break: the residuals' length depends on the rank LAPACK finds)
    "solution": lambda a, b: np.linalg.lstsq(a, b, rcond=None)[0],
    "residuals": lambda a, b: np.linalg.lstsq(a, b)[1],
    "singular_values": lambda a, b: np.linalg.lstsq(a, b)[3],
    "all": lambda a, b: np.linalg.lstsq(a, b),
}


@pytest.mark.parametrize("rhs", ["vector", "matrix"])
@pytest.mark.parametrize("name", sorted(LSTSQ))
def test_lstsq_matches_numpy_and_finite_differences(name, rhs):
    fn = LSTSQ[name]
    a, b = LSTSQ_A, (RHS[:3] @ LSTSQ_A.T if rhs == "vector" else X[:, :2].repeat(2, 0)[:6])
    b = b + np.random.default_rng(8).standard_normal(b.shape)
    want = fn(a, b)
    for target in ("generic", "cpu"):
        got = braze.compile(fn, target=target)(a, b)
        for g, w in zip(got if isinstance(want, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            assert np.shape(g) == np.shape(w) and np.asarray(g).dtype == np.asarray(w).dtype
            # (float32: a sum or a product's accumulation may add in another order)
        tight = np.asarray(w).dtype != np.float32
        np.testing.assert_allclose(g, w, rtol=1e-12 if tight else 1e-6, atol=1e-14 if tight else 1e-7)
    outs = want if isinstance(want, tuple) else (want,)
    weights = [np.random.default_rng(9).standard_normal(np.shape(w)) for w in outs]

    def loss(a, b):
        got = fn(a, b)
        return sum((got[k] * w).sum() for k, w in enumerate(weights) if k != 2) if isinstance(got, tuple) \
            else (got * weights[0]).sum()

    for argnum, x in enumerate((a, b)):
        def partial(x, argnum=argnum):
            return loss(x, b) if argnum == 0 else loss(a, x)

        want_grad = central_differences(partial, x.copy())
        for grad in (braze.grad(loss, argnums=argnum), braze.compile(braze.grad(loss, argnums=argnum), target="cpu")):
            np.testing.assert_allclose(grad(a, b), want_grad, rtol=1e-5, atol=1e-7)


def test_lstsq_of_a_rank_deficient_system_re_specializes_to_numpys_empty_residuals():
    f = braze.compile(lambda a, b: np.linalg.lstsq(a, b), target="cpu")
    deficient = LSTSQ_A.copy()
    deficient[:, 2] = deficient[:, 0]
    for a in (LSTSQ_A, deficient, LSTSQ_A):
        for g, w in zip(f(a, RHS[:3] @ a.T + 1), np.linalg.lstsq(a, RHS[:3] @ a.T + 1)):
            assert np.shape(g) == np.shape(w)
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def test_decomposition_gradients_refuse_what_is_not_unique():
    with pytest.raises(braze.GradientError, match="full_matrices"):
        braze.grad(lambda x: np.linalg.svd(x)[0].sum())(X)
    with pytest.raises(braze.GradientError, match="mode='complete'"):
        braze.grad(lambda x: np.linalg.qr(x, mode="complete")[0].sum())(X.T)
    with pytest.raises(braze.GradientError, match="underdetermined"):
        braze.grad(lambda x: np.linalg.lstsq(x, RHS[:3])[0].sum())(X[:3, :4])


def test_singular_matrix_raises_numpys_error():
    with pytest.raises(np.linalg.LinAlgError):
        braze.compile(np.linalg.inv, target="cpu")(np.zeros((3, 3)))


@pytest.mark.parametrize("n", [np.int64(3), np.array(3), np.int32(3)], ids=["int64", "0d", "int32"])
def test_a_numpy_integer_argument_is_a_shape_as_in_numpy(n):
    """``np.zeros(n)`` with ``n`` a NumPy integer or a 0-d array argument (traced:
    specialized on, as any value used as a shape); it was iterated as a sequence."""
    fns = (lambda x, n: np.zeros(n) + x[0], lambda x, n: np.ones(n, np.int32), lambda x, n: np.full(n, 2.0),
           lambda x, n: x.reshape(n), lambda x, n: np.empty(n).shape)
    for fn in fns:
        f = braze.compile(fn, target="cpu")
        for _ in range(2):
            _same(f(np.ones(3), n), fn(np.ones(3), n))


@pytest.mark.parametrize("edge_order", [1, 2])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gradient_of_traced_coordinates_is_numpys_bit_for_bit(edge_order, dtype):
    """Which formula NumPy uses depends on the coordinates' values (all
    differences equal: its scalar formula); traced coordinates choose it per call."""
    f = braze.compile(lambda y, x: np.gradient(y, x, edge_order=edge_order), target="cpu")
    y = RNG.standard_normal(11).astype(dtype)
    for x in (np.arange(11) * 0.1, np.sort(RNG.random(11)) * 3, np.arange(11.0)):
        got, want = f(y, x), np.gradient(y, x, edge_order=edge_order)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_gradient_and_trapezoid_have_gradients():
    from _compare import central_differences

    x = np.sort(RNG.random(9)) * 3
    w = RNG.standard_normal(9)

    def loss(y):
        return (np.gradient(y, x, edge_order=2) * w).sum() + np.trapezoid(y * y, x)

    y = RNG.standard_normal(9)
    np.testing.assert_allclose(braze.compile(braze.grad(loss), target="cpu")(y), central_differences(loss, y),
                               rtol=1e-6, atol=1e-8)


def test_running_extremum_gradient_goes_to_the_last_element_equal_to_it():
    """PyTorch's rule for cummax: ``out[j]`` is the last ``x[k]``, ``k <= j``, equal to it."""
    from _compare import central_differences

    x = np.array([1.0, 3.0, 2.0, 3.0, 0.0, 4.0])
    g = braze.compile(braze.grad(lambda x: (np.maximum.accumulate(x) * np.arange(1.0, 7.0)).sum()), target="cpu")
    np.testing.assert_array_equal(g(x), [1.0, 2.0 + 3.0, 0.0, 4.0 + 5.0, 0.0, 6.0])
    x, w = RNG.standard_normal((4, 9)), RNG.standard_normal((4, 9))
    for axis in (0, 1):
        for f in (np.maximum.accumulate, np.minimum.accumulate):
            def loss(x):
                return (f(x, axis=axis) * w).sum()

            np.testing.assert_allclose(braze.compile(braze.grad(loss), target="cpu")(x), central_differences(loss, x),
                                       rtol=1e-6, atol=1e-8)
