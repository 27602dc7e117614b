"""Python's ``min``/``max`` of traced scalars, and NumPy functions given a list
of them (``np.min([a, b, c])``), trace without specializing the program on
which element wins: a dynamic program's step (DTW, edit distance) is traced
once and re-rolled, and new data runs the same program. Results are Python's
and NumPy's, bit for bit: NaN where they give it, the first of equal items,
the sign of a zero."""
import numpy as np
import pytest

import braze
from programs.classic import dtw_distance, edit_distance, smith_waterman


def three_way(x):
    out = np.empty(x.shape[0] - 2, x.dtype)
    for i in range(out.shape[0]):
        out[i] = min(x[i], x[i + 1], x[i + 2]) - max(x[i + 2], x[i], x[i + 1]) * 0.5
    return out


def of_a_list(x):
    out = np.empty((x.shape[0] - 2, 2), x.dtype)
    for i in range(out.shape[0]):
        out[i, 0] = np.min([x[i], x[i + 1], x[i + 2]])
        out[i, 1] = np.max((x[i + 2], x[i]))
    return out


def other_functions_of_a_list(x):  # no graph break: the list is a braze array
    return np.sum([x[0], x[1] * 2]), np.mean((x[2], x[3])), np.argmax([x[0], x[4], x[1]]), np.sort([x[3], x[0]])


def mixed(x):  # a traced scalar and a Python number: Python's min picks one, and its type with it
    return min(x[0], 0), max(x[1], 1.5)


# ties, signed zeros, NaN first, last and alone, infinities
SPECIAL = np.array([0.0, -0.0, 0.0, np.nan, 1.0, 1.0, np.inf, -np.inf, np.nan, np.nan, -0.0, 2.0, -1.0])


def _data(dtype, k):
    rng = np.random.default_rng(k)
    if np.dtype(dtype).kind == "f":
        x = rng.standard_normal(SPECIAL.size).astype(dtype)
        return np.roll(SPECIAL.astype(dtype), k) if k % 2 else x
    return rng.integers(-3, 3, SPECIAL.size).astype(dtype)


def _same_bits(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    if got.dtype.kind == "f":
        assert (np.signbit(got) == np.signbit(want)).all()


@pytest.mark.parametrize("target", ["generic", "cpu"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
@pytest.mark.parametrize("fn", [three_way, of_a_list, other_functions_of_a_list])
def test_new_data_runs_the_one_traced_program(fn, dtype, target):
    f = braze.compile(fn, target=target)
    for k in range(5):
        x = _data(dtype, k)
        with np.errstate(invalid="ignore"):
            want = fn(x.copy())
        for g, w in zip(*(((f(x), want) if isinstance(want, tuple) else ((f(x),), (want,))))):
            _same_bits(g, w)
    assert f.cache_info().reasons == ["first call"], f.cache_info().reasons


def test_the_stacked_scalars_are_never_built():
    x = _data(np.float64, 0)
    plan = braze.compile(of_a_list, target="cpu").lower(x).plan
    assert "concatenate" not in plan and "stack" not in plan, plan


def test_a_python_number_among_them_keeps_pythons_choice():
    f = braze.compile(mixed, target="cpu")
    for x in (np.array([-2.0, 3.0]), np.array([2.0, 0.5])):
        got, want = f(x), mixed(x)
        for g, w in zip(got, want):
            assert type(g) is type(w) and g == w


@pytest.mark.parametrize("fn, make", [
    (dtw_distance, lambda rng: (rng.standard_normal(9), rng.standard_normal(11))),
    (edit_distance, lambda rng: (rng.integers(0, 3, 9), rng.integers(0, 3, 11))),
    (smith_waterman, lambda rng: (rng.integers(0, 3, 9), rng.integers(0, 3, 11))),
])
def test_dynamic_programs_roll_and_trace_once(fn, make):
    f = braze.compile(fn, target="cpu")
    for k in range(4):
        args = make(np.random.default_rng(k))
        _same_bits(f(*args), fn(*args))
    assert f.cache_info().reasons == ["first call"], f.cache_info().reasons
    assert f.lower(*args).counts["rolled loops"] >= 1


def test_numbers_in_a_list_are_literals():
    """``np.max([0.0, a, b])``: the 0.0 is a literal of the graph, not an array
    captured anew at each call of ``np.array`` (which made every iteration of a
    loop read an array of its own, so none were alike)."""
    def fn(x):
        return np.max([0.0, x[0], x[1]]), np.array([1, x[2]])

    x = np.array([-1.0, -2.0, 3.0])
    f = braze.compile(fn, target="cpu")
    for g, w in zip(f(x), fn(x)):
        _same_bits(g, w)
    assert "capture" not in {n.op for n in f.lower(x).ir.nodes}
