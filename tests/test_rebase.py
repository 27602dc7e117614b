"""In-place updates of an argument from its own neighbours, in a time loop
(``q[2:-1] = q[2:-1] - dt * (flux[1:] - flux[:-1])``), alternate between the
argument and one pool buffer on the cpu target (an odd number of them walks a
second pool buffer, so the last still ends in the argument): each kernel writes its region
straight into the memory the value before the last lived in, and only the
region's complement is copied (``cpu_memory._rebased_writes``). Every result
must be NumPy's, bit for bit, whatever the step count, layout or aliasing."""
import numpy as np
import pytest

import braze

from _compare import assert_same


def advect(q, vel, steps, dt=0.2, kappa=0.05):
    for _ in range(steps):
        dq = q[1:] - q[:-1]
        flux = vel[1:-1] * np.where(vel[1:-1] >= 0.0, q[1:-1] + 0.5 * dq[1:], q[2:] - 0.5 * dq[1:])
        lap = q[2:] - 2.0 * q[1:-1] + q[:-2]
        q[2:-1] = q[2:-1] - dt * (flux[1:] - flux[:-1]) + dt * kappa * lap[1:]
    return q


def smooth_2d(u, steps):
    for _ in range(steps):
        u[1:-1, 1:-1] = 0.25 * (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2])
    return u


@pytest.fixture(scope="module")
def compiled():
    return braze.compile(advect, target="cpu", static_argnames=("steps",))


def _args(shape=(60, 7), dtype=np.float64, seed=0):
    r = np.random.default_rng(seed)
    return r.standard_normal(shape).astype(dtype), r.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("steps", [1, 2, 3, 4, 5, 7, 8])
def test_results_and_the_argument_are_numpys_at_every_step_count(compiled, steps):
    q, vel = _args()
    want = advect(q.copy(), vel, steps)
    got_q = q.copy()
    out = compiled(got_q, vel, steps=steps)
    assert out is got_q  # NumPy returns the argument itself
    assert_same(got_q, want)
    # every update but a lone one is rebased (an odd chain walks two pool buffers), and the last
    # value is in the argument: no copy of the region is left
    assert compiled.lower(q, vel, steps=steps).counts["rebased updates"] == (steps if steps > 1 else 0)


@pytest.mark.parametrize("steps", [4, 5])
def test_repeated_calls_reuse_the_pool_buffers_without_mixing_values(compiled, steps):
    for seed in range(3):
        q, vel = _args(seed=seed)
        want = advect(q.copy(), vel, steps)
        got = q.copy()
        compiled(got, vel, steps=steps)
        assert_same(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_other_dtypes(dtype):
    def step(q, steps):
        for _ in range(steps):
            q[1:-1] = q[:-2] + q[2:] - q[1:-1]
        return q

    q = (np.arange(90) % 7).astype(dtype).reshape(30, 3)
    f = braze.compile(step, target="cpu", static_argnames=("steps",))
    got = q.copy()
    f(got, steps=6)
    assert_same(got, step(q.copy(), 6))
    assert f.lower(q, steps=6).counts["rebased updates"] == 6


def test_a_two_dimensional_interior_copies_rows_and_columns_of_the_rim():
    u = np.random.default_rng(1).standard_normal((40, 30))
    f = braze.compile(smooth_2d, target="cpu", static_argnames=("steps",))
    for steps in (2, 3):
        got = u.copy()
        f(got, steps=steps)
        assert_same(got, smooth_2d(u.copy(), steps))
    assert f.lower(u, steps=2).counts["rebased updates"] == 2


def test_fortran_strided_and_transposed_arguments():
    """Views of a bigger array updated in place: the view gets NumPy's values
    and the rest of the array is untouched."""
    f = braze.compile(smooth_2d, target="cpu", static_argnames=("steps",))
    c = np.random.default_rng(2).standard_normal((50, 64))
    views = ((c, lambda a: a[::2, 1::2]), (c, lambda a: a.T), (c, lambda a: a[:, :33]), (c, lambda a: a[::-1]),
             (np.asfortranarray(c), lambda a: a), (np.asfortranarray(c), lambda a: a[1:, ::3]))
    for base, view in views:
        got, want = base.copy(order="K"), base.copy(order="K")
        f(view(got), steps=4)
        smooth_2d(view(want), 4)
        assert_same(got, want)


def test_a_view_of_the_argument_as_another_argument():
    """Aliased arguments turn the in-place choices off for the call: NumPy's results still."""
    def two(q, r, steps):
        for _ in range(steps):
            q[1:-1] = 0.5 * (q[:-2] + q[2:]) + r[1:-1]
        return q

    f = braze.compile(two, target="cpu", static_argnames=("steps",))
    for make in (lambda a: (a, a), lambda a: (a, a[::-1]), lambda a: (a[:, 1:], a[:, :-1])):
        a = np.random.default_rng(3).standard_normal((20, 6))
        b = a.copy()
        f(*make(a), steps=4)
        two(*make(b), 4)
        assert_same(a, b)


def test_a_value_read_after_the_update_keeps_the_old_memory():
    """``before`` is the argument's value before the loop, read at the end: the
    updates cannot go in place, so nothing is rebased, and NumPy's values come out."""
    def keep(q, steps):
        before = q.copy()
        for _ in range(steps):
            q[1:-1] = q[:-2] * 0.5 + q[2:] * 0.5
        return q - before

    q = np.random.default_rng(4).standard_normal(50)
    f = braze.compile(keep, target="cpu", static_argnames=("steps",))
    got = q.copy()
    assert_same(f(got, steps=4), keep(q.copy(), 4))
    assert_same(got, (lambda x: (keep(x, 4), x)[1])(q.copy()))


def test_a_big_complement_is_not_rebased():
    def half(q, steps):
        for _ in range(steps):
            q[:10] = q[1:11] + q[:10]
        return q

    q = np.random.default_rng(5).standard_normal(40)
    f = braze.compile(half, target="cpu", static_argnames=("steps",))
    got = q.copy()
    f(got, steps=4)
    assert_same(got, half(q.copy(), 4))
    assert f.lower(q, steps=4).counts["rebased updates"] == 0


def test_tiered_first_calls_then_compiled(monkeypatch):
    from braze.targets import cpu_cache

    monkeypatch.setenv("BRAZE_TIERED", "1")
    f = braze.compile(advect, target="cpu", static_argnames=("steps",))
    q, vel = _args(seed=7)
    for _ in range(3):
        got = q.copy()
        f(got, vel, steps=4)
        assert_same(got, advect(q.copy(), vel, 4))
        cpu_cache.wait_background()
    assert_same(q, _args(seed=7)[0])  # the background warm-up wrote into copies, not into q
