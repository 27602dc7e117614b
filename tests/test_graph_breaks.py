"""Graph breaks: what braze cannot trace runs as called, between compiled
regions, and the program is specialized (with guards) on the values Python
branched on. Every case runs several calls with different data, on generic
and cpu, against NumPy running the same function."""
import logging

import numpy as np
import pytest

import braze
from _compare import central_differences
from braze import pytree
from braze.api import MAX_RESPECIALIZATIONS

TARGETS = ["generic", "cpu"]


def histogram(x):
    h, edges = np.histogram(x, bins=5)
    return h * 2.0, edges.astype(np.float32)


def masked_mean(x):
    return x[x > 0.5].sum() / x.size + x.mean()


def nonzero_gather(x):
    idx = np.nonzero(x > 0.5)[0]
    return idx * 2, x[idx] + 1


def mean_over_count(x):
    n = len(x[x > 0])  # the result is dropped; its length lives on as a Python int
    return x.sum() / n


def scaled_by_nonzero_size(x):
    return x * np.nonzero(x > 0)[0].size


def unique_rounded(x):
    return np.unique(np.round(x * 3)) + 1


def branch(x):
    if x.sum() > 0:
        return x * 2
    return x - 1


def scaled_by_max(x):
    s = float(x.max())
    return x / s


def centred_on_printed_mean(x):
    return x - float(f"{x.mean():.3f}")  # a value read through a format spec, as NumPy formats it


def item_count(x):
    n = int((x > 0).sum())
    return np.ones(n) * x.mean()  # a shape from a value


def fill_diagonal(a):
    a = a * 2
    np.fill_diagonal(a, 0.0)  # writes into its argument
    return a + 1


def inverse(a):
    return np.linalg.inv(a @ a.T + np.eye(len(a))) @ a


def via_python_list(x):
    return x * sum(x.tolist())


def untraced_buffer(x):
    from numpy import zeros  # bound at call time, but NumPy's own: not traced

    out = zeros(x.shape)
    out[:] = x * 2  # NumPy converts the traced value
    return out


def ufuncs_without_rules(x):
    whole, frac = np.modf(x * 3)
    return np.ldexp(frac, 2) + np.gcd(whole.astype(np.int64), 4)


def keyword_without_rule(x):
    return np.var(x, mean=x.mean(keepdims=True)) + np.pad(x, 2, mode="median").sum()


def make_1d(rng):
    return (rng.standard_normal(12),)


def make_square(rng):
    return (rng.standard_normal((4, 4)),)


CASES = {
    "histogram": (histogram, lambda rng: (rng.random(40),)),
    "masked_mean": (masked_mean, lambda rng: (rng.random(20),)),
    "nonzero_gather": (nonzero_gather, lambda rng: (rng.random(10),)),
    "mean_over_count": (mean_over_count, lambda rng: (rng.standard_normal(16) + 0.5,)),
    "scaled_by_nonzero_size": (scaled_by_nonzero_size, make_1d),
    "unique_rounded": (unique_rounded, lambda rng: (rng.random(10),)),
    "branch": (branch, make_1d),
    "scaled_by_max": (scaled_by_max, lambda rng: (rng.random(6) + 0.5,)),
    "item_count": (item_count, make_1d),
    "centred_on_printed_mean": (centred_on_printed_mean, make_1d),
    "fill_diagonal": (fill_diagonal, make_square),
    "inverse": (inverse, make_square),
    "via_python_list": (via_python_list, make_1d),
    "untraced_buffer": (untraced_buffer, make_1d),
    "ufuncs_without_rules": (ufuncs_without_rules, make_1d),
    "keyword_without_rule": (keyword_without_rule, make_1d),
}


def assert_same(got, want):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert type(g) is type(w), (type(g), type(w))
        assert np.asarray(g).dtype == np.asarray(w).dtype and np.shape(g) == np.shape(w), (g, w)
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_break_runs_as_numpy_would_across_calls(name, target):
    fn, make = CASES[name]
    f = braze.compile(fn, target=target)
    rng = np.random.default_rng(7)
    for _ in range(5):  # new data each call: guards hold or re-specialize, never a stale answer
        args = make(rng)
        assert_same(f(*[a.copy() for a in args]), fn(*[a.copy() for a in args]))


def test_breaks_are_listed_with_their_cause_and_line():
    f = braze.compile(nonzero_gather, target="cpu")
    text = str(f.lower(np.linspace(0, 1, 10)))
    assert "graph break: numpy.nonzero at" in text and "test_graph_breaks.py" in text
    assert "host_call <numpy.nonzero" in text  # the plan's step between the compiled regions
    text = str(braze.compile(branch, target="generic").lower(np.ones(3)))
    assert "graph break: a traced bool[] was used as a Python bool" in text and "specialized on True" in text


def test_fullgraph_keeps_the_strict_errors():
    with pytest.raises(braze.ConcretizationError, match="used as a Python bool"):
        braze.compile(branch, target="generic", fullgraph=True)(np.ones(3))
    with pytest.raises(braze.UnsupportedOpError, match="numpy.histogram is not supported"):
        braze.compile(histogram, target="generic", fullgraph=True)(np.ones(3))


def test_a_changed_guard_re_specializes_and_is_counted():
    f = braze.compile(branch, target="cpu")
    assert_same(f(np.ones(3)), branch(np.ones(3)))
    assert_same(f(-np.ones(3)), branch(-np.ones(3)))
    info = f.cache_info()
    assert info.misses == 1 and any(r.startswith("re-specialized: ") and "Python bool" in r for r in info.reasons)


def test_past_the_bound_a_signature_runs_as_numpy(caplog):
    f = braze.compile(branch, target="generic")
    with caplog.at_level(logging.WARNING, logger="braze"):
        for k in range(MAX_RESPECIALIZATIONS + 4):
            x = np.ones(3) * (1 if k % 2 else -1)
            assert_same(f(x), branch(x))
    assert any("runs as plain NumPy" in r.getMessage() for r in caplog.records)
    assert any("runs as NumPy from now" in r for r in f.cache_info().reasons)


def test_an_argument_updated_in_place_is_updated_once_when_a_guard_fails():
    def update(a):
        a *= 2
        if a.sum() > 0:
            a += 1
        return a.mean()

    f = braze.compile(update, target="cpu")
    for sign in (1, -1, 1, -1):
        ours, theirs = np.ones(4) * sign, np.ones(4) * sign
        assert f(ours) == update(theirs)
        np.testing.assert_array_equal(ours, theirs)


def test_an_error_of_the_call_itself_reaches_the_user_and_leaves_the_function_usable():
    f = braze.compile(lambda a: np.linalg.inv(a) * 2, target="cpu")
    good = np.eye(3) * 2
    np.testing.assert_allclose(f(good), np.linalg.inv(good) * 2)
    with pytest.raises(np.linalg.LinAlgError):
        f(np.zeros((3, 3)))
    np.testing.assert_allclose(f(good * 2), np.linalg.inv(good * 2) * 2)


def test_an_array_made_by_numpy_from_traced_values_is_new_at_each_call():
    f = braze.compile(untraced_buffer, target="cpu")
    x = np.ones(3)
    first = f(x)
    first[0] = 99.0
    again = f(x)
    assert again is not first
    np.testing.assert_array_equal(again, untraced_buffer(x))


def test_a_break_inside_a_gradient_is_an_error_not_a_zero():
    def loss(x):
        return np.linalg.eigvals(np.outer(x, x) + np.eye(3)).real.sum() * x.sum()  # (no rule: a break)

    for grad in (braze.grad(loss), braze.compile(braze.grad(loss), target="generic")):
        with pytest.raises(braze.GradientError, match=r"numpy.linalg.eigvals at .*test_graph_breaks.py:\d+ .*"
                                                        r"braze.defvjp"):
            grad(np.arange(3.0))


def _tridiagonal_solve(dl, d, du, b):
    """As a SciPy LAPACK wrapper (dgtsv) would: NumPy on concrete arrays."""
    a = np.diag(np.asarray(d)) + np.diag(np.asarray(dl), -1) + np.diag(np.asarray(du), 1)
    return np.linalg.solve(a, np.asarray(b))


def _tridiagonal_vjp(ct, dl, d, du, b, *, out):
    g = _tridiagonal_solve(du, d, dl, ct)  # A^T g = ct
    return -g[1:] * out[:-1], -g * out, -g[:-1] * out[1:], g


tridiagonal_solve = braze.defvjp(_tridiagonal_solve, _tridiagonal_vjp)


def implicit_diffusion(u, k):
    n = u.shape[0]
    off = -k * np.ones(n - 1)
    return np.tanh(tridiagonal_solve(off, 1 + 2 * k * np.ones(n), off, u))


@pytest.mark.parametrize("target", ["generic", "cpu"])
def test_defvjp_gives_a_break_a_gradient(target):
    u = np.random.default_rng(3).random(9)

    def loss(u, k):
        return (implicit_diffusion(u, k) ** 2).sum()

    np.testing.assert_allclose(braze.compile(implicit_diffusion, target=target)(u, 0.3), implicit_diffusion(u, 0.3),
                               rtol=1e-14)
    want = central_differences(lambda x: loss(x, 0.3), u)
    for grad in (braze.grad(loss), braze.compile(braze.grad(loss), target=target)):
        np.testing.assert_allclose(grad(u, 0.3), want, rtol=1e-6, atol=1e-9)
    dk = braze.grad(loss, argnums=1)(u, 0.3)  # through the diagonals
    np.testing.assert_allclose(dk, (loss(u, 0.3 + 1e-6) - loss(u, 0.3 - 1e-6)) / 2e-6, rtol=1e-5)


def test_defvjp_rules_are_traced_so_second_derivatives_work():
    def inner(y):
        return (tridiagonal_solve(np.zeros(4), np.full(5, 2.0), np.zeros(4), y) ** 3).sum()

    x = np.random.default_rng(4).random(5)
    np.testing.assert_allclose(braze.grad(lambda x: braze.grad(inner)(x).sum())(x), 6 * x / 8, rtol=1e-12)


def test_defvjp_checks_its_arguments_and_the_rules_results():
    with pytest.raises(braze.GradientError, match="callable"):
        braze.defvjp(np.sin, "not a rule")
    wrong = braze.defvjp(lambda x: np.asarray(x) * 2, lambda ct, x, *, out: (ct, ct))
    with pytest.raises(braze.GradientError, match="2 cotangent"):
        braze.grad(lambda x: wrong(x).sum())(np.ones(3))
    with pytest.raises(braze.UnsupportedOpError, match="fullgraph"):
        braze.compile(implicit_diffusion, fullgraph=True)(np.ones(4), 0.1)


def test_a_boolean_mask_selection_is_differentiable_compiled_as_eagerly():
    def loss(x):
        return (x[x[:, 0] > 0, 1:] ** 2).sum() + np.tanh(x[x > 0.5]).sum()

    grad = braze.compile(braze.grad(loss), target="cpu")
    for seed in range(4):  # masks of different lengths: the guard re-specializes the gradient program too
        x = np.random.default_rng(seed).standard_normal((6, 3))
        g = grad(x)
        np.testing.assert_allclose(g, braze.grad(loss)(x), rtol=1e-12)
        np.testing.assert_allclose(g, central_differences(loss, x), rtol=1e-5, atol=1e-7)




def test_a_complex_scalar_operand_runs_the_call_as_numpy(caplog):
    """``np.abs(a * 1j)``: complex values are NumPy's to compute (as a complex
    intermediate from a call is), not a TraceError."""
    fns = (lambda a: np.abs(a * 1j), lambda a: np.sort(a + 1j * a[::-1]).real, lambda a: (a * np.complex64(2j)).imag)
    x = np.array([3.0, -1.0, 2.0])
    with caplog.at_level(logging.WARNING, logger="braze"):
        for fn in fns:
            f = braze.compile(fn, target="cpu")
            for _ in range(2):
                got, want = f(x), fn(x)
                assert got.dtype == want.dtype
                np.testing.assert_array_equal(got, want)
    assert "a complex scalar" in caplog.text


def test_a_list_of_traced_scalars_stored_into_a_row_is_traced_not_a_break():
    """``curve[t] = [S.sum(), S.max(), 2]`` builds the row as NumPy would (its
    dtype, cast into the array's) from traced values: no guard on the values,
    so new data never traces again, and the row carries gradients."""
    def history(S, steps=4):
        curve = np.zeros((steps, 3), dtype=np.float32)
        counts = np.zeros((steps, 2), dtype=np.int32)
        for t in range(steps):
            S = S * 0.9 + 0.1
            curve[t] = [S.sum(), S.max(), 2]
            counts[t, :] = (S.min() * 10, 7)
        return curve, counts

    for target in ("cpu", "generic"):
        f = braze.compile(history, target=target)
        for seed in range(3):
            S = np.random.default_rng(seed).standard_normal(40) * 10
            for got, want in zip(f(S), history(S)):
                assert got.dtype == want.dtype and np.array_equal(got, want)
        assert f.cache_info().reasons == ["first call"], f.cache_info().reasons

    def loss(S):
        c = np.zeros((3, 2))
        for t in range(3):
            S = np.tanh(S) * 1.5
            c[t] = [S.sum(), (S * S).max()]
        return (c * c).sum()

    x = np.random.default_rng(5).standard_normal(6)
    for g in (braze.grad(loss), braze.compile(braze.grad(loss), target="cpu")):
        np.testing.assert_allclose(g(x), central_differences(loss, x), rtol=1e-6, atol=1e-8)


def test_a_call_that_overwrites_its_converted_argument_keeps_the_guard_value():
    """LAPACK routines called through f2py (here dgtsv, column by column, in the
    corpus's ocean-model routine) may write into the arrays they are given; the
    value a break was specialized on must stay the one traced with (it was
    overwritten, every call failed its guard, and the program fell back to NumPy)."""
    from programs import with_scipy

    fn, make, _, small, _ = with_scipy.EXAMPLES["implicit_vertical_mixing"]
    g = braze.compile(fn, target="generic")
    args = make(small)
    for _ in range(3):
        for got, want in zip(g(*args), fn(*args)):
            np.testing.assert_allclose(got, want, rtol=1e-12)
    assert not [r for r in g.cache_info().reasons if "re-specialized" in r]  # (the guards held)


def test_numpy_functions_that_only_read_get_the_arrays_themselves():
    """NumPy's C functions copy a read-only input before reading it, so a break
    calling a NumPy function that never writes its arguments passes the arrays
    as they are; any other callable gets read-only views (how a write is caught)."""
    from braze.ops.call import HostCall, reads_only

    assert reads_only(np.bincount, {}) and reads_only(np.linalg.eigh, {}) and reads_only(np.add, {})
    assert not reads_only(np.fill_diagonal, {}) and not reads_only(np.random.shuffle, {})
    assert not reads_only(np.add, {"out": None}) and not reads_only(np.vectorize(abs), {})
    assert not reads_only(lambda x: x, {}) and not reads_only(np.ndarray, {})

    # (more bins than braze writes as sums: NumPy's call)
    f = braze.compile(lambda i, w: np.bincount(i * 1, weights=w, minlength=40) * 2.0, target="cpu")
    i, w = np.array([0, 1, 1, 3]), np.arange(4.0)
    for _ in range(2):
        np.testing.assert_array_equal(f(i, w), np.bincount(i, weights=w, minlength=40) * 2.0)
    (call,) = [n.kw["call"] for n in f.lower(i, w).ir.nodes if n.op == "host_call"]
    assert call.pure

    flags = []
    for pure in (True, False):
        hc = HostCall(lambda x: flags.append(x.flags.writeable) or x.sum(), "spy", pytree.flatten(((0,), {}))[1],
                      [None], [0], "", pure=pure)
        hc.call([w], writable=False)
    assert flags == [True, False]
