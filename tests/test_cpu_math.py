"""Tests for braze.targets.cpu_math: accuracy vs NumPy, special values,
vectorization of the calling loop, and on-disk caching.

Every function is applied through ONE shared kernel per function/dtype,
compiled once per session with the flags generated kernels use
(parallel=True, fastmath={"reassoc", "contract", "nsz"}, error_model="numpy",
cache=True), so the accuracy checks also prove the caller's fast-math flags do
not leak into the range reductions.
"""
from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

numba = pytest.importorskip("numba")

FASTMATH = {"reassoc", "contract", "nsz"}
NAMES = ["exp", "expm1", "log", "log1p", "tanh", "sigmoid", "erf", "sin", "cos"]
DTYPES = [np.float32, np.float64]
ULP_BOUND = 4          # max ulp distance to the NumPy / math.erf reference
TRIG_MAX = 2.0 ** 48   # documented bound of the sin/cos range reduction


# --------------------------------------------------------------------------
# fixtures: private numba cache dir, module import, shared kernels
# --------------------------------------------------------------------------

def _dispatchers(mod):
    from numba.core.dispatcher import Dispatcher
    return [v for v in vars(mod).values() if isinstance(v, Dispatcher)]


@pytest.fixture(scope="module")
def cm(tmp_path_factory):
    """braze.targets.cpu_math with numba's cache pointed at a temp dir, so
    nothing is written next to the sources.  A dispatcher picks its cache
    location when caching is enabled, so the module's dispatchers are
    re-pointed (they may have been imported earlier in the session) and
    restored afterwards."""
    d = str(tmp_path_factory.mktemp("numba_cache"))
    old_env, old_cfg = os.environ.get("NUMBA_CACHE_DIR"), numba.config.CACHE_DIR
    os.environ["NUMBA_CACHE_DIR"] = d
    numba.config.CACHE_DIR = d
    from braze.targets import cpu_math
    for disp in _dispatchers(cpu_math):
        disp.enable_caching()
    try:
        yield cpu_math
    finally:
        numba.config.CACHE_DIR = old_cfg
        if old_env is None:
            os.environ.pop("NUMBA_CACHE_DIR", None)
        else:
            os.environ["NUMBA_CACHE_DIR"] = old_env
        for disp in _dispatchers(cpu_math):
            disp.enable_caching()


_KERNELS: dict = {}


def _make_kernel(f):
    @numba.njit(parallel=True, fastmath=FASTMATH, error_model="numpy", cache=True)
    def kernel(x, out):
        for i in numba.prange(x.shape[0]):
            out[i] = f(x[i])
    return kernel


def kernel_for(cm, name, dt):
    key = (name, np.dtype(dt))
    if key not in _KERNELS:
        k = _make_kernel(cm.FUNCTIONS[name][np.dtype(dt)])
        x = np.zeros(4, dt)
        k(x, np.empty_like(x))
        _KERNELS[key] = k
    return _KERNELS[key]


def apply(cm, name, x):
    x = np.ascontiguousarray(x)
    out = np.empty_like(x)
    kernel_for(cm, name, x.dtype)(x, out)
    return out


# --------------------------------------------------------------------------
# references and ulp distance
# --------------------------------------------------------------------------

_erf_py = np.frompyfunc(math.erf, 1, 1)


def reference(name, x):
    dt = x.dtype.type
    with np.errstate(all="ignore"):
        if name == "sigmoid":
            return (dt(1) / (dt(1) + np.exp(-x))).astype(dt)
        if name == "erf":
            x64 = x.astype(np.float64)
            r = np.where(np.abs(x64) >= 6.0, np.sign(x64), x64)   # math.erf(+-6..) == +-1
            r[np.isnan(x64)] = np.nan
            m = np.abs(x64) < 6.0
            r[m] = _erf_py(x64[m]).astype(np.float64)
            return r.astype(dt)
        return getattr(np, name)(x)


def _ordinal(a):
    """Map floats to integers that are consecutive across adjacent floats."""
    if a.dtype == np.float32:
        i = a.view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    i = a.view(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFFFFFFFFFF), i)


def ulp_distance(got, ref):
    """Number of representable steps between got and ref (0 for +0/-0).
    NaN entries are reported as 0 here; NaN positions are checked apart."""
    og, orf = _ordinal(got), _ordinal(ref)
    same_sign = (og >= 0) == (orf >= 0)
    with np.errstate(over="ignore"):
        d_same = np.abs(og - orf).astype(np.float64)
    d_diff = np.abs(og).astype(np.float64) + np.abs(orf).astype(np.float64)
    d = np.where(same_sign, d_same, d_diff)
    d[np.isnan(got) | np.isnan(ref)] = 0
    return d


def check_against_numpy(name, x, got, bound=ULP_BOUND):
    ref = reference(name, x)
    nan_got, nan_ref = np.isnan(got), np.isnan(ref)
    bad = np.flatnonzero(nan_got != nan_ref)
    assert bad.size == 0, (
        f"{name}/{x.dtype}: NaN mismatch at x={x[bad[:5]]}: got {got[bad[:5]]} ref {ref[bad[:5]]}")
    inf_got, inf_ref = np.isinf(got), np.isinf(ref)
    bad = np.flatnonzero(inf_got != inf_ref)
    assert bad.size == 0, (
        f"{name}/{x.dtype}: inf mismatch at x={x[bad[:5]]}: got {got[bad[:5]]} ref {ref[bad[:5]]}")
    d = ulp_distance(got, ref)
    i = int(np.argmax(d))
    assert d[i] <= bound, (
        f"{name}/{x.dtype}: {d[i]:.0f} ulp at x={x[i]!r}: got {got[i]!r} ref {ref[i]!r}")
    return d[i]


# --------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------

DOMAINS = {  # dense linspace over the interesting range, per dtype
    "exp": {np.float32: (-110, 90), np.float64: (-750, 712)},
    "expm1": {np.float32: (-20, 90), np.float64: (-40, 712)},
    "log": {np.float32: (0, 4), np.float64: (0, 4)},
    "log1p": {np.float32: (-1, 4), np.float64: (-1, 4)},
    "tanh": {np.float32: (-10, 10), np.float64: (-25, 25)},
    "sigmoid": {np.float32: (-110, 110), np.float64: (-750, 750)},
    "erf": {np.float32: (-6, 6), np.float64: (-7, 7)},
    "sin": {np.float32: (-100, 100), np.float64: (-100, 100)},
    "cos": {np.float32: (-100, 100), np.float64: (-100, 100)},
}

# thresholds whose float neighbourhoods are probed (overflow, underflow,
# subnormal onset, kernel-switch points, poles)
THRESHOLDS = {
    "exp": {np.float32: [88.72283, -87.33654, -103.27893, -103.97208, 0.3465736,
                         88.37626, -86.0, 89.0, -104.0],      # n=128 onset, scale switch, clamps
            np.float64: [709.782712893384, -708.3964185322641, -744.4400719213812,
                         -745.1332191019411, 0.34657359027997264, 709.0895657128241,
                         -705.0, 710.0, -746.0]},
    "expm1": {np.float32: [88.72283, -17.328680, 2.0 ** -25, 0.3465736],
              np.float64: [709.782712893384, -37.42994775023705, 2.0 ** -54]},
    "log": {np.float32: [1.0, 0.70710677, 1.4142135, 1.1754944e-38],
            np.float64: [1.0, 0.7071067811865476, 1.4142135623730951, 2.2250738585072014e-308]},
    "log1p": {np.float32: [-1.0, 1.0, 2.0 ** -26, -0.29289323],
              np.float64: [-1.0, 1.0, 2.0 ** -55, -0.2928932188134524]},
    "tanh": {np.float32: [0.55, 9.01091, 2.0 ** -12],
             np.float64: [0.55, 19.06154746539849, 2.0 ** -27]},
    "sigmoid": {np.float32: [-88.72283, 88.72283, -16.635532, 16.635532],
                np.float64: [-709.782712893384, 36.7368005696771, -36.7368005696771]},
    "erf": {np.float32: [0.84375, 3.95, 3.9192059, 2.0 ** -60],
            np.float64: [0.84375, 2.0, 5.95, 5.859799, 2.0 ** -60]},
    "sin": {np.float32: [np.pi / 4, np.pi / 2, np.pi, 2.0 ** -12],
            np.float64: [np.pi / 4, np.pi / 2, np.pi, 2.0 ** -27]},
    "cos": {np.float32: [np.pi / 4, np.pi / 2, np.pi],
            np.float64: [np.pi / 4, np.pi / 2, np.pi]},
}


def special_values(dt):
    fi = np.finfo(dt)
    v = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0,
         fi.max, -fi.max, fi.tiny, -fi.tiny, fi.smallest_subnormal,
         -fi.smallest_subnormal, fi.tiny / 3, -fi.tiny / 3, fi.eps, -fi.eps,
         1e-30, -1e-30, 1e30, -1e30, 20.0, -20.0, 100.0, -100.0, 1e5, -1e5]
    return np.array(v, dtype=dt)


def neighbourhood(dt, points, k=8):
    out = []
    for p in points:
        for s in (1.0, -1.0):
            c = dt(s * p)
            up, down = [c], [c]
            for _ in range(k):
                up.append(np.nextafter(up[-1], dt(np.inf)))
                down.append(np.nextafter(down[-1], dt(-np.inf)))
            out += up + down
    return np.array(out, dtype=dt)


def sweep(name, dt):
    """Dense inputs: every binade (bit-pattern stride / random bits),
    a dense linspace over the main domain, threshold neighbourhoods and
    special values."""
    rng = np.random.default_rng(12345)
    if dt is np.float32:
        bits = np.arange(0, 2 ** 32, 1021, dtype=np.uint64).astype(np.uint32)
        everywhere = bits.view(np.float32)                       # 4.2M, all binades
        n_lin = 2_000_001
    else:
        everywhere = rng.integers(0, 2 ** 64, 1_500_000, dtype=np.uint64,
                                  endpoint=False).view(np.float64)
        n_lin = 1_000_001
    lo, hi = DOMAINS[name][dt]
    parts = [everywhere, np.linspace(lo, hi, n_lin).astype(dt),
             rng.uniform(lo, hi, n_lin // 2).astype(dt),
             neighbourhood(dt, THRESHOLDS[name][dt]), special_values(dt)]
    if name in ("expm1", "log1p", "tanh", "erf", "sin"):
        parts.append(np.linspace(-1e-3, 1e-3, 200_001).astype(dt))
    if name in ("sin", "cos"):
        big = 1e5 if dt is np.float32 else 1e9
        parts.append(rng.uniform(-big, big, 500_000).astype(dt))
        k = rng.integers(1, 2 ** 40 if dt is np.float64 else 2 ** 20, 200_000)
        near = (k * (np.pi / 2)).astype(dt)                       # near multiples of pi/2
        parts += [near, np.nextafter(near, dt(np.inf)), -near]
    x = np.concatenate(parts).astype(dt)
    if name in ("sin", "cos"):
        x = x[~(np.abs(x) >= TRIG_MAX)]                           # keeps NaN
    return x


# --------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------

def test_function_table(cm):
    assert sorted(cm.FUNCTIONS) == sorted(NAMES)
    for name in NAMES:
        for dt in DTYPES:
            f = cm.FUNCTIONS[name][np.dtype(dt)]
            suffix = "f32" if dt is np.float32 else "f64"
            assert f is getattr(cm, f"{name}_{suffix}")


@pytest.mark.parametrize("dt", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("name", NAMES)
def test_accuracy_vs_numpy(cm, name, dt):
    x = sweep(name, dt)
    got = apply(cm, name, x)
    assert got.dtype == x.dtype
    check_against_numpy(name, x, got)


@pytest.mark.parametrize("dt", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("name", NAMES)
def test_special_values_exact(cm, name, dt):
    """NaN/inf/0/1 results and signed zeros agree bit for bit with NumPy."""
    x = np.concatenate([special_values(dt), np.array([-3.0, -1e-45, 1e-300, 5e5, -7.5], dt)])
    if name in ("sin", "cos"):
        x = x[~(np.abs(x) >= TRIG_MAX)]
    got = apply(cm, name, x)
    ref = reference(name, x)
    exact = np.isnan(ref) | np.isinf(ref) | (ref == 0) | (np.abs(ref) == 1)
    if name == "erf":   # erf(x) = +-1 exactly only far out; near 4 it is 1-ulp territory
        exact &= ~((np.abs(ref) == 1) & (np.abs(x) < 6))
    for xi, g, r in zip(x[exact], got[exact], ref[exact]):
        assert (np.isnan(g) and np.isnan(r)) or (g == r and np.signbit(g) == np.signbit(r)), (
            f"{name}({xi!r}) = {g!r}, NumPy {r!r}")


@pytest.mark.parametrize("dt", DTYPES, ids=["f32", "f64"])
def test_exp_at_and_past_its_underflow_is_numpys(cm, dt):
    """Around and below where exp rounds to 0 (the clamp's lanes are multiplied
    by 0, not underflowed): zeros exact, the last subnormals within the ulp bound."""
    lo = -104.0 if dt is np.float32 else -746.0
    x = np.concatenate([np.linspace(lo - 2, lo + 4, 601), [-1e9, -np.inf, -3e38, lo, np.nextafter(lo, 0)]]).astype(dt)
    got = apply(cm, "exp", x)
    with np.errstate(under="ignore"):
        ref = np.exp(x)
    np.testing.assert_array_equal(got == 0, ref == 0)
    tiny = np.finfo(dt).smallest_subnormal
    assert np.all(np.abs(got.astype(np.float64) - ref) <= 4 * tiny + 4 * np.spacing(ref.astype(np.float64)))


@pytest.mark.parametrize("dt", DTYPES, ids=["f32", "f64"])
def test_named_special_cases(cm, dt):
    inf, nan = dt(np.inf), dt(np.nan)

    def one(name, v):
        return apply(cm, name, np.array([v], dt))[0]

    assert one("exp", 89.0 if dt is np.float32 else 710.0) == inf
    assert one("exp", -inf) == 0 and one("exp", inf) == inf
    assert one("exp", -104.0 if dt is np.float32 else -746.0) == 0
    sub = one("exp", -100.0 if dt is np.float32 else -740.0)     # subnormal result
    assert 0 < sub < np.finfo(dt).tiny
    assert one("log", 0.0) == -inf and one("log", -0.0) == -inf
    assert np.isnan(one("log", -1.0)) and np.isnan(one("log", -inf)) and one("log", inf) == inf
    assert one("log1p", -1.0) == -inf and np.isnan(one("log1p", -1.5))
    tiny = dt(1e-20)
    assert one("expm1", tiny) == tiny and one("log1p", tiny) == tiny
    assert one("expm1", -inf) == -1 and one("expm1", inf) == inf
    for name in ("expm1", "log1p", "tanh", "erf", "sin"):
        z = one(name, -0.0)
        assert z == 0 and np.signbit(z), name
    assert one("tanh", 50.0) == 1 and one("tanh", -50.0) == -1
    assert one("tanh", inf) == 1 and one("tanh", -inf) == -1
    assert one("sigmoid", -inf) == 0 and one("sigmoid", inf) == 1
    assert one("sigmoid", -1e30) == 0 and one("sigmoid", 1e30) == 1
    assert one("erf", inf) == 1 and one("erf", -inf) == -1
    for name in ("sin", "cos"):
        assert np.isnan(one(name, inf)) and np.isnan(one(name, -inf)) and np.isnan(one(name, nan))
    for name in NAMES:
        assert np.isnan(one(name, nan)), name


@pytest.mark.parametrize("dt", DTYPES, ids=["f32", "f64"])
def test_trig_huge_arguments(cm, dt):
    """Within the documented bound sin/cos stay accurate; beyond it they
    return NaN instead of an unreduced value."""
    inside = np.array([1e5, -1e5, 12345.678, 2.0 ** 30 + 1, 2.0 ** 47 * 1.5, 2.0 ** 47.9,
                       *(([1e9, -1e9, 123456789.123, 1e14]) if dt is np.float64 else [])], dt)
    outside = np.array([2.0 ** 48, -2.0 ** 48, 1e20, -1e30, np.finfo(dt).max], dt)
    for name in ("sin", "cos"):
        check_against_numpy(name, inside, apply(cm, name, inside))
        assert np.isnan(apply(cm, name, outside)).all()


def _host_has_avx2():
    try:
        from llvmlite import binding as llvm
        return "+avx2" in llvm.get_host_cpu_features().flatten()
    except Exception:
        return False


LIBM = r"(exp|expf|expm1|expm1f|log|logf|log1p|log1pf|tanh|tanhf|erf|erff|sin|sinf|cos|cosf|sincos|sincosf)"


@pytest.mark.skipif(not _host_has_avx2(), reason="needs an AVX2 host")
@pytest.mark.parametrize("name,dt", [
    ("exp", np.float32), ("tanh", np.float64), ("log", np.float32), ("erf", np.float32),
    ("exp", np.float64), ("log1p", np.float64), ("erf", np.float64), ("sin", np.float64),
    ("sigmoid", np.float32), ("cos", np.float32),
])
def test_loop_vectorizes(cm, name, dt):
    k = kernel_for(cm, name, dt)
    asm = k.inspect_asm(k.signatures[0])
    # sin/cos float32 work in float64 internally
    suffix = "pd" if (dt is np.float64 or name in ("sin", "cos")) else "ps"
    packed = re.findall(r"\bv(?:fn?m(?:add|sub)\d{3}|mul|add|sub|div)%s\s[^\n]*%%[yz]mm" % suffix, asm)
    assert len(packed) >= 8, f"{name}/{np.dtype(dt)}: only {len(packed)} packed ymm/zmm ops"
    calls = re.findall(r"^\s*call\w*\s+([^\n]*)$", asm, flags=re.M)
    libm = [c for c in calls if re.search(r"\b%s(@PLT)?\b" % LIBM, c)]
    assert not libm, f"libm calls in kernel: {libm}"
    helpers = [c for c in calls if "cpu_math" in c]
    assert not helpers, f"helper not inlined: {helpers}"


_CACHE_SCRIPT = textwrap.dedent('''
    import numpy as np, numba
    from braze.targets.cpu_math import exp_f32, tanh_f64

    @numba.njit(parallel=True, fastmath={"reassoc", "contract", "nsz"},
                error_model="numpy", cache=True)
    def axpy_exp(a, b, c, d, out):
        for i in numba.prange(a.shape[0]):
            out[i] = a[i] * b[i] + c[i] * exp_f32(-d[i])

    @numba.njit(fastmath={"reassoc", "contract", "nsz"}, error_model="numpy", cache=True)
    def tanh_loop(x, out):
        for i in range(x.shape[0]):
            out[i] = tanh_f64(x[i])

    rng = np.random.default_rng(0)
    a, b, c, d = (rng.standard_normal(1000).astype(np.float32) for _ in range(4))
    out = np.empty_like(a)
    axpy_exp(a, b, c, d, out)
    ref = a * b + c * np.exp(-d)
    assert np.allclose(out, ref, rtol=1e-5, atol=1e-6), np.abs(out - ref).max()
    x = np.linspace(-5, 5, 1001)
    t = np.empty_like(x)
    tanh_loop(x, t)
    assert np.allclose(t, np.tanh(x), rtol=1e-14, atol=0)
    hits = sum(axpy_exp.stats.cache_hits.values()) + sum(tanh_loop.stats.cache_hits.values())
    print("HITS", hits)
''')


def test_kernels_using_helpers_are_cacheable(tmp_path):
    """A cache=True kernel calling the helpers is written to and loaded from
    the on-disk cache (two fresh interpreters)."""
    script = tmp_path / "cached_kernels.py"
    script.write_text(_CACHE_SCRIPT)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    hits = []
    for _ in range(2):
        p = subprocess.run([sys.executable, str(script)], env=env, cwd=str(tmp_path),
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        hits.append(int(re.search(r"HITS (\d+)", p.stdout).group(1)))
    assert hits == [0, 2]


def test_direct_scalar_calls(cm):
    assert cm.exp_f32(1.0) == np.float32(np.e)
    assert isinstance(cm.exp_f32(1.0), float)
    assert abs(cm.log_f64(10.0) - math.log(10.0)) <= 2 * np.spacing(math.log(10.0))


@pytest.mark.skipif(not _host_has_avx2(), reason="needs an AVX2 host")
@pytest.mark.parametrize("dt", DTYPES, ids=["f32", "f64"])
def test_exp_loop_is_short(cm, dt):
    """Throughput guard: the vectorized body of ``out[i] = exp(x[i])`` has 18
    (f32) / 23 (f64) packed float ops with this LLVM, and two more since the
    lanes at the clamp are multiplied by 0 (their underflow to 0 cost a
    microcode assist per element); the previous two-factor scaling version had
    24 / 29."""
    k = kernel_for(cm, "exp", dt)
    asm = k.inspect_asm(k.signatures[0])
    suffix = "ps" if dt is np.float32 else "pd"
    blocks = re.split(r"\n(?=\.LBB\d+_\d+:)", asm)
    counts = [len(re.findall(r"\tv\w+%s\s[^\n]*%%[yz]mm" % suffix, b)) for b in blocks]
    body = max(counts)
    assert 8 <= body <= (23 if dt is np.float32 else 28), body
