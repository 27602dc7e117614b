"""Flat loops heavy in vector math (exp, log, ... and divisions) are compiled
with LLVM interleaving several vector iterations (``rt.interleaved``): the
choice, bitwise-unchanged results at every length, and the LLVM option
confined to those kernels."""
import re

import numpy as np
import pytest

import braze
from braze.targets import cpu_codegen

from _compare import assert_same


def cnd(d):
    k = 1.0 / (1.0 + 0.2316419 * np.abs(d))
    poly = k * (0.31938153 + k * (-0.356563782 + k * (1.781477937 + k * (-1.821255978 + k * 1.330274429))))
    r = 0.3989422804014327 * np.exp(-0.5 * d * d) * poly
    return np.where(d > 0, 1.0 - r, r)


def pricing(S, X, T, r, v):
    d1 = (np.log(S / X) + (r + 0.5 * v * v) * T) / (v * np.sqrt(T))
    d2 = d1 - v * np.sqrt(T)
    disc = X * np.exp(-r * T)
    return S * cnd(d1) - disc * cnd(d2), disc * (1.0 - cnd(d2)) - S * (1.0 - cnd(d1))


def light(x, y):
    return np.exp(x) * y + 1.0 / y


def args(n, dtype=np.float64, step=1):
    g = np.random.default_rng(n)
    S = g.uniform(5, 30, n * step).astype(dtype)[::step]
    return S, g.uniform(1, 100, n).astype(dtype), g.uniform(0.25, 10, n).astype(dtype), 0.02, 0.3


def sources(fn, *a):
    return braze.explain(braze.compile(fn, target="cpu"), *a)


def test_heavy_flat_loops_interleave_and_light_ones_do_not():
    assert "rt.interleaved(4," in sources(pricing, *args(100))
    assert "rt.interleaved(" not in sources(light, np.ones(100), np.ones(100))
    # a rows loop over a 2-D window is left alone (short rows would go scalar)
    A = np.ones((6, 9))
    assert "rt.interleaved(" not in sources(lambda a: np.exp(a[1:, 1:]) / np.log(a[:-1, :-1] + 2.0) / a[1:, :-1], A)


def gelu(x, b):
    """GPT-2's GELU of a row-broadcast bias: a rows loop, one tanh (which divides)."""
    h = x + b
    return 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))


def test_rows_loops_interleave_when_their_rows_are_long():
    g = np.random.default_rng(5)
    assert "rt.interleaved(2," in sources(gelu, g.standard_normal((8, 512)), g.standard_normal(512))
    # short rows would leave most of each row to the scalar remainder
    assert "rt.interleaved(" not in sources(gelu, g.standard_normal((512, 8)), g.standard_normal(8))


@pytest.mark.parametrize("cols", [256, 257, 1031])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_interleaved_rows_are_bitwise_the_plain_kernels(monkeypatch, cols, dtype):
    g = np.random.default_rng(cols)
    x = (g.standard_normal((9, cols)) * 4).astype(dtype)
    x[0, :5] = [np.nan, np.inf, -np.inf, 0.0, -0.0]
    x[1, :3] = [1e-30, -1e30, 40.0]
    b = g.standard_normal(cols).astype(dtype)
    fast = braze.compile(gelu, target="cpu")
    assert "rt.interleaved(2," in braze.explain(fast, x, b)
    monkeypatch.setattr(cpu_codegen, "ROW_INTERLEAVE", 0)
    plain_fn = braze.compile(gelu, target="cpu")
    assert "rt.interleaved(" not in braze.explain(plain_fn, x, b)
    with np.errstate(all="ignore"):
        got, plain, want = fast(x, b), plain_fn(x, b), gelu(x, b)
    assert got.dtype == plain.dtype == want.dtype
    np.testing.assert_array_equal(got, plain)
    assert_same(got, want, atol=16 * np.finfo(dtype).eps * float(np.nanmax(np.abs(np.where(np.isinf(want), 0, want)))))


@pytest.mark.parametrize("n", [0, 1, 7, 31, 32, 33, 1000, 4099])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_interleaved_results_are_bitwise_the_plain_kernels(monkeypatch, n, dtype):
    a = args(n, dtype, step=2 if n % 2 else 1)            # odd sizes read a strided S
    interleaved = braze.compile(pricing, target="cpu")(*a)
    monkeypatch.setattr(cpu_codegen, "INTERLEAVE", 0)
    plain_fn = braze.compile(pricing, target="cpu")
    assert "rt.interleaved(" not in braze.explain(plain_fn, *a)
    plain = plain_fn(*a)
    for got, want, ref in zip(interleaved, plain, pricing(*a)):
        assert got.dtype == want.dtype == ref.dtype
        np.testing.assert_array_equal(got, want)
        assert_same(got, ref, atol=64 * np.finfo(dtype).eps * 100)   # prices up to 100


def test_special_values_pass_through_interleaved_kernels():
    S = np.array([np.nan, np.inf, 1e-300, 1e300, 0.0, -1.0, 5.0] * 9)
    X = np.full_like(S, 10.0)
    T = np.array([1.0, 2.0, 0.0, np.inf, 1.0, 1.0, 1e-30] * 9)
    with np.errstate(all="ignore"):
        want = pricing(S, X, T, 0.02, 0.3)
        got = braze.compile(pricing, target="cpu")(S, X, T, 0.02, 0.3)
    for g, w in zip(got, want):
        assert_same(g, w, atol=1e-12)


def _packed_ops(dispatcher):
    asm = dispatcher.inspect_asm(dispatcher.signatures[0])
    blocks = re.split(r"\n(?=\.LBB\d+_\d+:)", asm)
    return max(len(re.findall(r"\tv\w+pd\s[^\n]*%[yz]mm", b)) for b in blocks)


def _host_has_avx2():
    from llvmlite import binding as llvm
    return "+avx2" in llvm.get_host_cpu_features().flatten()


@pytest.mark.skipif(not _host_has_avx2(), reason="needs an x86 host with AVX2 (vector loop shapes)")
def test_the_llvm_option_is_set_only_around_its_own_compilation():
    from numba import njit

    from braze.targets import cpu_math as vm
    from braze.targets import cpu_runtime as rt

    def body(x, out):
        for i in range(x.size):
            out[i] = vm.exp_f64(x[i]) / x[i]

    x, out = np.linspace(0.5, 2.0, 100), np.empty(100)
    before = njit(cache=False, error_model="numpy")(body)
    inter = rt.interleaved(4, cache=False, error_model="numpy")(body)
    after = njit(cache=False, error_model="numpy")(body)
    results = []
    for k in (before, inter, after):
        k(x, out)
        results.append(out.copy())
    np.testing.assert_allclose(results[0], np.exp(x) / x, rtol=5e-16)
    np.testing.assert_array_equal(results[1], results[0])
    np.testing.assert_array_equal(results[2], results[0])
    plain = _packed_ops(before)
    assert _packed_ops(inter) >= 3 * plain, (plain, _packed_ops(inter))
    assert _packed_ops(after) == plain


@pytest.mark.skipif(not _host_has_avx2(), reason="needs an x86 host with AVX2 (vector loop shapes)")
def test_a_nested_compilation_gives_the_outer_one_its_setting_back():
    from numba import njit

    from braze.targets import cpu_math as vm
    from braze.targets import cpu_runtime as rt

    @rt.interleaved(1, cache=False, error_model="numpy")
    def helper(v):                      # typed (and compiled) while `outer` is being compiled
        return vm.exp_f64(v) / v

    def body(x, out):
        for i in range(x.size):
            out[i] = helper(x[i])

    x, out = np.linspace(0.5, 2.0, 100), np.empty(100)
    plain = njit(cache=False, error_model="numpy")(body)
    outer = rt.interleaved(4, cache=False, error_model="numpy")(body)
    plain(x, out)
    want = out.copy()
    outer(x, out)
    np.testing.assert_array_equal(out, want)
    assert _packed_ops(outer) >= 3 * _packed_ops(plain), (_packed_ops(plain), _packed_ops(outer))
