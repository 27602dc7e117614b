"""The program corpus (``tests/programs``): each program compiled unchanged on
every CPU target and compared with NumPy running the same source, results and
the arguments it updates in place both."""
import copy

import numpy as np
import pytest

import braze
from programs import classic, everyday, field, gpt2, heat, lenet, ml, more, polybench, science, sims, with_scipy

MODULES = (polybench, lenet, heat, science, ml, more, with_scipy, everyday, sims, field, classic)
EXAMPLES = {name: example for mod in MODULES for name, example in mod.EXAMPLES.items()}


def _leaves(value):
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def assert_same(got, want, rtol, atol=None):
    got, want = _leaves(got), _leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if w is None:
            assert g is None
            continue
        assert type(g) is type(w), (type(g), type(w))
        assert np.asarray(g).dtype == np.asarray(w).dtype and np.shape(g) == np.shape(w)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * 1e-3 if atol is None else atol)


@pytest.mark.parametrize("target", ["generic", "cpu"])
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_program_matches_numpy(name, target):
    fn, make, static, small, _ = EXAMPLES[name]
    args = make(small)
    theirs, ours = copy.deepcopy(args), copy.deepcopy(args)
    want = fn(*theirs, **static)
    got = braze.compile(fn, target=target, static_argnames=tuple(static))(*ours, **static)
    rtol = 1e-4 if any(np.asarray(leaf).dtype == np.float32 for leaf in _leaves(args)) else 1e-10
    assert_same(got, want, rtol)
    assert_same(ours, theirs, rtol)  # in-place updates reach the caller's arrays


@pytest.mark.parametrize("n_layer", [2])
@pytest.mark.parametrize("target", ["generic", "cpu"])
def test_gpt2_forward_matches_numpy(target, n_layer):
    p = gpt2.params(n_layer=n_layer)
    inputs = np.arange(16) % 97
    want = gpt2.gpt2(inputs, p["wte"], p["wpe"], p["blocks"], p["ln_f"], n_head=p["n_head"])
    f = braze.compile(gpt2.gpt2, target=target, static_argnames=("n_head",))
    got = f(inputs, p["wte"], p["wpe"], p["blocks"], p["ln_f"], n_head=p["n_head"])
    assert got.dtype == want.dtype == np.float64  # GELU's np.sqrt(2 / np.pi) is a strong float64
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_gpt2_loss_gradient_matches_finite_differences():
    p = gpt2.params(n_layer=1, n_embd=16, n_ctx=8, dtype=np.float64)
    inputs, targets = np.arange(8) % 97, (np.arange(8) + 1) % 97
    blocks = p["blocks"]

    def loss_of_wpe(wpe):
        return gpt2.loss(inputs, targets, p["wte"], wpe, blocks, p["ln_f"], p["n_head"])

    grad = braze.compile(braze.grad(loss_of_wpe), target="cpu")(p["wpe"])
    rng = np.random.default_rng(3)
    for _ in range(4):
        i, j = rng.integers(8), rng.integers(16)
        e = np.zeros_like(p["wpe"])
        e[i, j] = 1e-6
        fd = (loss_of_wpe(p["wpe"] + e) - loss_of_wpe(p["wpe"] - e)) / 2e-6
        np.testing.assert_allclose(grad[i, j], fd, rtol=1e-5, atol=1e-9)
    assert np.abs(grad).max() > 0


# Programs whose result is differentiable in their first argument. Where the
# corpus data sits on a kink (a zero row normalized, a zero-variance column, a
# zero Adam moment: NaN by the chain rule, as in JAX), the gradient is checked
# at random data of the same shape instead.
DIFFERENTIABLE = {name: False for name in (
    "batch_norm", "bilinear_sample", "black_scholes_call", "causal_attention", "cholesky_solve", "conv2d",
    "covariance", "fir_filter", "gradient_magnitude", "gram_schmidt", "heat", "logistic_regression",
    "logsumexp_rows", "lorenz_rk4", "masked_trapezoid", "mc_asian_call", "mlp_forward",
    "pca_project", "pendulum_rk4", "power_iteration", "softmax_cross_entropy", "trace_of_tanh", "wave_1d")}
# (minmod_advection's corpus data has tails of 1e-19, where a finite difference crosses the
# limiter's kinks; JAX's gradient there equals braze's)
DIFFERENTIABLE.update(adam_quadratic=True, cosine_similarity=True, pairwise_distances=True, zscore_columns=True,
                      minmod_advection=True)
# (field.py; softmax_temperature's logits in the millions are past what a finite difference resolves)
DIFFERENTIABLE.update({name: False for name in (
    "clip_inplace_out", "einsum_attention_heads", "float32_scalars", "gradient_diff", "mask_assign",
    "median_filter_rows", "periodic_particles", "rolling_mean_cumsum", "sor_sweeps", "background_mask")},
    softmax_temperature=True)
# (classic.py; gauss_pivot's b.copy() of an argument not differentiated is a plain NumPy
# array under the eager tape, which refuses the watched values written into it: its
# compiled gradient is checked below)
DIFFERENTIABLE.update({name: False for name in (
    "burgers", "rolling_std", "bilinear", "masked_edits", "lu_doolittle")}, dtw_distance=True)


# Fewer time steps for the gradient of the integrators (their corpus runs are
# 50 and 200 steps): the backward pass is as long again, and each step checks
# the same rules.
GRADIENT_STEPS = {"lorenz_rk4": 12, "pendulum_rk4": 25}


@pytest.mark.parametrize("name", sorted(DIFFERENTIABLE))
def test_program_gradient_matches_finite_differences(name):
    from _compare import central_differences

    fn, make, static, small, _ = EXAMPLES[name]
    if name in GRADIENT_STEPS:
        static = dict(static, steps=GRADIENT_STEPS[name])
    args = list(make(small))
    if DIFFERENTIABLE[name]:
        args[0] = np.random.default_rng(12).standard_normal(np.shape(args[0]))
    outs = [o for o in _leaves(fn(*copy.deepcopy(args), **static)) if np.asarray(o).dtype.kind == "f"]
    weights = [np.random.default_rng(13).standard_normal(np.shape(o)) for o in outs]

    def loss(x):
        mine = copy.deepcopy(args)
        mine[0] = x
        results = [o for o in _leaves(fn(*mine, **static)) if np.asarray(o).dtype.kind == "f"]
        return sum((o * w).sum() for o, w in zip(results, weights))

    want = central_differences(loss, np.array(args[0], dtype=np.float64))
    assert np.abs(want).max() > 0
    for grad in (braze.grad(loss), braze.compile(braze.grad(loss), target="cpu")):
        np.testing.assert_allclose(grad(np.array(args[0], dtype=np.float64)), want, rtol=1e-5,
                                   atol=1e-7 * np.abs(want).max())


def test_a_copy_of_an_argument_written_with_watched_values_is_refused_not_zero():
    """gauss_pivot writes values computed from A into b.copy(), b an argument
    not differentiated: the tape watches A and the arrays made inside the
    function (np.zeros, np.eye), not a copy of b, so it cannot record those
    writes. It says so, eagerly and compiled; it never returns a zero."""
    A, b = EXAMPLES["gauss_pivot"][1](5)

    def loss(A, b):
        return (classic.gauss_pivot(A, b) * np.arange(1.0, 6.0)).sum()

    with pytest.raises(braze.TraceError, match="stored into an array the tape does not watch"):
        braze.compile(braze.grad(loss), target="cpu")(A, b)
    with pytest.raises((braze.GradientError, ValueError)) as info:
        braze.grad(loss)(A, b)
    assert isinstance(info.value, braze.GradientError) or isinstance(info.value.__cause__, braze.GradientError)
