"""Values computed from constants alone: a branch on one needs no guard (every
call computes the same), NumPy's function of them braze has no rule for is
computed once (no graph break), and stores of constants into an array of
constants (a table a loop builds over static sizes) are one captured array,
read-only, computed once; what the function returns is a new array each call."""
import numpy as np
import pytest

import braze
from programs.classic import sieve
from programs.field import lcg_uniform


def constant_branch(x):
    t = np.zeros(3)
    t[1] = 2.0
    if t[1] > 1:  # (decided while tracing, from constants)
        return x * 2
    return x


def host_call_branch(x):  # constants through a function braze runs as called: guarded all the same
    t = np.zeros(3)
    t[1] = 2.0
    if np.nonzero(t)[0][0] == 1:
        return x * 2
    return x


def data_branch(x):
    if x[0] > 1:
        return x * 2
    return x


def table_then_data(x):  # constants stored first, then a traced value, then a constant again
    out = np.zeros(6)
    out[0] = 1.5
    out[1:3] = -2.0
    out[3] = x[0]
    out[4] = 3.0
    return out


def intermediate_read(x):  # the array of constants read half way through its stores
    out = np.zeros(4, np.int32)
    out[0] = 7
    y = out[:2] * x
    out[1] = 9
    return y, out


def huge_table(x):  # past FOLD_BYTES: stays a store
    out = np.zeros(1_000_000)
    out[5] = 1.0
    return out + x[0]


def _ops(lowered) -> set:
    return {n.op for n in lowered.ir.nodes}


@pytest.mark.parametrize("target", ["generic", "cpu"])
def test_a_branch_on_constants_needs_no_guard(target):
    x = np.ones(3)
    guarded = "used as a Python bool"
    assert guarded not in braze.compile(constant_branch, target=target).lower(x).plan
    assert guarded in braze.compile(data_branch, target=target).lower(x).plan  # (the test can tell)
    assert guarded in braze.compile(host_call_branch, target=target).lower(x).plan
    f = braze.compile(constant_branch, target=target)
    np.testing.assert_array_equal(f(x), constant_branch(x))


@pytest.mark.parametrize("target", ["generic", "cpu"])
@pytest.mark.parametrize("fn, args, static", [(lcg_uniform, (12345,), {"n": 40}), (sieve, (), {"n": 120})])
def test_tables_built_from_constants_are_computed_once(fn, args, static, target):
    f = braze.compile(fn, target=target, static_argnames=tuple(static))
    assert not {"update_slice", "host_call"} & _ops(f.lower(*args, **static))  # (sieve's np.nonzero too)
    first, second = f(*args, **static), f(*args, **static)
    np.testing.assert_array_equal(first, fn(*args, **static))
    assert first.dtype == fn(*args, **static).dtype
    assert first.flags.writeable and not np.shares_memory(first, second)
    first[:] = 0  # (a caller's write reaches neither the next call's result nor the constant)
    np.testing.assert_array_equal(f(*args, **static), fn(*args, **static))


@pytest.mark.parametrize("target", ["generic", "cpu"])
@pytest.mark.parametrize("fn", [table_then_data, intermediate_read, huge_table])
def test_folding_stops_where_data_starts(fn, target):
    f = braze.compile(fn, target=target)
    for x in (np.array([4.0, 5.0]), np.array([-1.0, 0.5])):
        got, want = f(x), fn(x.copy())
        for g, w in zip(*((got, want) if isinstance(want, tuple) else ((got,), (want,)))):
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)
    assert ("update_slice" in _ops(f.lower(np.ones(2)))) == (fn is not intermediate_read)
