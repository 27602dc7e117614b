"""The numerics contract (DESIGN.md): a compiled function returns what NumPy returns.

* Elementwise arithmetic is never reassociated or contracted: chains of
  every op that does not go through braze's own math library are *bitwise*
  equal to NumPy on a million values drawn over the whole float range.
* Data as real programs make it: logits in the millions, a layer norm with
  a gamma of 1e30, magnitudes from 1e-30 to 1e30.
* The cases other NumPy compilers are known to get wrong.
"""
import warnings

import numpy as np
import pytest

import braze
from braze.targets import cpu_math

TARGETS = ("generic", "cpu")


def _quiet():
    warnings.simplefilter("ignore")
    return np.errstate(all="ignore")


def full_range(n, dtype, seed):
    """``n`` values over the dtype's whole range: random bit patterns (every
    exponent, subnormals, infinities and NaN included), plus the specials."""
    rng = np.random.default_rng(seed)
    itype = {np.dtype(np.float32): np.uint32, np.dtype(np.float64): np.uint64}[np.dtype(dtype)]
    x = rng.integers(0, np.iinfo(itype).max, n, dtype=itype, endpoint=True).view(dtype)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, np.finfo(dtype).tiny,
                         np.finfo(dtype).max, -np.finfo(dtype).max, np.finfo(dtype).smallest_subnormal], dtype)
    x[: len(specials)] = specials
    return x


def bits_equal(got, want) -> bool:
    """Equal bit for bit, NaN payloads aside (NumPy and LLVM may pick either)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    if got.dtype.kind != "f":
        return np.array_equal(got, want)
    nan = np.isnan(want)
    return np.array_equal(np.isnan(got), nan) and np.array_equal(
        got[~nan].view(f"u{got.itemsize}"), want[~nan].view(f"u{want.itemsize}"))


# Every elementwise op braze computes with NumPy's own formula (not with its
# vectorized math library, cpu_math, whose ulp bounds test_cpu_math checks).
def _chains(a, b, c):
    return (
        a + b, a - b, a * b, a / b, (a * b + c) - a * c, (a + b) - (a + c), a * b * c / (b - c),
        -a, np.abs(a), np.sqrt(np.abs(a)), np.square(a), np.reciprocal(a), a ** 2, a ** 0.5, a ** -1,
        np.floor(a), np.ceil(a), np.trunc(a), np.rint(a), np.sign(a), np.copysign(a, b),
        np.maximum(a, b), np.minimum(a, b), np.fmax(a, b), np.fmin(a, b), np.clip(a, b, c),
        np.where(a > b, a * c, b - c), a < b, a == b, np.isnan(a), np.isinf(b), np.isfinite(c),
        np.signbit(a), a // b, a % b, np.fmod(a, b), np.divmod(b, c)[0],
        a.astype(np.float64 if a.dtype == np.float32 else np.float32), (a * 0.5 + b * 0.25) / 3.0,
        np.rad2deg(a), np.deg2rad(a),
    )


def _libm_scalar(a, b):
    """NumPy's own formulas over the C library's scalar exp, exp2 and log1p: bitwise on
    the cpu target, which calls the same functions (a GPU's differ)."""
    return np.logaddexp(a, b), np.logaddexp2(a, b)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_elementwise_chains_are_bitwise_numpy_over_the_full_float_range(dtype, target):
    n = 1_000_000
    a, b, c = (full_range(n, dtype, seed) for seed in (1, 2, 3))
    with _quiet():
        want = _chains(a, b, c)
        got = braze.compile(_chains, target=target)(a, b, c)
    bad = [k for k, (g, w) in enumerate(zip(got, want)) if not bits_equal(g, w)]
    assert not bad, f"outputs {bad} of _chains differ from NumPy's bits"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_logaddexp_is_bitwise_numpy_over_the_full_float_range(dtype, target):
    a, b = (full_range(200_000, dtype, seed) for seed in (4, 5))
    b[::3] = a[::3] + np.asarray(1e-3, dtype)  # (close pairs: results near the larger one, the formula's hard case)
    with _quiet():
        want = _libm_scalar(a, b)
        got = braze.compile(_libm_scalar, target=target)(a, b)
    assert [bits_equal(g, w) for g, w in zip(got, want)] == [True, True]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_in_kernels_with_a_reduction_too(dtype, target):
    """The elementwise part of a row kernel (a softmax's x - max, a layer
    norm's (x - mean) / 4 * g) keeps NumPy's order: the reduction's
    reassociation is confined to its own accumulate."""
    x = full_range(64 * 257, dtype, 4).reshape(64, 257)
    x[np.abs(x) > 1e30] = 1.0  # (finite rows: the sums stay finite)
    g = full_range(257, dtype, 5)

    def f(x, g):
        m = x.max(axis=-1, keepdims=True)
        return (x - m) / 4.0 * g, x - m * 0.5 + g

    with _quiet():
        want = f(x, g)
        got = braze.compile(f, target=target)(x, g)
    assert all(bits_equal(gv, wv) for gv, wv in zip(got, want))


# ---------------------------------------------------------------- real data


def _mlp(x, w1, b1, w2, b2, w3, b3):
    h = np.maximum(x @ w1 + b1, 0.0)
    h = np.maximum(h @ w2 + b2, 0.0)
    z = h @ w3 + b3
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def mlp_case(rows=64, width=512, inputs=256):
    """A 3-layer MLP with unnormalized weights: logits around 1e7 in float32."""
    rng = np.random.default_rng(0)
    shapes = [(rows, inputs), (inputs, width), (width,), (width, width), (width,), (width, 10), (10,)]
    x, *ws = (rng.standard_normal(s).astype(np.float32) * 10 for s in shapes)
    scale = 10 * (512 / width) ** 1.5  # (a smaller network, as many millions in its logits)
    return (x * scale, *ws)


def _layer_norm(x, g, b):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * g + b


def layer_norm_case():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((32, 64)).astype(np.float32)
    return x, np.full(64, 1e30, np.float32), np.zeros(64, np.float32)


@pytest.mark.parametrize("target", TARGETS)
def test_mlp_with_logits_in_the_millions(target):
    args = mlp_case()
    z = np.maximum(np.maximum(args[0] @ args[1] + args[2], 0) @ args[3] + args[4], 0) @ args[5] + args[6]
    assert np.abs(z).max() > 1e6  # the regime where reassociation moved exp by a factor of e
    want = _mlp(*args)
    got = braze.compile(_mlp, target=target)(*args)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_layer_norm_with_gamma_1e30(target):
    args = layer_norm_case()
    want = _layer_norm(*args)
    got = braze.compile(_layer_norm, target=target)(*args)
    assert np.isfinite(want).all() and np.isfinite(got).all()
    # (x - mean) cancels where x is near the mean: the tolerance is relative to
    # the row's scale, since braze's mean (float64 block sums) and NumPy's
    # (float32 pairwise) legitimately differ in the last bits
    atol = 8 * np.finfo(np.float32).eps * np.abs(want).max(axis=-1, keepdims=True)
    assert (np.abs(got - want) <= atol).all()
    nn = braze.compile(lambda x, g, b: braze.nn.layer_norm(x, g, b), target=target)(*args)
    assert np.isfinite(nn).all() and (np.abs(nn - want) <= atol).all()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("scale", [1e-30, 1e-10, 1.0, 1e10, 1e30])
def test_magnitudes_from_1e_minus_30_to_1e30(scale, target):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((16, 33)) * scale).astype(np.float32)

    def f(x):
        return x * x / (x + x), np.exp(x / scale) * scale, x.sum(axis=1), (x - x.mean()) / (x.std() + 1e-38)

    with _quiet():
        want = f(x)
        got = braze.compile(f, target=target)(x)
    eps = float(np.finfo(np.float32).eps)
    assert bits_equal(got[0], want[0])                                         # elementwise: exact
    np.testing.assert_allclose(got[1], want[1], rtol=8 * eps, equal_nan=True)  # exp: cpu_math's ulps
    # sums and what follows them: relative to the magnitudes summed (reordered accumulation)
    assert (np.abs(got[2] - want[2]) <= 4 * eps * np.abs(x).sum(axis=1)).all()
    assert (np.abs(got[3] - want[3]) <= 16 * eps * np.abs(want[3]).max()).all()


# ---------------------------------------------------------------- what other NumPy compilers get wrong

SEMANTICS = {
    "fix_truncates": (lambda x: np.fix(x), [np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.0])]),
    "fix_of_ints": (lambda x: np.fix(x), [np.array([-3, 0, 7])]),
    "cbrt_of_negatives": (lambda x: np.cbrt(x), [np.array([-8.0, -27.0, -1e-300, -np.inf, -0.0])]),
    "clip_int8_out_of_range_bounds": (lambda x: np.clip(x, -1000, 1000), [np.array([1, -100, 100, 127], np.int8)]),
    "clip_int8_inside": (lambda x: np.clip(x, -5, 5), [np.array([1, -100, 100, 127], np.int8)]),
    "sign_of_nan_and_zeros": (lambda x: np.sign(x), [np.array([np.nan, -0.0, 0.0, -3.0, np.inf])]),
    "int8_overflow_wraps": (lambda x: (x + np.int8(1), x * x, -x, x - np.int8(100)),
                            [np.array([127, -128, 100, 11], np.int8)]),
    "int64_overflow_wraps": (lambda x: (x + 1, x * 3, np.abs(x)), [np.array([2**63 - 1, -2**63, 5])]),
    "uint8_wraps": (lambda x: (x + np.uint8(200), x - np.uint8(3)), [np.array([0, 100, 255], np.uint8)]),
    "power_of_negative_bases": (lambda x: (x ** 2.0, x ** 0.5, x ** (1 / 3), x ** -1.0, np.power(x, 3.0)),
                                [np.array([-8.0, -1.0, -0.0, 2.0, -np.inf])]),
    "int_power_negative_base": (lambda x: (x ** 3, x ** 2), [np.array([-3, -2, 5])]),
    "half_integer_and_fifth_powers": (lambda x: (x ** 1.5, x ** -1.5, x ** 5, np.float32(2.5) * x.astype(np.float32) ** 1.5),
                                      [np.array([-8.0, -1.0, -0.0, 0.0, 2.0, 7.25, 1e-30, 1e30, 1e200, 3e-308, 5e-324,
                                                 np.inf, -np.inf, np.nan])]),
    "nan_in_max_min": (lambda x: (x.max(), x.min(), x.max(axis=1), np.maximum(x, 0.0), np.fmax(x, 0.0)),
                       [np.array([[1.0, np.nan, 3.0], [4.0, 5.0, -1.0]])]),
    "nan_in_argmax_argmin": (lambda x: (x.argmax(), x.argmin(axis=1), np.nanmax(x) if False else x.argmax(axis=0)),
                             [np.array([[1.0, np.nan, 3.0], [4.0, 5.0, np.nan]])]),
    "ties_in_argmax": (lambda x: (x.argmax(), x.argmin(axis=1)), [np.array([[3.0, 3.0, 1.0], [1.0, 1.0, 1.0]])]),
    "inplace_methods": (lambda x: (lambda y: (y.__iadd__(1.5), y.__imul__(2.0), y.__itruediv__(3.0), y)[-1])(x.copy()),
                        [np.arange(4.0)]),
    "inplace_int_floor_divide": (lambda x: (lambda y: (y.__ifloordiv__(-2), y.__imod__(3), y)[-1])(x.copy()),
                                 [np.array([-7, 7, 0, 5])]),
    "numpy_scalar_vs_python_scalar": (lambda x: (x * np.float64(2.0), x * 2.0, x + np.int64(1), x + 1),
                                      [np.ones(3, np.float32)]),
    "gelu_gpt2_style": (lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))),
                        [np.linspace(-3, 3, 7).astype(np.float32)]),
    "attention_scale": (lambda q, k: q @ k.T / np.sqrt(q.shape[-1]),
                        [np.ones((2, 4), np.float32), np.ones((3, 4), np.float32)]),
    "zero_times_inf_in_product": (lambda x: np.prod(x, axis=-1), [np.array([[0.0, np.inf, 2.0], [1e-320, 1e300, 1e300]])]),
    "signed_zero_results": (lambda x: (x * 0.0, x + 0.0, -x + 0.0, x - x), [np.array([-1.0, -0.0, 0.0, 2.0])]),
}
# Integer fmod at the type's minimum (abs(-128) is -128 in int8: fmod(1, -128) was -127)
# and the reciprocal of 0 (0 for int8/int16: INT32_MIN's low bits; the minimum for int32/int64).
for _t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint64):
    _lo, _hi = int(np.iinfo(_t).min), int(np.iinfo(_t).max)
    _a = np.array([1, -1 if _lo else 3, 7, _lo, _hi, 5, -5 if _lo else 9, _lo, 0, _hi, _lo], _t)
    _b = np.array([_lo or _hi, _lo or _hi, _lo or 2, 7, _lo or 3, 0, -1 if _lo else 4, -1 if _lo else 1, 3, _hi, _lo or 6], _t)
    SEMANTICS[f"fmod_and_reciprocal_{np.dtype(_t).name}"] = (
        lambda a, b: (np.fmod(a, b), np.reciprocal(a), np.reciprocal(b)), [_a, _b])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(SEMANTICS))
def test_numpy_semantics_other_compilers_get_wrong(name, target):
    fn, args = SEMANTICS[name]
    with _quiet():
        want = fn(*args)
        got = braze.compile(fn, target=target)(*args)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    for k, (g, w) in enumerate(zip(got, want)):
        assert type(g) is type(w), (k, type(g), type(w))
        if name in ("power_of_negative_bases", "gelu_gpt2_style", "cbrt_of_negatives",
                    "half_integer_and_fifth_powers"):  # (libm / cpu_math / powers by multiplication: ulps)
            assert np.asarray(g).dtype == np.asarray(w).dtype
            np.testing.assert_allclose(g, w, rtol=4 * np.finfo(np.asarray(w).dtype).eps, equal_nan=True)
        else:
            assert bits_equal(g, w), (k, g, w)


def test_vector_math_is_what_the_exemptions_cover():
    """The chains test leaves out exactly the ops that go through cpu_math."""
    assert {"exp", "log", "tanh", "erf", "sin", "cos", "expm1", "log1p"} <= {
        name.split("_")[0] for name in dir(cpu_math) if name.endswith(("_f32", "_f64"))}


@pytest.mark.parametrize("target", ["generic", "cpu"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_maximum_and_minimum_of_signed_zeros_are_numpys(dtype, target):
    """Of two equal values NumPy's maximum and minimum give the second: the sign
    of zero shows (1 / np.maximum(x, 0.0) at x = -0.0 is inf; probe 12)."""
    fns = {
        "maximum": lambda a, b: (np.maximum(a, b), np.maximum(b, a), 1 / np.maximum(a, 0.0)),
        "minimum": lambda a, b: (np.minimum(a, b), np.minimum(b, a), 1 / np.minimum(b, -0.0)),
    }  # (not np.clip: NumPy's own gives another sign at length 1 than at 17)
    for n in (1, 17):
        a, b = np.full(n, -0.0, dtype), np.zeros(n, dtype)
        for fn in fns.values():
            with np.errstate(divide="ignore"):
                want = fn(a, b)
                got = braze.compile(fn, target=target)(a, b)
            for g, w in zip(got, want):
                assert g.dtype == w.dtype
                np.testing.assert_array_equal(np.signbit(g), np.signbit(w))
                np.testing.assert_array_equal(g, w)
