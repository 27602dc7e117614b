"""Composite ops: registration, selection, checking, explanation, verification."""

import numpy as np
import pytest

import braze
from braze import registry

from _compare import assert_same

X = np.linspace(-2, 2, 24).reshape(4, 6)


def make(name):
    @braze.composite(name, examples=lambda: [((X,), {"k": 2.0}), ((X.astype(np.float32),), {"k": 3.0})])
    def scaled_tanh(x, *, k=1.0):
        return np.tanh(x) * k

    return scaled_tanh


@pytest.fixture
def fresh(restore_registry):
    """Registrations made in a test are removed after it (see conftest)."""
    yield


def test_register_and_select_by_priority(fresh):
    op = make("braze.test.sel_priority")
    calls = []

    @op.register("cpu", priority=1)
    def low(x, *, k):
        calls.append("low")
        return np.tanh(x) * k

    @op.register("cpu", priority=7)
    def high(x, *, k):
        calls.append("high")
        return np.tanh(x) * k

    f = braze.compile(lambda x: op(x, k=2.0) + 1, target="cpu")
    assert_same(f(X), np.tanh(X) * 2 + 1)
    assert calls == ["high"]
    plan = f.lower(X).plan
    assert "candidate low (priority 1" in plan and "chosen: high (highest priority 7)" in plan


def test_tie_goes_to_later_registration_and_warns_once_naming_both(fresh):
    op = make("braze.test.sel_tie")
    braze.register_kernel(op.name, "cpu", lambda x, *, k: np.tanh(x) * k)
    with pytest.warns(UserWarning, match="same priority 0") as rec:
        @op.register("cpu")
        def second(x, *, k):
            return np.tanh(x) * k + 0.0
    assert "test_composites.py" in str(rec[0].message)
    plan = braze.compile(lambda x: op(x), target="cpu").lower(X).plan
    assert "chosen: second" in plan and "later registration wins the tie" in plan


def test_when_rejects_by_dtype_and_by_attribute(fresh):
    op = make("braze.test.sel_when")
    op.register("cpu", when=lambda x, *, k: x.dtype == np.float32 and k > 0)(lambda x, *, k: np.tanh(x) * k)
    plan64 = braze.compile(lambda x: op(x, k=1.0), target="cpu").lower(X).plan
    assert "when rejected" in plan64 and "body inlined, fused into kernel k0" in plan64
    plan_neg = braze.compile(lambda x: op(x, k=-1.0), target="cpu").lower(X.astype(np.float32)).plan
    assert "when rejected" in plan_neg
    plan_ok = braze.compile(lambda x: op(x, k=1.0), target="cpu").lower(X.astype(np.float32)).plan
    assert "when accepted" in plan_ok and "chosen: <lambda>" in plan_ok


def test_downstream_registration_by_name_before_the_composite_exists():
    import downstream_kernels  # registers "braze.test.downstream_scale" on cpu, by name only

    @braze.composite("braze.test.downstream_scale")  # defined after the kernel was registered
    def scale(x, *, factor=2.0):
        return x + 1000.0  # a body the kernel's result cannot be mistaken for

    before = len(downstream_kernels.CALLS)
    g = braze.compile(lambda x: scale(x, factor=4.0), target="cpu")
    assert_same(g(X), X * 4.0)
    assert len(downstream_kernels.CALLS) == before + 1
    assert "chosen: scale_cpu" in g.lower(X).plan


def test_declared_result_mismatch_is_a_trace_time_error(fresh):
    op = make("braze.test.sel_abstract")
    op.register("cpu", abstract=lambda x, *, k: ((x.shape[0],), x.dtype))(lambda x, *, k: x.sum(-1))
    with pytest.raises(braze.CompositeError) as err:
        braze.compile(lambda x: op(x), target="cpu")(X)
    msg = str(err.value)
    assert "declares results (f64[4])" in msg and "body returns (f64[4,6])" in msg and "test_composites.py" in msg


def test_wrong_result_without_declaration_is_caught_on_the_call(fresh):
    op = make("braze.test.sel_wrong")
    op.register("cpu")(lambda x, *, k: (np.tanh(x) * k).astype(np.float32))
    f = braze.compile(lambda x: op(x), target="cpu")
    with pytest.raises(braze.CompositeError, match=r"returned \(f32\[4,6\]\).*body returns \(f64\[4,6\]\)"):
        f(X)


def test_kernel_that_raises_names_composite_kernel_and_target(fresh):
    op = make("braze.test.sel_raise")

    @op.register("cpu")
    def broken(x, *, k):
        raise RuntimeError("boom")

    f = braze.compile(lambda x: op(x), target="cpu")
    with pytest.raises(braze.KernelError) as err:
        f(X)
    assert "broken" in str(err.value) and "braze.test.sel_raise" in str(err.value) and "cpu" in str(err.value)
    assert isinstance(err.value.__cause__, RuntimeError)
    with braze.disable_kernels("braze.test.sel_raise"):
        assert_same(f(X), np.tanh(X))  # the body still works


def test_when_that_raises_is_a_clear_error(fresh):
    op = make("braze.test.sel_when_raises")
    op.register("cpu", when=lambda x, *, k: x.nonexistent)(lambda x, *, k: x)
    with pytest.raises(braze.CompositeError, match="when= predicate .* raised AttributeError"):
        braze.compile(lambda x: op(x), target="cpu")(X)


def test_disable_kernels_forces_bodies(fresh):
    op = make("braze.test.sel_disable")
    calls = []
    op.register("cpu")(lambda x, *, k: calls.append(1) or np.tanh(x) * k)
    f = braze.compile(lambda x: op(x), target="cpu")
    f(X)
    with braze.disable_kernels("braze.test.sel_disable", target="cpu"):
        f(X)
        assert "kernels switched off" in f.lower(X).plan
    with braze.disable_kernels():
        f(X)
    f(X)
    assert calls == [1, 1]


def test_registering_takes_effect_on_the_next_call(fresh):
    op = make("braze.test.sel_late")
    f = braze.compile(lambda x: op(x) * 2.0, target="cpu")
    assert_same(f(X), np.tanh(X) * 2)
    op.register("cpu")(lambda x, *, k: np.zeros_like(x))  # deliberately different
    assert_same(f(X), np.zeros_like(X))
    assert f.cache_info().misses == 1  # re-selected, not retraced
    assert any("registry changed" in r for r in f.cache_info().reasons)


def test_name_collisions_keep_each_body_and_share_kernels(fresh):
    @braze.composite("braze.test.collide")
    def one(x):
        return x + 1.0

    @braze.composite("braze.test.collide")
    def two(x):
        return x * 10.0

    f = braze.compile(lambda x: (one(x), two(x)), target="cpu")
    assert_same(f(X), (X + 1.0, X * 10.0))
    braze.register_kernel("braze.test.collide", "cpu", lambda x: x - 5.0)
    assert_same(f(X), (X - 5.0, X - 5.0))


def test_outer_kernel_wins_over_anything_inside(fresh):
    inner = make("braze.test.nest_inner")

    @braze.composite("braze.test.nest_outer")
    def outer(x):
        return inner(x, k=2.0) + 1.0

    inner_calls = []
    inner.register("cpu")(lambda x, *, k: inner_calls.append(1) or np.tanh(x) * k)
    f = braze.compile(lambda x: outer(x), target="cpu")
    assert_same(f(X), np.tanh(X) * 2 + 1)
    assert inner_calls == [1]  # selection works inside an inlined body
    braze.register_kernel("braze.test.nest_outer", "cpu", lambda x: np.tanh(x) * 2 + 1)
    inner_calls.clear()
    f(X)
    assert inner_calls == []


def test_explain_lists_every_decision():
    op = make("braze.test.explain")
    text = braze.explain(braze.compile(lambda x: op(x, k=2.0) * 3.0, target="cpu"), X)
    assert "composite braze.test.explain[k=2.0]" in text
    assert "no kernels registered for this target" in text and "body inlined, fused into kernel k0" in text
    assert "def kernel(" in text and "graph(" in text


def test_verify_reports_errors_per_kernel_and_dtype(fresh):
    op = make("braze.test.verify")
    op.register("cpu")(lambda x, *, k: np.tanh(x) * k)
    op.register("cpu", priority=-1)(lambda x, *, k: np.tanh(x) * k * 1.01)
    reports = [r for r in braze.verify("braze.test.verify") if not r.kernel.startswith("body")]
    assert {(r.kernel, r.dtype) for r in reports} == {("<lambda>", "float64"), ("<lambda>", "float32")}
    assert sorted(r.ok for r in reports) == [False, False, True, True]
    with pytest.raises(AssertionError, match="disagree"):
        braze.testing.check_kernel("braze.test.verify")


def test_verify_checks_the_backward_of_kernel_pairs(fresh):
    """A pair's backward is compared with the gradient derived from the body."""
    name = "braze.test.verify_pair"
    make(name)

    def forward(x, *, k):
        y = np.tanh(x)
        return y * k, (y,)

    def right(residuals, g, *, k):
        (y,) = residuals
        return (g * k * (1 - y * y),)

    def wrong(residuals, g, *, k):
        (y,) = residuals
        return (g * k * (1 - y),)

    braze.register_kernel(name, "cpu", forward, backward=right)
    reports = braze.verify(name, "cpu")
    assert {r.kernel for r in reports} == {"forward", "forward backward", "body (inlined, fused)", "body backward"}
    assert all(r.ok for r in reports)
    (entry,) = braze.registry.kernels(name, "cpu")
    braze.registry.unregister(entry)
    braze.register_kernel(name, "cpu", forward, backward=wrong)
    bad = [r for r in braze.verify(name, "cpu") if not r.ok]
    assert bad and all(r.kernel == "forward backward" for r in bad)


def test_verify_checks_the_body_each_target_compiles(fresh):
    """With no kernel registered, verify still reports what runs on a target:
    the composite's body, inlined and fused, and its gradient; a wrong body
    result on that target would show here (here: exact)."""
    make("braze.test.verify_body")
    reports = braze.verify("braze.test.verify_body", "cpu")
    assert {(r.kernel, r.target) for r in reports} == {("body (inlined, fused)", "cpu"), ("body backward", "cpu")}
    assert all(r.ok and r.examples > 0 for r in reports)


def test_a_numba_njit_function_is_a_kernel(fresh):
    from numba import njit

    op = make("braze.test.njit_kernel")

    @njit(cache=False)
    def tanh_scaled(x, k):
        return np.tanh(x) * k

    op.register("cpu", priority=3)(tanh_scaled)  # the attribute k arrives as a keyword
    f = braze.compile(lambda x: op(x, k=2.0) + 1.0, target="cpu")
    assert_same(f(X), np.tanh(X) * 2.0 + 1.0)
    assert "chosen: tanh_scaled" in f.lower(X).plan
    (report,) = [r for r in braze.verify(op.name, "cpu") if r.dtype == "float64" and r.kernel == "tanh_scaled"]
    assert report.ok and report.kernel == "tanh_scaled" and report.max_rel_error < 1e-12
