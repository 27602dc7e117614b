"""Boolean-mask selection ``x[mask]`` (a mask of ``x``'s shape): one ``compress``
op whose length is the data's, guarded each call; on cpu a count-then-fill
kernel fused with the cheap elementwise producers of the mask and the values."""
import numpy as np
import pytest

import braze
from _compare import central_differences

TARGETS = ["generic", "cpu"]


def select(x):
    return x[x > 0] if x.dtype != np.bool_ else x[x]


def with_specials(x):
    if x.dtype.kind == "f" and x.size >= 4:
        flat = x.reshape(-1)
        flat[:4] = [np.nan, np.inf, -np.inf, -0.0]
    return x


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.bool_])
@pytest.mark.parametrize("shape", [(0,), (1,), (9,), (5, 0), (4, 6), (3, 1, 5)])
def test_selection_matches_numpy(shape, dtype, target):
    rng = np.random.default_rng(3)
    f = braze.compile(select, target=target)
    for _ in range(3):  # new data each call: another count re-specializes, never a stale length
        if dtype == np.bool_:
            x = rng.random(shape) > 0.5
        elif dtype == np.int64:
            x = rng.integers(-3, 3, shape)
        else:
            x = (rng.standard_normal(shape) * 1e30).astype(dtype)
        x = with_specials(x)
        got, want = f(x), select(x)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def selections(x, y):
    m = (x > 0.2) & (y < 0.7)
    return x[m], y[m] * 2.0, (x - y)[m].sum()


@pytest.mark.parametrize("target", TARGETS)
def test_selections_by_one_mask_are_one_count_then_fill_kernel(target):
    rng = np.random.default_rng(0)
    x, y = rng.random((40, 30)), rng.random((40, 30))
    f = braze.compile(selections, target=target)
    for got, want in zip(f(x, y), selections(x, y)):
        np.testing.assert_allclose(got, want, rtol=1e-13)
    if target == "cpu":
        plan = f.lower(x, y).plan
        kernels = [line for line in plan.splitlines() if "count-then-fill kernel" in line]
        assert len(kernels) == 1, plan  # every selection returned by the mask
        assert kernels[0].count("compress") == 2, plan  # (the sum is over x - y where m: no selection)
        assert "extern" not in plan, plan


def test_transcendental_producers_stay_in_a_vectorized_kernel():
    """The fill pass does not vectorize; an exp is cheaper computed apart."""
    def fn(x, y):
        return np.exp(y)[(x > 0.5) & (y < 0.9)]

    rng = np.random.default_rng(1)
    x, y = rng.random(1000), rng.random(1000)
    f = braze.compile(fn, target="cpu")
    np.testing.assert_allclose(f(x, y), fn(x, y), rtol=4e-16)
    plan = f.lower(x, y).plan
    assert any("elementwise kernel" in line and "exp" in line for line in plan.splitlines()), plan
    assert any("count-then-fill" in line and "exp" not in line for line in plan.splitlines()), plan


@pytest.mark.parametrize("target", TARGETS)
def test_strided_and_captured_arrays_and_a_mask_of_a_view(target):
    rng = np.random.default_rng(2)
    table = rng.standard_normal((6, 8))

    def fn(a):
        v = a[:, ::2]
        return v[v > 0], table[a > 0.5], a.T[a.T < 0]

    a = rng.standard_normal((6, 8))
    f = braze.compile(fn, target=target)
    for got, want in zip(f(a), fn(a)):
        np.testing.assert_array_equal(got, want)
    b = np.asfortranarray(rng.standard_normal((6, 8)))
    for got, want in zip(f(b), fn(b)):
        np.testing.assert_array_equal(got, want)


def test_a_changed_count_re_specializes_and_says_so():
    f = braze.compile(select, target="cpu")
    x = np.arange(-3.0, 5.0)
    np.testing.assert_array_equal(f(x), select(x))
    np.testing.assert_array_equal(f(x - 2), select(x - 2))
    assert any("re-specialized: a boolean mask selected 2 elements; traced with 4" in r
               for r in f.cache_info().reasons), f.cache_info().reasons
    assert "data-dependent length: x[mask]" in str(f.lower(x))


def test_large_selection_over_many_chunks_serial_then_parallel():
    """Above the parallel threshold: the serial kernel first, then the parallel
    one compiled in the background (chunks counted, offsets summed, filled)."""
    from braze.targets import cpu_cache

    rng = np.random.default_rng(4)
    x = rng.standard_normal((1100, 1000))
    f = braze.compile(lambda x: (x * 2)[np.abs(x) > 1.5], target="cpu")
    want = (x * 2)[np.abs(x) > 1.5]
    np.testing.assert_array_equal(f(x), want)
    cpu_cache.wait_background()
    np.testing.assert_array_equal(f(x), want)
    np.testing.assert_array_equal(f(x[::-1]), (x[::-1] * 2)[np.abs(x[::-1]) > 1.5])


def loss(x, w):
    m = (x > 0.1) & (w < 0.8)
    return (np.tanh(x[m] * w[m]) ** 2).sum() + x[x < 0].sum() * 0.5


@pytest.mark.parametrize("target", TARGETS)
def test_the_gradient_of_a_selection_is_its_scatter(target):
    grad = braze.compile(braze.grad(loss, argnums=(0, 1)), target=target)
    for seed in range(3):  # masks of other lengths: the gradient program re-specializes too
        rng = np.random.default_rng(seed)
        x, w = rng.standard_normal((5, 4)), rng.random((5, 4))
        gx, gw = grad(x, w)
        np.testing.assert_allclose(gx, central_differences(lambda x: loss(x, w), x), rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(gw, central_differences(lambda w: loss(x, w), w), rtol=1e-6, atol=1e-8)
        ex, ew = braze.grad(loss, argnums=(0, 1))(x, w)
        np.testing.assert_allclose(gx, ex, rtol=1e-12)
        np.testing.assert_allclose(gw, ew, rtol=1e-12)


def add_where_positive(x):
    x = x.copy()
    x[x > 0.5] += 1.0  # the selection, changed, stored back: one value per selected element
    return x


def double_rows(X, y):
    X = X.copy()
    X[y > 0] = X[y > 0] * 2 - 1
    return X


def squares_of_another(x, y):
    x = x.copy()
    x[y > 0] = y[y > 0] ** 2
    return x


@pytest.mark.parametrize("target", TARGETS)
def test_assigning_one_value_per_selected_element(target):
    rng = np.random.default_rng(4)
    cases = [(add_where_positive, lambda: (rng.random(20),)), (add_where_positive, lambda: (np.zeros(5),)),
             (add_where_positive, lambda: (rng.random((4, 5)).astype(np.float32),)),
             (double_rows, lambda: (rng.random((6, 3)), rng.standard_normal(6))),
             (squares_of_another, lambda: (rng.random(10), rng.standard_normal(10)))]
    for fn, make in cases:
        f = braze.compile(fn, target=target)
        for _ in range(3):  # another count each call traces again: never a stale length
            args = make()
            got, want = f(*args), fn(*args)
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)


def test_assigning_the_wrong_number_of_values_is_numpys_error():
    def bad(x, y):
        x = x.copy()
        x[x > 0.5] = y[y > 0.2]
        return x

    a, b = np.array([0.9, 0.1, 0.8]), np.array([0.3, 0.4, 0.1, 0.9])
    with pytest.raises(ValueError, match="cannot assign 3 input values to the 2"):
        bad(a, b)
    with pytest.raises(braze.BrazeError, match="cannot assign 3 input values to the 2 output values"):
        braze.compile(bad, target="cpu")(a, b)


def test_gradient_through_a_masked_update():
    def loss(x):
        y = x.copy()
        y[y > 0.5] *= 3.0
        return (y ** 2).sum()

    x = np.random.default_rng(1).random(12)
    grad = braze.compile(braze.grad(loss), target="cpu")(x)
    np.testing.assert_allclose(grad, central_differences(loss, x), rtol=1e-6, atol=1e-8)
    assert np.abs(grad).min() > 0


def escape_step(zr, zi, cr, ci, count):
    """One Mandelbrot iteration as NumPy tutorials write it: ``zr_new`` is read
    before ``zi`` is stored, so it must see the old ``zi``."""
    zr, zi, count = zr.copy(), zi.copy(), count.copy()
    mask = zr * zr + zi * zi < 4.0
    zr_new = zr[mask] ** 2 - zi[mask] ** 2 + cr[mask]
    zi[mask] = 2 * zr[mask] * zi[mask] + ci[mask]
    zr[mask] = zr_new
    count[mask] += 1
    return zr, zi, count


def scaled_logs(x):
    y = x.copy()
    y[y > 0] = np.log(y[y > 0]) * np.float32(2) + 1  # (a NumPy scalar beside a Python one)
    return y


def rows_scaled(x, w):
    y = x.copy()
    m = y[:, 0] > 0
    y[m] = y[m] * w - np.abs(y[m])
    return y


def halved_into_ints(k, x):
    k = k.copy()
    k[x > 0] = x[x > 0] * 2.5  # (float values cast into an int array, as NumPy's store casts)
    return k


def _no_selection_left(f, *args):
    ops = {n.op for n in f.lower(*args).ir.nodes}
    assert "compress" not in ops and "gather" not in ops, ops


@pytest.mark.parametrize("target", TARGETS)
def test_a_masked_store_of_computed_values_is_a_where_over_whole_arrays(target):
    """``x[mask] = f(a[mask], b[mask])`` computes ``f`` over the whole arrays and
    keeps the selected elements (np.where): the same ops on the same operands
    for each selected element, no compaction or gather left in the program,
    and a guard on the mask's count still traces again when it changes."""
    rng = np.random.default_rng(7)
    specials = np.array([np.nan, np.inf, -np.inf, 1e30, -1e-30, 0.0, -0.0, 1e-30])
    for dtype in (np.float32, np.float64):
        f = braze.compile(escape_step, target=target)
        for size in (1, 9, 40):  # (a new count each call: traced again, never stale)
            cr = rng.uniform(-2, 1, size).astype(dtype)
            ci = rng.uniform(-1.5, 1.5, size).astype(dtype)
            args = (cr * 0.5, ci * 0.5, cr, ci, np.zeros(size, np.int32))
            for got, want in zip(f(*args), escape_step(*args)):
                assert got.dtype == want.dtype
                np.testing.assert_array_equal(got, want)
        _no_selection_left(f, *args)
        g = braze.compile(scaled_logs, target=target)
        for x in (specials.astype(dtype), rng.standard_normal(17).astype(dtype), -np.ones(3, dtype)):
            with np.errstate(all="ignore"):
                want = scaled_logs(x)
            got = g(x)
            assert got.dtype == want.dtype
            assert np.array_equal(np.isnan(got), np.isnan(want))  # (log: braze's, within its ulp)
            np.testing.assert_array_max_ulp(np.nan_to_num(got), np.nan_to_num(want), maxulp=2)
        _no_selection_left(g, specials.astype(dtype))
    x, w = rng.standard_normal((7, 3)), np.array([1.0, -2.0, 3.0])
    np.testing.assert_array_equal(braze.compile(rows_scaled, target=target)(x, w), rows_scaled(x, w))
    _no_selection_left(braze.compile(rows_scaled, target=target), x, w)
    k, x = np.arange(-4, 5), np.linspace(-1, 1, 9)
    got = braze.compile(halved_into_ints, target=target)(k, x)
    assert got.dtype == k.dtype
    np.testing.assert_array_equal(got, halved_into_ints(k, x))


@pytest.mark.parametrize("target", TARGETS)
def test_a_masked_store_over_whole_arrays_warns_where_numpy_does_not_never(target):
    """Unselected elements are computed too (a log of negatives, a division by
    zero): no target says so, as NumPy, which never computed them, does not."""
    import warnings

    def guarded_division(x):
        x = x.copy()
        x[x != 0] = 7 // x[x != 0] + 100 % x[x != 0]
        return x

    x = np.array([0, 3, -2, 0, 5, np.iinfo(np.int64).min])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(braze.compile(guarded_division, target=target)(x), guarded_division(x))
        np.testing.assert_array_max_ulp(braze.compile(scaled_logs, target=target)(np.array([-1.0, 2.0])),
                                        scaled_logs(np.array([-1.0, 2.0])), maxulp=2)


@pytest.mark.parametrize("target", TARGETS)
def test_a_selection_read_elsewhere_or_counted_in_python_stays_guarded(target):
    def store_and_return(x):
        y = x.copy()
        picked = y[y > 0]
        y[y > 0] = picked * 2
        return y, picked, len(picked) + 0.5 * picked.size

    f = braze.compile(store_and_return, target=target)
    rng = np.random.default_rng(2)
    for size in (5, 12, 12, 3):
        x = rng.standard_normal(size)
        for got, want in zip(f(x), store_and_return(x)):
            np.testing.assert_array_equal(got, want)
    assert "compress" in {n.op for n in f.lower(x).ir.nodes}


def test_gradient_through_a_masked_store_of_computed_values():
    def loss(x, c):
        y = x.copy()
        y[y > 0.5] = np.sin(y[y > 0.5]) * 3.0 + c[y > 0.5]
        return (y ** 2).sum()

    rng = np.random.default_rng(5)
    x, c = rng.random(12), rng.random(12)
    grad = braze.compile(braze.grad(loss), target="cpu")(x, c)
    np.testing.assert_allclose(grad, central_differences(lambda v: loss(v, c), x), rtol=1e-6, atol=1e-8)
    assert np.abs(grad).min() > 0


# Programs that read a selection's length, each way Python and NumPy can: each
# must trace again when the count changes (or never drop the count's guard).
def _len_in_python(x):
    x = x.copy()
    n = len(x[x > 0])
    x[x > 0] = x[x > 0] * 2
    return x * n


def _zeros_like_selection(x):
    x = x.copy()
    sel = x[x > 0]
    y = np.zeros_like(sel)
    x[x > 0] = sel * 2
    return x, y


def _arange_of_size(x):
    x = x.copy()
    sel = x[x > 0] + 1
    x[x > 0] = sel
    return x, np.arange(sel.size)


def _shape_returned(x):
    x = x.copy()
    sel = x[x > 0]
    x[x > 0] = sel + 1
    return x, float(sel.shape[0])


def _sliced(x):
    x = x.copy()
    sel = x[x > 0] * 2
    x[x > 0] = sel
    return x, sel[:3].sum()


def _iterated(x):
    x = x.copy()
    total = 0.0
    for v in x[x > 0]:
        total = total + v
    x[x > 0] = x[x > 0] - 1
    return x, total


def _mean_of_selection(x):
    x = x.copy()
    m = np.mean(x[x > 0])
    x[x > 0] = x[x > 0] * 3
    return x, m


def _broadcast_by_shape(x):
    x = x.copy()
    sel = x[x > 0]
    x[x > 0] = sel * np.ones(len(sel))
    return x, np.broadcast_to(2.0, sel.shape)


def _branch_on_count(x):
    x = x.copy()
    if x[x > 0].shape[0] > 4:
        x[x > 0] = 0.0
    else:
        x[x > 0] = x[x > 0] * 2
    return x


def _reversed_store(x):
    x = x.copy()
    x[x > 0] = x[x > 0][::-1]
    return x


def _sorted_store(x):
    x = x.copy()
    x[x > 0] = np.sort(x[x > 0])
    return x


LENGTH_READERS = [_len_in_python, _zeros_like_selection, _arange_of_size, _shape_returned, _sliced, _iterated,
                  _mean_of_selection, _broadcast_by_shape, _branch_on_count, _reversed_store, _sorted_store]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn", LENGTH_READERS, ids=lambda fn: fn.__name__.strip("_"))
def test_a_selection_whose_length_is_read_still_traces_again_for_a_new_count(fn, target):
    f = braze.compile(fn, target=target)
    for x in (np.array([1.0, -2.0, 3.0, 4.0, -1.0, 0.5]), np.array([-1.0, 2.0, -3.0, 0.25, -1.0, -2.0]),
              np.array([5.0, 6.0, -7.0, 8.0, 9.0, 1.0]), -np.ones(6), np.arange(1.0, 7.0)):  # (one shape)
        got, want = f(x), fn(x)
        for g, w in zip(got if isinstance(want, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            assert np.shape(g) == np.shape(w)
            np.testing.assert_allclose(g, w, rtol=1e-12)


@pytest.mark.parametrize("target", TARGETS)
def test_a_masked_store_whose_selections_nothing_measures_runs_any_count_untraced(target):
    """Mandelbrot's iteration reads its selections only to store them back
    through the mask: no length is read, so a new grid (another count at each
    iteration) runs the program traced once."""
    f = braze.compile(escape_step, target=target)
    rng = np.random.default_rng(11)
    for size in (12, 12, 12, 12):
        cr, ci = rng.uniform(-2, 1, size), rng.uniform(-1.5, 1.5, size)
        args = (cr * rng.random(size) * 3, ci * rng.random(size) * 3, cr, ci, np.zeros(size, np.int32))
        for got, want in zip(f(*args), escape_step(*args)):
            np.testing.assert_array_equal(got, want)
    info = f.cache_info()
    assert info.reasons == ["first call"] and info.hits == 3, info.reasons  # (no re-specialization)
    assert "its length was never read" in str(f.lower(*args))


def masked_statistics(x, w):
    """What analysis code computes over the values passing a test."""
    keep = x > 0
    return (x[keep].sum(), np.mean(x[keep]), (x[keep] * w[keep]).sum(), np.sum(x[keep] ** 2, keepdims=True),
            x[keep].mean(dtype=np.float32), np.prod(w[x > 0.5]), np.std(x[keep]), x[keep].var(ddof=1))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.int64])
def test_sums_and_means_of_selections_run_any_count_untraced(dtype, target):
    """``x[m].sum()``, ``np.mean(x[m])`` and ``np.std(x[m])`` are NumPy's ``where=`` reductions over
    ``x`` (the mean's count a traced sum of ``m``): nothing reads the
    selection's length, so new data with another count runs the program
    traced once; results are NumPy's, empty selections and NaN included."""
    import warnings

    rng = np.random.default_rng(12)
    f = braze.compile(masked_statistics, target=target)
    for k in range(5):
        x = (rng.standard_normal(40) * 50).astype(dtype)
        w = rng.random(40).astype(dtype) if dtype().dtype.kind == "f" else rng.integers(1, 3, 40).astype(dtype)
        if k == 2:
            x[:] = -1  # (nothing selected: a sum of 0, a mean of NaN)
        if k == 3 and dtype().dtype.kind == "f":
            x[:3] = [np.nan, -np.inf, np.inf]  # (a NaN not selected, an inf selected)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            got, want = f(x, w), masked_statistics(x, w)
        for g, v in zip(got, want):
            assert np.shape(g) == np.shape(v) and np.asarray(g).dtype == np.asarray(v).dtype, (g, v)
            np.testing.assert_allclose(g, v, rtol=2e-6 if np.asarray(v).dtype == np.float32 else 1e-12)
    assert f.cache_info().reasons == ["first call"], f.cache_info().reasons  # (no re-specialization)
