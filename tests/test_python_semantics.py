"""What Python code sees of a traced array, as it would see a NumPy array:
``isinstance`` checks, copies that are copies, results that are fresh arrays
on every call, and state the function keeps between calls (globals,
closures, attributes)."""
import numpy as np
import pytest
from numpy.random import RandomState as _ImportedRandomState, default_rng as _imported_default_rng

import braze
from _compare import central_differences

TARGETS = ["generic", "cpu"]


def norm_or_abs(x):
    """A helper written for arrays and scalars alike, as libraries write them."""
    if isinstance(x, np.ndarray):
        return np.sqrt((x * x).sum())
    return abs(x)


def branches_on_isinstance(x, s):
    return norm_or_abs(x) + norm_or_abs(s) + norm_or_abs(x.sum()) * 0.5


@pytest.mark.parametrize("target", TARGETS)
def test_isinstance_ndarray_takes_numpys_branch(target):
    x = np.array([3.0, -4.0, 12.0])
    f = braze.compile(branches_on_isinstance, target=target)
    assert f(x, -2.0) == branches_on_isinstance(x, -2.0) == 13.0 + 2.0 + 5.5
    text = str(f.lower(x, -2.0))
    assert "graph break" not in text  # the array branch traced, nothing was read


def scalar_kinds(x, i):
    """Library-style argument checks on NumPy scalars read out of arrays."""
    s, k, total = x[0], i[1], x.sum()
    return (isinstance(s, np.floating), isinstance(s, np.float32), isinstance(s, float), np.isscalar(s),
            isinstance(k, (int, np.integer)), isinstance(k, int), isinstance(total, np.generic),
            np.isscalar(x), isinstance(x[:1], np.ndarray), isinstance(s * 2.0, np.float32))


def scaled_by_kind(x):
    s = x.max()
    step = s * 0.5 if isinstance(s, np.floating) else 0.0  # (a wrong branch would give zeros)
    return x - step


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_traced_numpy_scalar_is_one_to_isinstance_and_isscalar(target, dtype):
    x, i = np.array([3.0, -4.0, 12.0], dtype), np.arange(3)
    assert braze.compile(scalar_kinds, target=target)(x, i) == scalar_kinds(x, i)
    f = braze.compile(scaled_by_kind, target=target)
    np.testing.assert_array_equal(f(x), scaled_by_kind(x))
    assert "graph break" not in str(f.lower(x))


def test_isinstance_ndarray_holds_under_a_gradient_tape():
    x = np.array([3.0, -4.0, 12.0])
    g = braze.grad(lambda x: norm_or_abs(x))
    np.testing.assert_allclose(g(x), central_differences(norm_or_abs, x), rtol=1e-7)
    np.testing.assert_allclose(braze.compile(g, target="cpu")(x), x / 13.0, rtol=1e-12)


def test_numpy_python_level_functions_still_trace_a_traced_array():
    def padded(x):
        y = np.atleast_2d(x)
        return np.pad(y, 1) * 2, np.append(x, x[:1]), isinstance(y, np.ndarray), type(x) is np.ndarray

    x = np.arange(4.0)
    f = braze.compile(padded, target="cpu")
    got, want = f(x), padded(x)
    for g, w in zip(got[:2], want[:2]):
        np.testing.assert_array_equal(g, w)
    assert got[2] is True
    assert got[3] is False  # type() is the braze class: isinstance is what libraries use
    assert "graph break" not in str(f.lower(x))


# ---------------------------------------------------------------- copies and fresh results


def copy_then_write(a):
    old = a.copy()
    a[0] = 9.0
    return old


COPIES = {
    "copy": lambda a: a.copy(),
    "np_copy": lambda a: np.copy(a),
    "np_array": lambda a: np.array(a),
    "astype_same": lambda a: a.astype(a.dtype),
    "flatten": lambda a: a.flatten(),
    "concatenate_one": lambda a: np.concatenate([a]),
    "stack_row": lambda a: np.stack([a])[0],
    "sum_no_axes": lambda a: a.sum(axis=()),
    "transpose_copy": lambda a: a.T.copy(),
    "reversed_copy": lambda a: a[::-1].copy(),
    "copy_then_write": copy_then_write,
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(COPIES))
def test_a_copy_of_an_argument_is_a_new_array(name, target):
    fn = COPIES[name]
    x, y = np.arange(6.0).reshape(2, 3), np.arange(6.0).reshape(2, 3)
    got, want = braze.compile(fn, target=target)(x), fn(y)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(x, y)  # the argument as NumPy left it
    assert not np.shares_memory(got, x)
    got[...] = -1.0  # writing into the result leaves the argument alone
    np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("target", TARGETS)
def test_a_view_of_an_argument_is_still_a_view(target):
    x = np.arange(6.0)
    got = braze.compile(lambda a: a[1:4], target=target)(x)
    assert np.shares_memory(got, x)


@pytest.mark.parametrize("target", TARGETS)
def test_an_array_made_of_constants_is_new_at_each_call(target):
    f = braze.compile(lambda x: (np.eye(2), np.arange(3.0), x + 1), target=target)
    first = f(np.ones(1))
    for r in first:
        r[...] = 100
    again = f(np.ones(1))
    np.testing.assert_array_equal(again[0], np.eye(2))
    np.testing.assert_array_equal(again[1], np.arange(3.0))


# ---------------------------------------------------------------- state the function changes

TOTAL = np.zeros(3)
LOG: list = []


def add_to_global(x):
    TOTAL[:] += x
    return TOTAL.sum()


def write_global_element(x):
    TOTAL[0] = x.sum()
    return x * 2


def log_loss(x):
    loss = (x * x).sum()
    LOG.append(loss)
    return loss


class Recurrent:
    def __init__(self):
        self.h = np.zeros(2)
        self.total = np.zeros(2)

    def step(self, x):
        self.h = np.tanh(self.h + x)
        return self.h

    def accumulate(self, x):
        self.total += x
        return self.total


def noisy(x, rng):
    return x + rng.normal(size=x.shape)


def legacy_noisy(x):
    return x + np.random.rand(*x.shape)


def test_updating_a_global_array_runs_as_numpy_and_updates_it_once_per_call(caplog):
    TOTAL[:] = 0
    f = braze.compile(add_to_global, target="cpu")
    assert [f(np.ones(3)) for _ in range(3)] == [3.0, 6.0, 9.0]
    np.testing.assert_array_equal(TOTAL, [3.0, 3.0, 3.0])
    assert "writes into a NumPy array the function did not get as an argument" in caplog.text
    with pytest.raises(braze.BrazeError, match="cannot write into an array it captured"):
        braze.compile(add_to_global, target="cpu", fullgraph=True)(np.ones(3))
    np.testing.assert_array_equal(TOTAL, [3.0, 3.0, 3.0])  # the refused trace left it as it was


def test_writing_an_element_of_a_global_array_is_seen():
    TOTAL[:] = 0
    f = braze.compile(write_global_element, target="cpu")
    for k in range(1, 4):
        np.testing.assert_array_equal(f(np.full(2, float(k))), np.full(2, 2.0 * k))
        assert TOTAL[0] == 2.0 * k


def test_appending_to_a_global_list_appends_values_once_per_call():
    LOG.clear()
    f = braze.compile(log_loss, target="cpu")
    for k in range(3):
        f(np.full(2, float(k)))
    assert LOG == [0.0, 2.0, 8.0] and all(type(v) is np.float64 for v in LOG)


@pytest.mark.parametrize("target", TARGETS)
def test_a_method_that_rebinds_or_updates_attributes_keeps_numpys_state(target):
    want, got = Recurrent(), Recurrent()
    step = braze.compile(got.step, target=target)
    for _ in range(3):
        np.testing.assert_array_equal(step(np.ones(2)), want.step(np.ones(2)))
    np.testing.assert_array_equal(got.h, want.h)
    assert type(got.h) is np.ndarray
    acc = braze.compile(got.accumulate, target=target)
    for _ in range(2):
        np.testing.assert_array_equal(acc(np.ones(2)), want.accumulate(np.ones(2)))
    assert type(got.total) is np.ndarray


@pytest.mark.parametrize("target", TARGETS)
def test_random_numbers_are_drawn_at_every_call(target):
    want = [noisy(np.zeros(3), r) for r in [np.random.default_rng(5)] for _ in range(3)]
    rng = np.random.default_rng(5)
    f = braze.compile(noisy, target=target)
    got = [f(np.zeros(3), rng) for _ in range(3)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    np.random.seed(3)
    want = [legacy_noisy(np.zeros(2)) for _ in range(2)]
    np.random.seed(3)
    f = braze.compile(legacy_noisy, target=target)
    got = [f(np.zeros(2)) for _ in range(2)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_changing_a_list_or_dict_argument_is_seen():
    def record(history, stats, x):
        history.append(x.sum())
        stats["n"] = stats.get("n", 0) + 1
        return x * 2

    history, stats = [], {}
    f = braze.compile(record, target="cpu")
    for k in range(2):
        f(history, stats, np.full(2, float(k)))
    assert history == [0.0, 2.0] and stats == {"n": 2}


def test_a_function_without_effects_still_compiles():
    scale = np.array([1.0, 2.0])
    f = braze.compile(lambda x: x * scale + TOTAL[:2], target="cpu")
    np.testing.assert_array_equal(f(np.ones(2)), np.ones(2) * scale + TOTAL[:2])
    assert "kernel" in str(f.lower(np.ones(2)))


# ---------------------------------------------------------------- values read while tracing

RATE = 0.1
WEIGHTS = np.ones(3)


def sgd(w):
    return w - RATE * WEIGHTS


def test_a_rebound_global_is_read_again_and_its_contents_live():
    global RATE, WEIGHTS
    f = braze.compile(sgd, target="cpu")
    try:
        np.testing.assert_array_equal(f(np.ones(3)), sgd(np.ones(3)))
        RATE = 0.5  # rebound: traced again
        np.testing.assert_array_equal(f(np.ones(3)), np.full(3, 0.5))
        WEIGHTS[0] = 2.0  # written in place: read at the call
        np.testing.assert_array_equal(f(np.ones(3)), [0.0, 0.5, 0.5])
        WEIGHTS = np.zeros(3)  # rebound
        np.testing.assert_array_equal(f(np.ones(3)), np.ones(3))
        assert any("the global RATE changed" in r for r in f.cache_info().reasons)
    finally:
        RATE, WEIGHTS = 0.1, np.ones(3)


def test_closure_variables_and_attributes_rebound_are_read_again():
    k = 2.0

    def scale(x):
        return x * k

    f = braze.compile(scale, target="cpu")
    np.testing.assert_array_equal(f(np.ones(2)), [2.0, 2.0])
    k = 3.0
    np.testing.assert_array_equal(f(np.ones(2)), [3.0, 3.0])

    class Model:
        lr = 0.1

        def step(self, w):
            return w - self.lr

    m = Model()
    m.lr = 0.1
    step = braze.compile(m.step, target="generic")
    np.testing.assert_array_equal(step(np.ones(1)), [0.9])
    m.lr = 0.5
    np.testing.assert_array_equal(step(np.ones(1)), [0.5])


@pytest.mark.parametrize("target", TARGETS)
def test_a_specialized_value_tells_minus_zero_from_zero(target):
    import math

    def signed(x):
        return math.copysign(1.0, float(x[0])) * x

    f = braze.compile(signed, target=target)
    for first in (0.0, -0.0, 0.0):
        x = np.array([first, 1.0])
        np.testing.assert_array_equal(np.signbit(f(x)), np.signbit(signed(x)))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("make", [lambda: np.arange(20.0)[::2], lambda: np.arange(20.0)[::-2],
                                  lambda: np.arange(600.0).reshape(30, 20)[:, 3]])
def test_code_reading_memory_by_strides_reads_numpys_memory(make, target):
    from numpy.lib.stride_tricks import as_strided, sliding_window_view

    def windows(x):
        w = as_strided(x, shape=(len(x) - 2, 3), strides=(x.strides[0], x.strides[0]))
        return w.sum(1) + sliding_window_view(x, 3).max(1) + sliding_window_view(x[::2] * 2, 2).min(1)[0]

    got, want = braze.compile(windows, target=target)(make()), windows(make())
    np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------- results' Python types and NumPy's errors


@pytest.mark.parametrize("target", TARGETS)
def test_python_numbers_and_numpy_scalars_come_back_as_numpy_gives_them(target):
    import math

    cases = {
        "allclose": lambda a: np.allclose(a, a),
        "array_equal": lambda a: np.array_equal(a, a + 1),
        "allclose_times": lambda a: np.allclose(a, a) * a,
        "gather_0d": lambda a: a[a.argmax()],
        "gather_0d_2d": lambda a: a.reshape(2, 2)[a.argmin() // 2, a.argmax() % 2] + 1,
        "tensordot_all": lambda a: np.tensordot(a.reshape(2, 2), a.reshape(2, 2)),
        "tensordot_1d": lambda a: np.tensordot(a, a, 1),
        "einsum_all": lambda a: np.einsum("i,i->", a, a),
        "round_digits": lambda a: round(a.sum() / 3, 2),
        "round_int": lambda a: round(a.sum() / 3),
        "trunc": lambda a: math.trunc(a.sum() / 3),
        "round_int_scalar": lambda a: round(a.max(), -1),
    }
    x = np.array([1.25, 3.5, -2.0, 7.75])  # (math.trunc of a float32 is a TypeError in NumPy too)
    for name, fn in cases.items():
        got, want = braze.compile(fn, target=target)(x), fn(x)
        assert type(got) is type(want), name
        np.testing.assert_array_equal(got, want, err_msg=name)
    with pytest.raises(TypeError, match="__round__"):
        braze.compile(lambda a: round(a), target=target)(x)


@pytest.mark.parametrize("target", TARGETS)
def test_assigning_a_python_int_out_of_range_is_numpys_overflow_error(target):
    def store(a, v):
        a[0] = v
        return a

    for v in (300, -1, -1.2):
        with pytest.raises(OverflowError, match="out of bounds for uint8") as info:
            braze.compile(store, target=target, static_argnums=1)(np.zeros(2, np.uint8), v)
        assert isinstance(info.value, braze.BrazeError)
    for v in (255, 3.7, np.int64(300)):  # in range, a float (cast), a NumPy int (cast, wraps): as NumPy
        np.testing.assert_array_equal(braze.compile(store, target=target, static_argnums=1)(np.zeros(2, np.uint8), v),
                                      store(np.zeros(2, np.uint8), v))


# ---------------------------------------------------------------- indexing NumPy accepts


def _column_mask(x):
    x[:, x[0] > 2] = 0
    return x


def _flat_write(x):
    x.flat[[0, 5]] = -1.0
    return x


def _traced_stop(x):
    return x.ravel()[: x.argmax() + 1].sum()


INDEXING = {
    "nonzero_method": (lambda x: x.nonzero(), lambda: np.array([[0.0, 2.0], [3.0, 0.0]])),
    "flat_read": (lambda x: x.flat[3] + x.flat[-1], lambda: np.arange(6.0).reshape(2, 3)),
    "flat_write": (_flat_write, lambda: np.arange(6.0).reshape(2, 3)),
    "flat_transposed": (lambda x: x.T.flat[1:4] * 2, lambda: np.arange(6.0).reshape(2, 3)),
    "flat_iter": (lambda x: sum(v for v in x.flat), lambda: np.arange(4.0)),
    "traced_stop": (_traced_stop, lambda: np.array([1.0, 5.0, 2.0])),
    "traced_stop_again": (_traced_stop, lambda: np.array([7.0, 1.0, 2.0])),
    "column_mask": (_column_mask, lambda: np.arange(12.0).reshape(3, 4)),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(INDEXING))
def test_indexing_numpy_accepts(name, target):
    fn, make = INDEXING[name]
    a, b = make(), make()
    got, want = braze.compile(fn, target=target)(a), fn(b)
    assert repr(got) == repr(want)
    np.testing.assert_array_equal(a, b)


def test_asking_numpy_to_raise_on_floating_point_errors_runs_as_numpy():
    def log_raising(x):
        with np.errstate(divide="raise"):
            return np.log(x)

    def log_quiet(x):
        with np.errstate(divide="ignore"):
            return np.log(x)

    f = braze.compile(log_raising, target="cpu")
    np.testing.assert_array_equal(f(np.ones(2)), np.zeros(2))
    with pytest.raises(FloatingPointError):
        f(np.zeros(2))
    g = braze.compile(log_quiet, target="cpu")
    np.testing.assert_array_equal(g(np.zeros(2)), [-np.inf, -np.inf])
    assert "kernel" in str(g.lower(np.ones(2)))  # (ignoring errors compiles)
    with np.errstate(over="raise"):
        h = braze.compile(lambda x: np.exp(x), target="cpu")
        with pytest.raises(FloatingPointError):
            h(np.full(2, 1000.0))


def _solve_or_least_squares(A, b):
    try:
        x = np.linalg.solve(A, b)
    except np.linalg.LinAlgError:
        x = np.linalg.lstsq(A, b, rcond=None)[0]
    return x * 2


def _gather_or_default(x, i):
    try:
        return x[i] * 2
    except IndexError:
        return -1.0


@pytest.mark.parametrize("target", TARGETS)
def test_errors_numpy_raises_at_a_call_reach_the_functions_own_except(target):
    f = braze.compile(_solve_or_least_squares, target=target)
    singular, b = np.array([[1.0, 2.0], [2.0, 4.0]]), np.array([1.0, 2.0])
    for A in (np.eye(2), singular, np.eye(2) * 2):
        np.testing.assert_allclose(f(A, b), _solve_or_least_squares(A, b), rtol=1e-12)
    g = braze.compile(_gather_or_default, target=target)
    assert g(np.arange(3.0), np.array([1, 5])) == -1.0
    np.testing.assert_array_equal(g(np.arange(3.0), np.array([1, 2])), [2.0, 4.0])
    with pytest.raises(np.linalg.LinAlgError):  # (not caught: NumPy's error, as NumPy raises it)
        braze.compile(lambda A: np.linalg.inv(A), target=target)(singular)


# ---------------------------------------------------------------- more state a trace reads

CONFIG = {"alpha": 0.1}
COEFFS = [1.0, 2.0]
GAINS = np.arange(1.0, 7.0)


class Layer:
    factor = 2.0  # a class attribute, read as self.factor

    def __init__(self):
        self.W = np.eye(2)

    def forward(self, x):
        return (x @ self.W) * self.factor


class Net:
    def __init__(self):
        self.layers = [Layer(), Layer()]
        self.params = {"b": np.zeros(2)}

    def forward(self, x):
        for layer in self.layers:
            x = layer.forward(x)
        return x + self.params["b"]


def test_lists_dicts_class_attributes_and_nested_objects_rebound_are_read_again():
    f = braze.compile(lambda x: CONFIG["alpha"] * x + COEFFS[1] + GAINS.sum(), target="cpu")
    try:
        np.testing.assert_allclose(f(np.ones(2)), 0.1 + 2.0 + 21.0)
        CONFIG["alpha"] = 0.5
        COEFFS[1] = 5.0
        np.testing.assert_allclose(f(np.ones(2)), 0.5 + 5.0 + 21.0)
        GAINS[:] = 0.0  # GAINS.sum() is NumPy's, computed while traced: its values are checked
        np.testing.assert_allclose(f(np.ones(2)), 5.5)
    finally:
        CONFIG["alpha"], COEFFS[1], GAINS[:] = 0.1, 2.0, np.arange(1.0, 7.0)
    net, x = Net(), np.ones((1, 2))
    f = braze.compile(net.forward, target="cpu")
    np.testing.assert_array_equal(f(x), net.forward(x))
    net.layers[1].W = 3 * np.eye(2)
    np.testing.assert_array_equal(f(x), net.forward(x))
    net.params["b"] = np.ones(2)
    np.testing.assert_array_equal(f(x), net.forward(x))
    Layer.factor = 3.0
    try:
        np.testing.assert_array_equal(f(x), net.forward(x))
    finally:
        Layer.factor = 2.0


def test_a_compiled_function_called_inside_another_reads_its_globals_again():
    global RATE
    inner = braze.compile(lambda x: x * RATE, target="cpu")
    outer = braze.compile(lambda x: inner(x) + 1.0, target="cpu")
    try:
        np.testing.assert_allclose(outer(np.ones(2)), 1.1)
        RATE = 0.5
        np.testing.assert_allclose(outer(np.ones(2)), 1.5)
    finally:
        RATE = 0.1


PARAMS = np.zeros(3)


def _descend(p, g):
    p -= 0.5 * g
    return (g * 0 + PARAMS).sum()


def test_an_argument_updated_in_place_that_is_a_global_the_function_reads():
    f = braze.compile(_descend, target="cpu")
    PARAMS[:] = 0
    got = [f(PARAMS, np.ones(3)) for _ in range(3)]
    PARAMS[:] = 0
    want = [_descend(PARAMS, np.ones(3)) for _ in range(3)]
    assert got == want == [-1.5, -3.0, -4.5]


def test_the_global_it_reads_passed_after_another_array_is_read_as_updated():
    """The fast path (a second call of the same kinds) checks it too: the first
    call, with another array, compiled; the global passed next runs as NumPy."""
    f = braze.compile(_descend, target="cpu")
    PARAMS[:] = 0
    assert f(np.zeros(3), np.ones(3)) == 0.0
    got = [f(PARAMS, np.ones(3)) for _ in range(2)]
    assert got == [-1.5, -3.0] and PARAMS.tolist() == [-1.0] * 3
    assert f(np.zeros(3), np.ones(3)) == -3.0  # (another array again: compiled, reading PARAMS as it is)


@pytest.mark.parametrize("target", TARGETS)
def test_a_python_number_to_the_power_of_a_numpy_value_keeps_its_type(target):
    f = braze.compile(lambda a, b: a ** b, target=target)
    for a, b in ((2.5, np.float16(1.5)), (2.5, np.float32(1.5)), (2.5, np.array([1.5, 2.0], np.float32)),
                 (2, np.float32(1.5)), (2.5, np.int64(2)), (2.5, 1.5)):
        got, want = f(a, b), a ** b
        assert type(got) is type(want) and np.asarray(got).dtype == np.asarray(want).dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", TARGETS)
def test_numpy_functions_compiled_themselves_take_their_defaults_as_not_given(target):
    """braze.compile(np.sum) binds np.sum's own defaults: keepdims=np._NoValue
    (NumPy's "not given") was taken as keepdims=True, an (1, 1) array for a scalar."""
    a = np.arange(6.0).reshape(2, 3)
    for fn in (np.sum, np.max, np.argmax, np.prod, np.mean, np.std, np.any, np.cumsum, np.nanmax):
        got, want = braze.compile(fn, target=target)(a), fn(a)
        assert type(got) is type(want) and np.shape(got) == np.shape(want), fn.__name__
        np.testing.assert_allclose(got, want, rtol=1e-15)
    for fn in (lambda x: np.sum(x, 1, None, None, np._NoValue),
               lambda x: np.mean(x, keepdims=np._NoValue, where=np._NoValue)):
        got, want = braze.compile(fn, target=target)(a), fn(a)
        assert type(got) is type(want) and np.shape(got) == np.shape(want)
        np.testing.assert_allclose(got, want, rtol=1e-15)


@pytest.mark.parametrize("target", TARGETS)
def test_a_python_number_argument_reaches_a_call_braze_does_not_trace_as_a_python_number(target):
    """np.nextafter runs as NumPy between compiled regions; a Python float
    argument reached it as a 0-d float64 array, which promoted float32 data:
    float64 results one float64 ulp away instead of NumPy's float32 ones."""
    f = braze.compile(lambda x, y, k: (np.nextafter(x, y), np.nextafter(x, y) * k), target=target)
    x = np.array([1.0, 3.0, -0.0], np.float32)
    for y, k in ((2.0, 3), (np.float32(2.0), 2), (np.float64(-1.0), 1.5), (-1.0, True)):
        got, want = f(x, y, k), (np.nextafter(x, y), np.nextafter(x, y) * k)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype, (y, k)
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("target", TARGETS)
def test_a_float16_scalar_in_the_source_beside_wider_arrays(target):
    """A literal np.float16 met float32 data: the cpu kernel took it as a
    float16 argument, which numba has no type for (it crashed)."""
    cases = {
        "add": lambda x: x + np.float16(0.1),
        "where": lambda x: np.where(x > 1, x, np.float16(0.5)),
        "mul_sub": lambda x: (x * np.float16(-3.25) - np.float16(655.5)).sum(),
        "divide": lambda x: np.float16(1.0) / (x + 1),
    }
    for dtype in (np.float32, np.float64, np.int16, np.int64, np.bool_):
        x = (np.arange(6) % 3).astype(dtype)
        for name, fn in cases.items():
            got, want = braze.compile(fn, target=target)(x), fn(x)
            assert np.asarray(got).dtype == np.asarray(want).dtype, (name, dtype)
            np.testing.assert_array_equal(got, want, err_msg=f"{name} {dtype}")


class LazyLayer:
    def __init__(self):
        self.W = None

    def forward(self, x):
        if self.W is None:  # initialized at the first call
            self.W = np.eye(x.shape[-1]) * 2.0
        return x @ self.W


def test_state_changed_once_lazy_initialization_compiles_from_the_next_call():
    layer, twin = LazyLayer(), LazyLayer()
    f = braze.compile(layer.forward, target="cpu")
    x = np.arange(4.0).reshape(2, 2)
    for _ in range(3):
        np.testing.assert_array_equal(f(x), twin.forward(x))
    assert type(layer.W) is np.ndarray
    info = f.cache_info()
    assert any(r.startswith("ran as NumPy once") for r in info.reasons) and info.hits >= 1
    assert "kernel" in str(f.lower(x))


def test_a_generator_from_fresh_entropy_draws_anew_at_each_call():
    f = braze.compile(lambda x: x + np.random.default_rng().normal(size=x.shape), target="cpu")
    first, second = f(np.zeros(4)), f(np.zeros(4))
    assert not np.array_equal(first, second)
    g = braze.compile(lambda x: x + np.random.default_rng(3).normal(size=x.shape), target="cpu")
    np.testing.assert_array_equal(g(np.zeros(2)), np.random.default_rng(3).normal(size=2))
    np.testing.assert_array_equal(g(np.zeros(2)), np.random.default_rng(3).normal(size=2))


@pytest.mark.parametrize("make", [
    lambda: np.random.Generator(np.random.PCG64()), lambda: np.random.Generator(np.random.Philox()),
    lambda: np.random.Generator(np.random.MT19937()), lambda: np.random.Generator(np.random.SFC64()),
    lambda: np.random.RandomState(), lambda: np.random.default_rng(np.random.SeedSequence()),
    lambda: np.random.default_rng(np.random.PCG64(seed=None)),
    lambda: _ImportedRandomState(), lambda: _imported_default_rng(), lambda: np.random.mtrand.RandomState(),
], ids=["PCG64", "Philox", "MT19937", "SFC64", "RandomState", "SeedSequence", "PCG64 seed=None",
        "RandomState imported by name", "default_rng imported by name", "mtrand.RandomState"])
def test_every_random_class_from_fresh_entropy_draws_anew_at_each_call(make):
    """Not only np.random.default_rng(): a bit generator, RandomState or
    SeedSequence made with no seed inside the function, however its name was
    imported (their numbers were baked into the trace): NumPy's source of
    fresh entropy is what braze watches."""
    f = braze.compile(lambda x: x + make().random(x.shape), target="cpu")
    assert not np.array_equal(f(np.zeros(4)), f(np.zeros(4)))


def test_seeded_random_classes_still_compile_and_isinstance_holds():
    def fn(x, rng):
        assert isinstance(rng, np.random.RandomState) and not isinstance(x, np.random.Generator)
        assert type(rng) is np.random.RandomState and type(np.random.RandomState(7)) is _ImportedRandomState
        own = np.random.Generator(np.random.PCG64(np.random.SeedSequence(5)))
        return x + own.random(x.shape) + np.random.RandomState(2).rand(*x.shape)

    want = np.random.Generator(np.random.PCG64(np.random.SeedSequence(5))).random(3) + np.random.RandomState(2).rand(3)
    f = braze.compile(fn, target="cpu", static_argnames=("rng",))
    rng = np.random.RandomState(0)
    for _ in range(2):
        np.testing.assert_array_equal(f(np.zeros(3), rng=rng), want)
    assert f.cache_info().hits >= 1
    from numpy.random import mtrand

    assert np.random.RandomState is mtrand.RandomState  # (the classes themselves again, outside a trace)


def test_attributes_the_function_does_not_name_may_change_freely():
    class Model:
        def __init__(self):
            self.w = np.ones(2)
            self.steps = 0

        def predict(self, x):
            return x * self.w

    m = Model()
    f = braze.compile(m.predict, target="cpu")
    for _ in range(4):
        np.testing.assert_array_equal(f(np.ones(2)), m.w)
        m.steps += 1  # (a counter the caller keeps: no new trace)
        m.log = "x"
    assert f.cache_info().misses == 1
    m.w = np.full(2, 3.0)  # (what it reads: traced again)
    np.testing.assert_array_equal(f(np.ones(2)), [3.0, 3.0])


# ---------------------------------------------------------------- repeated indices


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op", ["subtract", "multiply", "divide", "minimum", "maximum", "add", "negative"])
def test_ufunc_at_updates_the_copy_not_the_callers_array(op, target):
    def update(x):
        z = x.copy()
        if op == "negative":
            np.negative.at(z, np.array([1, 1]))
        else:
            getattr(np, op).at(z, np.array([0, 0, 2]), 2.0)
        return z

    x = np.full(3, 4.0)
    f = braze.compile(update, target=target)
    first, second = f(x), f(x)
    np.testing.assert_array_equal(x, np.full(3, 4.0))
    np.testing.assert_array_equal(first, update(np.full(3, 4.0)))
    np.testing.assert_array_equal(second, first)


def _last_write_wins(x, y):
    z = x.copy()
    z[np.array([1, 1, 3])] = y
    return (z * np.array([1.0, 2.0, 3.0, 4.0])).sum()


def _add_repeated(x, y):
    z = x.copy()
    z[np.array([0, 0])] += y
    return (z * np.array([1.0, 2.0])).sum()


def _scale_rows_repeated(x, y):
    z = x.copy()
    z[np.array([2, 0, 2])] *= y
    return (z ** 2).sum()


@pytest.mark.parametrize("fn, shapes", [(_last_write_wins, [(4,), (3,)]), (_add_repeated, [(2,), (2,)]),
                                        (_scale_rows_repeated, [(3, 2), (3, 2)])])
def test_gradients_through_writes_at_repeated_indices_are_numpys(fn, shapes):
    rng = np.random.default_rng(2)
    x, y = (rng.standard_normal(s) for s in shapes)
    want = (central_differences(lambda a: fn(a, y), x), central_differences(lambda b: fn(x, b), y))
    g = braze.grad(fn, argnums=(0, 1))
    for got in (g(x, y), braze.compile(g, target="cpu")(x, y)):
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("target", TARGETS)
def test_inner_of_vectors_is_a_scalar_and_a_norms_order_may_be_an_argument(target):
    v = np.arange(1.0, 4.0)
    got = braze.compile(lambda a: np.inner(a, a), target=target)(v)
    assert type(got) is np.float64 and got == 14.0

    def norm(a, p=np.inf):
        return np.linalg.norm(a, ord=p)

    f = braze.compile(norm, target=target)
    for p in (np.inf, -np.inf, 1.0, 0.5):
        assert f(np.array([3.0, -4.0]), p) == norm(np.array([3.0, -4.0]), p)
    assert f(np.array([3.0, -4.0])) == 4.0


# ---------------------------------------------------------------- what the trace read of objects and small arrays


class StepConfig:
    lr = 0.5
    steps = 1


def sgd_steps(w, g, cfg):
    for _ in range(cfg.steps):
        w = w - cfg.lr * g
    return w


@pytest.mark.parametrize("target", TARGETS)
def test_attributes_of_an_object_argument_are_read_at_each_call(target):
    f = braze.compile(sgd_steps, target=target)
    cfg = StepConfig()
    w, g = np.ones(3), np.ones(3)
    np.testing.assert_array_equal(f(w, g, cfg), 0.5)
    cfg.lr = 0.1
    np.testing.assert_allclose(f(w, g, cfg), 0.9)
    cfg.steps = 3
    np.testing.assert_allclose(f(w, g, cfg), sgd_steps(w, g, cfg))


class Scaled:
    def __init__(self):
        self.scale, self.W = 1.0, np.ones((2, 2))

    @braze.compile
    def forward(self, x):
        return (x @ self.W) * self.scale


def test_a_compiled_method_reads_its_objects_attributes():
    m, x = Scaled(), np.ones((1, 2))
    np.testing.assert_array_equal(m.forward(x), [[2.0, 2.0]])
    m.scale = 3.0
    np.testing.assert_array_equal(m.forward(x), [[6.0, 6.0]])
    m.W = np.full((2, 2), 5.0)
    np.testing.assert_array_equal(m.forward(x), [[30.0, 30.0]])


FLAGS = np.array([0.5, 4.0])  # (bytes compared at each call)
BIG_FLAGS = np.full(40_000, 0.5)  # 320 KB (more than the bytes compared: its bits compared as integers)


def branch_on_a_global_element(x):
    return x + 1 if FLAGS[0] > 0 else x[:int(FLAGS[1])] - 1


def branch_on_a_big_global(x):
    return x + 1 if BIG_FLAGS.sum() > 0 else x[:int(BIG_FLAGS[1])] - 1


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn, values", [(branch_on_a_global_element, FLAGS), (branch_on_a_big_global, BIG_FLAGS)],
                         ids=["small", "larger"])
def test_a_global_arrays_values_read_as_python_values_at_each_call(fn, values, target):
    """``if P[0] > 0:`` or ``G.sum() > 0`` reads a global's values as Python
    values, which no node of the program shows: its contents are compared at
    each call (up to 4 MiB), so a change traces again."""
    f = braze.compile(fn, target=target)
    x = np.arange(6.0)
    before = values.copy()
    try:
        np.testing.assert_array_equal(f(x), x + 1)
        values[:] = -1.0
        values[1] = 3.0
        np.testing.assert_array_equal(f(x), x[:3] - 1)
        values[1] = -0.0  # (another value by its bits only)
        np.testing.assert_array_equal(f(x), x[:0] - 1)
    finally:
        values[:] = before


@pytest.mark.parametrize("target", TARGETS)
def test_a_dtype_is_returned_as_numpys_and_promote_types_of_arrays_refused(target):
    f = braze.compile(lambda x: (x * 2, x.dtype, np.cumsum(x).dtype, (x * np.float32(0.5)).dtype), target=target)
    x = np.arange(3, dtype=np.int16)
    got, want = f(x), (x * 2, x.dtype, np.cumsum(x).dtype, (x * np.float32(0.5)).dtype)
    np.testing.assert_array_equal(got[0], want[0])
    assert got[1:] == want[1:]
    with pytest.raises(TypeError):
        np.promote_types(np.ones(2), np.ones(2))
    with pytest.raises(TypeError):
        braze.compile(lambda x: np.promote_types(x, x), target=target)(np.ones(2))


def draws(x, rng):
    return x + rng.standard_normal(x.shape)


def test_a_new_generator_at_each_call_runs_as_numpy_from_the_second(caplog):
    """Drawing from a generator argument changes its state at any call: with a
    new generator each call (a new cache key each time), the function runs as
    NumPy for good from the second call, not traced again at every call."""
    f = braze.compile(draws, target="cpu")
    x = np.zeros(3)
    with caplog.at_level("WARNING", logger="braze"):
        for seed in range(5):
            np.testing.assert_array_equal(f(x, np.random.default_rng(seed)), draws(x, np.random.default_rng(seed)))
    traced = [r for r in caplog.records if "draws from the random generator" in r.getMessage()]
    assert len(traced) == 2


def test_rebound_default_values_are_the_next_calls():
    """``fn.__defaults__ = (5,)`` (or a keyword-only default changed) between
    calls: the next call binds the new default, as Python does (the signature
    and the fast path kept the first call's)."""
    def scale(x, k=2):
        return x * k

    def shift(x, *, by=1.0):
        return x + by

    x = np.ones(3)
    f, g = braze.compile(scale, target="cpu"), braze.compile(shift, target="cpu")
    for _ in range(2):
        np.testing.assert_array_equal(f(x), x * 2)
        np.testing.assert_array_equal(g(x), x + 1.0)
    scale.__defaults__ = (5,)
    shift.__kwdefaults__["by"] = -3.0
    np.testing.assert_array_equal(f(x), x * 5)
    np.testing.assert_array_equal(g(x), x - 3.0)
    shift.__kwdefaults__ = {"by": 7.0}
    np.testing.assert_array_equal(g(x), x + 7.0)


class _Scaled:
    def __init__(self):
        self.w, self.scale = np.ones(3), 2.0

    @property
    def weight(self):
        return self.w * self.scale

    def helper(self):
        return self.scale

    def __call__(self, x):
        return x + self.weight * self.helper()


def test_properties_and_methods_an_object_s_code_reads_are_watched():
    """``self.weight`` (a property) reads ``self.scale``; ``self.helper()`` is the
    class's method: changing the attribute, or the class's method, is seen by
    the next call, through ``self`` and through an argument."""
    layer = _Scaled()
    f = braze.compile(layer.__call__, target="cpu")
    g = braze.compile(lambda x, m: x + m.weight, target="cpu")
    x = np.zeros(3)
    original = _Scaled.helper
    try:
        for _ in range(2):
            np.testing.assert_array_equal(f(x), layer(x))
            np.testing.assert_array_equal(g(x, layer), x + layer.weight)
        layer.scale = 5.0
        np.testing.assert_array_equal(f(x), layer(x))
        np.testing.assert_array_equal(g(x, layer), x + layer.weight)
        _Scaled.helper = lambda self: -1.0
        np.testing.assert_array_equal(f(x), layer(x))
    finally:
        _Scaled.helper = original


def test_a_traced_float_scalar_has_python_floats_methods():
    """``a.is_integer()`` on a float argument or a float reduction (np.float64 is
    a float): read into Python as float() reads it; arrays have none."""
    f = braze.compile(lambda x, a: x * 2 if a.is_integer() else x, target="cpu")
    x = np.ones(2)
    for a in (2.0, 2.5, np.float64(3.0), 2.0):
        np.testing.assert_array_equal(f(x, a), x * 2 if a.is_integer() else x)
    g = braze.compile(lambda x: (x.sum().is_integer(), x.max().as_integer_ratio(), x.min().hex()), target="cpu")
    for x in (np.ones(3), np.array([0.5, 1.25])):
        assert g(x) == (x.sum().is_integer(), x.max().as_integer_ratio(), x.min().hex())
    with pytest.raises(AttributeError):
        braze.compile(lambda x: x.is_integer(), target="cpu")(np.ones(3))


def _scaled(x, dt):
    c = 1.0 / dt
    return x * c


@pytest.mark.parametrize("fn,good,bad,error", [
    (lambda a, b: a / b, (1.0, 4.0), (1.0, 0.0), ZeroDivisionError),
    (lambda a, b: a // b + a % b, (7.0, 2.0), (7.0, 0.0), ZeroDivisionError),
    (lambda a, b: divmod(a, b)[1], (7.5, 2.0), (7.5, -0.0), ZeroDivisionError),
    (lambda a, b: 3.0 / b + a, (1.0, 2.0), (1.0, 0.0), ZeroDivisionError),
    (lambda a, b: a ** b, (2.0, 0.5), (0.0, -1.0), ZeroDivisionError),
    (lambda a, b: a ** b, (2.0, 3.0), (10.0, 400.0), OverflowError),
    (lambda a, b: 2.0 ** b + a, (1.0, 3.0), (1.0, 2000.0), OverflowError),
], ids=["divide", "floor and mod", "divmod", "reflected", "zero to a negative power", "overflow", "reflected power"])
def test_python_floats_meeting_raise_as_python_does(fn, good, bad, error):
    """Two Python numbers (a float argument is traced as a weak float64) follow
    Python's arithmetic: a division by zero or an overflowing power raises,
    at the first call or, guarded, at a later one; NumPy's float64 gave inf."""
    f = braze.compile(fn, target="cpu")
    with pytest.raises(error):
        f(*bad)
    assert f(*good) == fn(*good)
    with pytest.raises(error):
        f(*bad)
    assert f(*good) == fn(*good)


def test_a_python_float_step_size_of_zero_raises_and_numpy_values_keep_numpys_rules():
    f = braze.compile(_scaled, target="cpu")
    x = np.ones(3)
    np.testing.assert_array_equal(f(x, 0.5), _scaled(x, 0.5))
    with pytest.raises(ZeroDivisionError):
        f(x, 0.0)
    with np.errstate(divide="ignore"):  # NumPy scalars and arrays: NumPy's inf, no error
        for dt in (np.float64(0.0), np.array(0.0), np.zeros(3)):
            np.testing.assert_array_equal(f(x, dt), _scaled(x, dt))
        g = braze.compile(lambda x, b: x / b, target="cpu")
        np.testing.assert_array_equal(g(x, 0.0), x / 0.0)


def test_a_negative_python_float_to_a_fractional_power_is_complex_as_in_python():
    f = braze.compile(lambda a, b: a ** b, target="cpu")
    assert f(4.0, 0.5) == 2.0
    assert f(-8.0, 0.5) == (-8.0) ** 0.5  # (complex: the call runs as Python)
    assert f(-8.0, 2.0) == 64.0


@pytest.mark.parametrize("fn, args", [
    (lambda x, a: x * a, (2 ** 63,)), (lambda x, a, b: x * (a + b), (2 ** 62, 2 ** 62)),
    (lambda x, a: x * (-a), (-2 ** 63,)), (lambda x, a: x * 10 ** a, (25,)),
    (lambda x, a, b: x * a ** b, (2, 1000)), (lambda x, a: x * int(a), (1e307,)),
    (lambda x, a: x * a, (2 ** 64,)),
], ids=["2**63", "sum past int64", "negated int64 min", "10**25", "2**1000", "int(1e307)", "2**64"])
def test_python_ints_beyond_int64_are_numpys_values(fn, args):
    """A Python int outside int64 wrapped when traced (x * 2**63 was negative)
    or failed in codegen; such a call runs as NumPy, whose values it gets."""
    x = np.arange(1.0, 4.0)
    np.testing.assert_array_equal(braze.compile(fn, target="cpu")(x, *args), fn(x, *args))


def test_round_of_a_python_float_is_pythons():
    """round(a, 2) of a Python float is Python's correctly rounded decimal
    (2.675 -> 2.67; np.round's scaling gave 2.68, and inf for 1e307)."""
    def scaled(x, a):
        return x * round(a, 2)

    f, x = braze.compile(scaled, target="cpu"), np.arange(1.0, 4.0)
    for a in (2.675, 1e307, 0.285, -1.005, 2.675):
        np.testing.assert_array_equal(f(x, a), scaled(x, a))
    np.testing.assert_array_equal(f(x, np.float64(2.675)), scaled(x, np.float64(2.675)))  # (NumPy's round)


@pytest.mark.parametrize("a, b", [(-7, float("inf")), (-7, float("-inf")), (-1, float("inf")), (-1.0, float("nan")),
                                  (0.0, float("-inf")), (-0.0, float("-inf"))])
def test_a_negative_python_number_to_an_infinite_or_nan_power(a, b):
    def power(x, a, b):
        return x * (a ** b)

    x = np.arange(1.0, 4.0)
    np.testing.assert_array_equal(braze.compile(power, target="cpu")(x, a, b), power(x, a, b))


def test_values_python_refuses_raise_what_numpy_raises():
    """``int(nan)`` and an integer array to a negative power are ValueErrors in
    NumPy; the function's own ``except ValueError`` must catch braze's."""
    def safe_stop(x, a):
        try:
            return x[: int(a)]
        except ValueError:
            return x[:1]

    def safe_power(x, s):
        try:
            return x ** s
        except ValueError:
            return x * 0

    x = np.arange(3.0)
    np.testing.assert_array_equal(braze.compile(safe_stop, target="cpu")(x, float("nan")), x[:1])
    xi = np.arange(1, 4)
    np.testing.assert_array_equal(braze.compile(safe_power, target="cpu")(xi, -1), xi * 0)


def test_str_and_hash_of_a_python_number_are_its_values():
    """str(s) of a Python float argument was 'Tracer<f64~[]>' (len 14, not 3),
    and a dict keyed by numbers could not be read with it (unhashable)."""
    def tagged(x, s):
        return x * len(str(s))

    def looked_up(x, s):
        return x * {0.5: 1.0, 1.5: 2.0}.get(s, 3.0)

    def by_total(x):
        return x * {6.0: 2.0}.get(x.sum(), 5.0)  # (a NumPy scalar hashes as its value too)

    x = np.arange(1.0, 4.0)
    for fn in (tagged, looked_up):
        f = braze.compile(fn, target="cpu")
        for s in (0.5, 1.5, 0.125, 0.5):
            np.testing.assert_array_equal(f(x, s), fn(x, s))
    f = braze.compile(by_total, target="cpu")
    for y in (x, x + 1, x):
        np.testing.assert_array_equal(f(y), by_total(y))
    with pytest.raises(TypeError, match="unhashable"):
        braze.compile(lambda x: {x: 1}, target="cpu")(x)


def test_errors_numpy_raises_for_bad_arguments_are_its_classes():
    """An update of a read-only argument is NumPy's ValueError; int8 ** -300 its
    OverflowError (the Python int out of int8), before the negative power;
    np.split(x, 0) its ZeroDivisionError."""
    def bump(x):
        x += 1
        return x

    f = braze.compile(bump, target="cpu")
    f(np.ones(2))
    frozen = np.ones(2)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        f(frozen)
    with pytest.raises(OverflowError):
        braze.compile(lambda x: x ** -300, target="cpu")(np.arange(5, dtype=np.int8))
    with pytest.raises(ZeroDivisionError):  # (NumPy's, from its n % sections)
        braze.compile(lambda x: np.split(x, 0)[0], target="cpu")(np.arange(6.0))
