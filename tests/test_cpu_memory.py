"""Memory on the cpu target: pooled intermediates, caller outputs, donation,
and slice updates written in place."""
import numpy as np
import pytest

import braze
from braze.targets import cpu_cache

from _compare import assert_same
from programs.classic import sieve as _sieve


def two_kernels(x):
    y = np.exp(x).sum(axis=0)  # a transposed reduction: its own kernel...
    return np.tanh(x) * 2.0 + y  # ...feeding an elementwise one through an intermediate


def test_intermediates_come_from_a_pool_reused_across_calls():
    x = np.random.default_rng(0).standard_normal((64, 32))
    f = braze.compile(lambda x: np.tanh(np.exp(x).T.sum(axis=-1))[:, None] * x.T, target="cpu")
    first = f(x)
    second = f(x * 2)
    assert_same(first, np.tanh(np.exp(x).T.sum(axis=-1))[:, None] * x.T)
    assert_same(second, np.tanh(np.exp(x * 2).T.sum(axis=-1))[:, None] * (x * 2).T)
    assert not np.shares_memory(first, second)  # outputs are never pooled


def test_into_writes_results_into_caller_arrays():
    x = np.random.default_rng(1).standard_normal((50, 40)).astype(np.float32)
    f = braze.compile(lambda x: (np.exp(x) * 2.0, x.sum(axis=-1)), target="cpu")
    a, b = np.empty((50, 40), np.float32), np.empty(50, np.float32)
    out = f.into((a, b))(x)
    assert out[0] is a and out[1] is b
    assert_same(a, np.exp(x) * 2.0)
    assert_same(b, x.sum(axis=-1))
    strided = np.empty((50, 80), np.float32)[:, ::2]  # does not fit: filled by a copy
    f.into((strided, b))(x)
    assert_same(strided, np.exp(x) * 2.0)


def test_into_with_an_output_overlapping_the_input_is_still_right():
    x = np.random.default_rng(2).standard_normal((30, 30))
    expected = x.T + x
    f = braze.compile(lambda x: x.T + x, target="cpu")
    f.into(x)(x)  # NumPy would need a temporary here too
    assert_same(x, expected)


def test_into_rejects_the_wrong_structure():
    f = braze.compile(lambda x: (x + 1, x - 1), target="cpu")
    with pytest.raises(braze.BrazeError, match="structure"):
        f.into(np.empty(3))(np.ones(3))


def test_donated_input_becomes_the_output():
    x = np.random.default_rng(3).standard_normal((256, 128))
    expected = np.tanh(x) * 3.0
    f = braze.compile(lambda x: np.tanh(x) * 3.0, target="cpu", donate_argnums=0)
    y = f(x)
    assert np.shares_memory(x, y)
    assert_same(y, expected)


def test_donation_is_skipped_when_unsafe():
    x = np.random.default_rng(4).standard_normal((64, 64))
    f = braze.compile(lambda x: x.T * 2.0, target="cpu", donate_argnums=0)  # reads other elements
    expected = x.T * 2.0
    assert_same(f(x), expected)


def test_slice_updates_of_updated_inputs_write_in_place():
    def heat(u, steps):
        for _ in range(steps):
            u[1:-1] = u[1:-1] + 0.25 * (u[:-2] - 2 * u[1:-1] + u[2:])
        return u.sum()

    rng = np.random.default_rng(5)
    for n, steps in ((1000, 5), (1000, 20), (40_000, 20)):
        u1 = rng.random(n)
        u2 = u1.copy()
        f = braze.compile(heat, target="cpu", static_argnames="steps")
        total = f(u1, steps=steps)
        assert_same(total, heat(u2, steps))
        assert_same(u1, u2)
        plan = f.lower(u1, steps=steps).plan
        if steps < 8 or n > 20_000:  # (a short loop, a long step: unrolled)
            assert plan.count("extern update_slice") == steps
        else:  # re-rolled: one in-order loop updating u in place (braze.reroll)
            assert plan.count("extern rolled") == 1 and "update_slice" not in plan


def test_same_array_passed_twice_disables_in_place_tricks():
    def f(a, b):
        a[1:] = b[:-1] * 2.0
        return a

    x = np.arange(6.0)
    y = np.arange(6.0)
    expected = f(y, y)
    braze.compile(f, target="cpu", donate_argnums=1)(x, x)
    assert_same(x, expected)


def test_large_outputs_are_recycled_only_after_the_caller_drops_them():

    x = np.random.default_rng(7).standard_normal((512, 1024)).astype(np.float32)  # 2 MiB output
    f = braze.compile(lambda x: np.exp(x) * 2.0, target="cpu")
    expected = np.exp(x) * 2.0
    first = f(x)
    view = first[5:]                      # a view keeps the buffer alive
    address = first.__array_interface__["data"][0]
    del first
    second = f(x + 1.0)
    assert not np.shares_memory(second, view)
    assert_same(view, expected[5:])       # untouched by the second call
    del view, second
    third = f(x)
    assert_same(third, expected)
    addresses = {address}
    del third
    for _ in range(3):                     # steady state: the same buffers come back
        y = f(x)
        addresses.add(y.__array_interface__["data"][0])
        assert_same(y, expected)
        del y
    assert len(addresses) <= 3


def test_the_output_recycler_respects_its_limit_and_exports():
    from braze.targets.cpu_memory import Recycler

    r = Recycler(3 << 20)
    a = r.empty((1 << 18,), np.float32)   # 1 MiB
    exported = memoryview(a)
    del a
    b = r.empty((1 << 18,), np.float32)
    assert not np.shares_memory(b, np.frombuffer(exported, np.float32))  # an export keeps it
    small = r.empty((10,), np.float32)    # below MIN_BYTES: plain NumPy, never tracked
    assert small.base is None
    del b, exported
    held = [r.empty((1 << 18,), np.float64) for _ in range(4)]  # 2 MiB each
    del held
    r.empty((1 << 18,), np.float32)       # a new allocation trims to the limit
    assert r.held_bytes() <= 3 << 20
    off = Recycler(0)
    assert off.empty((1 << 20,), np.float32).base is None


@pytest.mark.parametrize("target", ["cpu", "generic"])
def test_calls_leave_no_reference_cycles(target):
    """A cycle would keep a call's inputs and outputs alive until the cyclic
    collector ran, so large outputs could not be recycled (pytree walks were
    recursive closures once: every call leaked its leaves into a cycle)."""
    import gc

    def loss(p, x, labels):
        return braze.nn.softmax_cross_entropy(np.tanh(x @ p["w"]), labels)

    rng = np.random.default_rng(3)
    p = {"w": rng.standard_normal((8, 5)).astype(np.float32)}
    x, labels = rng.standard_normal((6, 8)).astype(np.float32), rng.integers(0, 5, 6)
    f = braze.compile(loss, target=target)
    g = braze.compile(braze.value_and_grad(loss), target=target)
    for _ in range(2):  # traced and warm
        f(p, x, labels), g(p, x, labels), f.vjp(p, x, labels)[1](1.0)
    # numba makes cyclic garbage while it compiles: a parallel variant compiling
    # in the background (this test's, or an earlier test's in the same process)
    # would be counted as this call's. A cycle a call makes shows in every
    # window; something else in the process (once) in one of three at most.
    cpu_cache.wait_background()
    found = []
    for _ in range(3):
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            f(p, x, labels)
            g(p, x, labels)
            out, back = f.vjp(p, x, labels)
            back(1.0)
            del out, back
            gc.collect()
            found.append(sorted({type(o).__name__ for o in gc.garbage}))
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
        if not found[-1]:
            break
    assert not found[-1], f"each call leaves cycles of: {found}"


def test_scalars_read_as_elements_of_arrays_updated_in_place():
    """A kernel's scalar argument that is one element of an array is read as
    array[index] when the kernel is called (no view steps); an in-place update
    of that array must still wait for it, and the loop's view steps are gone."""

    def fn(x):
        x = x.copy()
        s = x[0, 1] * 2.0
        x[0, 1] = 5.0
        t = 0.0
        for i in range(x.shape[0]):
            t += np.tanh(x[i, i])
        return s + x[1, 0] + t, x

    f = braze.compile(fn, target="cpu")
    x = np.arange(16.0).reshape(4, 4) / 7
    for got, want in zip(f(x), fn(x)):
        np.testing.assert_array_equal(got, want)
    lowered = f.lower(x)
    assert "view slice" not in lowered.plan, lowered.plan  # (one view left: the 5.0 written, as [1, 1])
    assert lowered.counts["steps"] == 3, lowered.plan


def _direct(f, *args):
    (program,) = f._programs.entries.values()
    driver = program.executable.driver
    return "r = s[" in driver or "r = m[" in driver


def test_a_kernel_writes_straight_into_the_region_an_update_stores_it_in():
    """B[1:-1] = kernel(A): the kernel writes into B[1:-1] itself (a contiguous
    region, no temporary and no copy); where the kernel reads B, or the region
    is not contiguous, or the update casts, it keeps the temporary."""

    def jacobi(A, B, steps):
        for _ in range(steps):
            B[1:-1] = 0.33333 * (A[:-2] + A[1:-1] + A[2:])
            A[1:-1] = 0.33333 * (B[:-2] + B[1:-1] + B[2:])

    def smooth(u):  # reads the array it updates: no direct write
        u = u.copy()
        u[1:-1] = 0.5 * (u[:-2] + u[2:])
        return u

    def interior(u, v):  # a 2-d interior is not contiguous: written through the temporary (decided per call)
        w = u + 1.0
        w[1:-1, 1:-1] = np.sqrt(v + 1.0) * 0.5
        return w * 2.0

    def cast(a, b):  # float64 values stored into float32
        a = a.copy()
        a[2:] = b[2:] * 1.1
        return a

    rng = np.random.default_rng(4)
    A, B = rng.random(50), rng.random(50)
    f = braze.compile(jacobi, target="cpu", static_argnames=("steps",))
    A1, B1, A2, B2 = A.copy(), B.copy(), A.copy(), B.copy()
    f(A1, B1, steps=3)
    jacobi(A2, B2, 3)
    np.testing.assert_array_equal(A1, A2)
    np.testing.assert_array_equal(B1, B2)
    assert _direct(f)
    f(A1, A1, steps=2)  # overlapping arguments: no in-place choices, same answer
    jacobi(A2, A2, 2)
    np.testing.assert_array_equal(A1, A2)

    for fn, args, direct in [(smooth, (rng.random(30),), False), (interior, (rng.random((6, 7)), rng.random((4, 5))), True),
                             (cast, (rng.random(9).astype(np.float32), rng.random(9)), False)]:
        g = braze.compile(fn, target="cpu")
        np.testing.assert_array_equal(g(*args), fn(*args))
        assert _direct(g) == direct, fn.__name__


def test_a_column_view_is_one_index():
    """x[:, i] traces to a slice and a reshape; the call makes it as one NumPy
    index (a view, as NumPy's), including where the program then writes into
    the array it came from."""

    def fn(A):
        Q = A * 1.0
        out = np.zeros(A.shape[1])
        for j in range(A.shape[1]):
            col = Q[:, j]
            out[j] = col @ col
            Q[:, j] = col * 0.5  # the column updated in place after it was read
        return out, Q, A[1:2, :].reshape(-1) + 1.0

    f = braze.compile(fn, target="cpu")
    A = np.arange(12.0).reshape(4, 3)
    for got, want in zip(f(A), fn(A)):
        np.testing.assert_array_equal(got, want)
    plan = f.lower(A).plan
    assert "view slice" not in plan, plan


def _sieve_of(candidates):
    """The corpus's sieve over the candidates the caller gives: its branches
    read data (a sieve of a static n alone is computed while tracing)."""
    is_prime = candidates.copy()
    n = len(is_prime) - 1
    is_prime[:2] = False
    for i in range(2, int(n ** 0.5) + 1):
        if is_prime[i]:
            is_prime[i * i::i] = False
    return np.nonzero(is_prime)[0]


def test_updates_between_element_reads_write_in_place():
    """``if is_prime[i]: is_prime[i*i::i] = False``: each branch reads an element
    (a guard, checked after the run) of the array the next update changes.
    The element is a copy, read before the update, so every update after the
    first (which makes the copy of the argument) writes in place, and stores
    its constant without broadcasting it: a sieve of 10**6 copied its array at
    each of its 168 updates."""
    f = braze.compile(_sieve_of, target="cpu")
    for n in (2, 30, 2000):
        np.testing.assert_array_equal(f(np.ones(n + 1, bool)), _sieve(n))
    cpu_cache.wait_background()
    candidates = np.ones(2001, bool)
    np.testing.assert_array_equal(f(candidates), _sieve(2000))
    program = f._programs.entries[next(k for k in f._programs.entries if "2001" in repr(k))]
    driver = program.executable.driver
    updates = f.lower(candidates).plan.count("update_slice")
    assert updates == 15 and driver.count("update_slice, in place") == updates - 1, driver
    assert "broadcast_to" not in driver.split("update_slice", 1)[1], driver


@pytest.mark.parametrize("target", ["cpu", "generic"])
def test_elements_read_between_updates_are_the_values_then(target):
    """An element read before an update of its array, and one read after, are
    those values, whichever way each branch goes (a new branch traces again)."""
    def fn(a):
        a, keep = a.copy(), a > 0.5
        seen, total = [], 0.0
        for i in range(6):
            seen.append(a[i])  # (returned: the element as it was here)
            total = total + a[i] * 2  # (and read by a kernel)
            if keep[i]:  # (the branch's guard: this element of keep, read here)
                a[i::3] = -1.0
                keep[i + 1::2] = False
            seen.append(a[i])
        return a, keep, seen, total

    f = braze.compile(fn, target=target)
    for seed in range(6):
        a = np.random.default_rng(seed).random(12)
        for got, want in zip(f(a), fn(a)):
            np.testing.assert_array_equal(got, want)


def test_an_element_read_by_a_call_braze_does_not_trace_is_a_copy_before_an_update_in_place():
    """``x = a[2]`` read by SciPy (a graph break) and returned, then ``a`` updated
    in place: the element is the value before the update (a view of ``a``, as
    the step was, showed the 0.0 written later)."""
    import scipy.special

    def fn(m, v):
        a = m @ v
        x = a[2]
        g = scipy.special.gammaln(x)
        a[1:4] = 0.0
        return a, x, g

    f = braze.compile(fn, target="cpu")
    m, v = np.arange(36.0).reshape(6, 6) / 50, np.ones(6)
    for _ in range(2):
        for got, want in zip(f(m, v), fn(m, v)):
            np.testing.assert_allclose(got, want, rtol=1e-14)  # (m @ v summed in braze's order)
        cpu_cache.wait_background()
    (program,) = f._programs.entries.values()
    assert "update_slice, in place" in program.executable.driver
