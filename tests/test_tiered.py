"""Tiered first calls on the cpu target (targets/cpu_tiered.py): the first
calls run the graph op by op with NumPy while the kernels are built in the
background, then the compiled program takes over. Both tiers must return
NumPy's results and update the caller's arrays exactly as NumPy does; the
background run must never touch the caller's arrays."""
import copy
import warnings

import numpy as np
import pytest

import braze
from braze.targets import cpu_cache, cpu_tiered
from programs import heat, ml, more, polybench, science
from test_programs import assert_same

EXAMPLES = {name: ex for mod in (polybench, heat, science, ml, more) for name, ex in mod.EXAMPLES.items()}


@pytest.fixture
def tiered(monkeypatch):
    monkeypatch.setenv("BRAZE_TIERED", "1")
    cpu_cache.wait_background()
    yield
    cpu_cache.wait_background()


def _executable(f):
    (program,) = f._programs.entries.values()
    return program.executable


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_both_tiers_match_numpy(tiered, name):
    fn, make, static, small, _ = EXAMPLES[name]
    args = make(small)
    f = braze.compile(fn, target="cpu", static_argnames=tuple(static))
    rtol = 1e-4 if any(getattr(a, "dtype", None) == np.float32 for a in args) else 1e-10
    theirs = copy.deepcopy(args)
    want = fn(*theirs, **static)

    ours = copy.deepcopy(args)
    got = f(*ours, **static)  # the NumPy tier
    assert isinstance(_executable(f), cpu_tiered.Tiered)
    assert_same(got, want, rtol)
    assert_same(ours, theirs, rtol)  # in-place updates reach the caller's arrays

    cpu_cache.wait_background()
    assert _executable(f)._fast is not None, "the compiled program did not take over"
    ours = copy.deepcopy(args)
    assert_same(f(*ours, **static), want, rtol)  # the compiled tier
    assert_same(ours, theirs, rtol)


def test_first_call_compiles_nothing(tiered, tmp_path, monkeypatch):
    """The first call returns before any kernel is built: the build starts after it."""
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path))
    started = []
    monkeypatch.setattr(cpu_cache, "run_later", lambda fn, *args: started.append((fn, args)))
    f = braze.compile(lambda x: np.sqrt(x) * 2.0 + 1.0, target="cpu")
    x = np.linspace(0, 3, 1001)
    np.testing.assert_array_equal(f(x), np.sqrt(x) * 2.0 + 1.0)
    assert len(started) == 1 and _executable(f)._built is None
    fn, args = started[0]
    fn(*args)  # the background work, run here
    assert _executable(f)._fast is not None
    np.testing.assert_array_equal(f(x), np.sqrt(x) * 2.0 + 1.0)
    assert f.lower(x).counts["kernels"] == 1


def test_background_run_leaves_arguments_alone(tiered, monkeypatch):
    """A function updating its argument in place: the background run (on that
    call's arguments) runs a variant that writes nothing the caller holds."""
    pending = []
    monkeypatch.setattr(cpu_cache, "run_later", lambda fn, *args: pending.append((fn, args)))

    def bump(x):
        x[1:] += 1.0
        x *= 2.0
        return x.sum()

    f = braze.compile(bump, target="cpu")
    x = np.arange(6.0)
    assert f(x) == bump(np.arange(6.0))
    after_first = x.copy()
    np.testing.assert_array_equal(after_first, [0.0, 4.0, 6.0, 8.0, 10.0, 12.0])
    fn, args = pending.pop()
    fn(*args)
    np.testing.assert_array_equal(x, after_first)  # the background run wrote nothing into x
    y = after_first.copy()
    assert f(x) == bump(y)
    np.testing.assert_array_equal(x, y)


def test_weak_scalars_keep_their_promotion_on_the_numpy_tier(tiered):
    """A value computed from a Python scalar argument stays weak on the op-by-op
    tier (a Python float, as in NumPy): float32 times it is float32."""

    def fn(x, s):
        return x * (s * 2.0 + 1.0)

    f = braze.compile(fn, target="cpu")
    x = np.ones(4, np.float32)
    got = f(x, 0.25)  # the NumPy tier
    assert isinstance(_executable(f), cpu_tiered.Tiered)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, fn(x, 0.25))


def test_a_failed_build_warns_and_keeps_numpy(tiered, monkeypatch):
    from braze.targets import cpu

    def broken(*args, **kwargs):
        raise RuntimeError("no kernels today")

    monkeypatch.setattr(cpu, "_lower_now", broken)
    pending = []
    monkeypatch.setattr(cpu_cache, "run_later", lambda fn, *args: pending.append((fn, args)))
    f = braze.compile(lambda x: np.exp(x) - 1.0, target="cpu")
    x = np.linspace(0, 1, 5)
    np.testing.assert_array_equal(f(x), np.exp(x) - 1.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn, args = pending.pop()
        fn(*args)
    assert any("no kernels today" in str(w.message) for w in caught)
    assert _executable(f)._fast is None
    np.testing.assert_array_equal(f(x), np.exp(x) - 1.0)


def test_lower_before_any_call_builds(tiered):
    f = braze.compile(lambda x: np.sqrt(x) + x, target="cpu")
    x = np.arange(10.0)
    lowered = f.lower(x)
    assert "elementwise kernel" in lowered.plan and lowered.counts["kernels"] == 1
    np.testing.assert_array_equal(f(x), np.sqrt(x) + x)


def test_registered_cpu_kernels_are_not_tiered(tiered, restore_registry):
    """A kernel registered for cpu runs only compiled (NumPy cannot run it)."""
    @braze.composite("braze.test.tiered_double")
    def double(x):
        return x * 2

    calls = []

    @braze.register_kernel("braze.test.tiered_double", "cpu")
    def double_cpu(x):
        calls.append(1)
        return x + x

    f = braze.compile(lambda x: double(x) + 1, target="cpu")
    x = np.arange(4.0)
    np.testing.assert_array_equal(f(x), x * 2 + 1)
    assert not isinstance(_executable(f), cpu_tiered.Tiered) and calls


def test_a_kernel_chosen_inside_a_composite_body_is_not_tiered(tiered, restore_registry):
    """(found running the suite tiered: the user's kernel ran on the first call
    and again in the background run)"""

    @braze.composite("braze.test.tiered_inner")
    def inner(x):
        return x * 3.0

    @braze.composite("braze.test.tiered_outer")
    def outer(x):
        return inner(x) - 1.0

    calls = []
    braze.register_kernel("braze.test.tiered_inner", "cpu", lambda x: calls.append(1) or x * 3.0)
    f = braze.compile(lambda x: outer(x), target="cpu")
    x = np.arange(5.0)
    np.testing.assert_array_equal(f(x), x * 3.0 - 1.0)
    cpu_cache.wait_background()
    assert calls == [1]
