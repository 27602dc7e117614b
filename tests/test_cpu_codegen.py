"""Generated CPU kernels: the scalar-code table is complete, the source is
shape-generic, and hot loops vectorize (packed SIMD instructions in the asm)."""
import re

import numpy as np
import pytest

import braze
from braze.targets import cpu_cache, scalar

AVX2 = "avx2" in open("/proc/cpuinfo").read() if __import__("os").path.exists("/proc/cpuinfo") else False


def test_every_elementwise_op_has_scalar_code():
    assert scalar.missing() == []


def test_source_does_not_depend_on_sizes():
    f = braze.compile(lambda x: np.exp(x - x.max(-1, keepdims=True)) / 3.0, target="cpu")
    a = f.lower(np.ones((8, 16), np.float32)).source
    b = f.lower(np.ones((100, 700), np.float32)).source
    assert a == b
    assert "16" not in a.split("def kernel(")[1] and "700" not in b


def packed(fn):
    """Counts of packed AVX instructions and libm calls in a freshly compiled kernel."""
    (sig,) = fn.signatures
    asm = fn.inspect_asm(sig)
    return len(re.findall(r"\bv\w+p[sd]\s+[^\n]*%[yz]mm", asm)), re.findall(r"call\w*\s+[^\n]*(?:exp|log|tanh|sin|cos)f?\b", asm)


@pytest.mark.skipif(not AVX2, reason="needs a CPU with AVX2 (x86-64) to look for packed instructions")
@pytest.mark.parametrize("name,fn,shape", [
    ("A", lambda a, b, c, d: a * b + c * np.exp(-d), [(4096,)] * 4),
    ("softmax", lambda x: np.exp(x - x.max(-1, keepdims=True)) / np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True), [(64, 256)]),
    ("gelu", lambda x: 0.5 * x * (1 + np.tanh(0.79788456 * (x + 0.044715 * x ** 3))), [(4096,)]),
    ("layer_norm", lambda x: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5), [(64, 256)]),
    ("trig", lambda x: np.sin(x) * np.cos(2.0 * x), [(4096,)]),
])
def test_hot_loops_vectorize(tmp_path, monkeypatch, name, fn, shape):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path))  # numba only shows asm of fresh code
    monkeypatch.setattr(cpu_cache, "_loaded", {})  # (and kernels loaded by earlier tests are not fresh)
    monkeypatch.setattr(cpu_cache, "_modules", {})
    args = [np.random.default_rng(0).standard_normal(s).astype(np.float32) for s in shape]
    braze.compile(fn, target="cpu")(*args)
    (kernel,) = [k for (_, n), k in list(cpu_cache._loaded.items())
                 if n == "kernel_serial" and str(tmp_path) in k.py_func.__code__.co_filename]
    count, calls = packed(kernel)
    assert count >= 16, f"{name}: only {count} packed ymm/zmm instructions"
    assert not calls, f"{name}: libm calls in the kernel: {calls}"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sin_cos_of_huge_arguments_match_numpy(dtype):
    """The vector sin/cos reduce |x| < 2**48; beyond it the loop reruns with libm."""
    x = np.array([0.5, -3.0, 1e30 if dtype == "float32" else 1e300, 2.0 ** 50, 2.0 ** 47, np.nan, -np.inf, 7.0], dtype)
    f = braze.compile(lambda x: (np.sin(x), np.cos(x) * 2.0), target="cpu")
    with np.errstate(invalid="ignore"):
        got, want = f(x), (np.sin(x), np.cos(x) * 2.0)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-6 if dtype == "float32" else 1e-14, equal_nan=True)
    src = f.lower(x).source
    assert f"vm.sin_{'f32' if dtype == 'float32' else 'f64'}" in src and "def kernel_exact(" in src

def test_huge_sin_argument_beside_a_parallel_reduction_reruns_with_libm():
    """A reduction's chunked prange loop kept its large-argument flag in the
    variable the code before the loop had set, and numba does not reduce such
    a flag: sin(1e20) of a 0-d input, computed before the loop, came out NaN."""
    def f(x, s):
        return np.sum(np.sin(x)) + np.sin(s), np.sum(x * np.cos(s))

    x = np.linspace(0.0, 3.0, 300_000)
    for s in (np.float64(1e20), np.array(-3e19), np.array(0.5)):
        got, want = braze.compile(f, target="cpu")(x, s), f(x, s)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12)



def test_loops_over_size_one_dimensions_compile_quickly():
    """Found by the gradient fuzzer: over size-1 dimensions only, every load
    was a broadcast (index 0), so the whole chain exp -> tanh -> cos was
    loop-invariant and LLVM's loop unswitching ran for minutes. Run in a
    subprocess so a regression fails instead of hanging the suite."""
    import subprocess
    import sys

    code = (
        "import numpy as np, braze\n"
        "def prog(x):\n"
        "    return np.sin(np.tanh(np.exp(0.5 * x))).sum()\n"
        "x = np.array([1.2018206972429577])\n"
        "g = braze.compile(braze.grad(prog), target='cpu')(x)\n"
        "t = np.tanh(np.exp(0.5 * x))\n"
        "want = np.cos(t) * (1 - t * t) * np.exp(0.5 * x) * 0.5\n"
        "assert np.allclose(g, want), (g, want)\n"
        "y = braze.compile(lambda x: np.cos(np.tanh(np.exp(x))), target='cpu')(np.full((1, 1, 1), 0.3))\n"
        "assert np.allclose(y, np.cos(np.tanh(np.exp(0.3))))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32, np.uint8])
def test_a_min_beside_the_argmin_of_the_same_values_is_its_kept_value(dtype):
    """``d.argmin(1)`` and ``d.min(1)`` in one kernel: the min keeps no state of
    its own (reductions.ValueOfArg) and is NumPy's: NaN in a row with one,
    ties, infinities; a max before its argmax, or a min over other axes, keeps its own."""
    def fn(x):
        d = x * x - x
        return d.argmin(1), d.min(1), d.max(1), d.argmax(1), d.min(0), x.argmin(axis=None), x.min()

    rng = np.random.default_rng(4)
    x = (rng.standard_normal((40, 7)) * 3).astype(dtype)
    if np.dtype(dtype).kind == "f":
        x[3, 2], x[5, 0], x[5, 6], x[7, 4], x[8] = np.nan, np.inf, np.nan, -np.inf, 1.0  # (row 8: all ties)
    for g, w in zip(braze.compile(fn, target="cpu")(x), fn(x)):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    pair = braze.compile(lambda x: ((x * x - x).argmin(1), (x * x - x).min(1)), target="cpu")
    source = pair.lower(x).source
    assert "acc1" not in source and "fkey" not in source  # (one accumulator: the argmin's)


def _run_lines(lines, **env):
    """Execute generated body lines (plain Python, np in scope) and return the
    names they bound."""
    scope = {"np": np, **env}
    exec("\n".join(line[4:] for line in lines), scope)
    return scope


def test_index_casts_are_hoisted_to_where_the_index_is_bound():
    from braze.targets.cpu_codegen import hoist_index_casts

    lines = ["    for o in range(2):",
             "        i0 = o",
             "        for j0 in range(3):",
             "            out[np.uint64(i0), np.uint64(j0)] = a[np.uint64(i0), np.uint64(j0)] + 1"]
    got = hoist_index_casts(lines)
    text = "\n".join(got)
    assert text.count("np.uint64(") == 2 and "u_i0 = np.uint64(i0)" in text and "u_j0 = np.uint64(j0)" in text
    a = np.arange(6.0).reshape(2, 3)
    assert np.array_equal(_run_lines(got, a=a, out=np.zeros_like(a))["out"], a + 1)


def test_index_casts_stay_where_the_index_is_bound_again_in_a_nested_block():
    """An index rebound inside a loop or an if (an argmax's NaN rescan, a
    while loop stepping it): a use before that binding may run after it, so
    its casts stay inline; rebound at the scope's own indent, a new scope."""
    from braze.targets.cpu_codegen import hoist_index_casts

    lines = ["    k = 0",
             "    total = 0.0",
             "    while k < 4:",
             "        total += a[np.uint64(k)]",
             "        k += 1",
             "    j0 = 1",
             "    first = a[np.uint64(j0)]",
             "    j0 = 2",
             "    second = a[np.uint64(j0)]",
             "    for j0 in range(3, 4):",
             "        third = a[np.uint64(j0)]"]
    got = hoist_index_casts(lines)
    text = "\n".join(got)
    assert "total += a[np.uint64(k)]" in text  # (k is stepped inside the while loop)
    assert "first = a[u_j0]" in text and "second = a[u_j0]" in text and "third = a[u_j0]" in text
    env = _run_lines(got, a=np.array([1.0, 2.0, 4.0, 8.0]))
    assert (env["total"], env["first"], env["second"], env["third"]) == (15.0, 2.0, 4.0, 8.0)

    nested = ["    j0 = 0",
              "    x = a[np.uint64(j0)]",
              "    if flag:",
              "        for j0 in range(2):",
              "            y = a[np.uint64(j0)]",
              "    z = a[np.uint64(j0)]"]
    got = hoist_index_casts(nested)
    assert "x = a[np.uint64(j0)]" in "\n".join(got) and "z = a[np.uint64(j0)]" in "\n".join(got)
    env = _run_lines(got, a=np.array([1.0, 2.0]), flag=True)
    assert (env["x"], env["y"], env["z"]) == (1.0, 2.0, 2.0)


def shifted_argmaxes(x):
    return tuple(np.argmax(x[k:]) + k for k in range(10))


def wrapped_steps(x):
    return tuple(x * 3 + k for k in range(0, 120, 15))


def remainders(x):
    return tuple(x % k + x // k for k in (1, 3, 7, -2))


def test_kernels_that_differ_only_in_integer_constants_compile_once():
    """An unrolled loop's ``argmax(x[k:]) + k``: the constants are kernel
    arguments, as float ones are, so ten iterations are one kernel; an integer
    divisor stays a literal (LLVM divides by multiplying)."""
    rng = np.random.default_rng(3)
    x = rng.integers(-50, 50, 40)
    f = braze.compile(shifted_argmaxes, target="cpu")
    assert f(x) == shifted_argmaxes(x)
    assert f.lower(x).counts["distinct kernels"] <= 2, f.lower(x).counts
    for dtype in (np.int8, np.uint8, np.int32, np.uint64):
        y = rng.integers(0, 100, 33).astype(dtype)
        g = braze.compile(wrapped_steps, target="cpu")
        for got, want in zip(g(y), wrapped_steps(y)):  # (int8 and uint8 wrap, as NumPy's)
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
    z = np.array([-7, -1, 0, 1, 5, 22, np.iinfo(np.int64).min, np.iinfo(np.int64).max])
    h = braze.compile(remainders, target="cpu")
    with np.errstate(all="ignore"):
        for got, want in zip(h(z), remainders(z)):
            np.testing.assert_array_equal(got, want)
